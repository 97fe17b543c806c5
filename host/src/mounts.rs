//! mount(2), bind mounts, read-only remounts, unmounts and mountinfo.

use std::path::Path;

use rustix::mount::{MountFlags, UnmountFlags};
use volplane_core::mountinfo::{self, MountEntry};

use crate::{Host, HostError, Result};

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

impl Host {
    /// The mounts of this process's mount namespace.
    pub fn mountinfo(&self) -> Result<Vec<MountEntry>> {
        let p = Path::new("/proc/self/mountinfo");
        let text = std::fs::read_to_string(p).map_err(|e| HostError::io("read", p, e))?;
        mountinfo::parse(&text).map_err(|e| HostError::Refused(e.to_string()))
    }

    /// True when something is mounted exactly at `path`.
    pub fn is_mount_point(&self, path: impl AsRef<Path>) -> Result<bool> {
        let p = path.as_ref().display().to_string();
        Ok(self.mountinfo()?.iter().any(|m| m.mount_point == p))
    }

    /// The visible mount at `path`, if any.
    pub fn mount_at(&self, path: impl AsRef<Path>) -> Result<Option<MountEntry>> {
        let p = path.as_ref().display().to_string();
        Ok(mountinfo::find_mount(&self.mountinfo()?, &p).cloned())
    }

    /// Mounts filesystem `fs_type` from `device` at `target` (created if
    /// missing). Mounting again what is already mounted there is a no-op.
    pub fn mount(
        &self,
        device: impl AsRef<Path>,
        target: impl AsRef<Path>,
        fs_type: &str,
        flags: &[String],
        readonly: bool,
    ) -> Result<()> {
        let device = device.as_ref();
        let target = self.create_dir(target)?;
        if let Some(m) = self.mount_at(&target)? {
            if Path::new(&m.source) == device {
                return Ok(());
            }
            return Err(HostError::Refused(format!(
                "{} is already mounted from {}, not {}",
                target.display(),
                m.source,
                device.display()
            )));
        }
        let (bits, data) = split_flags(flags, readonly);
        let data = std::ffi::CString::new(data)
            .map_err(|_| HostError::Refused("mount options contain a NUL byte".into()))?;
        rustix::mount::mount(device, &target, fs_type, bits, Some(data.as_c_str()))
            .map_err(|e| HostError::io("mount", &target, e.into()))
    }

    /// Bind-mounts `source` at `target` (created as a directory, or as a file
    /// when `source` is not a directory), read-only when asked. Repeating an
    /// existing bind is a no-op.
    pub fn bind(
        &self,
        source: impl AsRef<Path>,
        target: impl AsRef<Path>,
        readonly: bool,
    ) -> Result<()> {
        let source = source.as_ref();
        let is_dir = std::fs::metadata(source)
            .map_err(|e| HostError::io("inspect", source, e))?
            .is_dir();
        let target = if is_dir {
            self.create_dir(target)?
        } else {
            self.create_file(target)?
        };
        if self.is_mount_point(&target)? {
            return Ok(());
        }
        rustix::mount::mount_bind(source, &target)
            .map_err(|e| HostError::io("bind mount", &target, e.into()))?;
        if readonly {
            self.remount_readonly(&target)?;
        }
        Ok(())
    }

    /// Remounts the bind mount at `target` read-only.
    pub fn remount_readonly(&self, target: impl AsRef<Path>) -> Result<()> {
        let target = self.confine(target)?;
        rustix::mount::mount_remount(&target, MountFlags::BIND | MountFlags::RDONLY, "")
            .map_err(|e| HostError::io("remount read-only", &target, e.into()))
    }

    /// Unmounts everything stacked at `target`; nothing mounted is fine.
    pub fn unmount(&self, target: impl AsRef<Path>) -> Result<()> {
        let target = self.confine(target)?;
        while self.is_mount_point(&target)? {
            rustix::mount::unmount(&target, UnmountFlags::empty())
                .map_err(|e| HostError::io("unmount", &target, e.into()))?;
        }
        Ok(())
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
