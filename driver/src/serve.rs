//! `volplane serve`: the reference driver.

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::Args;
use std::sync::Arc;
use volplane_core::driver::{DriverConfig, PluginCapability};
use volplane_host::Host;
use volplane_host::state_file::{StateFile, StateLock};

use volplane_service::metrics::{HealthProbe, Metrics, probe_driver};
use volplane_service::{Backend, PumpConfig};

use crate::reference::{Reference, ZONE_KEY};

/// The reference driver's name.
pub const DRIVER_NAME: &str = volplane_lab::DRIVER_NAME;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen, as kubelet writes it. Default:
    /// unix://<kubelet-dir>/plugins/volplane.csi.io/csi.sock
    #[arg(long)]
    pub endpoint: Option<String>,
    /// This node's id (NodeGetInfo). Default: the host name.
    #[arg(long)]
    pub node_id: Option<String>,
    /// Where the driver keeps its state (and, by default, its volumes).
    #[arg(long, default_value = "/var/lib/volplane")]
    pub state_dir: PathBuf,
    /// Staging and target paths must lie under this directory.
    #[arg(long, default_value = "/var/lib/kubelet")]
    pub kubelet_dir: PathBuf,
    /// Where volume images and directories live. Default: <state-dir>/volumes
    #[arg(long)]
    pub volumes_dir: Option<PathBuf>,
    /// Serve the Controller service (both services when neither flag is given).
    #[arg(long)]
    pub controller: bool,
    /// Serve the Node service (both services when neither flag is given).
    #[arg(long)]
    pub node: bool,
    /// Most volumes ControllerPublish attaches to one node (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub max_volumes_per_node: u64,
    /// This driver's zone, reported as topology.volplane.io/zone.
    #[arg(long, default_value = "local")]
    pub zone: String,
    /// A node ControllerPublish accepts (repeatable). Default: this node when
    /// the Node service runs here too, any node otherwise.
    #[arg(long = "known-node")]
    pub known_nodes: Vec<String>,
    /// A mutable parameter (a VolumeAttributesClass parameter) volumes may
    /// be created and modified with; repeat for several. With none,
    /// ControllerModifyVolume is not offered.
    #[arg(long = "mutable-parameter", value_name = "NAME")]
    pub mutable_parameters: Vec<String>,
    /// Driver name (GetPluginInfo).
    #[arg(long, default_value = DRIVER_NAME)]
    pub driver_name: String,
    /// Serve /metrics (every served call in csi_sidecar_operations_seconds)
    /// and /healthz (a Probe through this driver's own socket) here, e.g. `:8080`.
    #[arg(long)]
    pub http_endpoint: Option<String>,
    /// The async runtime to serve on.
    #[arg(long, value_enum, default_value_t = RuntimeKind::Tokio)]
    pub runtime: RuntimeKind,
}

/// Which async runtime runs the adapters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    Tokio,
    Smol,
}

/// Why `serve` could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Serve(#[from] volplane_service::ServeError),
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

fn absolute(flag: &str, p: &std::path::Path) -> Result<(), ServeError> {
    if p.is_absolute() {
        Ok(())
    } else {
        Err(ServeError::Setup(format!(
            "--{flag} {} must be an absolute path",
            p.display()
        )))
    }
}

/// The driver configuration `serve` runs with.
pub fn driver_config(args: &ServeArgs) -> DriverConfig {
    let node_id = args.node_id.clone().unwrap_or_else(hostname);
    let mut config = DriverConfig::new(&args.driver_name, env!("CARGO_PKG_VERSION"), &node_id);
    let both = !args.controller && !args.node;
    config.controller = both || args.controller;
    config.node = both || args.node;
    config.max_volumes_per_node = args.max_volumes_per_node;
    config.topology = Some([(ZONE_KEY.to_string(), args.zone.clone())].into());
    config
        .plugin_capabilities
        .insert(PluginCapability::VolumeAccessibilityConstraints);
    config.path_roots = vec![args.kubelet_dir.display().to_string()];
    config.known_nodes = if !args.known_nodes.is_empty() {
        args.known_nodes.iter().cloned().collect()
    } else if config.node {
        [node_id].into()
    } else {
        BTreeSet::new()
    };
    config
}

/// Runs the reference driver on the runtime `args.runtime` names.
pub fn run(args: ServeArgs) -> Result<(), ServeError> {
    absolute("state-dir", &args.state_dir)?;
    absolute("kubelet-dir", &args.kubelet_dir)?;
    let volumes_dir = args
        .volumes_dir
        .clone()
        .unwrap_or_else(|| args.state_dir.join("volumes"));
    absolute("volumes-dir", &volumes_dir)?;
    let endpoint = args.endpoint.clone().unwrap_or_else(|| {
        format!(
            "unix://{}/plugins/{}/csi.sock",
            args.kubelet_dir.display(),
            args.driver_name
        )
    });
    let config = driver_config(&args);
    let lock = StateLock::acquire(&args.state_dir)
        .map_err(|e| ServeError::Setup(format!("cannot use --state-dir: {e}")))?;
    if volumes_dir.starts_with(&args.kubelet_dir) || args.kubelet_dir.starts_with(&volumes_dir) {
        return Err(ServeError::Setup(format!(
            "--volumes-dir {} and --kubelet-dir {} must not lie one inside the other: a request path could then name a volume's storage",
            volumes_dir.display(),
            args.kubelet_dir.display()
        )));
    }
    let host = Host::new([&args.kubelet_dir, &volumes_dir])
        .map_err(|e| ServeError::Setup(format!("cannot use the configured directories: {e}")))?;
    let state_name = if config.controller && config.node {
        "state".to_string()
    } else if config.controller {
        "controller-state".to_string()
    } else {
        format!("node-{}-state", config.node_id)
    };
    let pump = PumpConfig {
        state_store: Some(args.state_dir.join(format!("{state_name}.redb"))),
        legacy_state_file: Some(StateFile::new(
            args.state_dir.join(format!("{state_name}.json")),
        )),
        metrics: args.http_endpoint.as_ref().map(|_| Metrics::new()),
    };
    tracing::info!(
        driver = %config.name,
        version = %config.vendor_version,
        node = %config.node_id,
        controller = config.controller,
        node_service = config.node,
        runtime = ?args.runtime,
        kubelet_dir = %args.kubelet_dir.display(),
        volumes_dir = %volumes_dir.display(),
        "starting"
    );
    let backend = Reference::new(volumes_dir, args.zone.clone())
        .accepting(args.mutable_parameters.iter().cloned());
    let crash_after = std::env::var("VOLPLANE_CRASH_AFTER")
        .ok()
        .filter(|s| !s.is_empty());
    match crash_after {
        #[cfg(feature = "crash-hooks")]
        Some(kind) => serve_on(
            &args,
            &endpoint,
            config,
            crate::crash::CrashAfter::new(backend, kind),
            host,
            pump,
        )?,
        #[cfg(not(feature = "crash-hooks"))]
        Some(kind) => {
            tracing::warn!(
                kind = %kind,
                "VOLPLANE_CRASH_AFTER is a test knob this build does not have (feature crash-hooks); ignoring it"
            );
            serve_on(&args, &endpoint, config, backend, host, pump)?
        }
        None => serve_on(&args, &endpoint, config, backend, host, pump)?,
    }
    drop(lock);
    Ok(())
}

/// Serves `backend` on the runtime `args.runtime` names until terminated.
fn serve_on<B: Backend>(
    args: &ServeArgs,
    endpoint: &str,
    config: DriverConfig,
    backend: B,
    host: Host,
    pump: PumpConfig,
) -> Result<(), ServeError> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    match args.runtime {
        RuntimeKind::Tokio => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .max_blocking_threads(volplane_service::BLOCKING_THREADS)
                .thread_keep_alive(volplane_service::BLOCKING_IDLE)
                .build()
                .map_err(|e| ServeError::Setup(format!("cannot start the tokio runtime: {e}")))?;
            if let (Some(address), Some(metrics)) = (&args.http_endpoint, &pump.metrics) {
                let listener = rt
                    .block_on(volplane_tokio::bind_http(address))
                    .map_err(ServeError::Setup)?;
                let (endpoint, metrics) = (endpoint.to_string(), metrics.clone());
                let probe: HealthProbe = Arc::new(move || {
                    let endpoint = endpoint.clone();
                    Box::pin(async move {
                        let connected = volplane_tokio::connect(&endpoint).await;
                        probe_driver(&endpoint, connected, None).await
                    })
                });
                let serving =
                    volplane_tokio::serve_http(listener, metrics, probe, std::future::pending());
                rt.spawn(serving);
            }
            rt.block_on(async {
                let stop = volplane_tokio::termination()?;
                volplane_tokio::serve(endpoint, config, backend, host, pump, stop).await
            })?;
        }
        RuntimeKind::Smol => {
            let rt = volplane_smol::Runtime::new(threads)
                .map_err(|e| ServeError::Setup(format!("cannot start the smol runtime: {e}")))?;
            let stop = volplane_smol::termination()?;
            if let (Some(address), Some(metrics)) = (&args.http_endpoint, &pump.metrics) {
                let listener = rt
                    .block_on(volplane_smol::bind_http(address))
                    .map_err(ServeError::Setup)?;
                let (endpoint, metrics) = (endpoint.to_string(), metrics.clone());
                let probe: HealthProbe = Arc::new(move || {
                    let endpoint = endpoint.clone();
                    Box::pin(async move {
                        let connected = volplane_smol::connect(&endpoint).await;
                        let origin = http::Uri::from_static("http://localhost");
                        probe_driver(&endpoint, connected, Some(origin)).await
                    })
                });
                let serving = volplane_smol::serve_http(
                    rt.clone(),
                    listener,
                    metrics,
                    probe,
                    std::future::pending(),
                );
                rt.spawn(serving).detach();
            }
            rt.block_on(volplane_smol::serve(
                &rt, endpoint, config, backend, host, pump, stop,
            ))?;
        }
    }
    Ok(())
}
