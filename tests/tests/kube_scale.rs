//! A benchmark, not a test: the sidecars against `volplane controller` at
//! scale, on the same real control plane — kube-apiserver (with an audit
//! log), kube-controller-manager (the PV binder and both protection
//! controllers, client QPS 100) — each configuration on a fresh one:
//!
//! - **a** csi-provisioner + csi-attacher + the Go reference driver
//!   (csi-driver-host-path's hostpathplugin);
//! - **b** `volplane controller` + the Go reference driver;
//! - **c** `volplane controller` + `volplane serve`;
//! - **d** as c, with `volplane controller`'s own binder and protection
//!   controllers in place of kube-controller-manager (not started).
//!
//! Every controller gets client QPS 100 and burst 200 per role, as the
//! sidecars' flags give each sidecar. Each configuration creates
//! `VOLPLANE_BENCH_CLAIMS` claims (1,000) and waits until all are Bound;
//! creates `VOLPLANE_BENCH_ATTACHMENTS` VolumeAttachments (1,000) of those
//! volumes across `VOLPLANE_BENCH_NODES` Node objects (500; no kubelet),
//! waits until all are attached, deletes them and waits until they are
//! gone; then deletes every claim and waits until no PV is left. It
//! prints, per phase, the wall time and the API requests per object —
//! the API server's `apiserver_request_total`, and the audit log's count
//! per client (User-Agent) — and the controllers' RSS idle and at peak,
//! their CPU seconds, and their CPU use once idle again.
//!
//! ```sh
//! VOLPLANE_TEST_KUBE_APISERVER=… VOLPLANE_TEST_KUBE_CONTROLLER_MANAGER=… \
//! VOLPLANE_TEST_HOSTPATH_PLUGIN=… VOLPLANE_TEST_CSI_PROVISIONER=… \
//! VOLPLANE_TEST_CSI_ATTACHER=… \
//! cargo test -p volplane-tests --release --test kube_scale -- --ignored --nocapture
//! ```
//!
//! `VOLPLANE_BENCH_DETAIL=1` counts each client's requests by verb and
//! resource. `VOLPLANE_BENCH_CONFIGS` picks configurations (`abcd`); those whose
//! binaries are not given are left out, saying so. None of these
//! binaries is in a registry reachable here: build them outside this
//! repository from their public sources.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cluster::{Cluster, claim, cpu_ticks, create, env_number, free_port};
use common::hostpath::{self, HOSTPATH, Killed};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass, VolumeAttachment};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

/// The User-Agent of this harness's own requests, left out of the counts.
const HARNESS: &str = "volplane-bench-harness";
/// The node the drivers run on.
const NODE: &str = "node-1";

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).map(PathBuf::from)
}

/// One configuration under measure.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Setup {
    Sidecars,
    VolplaneBesideHostpath,
    VolplaneServe,
    VolplaneAlone,
}

impl Setup {
    const ALL: [Setup; 4] = [
        Setup::Sidecars,
        Setup::VolplaneBesideHostpath,
        Setup::VolplaneServe,
        Setup::VolplaneAlone,
    ];

    fn letter(self) -> char {
        match self {
            Setup::Sidecars => 'a',
            Setup::VolplaneBesideHostpath => 'b',
            Setup::VolplaneServe => 'c',
            Setup::VolplaneAlone => 'd',
        }
    }

    fn title(self) -> &'static str {
        match self {
            Setup::Sidecars => "csi-provisioner + csi-attacher + hostpathplugin",
            Setup::VolplaneBesideHostpath => "volplane controller + hostpathplugin",
            Setup::VolplaneServe => "volplane controller + volplane serve",
            Setup::VolplaneAlone => {
                "volplane controller (+ binder, protection) + volplane serve, no kube-controller-manager"
            }
        }
    }

    fn hostpath(self) -> bool {
        matches!(self, Setup::Sidecars | Setup::VolplaneBesideHostpath)
    }

    /// What is missing to run it, if anything.
    fn missing(self) -> Option<&'static str> {
        let need: &[&'static str] = match self {
            Setup::Sidecars => &[
                "VOLPLANE_TEST_HOSTPATH_PLUGIN",
                "VOLPLANE_TEST_CSI_PROVISIONER",
                "VOLPLANE_TEST_CSI_ATTACHER",
            ],
            Setup::VolplaneBesideHostpath => &["VOLPLANE_TEST_HOSTPATH_PLUGIN"],
            Setup::VolplaneServe | Setup::VolplaneAlone => &[],
        };
        need.iter().copied().find(|v| env_path(v).is_none())
    }
}

/// The driver of a configuration: its name, class and topology.
struct Driver {
    name: &'static str,
    class: &'static str,
    topology: (&'static str, &'static str),
}

impl Driver {
    fn of(setup: Setup) -> Driver {
        if setup.hostpath() {
            Driver {
                name: HOSTPATH,
                class: "hostpath",
                topology: (hostpath::TOPOLOGY, NODE),
            }
        } else {
            Driver {
                name: common::DRIVER,
                class: "volplane",
                topology: (common::cluster::ZONE_KEY, "local"),
            }
        }
    }

    /// The id the driver knows node `name` by. The Go driver serves one
    /// node and refuses to publish to any other: every Node object stands
    /// for its one node there.
    fn node_id(&self, name: &str) -> String {
        if self.name == HOSTPATH {
            NODE.into()
        } else {
            name.into()
        }
    }

    /// The class, the CSIDriver, and `nodes` Nodes with their CSINodes,
    /// as node-driver-registrar leaves them.
    async fn seed(&self, client: &kube::Client, nodes: usize) {
        create::<StorageClass>(
            client,
            json!({
                "metadata": {"name": self.class}, "provisioner": self.name, "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate", "parameters": {"kind": "dir"}
            }),
        )
        .await;
        create::<CSIDriver>(
            client,
            json!({"metadata": {"name": self.name}, "spec": {"attachRequired": true}}),
        )
        .await;
        let names: Vec<String> = std::iter::once(NODE.to_string())
            .chain((1..nodes).map(|i| format!("bench-node-{i:04}")))
            .collect();
        for chunk in names.chunks(50) {
            futures::future::join_all(chunk.iter().map(|n| self.register(client, n))).await;
        }
    }

    async fn register(&self, client: &kube::Client, name: &str) {
        let (key, value) = self.topology;
        create::<Node>(
            client,
            json!({"metadata": {"name": name, "labels": {key: value}}}),
        )
        .await;
        create::<CSINode>(
            client,
            json!({
                "metadata": {"name": name},
                "spec": {"drivers": [{"name": self.name, "nodeID": self.node_id(name), "topologyKeys": [key]}]}
            }),
        )
        .await;
    }
}

/// A process measured: its name and the process.
struct Measured {
    name: &'static str,
    process: Killed,
}

impl Measured {
    fn start(name: &'static str, mut command: Command, cluster: &Cluster) -> Measured {
        let log = std::fs::File::create(cluster.dir().join(format!("{name}.log"))).unwrap();
        let child = command
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        Measured {
            name,
            process: Killed(child),
        }
    }

    fn pid(&self) -> u32 {
        self.process.0.id()
    }

    /// A field of /proc/<pid>/status, in KiB (VmRSS, VmHWM).
    fn kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()));
        status
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    fn check_alive(&mut self) {
        if let Ok(Some(status)) = self.process.0.try_wait() {
            panic!("{} exited ({status}); see its log", self.name);
        }
    }
}

fn go_sidecar(binary: PathBuf, socket: &Path, cluster: &Cluster) -> Command {
    let mut c = Command::new(binary);
    c.arg(format!("--csi-address={}", socket.display()))
        .arg(format!("--kubeconfig={}", cluster.kubeconfig.display()))
        .args(["--kube-api-qps=100", "--kube-api-burst=200"]);
    c
}

/// The controllers of `setup`, talking to the driver on `socket`.
fn controllers(setup: Setup, socket: &Path, cluster: &Cluster) -> Vec<Measured> {
    if setup == Setup::Sidecars {
        let binary = |v| env_path(v).unwrap();
        return vec![
            Measured::start(
                "csi-provisioner",
                go_sidecar(binary("VOLPLANE_TEST_CSI_PROVISIONER"), socket, cluster),
                cluster,
            ),
            Measured::start(
                "csi-attacher",
                go_sidecar(binary("VOLPLANE_TEST_CSI_ATTACHER"), socket, cluster),
                cluster,
            ),
        ];
    }
    let mut c = Command::new(env!("CARGO_BIN_EXE_volplane-under-test"));
    c.args(["controller", "--resizer=false"])
        .arg(format!("--csi-address=unix://{}", socket.display()))
        .arg(format!("--kubeconfig={}", cluster.kubeconfig.display()))
        .args(["--kube-api-qps=100", "--kube-api-burst=200"])
        .env("POD_NAME", "volplane-bench");
    if setup == Setup::VolplaneAlone {
        c.args(["--binder", "--pv-protection", "--pvc-protection"]);
    }
    vec![Measured::start("volplane-controller", c, cluster)]
}

/// The driver of `setup` on `socket`.
fn driver(setup: Setup, socket: &Path, cluster: &Cluster) -> Measured {
    if setup.hostpath() {
        let binary = env_path("VOLPLANE_TEST_HOSTPATH_PLUGIN").unwrap();
        let plugin = hostpath::plugin(cluster, &binary, socket);
        return Measured {
            name: "hostpathplugin",
            process: plugin,
        };
    }
    let mut c = Command::new(env!("CARGO_BIN_EXE_volplane-under-test"));
    c.args(["serve", "--controller", "--node-id", NODE])
        .arg(format!("--endpoint=unix://{}", socket.display()))
        .arg("--state-dir")
        .arg(cluster.dir().join("volplane-state"))
        .arg("--kubelet-dir")
        .arg(cluster.dir().join("kubelet"));
    Measured::start("volplane-serve", c, cluster)
}

/// kube-controller-manager with the controllers the provisioner needs
/// beside it: the PV binder, pv-protection and pvc-protection.
fn controller_manager(cluster: &Cluster) -> Killed {
    let binary = env_path("VOLPLANE_TEST_KUBE_CONTROLLER_MANAGER").unwrap();
    let log = std::fs::File::create(cluster.dir().join("kube-controller-manager.log")).unwrap();
    Killed(
        Command::new(binary)
            .arg(format!("--kubeconfig={}", cluster.kubeconfig.display()))
            .args([
                "--controllers",
                "persistentvolume-binder-controller,persistentvolume-protection-controller,persistentvolumeclaim-protection-controller",
                "--kube-api-qps=100",
                "--kube-api-burst=200",
                "--leader-elect=false",
                "--use-service-account-credentials=false",
                "--bind-address=127.0.0.1",
            ])
            .arg(format!("--secure-port={}", free_port()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("kube-controller-manager"),
    )
}

/// A control plane whose API server keeps an audit log of every request
/// (metadata only), to count the requests of each client.
fn audited_cluster(apiserver: &Path) -> Cluster {
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("audit-policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived, ResponseStarted]\nrules:\n- level: Metadata\n",
    )
    .unwrap();
    let log = dir.path().join("audit.jsonl");
    let extra = [
        format!("--audit-policy-file={}", policy.display()),
        format!("--audit-log-path={}", log.display()),
        "--audit-log-maxsize=0".into(),
    ];
    Cluster::start_with(apiserver, dir, &extra)
}

/// The harness's client: the admin's, with its own User-Agent.
async fn harness_client(cluster: &Cluster) -> kube::Client {
    let _ready = cluster.client().await;
    let mut config = volplane_cli::controller::kube_config(Some(&cluster.kubeconfig))
        .await
        .unwrap();
    config
        .headers
        .retain(|(n, _)| n != http::header::USER_AGENT);
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(HARNESS),
    ));
    kube::Client::try_from(config).unwrap()
}

/// What the API server counted: `apiserver_request_total` summed, and
/// the audit log's requests per client so far.
#[derive(Debug, Clone, Default)]
struct Requests {
    total: f64,
    by_client: BTreeMap<String, u64>,
    /// How far the audit log has been read.
    read: u64,
}

impl Requests {
    async fn now(client: &kube::Client, cluster: &Cluster, before: &Requests) -> Requests {
        // The audit log is written as requests complete: let it settle.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = client.request_text(request).await.unwrap();
        let scrape =
            prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string()))).unwrap();
        let total = scrape
            .samples
            .iter()
            .filter(|s| s.metric == "apiserver_request_total")
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum();
        let mut by_client = before.by_client.clone();
        let read = count_audit(
            &cluster.dir().join("audit.jsonl"),
            before.read,
            &mut by_client,
        );
        Requests {
            total,
            by_client,
            read,
        }
    }

    /// What was counted since `before`, per client and in all.
    fn since(&self, before: &Requests) -> (f64, BTreeMap<String, u64>) {
        let by = self
            .by_client
            .iter()
            .map(|(c, n)| (c.clone(), n - before.by_client.get(c).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect();
        (self.total - before.total, by)
    }
}

/// Counts the audit log's events from byte `from` by client; returns how
/// far it read (whole lines only).
fn count_audit(path: &Path, from: u64, by_client: &mut BTreeMap<String, u64>) -> u64 {
    use std::io::{BufRead, Seek};
    let mut file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    file.seek(std::io::SeekFrom::Start(from)).unwrap();
    let mut read = from;
    let mut line = String::new();
    let detail = std::env::var_os("VOLPLANE_BENCH_DETAIL").is_some();
    while file.read_line(&mut line).unwrap() > 0 && line.ends_with('\n') {
        read += line.len() as u64;
        let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        let mut who = client_name(event["userAgent"].as_str().unwrap_or(""));
        if detail {
            let object = &event["objectRef"];
            let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
            who = format!(
                "{who} {}{} {}{}",
                if code >= 300 {
                    format!("({code}) ")
                } else {
                    String::new()
                },
                event["verb"].as_str().unwrap_or(""),
                object["resource"].as_str().unwrap_or(""),
                object["subresource"]
                    .as_str()
                    .map_or(String::new(), |s| format!("/{s}"))
            );
        }
        *by_client.entry(who).or_default() += 1;
        line.clear();
    }
    read
}

/// Who a User-Agent is: volplane's by role, others by program.
fn client_name(agent: &str) -> String {
    if let Some(rest) = agent.strip_prefix("volplane/") {
        let role = rest
            .split_once('(')
            .map_or("", |(_, r)| r.trim_end_matches(')'));
        return format!("volplane {role}");
    }
    agent
        .split(['/', ' '])
        .next()
        .filter(|p| !p.is_empty())
        .unwrap_or("(none)")
        .to_string()
}

/// Objects of one kind as a watch sees them: name → whether it is done
/// (a claim Bound, an attachment attached).
struct Watched {
    items: Arc<Mutex<BTreeMap<String, bool>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Watched {
    fn new<K>(api: Api<K>, done: fn(&K) -> bool) -> Watched
    where
        K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    {
        let items: Arc<Mutex<BTreeMap<String, bool>>> = Arc::default();
        let shared = items.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(api, watcher::Config::default()));
            let mut relist = BTreeMap::new();
            while let Some(event) = events.next().await {
                let name = |o: &K| o.meta().name.clone().unwrap_or_default();
                match event {
                    Ok(watcher::Event::Init) => relist.clear(),
                    Ok(watcher::Event::InitApply(o)) => {
                        relist.insert(name(&o), done(&o));
                    }
                    Ok(watcher::Event::InitDone) => {
                        *shared.lock().unwrap() = std::mem::take(&mut relist);
                    }
                    Ok(watcher::Event::Apply(o)) => {
                        shared.lock().unwrap().insert(name(&o), done(&o));
                    }
                    Ok(watcher::Event::Delete(o)) => {
                        shared.lock().unwrap().remove(&name(&o));
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        });
        Watched { items, task }
    }

    /// (how many there are, how many are done)
    fn count(&self) -> (usize, usize) {
        let items = self.items.lock().unwrap();
        (items.len(), items.values().filter(|d| **d).count())
    }

    /// Waits until `goal` holds of the counts, checking that every process
    /// in `alive` still runs; panics after `limit`.
    async fn wait(
        &self,
        what: &str,
        limit: Duration,
        alive: &mut [&mut Measured],
        goal: impl Fn(usize, usize) -> bool,
    ) {
        let start = Instant::now();
        loop {
            let (all, done) = self.count();
            if goal(all, done) {
                return;
            }
            alive.iter_mut().for_each(|m| m.check_alive());
            assert!(
                start.elapsed() < limit,
                "{what}: not within {limit:?} ({all} objects, {done} done)"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Creates `n` objects `make(i)` through `api`, 50 at a time.
async fn create_all<K>(api: &Api<K>, n: usize, make: impl Fn(usize) -> K)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let pp = PostParams::default();
    for start in (0..n).step_by(50) {
        let made: Vec<K> = (start..n.min(start + 50)).map(&make).collect();
        for r in futures::future::join_all(made.iter().map(|o| api.create(&pp, o))).await {
            r.unwrap();
        }
    }
}

/// Deletes the objects `names` through `api`, 50 at a time.
async fn delete_all<K>(api: &Api<K>, names: &[String])
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let dp = DeleteParams::default();
    for chunk in names.chunks(50) {
        futures::future::join_all(chunk.iter().map(|n| api.delete(n, &dp))).await;
    }
}

/// One phase's figures.
struct Phase {
    what: String,
    objects: usize,
    wall: Duration,
    requests: f64,
    by_client: BTreeMap<String, u64>,
}

impl Phase {
    fn print(&self) {
        let per = |n: f64| n / self.objects.max(1) as f64;
        let clients: Vec<String> = self
            .by_client
            .iter()
            .filter(|(c, _)| !c.starts_with(HARNESS))
            .map(|(c, n)| format!("{c} {:.2}", per(*n as f64)))
            .collect();
        println!(
            "  {:<34} {:>7.1} s   requests per object: {:.2} in all (apiserver_request_total); {}",
            self.what,
            self.wall.as_secs_f64(),
            per(self.requests),
            clients.join(", ")
        );
    }
}

/// The sizes of a run.
#[derive(Clone, Copy)]
struct Sizes {
    claims: usize,
    attachments: usize,
    nodes: usize,
}

/// What one configuration measured, for the summary.
struct Outcome {
    setup: Setup,
    phases: Vec<Phase>,
    idle_rss_kib: u64,
    peak_rss_kib: u64,
    cpu_s: f64,
    idle_load: f64,
}

async fn run(setup: Setup, apiserver: &Path, sizes: Sizes) -> Outcome {
    let cluster = audited_cluster(apiserver);
    let client = harness_client(&cluster).await;
    let _kcm = (setup != Setup::VolplaneAlone).then(|| controller_manager(&cluster));
    let driver_spec = Driver::of(setup);
    driver_spec.seed(&client, sizes.nodes).await;
    let socket = cluster.dir().join("csi.sock");
    let mut plugin = driver(setup, &socket, &cluster);
    let mut ctl = controllers(setup, &socket, &cluster);
    // Started and synced, nothing to do yet.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_rss_kib = ctl.iter().map(|m| m.kib("VmRSS")).sum();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let vas: Api<VolumeAttachment> = Api::all(client.clone());
    let bound = |c: &PersistentVolumeClaim| {
        c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
    };
    let watched_claims = Watched::new(claims.clone(), bound);
    let watched_pvs = Watched::new(pvs.clone(), |_| true);
    let watched_vas = Watched::new(vas.clone(), |v: &VolumeAttachment| {
        v.status.as_ref().is_some_and(|s| s.attached)
    });
    let n = sizes.claims;
    let limit = Duration::from_secs(120) + Duration::from_millis(300) * n as u32;
    let mut phases = Vec::new();
    let mut before = Requests::now(&client, &cluster, &Requests::default()).await;
    let mut phase = async |what: String, objects: usize, start: Instant| {
        let wall = start.elapsed();
        let after = Requests::now(&client, &cluster, &before).await;
        let (requests, by_client) = after.since(&before);
        before = after;
        let p = Phase {
            what,
            objects,
            wall,
            requests,
            by_client,
        };
        p.print();
        phases.push(p);
    };
    println!("({}) {}", setup.letter(), setup.title());
    let names: Vec<String> = (0..n).map(|i| format!("claim-{i:05}")).collect();
    let start = Instant::now();
    create_all(&claims, n, |i| claim(&names[i], driver_spec.class, "1Mi")).await;
    let mut alive: Vec<&mut Measured> = ctl.iter_mut().chain([&mut plugin]).collect();
    let what = format!("{n} claims to Bound");
    watched_claims
        .wait(&what, limit, &mut alive, |all, done| all == n && done == n)
        .await;
    phase(what, n, start).await;

    let a = sizes.attachments.min(n);
    let volumes: Vec<String> = pvs
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|pv| pv.metadata.name)
        .take(a)
        .collect();
    let start = Instant::now();
    let attachment = |i: usize| -> VolumeAttachment {
        let node = match i % sizes.nodes {
            0 => NODE.to_string(),
            k => format!("bench-node-{k:04}"),
        };
        serde_json::from_value(json!({
            "metadata": {"name": format!("va-{i:05}")},
            "spec": {"attacher": driver_spec.name, "nodeName": node,
                     "source": {"persistentVolumeName": volumes[i]}}
        }))
        .unwrap()
    };
    create_all(&vas, a, attachment).await;
    let what = format!("{a} attachments attached");
    watched_vas
        .wait(&what, limit, &mut alive, |all, done| all == a && done == a)
        .await;
    phase(what, a, start).await;
    let start = Instant::now();
    let va_names: Vec<String> = (0..a).map(|i| format!("va-{i:05}")).collect();
    delete_all(&vas, &va_names).await;
    let what = format!("{a} attachments detached, gone");
    watched_vas
        .wait(&what, limit, &mut alive, |all, _| all == 0)
        .await;
    phase(what, a, start).await;

    let start = Instant::now();
    delete_all(&claims, &names).await;
    let what = format!("{n} claims deleted, no PV left");
    watched_pvs
        .wait(&what, limit, &mut alive, |all, _| all == 0)
        .await;
    phase(what, n, start).await;
    drop(alive);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ticks = |ctl: &[Measured]| ctl.iter().map(|m| cpu_ticks(m.pid())).sum::<u64>();
    let (idle_before, t0) = (ticks(&ctl), Instant::now());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_after = ticks(&ctl);
    let outcome = Outcome {
        setup,
        phases,
        idle_rss_kib,
        peak_rss_kib: ctl.iter().map(|m| m.kib("VmHWM")).sum(),
        cpu_s: idle_before as f64 / 100.0,
        idle_load: (idle_after - idle_before) as f64 / 100.0 / t0.elapsed().as_secs_f64(),
    };
    let each: Vec<String> = ctl
        .iter()
        .map(|m| format!("{} {:.1} MiB", m.name, m.kib("VmHWM") as f64 / 1024.0))
        .collect();
    println!(
        "  controllers: RSS idle {:.1} MiB, peak {:.1} MiB ({}); {:.1} CPU s in all, then {:.2}% of a core idle; driver {} peak {:.1} MiB",
        outcome.idle_rss_kib as f64 / 1024.0,
        outcome.peak_rss_kib as f64 / 1024.0,
        each.join(", "),
        outcome.cpu_s,
        outcome.idle_load * 100.0,
        plugin.name,
        plugin.kib("VmHWM") as f64 / 1024.0,
    );
    outcome
}

fn summary(outcomes: &[Outcome]) {
    println!("\nsummary (wall s / requests per object, all clients):");
    for o in outcomes {
        let cells: Vec<String> = o
            .phases
            .iter()
            .map(|p| {
                format!(
                    "{:>7.1} s /{:>5.1}",
                    p.wall.as_secs_f64(),
                    p.requests / p.objects.max(1) as f64
                )
            })
            .collect();
        println!(
            "  ({}) {}   RSS idle {:>5.1} MiB peak {:>6.1} MiB   CPU {:>6.1} s",
            o.setup.letter(),
            cells.join(" | "),
            o.idle_rss_kib as f64 / 1024.0,
            o.peak_rss_kib as f64 / 1024.0,
            o.cpu_s
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run it with --ignored"]
async fn bench_claims_and_attachments_at_scale() {
    let (Some(apiserver), Some(_)) = (
        env_path("VOLPLANE_TEST_KUBE_APISERVER"),
        env_path("VOLPLANE_TEST_KUBE_CONTROLLER_MANAGER"),
    ) else {
        eprintln!(
            "skipping the scale benchmark: set VOLPLANE_TEST_KUBE_APISERVER and VOLPLANE_TEST_KUBE_CONTROLLER_MANAGER (and VOLPLANE_TEST_HOSTPATH_PLUGIN, VOLPLANE_TEST_CSI_PROVISIONER, VOLPLANE_TEST_CSI_ATTACHER for configurations a and b)"
        );
        return;
    };
    let sizes = Sizes {
        claims: env_number("VOLPLANE_BENCH_CLAIMS", 1000),
        attachments: env_number("VOLPLANE_BENCH_ATTACHMENTS", 1000),
        nodes: env_number("VOLPLANE_BENCH_NODES", 500).max(1),
    };
    let picked = std::env::var("VOLPLANE_BENCH_CONFIGS").unwrap_or_else(|_| "abcd".into());
    println!(
        "{} claims, {} attachments across {} nodes; every controller at client QPS 100, burst 200",
        sizes.claims, sizes.attachments, sizes.nodes
    );
    let mut outcomes = Vec::new();
    for setup in Setup::ALL
        .into_iter()
        .filter(|s| picked.contains(s.letter()))
    {
        if let Some(var) = setup.missing() {
            println!(
                "({}) {}: left out, {var} is not set",
                setup.letter(),
                setup.title()
            );
            continue;
        }
        outcomes.push(run(setup, &apiserver, sizes).await);
    }
    summary(&outcomes);
}
