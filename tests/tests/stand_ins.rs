//! deploy/beside-hostpath's containers against a real kube-apiserver, with
//! the Go reference driver (csi-driver-host-path's hostpathplugin): each
//! volplane container of the manifest runs with its command and arguments
//! as written there (the socket path and a kubeconfig aside, which a pod
//! gets from its mounts and service account), and a claim is provisioned,
//! attached and resized through them. The PV binder and the protection
//! controllers are `volplane controller`'s, in kube-controller-manager's
//! place.
//!
//! Runs when VOLPLANE_TEST_KUBE_APISERVER names a kube-apiserver binary and
//! VOLPLANE_TEST_HOSTPATH_PLUGIN a hostpathplugin binary; skipped, saying
//! so, otherwise. Neither is in a registry reachable here: build them
//! outside this repository from their public sources.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::cluster::{Cluster, bound, claim, until};
use common::hostpath::{self, HOSTPATH, Killed, NODE, seed};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// Each volplane container of the manifest: its name, and its command
/// line after `volplane`.
fn stand_ins() -> Vec<(String, Vec<String>)> {
    let text = include_str!("../../deploy/beside-hostpath/plugin.yaml");
    let (_, unknown) = volplane_core::model::parse_manifests(text).unwrap();
    let set = unknown.iter().find(|u| u.kind == "StatefulSet").unwrap();
    let words = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|w| w.as_str())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    set.value["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["image"] == "volplane")
        .map(|c| {
            let line = words(&c["command"])
                .into_iter()
                .skip(1)
                .chain(words(&c["args"]));
            (c["name"].as_str().unwrap().to_string(), line.collect())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stand_ins_of_beside_hostpath_provision_attach_and_resize() {
    let (Some(apiserver), Some(hostpath)) = (
        std::env::var_os("VOLPLANE_TEST_KUBE_APISERVER"),
        std::env::var_os("VOLPLANE_TEST_HOSTPATH_PLUGIN").map(PathBuf::from),
    ) else {
        eprintln!(
            "skipping the stand-ins test on a real kube-apiserver: set VOLPLANE_TEST_KUBE_APISERVER to a kube-apiserver binary and VOLPLANE_TEST_HOSTPATH_PLUGIN to csi-driver-host-path's hostpathplugin"
        );
        return;
    };
    let cluster = Cluster::start(Path::new(&apiserver));
    let client = cluster.client().await;
    seed(&client).await;
    let socket = cluster.dir().join("csi.sock");
    let _driver = hostpath::plugin(&cluster, &hostpath, &socket);
    let mut running = Vec::new();
    for (name, line) in stand_ins() {
        // The registrar needs a kubelet's plugin registry; the others run.
        if name == "node-driver-registrar" {
            continue;
        }
        let line: Vec<String> = line
            .iter()
            .map(|w| w.replace("/csi/csi.sock", &socket.display().to_string()))
            .collect();
        let log = std::fs::File::create(cluster.dir().join(format!("{name}.log"))).unwrap();
        let mut c = Command::new(env!("CARGO_BIN_EXE_volplane-under-test"));
        c.args(&line)
            .env("POD_NAME", &name)
            .stdout(Stdio::null())
            .stderr(log);
        if name != "liveness-probe" {
            c.arg("--kubeconfig").arg(&cluster.kubeconfig);
        }
        running.push(Killed(c.spawn().unwrap()));
    }
    // kube-controller-manager's part: the binder and the protections.
    running.push(Killed(cluster.sidecars(
        &format!("unix://{}", socket.display()),
        "kcm",
        &[
            "--binder",
            "--pvc-protection",
            "--pv-protection",
            "--provisioner=false",
            "--attacher=false",
            "--resizer=false",
        ],
    )));

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    claims
        .create(&PostParams::default(), &claim("c", "hostpath", "1Gi"))
        .await
        .unwrap();
    let pv = until("the claim Bound by csi-provisioner's stand-in", || {
        bound(&claims, "c")
    })
    .await;

    let attachments: Api<VolumeAttachment> = Api::all(client.clone());
    let va: VolumeAttachment = serde_json::from_value(json!({
        "metadata": {"name": "va-c"},
        "spec": {"attacher": HOSTPATH, "nodeName": NODE,
                 "source": {"persistentVolumeName": pv}}
    }))
    .unwrap();
    attachments
        .create(&PostParams::default(), &va)
        .await
        .unwrap();
    until("attached by csi-attacher's stand-in", || async {
        let va = attachments.get("va-c").await.ok()?;
        va.status?.attached.then_some(())
    })
    .await;

    let grow = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    claims
        .patch("c", &PatchParams::default(), &Patch::Merge(&grow))
        .await
        .unwrap();
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    until("the PV grown by csi-resizer's stand-in", || async {
        let v = volumes.get(&pv).await.ok()?;
        let size = v.spec?.capacity?.get("storage")?.0.clone();
        (size == "2Gi").then_some(())
    })
    .await;

    let health = common::http_get("127.0.0.1:9898", "/healthz").await;
    assert!(
        health
            .as_deref()
            .is_some_and(|h| h.starts_with("HTTP/1.1 200")),
        "livenessprobe's stand-in: {health:?}"
    );
    for mut p in running.drain(..) {
        assert!(
            p.0.try_wait().unwrap().is_none(),
            "a stand-in exited; see its log in {}",
            cluster.dir().display()
        );
    }
}
