//! What the bench measures with: the client, figures of one
//! measurement, the concurrent loop that takes them, and the
//! CreateVolume+DeleteVolume cycle both the phases and the scale phase
//! time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use volplane_proto::csi;

use super::Spawner;

pub use volplane_proto::client::{CsiClient as Csi, Transport};

/// Figures of one measurement.
#[derive(Debug, Clone)]
pub struct Figures {
    /// Clients calling at once.
    pub clients: usize,
    /// Operations done.
    pub ops: usize,
    /// Operations that failed.
    pub errors: usize,
    /// Operations per second.
    pub per_second: f64,
    /// The median operation's time.
    pub median: Duration,
    /// The 99th percentile's.
    pub p99: Duration,
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:>3} client(s) {:>10.0}/s  median {:>8.3} ms  p99 {:>8.3} ms  ({} ops, {} errors)",
            self.clients,
            self.per_second,
            self.median.as_secs_f64() * 1e3,
            self.p99.as_secs_f64() * 1e3,
            self.ops,
            self.errors
        )
    }
}

/// Runs `op(client, iteration)` from `clients` concurrent loops for `seconds`.
pub async fn measure<F, Fut>(spawn: &Spawner, clients: usize, seconds: f64, op: F) -> Figures
where
    F: Fn(usize, usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), tonic::Status>> + Send,
{
    let op = Arc::new(op);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let op = op.clone();
            spawn(Box::pin(async move {
                let mut lat = Vec::new();
                let mut errors = 0;
                let mut i = 0;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    match op(c, i).await {
                        Ok(()) => lat.push(t.elapsed()),
                        Err(e) => {
                            if errors == 0 {
                                eprintln!("  client {c}: {:?}: {}", e.code(), e.message());
                            }
                            errors += 1;
                        }
                    }
                    i += 1;
                }
                (lat, errors)
            }))
        })
        .collect();
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (lat, e) = t.await;
        all.extend(lat);
        errors += e;
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort();
    let pick = |q: f64| {
        if all.is_empty() {
            Duration::ZERO
        } else {
            all[((all.len() as f64 - 1.0) * q).round() as usize]
        }
    };
    Figures {
        clients,
        ops: all.len(),
        errors,
        per_second: all.len() as f64 / elapsed,
        median: pick(0.5),
        p99: pick(0.99),
    }
}

pub fn mount_capability() -> csi::VolumeCapability {
    use csi::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
    csi::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume::default())),
        access_mode: Some(AccessMode {
            mode: Mode::MultiNodeMultiWriter as i32,
        }),
    }
}

/// CreateVolume+DeleteVolume from `clients` concurrent loops.
pub async fn create_delete<T: Transport>(
    spawn: &Spawner,
    csi: &Csi<T>,
    clients: usize,
    seconds: f64,
    parameters: &HashMap<String, String>,
    tag: &str,
) -> Figures {
    let (controller, tag, parameters) =
        (csi.controller.clone(), tag.to_string(), parameters.clone());
    measure(spawn, clients, seconds, move |client, i| {
        let mut controller = controller.clone();
        let create = csi::CreateVolumeRequest {
            name: format!("{tag}-{clients}-{client}-{i}"),
            volume_capabilities: vec![mount_capability()],
            parameters: parameters.clone(),
            ..Default::default()
        };
        async move {
            let v = controller
                .create_volume(create)
                .await?
                .into_inner()
                .volume
                .unwrap_or_default();
            controller
                .delete_volume(csi::DeleteVolumeRequest {
                    volume_id: v.volume_id,
                    ..Default::default()
                })
                .await
                .map(|_| ())
        }
    })
    .await
}
