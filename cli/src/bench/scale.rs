//! The scale phase (`--volumes 0,10000,100000`): CreateVolume+DeleteVolume
//! at one client while the driver holds more and more volumes, with the
//! driver's resident memory and (with `--state-dir`) its state on disk,
//! per volume. The volumes it adds are deleted at the end.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use futures::stream::{self, StreamExt};
use volplane_proto::csi;

use super::measure::{Csi, Figures, Transport, create_delete, mount_capability};
use super::{BenchArgs, BenchError, Spawner};

/// One level of the scale phase.
#[derive(Debug, Clone)]
pub struct Level {
    /// Volumes the driver held.
    pub volumes: usize,
    /// CreateVolume+DeleteVolume at one client.
    pub cycle: Figures,
    /// The driver's resident memory, bytes.
    pub resident: Option<u64>,
    /// The state directory's files, bytes.
    pub on_disk: Option<u64>,
}

/// The driver's pid, from the peer of a connection to its socket.
fn driver_pid(endpoint: &str) -> Option<i32> {
    let path = endpoint.strip_prefix("unix://")?;
    let s = std::os::unix::net::UnixStream::connect(path).ok()?;
    let cred = rustix::net::sockopt::socket_peercred(&s).ok()?;
    Some(cred.pid.as_raw_nonzero().get())
}

/// `VmRSS` of `pid`, bytes.
fn resident(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The sizes of the files directly in `dir`.
fn on_disk(dir: &Path) -> Option<u64> {
    let entries = std::fs::read_dir(dir).ok()?;
    Some(
        entries
            .filter_map(Result::ok)
            .filter_map(|e| e.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum(),
    )
}

/// Every tenth of `total` done: the progress line's turn.
fn tenth(done: usize, total: usize) -> bool {
    done.is_multiple_of((total / 10).max(1))
}

/// Creates volumes from 16 concurrent loops, showing progress; the ids of
/// those made go into `held`, also when one fails (so they are deleted).
async fn fill<T: Transport>(
    csi: &Csi<T>,
    parameters: &HashMap<String, String>,
    names: Vec<String>,
    held: &mut Vec<String>,
) -> Result<(), BenchError> {
    let total = names.len();
    let started = Instant::now();
    let mut done = 0;
    let mut creates = stream::iter(names.into_iter().map(|name| {
        let mut controller = csi.controller.clone();
        let request = csi::CreateVolumeRequest {
            name,
            volume_capabilities: vec![mount_capability()],
            parameters: parameters.clone(),
            ..Default::default()
        };
        async move { controller.create_volume(request).await }
    }))
    .buffer_unordered(16);
    let mut failed = None;
    while let Some(r) = creates.next().await {
        match r {
            Ok(v) => held.push(v.into_inner().volume.unwrap_or_default().volume_id),
            Err(s) => {
                failed.get_or_insert(BenchError::Rpc {
                    rpc: "CreateVolume",
                    code: s.code(),
                    message: s.message().to_string(),
                });
            }
        }
        done += 1;
        if tenth(done, total) {
            eprintln!(
                "  … {done}/{total} volumes created ({:.0}/s)",
                done as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    failed.map_or(Ok(()), Err)
}

/// Deletes the volumes `ids` names from 16 concurrent loops, showing
/// progress, and says how many could not be deleted and why.
async fn drop_all<T: Transport>(csi: &Csi<T>, ids: Vec<String>) {
    let total = ids.len();
    let mut deletes = stream::iter(ids.into_iter().map(|volume_id| {
        let mut controller = csi.controller.clone();
        async move {
            let request = csi::DeleteVolumeRequest {
                volume_id: volume_id.clone(),
                ..Default::default()
            };
            controller
                .delete_volume(request)
                .await
                .map_err(|s| (volume_id, s))
        }
    }))
    .buffer_unordered(16);
    let (mut done, mut failed) = (0, Vec::new());
    while let Some(r) = deletes.next().await {
        if let Err(e) = r {
            failed.push(e);
        }
        done += 1;
        if tenth(done, total) {
            eprintln!("  … {done}/{total} volumes deleted");
        }
    }
    if let Some((id, s)) = failed.first() {
        eprintln!(
            "  {} of the volumes could not be deleted (the first, {id}: {:?} {}); delete them with DeleteVolume",
            failed.len(),
            s.code(),
            s.message()
        );
    }
}

/// Runs the scale phase against one driver.
pub async fn run<T: Transport>(
    args: &BenchArgs,
    endpoint: &str,
    csi: &Csi<T>,
    spawn: &Spawner,
    parameters: &HashMap<String, String>,
    tag: &str,
) -> Result<Vec<Level>, BenchError> {
    let mut levels = args.volumes.clone();
    levels.sort_unstable();
    let pid = driver_pid(endpoint);
    let mut held: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for level in levels {
        if level > held.len() {
            let names = (held.len()..level)
                .map(|i| format!("{tag}-fill-{i}"))
                .collect();
            if let Err(e) = fill(csi, parameters, names, &mut held).await {
                eprintln!(
                    "  filling failed: deleting the {} volumes made so far…",
                    held.len()
                );
                drop_all(csi, held).await;
                return Err(e);
            }
        }
        let cycle = create_delete(
            spawn,
            csi,
            1,
            args.seconds,
            parameters,
            &format!("{tag}-at-{level}"),
        )
        .await;
        let l = Level {
            volumes: held.len(),
            cycle,
            resident: pid.and_then(resident),
            on_disk: args.state_dir.as_deref().and_then(on_disk),
        };
        let mib = |b: Option<u64>| {
            b.map_or("-".to_string(), |b| {
                format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
            })
        };
        println!(
            "  at {:>7} volumes: CreateVolume+DeleteVolume {}  resident {}  state on disk {}",
            l.volumes,
            l.cycle,
            mib(l.resident),
            mib(l.on_disk)
        );
        out.push(l);
    }
    if let (Some(first), Some(last)) = (out.first(), out.last())
        && last.volumes > first.volumes
    {
        let per = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => format!(
                "{:.0} bytes",
                (b as f64 - a as f64) / (last.volumes - first.volumes) as f64
            ),
            _ => "-".to_string(),
        };
        println!(
            "  per volume: resident {}, on disk {}; CreateVolume+DeleteVolume median at {} vs {} volumes: {:.2}×",
            per(first.resident, last.resident),
            per(first.on_disk, last.on_disk),
            last.volumes,
            first.volumes,
            last.cycle.median.as_secs_f64() / first.cycle.median.as_secs_f64().max(1e-9)
        );
    }
    if args.keep_volumes {
        eprintln!(
            "  keeping the {} volumes the scale phase made (--keep-volumes)",
            held.len()
        );
    } else {
        eprintln!(
            "  deleting the {} volumes the scale phase made…",
            held.len()
        );
        drop_all(csi, held).await;
    }
    Ok(out)
}
