//! Testing a driver as the kubelet and the controllers drive it (feature
//! `testing`): a CSI client for any endpoint, and the volume lifecycle a
//! pod's volume goes through, checked step by step. Mounting needs root.
//!
//! ```no_run
//! # async fn t() -> Result<(), String> {
//! use volplane::testing::{Csi, Lifecycle};
//! let csi = Csi::connect("unix:///tmp/driver/csi.sock").await?;
//! let report = Lifecycle::new("/tmp/driver/kubelet").run(&csi).await?;
//! assert!(report.leftovers.is_empty(), "{:?}", report.leftovers);
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use volplane_proto::csi;
use volplane_proto::csi::controller_client::ControllerClient;
use volplane_proto::csi::identity_client::IdentityClient;
use volplane_proto::csi::node_client::NodeClient;

use crate::lifecycle::{Run, STEPS};

pub mod check;
mod process;
pub use process::{DriverProcess, Layout, Sanity, csi_sanity, may_mount};

type Channel = tonic::transport::Channel;

/// The CSI services of one driver, on one connection.
#[derive(Debug, Clone)]
pub struct Csi {
    /// The Identity service: GetPluginInfo, Probe, capabilities.
    pub identity: IdentityClient<Channel>,
    /// The Controller service.
    pub controller: ControllerClient<Channel>,
    /// The Node service.
    pub node: NodeClient<Channel>,
}

impl Csi {
    /// Connects to `endpoint` (`unix:///path/csi.sock`), waiting up to 20 s
    /// for the socket to answer (a driver still starting).
    pub async fn connect(endpoint: &str) -> Result<Csi, String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match volplane_tokio::connect(endpoint).await {
                Ok(ch) => {
                    return Ok(Csi {
                        identity: IdentityClient::new(ch.clone()),
                        controller: ControllerClient::new(ch.clone()),
                        node: NodeClient::new(ch),
                    });
                }
                Err(e) if Instant::now() >= deadline => {
                    return Err(format!("cannot connect to {endpoint}: {e}"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

/// What the lifecycle saw.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The steps taken, in order (`CreateVolume`, `NodeStageVolume`…).
    pub steps: Vec<String>,
    /// Mounts and targets still under the kubelet directory at the end
    /// (empty when the driver cleaned up after itself).
    pub leftovers: Vec<String>,
    /// How many times the driver was restarted on the way.
    pub restarts: usize,
}

/// A volume's life as one pod after another uses it: create, attach (when
/// the driver attaches), stage, publish to two pods, write through one and
/// read through the other, unpublish, unstage, detach, delete. Each step
/// is also sent twice, as a CO retrying after a timeout does; the second
/// must succeed too.
#[derive(Debug, Clone)]
pub struct Lifecycle {
    kubelet: PathBuf,
    name: String,
    parameters: HashMap<String, String>,
    bytes: i64,
    node_id: Option<String>,
}

impl Lifecycle {
    /// A lifecycle with paths under `kubelet_dir` (the driver's).
    pub fn new(kubelet_dir: impl Into<PathBuf>) -> Lifecycle {
        Lifecycle {
            kubelet: kubelet_dir.into(),
            name: "pvc-volplane-testing".into(),
            parameters: HashMap::new(),
            bytes: 64 << 20,
            node_id: None,
        }
    }

    /// The StorageClass parameters CreateVolume gets.
    pub fn parameter(mut self, key: &str, value: &str) -> Self {
        self.parameters.insert(key.into(), value.into());
        self
    }

    /// The volume's name (CreateVolume.name).
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.into();
        self
    }

    /// Runs it against `csi`; the first step that fails ends it with what
    /// was asked and answered.
    pub async fn run(&self, csi: &Csi) -> Result<Report, String> {
        let mut run = Run::start(self, csi).await?;
        for &step in STEPS {
            run.step(csi, step).await?;
        }
        Ok(run.report)
    }

    /// Hostile node paths: with the volume created, attached and staged,
    /// NodePublish and NodeStage to paths outside the kubelet directory
    /// (outright, by `..`, through a symbolic link in it) and with a volume
    /// id that is a path are each refused — INVALID_ARGUMENT,
    /// FAILED_PRECONDITION or NOT_FOUND, never OK or INTERNAL — and nothing
    /// appears outside; then the volume goes as usual. The report's steps
    /// say how each was answered.
    pub async fn run_hostile(&self, csi: &Csi) -> Result<Report, String> {
        crate::hostile::run(self, csi).await
    }

    /// Runs it with the driver killed and started again between every two
    /// steps: `restart` does both (SIGKILL, as a crash would, then start;
    /// it may block), and the lifecycle reconnects to `endpoint`. What the
    /// driver answered before a kill must still hold after it.
    pub async fn run_restarting(
        &self,
        endpoint: &str,
        mut restart: impl FnMut(),
    ) -> Result<Report, String> {
        let mut csi = Csi::connect(endpoint).await?;
        let mut run = Run::start(self, &csi).await?;
        for (i, &step) in STEPS.iter().enumerate() {
            run.step(&csi, step).await?;
            if i + 1 < STEPS.len() {
                restart();
                run.report.restarts += 1;
                csi = Csi::connect(endpoint).await?;
            }
        }
        Ok(run.report)
    }

    pub(crate) fn staging(&self, volume_id: &str) -> PathBuf {
        self.kubelet
            .join("plugins/kubernetes.io/csi/volplane-testing")
            .join(volume_id)
            .join("globalmount")
    }

    pub(crate) fn target(&self, pod: usize) -> PathBuf {
        self.kubelet
            .join(format!("pods/pod-{pod}/volumes/kubernetes.io~csi"))
            .join(&self.name)
            .join("mount")
    }

    pub(crate) fn kubelet(&self) -> &Path {
        &self.kubelet
    }

    pub(crate) fn volume_name(&self) -> &str {
        &self.name
    }

    pub(crate) fn parameters(&self) -> &HashMap<String, String> {
        &self.parameters
    }

    pub(crate) fn bytes(&self) -> i64 {
        self.bytes
    }

    pub(crate) fn node_id(&self) -> Option<&str> {
        self.node_id.as_deref()
    }
}
