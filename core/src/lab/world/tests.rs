//! The lab's world without processes: the simulator's in-memory driver
//! answers its CSI calls and a scripted registrar its registration RPCs, so
//! the story is checked deterministically.

use std::collections::BTreeMap;

use super::*;
use crate::registration::PluginInfo;
use crate::sim::backend::{DriverProcess, Storage};
use crate::sim::{DRIVER, ROOT};

const STORAGE: &str = "
kind: StorageClass
apiVersion: storage.k8s.io/v1
metadata: {name: fast}
provisioner: sim.volplane.io
reclaimPolicy: Delete
---
kind: PersistentVolumeClaim
apiVersion: v1
metadata: {name: shared}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: fast
  resources: {requests: {storage: 1Gi}}
---
kind: Deployment
apiVersion: apps/v1
metadata: {name: web}
spec:
  replicas: 3
  template:
    spec:
      volumes:
      - name: data
        persistentVolumeClaim: {claimName: shared}
";

struct Cluster {
    world: World,
    controller: DriverProcess,
    nodes: BTreeMap<String, DriverProcess>,
    storage: Storage,
    now: Tick,
    started: Vec<String>,
}

/// A driver that can do everything, as the lab's engine learns it (from
/// ControllerGetCapabilities alone).
fn facts() -> crate::roles::DriverFacts {
    crate::roles::DriverFacts {
        plugin: vec![],
        ..crate::sim::driver_facts()
    }
}

impl Cluster {
    fn new(nodes: usize) -> Cluster {
        let names = crate::lab::node_names(nodes);
        let mut c = Cluster {
            // The simulated driver confines its paths to the simulated kubelet root.
            world: World::new(Layout::new(format!("{ROOT}/lab"), DRIVER), &facts(), &names),
            controller: DriverProcess::new("controller", true, Default::default()),
            nodes: names
                .iter()
                .map(|n| (n.clone(), DriverProcess::new(n, false, Default::default())))
                .collect(),
            storage: Storage::default(),
            now: 0,
            started: Vec::new(),
        };
        for n in &names {
            let socket = format!("/lab/nodes/{n}/kubelet/plugins_registry/{DRIVER}-reg.sock");
            c.world.registry_changed(0, n, &socket, true);
        }
        c.settle();
        c
    }

    /// Carries out jobs until none is left.
    fn settle(&mut self) {
        for _ in 0..10_000 {
            self.now += 1;
            self.world.pump(self.now);
            let jobs = self.world.take_jobs();
            if jobs.is_empty() {
                return;
            }
            for job in jobs {
                self.run(job);
            }
        }
        panic!("the world did not settle");
    }

    fn run(&mut self, job: Job) {
        let now = self.now;
        match job {
            Job::Csi {
                plugin,
                call,
                reply,
                ..
            } => {
                let (process, node) = match self.nodes.get_mut(&plugin) {
                    Some(p) => (p, Some(plugin.as_str())),
                    None => (&mut self.controller, None),
                };
                let result = process.call(&mut self.storage, node, now, call.clone(), None);
                self.world.record(&plugin, &call, &result);
                self.world.csi_done(now, reply, result);
            }
            Job::Registration { node, effect } => {
                let input = match effect {
                    WatcherEffect::GetInfo { op, .. } => WatcherInput::InfoDone {
                        op,
                        result: Ok(PluginInfo {
                            type_: "CSIPlugin".into(),
                            name: DRIVER.into(),
                            endpoint: format!("/lab/nodes/{node}/csi.sock"),
                            supported_versions: vec!["1.0.0".into()],
                        }),
                    },
                    WatcherEffect::NodeGetInfo { op, .. } => {
                        let call = CsiCall::NodeGetInfo;
                        let p = self.nodes.get_mut(&node).unwrap();
                        let result =
                            p.call(&mut self.storage, Some(&node), now, call.clone(), None);
                        self.world.record(&node, &call, &result);
                        WatcherInput::NodeInfoDone { op, result }
                    }
                    WatcherEffect::Notify { op, .. } => WatcherInput::NotifyDone { op },
                    WatcherEffect::Api { .. } => unreachable!("the world writes itself"),
                };
                self.world.watcher_done(now, &node, input);
            }
            Job::Container { pod, .. } => self.started.push(pod),
        }
    }
}

#[test]
fn registration_starts_each_nodes_kubelet_and_fills_csinode() {
    let c = Cluster::new(2);
    assert!(c.world.ready());
    for n in ["node-a", "node-b"] {
        assert_eq!(c.world.calls_on(n), ["NodeGetInfo", "NodeGetCapabilities"]);
        let Some(Object::CsiNode(csinode)) =
            c.world.store.get(&ObjectKey::new(Kind::CsiNode, "", n))
        else {
            panic!("no CSINode for {n}")
        };
        assert_eq!(csinode.driver(DRIVER).unwrap().node_id, n);
    }
}

#[test]
fn a_deployment_on_a_rwx_claim_stages_once_per_node_and_publishes_per_pod() {
    let mut c = Cluster::new(2);
    let done = c.world.apply(c.now, STORAGE).unwrap();
    assert_eq!(
        done,
        [
            "StorageClass/fast created",
            "PersistentVolumeClaim/default/shared created",
            "deployment/web created"
        ]
    );
    c.settle();
    for p in ["web-0", "web-1", "web-2"] {
        assert!(c.world.running(p), "{p} runs: {:#?}", c.world.csi_log);
    }
    assert_eq!(c.started.len(), 3);
    assert_eq!(
        c.world.calls_on("node-a")[2..],
        ["NodeStageVolume", "NodePublishVolume", "NodePublishVolume"]
    );
    assert_eq!(
        c.world.calls_on("node-b")[2..],
        ["NodeStageVolume", "NodePublishVolume"]
    );

    // Scale down to one: node-b unstages and detaches; node-a keeps web-0.
    c.world.scale(c.now, "web", 1).unwrap();
    c.settle();
    assert_eq!(
        c.world.calls_on("node-b")[4..],
        ["NodeUnpublishVolume", "NodeUnstageVolume"]
    );
    assert_eq!(c.world.calls_on("node-a")[5..], ["NodeUnpublishVolume"]);
    let pv = c.world.claim("shared").unwrap().volume_name().to_string();
    assert_eq!(c.world.attached_to(&pv), ["node-a"]);
    let status = c.world.status();
    assert!(
        status.contains("web-0  Running  node-a  shared"),
        "{status}"
    );
    assert!(status.contains("ProvisioningSucceeded"), "{status}");
}

/// pvc-protection in the lab: a claim deleted while pods use it is shown
/// Terminating and keeps its volume until the last pod goes.
#[test]
fn a_claim_deleted_in_use_stays_terminating_until_its_pods_go() {
    let mut c = Cluster::new(1);
    c.world.apply(c.now, STORAGE).unwrap();
    c.settle();
    c.world.scale(c.now, "web", 1).unwrap();
    c.settle();
    // As in the demo: the pod goes and comes back before the claim is deleted.
    c.world.scale(c.now, "web", 0).unwrap();
    c.settle();
    c.world.scale(c.now, "web", 1).unwrap();
    c.settle();
    assert!(c.world.running("web-0"));
    let pv = c.world.claim("shared").unwrap().volume_name().to_string();
    c.world.delete(c.now, "pvc/shared").unwrap();
    c.settle();
    assert!(
        c.world
            .claim("shared")
            .is_some_and(|cl| cl.metadata.deleting())
    );
    let status = c.world.status();
    assert!(status.contains("shared  Terminating"), "{status}");
    assert!(c.world.running("web-0"));
    assert!(c.world.pv(&pv).is_some());
    c.world.scale(c.now, "web", 0).unwrap();
    // The provisioner retries DeleteVolume with backoff until the detach.
    for _ in 0..20 {
        c.now += 2_000;
        c.settle();
    }
    assert!(
        c.world.claim("shared").is_none(),
        "the claim stayed after its pods"
    );
    assert!(c.world.pv(&pv).is_none(), "the Delete volume stayed");
    let calls = c.world.calls_on("node-a");
    assert_eq!(
        calls[calls.len() - 2..],
        ["NodeUnpublishVolume", "NodeUnstageVolume"]
    );
}

#[test]
fn commands_refuse_what_does_not_exist_with_kubectls_words() {
    let mut c = Cluster::new(1);
    let err = |r: Result<String, CommandError>| r.unwrap_err().to_string();
    assert_eq!(
        err(c.world.scale(0, "nope", 1)),
        "deployments.apps \"nope\" not found"
    );
    assert_eq!(
        err(c.world.resize(0, "nope", "1Gi")),
        "persistentvolumeclaims \"nope\" not found"
    );
    assert!(err(c.world.resize(0, "nope", "lots")).contains("size \"lots\""));
    assert!(err(c.world.delete(0, "service/x")).contains("cannot delete kind"));
    assert!(err(c.world.delete(0, "pvc")).contains("expected KIND/NAME"));
    let e = c
        .world
        .apply(0, "kind: Service\nmetadata: {name: x}\n")
        .unwrap_err();
    assert!(e.to_string().contains("not supported by the lab"), "{e}");
}
