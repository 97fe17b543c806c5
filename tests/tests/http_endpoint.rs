//! `volplane serve --http-endpoint` on both runtimes: /healthz answers from
//! a Probe through the driver's own socket, /metrics counts every served
//! call as csi-lib-utils labels it.

mod common;

use std::time::{Duration, Instant};

use common::{Driver, Runtime};

async fn metrics_and_health(runtime: Runtime) {
    require_root!();
    let d = Driver::start(runtime);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let socket = d.root().join("served.sock");
    let mut child = d
        .serve_command(
            &d.root().join("state2"),
            &format!("unix://{}", socket.display()),
        )
        .arg("--http-endpoint")
        .arg(&address)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let healthz = loop {
        match common::http_get(&address, "/healthz").await {
            Some(h) if h.starts_with("HTTP/1.1 200") => break h,
            other if Instant::now() > deadline => {
                let _ = child.kill();
                panic!("no healthy /healthz within 20 s: {other:?}");
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    assert!(healthz.ends_with("ok\n"), "{healthz}");
    let metrics = common::http_get(&address, "/metrics").await.unwrap();
    let missing = common::http_get(&address, "/nope").await.unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    assert!(
        metrics.contains(r#"driver_name="volplane.csi.io",method_name="/csi.v1.Identity/Probe",grpc_status_code="OK"}"#),
        "{metrics}"
    );
}

both_runtimes!(serve_answers_metrics_and_healthz, metrics_and_health);
