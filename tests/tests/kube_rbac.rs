//! `volplane controller` under the RBAC of deploy/rbac.yaml, on a real
//! kube-apiserver, as a user who may do only what that grants:
//!
//! - with CSIDrivers left out, the attacher (which alone watches them)
//!   waits, saying why, while the provisioner provisions; once they are
//!   granted, the attacher lists again and attaches;
//! - when the binding goes mid-run, a claim made meanwhile is not
//!   provisioned and the log says it is forbidden; once the binding is
//!   back, the claim is Bound.
//!
//! Runs when VOLPLANE_TEST_KUBE_APISERVER names a kube-apiserver binary;
//! skipped, saying so, otherwise (no registry reachable here ships one: build
//! it from the public Kubernetes source, outside this repository).

mod common;

use std::path::Path;
use std::time::Duration;

use common::cluster::{Cluster, DRIVER, LIMITED_USER, bound, claim, seed, until};
use common::hostpath::Killed;
use common::{Driver, Runtime};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

/// deploy/rbac.yaml's ClusterRole `volplane-controller`; without
/// CSIDrivers when `drivers` is false.
fn controller_role(drivers: bool) -> ClusterRole {
    let text = include_str!("../../deploy/rbac.yaml");
    let (_, unknown) = volplane_core::model::parse_manifests(text).unwrap();
    let mut role = unknown
        .iter()
        .find(|u| u.kind == "ClusterRole" && u.value["metadata"]["name"] == "volplane-controller")
        .expect("deploy/rbac.yaml has the ClusterRole volplane-controller")
        .value
        .clone();
    if !drivers {
        for rule in role["rules"].as_array_mut().unwrap() {
            let resources = rule["resources"].as_array_mut().unwrap();
            resources.retain(|r| r != "csidrivers");
        }
    }
    serde_json::from_value(role).unwrap()
}

/// The ClusterRole bound to the limited user.
fn binding() -> ClusterRoleBinding {
    serde_json::from_value(json!({
        "metadata": {"name": "volplane-controller"},
        "subjects": [{"kind": "User", "name": LIMITED_USER, "apiGroup": "rbac.authorization.k8s.io"}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "volplane-controller"}
    }))
    .unwrap()
}

/// Waits up to 60 s for the controller's log to say `words`.
async fn logged(log: &Path, words: &[&str]) -> String {
    until(&format!("the log saying {words:?}"), || async {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        text.lines()
            .find(|l| words.iter().all(|w| l.contains(w)))
            .map(String::from)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_wait_for_rbac_and_recover_when_it_returns() {
    let Some(apiserver) = std::env::var_os("VOLPLANE_TEST_KUBE_APISERVER") else {
        eprintln!(
            "skipping the RBAC test on a real kube-apiserver: set VOLPLANE_TEST_KUBE_APISERVER"
        );
        return;
    };
    let cluster = Cluster::start(Path::new(&apiserver));
    let client = cluster.client().await;
    seed(&client).await;
    let pp = PostParams::default();
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    roles.create(&pp, &controller_role(false)).await.unwrap();
    bindings.create(&pp, &binding()).await.unwrap();
    let d = Driver::start(Runtime::Tokio);
    // The binder and protection controllers run as admin, apart.
    let _kcm = Killed(cluster.controller(
        &d.endpoint,
        "kcm",
        &["--provisioner=false", "--attacher=false", "--resizer=false"],
    ));
    let _controller = Killed(cluster.sidecars_as(
        &cluster.limited_kubeconfig(),
        &d.endpoint,
        "limited",
        &["--retry-interval-max=2s"],
    ));
    let log = cluster.dir().join("limited.log");
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");

    // CSIDrivers forbidden: the attacher waits, the provisioner runs.
    let said = logged(&log, &["cannot list CSIDriver", "forbidden (RBAC)"]).await;
    assert!(said.contains(LIMITED_USER), "{said}");
    claims
        .create(&pp, &claim("first", "volplane", "64Mi"))
        .await
        .unwrap();
    let pv = until("the first claim Bound while the attacher waits", || {
        bound(&claims, "first")
    })
    .await;
    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    let va: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": "first"},
        "spec": {"attacher": DRIVER, "nodeName": common::NODE,
                 "source": {"persistentVolumeName": pv}}
    }))
    .unwrap();
    attachments.create(&pp, &va).await.unwrap();
    let attached = || async {
        let va = attachments.get("first").await.ok()?;
        va.status.filter(|s| s.attached).map(|_| ())
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(attached().await.is_none(), "attached without the right to");

    // Granted: the attacher lists again and attaches.
    roles
        .delete("volplane-controller", &DeleteParams::default())
        .await
        .unwrap();
    roles.create(&pp, &controller_role(true)).await.unwrap();
    until("the attachment attached once granted", attached).await;

    // The binding goes mid-run: a new claim is refused, and the log says so.
    bindings
        .delete("volplane-controller", &DeleteParams::default())
        .await
        .unwrap();
    claims
        .create(&pp, &claim("second", "volplane", "64Mi"))
        .await
        .unwrap();
    let said = logged(
        &log,
        &["PersistentVolume", "forbidden", "retrying with backoff"],
    )
    .await;
    assert!(said.contains(LIMITED_USER), "{said}");
    assert!(
        bound(&claims, "second").await.is_none(),
        "Bound while forbidden"
    );

    // The binding is back: the claim is Bound.
    bindings.create(&pp, &binding()).await.unwrap();
    until("the second claim Bound once the binding is back", || {
        bound(&claims, "second")
    })
    .await;
}
