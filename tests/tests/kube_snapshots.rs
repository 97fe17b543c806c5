//! Snapshots through `volplane controller --snapshotter
//! --snapshot-controller` against a real kube-apiserver, with
//! external-snapshotter's CRDs installed and `volplane serve` as the
//! driver: a VolumeSnapshot of a claim is cut and ready, its content
//! records `sourceVolumeMode: Filesystem`; a Block claim restoring it is
//! refused (`--prevent-volume-mode-conversion`, on by default) until the
//! content carries upstream's allow annotation (then it reaches the
//! driver); a Filesystem restore is
//! bound; deleting the snapshot deletes its content once no claim is being
//! restored from it.
//!
//! Runs when VOLPLANE_TEST_KUBE_APISERVER names a kube-apiserver binary
//! and VOLPLANE_TEST_SNAPSHOT_CRDS a directory holding the
//! `snapshot.storage.k8s.io` CRD manifests (external-snapshotter's
//! `client/config/crd`, or Kubernetes' `cluster/addons/volumesnapshots/crd`);
//! skipped, saying so, otherwise. Neither is in a registry reachable here.

mod common;

use std::path::Path;

use common::cluster::{Cluster, DRIVER, bound, event_note, seed, until};
use common::{Driver, Runtime};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

/// Installs every CRD manifest in `dir` and waits until each is Established.
async fn install_crds(client: &kube::Client, dir: &Path) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&text)
            .unwrap_or_else(|e| panic!("{}: not a CRD: {e}", path.display()));
        names.push(crd.metadata.name.clone().unwrap());
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    assert!(!names.is_empty(), "no CRD manifest in {}", dir.display());
    for name in names {
        until(&format!("CRD {name} Established"), || async {
            let crd = crds.get(&name).await.ok()?;
            crd.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        })
        .await;
    }
}

fn snapshot_api(client: &kube::Client, kind: &str, namespaced: bool) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("snapshot.storage.k8s.io", "v1", kind);
    let resource = ApiResource::from_gvk(&gvk);
    if namespaced {
        Api::namespaced_with(client.clone(), "default", &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    }
}

fn object(kind: &str, value: serde_json::Value) -> DynamicObject {
    let mut v = value;
    v["apiVersion"] = json!("snapshot.storage.k8s.io/v1");
    v["kind"] = json!(kind);
    serde_json::from_value(v).unwrap()
}

/// A claim of class `volplane` restoring the snapshot `snap`, in `mode`.
fn restore(name: &str, mode: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "volplane",
                 "volumeMode": mode,
                 "resources": {"requests": {"storage": "64Mi"}},
                 "dataSource": {"apiGroup": "snapshot.storage.k8s.io",
                                "kind": "VolumeSnapshot", "name": "snap"}}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_on_a_real_api_server_keep_their_volume_mode() {
    let (Some(apiserver), Some(crds)) = (
        std::env::var_os("VOLPLANE_TEST_KUBE_APISERVER"),
        std::env::var_os("VOLPLANE_TEST_SNAPSHOT_CRDS"),
    ) else {
        eprintln!(
            "skipping the snapshot test on a real kube-apiserver: set VOLPLANE_TEST_KUBE_APISERVER to a kube-apiserver binary and VOLPLANE_TEST_SNAPSHOT_CRDS to a directory of the snapshot.storage.k8s.io CRD manifests"
        );
        return;
    };
    require_root!();
    let cluster = Cluster::start(Path::new(&apiserver));
    let client = cluster.client().await;
    install_crds(&client, Path::new(&crds)).await;
    seed(&client).await;
    let d = Driver::start(Runtime::Tokio);
    let http = format!("127.0.0.1:{}", common::cluster::free_port());
    let mut controller = cluster.controller(
        &d.endpoint,
        "snapshots",
        &[
            "--snapshotter",
            "--snapshot-controller",
            &format!("--http-endpoint={http}"),
        ],
    );
    let pp = PostParams::default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    claims
        .create(&pp, &common::cluster::claim("src", "volplane", "64Mi"))
        .await
        .unwrap();
    until("src Bound", || bound(&claims, "src")).await;

    // Cut: ready, and its content records the source's mode.
    let classes = snapshot_api(&client, "VolumeSnapshotClass", false);
    let class = object(
        "VolumeSnapshotClass",
        json!({"metadata": {"name": "snaps"}, "driver": DRIVER, "deletionPolicy": "Delete"}),
    );
    classes.create(&pp, &class).await.unwrap();
    let snapshots = snapshot_api(&client, "VolumeSnapshot", true);
    let snap = object(
        "VolumeSnapshot",
        json!({"metadata": {"name": "snap", "namespace": "default"},
               "spec": {"volumeSnapshotClassName": "snaps",
                        "source": {"persistentVolumeClaimName": "src"}}}),
    );
    snapshots.create(&pp, &snap).await.unwrap();
    let content_name = until("the snapshot ready", || async {
        let s = snapshots.get("snap").await.ok()?;
        let status = s.data.get("status")?;
        (status.get("readyToUse")? == &json!(true)).then(|| {
            status
                .get("boundVolumeSnapshotContentName")?
                .as_str()
                .map(String::from)
        })?
    })
    .await;
    // The snapshot controller's operation metric, as upstream's.
    let metrics = common::http_get(&http, "/metrics").await.unwrap();
    for op in ["CreateSnapshot", "CreateSnapshotAndReady"] {
        let line = metrics
            .lines()
            .find(|l| {
                l.starts_with("snapshot_controller_operation_total_seconds_count{")
                    && l.contains(&format!("operation_name=\"{op}\""))
            })
            .unwrap_or_else(|| panic!("no {op} in:\n{metrics}"));
        for label in [
            format!("driver_name=\"{DRIVER}\""),
            "snapshot_type=\"dynamic\"".into(),
            "operation_status=\"success\"".into(),
        ] {
            assert!(line.contains(&label), "{line}");
        }
    }
    let contents = snapshot_api(&client, "VolumeSnapshotContent", false);
    let content = contents.get(&content_name).await.unwrap();
    assert_eq!(
        content.data["spec"]["sourceVolumeMode"],
        json!("Filesystem"),
        "{:?}",
        content.data["spec"]
    );

    // A Block restore of a Filesystem snapshot is refused…
    claims
        .create(&pp, &restore("as-block", "Block"))
        .await
        .unwrap();
    let note = event_note(&client, "ProvisioningFailed", "as-block").await;
    assert!(
        note.contains(
            "modifies the mode of the source volume but does not have permission to do so"
        ),
        "{note}"
    );
    assert_eq!(bound(&claims, "as-block").await, None);
    // …until the content allows it.
    let allow = json!({"metadata": {"annotations": {
        "snapshot.storage.kubernetes.io/allow-volume-mode-change": "true"
    }}});
    contents
        .patch(
            &content_name,
            &PatchParams::default(),
            &Patch::Merge(&allow),
        )
        .await
        .unwrap();
    // (The driver then gets the CreateVolume, and refuses Block for a dir
    // class: what matters here is that the mode check let it through.)
    event_note(&client, "Provisioning", "as-block").await;

    // A Filesystem restore is bound.
    claims
        .create(&pp, &restore("restored", "Filesystem"))
        .await
        .unwrap();
    until("the Filesystem restore Bound", || {
        bound(&claims, "restored")
    })
    .await;

    // Deleting the snapshot deletes its content (policy Delete), once no
    // claim is still being restored from it (the pending Block claim goes
    // first: upstream's snapshot-as-source protection holds it till then).
    claims
        .delete("as-block", &DeleteParams::default())
        .await
        .unwrap();
    snapshots
        .delete("snap", &DeleteParams::default())
        .await
        .unwrap();
    until("the content deleted", || async {
        contents
            .get_opt(&content_name)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let _ = controller.kill();
    let _ = controller.wait();
}

/// The snapshot roles switched on in a cluster without the snapshot CRDs:
/// the provisioner still provisions (it waits only for the kinds it
/// needs), and the snapshot roles start once the CRDs are applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_wait_only_for_the_kinds_they_need() {
    let (Some(apiserver), Some(crds)) = (
        std::env::var_os("VOLPLANE_TEST_KUBE_APISERVER"),
        std::env::var_os("VOLPLANE_TEST_SNAPSHOT_CRDS"),
    ) else {
        eprintln!(
            "skipping the missing-CRD test on a real kube-apiserver: set VOLPLANE_TEST_KUBE_APISERVER and VOLPLANE_TEST_SNAPSHOT_CRDS"
        );
        return;
    };
    require_root!();
    let cluster = Cluster::start(Path::new(&apiserver));
    let client = cluster.client().await;
    seed(&client).await;
    let d = Driver::start(Runtime::Tokio);
    let mut controller = cluster.controller(
        &d.endpoint,
        "missing-crds",
        &["--snapshotter", "--snapshot-controller"],
    );
    let pp = PostParams::default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    claims
        .create(&pp, &common::cluster::claim("early", "volplane", "64Mi"))
        .await
        .unwrap();
    until("a claim Bound without the snapshot CRDs", || {
        bound(&claims, "early")
    })
    .await;

    install_crds(&client, Path::new(&crds)).await;
    let classes = snapshot_api(&client, "VolumeSnapshotClass", false);
    let class = object(
        "VolumeSnapshotClass",
        json!({"metadata": {"name": "snaps"}, "driver": DRIVER, "deletionPolicy": "Delete"}),
    );
    classes.create(&pp, &class).await.unwrap();
    let snapshots = snapshot_api(&client, "VolumeSnapshot", true);
    let snap = object(
        "VolumeSnapshot",
        json!({"metadata": {"name": "late", "namespace": "default"},
               "spec": {"volumeSnapshotClassName": "snaps",
                        "source": {"persistentVolumeClaimName": "early"}}}),
    );
    snapshots.create(&pp, &snap).await.unwrap();
    until("a snapshot ready once the CRDs came", || async {
        let s = snapshots.get("late").await.ok()?;
        (s.data.get("status")?.get("readyToUse")? == &json!(true)).then_some(())
    })
    .await;
    let _ = controller.kill();
    let _ = controller.wait();
}
