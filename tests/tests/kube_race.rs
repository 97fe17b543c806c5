//! A benchmark, not a test: `volplane controller` (the provisioner role)
//! beside csi-provisioner on the same real control plane —
//! kube-apiserver, kube-controller-manager (the PV binder and both
//! protection controllers, client QPS 100) and the Go reference CSI driver
//! (csi-driver-host-path). Each round creates claims, waits until all are
//! Bound, deletes them all at once, and waits until every PV is gone;
//! then the provisioner's CPU use with nothing left to do is read. Rounds
//! alternate between the two provisioners, so both meet the same machine.
//!
//! ```sh
//! VOLPLANE_TEST_KUBE_APISERVER=… VOLPLANE_TEST_KUBE_CONTROLLER_MANAGER=… \
//! VOLPLANE_TEST_HOSTPATH_PLUGIN=… VOLPLANE_TEST_CSI_PROVISIONER=… \
//! cargo test -p volplane-tests --release --test kube_race -- --ignored --nocapture
//! ```
//!
//! `VOLPLANE_BENCH_CLAIMS` (1000) and `VOLPLANE_BENCH_ROUNDS` (3) set the
//! size. Without `VOLPLANE_TEST_CSI_PROVISIONER` only volplane runs. None of
//! these binaries is in a registry reachable here: build them outside this
//! repository from their public sources.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::cluster::{
    Cluster, bound_claims, claim, cpu_ticks, env_number, free_port, volumes, wait_for,
};
use common::hostpath::{self, Killed, seed};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, DeleteParams, PostParams};

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).map(PathBuf::from)
}

/// kube-controller-manager with the controllers the provisioner races:
/// the PV binder, pv-protection and pvc-protection.
fn controller_manager(cluster: &Cluster, binary: &Path) -> Child {
    let log =
        std::fs::File::create(cluster.dir.path().join("kube-controller-manager.log")).unwrap();
    Command::new(binary)
        .arg("--kubeconfig")
        .arg(&cluster.kubeconfig)
        .args([
            "--controllers",
            "persistentvolume-binder-controller,persistentvolume-protection-controller,persistentvolumeclaim-protection-controller",
            "--kube-api-qps",
            "100",
            "--kube-api-burst",
            "200",
            "--leader-elect=false",
            "--use-service-account-credentials=false",
            "--bind-address",
            "127.0.0.1",
            "--secure-port",
            &free_port().to_string(),
        ])
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("kube-controller-manager")
}

/// A provisioner under test, started for one round.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Provisioner {
    Volplane,
    CsiProvisioner,
}

impl Provisioner {
    fn name(self) -> &'static str {
        match self {
            Provisioner::Volplane => "volplane controller",
            Provisioner::CsiProvisioner => "csi-provisioner",
        }
    }

    fn start(self, cluster: &Cluster, socket: &Path, round: usize) -> Child {
        let log_name = format!("{}-{round}.log", self.name().replace(' ', "-"));
        let log = std::fs::File::create(cluster.dir.path().join(log_name)).unwrap();
        let mut c = match self {
            Provisioner::Volplane => {
                let mut c = Command::new(env!("CARGO_BIN_EXE_volplane-under-test"));
                c.args(["controller", "--attacher=false", "--resizer=false"]);
                c.arg(format!("--csi-address=unix://{}", socket.display()));
                // The same client-side limit as csi-provisioner's below.
                c.args(["--kube-api-qps=100", "--kube-api-burst=200"]);
                c.env("POD_NAME", "volplane-race");
                c
            }
            Provisioner::CsiProvisioner => {
                let mut c = Command::new(env_path("VOLPLANE_TEST_CSI_PROVISIONER").unwrap());
                c.arg(format!("--csi-address={}", socket.display()));
                c.args(["--kube-api-qps=100", "--kube-api-burst=200"]);
                c
            }
        };
        c.arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("the provisioner")
    }
}

/// What one round measured.
struct Round {
    bound: Duration,
    deleted: Duration,
    left: usize,
    idle_load: f64,
}

async fn round(client: &kube::Client, provisioner: &mut Child, n: usize, tag: usize) -> Round {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let names: Vec<String> = (0..n).map(|i| format!("r{tag}-{i:04}")).collect();
    let start = Instant::now();
    for chunk in names.chunks(50) {
        let pp = PostParams::default();
        let made: Vec<_> = chunk.iter().map(|n| claim(n, "hostpath", "1Mi")).collect();
        futures::future::join_all(made.iter().map(|c| claims.create(&pp, c))).await;
    }
    let alive = std::sync::Mutex::new(provisioner);
    let (_, bound) = wait_for(n, Duration::from_secs(1200), || async {
        if let Ok(Some(status)) = alive.lock().unwrap().try_wait() {
            panic!("the provisioner exited ({status}); see its log");
        }
        bound_claims(&claims).await
    })
    .await;
    let provisioner = alive.into_inner().unwrap();
    assert_eq!(bound, n, "{bound} of {n} claims Bound after 20 min");
    let bound = start.elapsed();
    let start = Instant::now();
    let dp = DeleteParams::default();
    for chunk in names.chunks(50) {
        futures::future::join_all(chunk.iter().map(|name| claims.delete(name, &dp))).await;
    }
    let (_, left) = wait_for(0, Duration::from_secs(900), || volumes(client)).await;
    let deleted = start.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (before, t0) = (cpu_ticks(provisioner.id()), Instant::now());
    tokio::time::sleep(Duration::from_secs(10)).await;
    let ticks = cpu_ticks(provisioner.id()) - before;
    Round {
        bound,
        deleted,
        left,
        idle_load: ticks as f64 / 100.0 / t0.elapsed().as_secs_f64(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run it with --ignored"]
async fn bench_mass_delete_beside_csi_provisioner() {
    let (Some(apiserver), Some(kcm), Some(plugin)) = (
        env_path("VOLPLANE_TEST_KUBE_APISERVER"),
        env_path("VOLPLANE_TEST_KUBE_CONTROLLER_MANAGER"),
        env_path("VOLPLANE_TEST_HOSTPATH_PLUGIN"),
    ) else {
        eprintln!(
            "skipping the race: set VOLPLANE_TEST_KUBE_APISERVER, VOLPLANE_TEST_KUBE_CONTROLLER_MANAGER and VOLPLANE_TEST_HOSTPATH_PLUGIN (and VOLPLANE_TEST_CSI_PROVISIONER to race it)"
        );
        return;
    };
    let n = env_number("VOLPLANE_BENCH_CLAIMS", 1000);
    let rounds = env_number("VOLPLANE_BENCH_ROUNDS", 3);
    let cluster = Cluster::start(&apiserver);
    let client = cluster.client().await;
    let _kcm = Killed(controller_manager(&cluster, &kcm));
    seed(&client).await;
    let socket = cluster.dir.path().join("hostpath.sock");
    let _plugin = hostpath::plugin(&cluster, &plugin, &socket);
    let mut who = vec![Provisioner::Volplane];
    if env_path("VOLPLANE_TEST_CSI_PROVISIONER").is_some() {
        who.push(Provisioner::CsiProvisioner);
    }
    println!("{n} claims per round, {rounds} rounds each, KCM at client QPS 100");
    let mut tag = 0;
    for r in 0..rounds {
        for p in &who {
            tag += 1;
            let mut child = Killed(p.start(&cluster, &socket, r));
            let m = round(&client, &mut child.0, n, tag).await;
            drop(child);
            println!(
                "round {} {:<20} all Bound {:>6.1} s   all PVs gone {:>6.1} s ({} left)   then {:.2}% of a core",
                r + 1,
                p.name(),
                m.bound.as_secs_f64(),
                m.deleted.as_secs_f64(),
                m.left,
                m.idle_load * 100.0
            );
            assert_eq!(m.left, 0, "{}: {} PVs left behind", p.name(), m.left);
        }
    }
}
