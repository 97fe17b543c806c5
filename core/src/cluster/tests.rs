//! The lifecycle across machines: a scenario that reads like the Kubernetes
//! docs, and properties over random workloads with injected faults.

use quickcheck::{Arbitrary, Gen, QuickCheck};

use super::*;
use crate::model::names;

fn class(name: &str, policy: ReclaimPolicy) -> Object {
    let mut sc = StorageClass::new(name, DRIVER);
    sc.reclaim_policy = Some(policy);
    sc.allow_volume_expansion = Some(true);
    Object::Class(sc)
}

fn claim(name: &str, class: &str, mode: AccessMode) -> Object {
    let mut c = PersistentVolumeClaim::new("default", name);
    c.spec.storage_class_name = Some(class.into());
    c.spec.access_modes = vec![mode];
    c.spec
        .resources
        .requests
        .insert("storage".into(), Quantity::parse("1Gi").unwrap());
    Object::Pvc(c)
}

fn pod(name: &str, claim: &str, node: &str) -> Object {
    let mut p = Pod::new("default", name);
    p.spec.node_name = Some(node.into());
    p.spec.volumes.push(PodVolume {
        name: "data".into(),
        persistent_volume_claim: Some(PvcSource {
            claim_name: claim.into(),
            read_only: false,
        }),
    });
    Object::Pod(p)
}

fn csi_calls(c: &Cluster, node: &str) -> Vec<String> {
    c.trace
        .iter()
        .filter(|l| l.contains(" -> ") && l.ends_with(&format!(" {node} = OK")))
        .map(|l| {
            l.split(" -> ")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn the_story_provision_attach_stage_publish_and_back_with_delete() {
    let mut c = Cluster::new(ClusterConfig::new(2, 1));
    c.user(ApiCall::Create(class("fast", ReclaimPolicy::Delete)));
    c.user(ApiCall::Create(claim(
        "data",
        "fast",
        AccessMode::ReadWriteOnce,
    )));
    c.run(10_000);
    let Some(Object::Pvc(pvc)) = c
        .store
        .get(&ObjectKey::new(
            Kind::PersistentVolumeClaim,
            "default",
            "data",
        ))
        .cloned()
    else {
        panic!()
    };
    assert_eq!(pvc.phase(), PvcPhase::Bound, "provisioned and bound");
    assert_eq!(pvc.volume_name(), format!("pvc-{}", pvc.metadata.uid));

    c.user(ApiCall::Create(pod("web-0", "data", "node-0")));
    c.run(10_000);
    c.user(ApiCall::Create(pod("web-1", "data", "node-0")));
    c.run(10_000);
    assert_eq!(
        csi_calls(&c, "node-0"),
        vec!["NodeStageVolume", "NodePublishVolume", "NodePublishVolume"]
    );
    let va = names::volume_attachment_name(&format!("vol-{}", pvc.volume_name()), DRIVER, "node-0");
    assert!(
        matches!(c.store.get(&ObjectKey::new(Kind::VolumeAttachment, "", &va)), Some(Object::Va(v)) if v.status.attached)
    );

    // RWO: a pod on another node is refused with the Multi-Attach event.
    c.user(ApiCall::Create(pod("web-2", "data", "node-1")));
    c.run(10_000);
    assert!(csi_calls(&c, "node-1").is_empty());
    assert!(
        c.events
            .iter()
            .any(|e| e.reason == names::reason::FAILED_ATTACH_VOLUME
                && e.message.contains("Multi-Attach"))
    );
    c.user(ApiCall::Delete(ObjectKey::new(
        Kind::Pod,
        "default",
        "web-2",
    )));

    for p in ["web-0", "web-1"] {
        c.user(ApiCall::Delete(ObjectKey::new(Kind::Pod, "default", p)));
    }
    c.run(10_000);
    assert_eq!(
        csi_calls(&c, "node-0"),
        vec![
            "NodeStageVolume",
            "NodePublishVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume"
        ]
    );
    assert!(
        c.store
            .get(&ObjectKey::new(Kind::VolumeAttachment, "", &va))
            .is_none(),
        "detached"
    );

    c.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolumeClaim,
        "default",
        "data",
    )));
    c.run(10_000);
    assert!(
        c.store
            .get(&ObjectKey::new(
                Kind::PersistentVolume,
                "",
                pvc.volume_name()
            ))
            .is_none(),
        "Delete: the PV is gone"
    );
    assert!(
        c.controller_driver().state().volumes.is_empty(),
        "and so is the volume"
    );
    assert!(c.violations.is_empty(), "{:?}", c.violations);
}

#[test]
fn retain_leaves_the_volume_released_and_its_storage_kept() {
    let mut c = Cluster::new(ClusterConfig::new(1, 2));
    c.user(ApiCall::Create(class("keep", ReclaimPolicy::Retain)));
    c.user(ApiCall::Create(claim(
        "data",
        "keep",
        AccessMode::ReadWriteOnce,
    )));
    c.run(10_000);
    c.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolumeClaim,
        "default",
        "data",
    )));
    c.run(10_000);
    let pvs: Vec<&PersistentVolume> = c
        .store
        .objects()
        .filter_map(|o| if let Object::Pv(v) = o { Some(v) } else { None })
        .collect();
    assert_eq!(pvs.len(), 1);
    assert_eq!(pvs[0].phase(), PvPhase::Released);
    assert_eq!(c.controller_driver().state().volumes.len(), 1);
    assert!(c.deleted_handles.is_empty());
}

#[test]
fn expansion_goes_controller_then_node_then_claim() {
    let mut c = Cluster::new(ClusterConfig::new(1, 3));
    c.user(ApiCall::Create(class("fast", ReclaimPolicy::Delete)));
    c.user(ApiCall::Create(claim(
        "data",
        "fast",
        AccessMode::ReadWriteOnce,
    )));
    c.user(ApiCall::Create(pod("web-0", "data", "node-0")));
    c.run(10_000);
    let key = ObjectKey::new(Kind::PersistentVolumeClaim, "default", "data");
    let Some(Object::Pvc(mut pvc)) = c.store.get(&key).cloned() else {
        panic!()
    };
    pvc.spec
        .resources
        .requests
        .insert("storage".into(), Quantity::parse("3Gi").unwrap());
    c.user(ApiCall::Update(Object::Pvc(pvc)));
    c.run(10_000);
    let Some(Object::Pvc(pvc)) = c.store.get(&key).cloned() else {
        panic!()
    };
    assert_eq!(pvc.status_capacity().unwrap().bytes(), 3 << 30);
    let ctl = c
        .trace
        .iter()
        .position(|l| l.contains("ControllerExpandVolume"))
        .expect("controller expand");
    let node = c
        .trace
        .iter()
        .position(|l| l.contains("NodeExpandVolume"))
        .expect("node expand");
    assert!(ctl < node);
}

/// A user action in a random workload.
#[derive(Debug, Clone)]
enum Action {
    Claim(u8, bool, bool),
    Pod(u8, u8, u8),
    DeletePod(u8),
    DeleteClaim(u8),
    Resize(u8),
    Run(u16),
}

impl Arbitrary for Action {
    fn arbitrary(g: &mut Gen) -> Action {
        let (a, b) = (u8::arbitrary(g) % 3, u8::arbitrary(g) % 4);
        match u8::arbitrary(g) % 7 {
            0 => Action::Claim(a, bool::arbitrary(g), bool::arbitrary(g)),
            1 | 2 => Action::Pod(b, a, u8::arbitrary(g) % 2),
            3 => Action::DeletePod(b),
            4 => Action::DeleteClaim(a),
            5 => Action::Resize(a),
            _ => Action::Run(u16::arbitrary(g) % 200),
        }
    }
}

fn play(seed: u64, actions: &[Action], faults: u32) -> Cluster {
    let mut config = ClusterConfig::new(2, seed);
    config.csi_fault_rate = faults;
    config.duplicate_rate = faults;
    let mut c = Cluster::new(config);
    c.user(ApiCall::Create(class("delete", ReclaimPolicy::Delete)));
    c.user(ApiCall::Create(class("retain", ReclaimPolicy::Retain)));
    for a in actions {
        match *a {
            Action::Claim(i, retain, rwx) => {
                let mode = if rwx {
                    AccessMode::ReadWriteMany
                } else {
                    AccessMode::ReadWriteOnce
                };
                c.user(ApiCall::Create(claim(
                    &format!("c{i}"),
                    if retain { "retain" } else { "delete" },
                    mode,
                )));
            }
            Action::Pod(p, i, n) => {
                c.user(ApiCall::Create(pod(
                    &format!("p{p}"),
                    &format!("c{i}"),
                    &format!("node-{n}"),
                )));
            }
            Action::DeletePod(p) => {
                c.user(ApiCall::Delete(ObjectKey::new(
                    Kind::Pod,
                    "default",
                    &format!("p{p}"),
                )));
            }
            Action::DeleteClaim(i) => {
                c.user(ApiCall::Delete(ObjectKey::new(
                    Kind::PersistentVolumeClaim,
                    "default",
                    &format!("c{i}"),
                )));
            }
            Action::Resize(i) => {
                if let Some(Object::Pvc(mut pvc)) = c
                    .store
                    .get(&ObjectKey::new(
                        Kind::PersistentVolumeClaim,
                        "default",
                        &format!("c{i}"),
                    ))
                    .cloned()
                {
                    let q = pvc.request().map_or(1 << 30, |q| q.bytes()) + (1 << 30);
                    pvc.spec
                        .resources
                        .requests
                        .insert("storage".into(), Quantity::from_bytes(q));
                    c.user(ApiCall::Update(Object::Pvc(pvc)));
                }
            }
            Action::Run(n) => {
                c.run(u64::from(n));
            }
        }
    }
    c.run(50_000);
    c
}

/// No unstage while published, no detach while staged, no delete while
/// attached, Retain never deletes, binding one-to-one — under faults.
fn safe(seed: u64, actions: Vec<Action>) -> bool {
    let c = play(seed, &actions, 50);
    if !c.violations.is_empty() {
        eprintln!("seed {seed}: {:?}", c.violations);
    }
    c.violations.is_empty()
}

/// The same seed and workload give the same trace, byte for byte.
fn deterministic(seed: u64, actions: Vec<Action>) -> bool {
    play(seed, &actions, 50).trace == play(seed, &actions, 50).trace
}

fn checker(tests: u64) -> QuickCheck {
    let seed = std::env::var("VOLPLANE_QC_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_u64);
    QuickCheck::new()
        .tests(tests)
        .rng(Gen::from_size_and_seed(25, seed))
}

#[test]
fn lifecycle_safety_holds_under_faults_and_interleavings() {
    checker(60).quickcheck(safe as fn(u64, Vec<Action>) -> bool);
}

#[test]
fn the_same_inputs_give_the_same_effects() {
    checker(15).quickcheck(deterministic as fn(u64, Vec<Action>) -> bool);
}

#[test]
fn random_workloads_exercise_the_whole_lifecycle() {
    let mut g = Gen::from_size_and_seed(25, 7);
    let mut totals = BTreeMap::<String, usize>::new();
    for seed in 0..20 {
        let actions: Vec<Action> = (0..40).map(|_| Action::arbitrary(&mut g)).collect();
        let c = play(seed, &actions, 50);
        for l in &c.trace {
            if let Some(rest) = l.split(" -> ").nth(1) {
                *totals
                    .entry(rest.split(' ').next().unwrap().to_string())
                    .or_default() += 1;
            }
        }
    }
    eprintln!("CSI calls over 20 random workloads: {totals:?}");
    let (creates, publishes) = (totals["CreateVolume"], totals["ControllerPublishVolume"]);
    assert!(
        publishes < creates * 5,
        "attach retries stay bounded: {publishes} publishes for {creates} volumes"
    );
    for call in [
        "CreateVolume",
        "ControllerPublishVolume",
        "NodeStageVolume",
        "NodePublishVolume",
        "NodeUnpublishVolume",
        "NodeUnstageVolume",
        "ControllerUnpublishVolume",
        "DeleteVolume",
    ] {
        assert!(
            totals.get(call).copied().unwrap_or(0) > 0,
            "{call} never happened: {totals:?}"
        );
    }
}

#[test]
fn two_pods_on_two_nodes_never_attach_an_rwo_volume_twice() {
    for seed in 0..20 {
        let mut c = Cluster::new(ClusterConfig::new(2, seed));
        c.user(ApiCall::Create(class("fast", ReclaimPolicy::Delete)));
        c.user(ApiCall::Create(claim(
            "data",
            "fast",
            AccessMode::ReadWriteOnce,
        )));
        c.run(10_000);
        c.user(ApiCall::Create(pod("a", "data", "node-0")));
        c.user(ApiCall::Create(pod("b", "data", "node-1")));
        c.run(10_000);
        assert!(c.violations.is_empty(), "seed {seed}: {:?}", c.violations);
        let attached = c
            .store
            .objects()
            .filter(|o| matches!(o, Object::Va(_)))
            .count();
        assert_eq!(attached, 1, "seed {seed}");
    }
}
