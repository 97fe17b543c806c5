//! Loop devices through the kernel's LOOP_* ioctls (no libclang, no losetup).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::{Host, HostError, Result};

const LOOP_SET_FD: libc::c_ulong = 0x4C00;
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
const LOOP_SET_STATUS64: libc::c_ulong = 0x4C04;
const LOOP_SET_CAPACITY: libc::c_ulong = 0x4C07;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
const LO_NAME_SIZE: usize = 64;

#[repr(C)]
#[derive(Clone, Copy)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; LO_NAME_SIZE],
    lo_crypt_name: [u8; LO_NAME_SIZE],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

fn info_for(file: &Path) -> LoopInfo64 {
    let mut name = [0u8; LO_NAME_SIZE];
    let bytes = file.as_os_str().as_encoded_bytes();
    let n = bytes.len().min(LO_NAME_SIZE - 1);
    name[..n].copy_from_slice(&bytes[..n]);
    LoopInfo64 {
        lo_device: 0,
        lo_inode: 0,
        lo_rdevice: 0,
        lo_offset: 0,
        lo_sizelimit: 0,
        lo_number: 0,
        lo_encrypt_type: 0,
        lo_encrypt_key_size: 0,
        lo_flags: 0,
        lo_file_name: name,
        lo_crypt_name: [0; LO_NAME_SIZE],
        lo_encrypt_key: [0; 32],
        lo_init: [0; 2],
    }
}

fn open_rw(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| HostError::io("open", path, e))
}

fn ioctl(
    file: &File,
    path: &Path,
    op: &'static str,
    request: libc::c_ulong,
    arg: libc::c_ulong,
) -> Result<libc::c_int> {
    // SAFETY: every request used here takes an integer or a pointer to a
    // properly sized, live #[repr(C)] value, as the kernel's loop ABI defines.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), request as _, arg) };
    if r < 0 {
        Err(HostError::io(op, path, std::io::Error::last_os_error()))
    } else {
        Ok(r)
    }
}

/// The loop device currently backed by `file`, if any (read from sysfs).
pub fn find(file: &Path) -> Option<PathBuf> {
    let file = file.canonicalize().ok()?;
    let want = file.as_os_str().as_encoded_bytes();
    let entries = std::fs::read_dir("/sys/block").ok()?;
    let mut found: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("loop"))
        .filter(|n| {
            std::fs::read(format!("/sys/block/{n}/loop/backing_file"))
                .map(|b| b.strip_suffix(b"\n").unwrap_or(&b) == want)
                .unwrap_or(false)
        })
        .collect();
    found.sort();
    found.first().map(|n| PathBuf::from(format!("/dev/{n}")))
}

/// Size in bytes of block device `device`.
pub fn size(device: &Path) -> Result<u64> {
    let f = File::open(device).map_err(|e| HostError::io("open", device, e))?;
    let mut bytes: u64 = 0;
    ioctl(
        &f,
        device,
        "BLKGETSIZE64",
        BLKGETSIZE64,
        &mut bytes as *mut u64 as libc::c_ulong,
    )?;
    Ok(bytes)
}

fn is_loop_device(device: &Path) -> bool {
    device
        .to_str()
        .and_then(|s| s.strip_prefix("/dev/loop"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

impl Host {
    /// Attaches `file` (inside the roots) to a free loop device and returns
    /// the device; if a loop device already backs `file`, returns that one.
    pub fn loop_attach(&self, file: impl AsRef<Path>) -> Result<PathBuf> {
        let file = self.confine(file)?;
        if let Some(dev) = find(&file) {
            return Ok(dev);
        }
        let backing = open_rw(&file)?;
        let control_path = Path::new("/dev/loop-control");
        let control = open_rw(control_path)?;
        let mut last = None;
        for _ in 0..16 {
            let n = ioctl(
                &control,
                control_path,
                "LOOP_CTL_GET_FREE",
                LOOP_CTL_GET_FREE,
                0,
            )?;
            let dev = PathBuf::from(format!("/dev/loop{n}"));
            let loopf = open_rw(&dev)?;
            let config = LoopConfig {
                fd: backing.as_raw_fd() as u32,
                block_size: 0,
                info: info_for(&file),
                reserved: [0; 8],
            };
            match ioctl(
                &loopf,
                &dev,
                "LOOP_CONFIGURE",
                LOOP_CONFIGURE,
                &config as *const LoopConfig as libc::c_ulong,
            ) {
                Ok(_) => return Ok(dev),
                Err(HostError::Io { source, .. }) if source.raw_os_error() == Some(libc::EBUSY) => {
                    last = Some(source);
                    continue;
                }
                Err(HostError::Io { source, .. })
                    if matches!(
                        source.raw_os_error(),
                        Some(libc::EINVAL) | Some(libc::ENOTTY)
                    ) =>
                {
                    // Kernels before 5.8: LOOP_SET_FD, then LOOP_SET_STATUS64.
                    match ioctl(
                        &loopf,
                        &dev,
                        "LOOP_SET_FD",
                        LOOP_SET_FD,
                        backing.as_raw_fd() as libc::c_ulong,
                    ) {
                        Ok(_) => {}
                        Err(HostError::Io { source, .. })
                            if source.raw_os_error() == Some(libc::EBUSY) =>
                        {
                            last = Some(source);
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                    let info = info_for(&file);
                    if let Err(e) = ioctl(
                        &loopf,
                        &dev,
                        "LOOP_SET_STATUS64",
                        LOOP_SET_STATUS64,
                        &info as *const LoopInfo64 as libc::c_ulong,
                    ) {
                        let _ = ioctl(&loopf, &dev, "LOOP_CLR_FD", LOOP_CLR_FD, 0);
                        return Err(e);
                    }
                    return Ok(dev);
                }
                Err(e) => return Err(e),
            }
        }
        Err(HostError::io(
            "attach loop device for",
            &file,
            last.unwrap_or_else(|| std::io::Error::other("no free loop device")),
        ))
    }

    /// Detaches the loop device backed by `file`, if any. Refuses while the
    /// device is mounted anywhere.
    pub fn loop_detach(&self, file: impl AsRef<Path>) -> Result<()> {
        let file = self.confine(file)?;
        let Some(dev) = find(&file) else {
            return Ok(());
        };
        let name = dev.display().to_string();
        if let Some(m) = self.mountinfo()?.into_iter().find(|m| m.source == name) {
            return Err(HostError::Refused(format!(
                "{name} (backing {}) is still mounted at {}; unmount it before detaching",
                file.display(),
                m.mount_point
            )));
        }
        let f = open_rw(&dev)?;
        match ioctl(&f, &dev, "LOOP_CLR_FD", LOOP_CLR_FD, 0) {
            Ok(_) => Ok(()),
            Err(HostError::Io { source, .. }) if source.raw_os_error() == Some(libc::ENXIO) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Makes loop device `device` see the current size of its backing file.
    pub fn loop_refresh(&self, device: impl AsRef<Path>) -> Result<()> {
        let device = device.as_ref();
        if !is_loop_device(device) {
            return Err(HostError::Refused(format!(
                "{} is not a loop device",
                device.display()
            )));
        }
        let f = open_rw(device)?;
        ioctl(&f, device, "LOOP_SET_CAPACITY", LOOP_SET_CAPACITY, 0).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_device_names() {
        assert!(is_loop_device(Path::new("/dev/loop0")));
        assert!(is_loop_device(Path::new("/dev/loop12")));
        assert!(!is_loop_device(Path::new("/dev/loop")));
        assert!(!is_loop_device(Path::new("/dev/sda")));
        assert!(!is_loop_device(Path::new("/dev/loop1/../sda")));
    }

    #[test]
    fn attach_refresh_detach_when_root() {
        if !rustix::process::geteuid().is_root() || !Path::new("/dev/loop-control").exists() {
            eprintln!("skipping attach_refresh_detach_when_root: needs root and /dev/loop-control");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new([dir.path()]).unwrap();
        let img = dir.path().join("v.img");
        File::create(&img).unwrap().set_len(8 << 20).unwrap();
        let dev = host.loop_attach(&img).unwrap();
        assert_eq!(host.loop_attach(&img).unwrap(), dev, "attach is idempotent");
        assert_eq!(size(&dev).unwrap(), 8 << 20);
        OpenOptions::new()
            .write(true)
            .open(&img)
            .unwrap()
            .set_len(16 << 20)
            .unwrap();
        host.loop_refresh(&dev).unwrap();
        assert_eq!(size(&dev).unwrap(), 16 << 20);
        host.loop_detach(&img).unwrap();
        assert_eq!(find(&img), None);
        host.loop_detach(&img).unwrap();
    }
}
