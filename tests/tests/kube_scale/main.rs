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

#[path = "../common/mod.rs"]
mod common;
mod measure;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{Cluster, claim, cpu_ticks, create, env_number, free_port};
use common::hostpath::{self, HOSTPATH, Killed};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass, VolumeAttachment};
use kube::api::Api;
use measure::{
    Measured, Phase, Phases, Watched, audited_cluster, create_all, delete_all, harness_client,
};
use serde_json::json;
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
    let spec = Driver::of(setup);
    spec.seed(&client, sizes.nodes).await;
    let socket = cluster.dir().join("csi.sock");
    let mut plugin = driver(setup, &socket, &cluster);
    let mut ctl = controllers(setup, &socket, &cluster);
    // Started and synced, nothing to do yet.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_rss_kib = ctl.iter().map(|m| m.kib("VmRSS")).sum();
    println!("({}) {}", setup.letter(), setup.title());
    let mut phases = Phases::start(&client, &cluster).await;
    let mut alive: Vec<&mut Measured> = ctl.iter_mut().chain([&mut plugin]).collect();
    let mut step = Step {
        client: &client,
        spec: &spec,
        sizes,
        limit: Duration::from_secs(120) + Duration::from_millis(300) * sizes.claims as u32,
        alive: &mut alive,
        phases: &mut phases,
    };
    let claims = step.claims_bound().await;
    step.attach_and_detach().await;
    step.claims_deleted(&claims).await;
    drop(alive);
    let phases = phases.ended;
    settle(setup, phases, &ctl, &plugin, idle_rss_kib).await
}

/// What the phases of one configuration share.
struct Step<'a, 'b> {
    client: &'a kube::Client,
    spec: &'a Driver,
    sizes: Sizes,
    /// How long any phase may take.
    limit: Duration,
    /// The processes that must keep running.
    alive: &'a mut Vec<&'b mut Measured>,
    phases: &'a mut Phases<'b>,
}

impl Step<'_, '_> {
    /// Creates the claims and waits until all are Bound; their names.
    async fn claims_bound(&mut self) -> Vec<String> {
        let n = self.sizes.claims;
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), "default");
        let watched = Watched::new(claims.clone(), |c: &PersistentVolumeClaim| {
            c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
        });
        let names: Vec<String> = (0..n).map(|i| format!("claim-{i:05}")).collect();
        let start = Instant::now();
        create_all(&claims, n, |i| claim(&names[i], self.spec.class, "1Mi")).await;
        let what = format!("{n} claims to Bound");
        watched
            .wait(&what, self.limit, self.alive, |all, done| {
                all == n && done == n
            })
            .await;
        self.phases.end(what, n, start).await;
        names
    }

    /// Attaches volumes across the nodes, waits until all are attached,
    /// then deletes the attachments and waits until they are gone.
    async fn attach_and_detach(&mut self) {
        let vas: Api<VolumeAttachment> = Api::all(self.client.clone());
        let watched = Watched::new(vas.clone(), |v: &VolumeAttachment| {
            v.status.as_ref().is_some_and(|s| s.attached)
        });
        let pvs: Api<PersistentVolume> = Api::all(self.client.clone());
        let volumes: Vec<String> = pvs
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|pv| pv.metadata.name)
            .take(self.sizes.attachments)
            .collect();
        let a = volumes.len();
        let nodes = self.sizes.nodes;
        let attachment = |i: usize| -> VolumeAttachment {
            let node = match i % nodes {
                0 => NODE.to_string(),
                k => format!("bench-node-{k:04}"),
            };
            serde_json::from_value(json!({
                "metadata": {"name": format!("va-{i:05}")},
                "spec": {"attacher": self.spec.name, "nodeName": node,
                         "source": {"persistentVolumeName": volumes[i]}}
            }))
            .unwrap()
        };
        let start = Instant::now();
        create_all(&vas, a, attachment).await;
        let what = format!("{a} attachments attached");
        watched
            .wait(&what, self.limit, self.alive, |all, done| {
                all == a && done == a
            })
            .await;
        self.phases.end(what, a, start).await;
        let start = Instant::now();
        let names: Vec<String> = (0..a).map(|i| format!("va-{i:05}")).collect();
        delete_all(&vas, &names).await;
        let what = format!("{a} attachments detached, gone");
        watched
            .wait(&what, self.limit, self.alive, |all, _| all == 0)
            .await;
        self.phases.end(what, a, start).await;
    }

    /// Deletes the claims `names` and waits until no PV is left.
    async fn claims_deleted(&mut self, names: &[String]) {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), "default");
        let pvs: Api<PersistentVolume> = Api::all(self.client.clone());
        let watched = Watched::new(pvs, |_| true);
        let start = Instant::now();
        delete_all(&claims, names).await;
        let what = format!("{} claims deleted, no PV left", names.len());
        watched
            .wait(&what, self.limit, self.alive, |all, _| all == 0)
            .await;
        self.phases.end(what, names.len(), start).await;
    }
}

/// With nothing left to do: the controllers' CPU use for 10 s, their
/// memory, printed; the configuration's outcome.
async fn settle(
    setup: Setup,
    phases: Vec<Phase>,
    ctl: &[Measured],
    plugin: &Measured,
    idle_rss_kib: u64,
) -> Outcome {
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ticks = || ctl.iter().map(|m| cpu_ticks(m.pid())).sum::<u64>();
    let (before, t0) = (ticks(), Instant::now());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = ticks();
    let outcome = Outcome {
        setup,
        phases,
        idle_rss_kib,
        peak_rss_kib: ctl.iter().map(|m| m.kib("VmHWM")).sum(),
        cpu_s: before as f64 / 100.0,
        idle_load: (after - before) as f64 / 100.0 / t0.elapsed().as_secs_f64(),
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
