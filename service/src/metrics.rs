//! Metrics and health over HTTP (`--http-endpoint`), runtime-neutral: the
//! CSI call histogram with csi-lib-utils' name and labels, each controller's
//! queue depth and retries, in OpenMetrics text; `/healthz` answers as
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
    /// Where they are served (`--metrics-path`).
    path: String,
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
        Arc::new(Metrics {
            registry: Mutex::new(registry),
            calls,
            queue,
            retries,
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

    /// A controller's queue depth now.
    pub fn queue_depth(&self, controller: &str, depth: usize) {
        self.queue
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// A controller's operation failed and will be retried.
    pub fn retried(&self, controller: &str) {
        self.retries
            .get_or_create(&ControllerLabels {
                controller: controller.into(),
            })
            .inc();
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

/// A Probe of the driver, for `/healthz`: `Ok` when it answers ready.
pub type HealthProbe =
    Arc<dyn Fn() -> crate::registration::BoxFuture<Result<(), String>> + Send + Sync>;

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
) -> Result<(), String>
where
    T: volplane_proto::client::Transport,
    E: std::fmt::Display,
{
    let ch = connected.map_err(|e| format!("connect {endpoint}: {e}"))?;
    match volplane_proto::client::CsiClient::new(ch, origin)
        .call(&volplane_core::driver::Request::Probe)
        .await
    {
        Ok(volplane_core::driver::Response::Probe { ready: true }) => Ok(()),
        Ok(_) => Err(format!("{endpoint} answered Probe: not ready")),
        Err(s) => Err(format!(
            "Probe on {endpoint}: {}: {}",
            s.code.name(),
            s.message
        )),
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
    F: std::future::Future<Output = Result<(), String>>,
{
    let text = |status, body: String| Answer {
        status,
        content_type: "text/plain; charset=utf-8",
        body,
    };
    match path {
        p if p == metrics.path => Answer {
            status: 200,
            content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
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
        m.queue_depth("provisioner", 3);
        m.retried("attacher");
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
            Err("Probe: UNAVAILABLE: connect /csi/csi.sock: refused".to_string())
        }));
        assert_eq!(bad.status, 500);
        assert!(bad.body.contains("refused"));
        let none = futures::executor::block_on(answer("/x", &m, || async { Ok(()) }));
        assert_eq!(none.status, 404);
    }
}
