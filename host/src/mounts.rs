//! mount(2), bind mounts, read-only remounts, unmounts and mountinfo.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{FileType, OFlags};
use rustix::mount::{MountFlags, UnmountFlags};
use volplane_core::mountinfo::{self, MountEntry};

use crate::{Host, HostError, Opened, Result, Stat};

/// Splits CSI mount flags into mount(2) flags and filesystem data options.
fn split_flags(flags: &[String], readonly: bool) -> (MountFlags, String) {
    let mut bits = MountFlags::empty();
    let mut data = Vec::new();
    for f in flags {
        match f.as_str() {
            "ro" => bits |= MountFlags::RDONLY,
            "rw" | "defaults" => {}
            "nosuid" => bits |= MountFlags::NOSUID,
            "nodev" => bits |= MountFlags::NODEV,
            "noexec" => bits |= MountFlags::NOEXEC,
            "noatime" => bits |= MountFlags::NOATIME,
            "nodiratime" => bits |= MountFlags::NODIRATIME,
            "relatime" => bits |= MountFlags::RELATIME,
            "sync" => bits |= MountFlags::SYNCHRONOUS,
            "dirsync" => bits |= MountFlags::DIRSYNC,
            other => data.push(other),
        }
    }
    if readonly {
        bits |= MountFlags::RDONLY;
    }
    (bits, data.join(","))
}

/// What a mount must come from for it to be the caller's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// A filesystem on this block device, or a bind of its device node.
    Device(u64),
    /// A bind mount of this directory or file (device and inode).
    File {
        /// The device holding the file.
        dev: u64,
        /// Its inode.
        ino: u64,
    },
}

impl Identity {
    /// The identity of a mount source, from its statx.
    pub fn of(source: &Stat) -> Identity {
        if source.kind == FileType::BlockDevice {
            Identity::Device(source.rdev)
        } else {
            Identity::File {
                dev: source.dev,
                ino: source.ino,
            }
        }
    }

    /// True when `mounted` (the root of a mount) comes from this source.
    pub fn matches(&self, mounted: &Stat) -> bool {
        match *self {
            Identity::Device(rdev) => {
                mounted.dev == rdev
                    || (mounted.kind == FileType::BlockDevice && mounted.rdev == rdev)
            }
            Identity::File { dev, ino } => mounted.dev == dev && mounted.ino == ino,
        }
    }
}

/// A block device, checked and held open (O_PATH).
#[derive(Debug)]
pub struct Device {
    path: PathBuf,
    fd: OwnedFd,
    rdev: u64,
}

impl Device {
    /// The device's path (/dev/…).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What identifies it, whatever path names it.
    pub fn identity(&self) -> Identity {
        Identity::Device(self.rdev)
    }

    /// Opens the device again for I/O.
    pub fn reopen(&self, flags: OFlags) -> Result<std::fs::File> {
        rustix::fs::open(
            crate::beneath::proc_path(self.fd.as_fd()),
            flags | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map(std::fs::File::from)
        .map_err(|e| HostError::io("open", &self.path, e.into()))
    }
}

/// Refuses to mount onto a directory that holds anything: what is there
/// would be hidden, and is not the driver's.
fn check_empty_dir(target: &Opened) -> Result<()> {
    let dir = target.reopen(OFlags::RDONLY | OFlags::DIRECTORY)?;
    let mut entries = rustix::fs::Dir::read_from(&dir)
        .map_err(|e| HostError::io("read directory", target.path(), e.into()))?;
    let busy = entries.any(|e| {
        e.map(|e| !matches!(e.file_name().to_bytes(), b"." | b".."))
            .unwrap_or(true)
    });
    if busy {
        return Err(HostError::Refused(format!(
            "{} is not empty; volplane mounts only onto an empty directory, so nothing there is hidden",
            target.path().display()
        )));
    }
    Ok(())
}

/// Checks a mount target before anything is mounted there: `Ok(true)` when
/// `source` is already mounted there (nothing to do), `Ok(false)` when it is
/// free, refused when something else is mounted there or it holds files.
pub fn check_target(target: &Opened, source: Identity) -> Result<bool> {
    let st = target.stat()?;
    if st.mount_root {
        if source.matches(&st) {
            return Ok(true);
        }
        return Err(HostError::Refused(format!(
            "{} is already a mount point of something that is not this volume; volplane never mounts over it",
            target.path().display()
        )));
    }
    if st.kind == FileType::Directory {
        check_empty_dir(target)?;
    }
    Ok(false)
}

impl Host {
    /// The mounts of this process's mount namespace.
    pub fn mountinfo(&self) -> Result<Vec<MountEntry>> {
        let p = Path::new("/proc/self/mountinfo");
        let text = std::fs::read_to_string(p).map_err(|e| HostError::io("read", p, e))?;
        mountinfo::parse(&text).map_err(|e| HostError::Refused(e.to_string()))
    }

    /// The mounts, with mount points below a root shown as requests name
    /// them (a symlinked root as configured, not as resolved).
    pub fn mounts_as_configured(&self) -> Result<Vec<MountEntry>> {
        let mut mounts = self.mountinfo()?;
        for m in &mut mounts {
            if let Some(p) = self
                .roots
                .iter()
                .find_map(|r| r.as_configured(&m.mount_point))
            {
                m.mount_point = p;
            }
        }
        Ok(mounts)
    }

    /// Opens block device `path` (under /dev, not through a link at its
    /// last component). Whether it holds a volume is the caller's to prove.
    pub fn device(&self, path: impl AsRef<Path>) -> Result<Device> {
        let path = path.as_ref();
        let lexical = volplane_core::path::absolute("device", &path.display().to_string())
            .map_err(|e| HostError::Refused(e.message))?;
        if !volplane_core::path::is_under(&lexical, "/dev") || lexical == "/dev" {
            return Err(HostError::Refused(format!(
                "{} is not a device under /dev",
                path.display()
            )));
        }
        let fd = rustix::fs::open(
            &lexical,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_err(|e| HostError::resolve("open", path, e))?;
        let st = crate::beneath::stat(fd.as_fd(), path)?;
        if st.kind != FileType::BlockDevice {
            return Err(HostError::Refused(format!(
                "{} is not a block device",
                path.display()
            )));
        }
        Ok(Device {
            path: PathBuf::from(lexical),
            fd,
            rdev: st.rdev,
        })
    }

    /// Mounts filesystem `fs_type` from `device` at `target` (created if
    /// missing). Mounting again what is already mounted there is a no-op;
    /// anything else mounted there, or files in the way, are refused.
    pub fn mount(
        &self,
        device: &Device,
        target: impl AsRef<Path>,
        fs_type: &str,
        flags: &[String],
        readonly: bool,
    ) -> Result<()> {
        let target = self.create_dir(target)?;
        if check_target(&target, device.identity())? {
            return Ok(());
        }
        let (bits, data) = split_flags(flags, readonly);
        let data = std::ffi::CString::new(data)
            .map_err(|_| HostError::Refused("mount options contain a NUL byte".into()))?;
        rustix::mount::mount(
            device.path(),
            target.proc_path(),
            fs_type,
            bits,
            Some(data.as_c_str()),
        )
        .map_err(|e| HostError::io("mount", target.path(), e.into()))?;
        // The device was named by path: make sure what got mounted is it.
        let now = self.open(target.path())?;
        if !device.identity().matches(&now.stat()?) {
            let _ = self.unmount(target.path(), None);
            return Err(HostError::Refused(format!(
                "{} changed while it was being mounted at {}; unmounted again",
                device.path().display(),
                target.path().display()
            )));
        }
        Ok(())
    }

    /// Bind-mounts `source` at `target` (created as a directory, or as a
    /// file when `source` is not a directory), read-only when asked.
    /// Repeating an existing bind is a no-op; anything else mounted there,
    /// or files in the way, are refused.
    pub fn bind(&self, source: &Opened, target: impl AsRef<Path>, readonly: bool) -> Result<()> {
        self.bind_fd(source.fd(), &source.stat()?, target.as_ref(), readonly)
    }

    /// Bind-mounts block device `device` at the file `target`.
    pub fn bind_device(
        &self,
        device: &Device,
        target: impl AsRef<Path>,
        readonly: bool,
    ) -> Result<()> {
        let st = crate::beneath::stat(device.fd.as_fd(), device.path())?;
        self.bind_fd(device.fd.as_fd(), &st, target.as_ref(), readonly)
    }

    fn bind_fd(
        &self,
        source: BorrowedFd<'_>,
        st: &Stat,
        target: &Path,
        readonly: bool,
    ) -> Result<()> {
        let target = if st.kind == FileType::Directory {
            self.create_dir(target)?
        } else {
            self.create_file(target)?
        };
        if check_target(&target, Identity::of(st))? {
            return Ok(());
        }
        rustix::mount::mount_bind(crate::beneath::proc_path(source), target.proc_path())
            .map_err(|e| HostError::io("bind mount", target.path(), e.into()))?;
        if readonly {
            let mounted = self.open(target.path())?;
            if let Err(e) = rustix::mount::mount_remount(
                mounted.proc_path(),
                MountFlags::BIND | MountFlags::RDONLY,
                "",
            ) {
                drop(mounted);
                let _ = self.unmount(target.path(), None);
                return Err(HostError::io("remount read-only", target.path(), e.into()));
            }
        }
        Ok(())
    }

    /// Unmounts what is mounted at `target`, every layer, as long as each
    /// comes from `expected` (any source when `None`); nothing mounted is
    /// fine. A mount from anything else is refused and left in place.
    pub fn unmount(&self, target: impl AsRef<Path>, expected: Option<Identity>) -> Result<()> {
        let target = target.as_ref();
        let (parent, name) = match self.parent(target, false) {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        // Unmount through the parent's descriptor: a descriptor of the
        // mount itself would keep it busy.
        let through = crate::beneath::proc_child(parent.fd(), &name);
        for _ in 0..64 {
            let Some(held) = self.open_existing(target)? else {
                return Ok(());
            };
            let st = held.stat()?;
            drop(held);
            if !st.mount_root {
                return Ok(());
            }
            if let Some(want) = expected
                && !want.matches(&st)
            {
                return Err(HostError::Refused(format!(
                    "{} holds a mount that is not this volume's; volplane leaves it alone",
                    target.display()
                )));
            }
            rustix::mount::unmount(&through, UnmountFlags::NOFOLLOW)
                .map_err(|e| HostError::io("unmount", target, e.into()))?;
        }
        Err(HostError::Refused(format!(
            "{} still has mounts stacked on it after 64 unmounts",
            target.display()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_split_into_bits_and_data() {
        let (bits, data) = split_flags(&["noatime".into(), "discard".into(), "ro".into()], false);
        assert!(bits.contains(MountFlags::NOATIME | MountFlags::RDONLY));
        assert_eq!(data, "discard");
        let (bits, _) = split_flags(&[], true);
        assert!(bits.contains(MountFlags::RDONLY));
    }
}
