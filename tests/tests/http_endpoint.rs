//! `volplane serve --http-endpoint` on both runtimes: /healthz answers from
//! a Probe through the driver's own socket, /metrics counts every served
//! call as csi-lib-utils labels it.

mod common;

use std::time::{Duration, Instant};

use common::{Driver, Runtime};

/// The first healthy answer of `address`'s /healthz within 20 s; `server`
/// is killed if none comes.
async fn healthy(address: &str, server: &mut std::process::Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match common::http_get(address, "/healthz").await {
            Some(h) if h.starts_with("HTTP/1.1 200") => return h,
            other if Instant::now() > deadline => {
                let _ = server.kill();
                panic!("no healthy /healthz within 20 s: {other:?}");
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn metrics_and_health(runtime: Runtime) {
    require_root!();
    let d = Driver::start(runtime);
    let port = common::cluster::free_port();
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
    let healthz = healthy(&address, &mut child).await;
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

/// `volplane livenessprobe` beside a driver, as livenessprobe in a node
/// plugin's DaemonSet (its manifest's flags): /healthz is 200 while the
/// driver answers Probe, 500 naming the socket once it is gone, and /metrics is
/// where --metrics-path says.
#[tokio::test]
async fn livenessprobe_answers_from_the_drivers_probe() {
    require_root!();
    let mut d = Driver::start(Runtime::Tokio);
    let port = common::cluster::free_port();
    let address = format!("127.0.0.1:{port}");
    let mut probe = std::process::Command::new(env!("CARGO_BIN_EXE_volplane-under-test"))
        .args([
            "livenessprobe",
            "-v=2",
            "--probe-timeout=3s",
            "--metrics-path=/m",
        ])
        .arg(format!("--csi-address={}", d.endpoint))
        .arg(format!("--health-port={port}"))
        .arg("--enable-pprof=false")
        .spawn()
        .unwrap();
    let healthy = healthy(&address, &mut probe).await;
    assert!(healthy.ends_with("ok\n"), "{healthy}");
    let metrics = common::http_get(&address, "/m").await.unwrap();
    assert!(metrics.starts_with("HTTP/1.1 200"), "{metrics}");
    d.kill();
    let gone = common::http_get(&address, "/healthz").await.unwrap();
    let _ = probe.kill();
    let _ = probe.wait();
    assert!(gone.starts_with("HTTP/1.1 500"), "{gone}");
    assert!(gone.contains(&d.endpoint), "names the socket: {gone}");
}
