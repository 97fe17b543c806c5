//! `volplane serve`: the reference driver.

use std::path::PathBuf;

use clap::Args;
use volplane::{Backend, Driver, Runtime};

use crate::knobs::Knobs;
use crate::reference::{Reference, ZONE_KEY};

/// The reference driver's name.
pub const DRIVER_NAME: &str = volplane_lab::DRIVER_NAME;

/// `volplane serve`'s flags.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen, as kubelet writes it. Default:
    /// `unix://<kubelet-dir>/plugins/volplane.csi.io/csi.sock`
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
    /// Where volume images and directories live. Default: `<state-dir>/volumes`
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

/// Which async runtime runs the adapters: tokio (with tonic's transport)
/// or smol (hyper 1, no tokio runtime).
// Doc comments on the variants would become clap's per-value help and
// turn every --help that lists them into its long form.
#[allow(missing_docs)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeKind {
    Tokio,
    Smol,
}

/// Why `serve` could not run.
pub type ServeError = volplane::Error;

/// The reference driver, built on [`volplane::Driver`] exactly as a driver
/// author builds theirs.
pub fn driver<B: Backend>(args: &ServeArgs, backend: B) -> Driver<B> {
    let endpoint = args.endpoint.clone().unwrap_or_else(|| {
        format!(
            "unix://{}/plugins/{}/csi.sock",
            args.kubelet_dir.display(),
            args.driver_name
        )
    });
    let mut d = Driver::new(&args.driver_name, backend)
        .version(env!("CARGO_PKG_VERSION"))
        .state_dir(&args.state_dir)
        .kubelet_dir(&args.kubelet_dir)
        .storage_dir(volumes_dir(args))
        .endpoint(&endpoint)
        .max_volumes_per_node(args.max_volumes_per_node)
        .topology(ZONE_KEY, &args.zone)
        .runtime(match args.runtime {
            RuntimeKind::Tokio => Runtime::Tokio,
            RuntimeKind::Smol => Runtime::Smol,
        });
    if let Some(id) = &args.node_id {
        d = d.node_id(id);
    }
    if args.controller && !args.node {
        d = d.controller_only();
    } else if args.node && !args.controller {
        d = d.node_only();
    }
    for n in &args.known_nodes {
        d = d.known_node(n);
    }
    if let Some(address) = &args.http_endpoint {
        d = d.http_endpoint(address);
    }
    d
}

fn volumes_dir(args: &ServeArgs) -> PathBuf {
    args.volumes_dir
        .clone()
        .unwrap_or_else(|| args.state_dir.join("volumes"))
}

/// Runs the reference driver on the runtime `args.runtime` names.
pub fn run(args: ServeArgs, knobs: Knobs) -> Result<(), ServeError> {
    let backend = Reference::new(volumes_dir(&args), args.zone.clone())
        .accepting(args.mutable_parameters.iter().cloned());
    let knob = |name: &str| std::env::var(name).ok().filter(|s| !s.is_empty());
    let (crash_after, slow) = (
        knob("VOLPLANE_CRASH_AFTER"),
        knob("VOLPLANE_SLOW_CREATE_MS"),
    );
    if crash_after.is_none() && slow.is_none() {
        return planted(driver(&args, backend), knobs).serve();
    }
    #[cfg(feature = "crash-hooks")]
    if knobs.crash_hooks() {
        let slow = match slow.map(|ms| ms.parse::<u64>()) {
            Some(Ok(ms)) => Some(std::time::Duration::from_millis(ms)),
            Some(Err(_)) => {
                return Err(ServeError::Setup(
                    "VOLPLANE_SLOW_CREATE_MS: give a whole number of milliseconds".to_string(),
                ));
            }
            None => None,
        };
        let hooked = crate::crash::CrashAfter::new(backend, crash_after.unwrap_or_default())
            .slow_create(slow);
        return planted(driver(&args, hooked), knobs).serve();
    }
    tracing::warn!(
        "VOLPLANE_CRASH_AFTER and VOLPLANE_SLOW_CREATE_MS are test knobs this volplane does not honour (the tests' volplane-under-test does); ignoring them"
    );
    planted(driver(&args, backend), knobs).serve()
}

/// `d` with the mistakes `VOLPLANE_PLANT` names planted (comma-separated;
/// a test knob honoured only by the tests' binary of a build with the
/// `plants` feature; any other says it ignores it).
fn planted<B: volplane::Backend>(d: volplane::Driver<B>, knobs: Knobs) -> volplane::Driver<B> {
    let Some(name) = std::env::var("VOLPLANE_PLANT")
        .ok()
        .filter(|s| !s.is_empty())
    else {
        return d;
    };
    if knobs.plants() {
        #[cfg(feature = "plants")]
        return plant_all(d, &name);
    }
    tracing::warn!(plant = %name, "VOLPLANE_PLANT is a test knob this volplane does not honour (the tests' volplane-under-test does); ignoring it");
    d
}

/// `d` with each plant `names` (comma-separated) names.
#[cfg(feature = "plants")]
fn plant_all<B: volplane::Backend>(mut d: volplane::Driver<B>, names: &str) -> volplane::Driver<B> {
    for name in names.split(',').map(str::trim) {
        match volplane_core::plant::Plant::parse(name) {
            Some(p) => {
                tracing::warn!(
                    plant = p.name(),
                    "planting a known mistake, as VOLPLANE_PLANT asked: {}",
                    p.describe()
                );
                d = d.plant(p);
            }
            None => {
                tracing::error!(plant = %name, "VOLPLANE_PLANT names no such plant; not planting it");
            }
        }
    }
    d
}
