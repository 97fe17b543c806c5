//! Volume image files: created sparse and whole (or not at all), grown.

use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

use crate::{Host, HostError, Result};

impl Host {
    /// Refuses `size` bytes on the filesystem holding directory `dir`
    /// before anything is written: bigger than the whole filesystem is out
    /// of range, bigger than what is free is no space.
    /// Whether a file of `size` bytes, `more` of them not yet allocated,
    /// fits in the filesystem of `dir`. Messages quote `size`, the number
    /// the caller asked for.
    pub(crate) fn check_fits(&self, dir: &crate::Opened, size: u64, more: u64) -> Result<()> {
        let s = rustix::fs::fstatvfs(dir.fd())
            .map_err(|e| HostError::io("statvfs", dir.path(), e.into()))?;
        let frag = s.f_frsize.max(1);
        let (total, free) = (
            s.f_blocks.saturating_mul(frag),
            s.f_bavail.saturating_mul(frag),
        );
        if size > total {
            return Err(HostError::OutOfRange(format!(
                "{size} bytes is more than the whole filesystem of {} holds ({total} bytes)",
                dir.path().display()
            )));
        }
        if more > free {
            let needed = if more == size {
                String::new()
            } else {
                format!(" ({more} of them still to be allocated)")
            };
            return Err(HostError::NoSpace(format!(
                "{size} bytes{needed} do not fit in {}: {free} bytes are free",
                dir.path().display()
            )));
        }
        Ok(())
    }

    /// Creates a sparse image of `size` bytes at `path` (beneath a root),
    /// unless one is there already; returns the image's size. The image
    /// appears whole or not at all: it is made unnamed (O_TMPFILE), sized,
    /// synced, and only then linked in, so a failure or a crash leaves
    /// nothing behind.
    pub fn create_image(&self, path: impl AsRef<Path>, size: u64) -> Result<u64> {
        let path = path.as_ref();
        if let Some(existing) = self.open_existing(path)? {
            let st = existing.stat()?;
            if st.kind != rustix::fs::FileType::RegularFile {
                return Err(HostError::Refused(format!(
                    "{} exists and is not an image file",
                    path.display()
                )));
            }
            let f = existing.reopen(OFlags::RDONLY)?;
            return f
                .metadata()
                .map(|m| m.len())
                .map_err(|e| HostError::io("inspect", path, e));
        }
        let (dir, name) = self.parent(path, true)?;
        self.check_fits(&dir, size, size)?;
        let io = |op, e: Errno| HostError::io(op, path, e.into());
        let fd = rustix::fs::openat(
            dir.fd(),
            ".",
            OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io("create image", e))?;
        let f = std::fs::File::from(fd);
        f.set_len(size)
            .and_then(|_| f.sync_all())
            .map_err(|e| HostError::io("size image", path, e))?;
        let unnamed = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f));
        match rustix::fs::linkat(
            rustix::fs::CWD,
            unnamed.as_str(),
            dir.fd(),
            &name,
            AtFlags::SYMLINK_FOLLOW,
        ) {
            Ok(()) => {}
            // Another create of the same volume won the race: use its image.
            Err(Errno::EXIST) => return self.create_image(path, size),
            Err(e) => return Err(io("link image", e)),
        }
        rustix::fs::fsync(dir.reopen(OFlags::RDONLY | OFlags::DIRECTORY)?)
            .map_err(|e| io("sync directory of", e))?;
        Ok(size)
    }

    /// Grows the image at `path` to `size` bytes (never shrinks it), after
    /// checking the filesystem has room for the growth.
    pub fn grow_image(&self, path: impl AsRef<Path>, size: u64) -> Result<()> {
        let path = path.as_ref();
        let image = self.open(path)?;
        let f = image.reopen(OFlags::RDWR)?;
        let io = |e| HostError::io("grow image", path, e);
        let len = f.metadata().map_err(io)?.len();
        if len >= size {
            return Ok(());
        }
        let (dir, _) = self.parent(path, false)?;
        self.check_fits(&dir, size, size - len)?;
        f.set_len(size).and_then(|_| f.sync_all()).map_err(io)
    }

    /// Writes `bytes` as a new file at `path` (its parents created), whole
    /// or not at all; a file already there is kept. Returns false when it
    /// was kept.
    pub fn write_new(&self, path: impl AsRef<Path>, bytes: &[u8]) -> Result<bool> {
        let path = path.as_ref();
        if self.open_existing(path)?.is_some() {
            return Ok(false);
        }
        let (dir, name) = self.parent(path, true)?;
        let io = |op, e: std::io::Error| HostError::io(op, path, e);
        let fd = rustix::fs::openat(
            dir.fd(),
            ".",
            OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io("create", e.into()))?;
        let mut f = std::fs::File::from(fd);
        std::io::Write::write_all(&mut f, bytes)
            .and_then(|_| f.sync_all())
            .map_err(|e| io("write", e))?;
        let unnamed = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&f));
        match rustix::fs::linkat(
            rustix::fs::CWD,
            unnamed.as_str(),
            dir.fd(),
            &name,
            AtFlags::SYMLINK_FOLLOW,
        ) {
            Ok(()) => {}
            Err(Errno::EXIST) => return Ok(false),
            Err(e) => return Err(io("link", e.into())),
        }
        rustix::fs::fsync(dir.reopen(OFlags::RDONLY | OFlags::DIRECTORY)?)
            .map_err(|e| io("sync directory of", e.into()))?;
        Ok(true)
    }

    /// The contents of the regular file at `path`, at most `max` bytes, or
    /// `None` when there is none.
    pub fn read_small(&self, path: impl AsRef<Path>, max: u64) -> Result<Option<Vec<u8>>> {
        let path = path.as_ref();
        let Some(file) = self.open_existing(path)? else {
            return Ok(None);
        };
        if file.stat()?.kind != rustix::fs::FileType::RegularFile {
            return Err(HostError::Refused(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        let f = file.reopen(OFlags::RDONLY)?;
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::Read::take(f, max + 1), &mut bytes)
            .map_err(|e| HostError::io("read", path, e))?;
        if bytes.len() as u64 > max {
            return Err(HostError::Refused(format!(
                "{} is larger than {max} bytes",
                path.display()
            )));
        }
        Ok(Some(bytes))
    }

    /// The names in directory `dir`, sorted (`.` and `..` left out); an
    /// absent directory has none. Read through the directory's own
    /// descriptor, opened beneath the roots.
    pub fn entries(&self, dir: impl AsRef<Path>) -> Result<Vec<String>> {
        let dir = dir.as_ref();
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd: std::os::fd::OwnedFd = match self.root_fd(dir) {
            Some(root) => rustix::fs::openat(root, ".", flags, Mode::empty())
                .map_err(|e| HostError::io("open", dir, e.into()))?,
            None => {
                let Some(opened) = self.open_existing(dir)? else {
                    return Ok(Vec::new());
                };
                if !opened.stat()?.is_dir() {
                    return Err(HostError::Refused(format!(
                        "{} is not a directory",
                        dir.display()
                    )));
                }
                opened.reopen(OFlags::RDONLY | OFlags::DIRECTORY)?.into()
            }
        };
        let read =
            rustix::fs::Dir::read_from(&fd).map_err(|e| HostError::io("read", dir, e.into()))?;
        let mut names = Vec::new();
        for entry in read {
            let entry = entry.map_err(|e| HostError::io("read", dir, e.into()))?;
            let name = entry.file_name().to_string_lossy();
            if name != "." && name != ".." {
                names.push(name.into_owned());
            }
        }
        names.sort();
        Ok(names)
    }

    /// The size in bytes of regular file `path`, or `None` when there is
    /// nothing there.
    pub fn file_size(&self, path: impl AsRef<Path>) -> Result<Option<u64>> {
        let path = path.as_ref();
        let Some(file) = self.open_existing(path)? else {
            return Ok(None);
        };
        let stat =
            rustix::fs::fstat(file.fd()).map_err(|e| HostError::io("stat", path, e.into()))?;
        if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
            return Err(HostError::Refused(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        Ok(Some(stat.st_size as u64))
    }
}
