//! `volplane controller` against a real kube-apiserver (on etcd, on
//! loopback), with `volplane serve` as the driver and `--binder
//! --pvc-protection --pv-protection` standing in for kube-controller-manager:
//! StorageClass + PVC → CreateVolume → a PV with upstream's fields → Bound;
//! a VolumeAttachment → ControllerPublish → status.attached; a resize →
//! ControllerExpandVolume → the PV's capacity; a resize past what the
//! storage holds marked infeasible, then taken back by the user and done
//! at the lower size (RecoverVolumeExpansionFailure); the controller killed
//! mid-operation converges after a restart; two replicas hold one Lease and
//! the survivor takes over; deleting the claim deletes the volume and the
//! PV; a CSIStorageCapacity object appears for the class in the driver's
//! zone (`--enable-capacity`) and follows GetCapacity; a change of the
//! claim's VolumeAttributesClass reaches ControllerModifyVolume; with a
//! second node in another zone, a class allowed only there is never
//! provisioned in the driver's zone; a driver that checks credentials
//! (`guarded-driver`), deployed on the node (`--node-deployment`: it takes
//! the claim for its node), provisions and deletes with the class's
//! provisioner Secret and refuses a wrong one; deploy/
//! (and its node-deployment variant) applies with --dry-run=server.
//!
//! Runs when VOLPLANE_TEST_KUBE_APISERVER names a kube-apiserver binary
//! (etcd from VOLPLANE_TEST_ETCD or PATH); skipped, saying so, otherwise.
//! Neither is in a registry reachable here: build kube-apiserver from its
//! public source outside this repository.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::cluster::{
    Cluster, DRIVER, ZONE_KEY, bound, bound_claims, cpu_ticks, env_number, event_note,
    register_node, seed, until, volumes, wait_for,
};
use common::{Driver, NODE, Runtime};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{
    CSIStorageCapacity, StorageClass, VolumeAttachment, VolumeAttributesClass,
};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

/// Leader election with short timings, so a failover takes seconds; and
/// capacity tracking (objects in `default`, no owner, a 1 s poll).
const ELECTED: &[&str] = &[
    "--enable-capacity",
    "--capacity-ownerref-level=-1",
    "--capacity-for-immediate-binding",
    "--capacity-poll-interval=1s",
    "--leader-election",
    "--leader-election-namespace",
    "default",
    "--leader-election-lease-duration",
    "4s",
    "--leader-election-renew-deadline",
    "3s",
    "--leader-election-retry-period",
    "1s",
];

fn claim(name: &str) -> PersistentVolumeClaim {
    common::cluster::claim(name, "volplane", "64Mi")
}

/// The password `guarded-driver` is started with.
const PASSWORD: &str = "open-sesame";

/// `guarded-driver` (a driver on the `volplane` crate whose CreateVolume
/// and DeleteVolume refuse calls without its password) behind its own
/// `volplane controller`: a class naming the right Secret as its
/// provisioner Secret is provisioned and deleted, one naming a Secret with
/// another password is refused by the driver (so the Secret's data is what
/// reached it), and no Secret data shows in the controller's log.
async fn a_provisioner_secret_reaches_the_driver(cluster: &Cluster, client: &kube::Client) {
    let dir = cluster.dir().join("guarded");
    for sub in ["storage", "state", "kubelet"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    let socket = dir.join("csi.sock");
    let endpoint = format!("unix://{}", socket.display());
    let mut driver = std::process::Command::new(env!("CARGO_BIN_EXE_guarded-driver"))
        .args(["--endpoint", &endpoint, "--node-id", NODE, "--state-dir"])
        .arg(dir.join("state"))
        .arg("--kubelet-dir")
        .arg(dir.join("kubelet"))
        .env("GUARDED_STORAGE", dir.join("storage"))
        .env("GUARDED_PASSWORD", PASSWORD)
        .stderr(std::fs::File::create(dir.join("driver.log")).unwrap())
        .spawn()
        .unwrap();
    until("guarded-driver listening", || async {
        socket.exists().then_some(())
    })
    .await;
    // Deployed on the node (distributed provisioning), as a node-local
    // driver is: it provisions the claims of its node, here all of them.
    let mut sidecars = cluster.sidecars(
        &endpoint,
        "guarded-sidecars",
        &[
            "--node-deployment",
            "--node-deployment-immediate-binding",
            "--node-deployment-base-delay=100ms",
        ],
    );

    let pp = PostParams::default();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), "default");
    let classes: Api<StorageClass> = Api::all(client.clone());
    for (class, password) in [("guarded", PASSWORD), ("guarded-wrong", "not-it")] {
        let secret = serde_json::from_value(json!({
            "metadata": {"name": format!("{class}-creds")},
            "stringData": {"password": password}
        }))
        .unwrap();
        secrets.create(&pp, &secret).await.unwrap();
        let sc = serde_json::from_value(json!({
            "metadata": {"name": class}, "provisioner": "guarded.volplane.io",
            "reclaimPolicy": "Delete",
            "parameters": {
                "csi.storage.k8s.io/provisioner-secret-name": format!("{class}-creds"),
                "csi.storage.k8s.io/provisioner-secret-namespace": "${pvc.namespace}"
            }
        }))
        .unwrap();
        classes.create(&pp, &sc).await.unwrap();
    }
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    for (name, class) in [("guarded", "guarded"), ("refused", "guarded-wrong")] {
        let c = common::cluster::claim(name, class, "64Mi");
        claims.create(&pp, &c).await.unwrap();
    }
    let pv_name = until("the guarded claim Bound", || bound(&claims, "guarded")).await;
    let taken = claims.get("guarded").await.unwrap().metadata.annotations;
    assert_eq!(
        taken
            .as_ref()
            .and_then(|a| a.get("volume.kubernetes.io/selected-node"))
            .map(String::as_str),
        Some(NODE),
        "taken by the node's provisioner: {taken:?}"
    );
    let refused = event_note(client, "ProvisioningFailed", "refused").await;
    assert!(
        refused.contains("the password in the secrets is wrong"),
        "{refused}"
    );
    assert_eq!(bound(&claims, "refused").await, None);

    // DeleteVolume gets the Secret too (the PV's deletion annotations).
    for name in ["guarded", "refused"] {
        claims.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    until("the guarded volume deleted", || async {
        pvs.get_opt(&pv_name).await.ok()?.is_none().then_some(())
    })
    .await;
    let _ = sidecars.kill();
    let _ = sidecars.wait();
    let _ = driver.kill();
    let _ = driver.wait();
    let log = std::fs::read_to_string(cluster.dir().join("guarded-sidecars.log")).unwrap();
    assert!(!log.contains(PASSWORD), "the Secret's data is in the log");
    assert!(
        std::fs::read_dir(dir.join("storage"))
            .unwrap()
            .next()
            .is_none(),
        "the guarded storage is empty again"
    );
}

/// RecoverVolumeExpansionFailure: a claim grown past what the storage
/// holds is marked `ControllerResizeInfeasible` (OUT_OF_RANGE from the
/// driver); the user lowers the request and the volume grows to that.
async fn recover_from_an_infeasible_expansion(
    claims: &Api<PersistentVolumeClaim>,
    pvs: &Api<PersistentVolume>,
    pv_name: &str,
) {
    let storage = |c: &PersistentVolumeClaim, field: &str| -> Option<String> {
        let status = serde_json::to_value(c.status.as_ref()?).ok()?;
        Some(status.get(field)?.get("storage")?.as_str()?.to_string())
    };
    let ask = |size: &str| json!({"spec": {"resources": {"requests": {"storage": size}}}});
    claims
        .patch("data", &PatchParams::default(), &Patch::Merge(&ask("1Ei")))
        .await
        .unwrap();
    until("the claim marked ControllerResizeInfeasible", || async {
        let c = claims.get("data").await.ok()?;
        let infeasible = storage(&c, "allocatedResourceStatuses")? == "ControllerResizeInfeasible";
        let error = c.status.as_ref()?.conditions.as_ref()?.iter().any(|x| {
            x.type_ == "ControllerResizeError"
                && x.message
                    .as_deref()
                    .is_some_and(|m| m.contains("OutOfRange"))
        });
        (infeasible && error && storage(&c, "allocatedResources")? == "1Ei").then_some(())
    })
    .await;
    claims
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(&ask("256Mi")),
        )
        .await
        .expect("the API server lets a request that proved infeasible fall");
    until("the volume grown to the lowered request", || async {
        let pv = pvs.get(pv_name).await.ok()?;
        let c = claims.get("data").await.ok()?;
        let grown = pv.spec?.capacity?.get("storage")?.0 == "256Mi";
        let no_longer_infeasible = storage(&c, "allocatedResourceStatuses").as_deref()
            != Some("ControllerResizeInfeasible");
        (grown && no_longer_infeasible && storage(&c, "allocatedResources")? == "256Mi")
            .then_some(())
    })
    .await;
}

async fn apply_deploy_dry_run(client: &kube::Client) {
    for file in [
        "namespace.yaml",
        "csidriver.yaml",
        "rbac.yaml",
        "controller.yaml",
        "node.yaml",
        "storageclasses.yaml",
        "node-deployment/rbac.yaml",
        "node-deployment/node.yaml",
    ] {
        let text = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../deploy")
                .join(file),
        )
        .unwrap();
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
        for doc in docs.into_iter().filter(|d| !d.is_null()) {
            let o: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
            let types = o.types.clone().unwrap();
            let (group, version) = types
                .api_version
                .rsplit_once('/')
                .unwrap_or(("", &types.api_version));
            let gvk = kube::api::GroupVersionKind::gvk(group, version, &types.kind);
            let (resource, caps) = kube::discovery::pinned_kind(client, &gvk).await.unwrap();
            let api: Api<DynamicObject> = match (caps.scope, o.metadata.namespace.as_deref()) {
                (kube::discovery::Scope::Namespaced, Some(ns)) => {
                    Api::namespaced_with(client.clone(), ns, &resource)
                }
                _ => Api::all_with(client.clone(), &resource),
            };
            let pp = PostParams {
                dry_run: types.kind != "Namespace",
                ..PostParams::default()
            };
            if let Err(e) = api.create(&pp, &o).await {
                panic!(
                    "deploy/{file}: {} {:?} refused by the API server: {e}",
                    types.kind, o.metadata.name
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controller_runs_a_real_clusters_storage() {
    let Some(apiserver) = std::env::var_os("VOLPLANE_TEST_KUBE_APISERVER") else {
        eprintln!(
            "skipping the real kube-apiserver test: set VOLPLANE_TEST_KUBE_APISERVER to a kube-apiserver binary (and VOLPLANE_TEST_ETCD, or etcd in PATH); none is in a registry reachable here"
        );
        return;
    };
    require_root!();
    let cluster = Cluster::start(Path::new(&apiserver));
    let client = cluster.client().await;
    apply_deploy_dry_run(&client).await;
    seed(&client).await;
    let d = Driver::start_with(Runtime::Tokio, &["--mutable-parameter=tier"]);
    let mut a = cluster.controller(&d.endpoint, "replica-a", ELECTED);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pp = PostParams::default();

    // Provisioned and bound.
    claims.create(&pp, &claim("data")).await.unwrap();
    let pv_name = until("data Bound", || bound(&claims, "data")).await;
    let pv = pvs.get(&pv_name).await.unwrap();
    let spec = pv.spec.clone().unwrap();
    assert_eq!(spec.csi.as_ref().unwrap().driver, DRIVER);
    assert!(spec.csi.as_ref().unwrap().volume_handle.starts_with("vol-"));
    assert_eq!(spec.storage_class_name.as_deref(), Some("volplane"));
    assert_eq!(
        spec.claim_ref.as_ref().unwrap().name.as_deref(),
        Some("data")
    );
    assert_eq!(
        pv.metadata
            .annotations
            .unwrap()
            .get("pv.kubernetes.io/provisioned-by")
            .map(String::as_str),
        Some(DRIVER)
    );
    // In the zone the driver reported: the immediate claim's requisite was
    // the registered nodes' segments.
    let affinity =
        serde_json::to_value(spec.node_affinity.as_ref().expect("node affinity")).unwrap();
    assert_eq!(
        affinity["required"]["nodeSelectorTerms"][0]["matchExpressions"][0],
        json!({"key": ZONE_KEY, "operator": "In", "values": ["local"]})
    );

    // Attached.
    let vas: Api<VolumeAttachment> = Api::all(client.clone());
    let va: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": "csi-test"},
        "spec": {"attacher": DRIVER, "nodeName": NODE, "source": {"persistentVolumeName": pv_name}}
    }))
    .unwrap();
    vas.create(&pp, &va).await.unwrap();
    until("attached", || async {
        vas.get("csi-test")
            .await
            .ok()?
            .status?
            .attached
            .then_some(())
    })
    .await;

    // Resized.
    let grow = json!({"spec": {"resources": {"requests": {"storage": "128Mi"}}}});
    claims
        .patch("data", &PatchParams::default(), &Patch::Merge(&grow))
        .await
        .unwrap();
    until("the PV grown", || async {
        let pv = pvs.get(&pv_name).await.ok()?;
        (pv.spec?.capacity?.get("storage")?.0 == "128Mi").then_some(())
    })
    .await;
    recover_from_an_infeasible_expansion(&claims, &pvs, &pv_name).await;

    // Capacity: one object for the class in the driver's zone, from its
    // GetCapacity (the free space of the volumes' filesystem).
    let capacities: Api<CSIStorageCapacity> = Api::namespaced(client.clone(), "default");
    let object = until("a CSIStorageCapacity for the class", || async {
        capacities
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|c| {
                c.storage_class_name == "volplane"
                    && c.node_topology
                        .as_ref()
                        .and_then(|t| t.match_labels.as_ref())
                        .and_then(|l| l.get(ZONE_KEY))
                        .map(String::as_str)
                        == Some("local")
            })
    })
    .await;
    let labels = object.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels["csi.storage.k8s.io/drivername"], DRIVER);
    assert_eq!(
        labels["csi.storage.k8s.io/managed-by"],
        "external-provisioner"
    );
    assert!(object.capacity.is_some(), "{object:?}");

    // A VolumeAttributesClass named on the claim: ControllerModifyVolume,
    // then the PV and the claim's status name it.
    let vac: VolumeAttributesClass = serde_json::from_value(json!({
        "metadata": {"name": "gold"}, "driverName": DRIVER, "parameters": {"tier": "gold"}
    }))
    .unwrap();
    Api::<VolumeAttributesClass>::all(client.clone())
        .create(&pp, &vac)
        .await
        .unwrap();
    let modify = json!({"spec": {"volumeAttributesClassName": "gold"}});
    claims
        .patch("data", &PatchParams::default(), &Patch::Merge(&modify))
        .await
        .unwrap();
    until("the claim's volume modified to gold", || async {
        let status = claims.get("data").await.ok()?.status?;
        (status.current_volume_attributes_class_name.as_deref() == Some("gold")
            && status.modify_volume_status.is_none())
        .then_some(())
    })
    .await;
    let pv = pvs.get(&pv_name).await.unwrap();
    assert_eq!(
        pv.spec.unwrap().volume_attributes_class_name.as_deref(),
        Some("gold")
    );

    // Killed mid-operation: a claim created while it is down, and the
    // controller killed again right after it starts.
    let _ = a.kill();
    let _ = a.wait();
    claims.create(&pp, &claim("while-down")).await.unwrap();
    let mut b = cluster.controller(&d.endpoint, "replica-b", ELECTED);
    until("while-down Bound after a restart", || {
        bound(&claims, "while-down")
    })
    .await;

    // Two replicas, one Lease: replica-c waits while replica-b holds it.
    let mut c = cluster.controller(&d.endpoint, "replica-c", ELECTED);
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let holder = |l: Lease| l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        holder(leases.get("volplane-volplane.csi.io").await.unwrap()),
        "replica-b"
    );
    let _ = b.kill();
    let _ = b.wait();
    until("replica-c takes the Lease", || async {
        (holder(leases.get("volplane-volplane.csi.io").await.ok()?) == "replica-c").then_some(())
    })
    .await;
    claims.create(&pp, &claim("after-failover")).await.unwrap();
    until("after-failover Bound", || bound(&claims, "after-failover")).await;

    // Two zones: a second node in zone "other", where the driver makes no
    // volumes. A class allowed only there asks CreateVolume for that zone
    // alone: the driver refuses, and no volume lands outside the zone.
    register_node(&client, "node-other", "other").await;
    let elsewhere: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "elsewhere"}, "provisioner": DRIVER,
        "volumeBindingMode": "Immediate", "parameters": {"kind": "dir"},
        "allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE_KEY, "values": ["other"]}]}]
    }))
    .unwrap();
    Api::<StorageClass>::all(client.clone())
        .create(&pp, &elsewhere)
        .await
        .unwrap();
    claims
        .create(
            &pp,
            &common::cluster::claim("elsewhere", "elsewhere", "64Mi"),
        )
        .await
        .unwrap();
    let refused = event_note(&client, "ProvisioningFailed", "elsewhere").await;
    assert!(
        refused.contains("which no requisite topology allows"),
        "the driver was asked for the other zone alone: {refused}"
    );
    assert_eq!(
        bound(&claims, "elsewhere").await,
        None,
        "not provisioned in the wrong zone"
    );

    a_provisioner_secret_reaches_the_driver(&cluster, &client).await;

    // Detached and deleted: the VolumeAttachment, then every claim.
    vas.delete("csi-test", &DeleteParams::default())
        .await
        .unwrap();
    until("the attachment gone", || async {
        vas.get_opt("csi-test").await.ok()?.is_none().then_some(())
    })
    .await;
    for name in ["data", "while-down", "after-failover", "elsewhere"] {
        claims.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = pvs.list(&Default::default()).await.unwrap().items;
        if left.is_empty() {
            break;
        }
        if Instant::now() > deadline {
            let states: Vec<String> = left
                .iter()
                .map(|p| {
                    format!(
                        "{:?} {:?} {:?}",
                        p.metadata.name,
                        p.metadata.finalizers,
                        p.status.as_ref().and_then(|s| s.phase.clone())
                    )
                })
                .collect();
            panic!("PVs not deleted within 60 s: {states:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    until("every claim gone", || async {
        claims
            .list(&Default::default())
            .await
            .ok()?
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    let _ = c.kill();
    let _ = c.wait();
}

/// The API server's `apiserver_request_total`, summed over every label.
async fn requests_served(client: &kube::Client) -> f64 {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(req).await.unwrap();
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A benchmark, not a test: 1,000 claims provisioned through the real API
/// server — how long until all are Bound, and API requests per claim (every
/// client's, the benchmark's own create and polling included).
/// `VOLPLANE_TEST_KUBE_APISERVER=… cargo test -p volplane-tests --release
/// --test kube_apiserver -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run it with --ignored"]
async fn bench_provisioning_1000_claims() {
    let Some(apiserver) = std::env::var_os("VOLPLANE_TEST_KUBE_APISERVER") else {
        eprintln!("skipping the benchmark: set VOLPLANE_TEST_KUBE_APISERVER");
        return;
    };
    require_root!();
    let n = env_number("VOLPLANE_BENCH_CLAIMS", 1000);
    let cluster = Cluster::start(Path::new(&apiserver));
    let client = cluster.client().await;
    seed(&client).await;
    let d = Driver::start(Runtime::Tokio);
    let mut controller = cluster.controller(&d.endpoint, "bench", &[]);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let before = requests_served(&client).await;
    let start = Instant::now();
    for i in 0..n {
        claims
            .create(&PostParams::default(), &claim(&format!("c-{i:04}")))
            .await
            .unwrap();
    }
    let created = start.elapsed();
    let deadline = Instant::now() + Duration::from_secs(1800);
    let mut polls = 0u32;
    loop {
        polls += 1;
        let list = claims.list(&Default::default()).await.unwrap();
        let bound = list
            .items
            .iter()
            .filter(|c| c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
            .count();
        if bound == n {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{bound} of {n} Bound after 30 min"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let all_bound = start.elapsed();
    let requests = requests_served(&client).await - before;
    let _ = controller.kill();
    let _ = controller.wait();
    println!(
        "{n} claims: created in {:.1} s, all Bound after {:.1} s ({:.0} claims/s); {:.1} API requests per claim ({requests} in all, {n} creates and {polls} lists of the benchmark's own included)",
        created.as_secs_f64(),
        all_bound.as_secs_f64(),
        n as f64 / all_bound.as_secs_f64(),
        requests / n as f64,
    );
}

/// Issue 28: hundreds of claims deleted at once, pv-protection racing the
/// provisioner on every PV. Every PV goes (none is left Released holding
/// the provisioner's finalizer), and the controller is idle afterwards
/// (it spun a core, silently, while a PV stayed behind). The number of
/// claims is `VOLPLANE_TEST_MASS_CLAIMS` (300 unless set).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mass_delete_leaves_no_volume_behind_and_the_controller_idle() {
    let Some(apiserver) = std::env::var_os("VOLPLANE_TEST_KUBE_APISERVER") else {
        eprintln!(
            "skipping the real kube-apiserver mass-delete test: set VOLPLANE_TEST_KUBE_APISERVER to a kube-apiserver binary"
        );
        return;
    };
    require_root!();
    let n = env_number("VOLPLANE_TEST_MASS_CLAIMS", 300);
    let cluster = Cluster::start(Path::new(&apiserver));
    let client = cluster.client().await;
    seed(&client).await;
    let d = Driver::start(Runtime::Tokio);
    let mut controller = cluster.controller(
        &d.endpoint,
        "mass",
        &["--kube-api-qps=200", "--kube-api-burst=400"],
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let names: Vec<String> = (0..n).map(|i| format!("m-{i:04}")).collect();
    for name in &names {
        claims
            .create(&PostParams::default(), &claim(name))
            .await
            .unwrap();
    }
    let (_, bound) = wait_for(n, Duration::from_secs(600), || bound_claims(&claims)).await;
    assert_eq!(bound, n, "{bound} of {n} Bound after 10 min");
    let start = Instant::now();
    let dp = DeleteParams::default();
    futures::future::join_all(names.iter().map(|name| claims.delete(name, &dp))).await;
    let (_, left) = wait_for(0, Duration::from_secs(300), || volumes(&client)).await;
    if left > 0 {
        let states: Vec<String> = pvs
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .take(5)
            .map(|p| {
                format!(
                    "{:?} {:?} {:?}",
                    p.metadata.name,
                    p.metadata.finalizers,
                    p.status.as_ref().and_then(|s| s.phase.clone())
                )
            })
            .collect();
        panic!("{left} of {n} PVs left 5 min after their claims were deleted: {states:?}");
    }
    let deleted = start.elapsed();
    // Idle: under a tenth of a core over 5 s (a livelock spins one or more).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (before, t0) = (cpu_ticks(controller.id()), Instant::now());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let ticks = cpu_ticks(controller.id()) - before;
    let hz = 100.0; // USER_HZ on Linux
    let load = ticks as f64 / hz / t0.elapsed().as_secs_f64();
    let _ = controller.kill();
    let _ = controller.wait();
    let log = std::fs::read_to_string(cluster.dir.path().join("mass.log")).unwrap_or_default();
    assert!(
        !log.contains("hot loop"),
        "the controller logged a hot loop"
    );
    println!(
        "{n} claims deleted at once: every PV gone after {:.1} s; the controller then used {:.1}% of a core",
        deleted.as_secs_f64(),
        load * 100.0
    );
    assert!(
        load < 0.1,
        "the controller used {:.0}% of a core with nothing to do",
        load * 100.0
    );
}

/// The events volplane writes pass the real API server's validation of
/// events.k8s.io/v1, and a repeat continues the first one's series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_event_is_one_event_with_a_series() {
    let Some(apiserver) = std::env::var_os("VOLPLANE_TEST_KUBE_APISERVER") else {
        eprintln!(
            "skipping the event test on a real kube-apiserver: set VOLPLANE_TEST_KUBE_APISERVER"
        );
        return;
    };
    use volplane_core::control::Event;
    use volplane_core::model::{Kind, ObjectKey};
    let cluster = Cluster::start(Path::new(&apiserver));
    let client = cluster.client().await;
    let seen = volplane_kube::api::Seen::default();
    let events = volplane_kube::events::Events::new(client.clone(), "volplane-test", "pod-0", seen);
    let object = ObjectKey::new(Kind::PersistentVolumeClaim, "default", "data");
    for note in ["first", "second", "third"] {
        events
            .record(Event::warning(object.clone(), "ProvisioningFailed", note))
            .await;
    }
    let list: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, "default");
    let found = list.list(&Default::default()).await.unwrap().items;
    assert_eq!(found.len(), 1, "{found:?}");
    let e = &found[0];
    assert_eq!(e.reason.as_deref(), Some("ProvisioningFailed"));
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.note.as_deref(), Some("first"));
    assert_eq!(e.series.as_ref().map(|s| s.count), Some(3));
}
