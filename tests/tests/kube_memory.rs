//! A benchmark, not a test: `volplane controller`'s memory at scale, as a
//! process, against a played API server (volplane-kube's `FakeApi`, served
//! over HTTP by this process: lists a page at a time, watches from a
//! version) and `volplane serve`. No kube-apiserver is needed, so it runs
//! anywhere; what it measures is the controller's own memory — the played
//! server's is in this process, not in the one measured.
//!
//! For each claim count in `VOLPLANE_BENCH_CLAIMS` (`1000,10000`), on a
//! fresh server: `VOLPLANE_BENCH_NODES` Nodes with their CSINodes (500), then
//! the claims, until all are Bound (the controller's own binder and
//! protection controllers, as kube-controller-manager's stand-ins);
//! `VOLPLANE_BENCH_ATTACHMENTS` VolumeAttachments (1000) until attached, then
//! deleted until gone; then every claim deleted until no PV is left. It
//! prints the controller's RSS idle, at the end of each phase, at peak, and
//! once everything is gone, and the slope between the first two sizes.
//!
//! ```sh
//! cargo test -p volplane-tests --release --test kube_memory -- --ignored --nocapture
//! ```
//!
//! `VOLPLANE_BENCH_QPS` sets the roles' client QPS (100; burst twice it).
//! `VOLPLANE_BENCH_CONTROLLER` names another `volplane` binary to measure as
//! the controller (an earlier build, side by side).
//! `VOLPLANE_BENCH_HEAPTRACK=/usr/bin/heaptrack` runs the controller under
//! heaptrack (its profile is left in the temporary directory, named in the
//! log; the controller is killed at the end, so what it still held shows as
//! leaked). `VOLPLANE_BENCH_STOP_AT_BOUND=1` ends each size once its claims
//! are Bound (with heaptrack: what 10,000 bound claims hold).
//! `VOLPLANE_BENCH_SMAPS=FILE` saves the controller's /proc/PID/smaps once
//! everything is gone (where the resident pages are).

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::cluster::env_number;
use common::process::{Terminated, kubeconfig, status_kib};
use serde_json::{Value, json};
use volplane_kube::fake::FakeApi;

const NODE: &str = "node-1";
const DRIVER: &str = common::DRIVER;
const CLAIMS: &str = "/api/v1/persistentvolumeclaims";
const PVS: &str = "/api/v1/persistentvolumes";
const VAS: &str = "/apis/storage.k8s.io/v1/volumeattachments";

/// Serves `api` over HTTP/1.1 on a port of its own; the port.
async fn serve_over_http(api: FakeApi) -> u16 {
    use http_body_util::BodyExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let api = api.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let api = api.clone();
                        async move {
                            let (parts, body) = req.into_parts();
                            let bytes = body.collect().await?.to_bytes();
                            Ok::<_, hyper::Error>(api.answer(parts, &bytes))
                        }
                    },
                );
                let io = hyper_util::rt::TokioIo::new(stream);
                // A connection per request: the API server speaks HTTP/2
                // to a client (one connection, a stream per request), and
                // the pool of idle HTTP/1.1 connections a client would
                // keep here is not what it holds in a cluster.
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(false)
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    port
}

/// The class, the CSIDriver, and `nodes` Nodes with their CSINodes.
fn seed(api: &FakeApi, nodes: usize) {
    api.put(
        "/apis/storage.k8s.io/v1/storageclasses/volplane",
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
               "metadata": {"name": "volplane"}, "provisioner": DRIVER,
               "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate",
               "parameters": {"kind": "dir"}}),
    );
    api.put(
        &format!("/apis/storage.k8s.io/v1/csidrivers/{DRIVER}"),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
               "metadata": {"name": DRIVER}, "spec": {"attachRequired": true}}),
    );
    for i in 0..nodes {
        let name = node(i);
        api.put(
            &format!("/api/v1/nodes/{name}"),
            json!({"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": name, "labels": {common::cluster::ZONE_KEY: "local"}},
                   "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        api.put(
            &format!("/apis/storage.k8s.io/v1/csinodes/{name}"),
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                   "metadata": {"name": name},
                   "spec": {"drivers": [{"name": DRIVER, "nodeID": name,
                                         "topologyKeys": [common::cluster::ZONE_KEY]}]}}),
        );
    }
}

fn node(i: usize) -> String {
    match i {
        0 => NODE.to_string(),
        k => format!("bench-node-{k:04}"),
    }
}

/// The controller's pid under heaptrack: the process running the binary
/// among heaptrack's children (beside its interpreter).
fn measured_pid(child: &Child) -> u32 {
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    let binary = std::env::var("VOLPLANE_BENCH_CONTROLLER")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_volplane-under-test").into());
    let binary = Path::new(&binary);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(&children).unwrap_or_default();
        let found = text
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .find(|pid: &u32| {
                std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == binary)
            });
        if let Some(pid) = found {
            return pid;
        }
        assert!(Instant::now() < deadline, "heaptrack started no controller");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One size's run: the processes, and the figures as they come.
struct Run {
    api: FakeApi,
    pid: u32,
    controller: Terminated,
    _driver: Terminated,
    /// The highest RSS sampled (KiB), kept by a sampler.
    peak: Arc<AtomicU64>,
    /// What each phase ended at: (phase, seconds, RSS KiB).
    phases: Vec<(String, f64, u64)>,
}

impl Run {
    fn start(dir: &Path, api: FakeApi, port: u16) -> Run {
        let socket = dir.join("csi.sock");
        let log = |name: &str| std::fs::File::create(dir.join(name)).unwrap();
        let driver = Command::new(env!("CARGO_BIN_EXE_volplane-under-test"))
            .args(["serve", "--controller", "--node-id", NODE])
            .arg(format!("--endpoint=unix://{}", socket.display()))
            .arg("--state-dir")
            .arg(dir.join("state"))
            .arg("--kubelet-dir")
            .arg(dir.join("kubelet"))
            .stdout(Stdio::null())
            .stderr(log("volplane-serve.log"))
            .spawn()
            .unwrap();
        let qps = env_number("VOLPLANE_BENCH_QPS", 100);
        let heaptrack = std::env::var_os("VOLPLANE_BENCH_HEAPTRACK");
        let built = env!("CARGO_BIN_EXE_volplane-under-test");
        let binary = std::env::var("VOLPLANE_BENCH_CONTROLLER").unwrap_or_else(|_| built.into());
        let mut c = match &heaptrack {
            Some(h) => {
                let out = std::env::temp_dir()
                    .join(format!("volplane-controller-{}", std::process::id()));
                eprintln!("  heaptrack's profile: {}.*", out.display());
                let mut c = Command::new(h);
                c.arg("-o").arg(out).arg(&binary);
                c
            }
            None => Command::new(&binary),
        };
        c.args(["controller", "--resizer=false"])
            .args(["--binder", "--pv-protection", "--pvc-protection"])
            .arg(format!("--csi-address=unix://{}", socket.display()))
            .arg("--kubeconfig")
            .arg(kubeconfig(
                dir,
                "kubeconfig",
                &format!("http://127.0.0.1:{port}"),
                "t",
            ))
            .arg(format!("--kube-api-qps={qps}"))
            .arg(format!("--kube-api-burst={}", qps * 2))
            .env("POD_NAME", "volplane-bench")
            .env("NAMESPACE", "default")
            .stdout(Stdio::null())
            .stderr(log("volplane-controller.log"));
        let controller = c.spawn().unwrap();
        let pid = if heaptrack.is_some() {
            measured_pid(&controller)
        } else {
            controller.id()
        };
        let peak = Arc::new(AtomicU64::new(0));
        let sampled = peak.clone();
        std::thread::spawn(move || {
            while std::fs::metadata(format!("/proc/{pid}")).is_ok() {
                sampled.fetch_max(status_kib(pid, "VmRSS"), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Run {
            api,
            pid,
            controller: Terminated(controller),
            _driver: Terminated(driver),
            peak,
            phases: Vec::new(),
        }
    }

    fn rss(&self) -> u64 {
        status_kib(self.pid, "VmRSS")
    }

    /// Waits until `done` says so, up to `limit`; records the phase.
    async fn phase(
        &mut self,
        what: String,
        since: Instant,
        limit: Duration,
        done: impl Fn(&FakeApi) -> bool,
    ) {
        let deadline = since + limit;
        let mut shown = Instant::now();
        while !done(&self.api) {
            if let Ok(Some(status)) = self.controller.0.try_wait() {
                panic!("{what}: the controller exited ({status})");
            }
            assert!(
                Instant::now() < deadline,
                "{what}: not done within {limit:?}"
            );
            if shown.elapsed() > Duration::from_secs(30) {
                eprintln!(
                    "  … {what}: {:.0} s, RSS {:.1} MiB",
                    since.elapsed().as_secs_f64(),
                    mib(self.rss())
                );
                shown = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let (took, rss) = (since.elapsed().as_secs_f64(), self.rss());
        println!("  {what}: {took:.1} s, RSS {:.1} MiB", mib(rss));
        self.phases.push((what, took, rss));
    }
}

impl Drop for Run {
    /// Under heaptrack, the controller is killed (SIGKILL) itself: what it
    /// held at the end shows as leaked in the profile.
    fn drop(&mut self) {
        if self.pid != self.controller.0.id() {
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(self.pid.to_string())
                .status();
        }
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn claim(i: usize) -> (String, Value) {
    let name = format!("claim-{i:05}");
    let path = format!("/api/v1/namespaces/default/persistentvolumeclaims/{name}");
    let object = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "volplane",
                 "resources": {"requests": {"storage": "1Mi"}}}});
    (path, object)
}

/// What one size measured.
struct Figures {
    claims: usize,
    idle: u64,
    bound: u64,
    peak: u64,
    after: u64,
}

async fn measure(claims: usize, attachments: usize, nodes: usize) -> Figures {
    let dir = tempfile::Builder::new()
        .prefix("volplane-memory-")
        .tempdir()
        .unwrap();
    let api = FakeApi::unlogged();
    seed(&api, nodes);
    let port = serve_over_http(api.clone()).await;
    let mut run = Run::start(dir.path(), api.clone(), port);
    println!(
        "{claims} claims, {attachments} attachments, {nodes} nodes ({})",
        dir.path().display()
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle = run.rss();
    println!("  idle: RSS {:.1} MiB", mib(idle));
    let limit = Duration::from_secs(120) + Duration::from_millis(300) * claims as u32;

    let start = Instant::now();
    for i in 0..claims {
        let (path, object) = claim(i);
        api.put(&path, object);
    }
    let bound = |v: &Value| v["status"]["phase"] == "Bound";
    run.phase(format!("{claims} claims to Bound"), start, limit, |a| {
        a.count(CLAIMS, bound) == claims
    })
    .await;
    let at_bound = run.rss();
    if std::env::var_os("VOLPLANE_BENCH_STOP_AT_BOUND").is_some() {
        println!("  stopped at Bound (VOLPLANE_BENCH_STOP_AT_BOUND)");
        return Figures {
            claims,
            idle,
            bound: at_bound,
            peak: run.peak.load(Ordering::Relaxed),
            after: at_bound,
        };
    }

    let start = Instant::now();
    let pvs = api.paths(PVS);
    let a = attachments.min(pvs.len());
    for (i, pv) in pvs.iter().take(a).enumerate() {
        let name = format!("va-{i:05}");
        let volume = pv.rsplit('/').next().unwrap();
        api.put(
            &format!("{VAS}/{name}"),
            json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                   "metadata": {"name": name},
                   "spec": {"attacher": DRIVER, "nodeName": node(i % nodes),
                            "source": {"persistentVolumeName": volume}}}),
        );
    }
    let attached = |v: &Value| v["status"]["attached"] == true;
    run.phase(format!("{a} attachments attached"), start, limit, |x| {
        x.count(VAS, attached) == a
    })
    .await;
    let start = Instant::now();
    for path in api.paths(VAS) {
        api.delete_as_user(&path);
    }
    run.phase(format!("{a} attachments gone"), start, limit, |x| {
        x.count(VAS, |_| true) == 0
    })
    .await;

    let start = Instant::now();
    for path in api.paths(CLAIMS) {
        api.delete_as_user(&path);
    }
    run.phase(
        format!("{claims} claims deleted, no PV left"),
        start,
        limit,
        |x| x.count(PVS, |_| true) == 0 && x.count(CLAIMS, |_| true) == 0,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let after = run.rss();
    if let Some(to) = std::env::var_os("VOLPLANE_BENCH_SMAPS") {
        // Where the resident pages are, mapping by mapping.
        let smaps = std::fs::read(format!("/proc/{}/smaps", run.pid)).unwrap_or_default();
        std::fs::write(&to, smaps).unwrap();
        eprintln!(
            "  its memory map once all is gone: {}",
            to.to_string_lossy()
        );
    }
    let peak = run
        .peak
        .load(Ordering::Relaxed)
        .max(status_kib(run.pid, "VmHWM"));
    println!(
        "  controller RSS: idle {:.1} MiB, at Bound {:.1} MiB, peak {:.1} MiB, all gone (15 s later) {:.1} MiB",
        mib(idle),
        mib(at_bound),
        mib(peak),
        mib(after)
    );
    drop(run);
    Figures {
        claims,
        idle,
        bound: at_bound,
        peak,
        after,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run by hand with --ignored --nocapture"]
async fn bench_controller_memory_at_scale() {
    let sizes: Vec<usize> = std::env::var("VOLPLANE_BENCH_CLAIMS")
        .unwrap_or_else(|_| "1000,10000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("VOLPLANE_BENCH_CLAIMS: numbers"))
        .collect();
    let attachments = env_number("VOLPLANE_BENCH_ATTACHMENTS", 1000);
    let nodes = env_number("VOLPLANE_BENCH_NODES", 500).max(1);
    let mut figures = Vec::new();
    for claims in sizes {
        figures.push(measure(claims, attachments, nodes).await);
    }
    println!("\nclaims  idle MiB  at Bound  peak  all gone");
    for f in &figures {
        println!(
            "{:>6}  {:>8.1}  {:>8.1}  {:>5.1}  {:>8.1}",
            f.claims,
            mib(f.idle),
            mib(f.bound),
            mib(f.peak),
            mib(f.after)
        );
    }
    if let [a, b, ..] = &figures[..] {
        let slope = (b.bound as f64 - a.bound as f64) / (b.claims as f64 - a.claims as f64);
        println!(
            "slope at Bound between {} and {} claims: {slope:.2} KiB per claim",
            a.claims, b.claims
        );
    }
}
