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
    pub fn new(path: impl Into<PathBuf>) -> StateFile {
        StateFile { path: path.into() }
    }

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
#[derive(Debug)]
pub struct StateLock {
    _file: std::fs::File,
}

/// The lock file's name inside the state directory.
pub const LOCK_FILE: &str = "volplane.lock";

impl StateLock {
    /// Takes the lock on `dir` (created if missing) without waiting; a
    /// directory locked by a live process is refused, naming its pid.
    pub fn acquire(dir: &Path) -> Result<StateLock> {
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
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => HostError::Refused(format!(
                    "{} is a symbolic link; remove it (volplane writes its lock file only in place)",
                    path.display()
                )),
                _ => HostError::io("open", &path, e),
            })?;
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                let holder = holder.trim();
                return Err(HostError::Refused(format!(
                    "another volplane process{} holds the state directory {}; two drivers on one state would undo each other's work: stop it, or give this one its own --state-dir",
                    if holder.is_empty() {
                        String::new()
                    } else {
                        format!(" (pid {holder})")
                    },
                    dir.display()
                )));
            }
            Err(e) => return Err(HostError::io("lock", &path, e.into())),
        }
        file.set_len(0)
            .and_then(|_| writeln!(file, "{}", std::process::id()))
            .map_err(|e| HostError::io("write", &path, e))?;
        Ok(StateLock { _file: file })
    }
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
        StateLock::acquire(dir.path()).unwrap();
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
