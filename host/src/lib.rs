//! Linux host operations for volplane, synchronous: mounts, bind mounts,
//! read-only remounts, unmounts, mount checks, loop devices, safe formatting,
//! filesystem growth and statistics, crash-safe state files, and the
//! driver's record store.
//!
//! Every path-taking operation resolves its path beneath one of the roots
//! the host was created with, by file descriptor (the `beneath` module): a path
//! outside the roots, or one that passes through a symbolic link, is refused
//! and is never mounted, created or removed. A mount point the host is not
//! told is the caller's own is never mounted over or unmounted.
//!
//! Nothing here formats a device that already holds a filesystem.

#![deny(missing_docs)]

mod beneath;
mod copy;
mod files;
mod fs;
pub mod memory;
/// This boot of the machine (Linux's `/proc/sys/kernel/random/boot_id`);
/// empty when it cannot be read. A process that finds another boot than
/// its predecessor's knows the machine rebooted, and its mounts with it.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

pub mod loopdev;
mod mounts;
pub mod records;
pub mod state_file;

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, OFlags};
use rustix::io::Errno;

pub use beneath::Stat;
pub use copy::Skipped;
pub use fs::Formatted;
pub use mounts::{Device, Identity, check_target};

use beneath::Root;

/// What went wrong on the host.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(
        "{path} is outside the directories this driver may touch ({roots}): a request's paths \
         must lie under the kubelet directory, a backend's own files under a storage directory \
         it declares (volplane::Driver::storage_dir)"
    )]
    /// A path outside every root: refused before anything happens.
    OutsideRoots {
        /// The path asked for.
        path: String,
        /// The roots, as a person reads them.
        roots: String,
    },
    #[error("{op} {path}: {source}")]
    /// A system call failed.
    Io {
        /// What was being done (`mount`, `open`…).
        op: &'static str,
        /// On what.
        path: String,
        #[source]
        /// The error.
        source: io::Error,
    },
    #[error("{command} failed ({status}): {stderr}")]
    /// A command (mkfs, resize2fs…) failed.
    Command {
        /// The command line.
        command: String,
        /// How it exited.
        status: String,
        /// What it said.
        stderr: String,
    },
    #[error("{0}")]
    /// Refused: a symbolic link, a mount that is not the driver's, a device in use.
    Refused(String),
    #[error("{0}")]
    /// The path or device does not exist.
    NotFound(String),
    #[error("{0}")]
    /// Not enough space.
    NoSpace(String),
    #[error("{0}")]
    /// A size past what the filesystem can hold.
    OutOfRange(String),
    /// Any other I/O error, from a backend's own code (`?` on an
    /// `io::Result` inside `NodeHost::run`).
    #[error("{0}")]
    Other(#[from] io::Error),
    /// The process is shutting down and the operation never ran.
    #[error("{0}")]
    Stopped(String),
    /// Held by another process for now — a device still open by a tool
    /// that a killed driver started, a mount still in use — so worth
    /// trying again shortly.
    #[error("{0}")]
    Busy(String),
}

impl HostError {
    pub(crate) fn io(op: &'static str, path: &Path, source: io::Error) -> HostError {
        HostError::Io {
            op,
            path: path.display().to_string(),
            source,
        }
    }

    /// An errno from resolving or creating `path`, worded for a person:
    /// a symlink or an escape is a refusal, a missing path is NotFound.
    pub(crate) fn resolve(op: &'static str, path: &Path, e: Errno) -> HostError {
        match e {
            Errno::LOOP => HostError::Refused(format!(
                "{} passes through a symbolic link; volplane follows no links below its directories",
                path.display()
            )),
            Errno::XDEV => HostError::Refused(format!(
                "{} resolves outside the directories volplane may touch",
                path.display()
            )),
            Errno::NOTDIR => HostError::Refused(format!(
                "{}: a component of the path is not a directory",
                path.display()
            )),
            Errno::NOENT => HostError::NotFound(format!("{} does not exist", path.display())),
            e => HostError::io(op, path, e.into()),
        }
    }

    /// True for errors that mean "the caller asked for something it may not".
    pub fn is_refusal(&self) -> bool {
        matches!(self, HostError::OutsideRoots { .. } | HostError::Refused(_))
    }

    /// True when a directory could not be removed because it holds files.
    pub fn is_not_empty(&self) -> bool {
        matches!(self, HostError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOTEMPTY))
    }

    /// True when the path (or device) asked for does not exist.
    pub fn is_not_found(&self) -> bool {
        match self {
            HostError::NotFound(_) => true,
            HostError::Io { source, .. } => source.kind() == io::ErrorKind::NotFound,
            _ => false,
        }
    }
}

/// A host operation's result.
pub type Result<T> = std::result::Result<T, HostError>;

/// A file or directory resolved beneath a root and held open (O_PATH).
#[derive(Debug)]
pub struct Opened {
    fd: OwnedFd,
    path: PathBuf,
}

impl Opened {
    /// The path it was resolved from, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its descriptor (O_PATH).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// statx of what is held.
    pub fn stat(&self) -> Result<Stat> {
        beneath::stat(self.fd.as_fd(), &self.path)
    }

    /// `/proc/self/fd/N` of what is held, for syscalls that take a path.
    pub fn proc_path(&self) -> String {
        beneath::proc_path(self.fd.as_fd())
    }

    /// Opens what is held again for I/O (`/proc/self/fd/N` names exactly
    /// this file, not whatever the path names now).
    pub fn reopen(&self, flags: OFlags) -> Result<std::fs::File> {
        rustix::fs::open(
            self.proc_path(),
            flags | OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map(std::fs::File::from)
        .map_err(|e| HostError::io("open", &self.path, e.into()))
    }
}

/// Host operations confined to a set of root directories.
#[derive(Debug)]
pub struct Host {
    roots: Vec<Root>,
}

impl Host {
    /// A host confined to `roots`. Each root is created if missing, resolved
    /// (symlinks followed) and opened once, here.
    pub fn new<I, P>(roots: I) -> Result<Host>
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        let roots = roots
            .into_iter()
            .map(|r| Root::open(r.as_ref()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Host { roots })
    }

    /// The roots, resolved.
    pub fn roots(&self) -> Vec<&Path> {
        self.roots.iter().map(|r| r.resolved.as_path()).collect()
    }

    fn refuse(&self, path: &Path) -> HostError {
        HostError::OutsideRoots {
            path: path.display().to_string(),
            roots: self
                .roots
                .iter()
                .map(|r| r.configured.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// The descriptor of the root `path` names (as configured or resolved).
    pub(crate) fn root_fd(&self, path: &Path) -> Option<BorrowedFd<'_>> {
        self.roots
            .iter()
            .find(|r| r.configured == path || r.resolved == path)
            .map(|r| r.fd.as_fd())
    }

    /// The root `path` lies strictly below (lexically: absolute, no `.` or
    /// `..`), and its components below that root.
    fn locate<'p>(&self, path: &'p Path) -> Result<(&Root, Vec<&'p OsStr>)> {
        if !path.is_absolute() {
            return Err(self.refuse(path));
        }
        self.roots
            .iter()
            .filter_map(|r| r.below(path).map(|parts| (r, parts)))
            .min_by_key(|(_, parts)| parts.len())
            .ok_or_else(|| self.refuse(path))
    }

    /// Checks that `path` lies strictly below one of the roots and returns
    /// it with the root shown resolved.
    pub fn confine(&self, path: impl AsRef<Path>) -> Result<PathBuf> {
        let path = path.as_ref();
        let (root, parts) = self.locate(path)?;
        Ok(parts.iter().fold(root.resolved.clone(), |p, c| p.join(c)))
    }

    /// Opens an existing `path` (O_PATH) beneath its root; the last
    /// component may be anything but a symlink.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<Opened> {
        let path = path.as_ref();
        let (root, parts) = self.locate(path)?;
        let fd = beneath::open_below(root.fd.as_fd(), &parts, OFlags::PATH)
            .map_err(|e| HostError::resolve("open", path, e))?;
        Ok(Opened {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Opens `path`, or `None` when it does not exist.
    pub fn open_existing(&self, path: impl AsRef<Path>) -> Result<Option<Opened>> {
        match self.open(path) {
            Ok(o) => Ok(Some(o)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The parent directory of `path` (opened, created if `create`) and
    /// the last component's name.
    pub(crate) fn parent(&self, path: &Path, create: bool) -> Result<(Opened, std::ffi::OsString)> {
        let (root, parts) = self.locate(path)?;
        let (inner, name) = beneath::split_last(&parts);
        let shown = path.parent().unwrap_or(path).to_path_buf();
        let fd = if create {
            beneath::create_dirs(root.fd.as_fd(), &inner)
        } else {
            beneath::open_below(root.fd.as_fd(), &inner, OFlags::PATH | OFlags::DIRECTORY)
        }
        .map_err(|e| HostError::resolve("open", &shown, e))?;
        Ok((Opened { fd, path: shown }, name))
    }

    /// Creates directory `path` and its missing parents (beneath the roots).
    pub fn create_dir(&self, path: impl AsRef<Path>) -> Result<Opened> {
        let path = path.as_ref();
        let (root, parts) = self.locate(path)?;
        let fd = beneath::create_dirs(root.fd.as_fd(), &parts)
            .map_err(|e| HostError::resolve("create directory", path, e))?;
        Ok(Opened {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Creates an empty regular file (a raw-block publish target) and its
    /// parents; an existing regular file is opened instead.
    pub fn create_file(&self, path: impl AsRef<Path>) -> Result<Opened> {
        let path = path.as_ref();
        let (parent, name) = self.parent(path, true)?;
        match rustix::fs::openat(
            parent.fd(),
            &name,
            OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            rustix::fs::Mode::from_raw_mode(0o640),
        ) {
            Ok(_) | Err(Errno::EXIST) => {}
            Err(e) => return Err(HostError::resolve("create file", path, e)),
        }
        let fd = beneath::open_below(parent.fd(), &[name.as_os_str()], OFlags::PATH)
            .map_err(|e| HostError::resolve("open", path, e))?;
        let opened = Opened {
            fd,
            path: path.to_path_buf(),
        };
        let st = opened.stat()?;
        if st.kind != rustix::fs::FileType::RegularFile && !st.mount_root {
            return Err(HostError::Refused(format!(
                "{} exists and is not a regular file",
                path.display()
            )));
        }
        Ok(opened)
    }

    /// Removes an empty directory or a file at `path`; a missing path is fine.
    /// Refuses while something is mounted there.
    pub fn remove(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let (parent, name) = match self.parent(path, false) {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        let Some(target) = self.open_existing(path)? else {
            return Ok(());
        };
        let st = target.stat()?;
        if st.mount_root {
            return Err(HostError::Refused(format!(
                "{} is still a mount point; unmount it before removing it",
                path.display()
            )));
        }
        let flags = if st.kind == rustix::fs::FileType::Directory {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        match rustix::fs::unlinkat(parent.fd(), &name, flags) {
            Ok(()) | Err(Errno::NOENT) => Ok(()),
            Err(e) => Err(HostError::io("remove", path, e.into())),
        }
    }

    /// Removes a directory tree at `path` (backing storage of a volume).
    /// Refuses when anything below it is mounted.
    pub fn remove_tree(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        if let Some(top) = self.open_existing(path)?
            && let Some(below) = mount_below(&top)?
        {
            return Err(HostError::Refused(format!(
                "{} is still mounted at {}; unmount it before deleting",
                path.display(),
                below.display()
            )));
        }
        let (parent, name) = match self.parent(path, false) {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Ok(()),
            Err(e) => return Err(e),
        };
        // The parent is held by descriptor; std's remove_dir_all never
        // follows a symlink below the directory it was given.
        match std::fs::remove_dir_all(beneath::proc_child(parent.fd(), &name)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(HostError::io("remove", path, e)),
        }
    }
}

/// The first mount point at or below the directory `top` holds, found by
/// descriptor (each directory opened beneath its parent, never through a
/// link, and asked for `STATX_ATTR_MOUNT_ROOT`): no read of the whole mount
/// table, which grows with every volume the node has mounted. Depth first,
/// so the descriptors held open are those of one path down the tree.
fn mount_below(top: &Opened) -> Result<Option<PathBuf>> {
    use rustix::fs::{FileType, Mode};
    use std::rc::Rc;
    let st = top.stat()?;
    if st.mount_root {
        return Ok(Some(top.path().to_path_buf()));
    }
    if st.kind != FileType::Directory {
        return Ok(None);
    }
    let first = Rc::new(OwnedFd::from(
        top.reopen(OFlags::RDONLY | OFlags::DIRECTORY)?,
    ));
    let mut stack = Vec::new();
    subdirectories(&first, top.path(), &mut stack)?;
    while let Some((parent, shown)) = stack.pop() {
        let name = shown.file_name().unwrap_or_default();
        let opened = rustix::fs::openat(
            &*parent,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        );
        drop(parent);
        let child = match opened {
            Ok(c) => c,
            // Not a directory after all (DT_UNKNOWN), a link, or gone:
            // nothing is mounted through it here.
            Err(Errno::NOTDIR | Errno::LOOP | Errno::NOENT) => continue,
            Err(e) => return Err(HostError::io("open", &shown, e.into())),
        };
        if beneath::stat(child.as_fd(), &shown)?.mount_root {
            return Ok(Some(shown));
        }
        subdirectories(&Rc::new(child), &shown, &mut stack)?;
    }
    Ok(None)
}

/// Pushes the directories `dir` holds (as it names them: `shown/<name>`),
/// each with `dir` held to open it by.
fn subdirectories(
    dir: &std::rc::Rc<OwnedFd>,
    shown: &Path,
    stack: &mut Vec<(std::rc::Rc<OwnedFd>, PathBuf)>,
) -> Result<()> {
    use rustix::fs::{Dir, FileType};
    let entries =
        Dir::read_from(&**dir).map_err(|e| HostError::io("read directory", shown, e.into()))?;
    for entry in entries {
        let entry = entry.map_err(|e| HostError::io("read directory", shown, e.into()))?;
        let name = entry.file_name().to_bytes();
        if matches!(name, b"." | b"..")
            || !matches!(entry.file_type(), FileType::Directory | FileType::Unknown)
        {
            continue;
        }
        stack.push((dir.clone(), shown.join(OsStr::from_bytes(name))));
    }
    Ok(())
}

/// Tests that need root (and, with `loop_devices`, /dev/loop-control):
/// false, saying so, where they cannot run; a failure under
/// `VOLPLANE_REQUIRE_ALL=1`, as CI runs them.
#[cfg(test)]
pub(crate) fn can_run_as_root(test: &str, loop_devices: bool) -> bool {
    let root = rustix::process::geteuid().is_root();
    let loops = !loop_devices || Path::new("/dev/loop-control").exists();
    if root && loops {
        return true;
    }
    let needs = if loop_devices {
        "root and /dev/loop-control"
    } else {
        "root"
    };
    assert!(
        std::env::var_os("VOLPLANE_REQUIRE_ALL").is_none_or(|v| v != "1"),
        "{test} needs {needs} (VOLPLANE_REQUIRE_ALL=1)"
    );
    eprintln!("skipping {test}: needs {needs}");
    false
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
        let e = host.open(root.join("escape/passwd")).unwrap_err();
        assert!(e.is_refusal(), "{e}");
        assert!(host.remove(root.join("escape/passwd")).is_err());
        assert!(host.create_dir(root.join("escape/x")).is_err());
        assert!(!std::path::Path::new("/etc/x").exists());
        assert!(std::path::Path::new("/etc/passwd").exists());
    }

    #[test]
    fn links_are_never_followed_even_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new([dir.path()]).unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink("missing", dir.path().join("dangling")).unwrap();
        for p in ["link", "link/x", "dangling"] {
            let e = host.open(dir.path().join(p)).unwrap_err();
            assert!(e.is_refusal(), "{p}: {e}");
            assert!(e.to_string().contains("symbolic link"), "{p}: {e}");
        }
        // Whichever call meets the link, the message names it.
        for p in ["link/a/b", "link/a", "link", "dangling"] {
            let e = host.create_dir(dir.path().join(p)).unwrap_err();
            assert!(e.to_string().contains("symbolic link"), "{p}: {e}");
            let e = host.remove(dir.path().join(p).join("x")).unwrap_err();
            assert!(e.to_string().contains("symbolic link"), "{p}/x: {e}");
        }
        let e = host.create_file(dir.path().join("dangling")).unwrap_err();
        assert!(e.is_refusal(), "{e}");
        assert!(
            !dir.path().join("missing").exists(),
            "a dangling link was followed"
        );
        host.remove(dir.path().join("link")).unwrap_err();
        assert!(dir.path().join("real").is_dir());
        let e = host.create_dir(dir.path().join("link/x")).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert!(!dir.path().join("real/x").exists());
    }

    /// Creating directories starts from the deepest one that exists: a
    /// link or a file anywhere above several missing components is
    /// refused, and nothing is made through it or beside it.
    #[test]
    fn deep_creation_through_a_link_or_a_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let host = Host::new([dir.path()]).unwrap();
        std::fs::create_dir(dir.path().join("pods")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("pods/escape")).unwrap();
        std::fs::write(dir.path().join("pods/file"), b"").unwrap();
        for p in ["pods/escape/a/b/c", "pods/file/a/b/c"] {
            let e = host.create_dir(dir.path().join(p)).unwrap_err();
            assert!(e.is_refusal(), "{p}: {e}");
            let e = host.create_file(dir.path().join(p)).unwrap_err();
            assert!(e.is_refusal(), "{p}: {e}");
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
        let mut made: Vec<_> = std::fs::read_dir(dir.path().join("pods"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        made.sort();
        assert_eq!(made, ["escape", "file"], "something was made beside them");
    }

    #[test]
    fn a_symlinked_root_is_resolved_once_and_named_either_way() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        let link = dir.path().join("kubelet");
        std::os::unix::fs::symlink(dir.path().join("real"), &link).unwrap();
        let host = Host::new([&link]).unwrap();
        host.create_dir(link.join("pods/a")).unwrap();
        assert!(dir.path().join("real/pods/a").is_dir());
        assert!(host.open(dir.path().join("real/pods/a")).is_ok());
    }

    #[test]
    fn create_and_remove_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new([dir.path()]).unwrap();
        let d = dir.path().join("x/y");
        host.create_dir(&d).unwrap();
        assert!(d.is_dir());
        let f = dir.path().join("x/file");
        host.create_file(&f).unwrap();
        assert!(f.is_file());
        host.remove(&f).unwrap();
        host.remove(&f).unwrap();
        host.remove(&d).unwrap();
        assert!(!d.exists());
        host.create_dir(dir.path().join("t/u/v")).unwrap();
        host.remove_tree(dir.path().join("t")).unwrap();
        assert!(!dir.path().join("t").exists());
    }

    /// A tree with something mounted deep inside (or at its top) is
    /// refused whole, nothing of it removed; once unmounted it goes.
    #[test]
    fn a_tree_with_a_mount_inside_is_refused_whole_when_root() {
        if !can_run_as_root("the mounted-tree test", false) {
            return;
        }
        use rustix::mount::UnmountFlags;
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new([dir.path()]).unwrap();
        let (tree, elsewhere) = (dir.path().join("vol"), dir.path().join("elsewhere"));
        let deep = tree.join("a/b/c");
        host.create_dir(&deep).unwrap();
        host.create_file(tree.join("a/data")).unwrap();
        host.create_dir(&elsewhere).unwrap();
        host.create_file(elsewhere.join("theirs")).unwrap();
        rustix::mount::mount_bind(&elsewhere, &deep).unwrap();
        // A link in the tree to a mount outside it is neither followed
        // into nor a reason to refuse: only the link would go.
        let outside = dir.path().join("outside");
        host.create_dir(&outside).unwrap();
        rustix::mount::mount_bind(&elsewhere, &outside).unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("a/link")).unwrap();
        let e = host.remove_tree(&tree).unwrap_err();
        assert!(e.is_refusal(), "{e}");
        assert!(e.to_string().contains("a/b/c"), "names the mount: {e}");
        assert!(tree.join("a/data").exists() && elsewhere.join("theirs").exists());
        rustix::mount::mount_bind(&elsewhere, &tree).unwrap();
        assert!(
            host.remove_tree(&tree).unwrap_err().is_refusal(),
            "mounted at the top"
        );
        rustix::mount::unmount(&tree, UnmountFlags::empty()).unwrap();
        rustix::mount::unmount(&deep, UnmountFlags::empty()).unwrap();
        host.remove_tree(&tree).unwrap();
        assert!(!tree.exists() && elsewhere.join("theirs").exists());
        assert!(
            outside.join("theirs").exists(),
            "nothing removed through the link"
        );
        rustix::mount::unmount(&outside, UnmountFlags::empty()).unwrap();
    }

    #[test]
    fn images_fit_or_are_refused_and_leave_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new([dir.path()]).unwrap();
        let img = dir.path().join("v.img");
        assert_eq!(host.create_image(&img, 1 << 20).unwrap(), 1 << 20);
        assert_eq!(
            host.create_image(&img, 4 << 20).unwrap(),
            1 << 20,
            "an existing image is kept"
        );
        host.grow_image(&img, 2 << 20).unwrap();
        assert_eq!(std::fs::metadata(&img).unwrap().len(), 2 << 20);
        // The refusal quotes the size asked for, not the growth.
        let e = host.grow_image(&img, 1 << 62).unwrap_err();
        assert!(matches!(e, HostError::OutOfRange(_)), "{e}");
        assert!(
            e.to_string().starts_with("4611686018427387904 bytes "),
            "{e}"
        );
        let huge = dir.path().join("huge.img");
        let e = host.create_image(&huge, u64::MAX / 2).unwrap_err();
        assert!(matches!(e, HostError::OutOfRange(_)), "{e}");
        assert!(
            host.usage(dir.path()).unwrap().total_bytes > 0,
            "a root's own usage"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("v.img")]);
    }
}
