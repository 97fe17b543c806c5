//! Linux host operations for volplane, synchronous: mounts, bind mounts,
//! read-only remounts, unmounts, mountinfo, loop devices, safe formatting,
//! filesystem growth and statistics, and crash-safe state files.
//!
//! Every path-taking operation goes through [`Host::confine`] first: a path
//! outside the roots the host was created with is an error and is never
//! mounted, created or removed. Confinement is checked on the real
//! filesystem (symlinks resolved), not only lexically.
//!
//! Nothing here formats a device that already holds a filesystem.

mod fs;
pub mod loopdev;
mod mounts;
pub mod state_file;

use std::io;
use std::path::{Component, Path, PathBuf};

pub use fs::Formatted;

/// What went wrong on the host.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{path} is outside the directories volplane may touch ({roots})")]
    OutsideRoots { path: String, roots: String },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{command} failed ({status}): {stderr}")]
    Command {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("{0}")]
    Refused(String),
}

impl HostError {
    pub(crate) fn io(op: &'static str, path: &Path, source: io::Error) -> HostError {
        HostError::Io {
            op,
            path: path.display().to_string(),
            source,
        }
    }

    /// True for errors that mean "the caller asked for something it may not".
    pub fn is_refusal(&self) -> bool {
        matches!(self, HostError::OutsideRoots { .. } | HostError::Refused(_))
    }
}

pub type Result<T> = std::result::Result<T, HostError>;

/// Host operations confined to a set of root directories.
#[derive(Debug, Clone)]
pub struct Host {
    roots: Vec<PathBuf>,
}

impl Host {
    /// A host confined to `roots`. Each root is created if missing and
    /// resolved (symlinks followed) once, here.
    pub fn new<I, P>(roots: I) -> Result<Host>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        let mut out = Vec::new();
        for root in roots {
            let root = root.as_ref();
            if !root.is_absolute() {
                return Err(HostError::Refused(format!(
                    "root {} is not an absolute path",
                    root.display()
                )));
            }
            std::fs::create_dir_all(root).map_err(|e| HostError::io("create root", root, e))?;
            out.push(
                root.canonicalize()
                    .map_err(|e| HostError::io("resolve root", root, e))?,
            );
        }
        Ok(Host { roots: out })
    }

    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Checks that `path` lies strictly below one of the roots, with symlinks
    /// in its existing part resolved, and returns it. `..` is refused outright.
    pub fn confine(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        let path = path.as_ref();
        let refuse = || HostError::OutsideRoots {
            path: path.display().to_string(),
            roots: self
                .roots
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        };
        if !path.is_absolute() || path.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(refuse());
        }
        // Resolve the deepest existing ancestor; the rest is appended as is.
        let mut existing = path.to_path_buf();
        let mut rest = Vec::new();
        let resolved = loop {
            match existing.canonicalize() {
                Ok(r) => break r,
                Err(_) => {
                    let Some(name) = existing.file_name().map(|n| n.to_os_string()) else {
                        return Err(refuse());
                    };
                    rest.push(name);
                    if !existing.pop() {
                        return Err(refuse());
                    }
                }
            }
        };
        let full = rest.iter().rev().fold(resolved, |p, n| p.join(n));
        if self
            .roots
            .iter()
            .any(|root| full.starts_with(root) && full != *root)
        {
            Ok(full)
        } else {
            Err(refuse())
        }
    }

    /// Creates directory `path` and its missing parents (inside the roots).
    pub fn create_dir(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        let path = self.confine(path)?;
        std::fs::create_dir_all(&path).map_err(|e| HostError::io("create directory", &path, e))?;
        Ok(path)
    }

    /// Creates an empty regular file (a raw-block publish target), and its parents.
    pub fn create_file(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        let path = self.confine(path)?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| HostError::io("create directory", parent, e))?;
        }
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| HostError::io("create file", &path, e))?;
        Ok(path)
    }

    /// Removes an empty directory or a file at `path`; a missing path is fine.
    /// Refuses while something is mounted there.
    pub fn remove(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = self.confine(path)?;
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(HostError::io("inspect", &path, e)),
        };
        if self.is_mount_point(&path)? {
            return Err(HostError::Refused(format!(
                "{} is still a mount point; unmount it before removing it",
                path.display()
            )));
        }
        let r = if meta.is_dir() {
            std::fs::remove_dir(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match r {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(HostError::io("remove", &path, e)),
        }
    }

    /// Removes a directory tree at `path` (backing storage of a volume).
    /// Refuses when anything below it is mounted.
    pub fn remove_tree(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = self.confine(path)?;
        let prefix = format!("{}/", path.display());
        if let Some(m) = self.mountinfo()?.into_iter().find(|m| {
            m.mount_point == path.display().to_string() || m.mount_point.starts_with(&prefix)
        }) {
            return Err(HostError::Refused(format!(
                "{} is still mounted at {}; unmount it before deleting",
                path.display(),
                m.mount_point
            )));
        }
        match std::fs::remove_dir_all(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(HostError::io("remove", &path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confine_refuses_outside_parent_and_symlink_escapes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        let host = Host::new([&root]).unwrap();
        let root = root.canonicalize().unwrap();
        assert_eq!(host.confine(root.join("a/b")).unwrap(), root.join("a/b"));
        assert!(
            host.confine(&root).is_err(),
            "the root itself is not a usable path"
        );
        assert!(host.confine(root.join("../x")).is_err());
        assert!(host.confine("/etc/passwd").is_err());
        assert!(host.confine("relative").is_err());
        std::os::unix::fs::symlink("/etc", root.join("escape")).unwrap();
        let e = host.confine(root.join("escape/passwd")).unwrap_err();
        assert!(e.is_refusal(), "{e}");
        assert!(host.remove(root.join("escape/passwd")).is_err());
        assert!(std::path::Path::new("/etc/passwd").exists());
    }

    #[test]
    fn create_and_remove_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new([dir.path()]).unwrap();
        let d = host.create_dir(dir.path().join("x/y")).unwrap();
        assert!(d.is_dir());
        let f = host.create_file(dir.path().join("x/file")).unwrap();
        assert!(f.is_file());
        host.remove(&f).unwrap();
        host.remove(&f).unwrap();
        host.remove(&d).unwrap();
        assert!(!d.exists());
        host.create_dir(dir.path().join("t/u/v")).unwrap();
        host.remove_tree(dir.path().join("t")).unwrap();
        assert!(!dir.path().join("t").exists());
    }
}
