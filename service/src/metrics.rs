//! Metrics and health over HTTP (`--http-endpoint`), runtime-neutral: the
//! CSI call histogram with csi-lib-utils' name and labels, each controller's
//! queue depth and retries and client-go's workqueue and leader-election
//! metrics, in Prometheus' text format; `/healthz` answers as
//! livenessprobe does, from a Probe of the CSI driver.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use volplane_core::Code;

/// csi-lib-utils' buckets for `csi_sidecar_operations_seconds`.
pub const BUCKETS: [f64; 13] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 25.0, 50.0, 120.0, 300.0, 600.0,
];

/// One CSI call's labels, as csi-lib-utils names them.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// The driver (GetPluginInfo's name).
    pub driver_name: String,
    /// The full gRPC method, `/csi.v1.Controller/CreateVolume`.
    pub method_name: String,
    /// grpc-go's name of the answer's code (`OK`, `DeadlineExceeded`…).
    pub grpc_status_code: String,
}

/// client-go's workqueue buckets: 10 ns to 10 s, by tens.
pub const QUEUE_BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

/// A work queue's label, as client-go's workqueue metrics name it.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// The queue's name (upstream's: `claims`, `csi-attacher-va`…).
    pub name: String,
}

/// client-go's workqueue metrics of each role's queue.
#[derive(Debug)]
struct Workqueues {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    retries: Family<QueueLabels, Counter>,
    waited: Family<QueueLabels, Histogram>,
    worked: Family<QueueLabels, Histogram>,
}

/// A provisioned claim's labels, as external-provisioner's.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProvisionLabels {
    /// The claim's storageClassName.
    pub class: String,
    /// The kind of the claim's dataSource (`VolumeSnapshot`…), or "".
    pub source: String,
}

/// Prometheus' default buckets, external-provisioner's for its latencies.
pub const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// external-provisioner's `controller_persistentvolumeclaim_provision_*`.
#[derive(Debug)]
struct Provisions {
    done: Family<ProvisionLabels, Counter>,
    failed: Family<ProvisionLabels, Counter>,
    took: Family<ProvisionLabels, Histogram>,
}

/// One snapshot operation's labels, as external-snapshotter's controller
/// names them.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SnapshotOpLabels {
    /// The snapshot's driver (`unknown` when none is known yet).
    pub driver_name: String,
    /// `CreateSnapshot`, `CreateSnapshotAndReady` or `DeleteSnapshot`.
    pub operation_name: String,
    /// `dynamic` or `pre-provisioned`.
    pub snapshot_type: String,
    /// `success` or `cancel`.
    pub operation_status: String,
}

/// external-snapshotter's buckets for its operation latencies.
pub const SNAPSHOT_BUCKETS: [f64; 13] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];

/// A controller's label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `provisioner`, `attacher`…
    pub controller: String,
}

/// The process's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Mutex<Registry>,
    calls: Family<CallLabels, Histogram>,
    queue: Family<ControllerLabels, Gauge>,
    retries: Family<ControllerLabels, Counter>,
    queues: Workqueues,
    /// `leader_election_master_status{name}`: 1 while this process leads.
    leading: Family<QueueLabels, Gauge>,
    provisions: Provisions,
    /// `snapshot_controller_operation_total_seconds` and
    /// `snapshot_controller_operations_in_flight`.
    snapshot_ops: Family<SnapshotOpLabels, Histogram>,
    snapshot_in_flight: Gauge,
    /// Where they are served (`--metrics-path`).
    path: String,
}

/// OpenMetrics text (what prometheus-client writes) as Prometheus' text
/// format: `# HELP`/`# TYPE` of a counter name the `_total` its samples
/// carry, helps read as given, and no `# EOF`.
fn classic(openmetrics: &str) -> String {
    let counters: std::collections::BTreeSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines().filter(|l| *l != "# EOF") {
        let family = ["# HELP ", "# TYPE "]
            .iter()
            .find_map(|p| Some((*p, line.strip_prefix(p)?)));
        match family {
            Some((prefix, rest)) => {
                let (name, mut tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let total = if counters.contains(name) {
                    "_total"
                } else {
                    ""
                };
                if prefix == "# HELP " {
                    // prometheus-client ends every help with a period;
                    // the help given is upstream's as it is.
                    tail = tail.strip_suffix('.').unwrap_or(tail);
                }
                out.push_str(&format!("{prefix}{name}{total} {tail}"));
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

fn label(name: &str) -> QueueLabels {
    QueueLabels { name: name.into() }
}

/// The gRPC service a CSI method belongs to.
pub fn grpc_method(method: &str) -> String {
    let service = match method {
        "GetPluginInfo" | "GetPluginCapabilities" | "Probe" => "Identity",
        m if m.starts_with("Node") => "Node",
        m if m.contains("GroupSnapshot") => "GroupController",
        _ => "Controller",
    };
    format!("/csi.v1.{service}/{method}")
}

impl Metrics {
    /// Every family registered, none observed yet.
    pub fn new() -> Arc<Metrics> {
        Metrics::at("/metrics")
    }

    /// Metrics served at `path` (`--metrics-path`) rather than `/metrics`.
    pub fn at(path: &str) -> Arc<Metrics> {
        let calls = Family::<CallLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(BUCKETS.iter().copied())
        });
        let queue = Family::<ControllerLabels, Gauge>::default();
        let retries = Family::<ControllerLabels, Counter>::default();
        let mut registry = Registry::default();
        registry.register(
            "csi_sidecar_operations_seconds",
            "Container Storage Interface operation duration with gRPC error code status total",
            calls.clone(),
        );
        registry.register(
            "volplane_controller_queue_depth",
            "Inputs waiting for a controller's machine",
            queue.clone(),
        );
        registry.register(
            "volplane_controller_retries",
            "Operations that failed and will be retried with backoff",
            retries.clone(),
        );
        let histogram = || Histogram::new(QUEUE_BUCKETS.iter().copied());
        let queues = Workqueues {
            depth: Family::default(),
            adds: Family::default(),
            retries: Family::default(),
            waited: Family::new_with_constructor(histogram),
            worked: Family::new_with_constructor(histogram),
        };
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            queues.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            queues.adds.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            queues.retries.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested.",
            queues.waited.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes.",
            queues.worked.clone(),
        );
        let leading = Family::<QueueLabels, Gauge>::default();
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
            leading.clone(),
        );
        let provisions = Provisions {
            done: Family::default(),
            failed: Family::default(),
            took: Family::new_with_constructor(|| Histogram::new(DEFAULT_BUCKETS.iter().copied())),
        };
        registry.register(
            "controller_persistentvolumeclaim_provision",
            "Total number of persistent volumes provisioned succesfully. Broken down by storage class name and source of the claim.",
            provisions.done.clone(),
        );
        registry.register(
            "controller_persistentvolumeclaim_provision_failed",
            "Total number of persistent volume provision failed attempts. Broken down by storage class name and source of the claim.",
            provisions.failed.clone(),
        );
        registry.register(
            "controller_persistentvolumeclaim_provision_duration_seconds",
            "Latency in seconds to provision persistent volumes. Failed provisioning attempts are ignored. Broken down by storage class name and source of the claim.",
            provisions.took.clone(),
        );
        let snapshot_ops = Family::<SnapshotOpLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(SNAPSHOT_BUCKETS.iter().copied())
        });
        registry.register(
            "snapshot_controller_operation_total_seconds",
            "Total number of seconds spent by the controller on an operation",
            snapshot_ops.clone(),
        );
        let snapshot_in_flight = Gauge::default();
        registry.register(
            "snapshot_controller_operations_in_flight",
            "Total number of operations in flight",
            snapshot_in_flight.clone(),
        );
        Arc::new(Metrics {
            registry: Mutex::new(registry),
            provisions,
            snapshot_ops,
            snapshot_in_flight,
            calls,
            queue,
            retries,
            queues,
            leading,
            path: path.into(),
        })
    }

    /// Records one CSI call: its method (`CreateVolume`), answer and duration.
    pub fn csi_call(&self, driver: &str, method: &str, code: Code, took: Duration) {
        self.calls
            .get_or_create(&CallLabels {
                driver_name: driver.into(),
                method_name: grpc_method(method),
                grpc_status_code: code.go_name().into(),
            })
            .observe(took.as_secs_f64());
    }

    /// A controller's queue depth now (its work queue is `queue`).
    pub fn queue_depth(&self, controller: &str, queue: &str, depth: usize) {
        let depth = i64::try_from(depth).unwrap_or(i64::MAX);
        self.queue
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .set(depth);
        self.queues.depth.get_or_create(&label(queue)).set(depth);
    }

    /// A controller's operation failed and will be retried; `queue` is
    /// its work queue's name.
    pub fn retried(&self, controller: &str, queue: &str) {
        self.retries
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .inc();
        self.queues.retries.get_or_create(&label(queue)).inc();
    }

    /// An input was added to the work queue `queue`.
    pub fn queue_added(&self, queue: &str) {
        self.queues.adds.get_or_create(&label(queue)).inc();
    }

    /// An input of `queue` waited `waited` before its machine took it.
    pub fn queue_taken(&self, queue: &str, waited: Duration) {
        self.queues
            .waited
            .get_or_create(&label(queue))
            .observe(waited.as_secs_f64());
    }

    /// The machine of `queue` took `took` over one input.
    pub fn queue_worked(&self, queue: &str, took: Duration) {
        self.queues
            .worked
            .get_or_create(&label(queue))
            .observe(took.as_secs_f64());
    }

    /// A claim of `class` (from a dataSource of kind `source`, "" for
    /// none) was provisioned in `took` (`None`: the attempt failed).
    pub fn provisioned(&self, class: &str, source: &str, took: Option<Duration>) {
        let labels = ProvisionLabels {
            class: class.into(),
            source: source.into(),
        };
        match took {
            Some(took) => {
                self.provisions.done.get_or_create(&labels).inc();
                self.provisions
                    .took
                    .get_or_create(&labels)
                    .observe(took.as_secs_f64());
            }
            None => {
                self.provisions.failed.get_or_create(&labels).inc();
            }
        }
    }

    /// A snapshot operation ended (`labels`) after `took`.
    pub fn snapshot_operation(&self, labels: &SnapshotOpLabels, took: Duration) {
        self.snapshot_ops
            .get_or_create(labels)
            .observe(took.as_secs_f64());
    }

    /// How many snapshot operations are under way.
    pub fn snapshot_operations_in_flight(&self, n: usize) {
        self.snapshot_in_flight
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// This process leads under the lease `name` (`on`) or not.
    pub fn leading(&self, name: &str, on: bool) {
        self.leading.get_or_create(&label(name)).set(i64::from(on));
    }

    /// The metrics in Prometheus' text format (0.0.4), as client-go's
    /// servers answer: a counter's family is named with its `_total`.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        classic(&out)
    }
}

/// Why `/healthz` fails: what the driver answered, or why nothing did.
#[derive(Debug, thiserror::Error)]
pub enum Unhealthy {
    /// The driver's socket could not be dialled.
    #[error(
        "no CSI driver answers at {endpoint} ({reason}): is the driver running, and its socket mounted here?"
    )]
    NoDriver {
        /// The driver's endpoint.
        endpoint: String,
        /// What the transport said.
        reason: String,
    },
    /// The driver answered Probe: not ready.
    #[error("{endpoint} answered Probe: not ready")]
    NotReady {
        /// The driver's endpoint.
        endpoint: String,
    },
    /// The driver answered a call with an error, or with something else
    /// than the call's answer.
    #[error("{method} on {endpoint}: {answer}")]
    Refused {
        /// The driver's endpoint.
        endpoint: String,
        /// `Probe`, `GetPluginInfo`.
        method: &'static str,
        /// Its code and message, or what came instead.
        answer: String,
    },
    /// No answer in time.
    #[error("{method} on {endpoint}: no answer within {within:?}")]
    Silent {
        /// The driver's endpoint.
        endpoint: String,
        /// `Probe`, `GetPluginInfo`.
        method: &'static str,
        /// How long it was given.
        within: std::time::Duration,
    },
    /// node-driver-registrar's registration socket is not there.
    #[error("registration socket {}: {source}", path.display())]
    NoRegistrationSocket {
        /// Where it should be.
        path: std::path::PathBuf,
        /// Why it is not found.
        source: std::io::Error,
    },
}

/// A Probe of the driver, for `/healthz`: `Ok` when it answers ready.
pub type HealthProbe =
    Arc<dyn Fn() -> crate::registration::BoxFuture<Result<(), Unhealthy>> + Send + Sync>;

/// A [`HealthProbe`] of the driver at `endpoint`: each probe dials it with
/// `connect` (the runtime's) and asks Probe ([`probe_driver`]).
pub fn health_probe<F, Fut, T, E>(
    endpoint: &str,
    connect: F,
    origin: Option<http::Uri>,
) -> HealthProbe
where
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<T, E>> + Send + 'static,
    T: volplane_proto::client::Transport + Send,
    E: std::fmt::Display + Send,
{
    let (endpoint, connect) = (endpoint.to_string(), Arc::new(connect));
    Arc::new(move || {
        let (endpoint, connect, origin) = (endpoint.clone(), connect.clone(), origin.clone());
        Box::pin(async move {
            let connected = connect(endpoint.clone()).await;
            probe_driver(&endpoint, connected, origin).await
        })
    })
}

/// livenessprobe's check over `connected`, a channel a runtime opened to the
/// driver at `endpoint`: it answers Probe, ready.
pub async fn probe_driver<T, E>(
    endpoint: &str,
    connected: Result<T, E>,
    origin: Option<http::Uri>,
) -> Result<(), Unhealthy>
where
    T: volplane_proto::client::Transport,
    E: std::fmt::Display,
{
    let endpoint = endpoint.to_string();
    let ch = connected.map_err(|e| Unhealthy::NoDriver {
        endpoint: endpoint.clone(),
        reason: e.to_string(),
    })?;
    match volplane_proto::client::CsiClient::new(ch, origin)
        .call(&volplane_core::driver::Request::Probe)
        .await
    {
        Ok(volplane_core::driver::Response::Probe { ready: true }) => Ok(()),
        Ok(_) => Err(Unhealthy::NotReady { endpoint }),
        Err(s) => Err(Unhealthy::Refused {
            endpoint,
            method: "Probe",
            answer: format!("{}: {}", s.code.name(), s.message),
        }),
    }
}

/// `host:port` for an `--http-endpoint` (`:port` listens on every interface).
pub fn http_address(endpoint: &str) -> String {
    if endpoint.starts_with(':') {
        format!("0.0.0.0{endpoint}")
    } else {
        endpoint.to_string()
    }
}

/// An HTTP answer: status code, content type, body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// 200, 404, 500…
    pub status: u16,
    /// The content type.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

/// What `--http-endpoint` answers for `path`; `probe` is the outcome of a
/// Probe of the driver (asked only for `/healthz`).
pub async fn answer<F>(path: &str, metrics: &Metrics, probe: impl FnOnce() -> F) -> Answer
where
    F: std::future::Future<Output = Result<(), Unhealthy>>,
{
    let text = |status, body: String| Answer {
        status,
        content_type: "text/plain; charset=utf-8",
        body,
    };
    match path {
        p if p == metrics.path => Answer {
            status: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: metrics.encode(),
        },
        "/healthz" => match probe().await {
            Ok(()) => text(200, "ok\n".into()),
            Err(e) => text(500, format!("{e}\n")),
        },
        _ => text(
            404,
            format!("{path}: not found (try {} or /healthz)\n", metrics.path),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_labelled_as_csi_lib_utils_does() {
        let m = Metrics::new();
        m.csi_call(
            "d.example.com",
            "CreateVolume",
            Code::Ok,
            Duration::from_millis(30),
        );
        m.csi_call(
            "d.example.com",
            "NodeStageVolume",
            Code::DeadlineExceeded,
            Duration::from_secs(20),
        );
        m.queue_depth("provisioner", "claims", 3);
        m.retried("attacher", "csi-attacher-va");
        let text = m.encode();
        for line in [
            r#"csi_sidecar_operations_seconds_bucket{le="0.1",driver_name="d.example.com",method_name="/csi.v1.Controller/CreateVolume",grpc_status_code="OK"} 1"#,
            r#"csi_sidecar_operations_seconds_count{driver_name="d.example.com",method_name="/csi.v1.Node/NodeStageVolume",grpc_status_code="DeadlineExceeded"} 1"#,
            r#"volplane_controller_queue_depth{controller="provisioner"} 3"#,
            r#"volplane_controller_retries_total{controller="attacher"} 1"#,
        ] {
            assert!(text.contains(line), "{line}\nnot in\n{text}");
        }
        assert_eq!(grpc_method("Probe"), "/csi.v1.Identity/Probe");
    }

    #[test]
    fn healthz_is_the_drivers_probe() {
        let m = Metrics::new();
        let ok = futures::executor::block_on(answer("/healthz", &m, || async { Ok(()) }));
        assert_eq!((ok.status, ok.body.as_str()), (200, "ok\n"));
        let bad = futures::executor::block_on(answer("/healthz", &m, || async {
            Err(Unhealthy::NoDriver {
                endpoint: "unix:///csi/csi.sock".into(),
                reason: "connection refused".into(),
            })
        }));
        assert_eq!(bad.status, 500);
        assert!(bad.body.contains("refused"));
        let none = futures::executor::block_on(answer("/x", &m, || async { Ok(()) }));
        assert_eq!(none.status, 404);
    }
}

#[cfg(test)]
mod scrape {
    use super::*;
    use prometheus_parse::{Scrape, Value};

    /// A class name from a hostile StorageClass cannot forge a family:
    /// label values are escaped, and no line it makes reads as `# TYPE`.
    #[test]
    fn a_hostile_label_value_stays_a_label_value() {
        let m = Metrics::new();
        let evil = "x\"}\n# TYPE workqueue_depth counter\nforged 1";
        m.queue_depth("provisioner", "claims", 0);
        m.provisioned(evil, "", Some(Duration::from_millis(1)));
        let text = m.encode();
        assert!(!text.lines().any(|l| l.starts_with("forged")), "{text}");
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("# TYPE workqueue_depth "))
                .count(),
            1,
            "{text}"
        );
        assert!(text.contains("# TYPE workqueue_depth gauge"), "{text}");
        assert!(
            text.contains("# HELP workqueue_depth Current depth of workqueue\n"),
            "upstream's help, as it is: {text}"
        );
    }

    /// The `/metrics` text as a Prometheus server reads it: every family
    /// with upstream's name, labels and type.
    #[test]
    fn the_metrics_read_as_upstreams() {
        let m = Metrics::new();
        m.queue_added("claims");
        m.queue_depth("provisioner", "claims", 1);
        m.queue_taken("claims", Duration::from_millis(3));
        m.queue_worked("claims", Duration::from_micros(40));
        m.retried("provisioner", "claims");
        m.leading("hostpath-csi-k8s-io", true);
        m.provisioned("fast", "", Some(Duration::from_millis(300)));
        m.provisioned("fast", "VolumeSnapshot", None);
        m.snapshot_operation(
            &SnapshotOpLabels {
                driver_name: "hostpath.csi.k8s.io".into(),
                operation_name: "CreateSnapshotAndReady".into(),
                snapshot_type: "dynamic".into(),
                operation_status: "success".into(),
            },
            Duration::from_secs(2),
        );
        m.snapshot_operations_in_flight(1);
        m.csi_call(
            "hostpath.csi.k8s.io",
            "CreateVolume",
            Code::Ok,
            Duration::from_millis(20),
        );
        let text = m.encode();
        let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
        let find = |name: &str| {
            scrape
                .samples
                .iter()
                .find(|s| s.metric == name)
                .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
        };
        let label = |name: &str, key: &str| find(name).labels.get(key).map(String::from);
        for (name, kind) in [
            ("workqueue_depth", "gauge"),
            ("workqueue_adds_total", "counter"),
            ("workqueue_retries_total", "counter"),
            ("workqueue_queue_duration_seconds", "histogram"),
            ("workqueue_work_duration_seconds", "histogram"),
        ] {
            assert_eq!(label(name, "name").as_deref(), Some("claims"), "{name}");
            let typed = match &find(name).value {
                Value::Gauge(_) => "gauge",
                Value::Counter(_) => "counter",
                Value::Histogram(_) => "histogram",
                other => panic!("{name}: {other:?}"),
            };
            assert_eq!(typed, kind, "{name}");
        }
        for (name, kind) in [
            (
                "controller_persistentvolumeclaim_provision_total",
                "counter",
            ),
            (
                "controller_persistentvolumeclaim_provision_failed_total",
                "counter",
            ),
            (
                "controller_persistentvolumeclaim_provision_duration_seconds",
                "histogram",
            ),
        ] {
            let s = find(name);
            assert_eq!(s.labels.get("class"), Some("fast"), "{name}");
            let typed = match &s.value {
                Value::Counter(_) => "counter",
                Value::Histogram(_) => "histogram",
                other => panic!("{name}: {other:?}"),
            };
            assert_eq!(typed, kind, "{name}");
        }
        assert_eq!(
            find("controller_persistentvolumeclaim_provision_failed_total")
                .labels
                .get("source"),
            Some("VolumeSnapshot")
        );
        let op = find("snapshot_controller_operation_total_seconds");
        assert!(matches!(op.value, Value::Histogram(_)), "{op:?}");
        for (k, v) in [
            ("driver_name", "hostpath.csi.k8s.io"),
            ("operation_name", "CreateSnapshotAndReady"),
            ("snapshot_type", "dynamic"),
            ("operation_status", "success"),
        ] {
            assert_eq!(op.labels.get(k), Some(v), "{k}");
        }
        assert!(matches!(
            find("snapshot_controller_operations_in_flight").value,
            Value::Gauge(n) if n == 1.0
        ));
        let Value::Gauge(leading) = find("leader_election_master_status").value else {
            panic!("leader_election_master_status is no gauge");
        };
        assert_eq!(leading, 1.0);
        assert_eq!(
            label("leader_election_master_status", "name").as_deref(),
            Some("hostpath-csi-k8s-io")
        );
        let Value::Histogram(buckets) = &find("workqueue_queue_duration_seconds").value else {
            unreachable!()
        };
        let bounds: Vec<f64> = buckets.iter().map(|b| b.less_than).collect();
        assert_eq!(&bounds[..10], &QUEUE_BUCKETS, "client-go's buckets");
        assert_eq!(
            label("csi_sidecar_operations_seconds", "method_name").as_deref(),
            Some("/csi.v1.Controller/CreateVolume")
        );
    }
}
