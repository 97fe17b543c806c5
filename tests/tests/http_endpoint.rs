//! `volplane serve --http-endpoint` on both runtimes: /healthz answers from
//! a Probe through the driver's own socket, /metrics counts every served
//! call as csi-lib-utils labels it.

mod common;

use std::time::{Duration, Instant};

use common::{Driver, Runtime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn get(address: &str, path: &str) -> Option<String> {
    let mut s = tokio::net::TcpStream::connect(address).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).await.ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).await.ok()?;
    Some(out)
}

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
        match get(&address, "/healthz").await {
            Some(h) if h.starts_with("HTTP/1.1 200") => break h,
            other if Instant::now() > deadline => {
                let _ = child.kill();
                panic!("no healthy /healthz within 20 s: {other:?}");
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    assert!(healthz.ends_with("ok\n"), "{healthz}");
    let metrics = get(&address, "/metrics").await.unwrap();
    let missing = get(&address, "/nope").await.unwrap();
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
