//! Scenario tests of the resizer.

use super::*;
use crate::Status;
use crate::control::rig::Rig;
use crate::driver::Response;

mod expand;
mod modify;

const DRIVER: &str = "volplane.csi.io";

/// The driver: ControllerExpand reaches the size asked.
fn expand(node_required: bool) -> impl Fn(&Request) -> crate::control::CsiResult {
    move |c| match c {
        Request::ControllerExpand(e) => Ok(Response::ControllerExpanded {
            capacity_bytes: e.capacity.required_bytes,
            node_expansion_required: node_required,
        }),
        other => Err(Status::unimplemented(other.method())),
    }
}

/// A class (`allow`ing expansion or not), a 1Gi CSI PV, its Bound claim.
fn objects(allow: bool) -> Vec<Object> {
    let mut sc = StorageClass::new("fast", DRIVER);
    sc.allow_volume_expansion = Some(allow);
    let mut pv = PersistentVolume::new("pv-1");
    pv.spec.access_modes = vec![AccessMode::ReadWriteOnce];
    pv.spec
        .capacity
        .insert("storage".into(), Quantity::parse("1Gi").unwrap());
    pv.spec.csi = Some(CsiSource {
        driver: DRIVER.into(),
        volume_handle: "vol-1".into(),
        ..Default::default()
    });
    pv.spec.claim_ref = Some(ObjectReference {
        namespace: "default".into(),
        name: "data".into(),
        ..Default::default()
    });
    let mut c = PersistentVolumeClaim::new("default", "data");
    c.spec.storage_class_name = Some("fast".into());
    c.spec.volume_name = Some("pv-1".into());
    c.spec
        .resources
        .requests
        .insert("storage".into(), Quantity::parse("1Gi").unwrap());
    c.status.phase = Some(PvcPhase::Bound);
    c.status
        .capacity
        .insert("storage".into(), Quantity::parse("1Gi").unwrap());
    vec![Object::Class(sc), Object::Pv(pv), Object::Pvc(c)]
}

fn rig(node_required: bool, allow: bool) -> Rig<Resizer> {
    let mut r = Rig::new(Resizer::new(ResizeConfig::new(DRIVER)));
    r.answer_csi(expand(node_required));
    for o in objects(allow) {
        r.create(o);
    }
    r
}

fn grow(r: &mut Rig<Resizer>, to: &str) {
    let Some(Object::Pvc(mut c)) = r
        .get(Kind::PersistentVolumeClaim, "default", "data")
        .cloned()
    else {
        panic!()
    };
    c.spec
        .resources
        .requests
        .insert("storage".into(), Quantity::parse(to).unwrap());
    r.user(ApiCall::Update(Object::Pvc(c)));
}

fn claim(r: &Rig<Resizer>) -> PersistentVolumeClaim {
    match r.get(Kind::PersistentVolumeClaim, "default", "data") {
        Some(Object::Pvc(c)) => c.clone(),
        _ => panic!(),
    }
}

fn pv_bytes(r: &Rig<Resizer>) -> u64 {
    match r.get(Kind::PersistentVolume, "", "pv-1") {
        Some(Object::Pv(v)) => v.capacity().unwrap().bytes(),
        _ => panic!(),
    }
}

#[test]
fn controller_then_pv_then_node_pending_when_the_driver_needs_the_node() {
    let mut r = rig(true, true);
    grow(&mut r, "2Gi");
    assert!(
        matches!(&r.csi_calls[..], [(None, Request::ControllerExpand(e))] if e.capacity.required_bytes == 2 << 30 && e.volume_id == "vol-1")
    );
    assert_eq!(pv_bytes(&r), 2 << 30);
    let c = claim(&r);
    assert!(c.condition(FS_RESIZE_PENDING).is_some());
    assert_eq!(
        c.status_capacity().unwrap().bytes(),
        1 << 30,
        "the claim's capacity waits for the node"
    );
    assert_eq!(
        r.reasons(),
        vec![reason::RESIZING, reason::FILE_SYSTEM_RESIZE_REQUIRED]
    );
}

/// Setting a condition replaces one of its type and keeps the others;
/// `Resizing` stays while the node finishes (upstream keeps the old
/// expansion conditions when it hands the claim to the node).
#[test]
fn conditions_of_other_types_are_kept() {
    let mut r = rig(true, true);
    let mut c = claim(&r);
    c.status.conditions.push(PvcCondition {
        type_: "ModifyingVolume".into(),
        status: "True".into(),
        reason: String::new(),
        message: String::new(),
    });
    r.user(ApiCall::UpdateStatus(Object::Pvc(c)));
    grow(&mut r, "2Gi");
    let types: Vec<String> = claim(&r)
        .status
        .conditions
        .iter()
        .map(|c| c.type_.clone())
        .collect();
    assert_eq!(types, vec!["ModifyingVolume", RESIZING, FS_RESIZE_PENDING]);
}

#[test]
fn without_a_node_step_the_claim_capacity_is_written_last() {
    let mut r = rig(false, true);
    grow(&mut r, "3Gi");
    let c = claim(&r);
    assert_eq!(c.status_capacity().unwrap().bytes(), 3 << 30);
    assert!(c.condition(RESIZING).is_none());
    let order: Vec<(&str, Kind)> = r.writes.iter().map(|w| (w.verb(), w.kind())).collect();
    assert_eq!(
        order.last().unwrap(),
        &("update status", Kind::PersistentVolumeClaim)
    );
    assert_eq!(
        order[order.len() - 2],
        ("update", Kind::PersistentVolume),
        "PV capacity before the claim's"
    );
    assert_eq!(
        r.reasons().last().unwrap(),
        &reason::VOLUME_RESIZE_SUCCESSFUL
    );
}

#[test]
fn a_failed_expansion_is_reported_retried_and_keeps_the_old_size() {
    let mut r = rig(false, true);
    let mut fail = true;
    r.answer_csi(move |c| match c {
        Request::ControllerExpand(_) if fail => {
            fail = false;
            Err(Status::new(crate::Code::Internal, "pool busy"))
        }
        Request::ControllerExpand(e) => Ok(Response::ControllerExpanded {
            capacity_bytes: e.capacity.required_bytes,
            node_expansion_required: false,
        }),
        _ => Ok(Response::Empty),
    });
    grow(&mut r, "2Gi");
    assert_eq!(claim(&r).status_capacity().unwrap().bytes(), 1 << 30);
    assert_eq!(pv_bytes(&r), 1 << 30);
    assert!(r.reasons().contains(&reason::VOLUME_RESIZE_FAILED));
    r.advance(1_500);
    assert_eq!(claim(&r).status_capacity().unwrap().bytes(), 2 << 30);
}

#[test]
fn a_class_without_allow_volume_expansion_is_refused() {
    let mut r = rig(false, false);
    grow(&mut r, "2Gi");
    assert!(r.csi_calls.is_empty());
    assert_eq!(r.reasons(), vec![reason::VOLUME_RESIZE_FAILED]);
}

/// Properties under faults (see `control::chaos`).
mod under_faults {
    use quickcheck::TestResult;

    use super::*;
    use crate::control::ApiCall;
    use crate::control::chaos::{Chaos, checker};

    const GI: u64 = 1 << 30;

    fn world(seed: u64) -> Chaos<Resizer> {
        let driver = expand(false);
        let mut c = Chaos::new(
            seed,
            || Resizer::new(ResizeConfig::new(DRIVER)),
            move |_, call| driver(call),
        );
        for o in objects(true) {
            c.user(ApiCall::Create(o));
        }
        c
    }

    fn get<T>(c: &Chaos<Resizer>, kind: Kind, ns: &str, f: impl Fn(&Object) -> Option<&T>) -> T
    where
        T: Clone,
    {
        let name = if kind == Kind::PersistentVolume {
            "pv-1"
        } else {
            "data"
        };
        c.store
            .get(&ObjectKey::new(kind, ns, name))
            .and_then(f)
            .cloned()
            .expect("the world's objects stay")
    }

    fn bytes(q: Option<&Quantity>) -> u64 {
        q.map_or(0, Quantity::bytes)
    }

    /// A volume never shrinks and ControllerExpand never asks for less than
    /// the volume has; once faults stop, the volume and the claim's status
    /// reach the last size asked for.
    fn resize(seed: u64, steps: Vec<(u8, u8)>) -> TestResult {
        let mut c = world(seed);
        let mut asked = GI;
        let mut largest = GI;
        for (what, x) in steps {
            if what % 6 == 0 {
                asked += GI * (1 + u64::from(x % 3));
                let mut claim = get(&c, Kind::PersistentVolumeClaim, "default", Object::as_pvc);
                claim
                    .spec
                    .resources
                    .requests
                    .insert("storage".into(), Quantity::from_bytes(asked));
                if !matches!(
                    c.user(ApiCall::Update(Object::Pvc(claim))),
                    ApiResult::Ok(_)
                ) {
                    return TestResult::error("the user's update failed");
                }
            } else if let Err(e) = c.step(x) {
                return TestResult::error(e.to_string());
            }
            let pv = get(&c, Kind::PersistentVolume, "", Object::as_pv);
            let now = bytes(pv.spec.capacity.get("storage"));
            if now < largest {
                return TestResult::error(format!("the volume shrank from {largest} to {now}"));
            }
            largest = now;
        }
        if let Err(e) = c.settle() {
            return TestResult::error(e.to_string());
        }
        let pv = get(&c, Kind::PersistentVolume, "", Object::as_pv);
        let claim = get(&c, Kind::PersistentVolumeClaim, "default", Object::as_pvc);
        let (pv_size, status) = (
            bytes(pv.spec.capacity.get("storage")),
            bytes(claim.status.capacity.get("storage")),
        );
        if pv_size != asked || status != asked {
            return TestResult::error(format!(
                "asked {asked}: volume {pv_size}, claim status {status}"
            ));
        }
        TestResult::passed()
    }

    #[test]
    fn resizing_never_shrinks_and_reaches_the_size_asked_under_faults() {
        checker(200, 60).quickcheck(resize as fn(u64, Vec<(u8, u8)>) -> TestResult);
    }
}

/// A rig whose PV names `storage/expand` as its controllerExpandSecretRef.
fn rig_with_expand_secret() -> Rig<Resizer> {
    let mut r = Rig::new(Resizer::new(ResizeConfig::new(DRIVER)));
    r.answer_csi(expand(false));
    for mut o in objects(true) {
        if let Object::Pv(pv) = &mut o {
            pv.spec.csi.as_mut().unwrap().controller_expand_secret_ref = Some(SecretReference {
                name: "expand".into(),
                namespace: "storage".into(),
            });
        }
        r.create(o);
    }
    r
}

#[test]
fn controller_expand_gets_the_controller_expand_secret() {
    let mut r = rig_with_expand_secret();
    r.create(Object::Secret(Secret::new(
        "storage",
        "expand",
        &[("key", "e1")],
    )));
    grow(&mut r, "2Gi");
    assert!(
        matches!(&r.csi_calls[..], [(None, Request::ControllerExpand(e))] if e.secrets.0["key"] == "e1")
    );
    assert_eq!(pv_bytes(&r), 2 << 30);
    assert!(!format!("{:?}", r.machine).contains("e1"), "never printed");
}

/// A controllerExpandSecretRef naming no possible Secret (a path, say) is
/// refused before any read, with a warning saying which field to correct.
#[test]
fn a_hostile_controller_expand_secret_ref_is_refused_before_any_read() {
    let mut r = rig_with_expand_secret();
    let Some(Object::Pv(mut pv)) = r.get(Kind::PersistentVolume, "", "pv-1").cloned() else {
        panic!()
    };
    pv.spec.csi.as_mut().unwrap().controller_expand_secret_ref = Some(SecretReference {
        name: "expand/../../admin".into(),
        namespace: "storage".into(),
    });
    r.user(ApiCall::Update(Object::Pv(pv)));
    grow(&mut r, "2Gi");
    assert!(r.csi_calls.is_empty());
    assert!(
        !r.reads
            .iter()
            .any(|c| matches!(c, ApiCall::Get(k) if k.kind == Kind::Secret))
    );
    assert!(
        r.events
            .iter()
            .any(|e| e.reason == reason::VOLUME_RESIZE_FAILED
                && e.message.contains("in its controllerExpandSecretRef")
                && e.message.contains("correct the PV")),
        "{:?}",
        r.events
    );
}

#[test]
fn a_missing_controller_expand_secret_fails_the_resize_with_upstreams_message() {
    let mut r = rig_with_expand_secret();
    grow(&mut r, "2Gi");
    assert!(r.csi_calls.is_empty());
    let failed: Vec<&str> = r
        .events
        .iter()
        .filter(|e| e.reason == reason::VOLUME_RESIZE_FAILED)
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(
        failed,
        [format!(
            "resize volume \"pv-1\" by resizer \"{DRIVER}\" failed: error getting secret expand in namespace storage: secrets \"expand\" not found"
        )]
    );
    r.create(Object::Secret(Secret::new(
        "storage",
        "expand",
        &[("key", "e1")],
    )));
    r.advance(2_000);
    assert_eq!(pv_bytes(&r), 2 << 30, "then retried");
}

/// `--node-deployment`: a resizer on a node grows only the volumes its
/// node reaches.
#[test]
fn a_resizer_deployed_on_a_node_grows_only_the_volumes_it_reaches() {
    for (zone, grows) in [("a", true), ("b", false)] {
        let mut config = ResizeConfig::new(DRIVER);
        config.node_topology =
            Some([("topology.volplane.io/zone".to_string(), "a".to_string())].into());
        let mut r = Rig::new(Resizer::new(config));
        r.answer_csi(expand(false));
        for o in objects(true) {
            let o = match o {
                Object::Pv(mut pv) => {
                    pv.spec.node_affinity = Some(VolumeNodeAffinity {
                        required: Some(NodeSelector {
                            node_selector_terms: vec![NodeSelectorTerm {
                                match_expressions: vec![NodeSelectorRequirement {
                                    key: "topology.volplane.io/zone".into(),
                                    operator: "In".into(),
                                    values: vec![zone.into()],
                                }],
                            }],
                        }),
                    });
                    Object::Pv(pv)
                }
                o => o,
            };
            r.create(o);
        }
        grow(&mut r, "2Gi");
        assert_eq!(!r.csi_calls.is_empty(), grows, "zone {zone}");
    }
}
