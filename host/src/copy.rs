//! Copies for snapshots, restores and clones: an image file sparse-aware
//! (a reflink where the filesystem can share blocks), a directory tree by
//! descriptor. Each copy appears whole or not at all, and one already in
//! place is kept, so a copy interrupted by a crash is simply made again.
//!
//! The source is a volume's contents, which its pods wrote: nothing in it
//! is trusted. Symbolic links are copied as links and never followed,
//! nothing below another mounted filesystem is entered, device nodes and
//! sockets are not recreated, and every file is opened relative to its
//! directory's descriptor.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{AtFlags, FileType, Mode, OFlags, SeekFrom, Timestamps};
use rustix::io::Errno;

use crate::{Host, HostError, Opened, Result, beneath};

/// Directories nested deeper than this are not copied (the copy fails).
const MAX_DEPTH: usize = 256;

/// What a tree copy left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Device nodes and sockets, which are not recreated.
    pub special: u64,
    /// Entries below another mounted filesystem's mount point.
    pub mounted: u64,
}

impl Host {
    /// Copies the regular file at `from` to `to` (both beneath the roots),
    /// keeping its holes; returns the size of the file at `to`. A file
    /// already at `to` is kept. Every filesystem is flushed first, so what a
    /// filesystem mounted from the image (through a loop device) wrote has
    /// reached it. The copy is made unnamed (O_TMPFILE), synced, and only
    /// then linked in.
    pub fn copy_image(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<u64> {
        let (from, to) = (from.as_ref(), to.as_ref());
        if let Some(existing) = self.open_existing(to)? {
            return regular_len(&existing);
        }
        let source = self.open(from)?;
        let len = regular_len(&source)?;
        rustix::fs::sync();
        let src = source.reopen(OFlags::RDONLY)?;
        let (dir, name) = self.parent(to, true)?;
        let allocated = rustix::fs::fstat(&src)
            .map(|s| (s.st_blocks as u64).saturating_mul(512))
            .map_err(|e| HostError::io("inspect", from, e.into()))?;
        self.check_fits(&dir, len, allocated.min(len))?;
        let fd = rustix::fs::openat(
            dir.fd(),
            ".",
            OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| HostError::io("create copy", to, e.into()))?;
        let dst = std::fs::File::from(fd);
        copy_data(&src, &dst, len).map_err(|e| HostError::io("copy", from, e))?;
        dst.sync_all()
            .map_err(|e| HostError::io("sync copy", to, e))?;
        let unnamed = beneath::proc_path(dst.as_fd());
        match rustix::fs::linkat(
            rustix::fs::CWD,
            unnamed.as_str(),
            dir.fd(),
            &name,
            AtFlags::SYMLINK_FOLLOW,
        ) {
            Ok(()) => {}
            // Another copy to the same place won the race: keep it.
            Err(Errno::EXIST) => return self.copy_image(from, to),
            Err(e) => return Err(HostError::io("link copy", to, e.into())),
        }
        sync_dir(&dir)?;
        Ok(len)
    }

    /// Copies the directory tree at `from` to a new directory `to` (both
    /// beneath the roots), with modes, owners and times. A directory
    /// already at `to` is kept: the copy is built under a hidden name
    /// beside it and renamed into place once complete and synced, and a
    /// partial copy left by a crash is removed and made again.
    pub fn copy_tree(&self, from: impl AsRef<Path>, to: impl AsRef<Path>) -> Result<Skipped> {
        let (from, to) = (from.as_ref(), to.as_ref());
        if let Some(existing) = self.open_existing(to)? {
            if !existing.stat()?.is_dir() {
                return Err(HostError::Refused(format!(
                    "{} exists and is not a directory",
                    to.display()
                )));
            }
            return Ok(Skipped::default());
        }
        let source = self.open(from)?;
        let root = source.stat()?;
        if !root.is_dir() {
            return Err(HostError::Refused(format!(
                "{} is not a directory",
                from.display()
            )));
        }
        let src = source.reopen(OFlags::RDONLY | OFlags::DIRECTORY)?;
        let (parent, name) = self.parent(to, true)?;
        let mut partial = std::ffi::OsString::from(".");
        partial.push(&name);
        partial.push(".partial");
        match std::fs::remove_dir_all(beneath::proc_child(parent.fd(), &partial)) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(HostError::io("remove partial copy", to, e)),
        }
        let io = |op, e: Errno| HostError::io(op, to, e.into());
        rustix::fs::mkdirat(parent.fd(), &partial, Mode::from_raw_mode(0o700))
            .map_err(|e| io("create copy", e))?;
        let dst = open_dir(parent.fd(), &partial).map_err(|e| io("open copy", e))?;
        let mut skipped = Skipped::default();
        copy_dir(src.as_fd(), dst.as_fd(), root.dev, 0, &mut skipped)
            .map_err(|e| HostError::io("copy", from, e))?;
        let st = rustix::fs::fstat(&src).map_err(|e| HostError::io("inspect", from, e.into()))?;
        set_meta(dst.as_fd(), &st).map_err(|e| io("copy attributes to", e))?;
        rustix::fs::syncfs(&dst).map_err(|e| io("sync copy", e))?;
        rustix::fs::renameat(parent.fd(), &partial, parent.fd(), &name)
            .map_err(|e| io("rename copy into", e))?;
        sync_dir(&parent)?;
        Ok(skipped)
    }
}

fn regular_len(o: &Opened) -> Result<u64> {
    if o.stat()?.kind != FileType::RegularFile {
        return Err(HostError::Refused(format!(
            "{} is not a regular file",
            o.path().display()
        )));
    }
    let f = o.reopen(OFlags::RDONLY)?;
    f.metadata()
        .map(|m| m.len())
        .map_err(|e| HostError::io("inspect", o.path(), e))
}

fn sync_dir(dir: &Opened) -> Result<()> {
    rustix::fs::fsync(dir.reopen(OFlags::RDONLY | OFlags::DIRECTORY)?)
        .map_err(|e| HostError::io("sync directory", dir.path(), e.into()))
}

fn open_dir(at: BorrowedFd<'_>, name: &OsStr) -> std::result::Result<OwnedFd, Errno> {
    rustix::fs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Copies `len` bytes of `src` into the empty `dst`: a reflink when the
/// filesystem shares blocks, else the data extents only (holes stay holes).
fn copy_data(src: &impl AsFd, dst: &impl AsFd, len: u64) -> io::Result<()> {
    if rustix::fs::ioctl_ficlone(dst, src).is_ok() {
        return Ok(());
    }
    rustix::fs::ftruncate(dst, len)?;
    let mut offset = 0;
    while offset < len {
        let data = match rustix::fs::seek(src, SeekFrom::Data(offset)) {
            Ok(d) => d,
            Err(Errno::NXIO) => break,
            // No SEEK_DATA here: treat the rest as data.
            Err(Errno::INVAL) => offset,
            Err(e) => return Err(e.into()),
        };
        let hole = match rustix::fs::seek(src, SeekFrom::Hole(data)) {
            Ok(h) => h.min(len),
            Err(_) => len,
        };
        copy_range(src, dst, data, hole)?;
        offset = hole;
    }
    Ok(())
}

/// Copies bytes `start..end` at the same offsets.
fn copy_range(src: &impl AsFd, dst: &impl AsFd, start: u64, end: u64) -> io::Result<()> {
    let (mut from, mut to) = (start, start);
    while from < end {
        let chunk = usize::try_from(end - from)
            .unwrap_or(usize::MAX)
            .min(1 << 30);
        match rustix::fs::copy_file_range(src, Some(&mut from), dst, Some(&mut to), chunk) {
            Ok(0) => break,
            Ok(_) => {}
            Err(Errno::XDEV | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
                return copy_by_reading(src, dst, from, end);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn copy_by_reading(src: &impl AsFd, dst: &impl AsFd, mut at: u64, end: u64) -> io::Result<()> {
    let mut buf = vec![0u8; 1 << 20];
    while at < end {
        let want = usize::try_from(end - at)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = rustix::io::pread(src, &mut buf[..want], at)?;
        if n == 0 {
            break;
        }
        let mut written = 0;
        while written < n {
            written += rustix::io::pwrite(dst, &buf[written..n], at + written as u64)?;
        }
        at += n as u64;
    }
    Ok(())
}

/// Owner first (a chown clears set-id bits), then mode, then times.
fn set_meta(fd: BorrowedFd<'_>, st: &rustix::fs::Stat) -> std::result::Result<(), Errno> {
    rustix::fs::fchown(
        fd,
        Some(rustix::fs::Uid::from_raw(st.st_uid)),
        Some(rustix::fs::Gid::from_raw(st.st_gid)),
    )?;
    rustix::fs::fchmod(fd, Mode::from_raw_mode(st.st_mode & 0o7777))?;
    rustix::fs::futimens(fd, &times(st))
}

fn times(st: &rustix::fs::Stat) -> Timestamps {
    Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: st.st_atime,
            tv_nsec: st.st_atime_nsec as _,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: st.st_mtime,
            tv_nsec: st.st_mtime_nsec as _,
        },
    }
}

/// Copies the entries of directory `src` into the empty directory `dst`.
fn copy_dir(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    dev: u64,
    depth: usize,
    skipped: &mut Skipped,
) -> io::Result<()> {
    if depth >= MAX_DEPTH {
        return Err(io::Error::other(format!(
            "directories nest deeper than {MAX_DEPTH} levels"
        )));
    }
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::read_from(src)? {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(CString::from(entry.file_name()));
        }
    }
    names.sort();
    for name in names {
        copy_entry(src, dst, &name, dev, depth, skipped)?;
    }
    Ok(())
}

fn copy_entry(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    name: &CString,
    dev: u64,
    depth: usize,
    skipped: &mut Skipped,
) -> io::Result<()> {
    let st = rustix::fs::statat(src, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)?;
    if st.st_dev != dev {
        skipped.mounted += 1;
        return Ok(());
    }
    let os = OsStr::from_bytes(name.as_bytes());
    let nofollow = AtFlags::SYMLINK_NOFOLLOW;
    match FileType::from_raw_mode(st.st_mode) {
        FileType::Directory => {
            rustix::fs::mkdirat(dst, name.as_c_str(), Mode::from_raw_mode(0o700))?;
            let (s, d) = (open_dir(src, os)?, open_dir(dst, os)?);
            if rustix::fs::fstat(&s)?.st_ino != st.st_ino {
                return Err(io::Error::other("a directory changed while it was copied"));
            }
            copy_dir(s.as_fd(), d.as_fd(), dev, depth + 1, skipped)?;
            set_meta(d.as_fd(), &st)?;
        }
        FileType::RegularFile => {
            // O_NONBLOCK: should the file be swapped for a FIFO since the
            // stat, opening it must not hang; it is checked again below.
            let s = rustix::fs::openat(
                src,
                name.as_c_str(),
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            let now = rustix::fs::fstat(&s)?;
            if FileType::from_raw_mode(now.st_mode) != FileType::RegularFile {
                return Err(io::Error::other("a file changed type while it was copied"));
            }
            let d = rustix::fs::openat(
                dst,
                name.as_c_str(),
                OFlags::CREATE | OFlags::EXCL | OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )?;
            copy_data(&s, &d, now.st_size as u64)?;
            set_meta(d.as_fd(), &now)?;
        }
        FileType::Symlink => {
            let target = rustix::fs::readlinkat(src, name.as_c_str(), Vec::new())?;
            rustix::fs::symlinkat(target.as_c_str(), dst, name.as_c_str())?;
            link_meta(dst, name, &st, nofollow)?;
        }
        FileType::Fifo => {
            rustix::fs::mknodat(
                dst,
                name.as_c_str(),
                FileType::Fifo,
                Mode::from_raw_mode(0o600),
                0,
            )?;
            link_meta(dst, name, &st, nofollow)?;
            rustix::fs::chmodat(
                dst,
                name.as_c_str(),
                Mode::from_raw_mode(st.st_mode & 0o7777),
                AtFlags::empty(),
            )?;
        }
        _ => skipped.special += 1,
    }
    Ok(())
}

/// Owner and times of a link or FIFO, by name (without following it).
fn link_meta(
    dst: BorrowedFd<'_>,
    name: &CString,
    st: &rustix::fs::Stat,
    flags: AtFlags,
) -> io::Result<()> {
    rustix::fs::chownat(
        dst,
        name.as_c_str(),
        Some(rustix::fs::Uid::from_raw(st.st_uid)),
        Some(rustix::fs::Gid::from_raw(st.st_gid)),
        flags,
    )?;
    rustix::fs::utimensat(dst, name.as_c_str(), &times(st), flags)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    use super::*;

    #[test]
    fn an_image_copy_keeps_data_and_holes_and_an_existing_copy() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new([dir.path()]).unwrap();
        let (from, to) = (dir.path().join("v.img"), dir.path().join("snaps/s.img"));
        let f = std::fs::File::create(&from).unwrap();
        f.set_len(64 << 20).unwrap();
        rustix::io::pwrite(&f, b"first", 0).unwrap();
        rustix::io::pwrite(&f, b"last", (64 << 20) - 4).unwrap();
        assert_eq!(host.copy_image(&from, &to).unwrap(), 64 << 20);
        let copy = std::fs::read(&to).unwrap();
        assert_eq!(&copy[..5], b"first");
        assert_eq!(&copy[copy.len() - 4..], b"last");
        assert!(copy[5..copy.len() - 4].iter().all(|b| *b == 0));
        let allocated = std::fs::metadata(&to).unwrap().blocks() * 512;
        assert!(allocated < 8 << 20, "holes stay holes: {allocated} bytes");
        rustix::io::pwrite(&f, b"later", 0).unwrap();
        host.copy_image(&from, &to).unwrap();
        assert_eq!(&std::fs::read(&to).unwrap()[..5], b"first", "kept");
        let e = host
            .copy_image(dir.path().join("snaps"), dir.path().join("x.img"))
            .unwrap_err();
        assert!(e.is_refusal(), "{e}");
    }

    #[test]
    fn a_tree_copy_keeps_modes_and_links_and_follows_none() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new([dir.path()]).unwrap();
        let (from, to) = (dir.path().join("vol"), dir.path().join("snaps/s"));
        std::fs::create_dir_all(from.join("a/b")).unwrap();
        std::fs::write(from.join("a/b/data"), b"hello").unwrap();
        std::fs::set_permissions(
            from.join("a/b/data"),
            std::fs::Permissions::from_mode(0o640),
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc/passwd", from.join("escape")).unwrap();
        std::os::unix::fs::symlink("a/b/data", from.join("inside")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            from.join("pipe"),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // A partial copy left by a crash is made again.
        std::fs::create_dir_all(dir.path().join("snaps/.s.partial/junk")).unwrap();
        assert_eq!(host.copy_tree(&from, &to).unwrap(), Skipped::default());
        assert_eq!(std::fs::read(to.join("a/b/data")).unwrap(), b"hello");
        let mode = std::fs::metadata(to.join("a/b/data")).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o640);
        assert_eq!(
            std::fs::read_link(to.join("escape")).unwrap(),
            Path::new("/etc/passwd"),
            "a link is copied as a link"
        );
        assert!(
            std::fs::symlink_metadata(to.join("escape"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(to.join("inside")).unwrap(), b"hello");
        assert!(!dir.path().join("snaps/.s.partial").exists());
        assert!(!to.join("junk").exists());
        // An existing copy is kept.
        std::fs::write(from.join("a/b/data"), b"changed").unwrap();
        host.copy_tree(&from, &to).unwrap();
        assert_eq!(std::fs::read(to.join("a/b/data")).unwrap(), b"hello");
    }

    #[test]
    fn a_tree_copy_refuses_a_linked_source_and_a_source_outside_the_roots() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new([dir.path().join("root")]).unwrap();
        let root = dir.path().join("root");
        std::os::unix::fs::symlink("/etc", root.join("vol")).unwrap();
        let e = host
            .copy_tree(root.join("vol"), root.join("s"))
            .unwrap_err();
        assert!(e.is_refusal(), "{e}");
        assert!(host.copy_tree("/etc", root.join("s")).is_err());
        assert!(!root.join("s").exists());
    }
}
