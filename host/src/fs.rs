//! Probing, formatting (only when empty), growing, and usage statistics.

use std::path::Path;
use std::process::Command;

use volplane_core::driver::VolumeUsage;

use crate::mounts::Device;
use crate::{Host, HostError, Result};

/// What `format_if_empty` found or did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Formatted {
    /// The device was empty and now holds a new filesystem of this type.
    Created(String),
    /// The device already held this filesystem; it was left alone.
    Existing(String),
}

fn run(cmd: &mut Command) -> Result<std::process::Output> {
    let shown = format!("{cmd:?}").replace('"', "");
    dies_with_this_process(cmd);
    cmd.output().map_err(|e| HostError::Command {
        command: shown,
        status: "could not start".into(),
        stderr: e.to_string(),
    })
}

/// The tool is killed when the thread that started it dies: a driver
/// killed while `mkfs` runs must not leave it holding the device for its
/// successor (which would find the device "apparently in use"). The thread
/// waits for the tool, so it dies only with the process.
fn dies_with_this_process(cmd: &mut Command) {
    use rustix::process::{Signal, set_parent_process_death_signal};
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec; it makes
    // one prctl(2) call, which is async-signal-safe, and touches nothing of
    // the parent's memory.
    unsafe {
        cmd.pre_exec(|| {
            set_parent_process_death_signal(Some(Signal::KILL)).map_err(std::io::Error::from)
        });
    }
}

fn check(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}").replace('"', "");
    let out = run(cmd)?;
    if out.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        Err(failed(shown, out.status.to_string(), stderr))
    }
}

/// A tool's failure; one that says the device is held elsewhere for now
/// (mkfs's "apparently in use by the system", EBUSY) is [`HostError::Busy`].
fn failed(command: String, status: String, stderr: String) -> HostError {
    let held = ["apparently in use", "Device or resource busy", "is in use"];
    if held.iter().any(|h| stderr.contains(h)) {
        return HostError::Busy(format!(
            "{command} failed ({status}): {stderr}; the device is held by another process for now (retry)"
        ));
    }
    HostError::Command {
        command,
        status,
        stderr,
    }
}

/// True when the tools to make `fs_type` are installed.
pub fn supported(fs_type: &str) -> bool {
    let tool = format!("mkfs.{fs_type}");
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|p| p.join(&tool).exists()))
        .unwrap_or(false)
        || ["/sbin", "/usr/sbin"]
            .iter()
            .any(|d| Path::new(d).join(&tool).exists())
}

impl Host {
    /// The filesystem (or other signature) on `device`, if any, from a
    /// low-level `blkid` probe. Any probe failure is an error, never "empty".
    pub fn probe(&self, device: &Device) -> Result<Option<String>> {
        let device = device.path();
        let out = run(Command::new("blkid")
            .args(["-p", "-o", "export"])
            .arg(device))?;
        match out.status.code() {
            Some(0) => {
                let text = String::from_utf8_lossy(&out.stdout);
                let kind = text
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("TYPE=")
                            .or_else(|| l.strip_prefix("PTTYPE="))
                    })
                    .unwrap_or("unknown signature");
                Ok(Some(kind.to_string()))
            }
            Some(2) => Ok(None),
            _ => Err(HostError::Command {
                command: format!("blkid -p -o export {}", device.display()),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            }),
        }
    }

    /// Formats `device` with `fs_type` only when a probe finds nothing on it.
    /// A device that holds a filesystem (or a partition table, or anything
    /// blkid recognises) is never formatted.
    pub fn format_if_empty(&self, dev: &Device, fs_type: &str) -> Result<Formatted> {
        if let Some(existing) = self.probe(dev)? {
            return Ok(Formatted::Existing(existing));
        }
        let device = dev.path();
        match fs_type {
            "ext4" | "ext3" | "ext2" => check(
                Command::new(format!("mkfs.{fs_type}"))
                    .args(["-q", "-E", "lazy_itable_init=1,lazy_journal_init=1"])
                    .arg(device),
            )?,
            "xfs" if supported("xfs") => check(Command::new("mkfs.xfs").arg("-q").arg(device))?,
            other => {
                return Err(HostError::Refused(format!(
                    "filesystem type {other:?} is not supported here (ext4, ext3, ext2{} are)",
                    if supported("xfs") { ", xfs" } else { "" }
                )));
            }
        }
        Ok(Formatted::Created(fs_type.to_string()))
    }

    /// Grows the filesystem on `device`, mounted at `mount_point`, to fill
    /// the device (online).
    pub fn grow(&self, dev: &Device, mount_point: impl AsRef<Path>) -> Result<()> {
        let device = dev.path();
        let mount_point = self.confine(mount_point)?;
        match self.probe(dev)?.as_deref() {
            Some("ext4" | "ext3" | "ext2") => match check(Command::new("resize2fs").arg(device)) {
                Err(HostError::Command { stderr, .. }) if stderr.contains("Permission denied") => {
                    Err(HostError::Refused(format!(
                        "the kernel refused to grow the mounted filesystem on {} (online ext4 resize needs CAP_SYS_RESOURCE); \
                         it grows when the volume is next staged",
                        device.display()
                    )))
                }
                r => r,
            },
            Some("xfs") => check(Command::new("xfs_growfs").arg(&mount_point)),
            Some(other) => Err(HostError::Refused(format!(
                "cannot grow a {other} filesystem on {}",
                device.display()
            ))),
            None => Err(HostError::Refused(format!(
                "{} holds no filesystem to grow",
                device.display()
            ))),
        }
    }

    /// Size in bytes of the ext2/3/4 filesystem on `device`, if it is one.
    pub fn ext_size(&self, dev: &Device) -> Result<Option<u64>> {
        let device = dev.path();
        let out = run(Command::new("dumpe2fs").arg("-h").arg(device))?;
        if !out.status.success() {
            return Ok(None);
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        Ok(field("Block count:")
            .zip(field("Block size:"))
            .map(|(n, b)| n * b))
    }

    /// Grows an unmounted ext2/3/4 filesystem to fill its device when the
    /// device is bigger (after a volume expansion); returns whether it grew.
    /// Checks the filesystem first, as resize2fs requires.
    pub fn grow_unmounted(&self, dev: &Device) -> Result<bool> {
        let Some(fs) = self.ext_size(dev)? else {
            return Ok(false);
        };
        let device = dev.path();
        if fs >= crate::loopdev::device_size(dev)? {
            return Ok(false);
        }
        let out = run(Command::new("e2fsck").args(["-f", "-p"]).arg(device))?;
        if !matches!(out.status.code(), Some(0 | 1)) {
            return Err(HostError::Command {
                command: format!("e2fsck -f -p {}", device.display()),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        check(Command::new("resize2fs").arg(device))?;
        Ok(true)
    }

    /// Usage of the filesystem holding `path` (resolved beneath a root).
    /// A root itself may be asked about too (free space for GetCapacity).
    pub fn usage(&self, path: impl AsRef<Path>) -> Result<VolumeUsage> {
        let path = path.as_ref();
        let s = match self.root_fd(path) {
            Some(fd) => rustix::fs::fstatvfs(fd),
            None => rustix::fs::fstatvfs(self.open(path)?.fd()),
        }
        .map_err(|e| HostError::io("statvfs", path, e.into()))?;
        let frag = s.f_frsize.max(1);
        Ok(VolumeUsage {
            total_bytes: s.f_blocks * frag,
            used_bytes: (s.f_blocks - s.f_bfree.min(s.f_blocks)) * frag,
            available_bytes: s.f_bavail * frag,
            total_inodes: s.f_files,
            used_inodes: s.f_files - s.f_ffree.min(s.f_files),
            available_inodes: s.f_favail,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// In the child this test starts again: run a tool that would outlive
    /// it (`sleep`), and say its pid's parent on stdout first.
    const CHILD: &str = "VOLPLANE_HOST_TOOL_CHILD";

    /// The pids of the `sleep` processes whose parent is `parent`.
    fn sleeps_of(parent: u32) -> Vec<u32> {
        let mut found = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            // pid (comm) state ppid …
            let Some((comm, rest)) = stat.split_once(") ") else {
                continue;
            };
            let ppid = rest.split(' ').nth(1).and_then(|p| p.parse::<u32>().ok());
            if comm.ends_with("(sleep") && ppid == Some(parent) {
                found.push(pid);
            }
        }
        found
    }

    #[test]
    fn a_device_held_elsewhere_is_busy_not_a_failure() {
        let e = failed(
            "mkfs.ext4 /dev/loop3".into(),
            "exit status: 1".into(),
            "/dev/loop3 is apparently in use by the system; will not make a filesystem here!"
                .into(),
        );
        assert!(matches!(e, HostError::Busy(_)), "{e:?}");
        let e = failed(
            "mkfs.ext4 /dev/loop3".into(),
            "exit status: 1".into(),
            "bad".into(),
        );
        assert!(matches!(e, HostError::Command { .. }), "{e:?}");
    }

    #[test]
    fn a_tool_dies_with_the_process_that_started_it() {
        if std::env::var_os(CHILD).is_some() {
            // The tool blocks this thread, as mkfs blocks the driver's.
            let _ = run(Command::new("sleep").arg("60"));
            return;
        }
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "fs::tests::a_tool_dies_with_the_process_that_started_it",
            ])
            .env(CHILD, "1")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let tool = loop {
            if let Some(pid) = sleeps_of(child.id()).first() {
                break *pid;
            }
            assert!(Instant::now() < deadline, "the tool never started");
            std::thread::sleep(Duration::from_millis(20));
        };
        child.kill().unwrap(); // SIGKILL, as a crash would
        child.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::path::Path::new(&format!("/proc/{tool}")).exists() {
            let state = std::fs::read_to_string(format!("/proc/{tool}/stat")).unwrap_or_default();
            if state.contains(") Z ") {
                break; // dead, waiting for its new parent to reap it
            }
            assert!(
                Instant::now() < deadline,
                "the tool (pid {tool}) outlived the process that started it"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
