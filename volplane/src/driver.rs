//! [`Driver`]: a backend made into a CSI driver process — the directories,
//! the state lock, the services, the runtime, signals, metrics and
//! `/healthz`, given once.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use volplane_core::driver::{DriverConfig, PluginCapability};
use volplane_host::Host;
use volplane_host::state_file::StateLock;
use volplane_service::metrics::Metrics;
use volplane_service::{Backend, PumpConfig};

use crate::Error;

/// The async runtime a driver serves on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// tokio, with tonic's transport (feature `tokio`, the default).
    #[cfg(feature = "tokio")]
    Tokio,
    /// smol, with hyper 1 and no tokio runtime (feature `smol`).
    #[cfg(feature = "smol")]
    Smol,
}

impl Default for Runtime {
    fn default() -> Self {
        #[cfg(feature = "tokio")]
        return Runtime::Tokio;
        #[cfg(all(feature = "smol", not(feature = "tokio")))]
        return Runtime::Smol;
    }
}

/// A CSI driver process around a [`Backend`]. Build it, then
/// [`serve`](Driver::serve): it runs until SIGTERM or SIGINT.
///
/// ```no_run
/// # use volplane::{Backend, Driver};
/// # fn run(backend: impl Backend) -> Result<(), volplane::Error> {
/// Driver::new("example.csi.io", backend)
///     .version(env!("CARGO_PKG_VERSION"))
///     .storage_dir("/var/lib/example/volumes")
///     .http_endpoint(":9808")
///     .serve()
/// # }
/// ```
///
/// Paths a request names (staging and target paths) must lie under the
/// kubelet directory; the backend's own volumes lie under its storage
/// directories. volplane touches nothing outside these (see
/// [`NodeHost`](crate::NodeHost)), and refuses to start when a storage
/// directory and the kubelet directory lie one inside the other.
#[derive(Debug)]
pub struct Driver<B> {
    backend: B,
    config: DriverConfig,
    node_id: Option<String>,
    services: Option<(bool, bool)>,
    known_nodes: Vec<String>,
    state_dir: PathBuf,
    kubelet_dir: PathBuf,
    storage_dirs: Vec<PathBuf>,
    endpoint: Option<String>,
    http_endpoint: Option<String>,
    runtime: Runtime,
}

impl<B: Backend> Driver<B> {
    /// A driver named `name` (GetPluginInfo, e.g. `example.csi.io`) serving
    /// `backend`, with the defaults: both services, this host's name as the
    /// node id, state in `/var/lib/<name>`, the kubelet in
    /// `/var/lib/kubelet`, the socket at
    /// `unix:///var/lib/kubelet/plugins/<name>/csi.sock`.
    pub fn new(name: &str, backend: B) -> Driver<B> {
        let mut config = DriverConfig::new(name, env!("CARGO_PKG_VERSION"), "");
        config.narrow(backend.features());
        Driver {
            backend,
            config,
            node_id: None,
            services: None,
            known_nodes: Vec::new(),
            state_dir: PathBuf::from("/var/lib").join(name),
            kubelet_dir: PathBuf::from("/var/lib/kubelet"),
            storage_dirs: Vec::new(),
            endpoint: None,
            http_endpoint: None,
            runtime: Runtime::default(),
        }
    }

    /// Plants a known mistake in the driver's decisions (feature `plants`:
    /// `volplane check`'s own tests, never a release build).
    #[cfg(feature = "plants")]
    pub fn plant(mut self, plant: volplane_core::plant::Plant) -> Self {
        self.config.plant(plant);
        self
    }

    /// The version GetPluginInfo reports (volplane's own by default):
    /// usually `env!("CARGO_PKG_VERSION")` of the driver's crate.
    pub fn version(mut self, version: &str) -> Self {
        self.config.vendor_version = version.into();
        self
    }

    /// This node's id (NodeGetInfo); the host name by default.
    pub fn node_id(mut self, id: &str) -> Self {
        self.node_id = Some(id.into());
        self
    }

    /// Serve only the Controller service (a Deployment's driver).
    pub fn controller_only(mut self) -> Self {
        self.services = Some((true, false));
        self
    }

    /// Serve only the Node service (a DaemonSet's driver).
    pub fn node_only(mut self) -> Self {
        self.services = Some((false, true));
        self
    }

    /// Where the driver keeps its state (a lock and a crash-safe store). One
    /// directory per driver process; a second process on it is refused.
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.state_dir = dir.into();
        self
    }

    /// The kubelet's directory: staging and target paths must lie under it.
    pub fn kubelet_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.kubelet_dir = dir.into();
        self
    }

    /// A directory the backend keeps volumes in (repeat for several). The
    /// [`NodeHost`](crate::NodeHost) a backend gets works beneath these
    /// and the kubelet directory only: a path outside them is refused.
    pub fn storage_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.storage_dirs.push(dir.into());
        self
    }

    /// Where to listen (`unix:///path/csi.sock`); by default
    /// `unix://<kubelet dir>/plugins/<name>/csi.sock`.
    pub fn endpoint(mut self, endpoint: &str) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// Serve `/metrics` (every call in `csi_sidecar_operations_seconds`) and
    /// `/healthz` (a Probe through the driver's own socket) over HTTP at
    /// `host:port`, or `:port` on every interface.
    pub fn http_endpoint(mut self, address: &str) -> Self {
        self.http_endpoint = Some(address.into());
        self
    }

    /// The most volumes ControllerPublish attaches to one node (0: no limit,
    /// the default), reported in NodeGetInfo.
    pub fn max_volumes_per_node(mut self, n: u64) -> Self {
        self.config.max_volumes_per_node = n;
        self
    }

    /// This node's topology segment `key=value` (repeat for several keys):
    /// NodeGetInfo reports it, and the plugin declares
    /// VOLUME_ACCESSIBILITY_CONSTRAINTS. Where each volume is, the backend
    /// says ([`Volume::accessible_topology`](crate::Volume), within the
    /// create's requisite segments; empty: from anywhere); a create it
    /// cannot make within them is RESOURCE_EXHAUSTED.
    pub fn topology(mut self, key: &str, value: &str) -> Self {
        self.config
            .topology
            .get_or_insert_with(Default::default)
            .insert(key.to_string(), value.to_string());
        self.config
            .plugin_capabilities
            .insert(PluginCapability::VolumeAccessibilityConstraints);
        self
    }

    /// A node ControllerPublish accepts (repeat for several). By default
    /// this node when the Node service runs here too, any node otherwise.
    pub fn known_node(mut self, node: &str) -> Self {
        self.known_nodes.push(node.into());
        self
    }

    /// Applies the [`Flags`](crate::Flags) that were given.
    pub fn flags(mut self, flags: &crate::Flags) -> Self {
        if let Some(e) = &flags.endpoint {
            self = self.endpoint(e);
        }
        if let Some(id) = &flags.node_id {
            self = self.node_id(id);
        }
        if let Some(dir) = &flags.state_dir {
            self = self.state_dir(dir);
        }
        if let Some(dir) = &flags.kubelet_dir {
            self = self.kubelet_dir(dir);
        }
        if let Some(address) = &flags.http_endpoint {
            self = self.http_endpoint(address);
        }
        if flags.controller || flags.node {
            self.services = Some(flags.services());
        }
        self
    }

    /// The runtime to serve on (tokio when the `tokio` feature is on).
    pub fn runtime(mut self, runtime: Runtime) -> Self {
        self.runtime = runtime;
        self
    }

    /// The configuration the driver will advertise and enforce, for a look
    /// before serving (tests, logs).
    pub fn config(&self) -> DriverConfig {
        self.settled().0
    }

    /// The configuration with the defaults that depend on other settings.
    fn settled(&self) -> (DriverConfig, String) {
        let mut config = self.config.clone();
        let node_id = self.node_id.clone().unwrap_or_else(hostname);
        config.node_id = node_id.clone();
        let (controller, node) = self.services.unwrap_or((true, true));
        config.controller = controller;
        config.node = node;
        config.path_roots = vec![self.kubelet_dir.display().to_string()];
        config.known_nodes = if !self.known_nodes.is_empty() {
            self.known_nodes.iter().cloned().collect()
        } else if node {
            [node_id].into()
        } else {
            BTreeSet::new()
        };
        let endpoint = self.endpoint.clone().unwrap_or_else(|| {
            format!(
                "unix://{}/plugins/{}/csi.sock",
                self.kubelet_dir.display(),
                config.name
            )
        });
        (config, endpoint)
    }

    /// What an in-process driver (a fuzz target's) needs: the settled
    /// configuration, the backend, the confined host, the kubelet directory.
    #[cfg(feature = "testing")]
    pub(crate) fn in_process(self) -> Result<(DriverConfig, B, Host, PathBuf), Error> {
        let (mut config, _) = self.settled();
        config.narrow(self.backend.features());
        let roots = std::iter::once(&self.kubelet_dir).chain(&self.storage_dirs);
        let host = Host::new(roots)
            .map_err(|e| Error::Setup(format!("cannot use the configured directories: {e}")))?;
        Ok((config, self.backend, host, self.kubelet_dir))
    }

    /// Checks the directories, takes the state lock, and serves until
    /// SIGTERM or SIGINT; then finishes what is in flight and returns.
    pub fn serve(self) -> Result<(), Error> {
        let (config, endpoint) = self.settled();
        absolute("state directory", &self.state_dir)?;
        absolute("kubelet directory", &self.kubelet_dir)?;
        for dir in &self.storage_dirs {
            absolute("storage directory", dir)?;
            if dir.starts_with(&self.kubelet_dir) || self.kubelet_dir.starts_with(dir) {
                return Err(Error::Setup(format!(
                    "the storage directory {} and the kubelet directory {} must not lie one \
                     inside the other: a request's path could then name a volume's storage",
                    dir.display(),
                    self.kubelet_dir.display()
                )));
            }
        }
        let lock = StateLock::acquire(&self.state_dir).map_err(|e| Error::Setup(e.to_string()))?;
        let roots = std::iter::once(&self.kubelet_dir).chain(&self.storage_dirs);
        let host = Host::new(roots)
            .map_err(|e| Error::Setup(format!("cannot use the configured directories: {e}")))?;
        let metrics = self.http_endpoint.as_ref().map(|_| Metrics::new());
        let pump = PumpConfig::in_dir(&self.state_dir, &state_name(&config), metrics);
        tracing::info!(
            driver = %config.name,
            version = %config.vendor_version,
            node = %config.node_id,
            controller = config.controller,
            node_service = config.node,
            runtime = ?self.runtime,
            kubelet_dir = %self.kubelet_dir.display(),
            "starting"
        );
        // Records come and go with volumes, and calls allocate as they
        // run: they share one heap, and what they freed goes back to the
        // system every 10 s.
        volplane_host::memory::one_heap();
        if let Err(e) = volplane_host::memory::give_back_every(std::time::Duration::from_secs(10)) {
            tracing::warn!(
                "cannot start the thread that gives freed memory back: {e}; memory once used stays resident"
            );
        }
        let http = self.http_endpoint.as_deref();
        crate::run::serve(
            self.runtime,
            &endpoint,
            http,
            config,
            self.backend,
            host,
            pump,
        )?;
        drop(lock);
        Ok(())
    }
}

/// The state's file name: one per role, so that a controller and a node
/// plugin may share a directory on one machine.
fn state_name(config: &DriverConfig) -> String {
    match (config.controller, config.node) {
        (true, true) => "state".into(),
        (true, false) => "controller-state".into(),
        _ => format!("node-{}-state", config.node_id),
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

fn absolute(what: &str, p: &Path) -> Result<(), Error> {
    if p.is_absolute() {
        Ok(())
    } else {
        Err(Error::Setup(format!(
            "the {what} {} must be an absolute path",
            p.display()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Attributes, CreatePlan, NodeHost, NodeSource, Secrets, Status, Volume};
    use volplane_core::driver::{ControllerCapability as C, NodeCapability as N};

    /// Creates, deletes and says where volumes are: nothing more.
    struct Plain;

    impl Backend for Plain {
        async fn create_volume(&self, _: &NodeHost, _: &CreatePlan) -> Result<Volume, Status> {
            Err(Status::internal("not in this test"))
        }
        async fn delete_volume(&self, _: &NodeHost, _: &Volume, _: &Secrets) -> Result<(), Status> {
            Ok(())
        }
        async fn node_source(
            &self,
            _: &NodeHost,
            _: &str,
            _: &Attributes,
            _: &Attributes,
        ) -> Result<NodeSource, Status> {
            Err(Status::not_found("not in this test"))
        }
    }

    #[test]
    fn a_backend_that_declares_nothing_gets_nothing_more_advertised() {
        let config = Driver::new("plain.example.com", Plain)
            .node_id("n1")
            .config();
        let controller: Vec<_> = config.controller_capabilities.iter().copied().collect();
        assert_eq!(
            controller,
            vec![
                C::CreateDeleteVolume,
                C::ListVolumes,
                C::GetVolume,
                C::SingleNodeMultiWriter
            ]
        );
        let node: Vec<_> = config.node_capabilities.iter().copied().collect();
        assert_eq!(
            node,
            vec![
                N::StageUnstageVolume,
                N::GetVolumeStats,
                N::SingleNodeMultiWriter
            ]
        );
        assert!(!config.block, "raw block is declared, not assumed");
        assert!(config.group_capabilities.is_empty());
        assert_eq!(
            config.plugin_capabilities,
            [PluginCapability::ControllerService].into()
        );
        assert_eq!(config.known_nodes, ["n1".to_string()].into());
    }

    #[test]
    fn setup_errors_name_the_directory_not_a_flag() {
        let dir = tempfile::tempdir().unwrap();
        let e = Driver::new("plain.example.com", Plain)
            .state_dir("relative/state")
            .serve()
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the state directory relative/state must be an absolute path"
        );
        let e = Driver::new("plain.example.com", Plain)
            .state_dir(dir.path().join("state"))
            .kubelet_dir(dir.path().join("kubelet"))
            .storage_dir(dir.path().join("kubelet/volumes"))
            .serve()
            .unwrap_err();
        assert!(
            e.to_string().contains("must not lie one inside the other"),
            "{e}"
        );
        assert!(!e.to_string().contains("--"), "{e}");
    }
}
