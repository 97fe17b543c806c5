//! The modify half, case by case as external-resizer's modify controller
//! behaves.

use super::*;
use crate::Code;
use crate::resize::modify::{
    IN_PROGRESS, INFEASIBLE, MODIFY_VOLUME_ERROR, MODIFYING_VOLUME, PENDING,
};
use std::cell::RefCell;
use std::rc::Rc;

/// What the driver answers ControllerModifyVolume with, by class
/// parameter `tier`: `bad` is INVALID_ARGUMENT, `slow` DEADLINE_EXCEEDED
/// (until `slow` is accepted), anything else OK.
fn modify_driver(accept_slow: Rc<RefCell<bool>>) -> impl Fn(&Request) -> crate::control::CsiResult {
    move |c| match c {
        Request::ControllerModify(m) => match m.mutable_parameters.get("tier") {
            Some("bad") => Err(Status::invalid("tier \"bad\" is no tier")),
            Some("slow") if !*accept_slow.borrow() => Err(Status::new(
                Code::DeadlineExceeded,
                "context deadline exceeded",
            )),
            _ => Ok(Response::Empty),
        },
        other => Err(Status::unimplemented(other.method())),
    }
}

fn vac(name: &str, tier: &str) -> Object {
    Object::AttributesClass(VolumeAttributesClass::new(name, DRIVER, &[("tier", tier)]))
}

/// The objects of the expand tests, a resizer that modifies, and the
/// classes `gold`, `silver`, `bad` and `slow`.
fn modify_rig() -> (Rig<Resizer>, Rc<RefCell<bool>>) {
    let mut config = ResizeConfig::new(DRIVER);
    config.modify = true;
    let mut r = Rig::new(Resizer::new(config));
    let accept_slow = Rc::new(RefCell::new(false));
    r.answer_csi(modify_driver(accept_slow.clone()));
    for o in objects(true) {
        r.create(o);
    }
    for (name, tier) in [
        ("gold", "gold"),
        ("silver", "silver"),
        ("bad", "bad"),
        ("slow", "slow"),
    ] {
        r.create(vac(name, tier));
    }
    (r, accept_slow)
}

fn name_class(r: &mut Rig<Resizer>, class: Option<&str>) {
    let mut c = claim(r);
    c.spec.volume_attributes_class_name = class.map(str::to_string);
    r.user(ApiCall::Update(Object::Pvc(c)));
}

fn pv_class(r: &Rig<Resizer>) -> Option<String> {
    match r.get(Kind::PersistentVolume, "", "pv-1") {
        Some(Object::Pv(v)) => v.spec.volume_attributes_class_name.clone(),
        _ => panic!(),
    }
}

fn modifies(r: &Rig<Resizer>) -> Vec<String> {
    r.csi_calls
        .iter()
        .filter_map(|(_, c)| match c {
            Request::ControllerModify(m) => Some(m.mutable_parameters["tier"].to_string()),
            _ => None,
        })
        .collect()
}

fn modify_status(c: &PersistentVolumeClaim) -> (&str, &str) {
    let s = c
        .status
        .modify_volume_status
        .as_ref()
        .expect("a modify status");
    (
        s.status.as_str(),
        s.target_volume_attributes_class_name.as_str(),
    )
}

#[test]
fn a_new_class_is_marked_in_progress_modified_then_current_pv_first() {
    let (mut r, _) = modify_rig();
    name_class(&mut r, Some("gold"));
    assert_eq!(modifies(&r), ["gold"]);
    let Some(Request::ControllerModify(m)) = r.csi_calls.last().map(|c| &c.1) else {
        panic!()
    };
    assert_eq!(m.volume_id, "vol-1");
    assert_eq!(pv_class(&r).as_deref(), Some("gold"));
    let c = claim(&r);
    assert_eq!(
        c.status.current_volume_attributes_class_name.as_deref(),
        Some("gold")
    );
    assert_eq!(c.status.modify_volume_status, None);
    assert!(c.condition(MODIFYING_VOLUME).is_none());
    assert_eq!(
        r.reasons(),
        [reason::VOLUME_MODIFY, reason::VOLUME_MODIFY_SUCCESSFUL]
    );
    assert_eq!(
        r.events[0].message,
        "external resizer is modifying volume data with vac gold"
    );
    // The order of the writes: InProgress, the PV, the claim's status.
    let order: Vec<Kind> = r
        .writes
        .iter()
        .filter_map(|w| match w {
            ApiCall::Update(o) | ApiCall::UpdateStatus(o) => Some(o.kind()),
            _ => None,
        })
        .collect();
    assert_eq!(
        order,
        [
            Kind::PersistentVolumeClaim,
            Kind::PersistentVolume,
            Kind::PersistentVolumeClaim
        ]
    );
    // Nothing more to do: no further call.
    r.advance(600_000);
    assert_eq!(modifies(&r), ["gold"]);
}

#[test]
fn a_class_that_does_not_exist_leaves_the_claim_pending_until_it_does() {
    let (mut r, _) = modify_rig();
    name_class(&mut r, Some("platinum"));
    assert!(modifies(&r).is_empty());
    let c = claim(&r);
    assert_eq!(modify_status(&c).0, PENDING);
    assert!(
        c.condition(MODIFYING_VOLUME).is_none(),
        "Pending sets no condition"
    );
    assert_eq!(r.reasons(), [reason::VOLUME_MODIFY_FAILED]);
    assert_eq!(r.events[0].message, "VAC \"platinum\" does not exist.");
    r.create(vac("platinum", "platinum"));
    assert_eq!(modifies(&r), ["platinum"]);
    assert_eq!(
        claim(&r)
            .status
            .current_volume_attributes_class_name
            .as_deref(),
        Some("platinum")
    );
}

/// The e2e volume-modify suite's "recover from invalid target VAC": a
/// class of another driver's is never sent to this one, and the claim says
/// so as a driver's INVALID_ARGUMENT would (Infeasible, a
/// `ModifyVolumeError` condition) rather than waiting Pending for ever;
/// naming a good class then modifies.
#[test]
fn a_class_of_another_driver_is_infeasible_and_never_sent_to_this_one() {
    let (mut r, _) = modify_rig();
    let mut other = VolumeAttributesClass::new("theirs", "other.csi.io", &[("tier", "x")]);
    other.metadata.name = "theirs".into();
    r.create(Object::AttributesClass(other));
    name_class(&mut r, Some("theirs"));
    assert!(modifies(&r).is_empty());
    let c = claim(&r);
    assert_eq!(modify_status(&c), (INFEASIBLE, "theirs"));
    let error = c
        .condition(MODIFY_VOLUME_ERROR)
        .expect("a ModifyVolumeError condition");
    assert!(
        error.message.contains("is for driver other.csi.io"),
        "{}",
        error.message
    );
    assert!(
        r.events[0].message.contains("is for driver other.csi.io"),
        "{}",
        r.events[0].message
    );
    name_class(&mut r, Some("gold"));
    assert_eq!(modifies(&r), ["gold"]);
    assert_eq!(
        claim(&r)
            .status
            .current_volume_attributes_class_name
            .as_deref(),
        Some("gold")
    );
}

#[test]
fn invalid_argument_is_infeasible_and_retried_only_slowly_or_for_another_class() {
    let (mut r, _) = modify_rig();
    name_class(&mut r, Some("bad"));
    assert_eq!(modifies(&r), ["bad"]);
    let c = claim(&r);
    assert_eq!(modify_status(&c), (INFEASIBLE, "bad"));
    let error = c
        .condition(MODIFY_VOLUME_ERROR)
        .expect("the error condition");
    assert_eq!(error.reason, "InvalidArgument");
    assert_eq!(error.message, "tier \"bad\" is no tier");
    assert_eq!(
        c.condition(MODIFYING_VOLUME).unwrap().message,
        "Modifying volume to \"bad\" failed. Waiting for retry."
    );
    assert_eq!(
        r.events.last().unwrap().message,
        "rpc error: code = InvalidArgument desc = tier \"bad\" is no tier"
    );
    // Before the longest retry delay: no call, even on news of the claim.
    r.advance(200_000);
    let mut c = claim(&r);
    c.metadata.labels.insert("touched".into(), "yes".into());
    r.user(ApiCall::Update(Object::Pvc(c)));
    assert_eq!(modifies(&r), ["bad"]);
    // After it, once more.
    r.advance(100_001);
    assert_eq!(modifies(&r), ["bad", "bad"]);
    // Another class is tried at once.
    name_class(&mut r, Some("silver"));
    assert_eq!(modifies(&r), ["bad", "bad", "silver"]);
    let c = claim(&r);
    assert_eq!(
        c.status.current_volume_attributes_class_name.as_deref(),
        Some("silver")
    );
    assert!(c.condition(MODIFY_VOLUME_ERROR).is_none());
}

#[test]
fn a_call_that_may_still_run_is_carried_on_to_its_class_before_another() {
    let (mut r, accept_slow) = modify_rig();
    name_class(&mut r, Some("slow"));
    assert_eq!(modifies(&r), ["slow"]);
    let c = claim(&r);
    assert_eq!(modify_status(&c), (IN_PROGRESS, "slow"));
    assert_eq!(
        c.condition(MODIFYING_VOLUME).unwrap().message,
        "Modifying volume to \"slow\" is still in progress."
    );
    assert!(
        r.events
            .last()
            .unwrap()
            .message
            .ends_with(". Still modifying to VAC slow")
    );
    // The user changes their mind: the volume is still brought to `slow`
    // first, as its call may still be running.
    *accept_slow.borrow_mut() = true;
    name_class(&mut r, Some("gold"));
    assert_eq!(pv_class(&r).as_deref(), Some("gold"));
    assert_eq!(modifies(&r), ["slow", "slow", "gold"]);
    let c = claim(&r);
    assert_eq!(
        c.status.current_volume_attributes_class_name.as_deref(),
        Some("gold")
    );
    assert_eq!(c.status.modify_volume_status, None);
}

#[test]
fn a_claim_found_in_progress_is_carried_on_to_its_target() {
    let mut config = ResizeConfig::new(DRIVER);
    config.modify = true;
    let mut r = Rig::new(Resizer::new(config));
    r.answer_csi(modify_driver(Rc::new(RefCell::new(true))));
    r.create(vac("gold", "gold"));
    r.create(vac("silver", "silver"));
    for o in objects(true) {
        let o = match o {
            // An earlier resizer was modifying it to gold; now it names silver.
            Object::Pvc(mut c) => {
                c.spec.volume_attributes_class_name = Some("silver".into());
                c.status.modify_volume_status = Some(ModifyVolumeStatus {
                    target_volume_attributes_class_name: "gold".into(),
                    status: IN_PROGRESS.into(),
                });
                Object::Pvc(c)
            }
            o => o,
        };
        r.create(o);
    }
    assert_eq!(modifies(&r), ["gold", "silver"]);
    assert_eq!(
        claim(&r)
            .status
            .current_volume_attributes_class_name
            .as_deref(),
        Some("silver")
    );
}

#[test]
fn naming_no_class_again_cancels_and_drops_the_condition() {
    let (mut r, _) = modify_rig();
    name_class(&mut r, Some("bad"));
    assert_eq!(modify_status(&claim(&r)).0, INFEASIBLE);
    name_class(&mut r, None);
    let c = claim(&r);
    assert!(c.condition(MODIFYING_VOLUME).is_none());
    assert_eq!(r.reasons().last(), Some(&reason::VOLUME_MODIFY_CANCELED));
    assert_eq!(r.events.last().unwrap().message, "Cancelled modify.");
    r.advance(600_000);
    assert_eq!(modifies(&r), ["bad"], "nothing is tried for no class");
}

/// A PV naming `storage/modify` in its controller-modify annotations.
fn with_modify_annotations(r: &mut Rig<Resizer>, name: &str, namespace: &str) {
    let Some(Object::Pv(mut v)) = r.get(Kind::PersistentVolume, "", "pv-1").cloned() else {
        panic!()
    };
    let ann = &mut v.metadata.annotations;
    ann.insert(names::ANN_MODIFY_SECRET_NAME.into(), name.into());
    ann.insert(names::ANN_MODIFY_SECRET_NAMESPACE.into(), namespace.into());
    r.user(ApiCall::Update(Object::Pv(v)));
}

#[test]
fn the_controller_modify_secret_the_pv_names_reaches_the_call() {
    let (mut r, _) = modify_rig();
    r.create(Object::Secret(Secret::new(
        "storage",
        "modify",
        &[("key", "m1")],
    )));
    with_modify_annotations(&mut r, "modify", "storage");
    name_class(&mut r, Some("gold"));
    assert!(
        matches!(&r.csi_calls[..], [(None, Request::ControllerModify(m))] if m.secrets.0["key"] == "m1")
    );
    assert!(
        !format!("{:?}", r.events).contains("m1"),
        "secret data in an event"
    );
}

#[test]
fn modify_annotations_that_name_no_valid_secret_are_refused_before_any_read() {
    let (mut r, _) = modify_rig();
    with_modify_annotations(&mut r, "../kube-system/x", "storage");
    name_class(&mut r, Some("gold"));
    assert!(modifies(&r).is_empty());
    assert!(r.reads.is_empty(), "nothing read: {:?}", r.reads);
    assert!(
        r.events
            .last()
            .unwrap()
            .message
            .contains("no valid Secret name"),
        "{}",
        r.events.last().unwrap().message
    );
}

#[test]
fn extra_modify_metadata_names_the_claim_and_the_volume() {
    let mut config = ResizeConfig::new(DRIVER);
    config.modify = true;
    config.extra_modify_metadata = true;
    let mut r = Rig::new(Resizer::new(config));
    r.answer_csi(modify_driver(Rc::new(RefCell::new(true))));
    for o in objects(true) {
        r.create(o);
    }
    r.create(vac("gold", "gold"));
    name_class(&mut r, Some("gold"));
    let Some(Request::ControllerModify(m)) = r.csi_calls.last().map(|c| &c.1) else {
        panic!()
    };
    assert_eq!(&m.mutable_parameters[names::PARAM_PVC_NAME], "data");
    assert_eq!(&m.mutable_parameters[names::PARAM_PVC_NAMESPACE], "default");
    assert_eq!(&m.mutable_parameters[names::PARAM_PV_NAME], "pv-1");
}

#[test]
fn a_resizer_without_modify_leaves_classes_alone() {
    let mut r = rig(false, true);
    r.create(vac("gold", "gold"));
    name_class(&mut r, Some("gold"));
    assert!(r.csi_calls.is_empty());
    assert_eq!(claim(&r).status.modify_volume_status, None);
}

#[test]
fn a_volume_waiting_for_the_node_to_grow_is_modified_meanwhile() {
    let mut config = ResizeConfig::new(DRIVER);
    config.modify = true;
    let mut r = Rig::new(Resizer::new(config));
    r.answer_csi(|c| match c {
        Request::ControllerExpand(e) => Ok(Response::ControllerExpanded {
            capacity_bytes: e.capacity.required_bytes,
            node_expansion_required: true,
        }),
        Request::ControllerModify(_) => Ok(Response::Empty),
        other => Err(Status::unimplemented(other.method())),
    });
    for o in objects(true) {
        r.create(o);
    }
    grow(&mut r, "2Gi");
    r.create(vac("gold", "gold"));
    name_class(&mut r, Some("gold"));
    assert_eq!(modifies(&r), ["gold"]);
}
