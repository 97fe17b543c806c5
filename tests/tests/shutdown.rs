//! Shutting down is bounded whatever the API server does: `volplane
//! controller --leader-election`, waiting for its Lease while the API server
//! refuses connections or accepts them and never answers, exits cleanly
//! within a second of SIGTERM (it was still "reading the lease" 20 s
//! after SIGTERM); livenessprobe exits as promptly with a request half sent.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Driver, Runtime};

/// `volplane controller --leader-election` against `server`; its log lines
/// come back on the receiver.
fn controller(driver: &Driver, server: &str) -> (Child, mpsc::Receiver<String>) {
    let config = common::process::kubeconfig(driver.root(), "kubeconfig", server, "t");
    let mut child = Command::new(env!("CARGO_BIN_EXE_volplane-under-test"))
        .args(["controller", "--csi-address", &driver.endpoint])
        .args([
            "--leader-election",
            "--leader-election-namespace",
            "kube-system",
        ])
        .arg("--kubeconfig")
        .arg(config)
        .env("POD_NAME", "replica-1")
        .env("VOLPLANE_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, log) = mpsc::channel();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    (child, log)
}

/// Waits for a log line containing `what`.
fn logged(log: &mpsc::Receiver<String>, what: &str, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match log.recv_timeout(left) {
            Ok(line) => {
                let found = line.contains(what);
                seen.push(line);
                if found {
                    return seen;
                }
            }
            Err(_) => break,
        }
    }
    panic!("no log line with {what:?} within {limit:?}; the log:\n{seen:#?}");
}

/// SIGTERM; the exit status and how long it took.
fn terminate(child: &mut Child, limit: Duration) -> (std::process::ExitStatus, Duration) {
    let asked = Instant::now();
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, asked.elapsed());
        }
        if asked.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running {limit:?} after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stops_while_waiting_for_the_lease(server: &str, failing: &str) {
    let driver = Driver::start(Runtime::Tokio);
    let (mut child, log) = controller(&driver, server);
    logged(
        &log,
        "attempting to acquire the leader lease",
        Duration::from_secs(20),
    );
    // Its reads of the Lease fail (or hang) for a while.
    logged(&log, failing, Duration::from_secs(20));
    let (status, took) = terminate(&mut child, Duration::from_secs(15));
    assert!(status.success(), "exited with {status}");
    // Well under the 10 s bound the process gives itself (well under a
    // second is typical; a loaded CI host gets slack).
    assert!(
        took < Duration::from_secs(5),
        "took {took:?} to stop after SIGTERM"
    );
}

#[test]
fn a_replica_waiting_for_its_lease_stops_on_sigterm_while_the_api_server_refuses() {
    // A port nothing listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    stops_while_waiting_for_the_lease(&format!("http://127.0.0.1:{port}"), "reading the lease");
}

#[test]
fn a_replica_waiting_for_its_lease_stops_on_sigterm_while_the_api_server_is_silent() {
    // Connections are accepted (by the kernel) and never answered.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    stops_while_waiting_for_the_lease(
        &format!("http://127.0.0.1:{port}"),
        "did not answer within the renew deadline",
    );
    drop(silent);
}

#[test]
fn livenessprobe_stops_on_sigterm_with_a_request_half_sent() {
    let driver = Driver::start(Runtime::Tokio);
    let port = common::cluster::free_port();
    let mut probe = Command::new(env!("CARGO_BIN_EXE_volplane-under-test"))
        .args(["livenessprobe", "--probe-timeout=3s"])
        .arg(format!("--csi-address={}", driver.endpoint))
        .arg(format!("--health-port={port}"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut held = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "livenessprobe never listened: {e}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    std::io::Write::write_all(&mut held, b"GET /healthz HTTP/1.1\r\nHost: x\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let (status, took) = terminate(&mut probe, Duration::from_secs(15));
    assert!(status.success(), "exited with {status}");
    // Well under the 10 s bound the process gives itself (well under a
    // second is typical; a loaded CI host gets slack).
    assert!(
        took < Duration::from_secs(5),
        "took {took:?} to stop after SIGTERM"
    );
    drop(held);
}
