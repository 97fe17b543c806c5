//! Loop devices through the kernel's LOOP_* ioctls (no libclang, no losetup).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use rustix::fs::OFlags;

use crate::mounts::Device;
use crate::{Host, HostError, Opened, Result};

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

/// The ioctls used here, each with the argument the kernel's ABI gives it,
/// so no caller can pass an integer the kernel would treat as a pointer.
enum Request<'a> {
    SetFd(&'a File),
    ClearFd,
    SetStatus(&'a LoopInfo64),
    GetStatus(&'a mut LoopInfo64),
    SetCapacity,
    Configure(&'a LoopConfig),
    GetFree,
    Size(&'a mut u64),
}

impl Request<'_> {
    fn name(&self) -> &'static str {
        match self {
            Request::SetFd(_) => "LOOP_SET_FD",
            Request::ClearFd => "LOOP_CLR_FD",
            Request::SetStatus(_) => "LOOP_SET_STATUS64",
            Request::GetStatus(_) => "LOOP_GET_STATUS64",
            Request::SetCapacity => "LOOP_SET_CAPACITY",
            Request::Configure(_) => "LOOP_CONFIGURE",
            Request::GetFree => "LOOP_CTL_GET_FREE",
            Request::Size(_) => "BLKGETSIZE64",
        }
    }
}

fn ioctl(file: &File, path: &Path, request: Request<'_>) -> Result<libc::c_int> {
    let name = request.name();
    let (code, arg): (libc::c_ulong, libc::c_ulong) = match request {
        Request::SetFd(f) => (0x4C00, f.as_raw_fd() as libc::c_ulong),
        Request::ClearFd => (0x4C01, 0),
        Request::SetStatus(i) => (0x4C04, i as *const LoopInfo64 as libc::c_ulong),
        Request::GetStatus(i) => (0x4C05, i as *mut LoopInfo64 as libc::c_ulong),
        Request::SetCapacity => (0x4C07, 0),
        Request::Configure(c) => (0x4C0A, c as *const LoopConfig as libc::c_ulong),
        Request::GetFree => (0x4C82, 0),
        Request::Size(n) => (0x8008_1272, n as *mut u64 as libc::c_ulong),
    };
    // SAFETY: each request carries the argument its ioctl takes: an integer,
    // or a pointer to a live, properly sized #[repr(C)] value borrowed for
    // the duration of the call (mutably when the kernel writes it).
    let r = unsafe { libc::ioctl(file.as_raw_fd(), code as _, arg) };
    if r < 0 {
        Err(HostError::io(name, path, std::io::Error::last_os_error()))
    } else {
        Ok(r)
    }
}

fn errno(e: &HostError) -> Option<i32> {
    match e {
        HostError::Io { source, .. } => source.raw_os_error(),
        _ => None,
    }
}

/// The first loop device (by number) whose backing file is the file with
/// device `dev` and inode `ino`, as the kernel records them
/// (`LOOP_GET_STATUS64`).
///
/// The path in sysfs' `loop/backing_file` is not used: the kernel prints it
/// as seen through the mount the file was opened by, so a device attached in
/// one container reads as another path in the next (and as a path relative
/// to nothing once that container is gone). A driver restarted in a new
/// pod would then miss its own device, attach the image a second time, and
/// never detach the first.
pub fn find_backing(dev: u64, ino: u64) -> Option<PathBuf> {
    let mut numbers: Vec<u32> = std::fs::read_dir("/sys/block")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("loop")?.parse().ok())
        .collect();
    numbers.sort_unstable();
    numbers.into_iter().find_map(|n| {
        let path = PathBuf::from(format!("/dev/loop{n}"));
        let fd = rustix::fs::open(
            &path,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK,
            rustix::fs::Mode::empty(),
        )
        .ok()?;
        let mut info = info_for(Path::new(""));
        ioctl(&File::from(fd), &path, Request::GetStatus(&mut info)).ok()?;
        (info.lo_device == dev && info.lo_inode == ino).then_some(path)
    })
}

/// The loop device backed by `file`, if any (see [`find_backing`]).
pub fn find(file: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let st = std::fs::metadata(file).ok()?;
    find_backing(st.dev(), st.ino())
}

fn size_of(f: &File, shown: &Path) -> Result<u64> {
    let mut bytes: u64 = 0;
    ioctl(f, shown, Request::Size(&mut bytes))?;
    Ok(bytes)
}

/// Size in bytes of block device `device`.
pub fn device_size(device: &Device) -> Result<u64> {
    size_of(&device.reopen(OFlags::RDONLY)?, device.path())
}

/// Size in bytes of the block device held as `file` (a raw-block target).
pub fn opened_size(file: &Opened) -> Result<u64> {
    size_of(&file.reopen(OFlags::RDONLY)?, file.path())
}

fn is_loop_device(device: &Path) -> bool {
    device
        .to_str()
        .and_then(|s| s.strip_prefix("/dev/loop"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// True when loop device `device` is backed by exactly the file `image`
/// holds (same device and inode, as the kernel reports them).
pub fn backs(device: &Device, image: &Opened) -> Result<bool> {
    if !is_loop_device(device.path()) {
        return Ok(false);
    }
    let f = device.reopen(OFlags::RDONLY)?;
    let mut info = info_for(Path::new(""));
    match ioctl(&f, device.path(), Request::GetStatus(&mut info)) {
        Ok(_) => {}
        Err(e) if errno(&e) == Some(libc::ENXIO) => return Ok(false),
        Err(e) => return Err(e),
    }
    let st = image.stat()?;
    Ok(info.lo_device == st.dev && info.lo_inode == st.ino)
}

impl Host {
    /// The loop device backed by the image at `image` (beneath a root), if
    /// one is: found by the kernel's own record of its backing file's
    /// device and inode, and proved again once opened.
    pub fn loop_device_of(&self, image: impl AsRef<Path>) -> Result<Option<Device>> {
        let image = image.as_ref();
        let Some(opened) = self.open_existing(image)? else {
            return Ok(None);
        };
        let st = opened.stat()?;
        let Some(dev) = find_backing(st.dev, st.ino) else {
            return Ok(None);
        };
        let dev = self.device(dev)?;
        Ok(backs(&dev, &opened)?.then_some(dev))
    }

    /// Attaches `file` (beneath a root) to a free loop device and returns
    /// the device; if a loop device already backs `file`, returns that one.
    pub fn loop_attach(&self, file: impl AsRef<Path>) -> Result<PathBuf> {
        let opened = self.open(file.as_ref())?;
        let file = self.confine(file)?;
        if let Some(dev) = self.loop_device_of(opened.path())? {
            return Ok(dev.path().to_path_buf());
        }
        let backing = opened.reopen(OFlags::RDWR)?;
        let control_path = Path::new("/dev/loop-control");
        let control = open_rw(control_path)?;
        let mut last = None;
        for _ in 0..16 {
            let n = ioctl(&control, control_path, Request::GetFree)?;
            let dev = PathBuf::from(format!("/dev/loop{n}"));
            let loopf = open_rw(&dev)?;
            let config = LoopConfig {
                fd: backing.as_raw_fd() as u32,
                block_size: 0,
                info: info_for(&file),
                reserved: [0; 8],
            };
            match ioctl(&loopf, &dev, Request::Configure(&config)) {
                Ok(_) => return Ok(dev),
                Err(e) if errno(&e) == Some(libc::EBUSY) => {
                    last = Some(e);
                    continue;
                }
                Err(e) if matches!(errno(&e), Some(libc::EINVAL) | Some(libc::ENOTTY)) => {
                    // Kernels before 5.8: LOOP_SET_FD, then LOOP_SET_STATUS64.
                    match ioctl(&loopf, &dev, Request::SetFd(&backing)) {
                        Ok(_) => {}
                        Err(e) if errno(&e) == Some(libc::EBUSY) => {
                            last = Some(e);
                            continue;
                        }
                        Err(e) => return Err(e),
                    }
                    let info = info_for(&file);
                    if let Err(e) = ioctl(&loopf, &dev, Request::SetStatus(&info)) {
                        let _ = ioctl(&loopf, &dev, Request::ClearFd);
                        return Err(e);
                    }
                    return Ok(dev);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            HostError::io(
                "attach loop device for",
                &file,
                std::io::Error::other("no free loop device"),
            )
        }))
    }

    /// Detaches the loop device backed by `file`, if any. Refuses while the
    /// device is mounted anywhere.
    ///
    /// The device is opened exclusively to clear it: the kernel refuses
    /// (EBUSY) while a filesystem is mounted on it in any mount namespace.
    /// The driver's own mount table cannot show that — on a cluster the
    /// node plugin mounts in another container — and a loop device cleared
    /// while mounted is not refused by the kernel either, only detached
    /// later, when the filesystem lets go.
    pub fn loop_detach(&self, file: impl AsRef<Path>) -> Result<()> {
        let Some(dev) = self.loop_device_of(file.as_ref())? else {
            return Ok(());
        };
        let f = match dev.reopen(OFlags::RDWR | OFlags::EXCL) {
            Ok(f) => f,
            Err(e) if errno(&e) == Some(libc::EBUSY) => {
                return Err(HostError::Refused(format!(
                    "{} (backing {}) is in use: mounted (perhaps by another container or namespace) or held open exclusively; unmount it before detaching",
                    dev.path().display(),
                    file.as_ref().display(),
                )));
            }
            Err(e) => return Err(e),
        };
        match ioctl(&f, dev.path(), Request::ClearFd) {
            Ok(_) => Ok(()),
            Err(e) if errno(&e) == Some(libc::ENXIO) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Makes loop device `device` see the current size of its backing file.
    pub fn loop_refresh(&self, device: &Device) -> Result<()> {
        if !is_loop_device(device.path()) {
            return Err(HostError::Refused(format!(
                "{} is not a loop device",
                device.path().display()
            )));
        }
        let f = device.reopen(OFlags::RDWR)?;
        ioctl(&f, device.path(), Request::SetCapacity).map(|_| ())
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
        if !crate::can_run_as_root("attach_refresh_detach_when_root", true) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let host = Host::new([dir.path()]).unwrap();
        let img = dir.path().join("v.img");
        File::create(&img).unwrap().set_len(8 << 20).unwrap();
        let dev = host.loop_attach(&img).unwrap();
        assert_eq!(host.loop_attach(&img).unwrap(), dev, "attach is idempotent");
        let device = host.device(&dev).unwrap();
        assert!(backs(&device, &host.open(&img).unwrap()).unwrap());
        assert_eq!(device_size(&device).unwrap(), 8 << 20);
        OpenOptions::new()
            .write(true)
            .open(&img)
            .unwrap()
            .set_len(16 << 20)
            .unwrap();
        host.loop_refresh(&device).unwrap();
        assert_eq!(device_size(&device).unwrap(), 16 << 20);
        // Held as a mounted filesystem holds it (in whatever namespace):
        // refused, and still attached.
        let held = device.reopen(OFlags::RDONLY | OFlags::EXCL).unwrap();
        let e = host.loop_detach(&img).unwrap_err();
        assert!(e.is_refusal() && e.to_string().contains("in use"), "{e}");
        assert_eq!(find(&img).as_ref(), Some(&dev));
        drop(held);
        // Mounted: refused the same way.
        let formatted = std::process::Command::new("mkfs.ext4")
            .arg("-q")
            .arg(&dev)
            .status()
            .unwrap();
        assert!(formatted.success());
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        rustix::mount::mount(&dev, &mnt, "ext4", rustix::mount::MountFlags::empty(), None).unwrap();
        assert!(host.loop_detach(&img).unwrap_err().is_refusal());
        rustix::mount::unmount(&mnt, rustix::mount::UnmountFlags::empty()).unwrap();
        host.loop_detach(&img).unwrap();
        assert_eq!(find(&img), None);
        host.loop_detach(&img).unwrap();
    }

    /// A device attached through a mount that is gone since (a driver's
    /// container restarted) is still found through the file's own path,
    /// and found once: attach again gives the same device, detach frees it.
    #[test]
    fn a_device_attached_through_a_vanished_mount_is_still_ours_when_root() {
        if !crate::can_run_as_root("the vanished-mount loop test", true) {
            return;
        }
        use rustix::mount::UnmountFlags;
        let dir = tempfile::tempdir().unwrap();
        let (real, other) = (dir.path().join("real"), dir.path().join("other"));
        std::fs::create_dir_all(&real).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        File::create(real.join("v.img"))
            .unwrap()
            .set_len(8 << 20)
            .unwrap();
        rustix::mount::mount_bind(&real, &other).unwrap();
        let dev = Host::new([&other])
            .unwrap()
            .loop_attach(other.join("v.img"))
            .unwrap();
        rustix::mount::unmount(&other, UnmountFlags::DETACH).unwrap();
        let n = dev
            .display()
            .to_string()
            .trim_start_matches("/dev/loop")
            .to_string();
        let shown =
            std::fs::read_to_string(format!("/sys/block/loop{n}/loop/backing_file")).unwrap();
        assert_ne!(
            shown.trim_end(),
            real.join("v.img").display().to_string(),
            "the kernel shows another path"
        );
        let host = Host::new([&real]).unwrap();
        let img = real.join("v.img");
        assert_eq!(find(&img).as_ref(), Some(&dev));
        assert_eq!(
            host.loop_attach(&img).unwrap(),
            dev,
            "not attached a second time"
        );
        host.loop_detach(&img).unwrap();
        assert_eq!(find(&img), None);
    }
}
