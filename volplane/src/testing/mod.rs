//! Testing a driver as the kubelet and the controllers drive it (feature
//! `testing`): a CSI client for any endpoint, and the volume lifecycle a
//! pod's volume goes through, checked step by step. Mounting needs root.
//!
//! ```no_run
//! # async fn t() -> Result<(), volplane::testing::Error> {
//! use volplane::testing::{Csi, Lifecycle};
//! let csi = Csi::connect("unix:///tmp/driver/csi.sock").await?;
//! let report = Lifecycle::new("/tmp/driver/kubelet").run(&csi).await?;
//! assert!(report.leftovers.is_empty(), "{:?}", report.leftovers);
//! # Ok(()) }
//! ```
//!
//! A driver that needs credentials gets them per call, in csi-sanity's
//! secrets-file format ([`secrets_file`]); every run puts away what it
//! made, whether it passes or fails, and [`DriverProcess`] unmounts and
//! detaches what is left beneath its directory when it is dropped — a
//! test that panics included.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

pub use volplane_core::check::CallSecrets;
/// The keys of a secrets file: csi-sanity's, one per call that carries secrets.
pub use volplane_core::check::secrets::KEYS as SECRET_KEYS;
pub use volplane_proto::csi;
use volplane_proto::csi::controller_client::ControllerClient;
use volplane_proto::csi::identity_client::IdentityClient;
use volplane_proto::csi::node_client::NodeClient;

pub mod check;
mod error;
mod hostile;
mod lifecycle;
mod process;
mod steps;
pub use error::{Code, Error};
pub use lifecycle::Lifecycle;
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
    pub async fn connect(endpoint: &str) -> Result<Csi, Error> {
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
                    return Err(Error::Connect {
                        endpoint: endpoint.to_string(),
                        reason: e.to_string(),
                    });
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

/// Reads a secrets file in csi-sanity's format (YAML: a map from call —
/// `CreateVolumeSecret`, `NodeStageVolumeSecret`… — to that call's
/// secrets), for [`Lifecycle::secrets`] and [`check::Check::secrets`]. A key
/// that names no call is refused rather than silently sent without.
pub fn secrets_file(path: impl AsRef<Path>) -> Result<CallSecrets, Error> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Setup(format!("read secrets file {}: {e}", path.display())))?;
    let by_call: BTreeMap<String, BTreeMap<String, String>> = serde_saphyr::from_str(&text)
        .map_err(|e| Error::Setup(format!("secrets file {}: {e}", path.display())))?;
    CallSecrets::new(by_call).map_err(|e| Error::Setup(format!("{}: {e}", path.display())))
}
