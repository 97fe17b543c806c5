//! csi-driver-host-path's Go driver (hostpathplugin) beside a real API
//! server: the objects it needs there, and the process.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass};
use serde_json::json;

use super::cluster::{Cluster, create};

/// The driver's name.
pub const HOSTPATH: &str = "hostpath.csi.k8s.io";
/// The node it serves.
pub const NODE: &str = "node-1";
/// Its topology key.
pub const TOPOLOGY: &str = "topology.hostpath.csi/node";

/// A process killed when the test ends, however it ends.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The StorageClass `hostpath` (Immediate, expandable, dir volumes), the
/// CSIDriver (attach required), and [`NODE`] with its CSINode.
pub async fn seed(client: &kube::Client) {
    create::<StorageClass>(
        client,
        json!({
            "metadata": {"name": "hostpath"}, "provisioner": HOSTPATH, "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate", "allowVolumeExpansion": true,
            "parameters": {"kind": "dir"}
        }),
    )
    .await;
    create::<CSIDriver>(
        client,
        json!({"metadata": {"name": HOSTPATH}, "spec": {"attachRequired": true}}),
    )
    .await;
    create::<Node>(
        client,
        json!({"metadata": {"name": NODE, "labels": {TOPOLOGY: NODE}}}),
    )
    .await;
    create::<CSINode>(
        client,
        json!({
            "metadata": {"name": NODE},
            "spec": {"drivers": [{"name": HOSTPATH, "nodeID": NODE, "topologyKeys": [TOPOLOGY]}]}
        }),
    )
    .await;
}

/// The Go driver `binary` on `socket`, attach on, its state and log in the
/// cluster's directory.
pub fn plugin(cluster: &Cluster, binary: &Path, socket: &Path) -> Killed {
    let state = cluster.dir().join("hostpath");
    std::fs::create_dir_all(&state).unwrap();
    let log = std::fs::File::create(cluster.dir().join("hostpath.log")).unwrap();
    Killed(
        Command::new(binary)
            .arg(format!("--endpoint=unix://{}", socket.display()))
            .args([
                &format!("--drivername={HOSTPATH}"),
                &format!("--nodeid={NODE}"),
                "--enable-attach",
                "--capacity",
                "dir=100Ti",
            ])
            .arg(format!("--statedir={}", state.display()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("hostpathplugin"),
    )
}
