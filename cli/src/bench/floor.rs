//! The syscall floor of a publish cycle: what NodePublish+NodeUnpublish
//! cost at the least — mkdir, a bind mount, umount, rmdir — in a plain loop
//! on this machine, printed beside the driver's figures so their ratio is
//! measured in one run. The durable floor adds what a driver that records
//! each call before it answers cannot do without: one small write and one
//! `fdatasync` per call, on the disk its state lives on.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::mount::{UnmountFlags, mount_bind, unmount};

/// One durable record of 4 KiB, written and synced in place.
fn record(journal: &File) -> Result<(), String> {
    journal
        .write_all_at(&[0x5a; 4096], 0)
        .and_then(|()| journal.sync_data())
        .map_err(|e| format!("write and fdatasync: {e}"))
}

/// The median of one mkdir + bind mount + umount + rmdir cycle under
/// `dir`, over `seconds`; with `durable`, a record written and synced in
/// that directory after the mount and after the rmdir. Why not, when it
/// cannot run here.
pub fn publish_floor(dir: &Path, durable: Option<&Path>, seconds: f64) -> Result<Duration, String> {
    let source = dir.join("volplane-bench-floor-source");
    let target = dir.join("volplane-bench-floor-target");
    std::fs::create_dir_all(&source).map_err(|e| format!("mkdir {}: {e}", source.display()))?;
    let journal_path = durable.map(|d| d.join("volplane-bench-floor-journal"));
    let journal = match &journal_path {
        Some(p) => Some(File::create(p).map_err(|e| format!("create {}: {e}", p.display()))?),
        None => None,
    };
    let result = median_over(seconds, || {
        std::fs::create_dir(&target).map_err(|e| format!("mkdir {}: {e}", target.display()))?;
        mount_bind(&source, &target).map_err(|e| format!("bind mount: {e}"))?;
        journal.as_ref().map(record).transpose()?;
        unmount(&target, UnmountFlags::empty()).map_err(|e| format!("umount: {e}"))?;
        std::fs::remove_dir(&target).map_err(|e| format!("rmdir: {e}"))?;
        journal.as_ref().map(record).transpose()?;
        Ok(())
    });
    let _ = unmount(&target, UnmountFlags::DETACH);
    let _ = std::fs::remove_dir(&target);
    let _ = std::fs::remove_dir(&source);
    if let Some(p) = &journal_path {
        let _ = std::fs::remove_file(p);
    }
    result
}

/// The median time of `cycle`, run again and again for `seconds`.
fn median_over(
    seconds: f64,
    mut cycle: impl FnMut() -> Result<(), String>,
) -> Result<Duration, String> {
    let mut times = Vec::new();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < deadline {
        let t = Instant::now();
        cycle()?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok(times.get(times.len() / 2).copied().unwrap_or_default())
}

/// The median of one mkdir + rmdir cycle under `dir`, each followed by a
/// record written and synced in `durable`: what a driver that records each
/// CreateVolume and DeleteVolume durably cannot do without.
pub fn create_floor(dir: &Path, durable: &Path, seconds: f64) -> Result<Duration, String> {
    let target = dir.join("volplane-bench-floor-volume");
    let journal_path = durable.join("volplane-bench-floor-journal");
    let journal = File::create(&journal_path)
        .map_err(|e| format!("create {}: {e}", journal_path.display()))?;
    let result = median_over(seconds, || {
        std::fs::create_dir(&target).map_err(|e| format!("mkdir {}: {e}", target.display()))?;
        record(&journal)?;
        std::fs::remove_dir(&target).map_err(|e| format!("rmdir: {e}"))?;
        record(&journal)
    });
    let _ = std::fs::remove_dir(&target);
    let _ = std::fs::remove_file(&journal_path);
    result
}
