//! Paths resolved beneath a root by file descriptor, never by string.
//!
//! Each root is opened once, when the [`Host`](crate::Host) is made (a
//! symlinked root is resolved then, and only then). A path below it is
//! opened relative to the root's descriptor with `openat2(2)` and
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`: it can
//! neither leave the root nor pass through a symbolic link, at any
//! component, the last one included. Kernels without `openat2` get the same
//! rules from a walk of `openat(O_NOFOLLOW)` one component at a time.
//!
//! What is created (directories, raw-block target files) is created relative
//! to a parent held by descriptor, and what is mounted, unmounted or removed
//! is named through `/proc/self/fd/N`, so nothing can be swapped in between
//! the check and the effect.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, StatxFlags};
use rustix::io::Errno;

use crate::{HostError, Result};

/// One directory the host may work beneath.
#[derive(Debug)]
pub(crate) struct Root {
    /// As configured (what requests name).
    pub(crate) configured: PathBuf,
    /// With symlinks resolved at start (what the mount table shows).
    pub(crate) resolved: PathBuf,
    pub(crate) fd: OwnedFd,
}

impl Root {
    pub(crate) fn open(configured: &Path) -> Result<Root> {
        if !configured.is_absolute() {
            return Err(HostError::Refused(format!(
                "root {} is not an absolute path",
                configured.display()
            )));
        }
        std::fs::create_dir_all(configured)
            .map_err(|e| HostError::io("create root", configured, e))?;
        let resolved = configured
            .canonicalize()
            .map_err(|e| HostError::io("resolve root", configured, e))?;
        let fd = rustix::fs::open(
            &resolved,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| HostError::io("open root", &resolved, e.into()))?;
        Ok(Root {
            configured: configured.to_path_buf(),
            resolved,
            fd,
        })
    }

    /// The components of `path` below this root, if it lies strictly below
    /// it (as configured or as resolved).
    pub(crate) fn below<'p>(&self, path: &'p Path) -> Option<Vec<&'p OsStr>> {
        [&self.configured, &self.resolved]
            .into_iter()
            .find_map(|r| {
                let rest = path.strip_prefix(r).ok()?;
                let parts: Vec<&OsStr> = rest
                    .components()
                    .map(|c| match c {
                        Component::Normal(n) => Some(n),
                        _ => None,
                    })
                    .collect::<Option<_>>()?;
                (!parts.is_empty()).then_some(parts)
            })
    }

    /// `path` shown as requests name it (the configured form), given a path
    /// below the resolved root as the mount table shows it.
    pub(crate) fn as_configured(&self, shown: &str) -> Option<String> {
        let rest = Path::new(shown).strip_prefix(&self.resolved).ok()?;
        Some(self.configured.join(rest).display().to_string())
    }
}

/// `/proc/self/fd/N`: the file `fd` holds, for syscalls that take a path.
pub(crate) fn proc_path(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// `/proc/self/fd/N/name`: `name` in directory `dir`, reached through the
/// descriptor (the last component is never followed by callers that pass
/// NOFOLLOW flags).
pub(crate) fn proc_child(dir: BorrowedFd<'_>, name: &OsStr) -> PathBuf {
    Path::new(&proc_path(dir)).join(name)
}

fn resolve_flags() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS
}

/// Opens `parts` below `dir` with `oflags` (O_NOFOLLOW and O_CLOEXEC are
/// always added): never outside `dir`, never through a symlink.
pub(crate) fn open_below(
    dir: BorrowedFd<'_>,
    parts: &[&OsStr],
    oflags: OFlags,
) -> std::result::Result<OwnedFd, Errno> {
    let oflags = oflags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    if parts.is_empty() {
        return rustix::fs::openat(dir, ".", oflags | OFlags::DIRECTORY, Mode::empty());
    }
    let rel: PathBuf = parts.iter().collect();
    let opened = match rustix::fs::openat2(dir, &rel, oflags, Mode::empty(), resolve_flags()) {
        Err(Errno::NOSYS) => walk(dir, parts, oflags),
        r => r,
    };
    let fd = match opened {
        // O_DIRECTORY | O_NOFOLLOW meets a link as "not a directory": say
        // what it is when a link is the cause.
        Err(Errno::NOTDIR) => return Err(cause_of_notdir(dir, parts)),
        r => r?,
    };
    // O_PATH | O_NOFOLLOW opens a trailing symlink itself: refuse it here.
    if oflags.contains(OFlags::PATH) && is_symlink(fd.as_fd())? {
        return Err(Errno::LOOP);
    }
    Ok(fd)
}

/// The same rules without openat2: one component at a time, O_NOFOLLOW.
fn walk(
    dir: BorrowedFd<'_>,
    parts: &[&OsStr],
    oflags: OFlags,
) -> std::result::Result<OwnedFd, Errno> {
    let step = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let (last, inner) = parts.split_last().ok_or(Errno::INVAL)?;
    let mut cur: Option<OwnedFd> = None;
    for p in inner {
        let at = cur.as_ref().map_or(dir, |f| f.as_fd());
        cur = Some(rustix::fs::openat(at, *p, step, Mode::empty())?);
    }
    let at = cur.as_ref().map_or(dir, |f| f.as_fd());
    rustix::fs::openat(at, *last, oflags, Mode::empty())
}

/// ELOOP when a component of `parts` below `dir` is a symbolic link,
/// ENOTDIR otherwise.
fn cause_of_notdir(dir: BorrowedFd<'_>, parts: &[&OsStr]) -> Errno {
    use rustix::fs::{AtFlags, FileType};
    let step = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut cur: Option<OwnedFd> = None;
    for p in parts {
        let at = cur.as_ref().map_or(dir, |f| f.as_fd());
        match rustix::fs::statat(at, *p, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Symlink => {
                return Errno::LOOP;
            }
            Ok(_) => {}
            Err(_) => break,
        }
        match rustix::fs::openat(at, *p, step, Mode::empty()) {
            Ok(fd) => cur = Some(fd),
            Err(_) => break,
        }
    }
    Errno::NOTDIR
}

fn is_symlink(fd: BorrowedFd<'_>) -> std::result::Result<bool, Errno> {
    let st = rustix::fs::fstat(fd)?;
    Ok(rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink)
}

/// Creates the directories `parts` below `dir` that are missing (mode 0750)
/// and returns the last one, opened O_PATH. Every component is checked as it
/// is reached: a symlink or a non-directory anywhere is refused.
pub(crate) fn create_dirs(
    dir: BorrowedFd<'_>,
    parts: &[&OsStr],
) -> std::result::Result<OwnedFd, Errno> {
    // The deepest directory that exists, looked for from the end: a
    // publish's target usually lacks only its last component.
    let mut have = parts.len();
    let mut cur = loop {
        match open_below(dir, &parts[..have], OFlags::PATH | OFlags::DIRECTORY) {
            Ok(fd) if have == parts.len() => return Ok(fd),
            Ok(fd) => break Some(fd),
            Err(Errno::NOENT) if have > 0 => have -= 1,
            Err(e) => return Err(e),
        }
    };
    for p in &parts[have..] {
        let at = cur.as_ref().map_or(dir, |f| f.as_fd());
        match rustix::fs::mkdirat(at, *p, Mode::from_raw_mode(0o750)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(e) => return Err(e),
        }
        // Opened without O_DIRECTORY first, so that a symlink is reported
        // as one (ELOOP), not as "not a directory".
        let fd = open_below(at, &[p], OFlags::PATH)?;
        if rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode)
            != rustix::fs::FileType::Directory
        {
            return Err(Errno::NOTDIR);
        }
        cur = Some(fd);
    }
    cur.ok_or(Errno::INVAL)
}

/// What a path is, from one statx on its descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// The device holding the file.
    pub dev: u64,
    /// The inode.
    pub ino: u64,
    /// For device nodes, the device they name.
    pub rdev: u64,
    /// What kind of file it is.
    pub kind: rustix::fs::FileType,
    /// Something is mounted here (this is the root of a mount).
    pub mount_root: bool,
}

impl Stat {
    /// True for a directory.
    pub fn is_dir(&self) -> bool {
        self.kind == rustix::fs::FileType::Directory
    }
}

/// statx of the file `fd` holds.
pub(crate) fn stat(fd: BorrowedFd<'_>, shown: &Path) -> Result<Stat> {
    use rustix::fs::StatxAttributes;
    let s = rustix::fs::statx(
        fd,
        "",
        AtFlags::EMPTY_PATH | AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS,
    )
    .map_err(|e| HostError::io("statx", shown, e.into()))?;
    if !s.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT) {
        return Err(HostError::Refused(
            "this kernel does not report mount roots (statx STATX_ATTR_MOUNT_ROOT needs Linux 5.8 or later)"
                .into(),
        ));
    }
    Ok(Stat {
        dev: rustix::fs::makedev(s.stx_dev_major, s.stx_dev_minor),
        ino: s.stx_ino,
        rdev: rustix::fs::makedev(s.stx_rdev_major, s.stx_rdev_minor),
        kind: rustix::fs::FileType::from_raw_mode(s.stx_mode as u32),
        mount_root: s.stx_attributes.contains(StatxAttributes::MOUNT_ROOT),
    })
}

/// Splits `parts` into its parent components and its last name.
pub(crate) fn split_last<'a>(parts: &[&'a OsStr]) -> (Vec<&'a OsStr>, OsString) {
    let (last, inner) = parts.split_last().expect("a path below a root has a name");
    (inner.to_vec(), last.to_os_string())
}
