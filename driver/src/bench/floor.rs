//! The syscall floor of a publish cycle: what NodePublish+NodeUnpublish
//! cost at the least — mkdir, a bind mount, umount, rmdir — in a plain loop
//! on this machine, printed beside the driver's figures so their ratio is
//! measured in one run.

use std::path::Path;
use std::time::{Duration, Instant};

use rustix::mount::{UnmountFlags, mount_bind, unmount};

/// The median of one mkdir + bind mount + umount + rmdir cycle under
/// `dir`, over `seconds`; why not, when it cannot run here.
pub fn publish_floor(dir: &Path, seconds: f64) -> Result<Duration, String> {
    let source = dir.join("volplane-bench-floor-source");
    let target = dir.join("volplane-bench-floor-target");
    std::fs::create_dir_all(&source).map_err(|e| format!("mkdir {}: {e}", source.display()))?;
    let mut times = Vec::new();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let result: Result<(), String> = (|| {
        while Instant::now() < deadline {
            let t = Instant::now();
            std::fs::create_dir(&target).map_err(|e| format!("mkdir {}: {e}", target.display()))?;
            mount_bind(&source, &target).map_err(|e| format!("bind mount: {e}"))?;
            unmount(&target, UnmountFlags::empty()).map_err(|e| format!("umount: {e}"))?;
            std::fs::remove_dir(&target).map_err(|e| format!("rmdir: {e}"))?;
            times.push(t.elapsed());
        }
        Ok(())
    })();
    let _ = unmount(&target, UnmountFlags::DETACH);
    let _ = std::fs::remove_dir(&target);
    let _ = std::fs::remove_dir(&source);
    result?;
    times.sort();
    Ok(times.get(times.len() / 2).copied().unwrap_or_default())
}
