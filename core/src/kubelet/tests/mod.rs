//! Scenario tests of the kubelet volume manager, named after SEMANTICS.md D.

use super::*;
use crate::control::Input;
use crate::control::rig::Rig;
use crate::driver::{Request, Response};
use crate::machine::Machine;
use crate::model::names;
use crate::{Code, Status};

const DRIVER: &str = "volplane.csi.io";
const ROOT: &str = "/var/lib/kubelet";
const UNIQUE: &str = "kubernetes.io/csi/volplane.csi.io^vol-1";

fn ok(call: &Request) -> crate::control::CsiResult {
    let _ = call;
    Ok(Response::Empty)
}

/// A node (with the volume attached, or not), its VolumeAttachment, a PV
/// with `modes`, a bound claim.
fn objects(modes: &[AccessMode], attached: bool) -> Vec<Object> {
    let mut n = Node::new("node-a");
    if attached {
        n.status.volumes_attached.push(AttachedVolume {
            name: UNIQUE.into(),
            device_path: "x".into(),
        });
    }
    let mut va = VolumeAttachment::new(
        &names::volume_attachment_name("vol-1", DRIVER, "node-a"),
        DRIVER,
        "node-a",
        "pv-1",
    );
    va.status.attached = attached;
    va.status
        .attachment_metadata
        .insert("device".into(), "/dev/loop7".into());
    let mut pv = PersistentVolume::new("pv-1");
    pv.spec.access_modes = modes.to_vec();
    pv.spec
        .capacity
        .insert("storage".into(), Quantity::parse("1Gi").unwrap());
    pv.spec.csi = Some(CsiSource {
        driver: DRIVER.into(),
        volume_handle: "vol-1".into(),
        fs_type: "ext4".into(),
        ..Default::default()
    });
    let mut c = PersistentVolumeClaim::new("default", "data");
    c.spec.volume_name = Some("pv-1".into());
    c.status
        .capacity
        .insert("storage".into(), Quantity::parse("1Gi").unwrap());
    vec![
        Object::Node(n),
        Object::Va(va),
        Object::Pv(pv),
        Object::Pvc(c),
    ]
}

/// A node with the volume attached, a PV, a bound claim.
fn rig(modes: &[AccessMode], attached: bool) -> Rig<Kubelet> {
    let mut r = Rig::new(Kubelet::new(KubeletConfig::new("node-a", DRIVER, ROOT)));
    r.answer_csi(ok);
    for o in objects(modes, attached) {
        r.create(o);
    }
    r
}

/// A pod on node-a using the claim.
fn pod_object(name: &str) -> Pod {
    let mut p = Pod::new("default", name);
    p.spec.node_name = Some("node-a".into());
    p.spec.volumes.push(PodVolume {
        name: "d".into(),
        persistent_volume_claim: Some(PvcSource {
            claim_name: "data".into(),
            read_only: false,
        }),
    });
    p
}

fn pod(r: &mut Rig<Kubelet>, name: &str) -> String {
    let Object::Pod(p) = r.create(Object::Pod(pod_object(name))) else {
        unreachable!()
    };
    p.metadata.uid
}

fn calls(r: &Rig<Kubelet>) -> Vec<String> {
    r.csi_calls
        .iter()
        .map(|(node, c)| {
            assert_eq!(
                node.as_deref(),
                Some("node-a"),
                "node calls go to this node's plugin"
            );
            format!("{} {}", c.method(), c.path().unwrap_or(""))
        })
        .collect()
}

fn staging() -> String {
    names::staging_path(ROOT, DRIVER, "vol-1")
}

fn target(uid: &str) -> String {
    format!("{ROOT}/pods/{uid}/volumes/kubernetes.io~csi/pv-1/mount")
}

/// The PV grown to 2Gi (the resizer's controller step).
fn grow_pv(r: &mut Rig<Kubelet>) {
    let Some(Object::Pv(mut pv)) = r.get(Kind::PersistentVolume, "", "pv-1").cloned() else {
        panic!()
    };
    pv.spec
        .capacity
        .insert("storage".into(), Quantity::parse("2Gi").unwrap());
    r.user(ApiCall::Update(Object::Pv(pv)));
}

fn node(r: &Rig<Kubelet>) -> Node {
    match r.get(Kind::Node, "", "node-a") {
        Some(Object::Node(n)) => n.clone(),
        _ => panic!(),
    }
}

#[test]
fn d2_2_d3_1_d3_2_stage_once_per_volume_and_publish_per_pod_at_kubelets_paths() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    let a = pod(&mut r, "web-0");
    let b = pod(&mut r, "web-1");
    assert_eq!(
        calls(&r),
        vec![
            format!("NodeStageVolume {}", staging()),
            format!("NodePublishVolume {}", target(&a)),
            format!("NodePublishVolume {}", target(&b)),
        ]
    );
    assert!(staging().contains(&names::sha256_hex(b"vol-1")));
    let Request::NodeStage(s) = &r.csi_calls[0].1 else {
        panic!()
    };
    assert_eq!(
        &s.publish_context["device"], "/dev/loop7",
        "D3.5: publish_context from the VolumeAttachment"
    );
    assert!(
        matches!(&s.capability.access_type, crate::driver::AccessType::Mount { fs_type, .. } if fs_type == "ext4")
    );
    assert_eq!(node(&r).status.volumes_in_use, vec![UNIQUE.to_string()]);
}

#[test]
fn d1_2_nothing_is_staged_before_the_node_status_says_attached() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], false);
    pod(&mut r, "web-0");
    assert!(r.csi_calls.is_empty());
    assert_eq!(
        node(&r).status.volumes_in_use,
        vec![UNIQUE.to_string()],
        "reported in use while waiting"
    );
    let mut n = node(&r);
    n.status.volumes_attached.push(AttachedVolume {
        name: UNIQUE.into(),
        device_path: "x".into(),
    });
    r.user(ApiCall::UpdateStatus(Object::Node(n)));
    let va = names::volume_attachment_name("vol-1", DRIVER, "node-a");
    let Some(Object::Va(mut v)) = r.get(Kind::VolumeAttachment, "", &va).cloned() else {
        panic!()
    };
    v.status.attached = true;
    r.user(ApiCall::UpdateStatus(Object::Va(v)));
    assert_eq!(calls(&r).len(), 2, "stage and publish once attached");
}

#[test]
fn d1_3_unstage_only_after_the_last_unpublish_then_stop_reporting_in_use() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    let a = pod(&mut r, "web-0");
    let b = pod(&mut r, "web-1");
    r.csi_calls.clear();
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::Pod,
        "default",
        "web-0",
    )));
    assert_eq!(
        calls(&r),
        vec![format!("NodeUnpublishVolume {}", target(&a))]
    );
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::Pod,
        "default",
        "web-1",
    )));
    assert_eq!(
        calls(&r),
        vec![
            format!("NodeUnpublishVolume {}", target(&a)),
            format!("NodeUnpublishVolume {}", target(&b)),
            format!("NodeUnstageVolume {}", staging()),
        ]
    );
    assert!(node(&r).status.volumes_in_use.is_empty());
    assert_eq!(r.machine.actual(), &ActualState::default());
}

#[test]
fn d2_3_a_timed_out_stage_is_uncertain_and_cleaned_up_when_the_pod_goes() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    r.answer_csi(|c| match c {
        Request::NodeStage(_) => Err(Status::new(
            Code::DeadlineExceeded,
            "context deadline exceeded",
        )),
        _ => Ok(Response::Empty),
    });
    pod(&mut r, "web-0");
    assert_eq!(
        r.machine.actual().devices["pv-1"].state,
        Certainty::Uncertain
    );
    assert_eq!(r.reasons(), vec![crate::model::names::reason::FAILED_MOUNT]);
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::Pod,
        "default",
        "web-0",
    )));
    r.advance(1_000);
    assert_eq!(
        calls(&r).last().unwrap(),
        &format!("NodeUnstageVolume {}", staging()),
        "uncertain is cleaned up"
    );
    assert!(r.machine.actual().devices.is_empty());
}

/// A first stage refused with a final error did nothing: it is forgotten,
/// and nothing is unstaged when the pod goes.
#[test]
fn d2_3_a_first_stage_refused_with_a_final_error_is_forgotten() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    r.answer_csi(|c| match c {
        Request::NodeStage(_) => Err(Status::new(Code::Internal, "refused")),
        _ => Ok(Response::Empty),
    });
    pod(&mut r, "web-0");
    assert!(
        !r.machine.actual().devices.contains_key("pv-1"),
        "a refused first stage stays recorded"
    );
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::Pod,
        "default",
        "web-0",
    )));
    r.advance(1_000);
    assert!(
        !calls(&r).iter().any(|c| c.starts_with("NodeUnstageVolume")),
        "{:?}",
        calls(&r)
    );
}

/// Deliberately stricter than upstream (markDeviceErrorState): a stage that
/// timed out may have happened, and a final error on its retry does not undo
/// it, so the stage stays uncertain, the volume stays in use (no detach),
/// and NodeUnstage runs when the pod goes. Found by `volplane sim --seed 4850
/// --faults 0.3`.
#[test]
fn d2_3_a_final_error_on_a_retried_stage_keeps_it_uncertain_and_in_use() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    let tries = std::cell::Cell::new(0);
    r.answer_csi(move |c| match c {
        Request::NodeStage(_) => {
            tries.set(tries.get() + 1);
            Err(if tries.get() == 1 {
                Status::new(Code::DeadlineExceeded, "context deadline exceeded")
            } else {
                Status::new(Code::Internal, "transient failure")
            })
        }
        _ => Ok(Response::Empty),
    });
    pod(&mut r, "web-0");
    r.advance(1_000);
    assert!(
        calls(&r)
            .iter()
            .filter(|c| c.starts_with("NodeStageVolume"))
            .count()
            >= 2,
        "the stage was retried: {:?}",
        calls(&r)
    );
    assert_eq!(
        r.machine.actual().devices["pv-1"].state,
        Certainty::Uncertain,
        "a final error on a retry forgot a stage that may have happened"
    );
    assert_eq!(node(&r).status.volumes_in_use, vec![UNIQUE.to_string()]);
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::Pod,
        "default",
        "web-0",
    )));
    r.advance(1_000);
    assert_eq!(
        calls(&r).last().unwrap(),
        &format!("NodeUnstageVolume {}", staging())
    );
    assert!(r.machine.actual().devices.is_empty());
}

#[test]
fn d2_1_a_readwriteoncepod_volume_refuses_a_second_pod() {
    let mut r = rig(&[AccessMode::ReadWriteOncePod], true);
    pod(&mut r, "web-0");
    pod(&mut r, "web-1");
    let publishes = calls(&r)
        .iter()
        .filter(|c| c.starts_with("NodePublishVolume"))
        .count();
    assert_eq!(publishes, 1);
    let e = r
        .events
        .iter()
        .find(|e| &*e.object.name == "web-1")
        .expect("an event on the second pod");
    assert_eq!(
        e.message,
        "volume uses the ReadWriteOncePod access mode and is already in use by another pod"
    );
}

#[test]
fn d3_10_a_restarted_kubelet_cleans_up_what_no_pod_wants() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    r.machine.handle(
        r.now,
        Input::Reconstruct(Observed {
            staged: vec![("pv-1".into(), "vol-1".into())],
            published: vec![("gone-pod".into(), "pv-1".into(), "vol-1".into())],
        }),
    );
    r.run();
    assert_eq!(
        calls(&r),
        vec![
            format!("NodeUnpublishVolume {}", target("gone-pod")),
            format!("NodeUnstageVolume {}", staging())
        ]
    );
}

#[test]
fn d3_11_node_expansion_finishes_a_resize_and_updates_the_claim_last() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    let a = pod(&mut r, "web-0");
    grow_pv(&mut r);
    assert!(
        !calls(&r).iter().any(|c| c.starts_with("NodeExpandVolume")),
        "only when the resizer asks"
    );
    let Some(Object::Pvc(mut c)) = r
        .get(Kind::PersistentVolumeClaim, "default", "data")
        .cloned()
    else {
        panic!()
    };
    c.status.conditions.push(PvcCondition {
        type_: "FileSystemResizePending".into(),
        status: "True".into(),
        ..Default::default()
    });
    c.set_resize_status(Some(crate::model::names::expansion::NODE_PENDING));
    r.user(ApiCall::UpdateStatus(Object::Pvc(c)));
    assert_eq!(
        calls(&r).last().unwrap(),
        &format!("NodeExpandVolume {}", target(&a))
    );
    let Request::NodeExpand(e) = &r.csi_calls.last().unwrap().1 else {
        panic!()
    };
    assert_eq!(e.capacity.required_bytes, 2 << 30);
    assert_eq!(e.staging_target_path, staging());
    let Some(Object::Pvc(c)) = r.get(Kind::PersistentVolumeClaim, "default", "data") else {
        panic!()
    };
    assert_eq!(c.status_capacity().unwrap().bytes(), 2 << 30);
    assert!(c.condition("FileSystemResizePending").is_none());
    assert_eq!(c.resize_status(), None, "the expansion leaves no status");
    let in_progress = r.writes.iter().position(|w| {
        matches!(w, ApiCall::UpdateStatus(Object::Pvc(c))
            if c.resize_status() == Some(crate::model::names::expansion::NODE_IN_PROGRESS))
    });
    assert!(
        in_progress.is_some(),
        "NodeResizeInProgress is written before NodeExpandVolume"
    );
    assert!(
        r.reasons()
            .contains(&crate::model::names::reason::FILE_SYSTEM_RESIZE_SUCCESSFUL)
    );
}

mod incremental;
mod rules;
mod secrets;

/// Properties under faults (see `control::chaos`).
mod under_faults {
    use std::collections::{BTreeMap, BTreeSet};

    use quickcheck::TestResult;

    use super::*;
    use crate::control::chaos::{Chaos, CsiRecord, checker};
    use crate::control::{ApiCall, Input};

    fn world(seed: u64) -> Chaos<Kubelet> {
        let mut c = Chaos::new(
            seed,
            || Kubelet::new(KubeletConfig::new("node-a", DRIVER, ROOT)),
            |_, call| ok(call),
        );
        c.on_restart(|records, _| {
            let (staged, published) = mounts(records);
            vec![Input::Reconstruct(Observed {
                staged: staged.into_iter().map(|h| ("pv-1".into(), h)).collect(),
                published: published
                    .into_iter()
                    .filter_map(|t| pod_of(&t).map(|p| (p, "pv-1".into(), "vol-1".into())))
                    .collect(),
            })]
        });
        for o in objects(&[AccessMode::ReadWriteMany], true) {
            c.user(ApiCall::Create(o));
        }
        c
    }

    /// The pod UID in a publish target path.
    fn pod_of(target: &str) -> Option<String> {
        target
            .strip_prefix(&format!("{ROOT}/pods/"))
            .and_then(|rest| rest.split('/').next())
            .map(str::to_string)
    }

    /// Handles staged and targets published, as the calls carried out left them.
    fn mounts(records: &[CsiRecord]) -> (BTreeSet<String>, BTreeSet<String>) {
        let (mut staged, mut published) = (BTreeSet::new(), BTreeSet::new());
        for r in records.iter().filter(|r| r.done) {
            match &r.call {
                Request::NodeStage(s) => {
                    staged.insert(s.volume_id.clone());
                }
                Request::NodeUnstage(u) => {
                    staged.remove(&u.volume_id);
                }
                Request::NodePublish(p) => {
                    published.insert(p.target_path.clone());
                }
                Request::NodeUnpublish(u) => {
                    published.remove(&u.target_path);
                }
                _ => {}
            }
        }
        (staged, published)
    }

    /// No NodeUnstage while a pod still has the volume published, no
    /// NodePublish before it is staged; once faults stop, exactly the
    /// running pods have it published, and it is staged only if they exist.
    fn volume_manager(seed: u64, steps: Vec<(u8, u8)>) -> TestResult {
        let mut c = world(seed);
        let mut pods: BTreeMap<String, String> = BTreeMap::new();
        let mut checked = 0;
        for (what, x) in steps {
            let name = format!("p{}", x % 3);
            match what % 8 {
                0 if !pods.contains_key(&name) => {
                    if let Some(Object::Pod(p)) = c
                        .user(ApiCall::Create(Object::Pod(pod_object(&name))))
                        .into_object()
                    {
                        pods.insert(name, p.metadata.uid);
                    }
                }
                1 if pods.remove(&name).is_some() => {
                    c.user(ApiCall::Delete(ObjectKey::new(Kind::Pod, "default", &name)));
                }
                _ => {
                    if let Err(e) = c.step(x) {
                        return TestResult::error(e.to_string());
                    }
                }
            }
            for i in checked..c.csi.len() {
                let (staged, published) = mounts(&c.csi[..i]);
                match &c.csi[i].call {
                    Request::NodeUnstage(_) if !published.is_empty() => {
                        return TestResult::error(format!("unstage under {published:?}"));
                    }
                    Request::NodePublish(_) if staged.is_empty() => {
                        return TestResult::error("publish before stage");
                    }
                    _ => {}
                }
            }
            checked = c.csi.len();
        }
        if let Err(e) = c.settle() {
            return TestResult::error(e.to_string());
        }
        let (staged, published) = mounts(&c.csi);
        let owners: BTreeSet<String> = published.iter().filter_map(|t| pod_of(t)).collect();
        let running: BTreeSet<String> = pods.values().cloned().collect();
        if owners != running || staged.is_empty() != running.is_empty() {
            return TestResult::error(format!(
                "pods {running:?}, published for {owners:?}, staged {staged:?}"
            ));
        }
        TestResult::passed()
    }

    #[test]
    fn the_volume_manager_stays_safe_and_converges_under_faults() {
        checker(200, 60).quickcheck(volume_manager as fn(u64, Vec<(u8, u8)>) -> TestResult);
    }
}
