//! Crash-safe state files: write a temporary file, fsync it, rename it over
//! the old one, fsync the directory. A reader sees the old state or the new
//! one, never a torn write.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::{HostError, Result};

/// A state file at a fixed path.
#[derive(Debug, Clone)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    /// The state file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> StateFile {
        StateFile { path: path.into() }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file's bytes, or `None` when there is no state yet.
    pub fn load(&self) -> Result<Option<Vec<u8>>> {
        match std::fs::read(&self.path) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(HostError::io("read state", &self.path, e)),
        }
    }

    /// Replaces the file's contents atomically and durably.
    pub fn store(&self, bytes: &[u8]) -> Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("/"));
        std::fs::create_dir_all(dir)
            .map_err(|e| HostError::io("create state directory", dir, e))?;
        let tmp = self.path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp).map_err(|e| HostError::io("create", &tmp, e))?;
        f.write_all(bytes)
            .map_err(|e| HostError::io("write", &tmp, e))?;
        f.sync_all().map_err(|e| HostError::io("fsync", &tmp, e))?;
        drop(f);
        std::fs::rename(&tmp, &self.path).map_err(|e| HostError::io("rename", &self.path, e))?;
        let d = std::fs::File::open(dir).map_err(|e| HostError::io("open", dir, e))?;
        d.sync_all().map_err(|e| HostError::io("fsync", dir, e))?;
        Ok(())
    }
}

/// An exclusive lock on a state directory, held for the life of the
/// process: two drivers on one state would each undo the other's work.
///
/// The lock's descriptor is close-on-exec (std opens every file so): no
/// child (mkfs, blkid, losetup…) inherits it. A driver killed while a
/// thread waits in the kernel (a mount, a loop device, a flush) holds the
/// lock until that thread returns, and a child forked before an exec holds
/// it for that instant: so a start that finds the lock held by a process
/// that is gone or dying waits for it, [`LOCK_WAIT`] at most, and refuses
/// at once only while the holder is alive.
#[derive(Debug)]
pub struct StateLock {
    _file: std::fs::File,
}

/// The lock file's name inside the state directory.
pub const LOCK_FILE: &str = "volplane.lock";

/// How long a start waits for a lock held by a process that is gone or
/// dying.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// What the process `pid` is, as /proc tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    /// Running (or sleeping): it holds the lock on purpose.
    Alive,
    /// Gone, a zombie, or with SIGKILL pending: its lock goes with it.
    Dying,
}

fn holder(pid: &str) -> Holder {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Holder::Dying;
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or("")
    };
    let state = field("State:");
    let killed = |mask: &str| u64::from_str_radix(mask, 16).is_ok_and(|m| m & (1 << 8) != 0);
    if state.starts_with('Z')
        || state.starts_with('X')
        || killed(field("ShdPnd:"))
        || killed(field("SigPnd:"))
    {
        Holder::Dying
    } else {
        Holder::Alive
    }
}

impl StateLock {
    /// Takes the lock on `dir` (created if missing); a directory locked by
    /// a live process is refused at once, naming its pid; one held by a
    /// process that is gone or dying is waited for ([`LOCK_WAIT`]).
    pub fn acquire(dir: &Path) -> Result<StateLock> {
        StateLock::acquire_within(dir, LOCK_WAIT)
    }

    /// [`StateLock::acquire`], waiting `wait` at most for a dying holder.
    pub fn acquire_within(dir: &Path, wait: std::time::Duration) -> Result<StateLock> {
        use rustix::fs::{FlockOperation, flock};
        std::fs::create_dir_all(dir)
            .map_err(|e| HostError::io("create state directory", dir, e))?;
        let path = dir.join(LOCK_FILE);
        // Never through a symlink: the lock file is truncated once held.
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => HostError::Refused(format!(
                    "{} is a symbolic link; remove it (volplane writes its lock file only in place)",
                    path.display()
                )),
                _ => HostError::io("open", &path, e),
            })?;
        let deadline = std::time::Instant::now() + wait;
        loop {
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    let pid = std::fs::read_to_string(&path).unwrap_or_default();
                    let pid = pid.trim();
                    let dying = pid.is_empty() || holder(pid) == Holder::Dying;
                    if !dying || std::time::Instant::now() >= deadline {
                        return Err(held(dir, pid, dying, wait));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                Err(e) => return Err(HostError::io("lock", &path, e.into())),
            }
        }
        file.set_len(0)
            .and_then(|_| writeln!(file, "{}", std::process::id()))
            .map_err(|e| HostError::io("write", &path, e))?;
        Ok(StateLock { _file: file })
    }
}

/// The refusal of a lock `pid` holds (dying: it was waited for, `wait`).
fn held(dir: &Path, pid: &str, dying: bool, wait: std::time::Duration) -> HostError {
    let who = if pid.is_empty() {
        String::new()
    } else {
        format!(" (pid {pid})")
    };
    if dying {
        return HostError::Refused(format!(
            "the state directory {} is still locked {wait:?} after the volplane process that held it{who} ended: a process it started may still hold the lock; find it with `fuser {}/{LOCK_FILE}`",
            dir.display(),
            dir.display()
        ));
    }
    HostError::Refused(format!(
        "another volplane process{who} holds the state directory {}; two drivers on one state would undo each other's work: stop it, or give this one a state directory of its own",
        dir.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_directory_is_locked_once() {
        let dir = tempfile::tempdir().unwrap();
        let lock = StateLock::acquire(dir.path()).unwrap();
        let e = StateLock::acquire(dir.path()).unwrap_err();
        assert!(e.is_refusal(), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("pid {}", std::process::id())),
            "{e}"
        );
        drop(lock);
        // Another test's child, forked before its exec, may hold the
        // descriptor (and so the lock) an instant longer, while the file
        // still names this live process: the start is refused meanwhile.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            match StateLock::acquire(dir.path()) {
                Ok(_) => break,
                Err(e) if e.is_refusal() && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => panic!("the lock was not released: {e}"),
            }
        }
    }

    /// A lock held by a process that is not the driver that wrote its pid
    /// (a child that outlived it) is waited for, and taken once released.
    #[test]
    fn a_lock_held_after_its_driver_is_gone_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOCK_FILE);
        // A pid no process has (above the kernel's pid_max).
        std::fs::write(&path, "4194305\n").unwrap();
        let mut child = std::process::Command::new("flock")
            .arg(&path)
            .args(["sleep", "1"])
            .spawn()
            .expect("flock(1), from util-linux");
        std::thread::sleep(std::time::Duration::from_millis(200));
        let lock = StateLock::acquire_within(dir.path(), std::time::Duration::from_secs(10));
        assert!(lock.is_ok(), "{:?}", lock.err());
        assert!(
            child.try_wait().unwrap().is_some(),
            "taken while the other holder still ran"
        );
        drop(lock);
        // Waited for a bounded time only.
        std::fs::write(&path, "4194305\n").unwrap();
        let mut child = std::process::Command::new("flock")
            .arg(&path)
            .args(["sleep", "3"])
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let e = StateLock::acquire_within(dir.path(), std::time::Duration::from_millis(300))
            .unwrap_err();
        assert!(e.to_string().contains("still locked"), "{e}");
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn a_lock_file_that_is_a_symlink_is_refused_and_its_target_kept() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep me").unwrap();
        let state = dir.path().join("state");
        std::fs::create_dir(&state).unwrap();
        std::os::unix::fs::symlink(&victim, state.join(LOCK_FILE)).unwrap();
        let e = StateLock::acquire(&state).unwrap_err();
        assert!(e.is_refusal(), "{e}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    }

    #[test]
    fn store_replaces_and_load_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let f = StateFile::new(dir.path().join("sub/state.json"));
        assert_eq!(f.load().unwrap(), None);
        f.store(b"one").unwrap();
        f.store(b"two").unwrap();
        assert_eq!(f.load().unwrap().unwrap(), b"two");
        assert!(!dir.path().join("sub/state.tmp").exists());
    }
}
