//! `volplane controller`: external-provisioner, external-attacher and
//! external-resizer for any CSI driver (volplane-kube), with the sidecars'
//! flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use volplane_core::lease::LeaseTimings;
use volplane_kube::controller::{ControllerConfig, Flags, Switches};
use volplane_kube::election::{LeaseConfig, lead, lease_name};
use volplane_proto::client::CsiClient;

/// `volplane controller`'s flags.
#[derive(Debug, Args)]
pub struct ControllerArgs {
    /// The CSI driver's controller socket.
    #[arg(long, default_value = "unix:///csi/csi.sock")]
    pub csi_address: String,
    /// A kubeconfig file; without it, the in-cluster config (or the usual
    /// KUBECONFIG and ~/.kube/config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// How long a CSI call may take, in seconds (or with a unit: 15s, 2m).
    #[arg(long, default_value = "15s", value_parser = duration)]
    pub timeout: Duration,
    /// How often every cached object is looked at again (`--resync`:
    /// external-attacher's name for it).
    #[arg(long, alias = "resync", default_value = "10m", value_parser = duration)]
    pub resync_period: Duration,
    /// Each role's API calls a second (client-go's token bucket; 0: the
    /// default 5, negative: no limit).
    #[arg(long, default_value_t = 5.0, allow_negative_numbers = true)]
    pub kube_api_qps: f64,
    /// The burst each role's API calls may take at once.
    #[arg(long, default_value_t = 10)]
    pub kube_api_burst: u32,
    /// How many CSI calls each role has in flight at most (`--workers`:
    /// external-resizer's name). Default: 100 with the provisioner (as
    /// external-provisioner), 10 otherwise.
    #[arg(long, alias = "workers")]
    pub worker_threads: Option<usize>,
    /// How long the first retry of a failed operation waits; each next
    /// one waits twice as long, up to --retry-interval-max.
    #[arg(long, default_value = "1s", value_parser = duration)]
    pub retry_interval_start: Duration,
    /// The longest a retry waits.
    #[arg(long, default_value = "5m", value_parser = duration)]
    pub retry_interval_max: Duration,
    /// The API server's address, overriding the kubeconfig's.
    #[arg(long)]
    pub master: Option<String>,
    /// Run external-provisioner's role.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub provisioner: bool,
    /// Run external-attacher's role.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub attacher: bool,
    /// Run external-resizer's role.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub resizer: bool,
    /// Also run the PV controller's binder (for clusters whose
    /// kube-controller-manager runs without it).
    #[arg(long)]
    pub binder: bool,
    /// Also run the attach/detach controller (likewise).
    #[arg(long)]
    pub attach_detach: bool,
    /// Also run pvc-protection (likewise).
    #[arg(long)]
    pub pvc_protection: bool,
    /// Also run pv-protection (likewise).
    #[arg(long)]
    pub pv_protection: bool,
    /// Also run csi-snapshotter's role, and restore claims from
    /// VolumeSnapshots (needs the snapshot CRDs of
    /// kubernetes-csi/external-snapshotter installed).
    #[arg(long)]
    pub snapshotter: bool,
    /// Also run the snapshot controller (for clusters without
    /// external-snapshotter's snapshot-controller; needs the snapshot CRDs).
    #[arg(long)]
    pub snapshot_controller: bool,
    /// Serve VolumeGroupSnapshots in the snapshotter and snapshot
    /// controller roles (needs the group snapshot CRDs of
    /// kubernetes-csi/external-snapshotter, and a driver with the
    /// GroupController service).
    #[arg(long)]
    pub enable_volume_group_snapshots: bool,
    /// Act only while holding a coordination.k8s.io/v1 Lease
    /// (`volplane-<driver>`), so that replicas never act at once.
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub leader_election: bool,
    /// The Lease's namespace. Default: this pod's namespace.
    #[arg(long)]
    pub leader_election_namespace: Option<String>,
    /// How long others honour the Lease after it last changed.
    #[arg(long, default_value = "15s", value_parser = duration)]
    pub leader_election_lease_duration: Duration,
    /// How long the leader keeps acting without renewing.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub leader_election_renew_deadline: Duration,
    /// How often candidates and the leader try.
    #[arg(long, default_value = "5s", value_parser = duration)]
    pub leader_election_retry_period: Duration,
    /// The filesystem when a StorageClass names none.
    #[arg(long = "default-fstype", default_value = "")]
    pub default_fs_type: String,
    /// Give CreateVolume the selected node's topology segment alone as the
    /// requisite (with WaitForFirstConsumer), as external-provisioner's
    /// flag of that name.
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub strict_topology: bool,
    /// Give CreateVolume of a claim without a selected node the segments
    /// of every node the driver is on (off: no accessibility requirement
    /// unless the class has allowedTopologies).
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub immediate_topology: bool,
    /// Refuse to restore a snapshot in another volume mode than its
    /// source's unless its VolumeSnapshotContent carries
    /// `snapshot.storage.kubernetes.io/allow-volume-mode-change: "true"`.
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub prevent_volume_mode_conversion: bool,
    /// Also pass the claim's and PV's names (CreateVolume) and the
    /// snapshot's and content's (CreateSnapshot) to the driver, as
    /// `csi.storage.k8s.io/pvc/name` and the like.
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub extra_create_metadata: bool,
    /// Give a volume whose only access mode is ReadOnlyMany a read-only PV,
    /// so it is published (ControllerPublishVolume) read-only.
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub controller_publish_readonly: bool,
    /// Also pass the claim's and PV's names to ControllerModifyVolume, as
    /// `csi.storage.k8s.io/pvc/name` and the like.
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub extra_modify_metadata: bool,
    /// Publish CSIStorageCapacity objects (storage.k8s.io/v1) from the
    /// driver's GetCapacity, one per topology segment and
    /// WaitForFirstConsumer class, in the namespace `NAMESPACE` names.
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enable_capacity: bool,
    /// How often every CSIStorageCapacity object is refreshed.
    #[arg(long, default_value = "1m", value_parser = duration)]
    pub capacity_poll_interval: Duration,
    /// Which object owns the CSIStorageCapacity objects, counted from the
    /// pod `POD_NAME` names: -1 none, 0 the pod, 1 its StatefulSet,
    /// DaemonSet or ReplicaSet, 2 a ReplicaSet's Deployment.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub capacity_ownerref_level: i64,
    /// Publish capacity for classes with Immediate binding too (the
    /// scheduler does not need it).
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub capacity_for_immediate_binding: bool,
    /// Accepted for external-provisioner's manifests; the capacity tracker
    /// runs on the one loop.
    #[arg(long, default_value_t = 1)]
    pub capacity_threads: u32,
    /// Run beside the driver on each node (a DaemonSet) and provision only
    /// claims whose selected node is this one (`NODE_NAME`); capacity is
    /// published for this node's segment.
    #[arg(long, default_value_t = false, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub node_deployment: bool,
    /// With --node-deployment: claims with Immediate binding are taken by
    /// the first node with room that selects itself for them.
    #[arg(long, default_value_t = true, num_args = 0..=1, require_equals = true,
          default_missing_value = "true", action = clap::ArgAction::Set)]
    pub node_deployment_immediate_binding: bool,
    /// With --node-deployment: how long a node waits at first before it
    /// tries to take an Immediate claim.
    #[arg(long, default_value = "20s", value_parser = duration)]
    pub node_deployment_base_delay: Duration,
    /// With --node-deployment: how long it waits at most.
    #[arg(long, default_value = "60s", value_parser = duration)]
    pub node_deployment_max_delay: Duration,
    /// Volumes are named `<prefix>-<claim UID>`.
    #[arg(long, default_value = "pvc", value_parser = name_prefix)]
    pub volume_name_prefix: String,
    /// Cut the UID in volume names to this many characters, without its
    /// dashes (-1: the whole UID).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true, value_parser = uuid_length)]
    pub volume_name_uuid_length: i64,
    /// Storage snapshots are named `<prefix>-<VolumeSnapshot UID>`.
    #[arg(long, default_value = "snapshot", value_parser = name_prefix)]
    pub snapshot_name_prefix: String,
    /// Cut the UID in snapshot names likewise (-1: the whole UID).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true, value_parser = uuid_length)]
    pub snapshot_name_uuid_length: i64,
    /// --http-endpoint, --metrics-address, --metrics-path.
    #[command(flatten)]
    pub http: crate::upstream::HttpFlags,
    /// Set when run as one sidecar's stand-in (`volplane csi-attacher`):
    /// its role alone, under its Lease.
    #[arg(skip)]
    pub sidecar: Option<crate::upstream::Sidecar>,
    /// Log verbosity as the sidecars take it (klog's -v): 0–1 info, 2–4
    /// debug, 5 and up trace. VOLPLANE_LOG overrides it.
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
}

/// A name prefix: a non-empty DNS-1123 label start, since names are
/// `<prefix>-<UID>`.
fn name_prefix(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
        && s.bytes().next().is_some_and(|c| c.is_ascii_alphanumeric());
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "{s:?} cannot start an object name: lower-case letters, digits, '-' and '.', starting with a letter or digit"
        ))
    }
}

/// A UID length: -1 (the whole UID) or 1 to 32 (a UID has 32 hex digits).
fn uuid_length(s: &str) -> Result<i64, String> {
    match s.parse::<i64>() {
        Ok(n) if n == -1 || (1..=32).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is neither -1 (the whole UID) nor 1 to 32")),
    }
}

/// A duration as Go's flags take it (`15s`, `500ms`, `1m30s`, `1.5h`,
/// `0`), or a bare number of seconds (`15`).
pub fn duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a duration (15s, 2m, 500ms, 1m30s)");
    if !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) {
        return s.parse().map(Duration::from_secs).map_err(|_| bad());
    }
    if s.is_empty() {
        return Err(bad());
    }
    let mut rest = s;
    let mut total = 0f64;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(bad)?;
        let n: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => return Err(format!("{s:?}: unit {u:?} is none of ns, us, ms, s, m, h")),
        };
        total += n * seconds;
        rest = &rest[unit..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| bad())
}

/// The kube client of the controller process (User-Agent `volplane/<version>
/// (controller)`): from `kubeconfig`, or inferred (in-cluster first).
pub async fn kube_client(kubeconfig: Option<&PathBuf>) -> Result<kube::Client, String> {
    let config = kube_config(kubeconfig).await?;
    volplane_kube::client::client_for(&config, "controller")
        .map_err(|e| format!("Kubernetes client: {e}"))
}

/// The kube client configuration: from `kubeconfig`, or inferred
/// (in-cluster first).
pub async fn kube_config(kubeconfig: Option<&PathBuf>) -> Result<kube::Config, String> {
    Ok(match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| format!("--kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|e| format!("--kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer().await.map_err(|e| {
            format!("no Kubernetes config (in-cluster, KUBECONFIG or ~/.kube/config): {e}")
        })?,
    })
}

/// Connects to the driver, retrying every second as the sidecars do (the
/// driver's container may start later), until `stop` says to give up.
pub async fn connect_driver(
    address: &str,
    stop: &mut (impl std::future::Future<Output = ()> + Unpin),
) -> Option<tonic::transport::Channel> {
    let mut tries = 0u32;
    loop {
        match volplane_tokio::connect(address).await {
            Ok(ch) => return Some(ch),
            Err(e) => {
                if tries.is_multiple_of(10) {
                    tracing::warn!("still connecting to {address}: {e}");
                }
                tries += 1;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = &mut *stop => return None,
        }
    }
}

/// Runs one sidecar's role alone, as the sidecar would (its worker
/// default, its Lease), until SIGTERM.
pub fn run_as(sidecar: crate::upstream::Sidecar, mut args: ControllerArgs) -> Result<(), String> {
    use crate::upstream::Sidecar::*;
    args.provisioner = sidecar == Provisioner;
    args.attacher = sidecar == Attacher;
    args.resizer = sidecar == Resizer;
    args.snapshotter = sidecar == Snapshotter;
    args.sidecar = Some(sidecar);
    run(args)
}

/// Runs the controller until SIGTERM.
pub fn run(args: ControllerArgs) -> Result<(), String> {
    // Informers, caches and calls on every worker thread share one heap.
    volplane_host::memory::one_heap();
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("tokio runtime: {e}"))?;
    let timings = LeaseTimings {
        lease_duration: millis(args.leader_election_lease_duration),
        renew_deadline: millis(args.leader_election_renew_deadline),
        retry_period: millis(args.leader_election_retry_period),
    };
    if args.leader_election {
        timings
            .check()
            .map_err(|e| format!("--leader-election: {e}"))?;
    }
    let result = rt.block_on(async move {
        let signal = volplane_tokio::termination().map_err(|e| e.to_string())?;
        let stop: Stop = futures::FutureExt::shared(Box::pin(signal));
        let serving = serve(args, timings, stop.clone());
        // Whatever the API server or the driver do, shutting down is bounded.
        let bound = async {
            stop.await;
            tokio::time::sleep(SHUTDOWN_BOUND).await;
        };
        tokio::select! {
            result = serving => result,
            () = bound => {
                tracing::error!(
                    "still shutting down {SHUTDOWN_BOUND:?} after the signal: stopping now"
                );
                Ok(())
            }
        }
    });
    // A blocking call still running must not hold the process.
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

/// The process's shutdown signal, which every part waits on.
type Stop =
    futures::future::Shared<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>;

/// How long shutting down may take after SIGTERM before the process exits
/// anyway: well inside a pod's default 30-second grace period.
const SHUTDOWN_BOUND: Duration = Duration::from_secs(10);

/// Connects, elects and runs the roles until `stop`.
async fn serve(args: ControllerArgs, timings: LeaseTimings, stop: Stop) -> Result<(), String> {
    let mut kube_config = kube_config(args.kubeconfig.as_ref()).await?;
    if let Some(master) = &args.master {
        kube_config.cluster_url = master
            .parse()
            .map_err(|e| format!("--master {master:?}: {e}"))?;
    }
    let client_for = |role: &str| volplane_kube::client::client_for(&kube_config, role);
    let client = client_for("leader-election").map_err(|e| format!("Kubernetes client: {e}"))?;
    // The same configuration made a client above: the roles' cannot fail.
    let clients = move |role: &str| client_for(role).unwrap_or_else(|_| client.clone());
    let http = match args.http.address() {
        Some(address) => Some(
            volplane_tokio::bind_http(address)
                .await
                .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    let Some(channel) = connect_driver(&args.csi_address, &mut stop.clone()).await else {
        return Ok(());
    };
    let identity = identity();
    let mut csi = CsiClient::new(channel, None);
    let metrics = args.http.metrics();
    let mut http_ended = None;
    if let Some(listener) = http {
        let probe = health_probe(&args.csi_address, args.timeout);
        let (serving, ended) = volplane_service::watched(
            "the /healthz and /metrics server",
            volplane_tokio::serve_http(listener, metrics.clone(), probe, std::future::pending()),
        );
        tokio::spawn(serving);
        http_ended = Some(ended);
    }
    if let Err(e) = volplane_host::memory::give_back_every(Duration::from_secs(10)) {
        tracing::warn!(
            "cannot start the thread that gives freed memory back: {e}; memory once used stays resident"
        );
    }
    let election = if args.leader_election {
        let facts = volplane_kube::controller::driver_facts(&mut csi)
            .await
            .map_err(|e| e.to_string())?;
        Some(LeaseConfig {
            namespace: args
                .leader_election_namespace
                .clone()
                .unwrap_or_else(own_namespace),
            name: match args.sidecar {
                Some(s) => s.lease_name(&facts.name),
                None => lease_name(&facts.name),
            },
            identity: identity.clone(),
            timings,
            metrics: metrics.clone(),
        })
    } else {
        None
    };
    let capacity = capacity_tracking(&args, &clients("capacity")).await?;
    let node_deployment = node_deployment(&args, &mut csi).await?;
    let config = controller_config(args, identity, metrics, capacity, node_deployment);
    let elector = clients("leader-election");
    let rt: std::sync::Arc<dyn volplane_service::drive::Runtime> =
        std::sync::Arc::new(volplane_tokio::Tokio);
    let controller = volplane_kube::controller::run(rt.clone(), clients, csi, config, stop.clone());
    let running = async {
        match election {
            None => controller.await.map_err(|e| e.to_string()),
            Some(lease) => match lead(rt, elector, lease, controller, stop)
                .await
                .map_err(|e| e.to_string())?
            {
                Some(ended) => ended.map_err(|e| e.to_string()),
                None => Ok(()),
            },
        }
    };
    let Some(http_ended) = http_ended else {
        return running.await;
    };
    tokio::select! {
        result = running => result,
        why = http_ended => Err(format!(
            "{why}; volplane controller stops so that it is started again"
        )),
    }
}

/// The roles' configuration from the flags.
#[allow(clippy::needless_update)] // every field but the test knobs
fn controller_config(
    args: ControllerArgs,
    identity: String,
    metrics: std::sync::Arc<volplane_service::metrics::Metrics>,
    capacity: Option<volplane_kube::controller::CapacityTracking>,
    node_deployment: Option<volplane_kube::controller::NodeDeployment>,
) -> ControllerConfig {
    let worker_threads = args
        .worker_threads
        .unwrap_or(if args.provisioner { 100 } else { 10 });
    ControllerConfig {
        timeout: args.timeout,
        resync: args.resync_period,
        identity,
        metrics,
        kube_api: (args.kube_api_qps, args.kube_api_burst),
        worker_threads,
        flags: role_flags(args, capacity, node_deployment),
        // Test knobs, present only in test builds (feature `fake-api`).
        ..ControllerConfig::default()
    }
}

/// The role catalogue's flags, from the command line's.
fn role_flags(
    args: ControllerArgs,
    capacity: Option<volplane_kube::controller::CapacityTracking>,
    node_deployment: Option<volplane_kube::controller::NodeDeployment>,
) -> Flags {
    Flags {
        switches: Switches {
            provisioner: args.provisioner,
            attacher: args.attacher,
            resizer: args.resizer,
            binder: args.binder,
            attach_detach: args.attach_detach,
            pvc_protection: args.pvc_protection,
            pv_protection: args.pv_protection,
            snapshotter: args.snapshotter,
            snapshot_controller: args.snapshot_controller,
            group_snapshots: args.enable_volume_group_snapshots,
        },
        default_fs_type: args.default_fs_type,
        strict_topology: args.strict_topology,
        immediate_topology: args.immediate_topology,
        prevent_volume_mode_conversion: args.prevent_volume_mode_conversion,
        extra_create_metadata: args.extra_create_metadata,
        extra_modify_metadata: args.extra_modify_metadata,
        controller_publish_readonly: args.controller_publish_readonly,
        volume_naming: (
            args.volume_name_prefix,
            usize::try_from(args.volume_name_uuid_length).ok(),
        ),
        snapshot_naming: (
            args.snapshot_name_prefix,
            usize::try_from(args.snapshot_name_uuid_length).ok(),
        ),
        capacity,
        node_deployment,
        retry_interval: (
            millis(args.retry_interval_start),
            millis(args.retry_interval_max),
        ),
        // csi-provisioner restores from VolumeSnapshots whenever their
        // CRDs are served; `volplane controller` does with --snapshotter.
        restore_snapshots: args.sidecar == Some(crate::upstream::Sidecar::Provisioner),
        // external-provisioner's `<start ms>-<number>-<driver>`, made
        // when the driver's name is known.
        provisioner_identity: None,
        plant: Default::default(),
    }
}

/// `--enable-capacity`'s setup, read from the environment as
/// external-provisioner reads it: `NAMESPACE` for the objects, `POD_NAME`
/// to find their owner.
async fn capacity_tracking(
    args: &ControllerArgs,
    client: &kube::Client,
) -> Result<Option<volplane_kube::controller::CapacityTracking>, String> {
    if !args.enable_capacity {
        return Ok(None);
    }
    let namespace = std::env::var("NAMESPACE")
        .ok()
        .filter(|n| !n.is_empty())
        .ok_or("--enable-capacity: need NAMESPACE env variable for CSIStorageCapacity objects")?;
    let owner = match u32::try_from(args.capacity_ownerref_level) {
        Err(_) => None,
        Ok(level) => {
            let pod = std::env::var("POD_NAME")
                .ok()
                .filter(|n| !n.is_empty())
                .ok_or("--enable-capacity: need POD_NAME env variable to determine CSIStorageCapacity owner (or --capacity-ownerref-level=-1)")?;
            let owner = volplane_kube::owner::lookup(client, &namespace, &pod, level)
                .await
                .map_err(|e| e.to_string())?;
            tracing::info!(
                "using {}/{} {} as owner of CSIStorageCapacity objects",
                owner.api_version,
                owner.kind,
                owner.name
            );
            Some(owner)
        }
    };
    Ok(Some(volplane_kube::controller::CapacityTracking {
        namespace,
        owner,
        poll_interval: Some(millis(args.capacity_poll_interval)),
        immediate_binding: args.capacity_for_immediate_binding,
    }))
}

/// `--node-deployment`'s setup: the node (`NODE_NAME`) and its segment,
/// as the driver's NodeGetInfo reports it.
async fn node_deployment<T: volplane_proto::client::Transport>(
    args: &ControllerArgs,
    csi: &mut CsiClient<T>,
) -> Result<Option<volplane_kube::controller::NodeDeployment>, String> {
    if !args.node_deployment {
        return Ok(None);
    }
    let node = std::env::var("NODE_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .ok_or("The NODE_NAME environment variable must be set when using --node-deployment.")?;
    let topology = match csi.call(&volplane_core::driver::Request::NodeGetInfo).await {
        Ok(volplane_core::driver::Response::NodeInfo {
            accessible_topology,
            ..
        }) => accessible_topology
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        Ok(other) => return Err(format!("--node-deployment: NodeGetInfo answered {other:?}")),
        Err(e) => {
            return Err(format!(
                "--node-deployment: NodeGetInfo: {}: {}",
                e.code.name(),
                e.message
            ));
        }
    };
    Ok(Some(volplane_kube::controller::NodeDeployment {
        node,
        topology,
        immediate_binding: args.node_deployment_immediate_binding,
        base_delay: millis(args.node_deployment_base_delay),
        max_delay: millis(args.node_deployment_max_delay),
    }))
}

/// livenessprobe's check: the driver at `endpoint` answers Probe, ready,
/// within `timeout`.
pub fn health_probe(endpoint: &str, timeout: Duration) -> volplane_tokio::HealthProbe {
    let endpoint = endpoint.to_string();
    std::sync::Arc::new(move || {
        let endpoint = endpoint.clone();
        Box::pin(async move {
            let probe = async {
                let connected = volplane_tokio::connect(&endpoint).await;
                volplane_service::metrics::probe_driver(&endpoint, connected, None).await
            };
            let silent = volplane_service::metrics::Unhealthy::Silent {
                endpoint: endpoint.clone(),
                method: "Probe",
                within: timeout,
            };
            tokio::time::timeout(timeout, probe)
                .await
                .unwrap_or(Err(silent))
        })
    })
}

/// A duration as the machines' clock counts it.
fn millis(d: Duration) -> volplane_core::Tick {
    d.as_millis().try_into().unwrap_or(volplane_core::Tick::MAX)
}

/// The namespace this pod runs in (its service account's), else `default`.
fn own_namespace() -> String {
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .map(|n| n.trim().to_string())
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// This replica's name: the pod's (POD_NAME, as the sidecars' manifests
/// pass it), else the host's.
pub fn identity() -> String {
    std::env::var("POD_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|n| n.trim().to_string())
        .unwrap_or_else(|| "volplane".into())
}

/// The log filter for klog's `-v`.
pub fn verbosity_filter(v: u8) -> &'static str {
    match v {
        // volplane's informers report a failed list or watch themselves.
        0 | 1 => "info,kube_runtime::watcher=error",
        2..=4 => "debug",
        _ => "trace",
    }
}
