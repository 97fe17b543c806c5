//! The volume manager's finer rules: which pods count, what makes a publish
//! read-only, what the CSIDriver object changes, which attachment is usable,
//! and what is left alone.

use super::*;
use crate::control::Input;

fn claim(r: &Rig<Kubelet>) -> PersistentVolumeClaim {
    match r.get(Kind::PersistentVolumeClaim, "default", "data") {
        Some(Object::Pvc(c)) => c.clone(),
        _ => panic!("no claim"),
    }
}

fn publishes(r: &Rig<Kubelet>) -> Vec<&crate::driver::NodePublish> {
    r.csi_calls
        .iter()
        .filter_map(|(_, c)| match c {
            Request::NodePublish(p) => Some(p),
            _ => None,
        })
        .collect()
}

fn csi_driver(attach_required: bool, pod_info_on_mount: bool) -> Object {
    Object::CsiDriver(CsiDriver {
        metadata: ObjectMeta::named(DRIVER),
        spec: CsiDriverSpec {
            attach_required: Some(attach_required),
            pod_info_on_mount: Some(pod_info_on_mount),
            ..Default::default()
        },
        ..Default::default()
    })
}

#[test]
fn d2_pods_that_finished_are_going_or_run_elsewhere_get_nothing() {
    for phase in [PodPhase::Succeeded, PodPhase::Failed] {
        let mut r = rig(&[AccessMode::ReadWriteOnce], true);
        let mut p = pod_object("done");
        p.status.phase = Some(phase.clone());
        r.create(Object::Pod(p));
        assert!(r.csi_calls.is_empty(), "{phase:?}: {:?}", calls(&r));
    }
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    let mut p = pod_object("elsewhere");
    p.spec.node_name = Some("node-b".into());
    r.create(Object::Pod(p));
    assert!(r.csi_calls.is_empty(), "{:?}", calls(&r));
    // A pod being deleted (a finalizer holds it) loses its mounts at once.
    let mut p = pod_object("going");
    p.metadata.finalizers.push("example.com/hold".into());
    let Object::Pod(p) = r.create(Object::Pod(p)) else {
        unreachable!()
    };
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::Pod,
        "default",
        "going",
    )));
    assert_eq!(
        calls(&r),
        vec![
            format!("NodeStageVolume {}", staging()),
            format!("NodePublishVolume {}", target(&p.metadata.uid)),
            format!("NodeUnpublishVolume {}", target(&p.metadata.uid)),
            format!("NodeUnstageVolume {}", staging()),
        ]
    );
}

#[test]
fn d3_a_read_only_csi_source_publishes_read_only() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    let Some(Object::Pv(mut pv)) = r.get(Kind::PersistentVolume, "", "pv-1").cloned() else {
        panic!()
    };
    pv.spec.csi.as_mut().unwrap().read_only = true;
    r.user(ApiCall::Update(Object::Pv(pv)));
    pod(&mut r, "web-0");
    assert!(publishes(&r)[0].readonly, "{:?}", publishes(&r));
}

#[test]
fn c1_8_a_csidriver_without_attach_and_with_pod_info_is_honoured() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], false);
    r.create(csi_driver(false, true));
    let uid = pod(&mut r, "web-0");
    assert_eq!(
        calls(&r),
        vec![
            format!("NodeStageVolume {}", staging()),
            format!("NodePublishVolume {}", target(&uid)),
        ],
        "attachRequired: false stages without waiting for an attachment"
    );
    let context = &publishes(&r)[0].volume_context;
    assert_eq!(&context["csi.storage.k8s.io/pod.name"], "web-0");
    assert_eq!(context["csi.storage.k8s.io/pod.uid"], uid);
}

#[test]
fn d3_5_an_attachment_being_deleted_is_not_used() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    let va = names::volume_attachment_name("vol-1", DRIVER, "node-a");
    let Some(Object::Va(mut v)) = r.get(Kind::VolumeAttachment, "", &va).cloned() else {
        panic!()
    };
    v.metadata
        .finalizers
        .push("external-attacher/volplane-csi-io".into());
    r.user(ApiCall::Update(Object::Va(v)));
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeAttachment,
        "",
        &va,
    )));
    pod(&mut r, "web-0");
    assert!(r.csi_calls.is_empty(), "{:?}", calls(&r));
}

#[test]
fn d2_a_pod_already_mounted_keeps_its_volume_while_the_claim_is_deleted() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    pod(&mut r, "web-0");
    let mut c = claim(&r);
    c.metadata
        .finalizers
        .push("kubernetes.io/pvc-protection".into());
    r.user(ApiCall::Update(Object::Pvc(c)));
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolumeClaim,
        "default",
        "data",
    )));
    r.csi_calls.clear();
    let late = pod(&mut r, "web-1");
    assert!(calls(&r).is_empty(), "{:?}", calls(&r));
    assert!(
        r.events
            .iter()
            .any(|e| &*e.object.name == "web-1" && e.message.contains("is being deleted")),
        "the late pod is told why"
    );
    assert!(!r.events.iter().any(|e| &*e.object.name == "web-0"));
    let _ = late;
}

#[test]
fn d2_1_of_two_new_pods_of_a_readwriteoncepod_volume_the_first_by_uid_wins() {
    let mut r = rig(&[AccessMode::ReadWriteOncePod], true);
    // Both pods arrive in one batch, so neither is mounted yet; the store
    // gives them increasing uids, and the second one created has the smaller.
    let mut uids = Vec::new();
    for name in ["web-b", "web-a"] {
        let (created, _) = r
            .store
            .apply(r.now, &ApiCall::Create(Object::Pod(pod_object(name))));
        let Some(Object::Pod(p)) = created.into_object() else {
            panic!()
        };
        uids.push(p.metadata.uid.clone());
        r.machine.handle(
            r.now,
            Input::Watch(crate::control::Watch::Applied(Object::Pod(p).into())),
        );
    }
    let first = uids.iter().min().unwrap().clone();
    r.run();
    let published: Vec<String> = publishes(&r)
        .iter()
        .map(|p| p.target_path.clone())
        .collect();
    assert_eq!(published, vec![target(&first)]);
}

#[test]
fn d3_11_a_claim_as_big_as_its_volume_needs_no_node_expansion() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    pod(&mut r, "web-0");
    let mut c = claim(&r);
    c.status.conditions.push(PvcCondition {
        type_: "FileSystemResizePending".into(),
        status: "True".into(),
        ..Default::default()
    });
    c.set_resize_status(Some(crate::model::names::expansion::NODE_PENDING));
    r.user(ApiCall::UpdateStatus(Object::Pvc(c)));
    assert!(
        !calls(&r).iter().any(|c| c.starts_with("NodeExpandVolume")),
        "{:?}",
        calls(&r)
    );
}

#[test]
fn d3_11_a_finished_node_expansion_keeps_the_claims_other_conditions() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    pod(&mut r, "web-0");
    grow_pv(&mut r);
    let mut c = claim(&r);
    for type_ in ["FileSystemResizePending", "Resizing", "ModifyingVolume"] {
        c.status.conditions.push(PvcCondition {
            type_: type_.into(),
            status: "True".into(),
            ..Default::default()
        });
    }
    c.set_resize_status(Some(crate::model::names::expansion::NODE_PENDING));
    r.user(ApiCall::UpdateStatus(Object::Pvc(c)));
    let kept: Vec<String> = claim(&r)
        .status
        .conditions
        .iter()
        .map(|c| c.type_.clone())
        .collect();
    assert_eq!(kept, vec!["ModifyingVolume".to_string()]);
}

#[test]
fn d1_3_a_volume_no_pod_uses_is_unstaged_while_another_stays_published() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    // A second volume, claim and attachment on the same node.
    let unique2 = "kubernetes.io/csi/volplane.csi.io^vol-2";
    let mut n = node(&r);
    n.status.volumes_attached.push(AttachedVolume {
        name: unique2.into(),
        device_path: "y".into(),
    });
    r.user(ApiCall::UpdateStatus(Object::Node(n)));
    let mut va = VolumeAttachment::new(
        &names::volume_attachment_name("vol-2", DRIVER, "node-a"),
        DRIVER,
        "node-a",
        "pv-2",
    );
    va.status.attached = true;
    r.create(Object::Va(va));
    let Some(Object::Pv(mut pv)) = r.get(Kind::PersistentVolume, "", "pv-1").cloned() else {
        panic!()
    };
    pv.metadata = ObjectMeta::named("pv-2");
    pv.spec.csi.as_mut().unwrap().volume_handle = "vol-2".into();
    r.create(Object::Pv(pv));
    let mut c = PersistentVolumeClaim::new("default", "other");
    c.spec.volume_name = Some("pv-2".into());
    r.create(Object::Pvc(c));
    pod(&mut r, "web-0");
    let mut p = pod_object("db-0");
    p.spec.volumes[0]
        .persistent_volume_claim
        .as_mut()
        .unwrap()
        .claim_name = "other".into();
    r.create(Object::Pod(p));
    r.csi_calls.clear();
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::Pod,
        "default",
        "db-0",
    )));
    let unstaged: Vec<String> = r
        .csi_calls
        .iter()
        .filter(|(_, c)| matches!(c, Request::NodeUnstage(_)))
        .map(|(_, c)| c.path().unwrap_or("").to_string())
        .collect();
    assert_eq!(unstaged, vec![names::staging_path(ROOT, DRIVER, "vol-2")]);
}

/// The volume grown to 2Gi and handed to the node, as the resizer does.
fn handed_to_node(r: &mut Rig<Kubelet>) {
    grow_pv(r);
    let mut c = claim(r);
    c.set_resize_status(Some(crate::model::names::expansion::NODE_PENDING));
    r.user(ApiCall::UpdateStatus(Object::Pvc(c)));
}

/// NodeExpandVolume failing for good marks the claim as upstream's kubelet
/// does: INVALID_ARGUMENT makes it `NodeResizeInfeasible` (the resizer
/// then decides), INTERNAL only says why; either keeps the old capacity.
#[test]
fn d3_11_a_node_expansion_that_fails_for_good_is_marked_on_the_claim() {
    use crate::model::names::expansion::*;
    for (code, status) in [
        (Code::InvalidArgument, NODE_INFEASIBLE),
        (Code::Internal, NODE_IN_PROGRESS),
    ] {
        let mut r = rig(&[AccessMode::ReadWriteOnce], true);
        r.answer_csi(move |c| match c {
            Request::NodeExpand(_) => Err(Status::new(code, "filesystem full of errors")),
            _ => Ok(Response::Empty),
        });
        pod(&mut r, "web-0");
        handed_to_node(&mut r);
        let c = claim(&r);
        assert_eq!(c.resize_status(), Some(status), "{code:?}");
        let error = c.condition(NODE_RESIZE_ERROR).expect("NodeResizeError");
        assert!(
            error
                .message
                .starts_with("failed to expand pvc with rpc error: code = "),
            "{}",
            error.message
        );
        assert_eq!(c.status_capacity().unwrap().bytes(), 1 << 30);
    }
}

/// An expansion the resizer did not hand to the node (no
/// `NodeResizePending`) is not the node's to run.
#[test]
fn d3_11_only_an_expansion_handed_to_the_node_runs_there() {
    let mut r = rig(&[AccessMode::ReadWriteOnce], true);
    pod(&mut r, "web-0");
    handed_to_node(&mut r);
    let mut c = claim(&r);
    assert_eq!(
        c.status_capacity().unwrap().bytes(),
        2 << 30,
        "handed: done"
    );
    c.status
        .capacity
        .insert("storage".into(), Quantity::parse("1Gi").unwrap());
    c.set_resize_status(Some(crate::model::names::expansion::CONTROLLER_IN_PROGRESS));
    let before = calls(&r).len();
    r.user(ApiCall::UpdateStatus(Object::Pvc(c)));
    assert_eq!(calls(&r).len(), before, "{:?}", calls(&r));
}
