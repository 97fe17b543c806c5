//! `volplane bench`: a CSI client that measures any CSI driver.
//!
//! Phases, each at every client count given: Probe round trips;
//! NodePublish + NodeUnpublish cycles with real bind mounts (a volume per
//! client, staged once, as kubelet would); CreateVolume + DeleteVolume
//! cycles. Prints operations per second with median and p99 latency. Given
//! several endpoints (say, the same driver served on tokio and on smol), it
//! measures each in turn and prints them side by side. The client itself runs
//! on tokio or smol (`--runtime`).

mod binder;
mod floor;
mod measure;
mod phases;
mod scale;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use futures::future::BoxFuture;

use crate::serve::RuntimeKind;
pub use measure::Figures;

/// `volplane bench`'s flags.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The driver's endpoint (repeatable: each is measured, side by side),
    /// e.g. unix:///var/lib/kubelet/plugins/volplane.csi.io/csi.sock
    #[arg(long = "endpoint", required_unless_present = "binder")]
    pub endpoints: Vec<String>,
    /// Measure the PV controller instead, in memory: this many claims bound
    /// against as many volumes (no driver involved).
    #[arg(long, value_name = "N")]
    pub binder: Option<usize>,
    /// Client counts to measure at, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    pub clients: Vec<usize>,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// The kubelet directory the driver accepts paths under.
    #[arg(long, default_value = "/var/lib/kubelet")]
    pub kubelet_dir: PathBuf,
    /// StorageClass parameters for the bench volumes (key=value, repeatable).
    #[arg(long = "parameter", default_value = "kind=dir")]
    pub parameters: Vec<String>,
    /// The runtime the bench client runs on.
    #[arg(long, value_enum, default_value_t = RuntimeKind::Tokio)]
    pub runtime: RuntimeKind,
    /// Also measure at scale: CreateVolume+DeleteVolume at one client with
    /// the driver holding this many volumes (comma-separated, e.g.
    /// 0,10000,100000), and its resident memory per volume.
    #[arg(long, value_delimiter = ',')]
    pub volumes: Vec<usize>,
    /// The driver's state directory, to report its state on disk per
    /// volume in the scale phase.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Leave the volumes the scale phase made (to measure a restart with
    /// them; they are named `volplane-bench-<pid>-fill-<i>`).
    #[arg(long)]
    pub keep_volumes: bool,
}

/// Why the bench could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The driver could not be reached.
    #[error("connect to {endpoint}: {reason}")]
    Connect {
        /// The endpoint dialled.
        endpoint: String,
        /// Why it failed.
        reason: String,
    },
    #[error("{rpc}: {code:?}: {message}")]
    /// A call failed.
    Rpc {
        /// The method.
        rpc: &'static str,
        /// Its code.
        code: tonic::Code,
        /// What the driver said.
        message: String,
    },
    /// The flags do not make a bench.
    #[error("{0}")]
    Usage(String),
}

/// How the bench spawns its concurrent clients on the chosen runtime.
pub type Spawner = Arc<
    dyn Fn(BoxFuture<'static, (Vec<Duration>, usize)>) -> BoxFuture<'static, (Vec<Duration>, usize)>
        + Send
        + Sync,
>;

/// Runs the bench on the runtime `args.runtime` names.
pub fn run(args: BenchArgs) -> Result<(), BenchError> {
    if let Some(n) = args.binder {
        binder::print(&binder::run(n));
        if args.endpoints.is_empty() {
            return Ok(());
        }
    }
    if args.clients.is_empty() || args.clients.contains(&0) {
        return Err(BenchError::Usage(
            "--clients needs positive counts, e.g. 1,16".into(),
        ));
    }
    let origin = http::Uri::from_static("http://localhost");
    match args.runtime {
        RuntimeKind::Tokio => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| BenchError::Usage(format!("cannot start the tokio runtime: {e}")))?;
            // Spawn at once; the returned future only waits for the task.
            let spawn: Spawner = Arc::new(|f| {
                let task = tokio::spawn(f);
                Box::pin(async move { task.await.unwrap_or_default() })
            });
            rt.block_on(async {
                let mut targets = Vec::new();
                for e in &args.endpoints {
                    let ch =
                        volplane_tokio::connect(e)
                            .await
                            .map_err(|err| BenchError::Connect {
                                endpoint: e.clone(),
                                reason: err.to_string(),
                            })?;
                    targets.push((e.clone(), measure::Csi::new(ch, None)));
                }
                phases::bench_all(&args, targets, spawn).await
            })
        }
        RuntimeKind::Smol => {
            let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
            let rt = volplane_smol::Runtime::new(threads)
                .map_err(|e| BenchError::Usage(format!("cannot start the smol runtime: {e}")))?;
            let rt2 = rt.clone();
            let spawn: Spawner = Arc::new(move |f| Box::pin(rt2.spawn(f)));
            rt.block_on(async {
                let mut targets = Vec::new();
                for e in &args.endpoints {
                    let ch =
                        volplane_smol::connect(e)
                            .await
                            .map_err(|err| BenchError::Connect {
                                endpoint: e.clone(),
                                reason: err.to_string(),
                            })?;
                    targets.push((e.clone(), measure::Csi::new(ch, Some(origin.clone()))));
                }
                phases::bench_all(&args, targets, spawn).await
            })
        }
    }
}
