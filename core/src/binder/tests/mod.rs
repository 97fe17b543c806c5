//! Scenario tests of the binder, named after the SEMANTICS.md rules they check.

use super::*;
use crate::control::Input;
use crate::control::rig::Rig;
use crate::machine::Machine;
use crate::model::AccessMode::*;

fn q(s: &str) -> Quantity {
    Quantity::parse(s).unwrap()
}

fn pv(name: &str, size: &str, modes: &[AccessMode]) -> PersistentVolume {
    let mut v = PersistentVolume::new(name);
    v.spec.capacity.insert("storage".into(), q(size));
    v.spec.access_modes = modes.to_vec();
    v
}

fn pvc(name: &str, size: &str, modes: &[AccessMode]) -> PersistentVolumeClaim {
    let mut c = PersistentVolumeClaim::new("default", name);
    c.spec.resources.requests.insert("storage".into(), q(size));
    c.spec.access_modes = modes.to_vec();
    c.spec.storage_class_name = Some(String::new());
    c
}

fn rig() -> Rig<Binder> {
    Rig::new(Binder::new())
}

fn volume(r: &Rig<Binder>, name: &str) -> PersistentVolume {
    match r.get(Kind::PersistentVolume, "", name) {
        Some(Object::Pv(v)) => v.clone(),
        other => panic!("no volume {name}: {other:?}"),
    }
}

fn claim(r: &Rig<Binder>, name: &str) -> PersistentVolumeClaim {
    match r.get(Kind::PersistentVolumeClaim, "default", name) {
        Some(Object::Pvc(c)) => c.clone(),
        other => panic!("no claim {name}: {other:?}"),
    }
}

fn bound_to(r: &Rig<Binder>, c: &str) -> String {
    let c = claim(r, c);
    assert_eq!(
        c.phase(),
        PvcPhase::Bound,
        "claim {} is {:?}",
        c.metadata.name,
        c.phase()
    );
    c.volume_name().to_string()
}

#[test]
fn a3_1_the_group_with_fewest_access_modes_wins_over_a_smaller_volume() {
    let mut r = rig();
    r.create(Object::Pv(pv("big-rwo", "10Gi", &[ReadWriteOnce])));
    r.create(Object::Pv(pv(
        "small-rwo-rox",
        "2Gi",
        &[ReadWriteOnce, ReadOnlyMany],
    )));
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    assert_eq!(bound_to(&r, "data"), "big-rwo");
}

#[test]
fn a3_2_access_modes_are_a_superset_test() {
    let mut r = rig();
    r.create(Object::Pv(pv("rwo", "1Gi", &[ReadWriteOnce])));
    r.create(Object::Pv(pv(
        "rwx",
        "5Gi",
        &[ReadWriteMany, ReadWriteOnce],
    )));
    r.create(Object::Pvc(pvc("shared", "1Gi", &[ReadWriteMany])));
    assert_eq!(bound_to(&r, "shared"), "rwx");
}

#[test]
fn a3_7_the_smallest_big_enough_volume_wins_inside_a_group() {
    let mut r = rig();
    for (n, s) in [("v10", "10Gi"), ("v2", "2Gi"), ("v1", "1Gi"), ("v3", "3Gi")] {
        r.create(Object::Pv(pv(n, s, &[ReadWriteOnce])));
    }
    r.create(Object::Pvc(pvc("data", "1500Mi", &[ReadWriteOnce])));
    assert_eq!(bound_to(&r, "data"), "v2");
}

#[test]
fn a3_8_classes_must_be_equal_and_nil_is_empty() {
    let mut r = rig();
    let mut gold = pv("gold", "1Gi", &[ReadWriteOnce]);
    gold.spec.storage_class_name = Some("gold".into());
    r.create(Object::Pv(gold));
    let mut c = pvc("plain", "1Gi", &[ReadWriteOnce]);
    c.spec.storage_class_name = None;
    r.create(Object::Pvc(c));
    assert_eq!(claim(&r, "plain").phase(), PvcPhase::Pending);
    r.create(Object::Pv(pv("none", "1Gi", &[ReadWriteOnce])));
    assert_eq!(
        bound_to(&r, "plain"),
        "none",
        "nil class binds a \"\" volume"
    );
}

#[test]
fn a3_4_a_prebound_volume_wins_but_a_too_small_one_is_skipped() {
    let mut r = rig();
    let mut pre = pv("pre", "50Gi", &[ReadOnlyMany]);
    pre.spec.storage_class_name = Some("other".into());
    pre.spec.claim_ref = Some(ObjectReference {
        namespace: "default".into(),
        name: "data".into(),
        ..Default::default()
    });
    r.create(Object::Pv(pre));
    r.create(Object::Pv(pv("fit", "1Gi", &[ReadWriteOnce])));
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    assert_eq!(
        bound_to(&r, "data"),
        "pre",
        "class, modes and size of others do not matter"
    );
    assert!(
        !volume(&r, "pre")
            .metadata
            .has_annotation(names::ANN_BOUND_BY_CONTROLLER),
        "the user pre-bound it"
    );

    let mut r = rig();
    let mut tiny = pv("tiny", "1Mi", &[ReadWriteOnce]);
    tiny.spec.claim_ref = Some(ObjectReference {
        namespace: "default".into(),
        name: "data".into(),
        ..Default::default()
    });
    r.create(Object::Pv(tiny));
    r.create(Object::Pv(pv("fit", "1Gi", &[ReadWriteOnce])));
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    assert_eq!(bound_to(&r, "data"), "fit");
}

#[test]
fn a3_6_only_available_volumes_that_match_selector_and_mode_are_candidates() {
    let mut r = rig();
    let mut released = pv("released", "1Gi", &[ReadWriteOnce]);
    released.status.phase = Some(PvPhase::Released);
    released.spec.claim_ref = Some(ObjectReference {
        namespace: "default".into(),
        name: "gone".into(),
        uid: "gone-uid".into(),
        ..Default::default()
    });
    r.create(Object::Pv(released));
    let mut block = pv("block", "1Gi", &[ReadWriteOnce]);
    block.spec.volume_mode = Some(VolumeMode::Block);
    r.create(Object::Pv(block));
    let mut labelled = pv("fast", "4Gi", &[ReadWriteOnce]);
    labelled
        .metadata
        .labels
        .insert("tier".into(), "fast".into());
    r.create(Object::Pv(labelled));
    r.create(Object::Pv(pv("slow", "2Gi", &[ReadWriteOnce])));
    let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
    c.spec.selector = Some(LabelSelector {
        match_labels: [("tier".into(), "fast".into())].into(),
        ..Default::default()
    });
    r.create(Object::Pvc(c));
    assert_eq!(bound_to(&r, "data"), "fast");
    assert_eq!(
        volume(&r, "released").phase(),
        PvPhase::Released,
        "A2.4: never moved out of Released"
    );
}

#[test]
fn a7_1_binding_is_four_writes_pv_first() {
    let mut r = rig();
    r.create(Object::Pv(pv("v", "1Gi", &[ReadWriteOnce])));
    r.writes.clear();
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    let order: Vec<(&str, Kind)> = r.writes.iter().map(|w| (w.verb(), w.kind())).collect();
    assert_eq!(
        order,
        vec![
            ("update", Kind::PersistentVolume),
            ("update status", Kind::PersistentVolume),
            ("update", Kind::PersistentVolumeClaim),
            ("update status", Kind::PersistentVolumeClaim),
        ]
    );
    let (v, c) = (volume(&r, "v"), claim(&r, "data"));
    assert_eq!(v.spec.claim_ref.as_ref().unwrap().uid, c.metadata.uid);
    assert!(v.metadata.has_annotation(names::ANN_BOUND_BY_CONTROLLER));
    assert!(c.metadata.has_annotation(names::ANN_BIND_COMPLETED));
    assert!(c.metadata.has_annotation(names::ANN_BOUND_BY_CONTROLLER));
    assert_eq!(c.status.access_modes, vec![ReadWriteOnce]);
    assert_eq!(c.status_capacity(), Some(q("1Gi")));
    r.writes.clear();
    r.machine.handle(r.now, Input::Resync);
    r.run();
    assert!(
        r.writes.is_empty(),
        "A7.3: a synced binding writes nothing: {:?}",
        r.writes
    );
}

#[test]
fn a7_1_a_crash_between_bind_writes_is_repaired_by_a_new_binder() {
    // The store as a binder left it after the first two writes, then died.
    let mut r = rig();
    let c = r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    let Object::Pvc(c) = c else { unreachable!() };
    let mut v = pv("v", "1Gi", &[ReadWriteOnce]);
    v.metadata
        .annotations
        .insert(names::ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
    v.spec.claim_ref = Some(ObjectReference {
        namespace: "default".into(),
        name: "data".into(),
        uid: c.metadata.uid.clone(),
        ..Default::default()
    });
    v.status.phase = Some(PvPhase::Bound);
    let mut fresh = Rig::new(Binder::new());
    fresh.store = r.store.clone();
    fresh.create(Object::Pv(v));
    for o in r.store.objects().cloned().collect::<Vec<_>>() {
        fresh
            .machine
            .handle(0, Input::Watch(Watch::Applied(o.into())));
    }
    fresh.run();
    assert_eq!(bound_to(&fresh, "data"), "v");
}

#[test]
fn a4_2_a_claim_without_class_gets_the_default_class() {
    let mut r = rig();
    let mut sc = StorageClass::new("standard", "volplane.csi.io");
    sc.metadata
        .annotations
        .insert(DEFAULT_CLASS_ANNOTATION.into(), "true".into());
    r.create(Object::Class(sc));
    let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
    c.spec.storage_class_name = None;
    r.create(Object::Pvc(c));
    let c = claim(&r, "data");
    assert_eq!(c.spec.storage_class_name.as_deref(), Some("standard"));
    assert_eq!(
        c.metadata.annotation(names::ANN_STORAGE_PROVISIONER),
        Some("volplane.csi.io")
    );
}

#[test]
fn a4_3_wait_for_first_consumer_waits_and_names_unscheduled_pods() {
    let mut r = rig();
    let mut sc = StorageClass::new("local", "volplane.csi.io");
    sc.volume_binding_mode = Some(BindingMode::WaitForFirstConsumer);
    r.create(Object::Class(sc));
    let mut avail = pv("v", "1Gi", &[ReadWriteOnce]);
    avail.spec.storage_class_name = Some("local".into());
    r.create(Object::Pv(avail));
    let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
    c.spec.storage_class_name = Some("local".into());
    r.create(Object::Pvc(c));
    assert_eq!(
        claim(&r, "data").volume_name(),
        "",
        "A3.5: never bound by the controller"
    );
    assert_eq!(r.reasons(), vec![reason::WAIT_FOR_FIRST_CONSUMER]);
    let mut pod = Pod::new("default", "web-0");
    pod.spec.volumes.push(PodVolume {
        name: "d".into(),
        persistent_volume_claim: Some(PvcSource {
            claim_name: "data".into(),
            read_only: false,
        }),
    });
    r.create(Object::Pod(pod));
    assert_eq!(
        r.events.last().unwrap().message,
        "waiting for pod web-0 to be scheduled"
    );
}

#[test]
fn a4_4_a9_3_a_claim_with_a_class_is_handed_to_the_external_provisioner() {
    let mut r = rig();
    r.create(Object::Class(StorageClass::new("fast", "volplane.csi.io")));
    let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
    c.spec.storage_class_name = Some("fast".into());
    r.create(Object::Pvc(c));
    let c = claim(&r, "data");
    assert_eq!(
        c.metadata.annotation(names::ANN_STORAGE_PROVISIONER),
        Some("volplane.csi.io")
    );
    assert_eq!(
        c.metadata.annotation(names::ANN_BETA_STORAGE_PROVISIONER),
        Some("volplane.csi.io")
    );
    assert_eq!(
        c.status.phase, None,
        "A4.4: the claim's status is not written"
    );
    assert_eq!(r.reasons(), vec![reason::EXTERNAL_PROVISIONING]);
    assert!(
        r.events[0]
            .message
            .contains("external provisioner 'volplane.csi.io'")
    );
}

#[test]
fn a4_5_no_class_and_no_volume_is_failed_binding_and_pending() {
    let mut r = rig();
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    assert_eq!(claim(&r, "data").phase(), PvcPhase::Pending);
    assert_eq!(r.events[0].reason, reason::FAILED_BINDING);
    assert_eq!(
        r.events[0].message,
        "no persistent volumes available for this claim and no storage class is set"
    );
}

#[test]
fn a4_7_a_named_volume_is_bound_without_bound_by_controller_on_the_claim() {
    let mut r = rig();
    r.create(Object::Pv(pv("v", "1Gi", &[ReadWriteOnce])));
    let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
    c.spec.volume_name = Some("v".into());
    r.create(Object::Pvc(c));
    assert_eq!(bound_to(&r, "data"), "v");
    let c = claim(&r, "data");
    assert!(c.metadata.has_annotation(names::ANN_BIND_COMPLETED));
    assert!(!c.metadata.has_annotation(names::ANN_BOUND_BY_CONTROLLER));
    assert!(
        volume(&r, "v")
            .metadata
            .has_annotation(names::ANN_BOUND_BY_CONTROLLER)
    );
}

#[test]
fn a3_10_a_named_volume_too_small_is_volume_mismatch() {
    let mut r = rig();
    r.create(Object::Pv(pv("v", "1Mi", &[ReadWriteOnce])));
    let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
    c.spec.volume_name = Some("v".into());
    r.create(Object::Pvc(c));
    assert_eq!(claim(&r, "data").phase(), PvcPhase::Pending);
    assert_eq!(r.events[0].reason, reason::VOLUME_MISMATCH);
    assert!(
        r.events[0]
            .message
            .starts_with("Cannot bind to requested volume \"v\"")
    );
}

#[test]
fn a4_9_a_named_volume_bound_elsewhere_is_failed_binding() {
    let mut r = rig();
    r.create(Object::Pv(pv("v", "1Gi", &[ReadWriteOnce])));
    r.create(Object::Pvc(pvc("first", "1Gi", &[ReadWriteOnce])));
    assert_eq!(bound_to(&r, "first"), "v");
    let mut c = pvc("second", "1Gi", &[ReadWriteOnce]);
    c.spec.volume_name = Some("v".into());
    r.create(Object::Pvc(c));
    assert_eq!(claim(&r, "second").phase(), PvcPhase::Pending);
    let e = r
        .events
        .iter()
        .find(|e| &*e.object.name == "second")
        .unwrap();
    assert_eq!(
        e.message,
        "volume \"v\" already bound to a different claim."
    );
}

#[test]
fn a5_2_a_bound_claim_whose_volume_vanished_is_lost() {
    let mut r = rig();
    r.create(Object::Pv(pv("v", "1Gi", &[ReadWriteOnce])));
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolume,
        "",
        "v",
    )));
    let c = claim(&r, "data");
    assert_eq!(c.phase(), PvcPhase::Lost);
    assert!(c.status.capacity.is_empty(), "A7.2: Lost clears status");
    assert_eq!(r.events.last().unwrap().reason, reason::CLAIM_LOST);
}

#[test]
fn a5_5_a_claim_whose_volume_points_elsewhere_is_misbound() {
    let mut r = rig();
    r.create(Object::Pv(pv("v", "1Gi", &[ReadWriteOnce])));
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    let mut v = volume(&r, "v");
    v.spec.claim_ref.as_mut().unwrap().uid = "someone-else".into();
    r.user(ApiCall::Update(Object::Pv(v)));
    assert_eq!(claim(&r, "data").phase(), PvcPhase::Lost);
    assert!(r.reasons().contains(&reason::CLAIM_MISBOUND));
}

#[test]
fn a6_4_a8_3_a_deleted_claim_releases_its_volume_and_retain_keeps_it() {
    let mut r = rig();
    let mut v = pv("v", "1Gi", &[ReadWriteOnce]);
    v.spec.persistent_volume_reclaim_policy = Some(ReclaimPolicy::Retain);
    r.create(Object::Pv(v));
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolumeClaim,
        "default",
        "data",
    )));
    let v = volume(&r, "v");
    assert_eq!(v.phase(), PvPhase::Released);
    assert!(v.spec.claim_ref.is_some(), "A8.3: the stale claimRef stays");
    r.create(Object::Pvc(pvc("again", "1Gi", &[ReadWriteOnce])));
    assert_eq!(
        claim(&r, "again").phase(),
        PvcPhase::Pending,
        "a Released volume is not reused"
    );
}

#[test]
fn a8_4_delete_is_left_to_the_external_provisioner_or_fails_without_a_plugin() {
    let mut r = rig();
    let mut ext = pv("ext", "1Gi", &[ReadWriteOnce]);
    ext.spec.persistent_volume_reclaim_policy = Some(ReclaimPolicy::Delete);
    ext.metadata
        .annotations
        .insert(names::ANN_PROVISIONED_BY.into(), "volplane.csi.io".into());
    r.create(Object::Pv(ext));
    r.create(Object::Pvc(pvc("a", "1Gi", &[ReadWriteOnce])));
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolumeClaim,
        "default",
        "a",
    )));
    assert_eq!(volume(&r, "ext").phase(), PvPhase::Released);
    assert!(r.events.is_empty(), "{:?}", r.events);

    let mut intree = pv("intree", "1Gi", &[ReadWriteOnce]);
    intree.spec.persistent_volume_reclaim_policy = Some(ReclaimPolicy::Delete);
    r.create(Object::Pv(intree));
    r.create(Object::Pvc(pvc("b", "1Gi", &[ReadWriteOnce])));
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolumeClaim,
        "default",
        "b",
    )));
    let v = volume(&r, "intree");
    assert_eq!(v.phase(), PvPhase::Failed);
    assert_eq!(
        v.status.message,
        "error getting deleter volume plugin for volume \"intree\": no volume plugin matched"
    );
    assert_eq!(r.reasons(), vec![reason::VOLUME_FAILED_DELETE]);
}

#[test]
fn a8_7_an_unknown_reclaim_policy_fails_the_volume() {
    let mut r = rig();
    let mut v = pv("v", "1Gi", &[ReadWriteOnce]);
    v.spec.persistent_volume_reclaim_policy = Some(ReclaimPolicy::Other("Shred".into()));
    r.create(Object::Pv(v));
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolumeClaim,
        "default",
        "data",
    )));
    assert_eq!(volume(&r, "v").phase(), PvPhase::Failed);
    assert_eq!(r.reasons(), vec![reason::VOLUME_UNKNOWN_RECLAIM_POLICY]);
}

#[test]
fn a6_7_unbinding_depends_on_who_bound() {
    // Controller-bound: the claim now names another volume.
    let mut r = rig();
    r.create(Object::Pv(pv("v", "1Gi", &[ReadWriteOnce])));
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    r.create(Object::Pv(pv("w", "1Gi", &[ReadWriteOnce])));
    let mut c = claim(&r, "data");
    c.spec.volume_name = Some("w".into());
    r.user(ApiCall::Update(Object::Pvc(c)));
    let v = volume(&r, "v");
    assert!(v.spec.claim_ref.is_none());
    assert!(!v.metadata.has_annotation(names::ANN_BOUND_BY_CONTROLLER));
    assert_eq!(v.phase(), PvPhase::Available);

    // User pre-bound: the claimRef stays, only its UID goes.
    let mut r = rig();
    let mut pre = pv("pre", "1Gi", &[ReadWriteOnce]);
    pre.spec.claim_ref = Some(ObjectReference {
        namespace: "default".into(),
        name: "data".into(),
        ..Default::default()
    });
    r.create(Object::Pv(pre));
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    r.create(Object::Pv(pv("w", "1Gi", &[ReadWriteOnce])));
    let mut c = claim(&r, "data");
    c.spec.volume_name = Some("w".into());
    r.user(ApiCall::Update(Object::Pvc(c)));
    let v = volume(&r, "pre");
    assert_eq!(
        v.spec
            .claim_ref
            .as_ref()
            .map(|r| (r.name.as_str(), r.uid.as_str())),
        Some(("data", ""))
    );
    assert_eq!(v.phase(), PvPhase::Available);
}

#[test]
fn a7_2_the_pre_resize_capacity_is_what_a_new_binding_reports() {
    let mut r = rig();
    let mut v = pv("v", "2Gi", &[ReadWriteOnce]);
    v.metadata
        .annotations
        .insert(names::ANN_PRE_RESIZE_CAPACITY.into(), "1Gi".into());
    r.create(Object::Pv(v));
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    assert_eq!(claim(&r, "data").status_capacity(), Some(q("1Gi")));
}

#[test]
fn a6_2_a_volume_whose_claim_the_watch_has_not_delivered_is_not_released() {
    let mut r = rig();
    let c = r
        .store
        .apply(
            0,
            &ApiCall::Create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce]))),
        )
        .0;
    let Some(Object::Pvc(c)) = c.into_object() else {
        panic!()
    };
    let mut v = pv("v", "1Gi", &[ReadWriteOnce]);
    v.spec.claim_ref = Some(ObjectReference {
        namespace: "default".into(),
        name: "data".into(),
        uid: c.metadata.uid.clone(),
        ..Default::default()
    });
    v.metadata
        .annotations
        .insert(names::ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
    r.create(Object::Pv(v));
    assert_ne!(
        volume(&r, "v").phase(),
        PvPhase::Released,
        "the read found the claim"
    );
}

mod properties {
    use quickcheck::{Arbitrary, Gen};

    use crate::control::chaos::checker;

    use super::*;

    #[derive(Debug, Clone)]
    enum Step {
        Volume(u8, u8, bool),
        Claim(u8, u8, bool),
        DeleteClaim(u8),
        DeleteVolume(u8),
    }

    impl Arbitrary for Step {
        fn arbitrary(g: &mut Gen) -> Step {
            let (a, b, c) = (
                u8::arbitrary(g) % 4,
                u8::arbitrary(g) % 3,
                bool::arbitrary(g),
            );
            match u8::arbitrary(g) % 6 {
                0 | 1 => Step::Volume(a, b, c),
                2 | 3 => Step::Claim(a, b, c),
                4 => Step::DeleteClaim(a),
                _ => Step::DeleteVolume(a),
            }
        }
    }

    fn modes(rwx: bool) -> Vec<AccessMode> {
        if rwx {
            vec![ReadWriteMany, ReadWriteOnce]
        } else {
            vec![ReadWriteOnce]
        }
    }

    fn play(steps: &[Step]) -> Rig<Binder> {
        let mut r = rig();
        for s in steps {
            match *s {
                Step::Volume(i, size, rwx) => {
                    let mut v = pv(&format!("v{i}"), &format!("{}Gi", size + 1), &modes(rwx));
                    v.spec.persistent_volume_reclaim_policy = Some(ReclaimPolicy::Retain);
                    if r.get(Kind::PersistentVolume, "", &v.metadata.name)
                        .is_none()
                    {
                        r.create(Object::Pv(v));
                    }
                }
                Step::Claim(i, size, rwx) => {
                    let c = pvc(&format!("c{i}"), &format!("{}Gi", size + 1), &modes(rwx));
                    if r.get(Kind::PersistentVolumeClaim, "default", &c.metadata.name)
                        .is_none()
                    {
                        r.create(Object::Pvc(c));
                    }
                }
                Step::DeleteClaim(i) => r.user(ApiCall::Delete(ObjectKey::new(
                    Kind::PersistentVolumeClaim,
                    "default",
                    &format!("c{i}"),
                ))),
                Step::DeleteVolume(i) => r.user(ApiCall::Delete(ObjectKey::new(
                    Kind::PersistentVolume,
                    "",
                    &format!("v{i}"),
                ))),
            }
        }
        r
    }

    /// PV↔PVC binding is one-to-one: a Bound claim's volume points back at
    /// it, and no volume is named by two Bound claims.
    fn one_to_one(steps: Vec<Step>) -> bool {
        let r = play(&steps);
        if crate::binder::check_one_to_one(r.store.objects()).is_err() {
            return false;
        }
        for o in r.store.objects() {
            let Object::Pvc(c) = o else { continue };
            if c.phase() != PvcPhase::Bound {
                continue;
            }
            match r.get(Kind::PersistentVolume, "", c.volume_name()) {
                Some(Object::Pv(v))
                    if v.spec
                        .claim_ref
                        .as_ref()
                        .is_some_and(|r| r.uid == c.metadata.uid) => {}
                _ => return false,
            }
        }
        true
    }

    /// The same inputs give the same effects.
    fn deterministic(steps: Vec<Step>) -> bool {
        let (a, b) = (play(&steps), play(&steps));
        a.writes == b.writes && a.events == b.events
    }

    #[test]
    fn binding_is_one_to_one() {
        checker(300, 30).quickcheck(one_to_one as fn(Vec<Step>) -> bool);
    }

    #[test]
    fn the_same_inputs_give_the_same_effects() {
        checker(300, 30).quickcheck(deterministic as fn(Vec<Step>) -> bool);
    }
}

mod audit;
mod faults;
mod upstream;

/// The answer to the bind's write of the claim arrives after the claim's
/// Deleted event (the user deleted it meanwhile): that answer, older than
/// the delete, must not bring the claim back into the cache — the volume
/// learns its claim is gone and is Released (found by the simulator,
/// seed 905 of `volplane sim`).
#[test]
fn a8_1_a_late_bind_answer_does_not_revive_a_deleted_claim() {
    use crate::store::Store;
    let mut store = Store::new();
    let mut b = Binder::new();
    let feed = |b: &mut Binder, watches: Vec<crate::control::Watch>| {
        for w in watches {
            b.handle(0, Input::Watch(w));
        }
    };
    for o in [
        Object::Pv(pv("v", "1Gi", &[ReadWriteOnce])),
        Object::Pvc(pvc("c", "1Gi", &[ReadWriteOnce])),
    ] {
        let (_, w) = store.write(0, ApiCall::Create(o));
        feed(&mut b, w);
    }
    b.handle(0, Input::Synced);
    // Answer every write at once, until the bind writes the claim: that
    // answer is held back.
    let held = 'bind: loop {
        let effects = crate::machine::effects(&mut b, 0);
        assert!(!effects.is_empty(), "the bind never wrote the claim");
        for e in effects {
            let crate::control::Effect::Api { op, call } = e else {
                continue;
            };
            let writes_claim = matches!(&call, ApiCall::Update(Object::Pvc(_)));
            let (result, w) = store.write(0, call);
            if writes_claim {
                break 'bind (op, result, w);
            }
            b.handle(0, Input::ApiDone { op, result });
            feed(&mut b, w);
        }
    };
    // The user deletes the claim; its Deleted event comes first.
    let key = ObjectKey::new(Kind::PersistentVolumeClaim, "default", "c");
    let (_, w) = store.write(0, ApiCall::Delete(key));
    let deleted: Vec<_> = w
        .into_iter()
        .filter(|w| matches!(w, crate::control::Watch::Deleted(_)))
        .collect();
    feed(&mut b, deleted);
    let (op, result, _) = held;
    b.handle(0, Input::ApiDone { op, result });
    let key = ObjectKey::new(Kind::PersistentVolumeClaim, "default", "c");
    assert!(
        b.context().cache().get(&key).is_none(),
        "the late answer revived the claim"
    );
    // Everything else answered at once, watch events delivered.
    for _ in 0..100 {
        let effects = crate::machine::effects(&mut b, 0);
        if effects.is_empty() {
            break;
        }
        for e in effects {
            let crate::control::Effect::Api { op, call } = e else {
                continue;
            };
            let (result, w) = store.write(0, call);
            b.handle(0, Input::ApiDone { op, result });
            feed(&mut b, w);
        }
    }
    let Some(Object::Pv(v)) = store.get(&ObjectKey::new(Kind::PersistentVolume, "", "v")) else {
        panic!("the volume is there")
    };
    assert_eq!(v.phase(), PvPhase::Released, "its claim is gone");
}
