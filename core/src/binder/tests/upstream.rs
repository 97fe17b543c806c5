//! Where the binder followed upstream's PV controller less closely than
//! SEMANTICS.md says: each test names the rule and the upstream path
//! (pkg/controller/volume/persistentvolume/pv_controller.go) it checks.

use super::*;
use crate::control::EventType;
use crate::control::Input;

/// syncUnboundClaim, volumeName set, volume claimed by someone else, claim
/// annotated bound-by-controller: the event, and no write (retried later).
#[test]
fn a4_9_a_controller_bound_claim_whose_volume_is_bound_elsewhere_is_left_as_it_is() {
    let mut r = rig();
    r.create(Object::Pv(pv("v", "1Gi", &[ReadWriteOnce])));
    r.create(Object::Pvc(pvc("first", "1Gi", &[ReadWriteOnce])));
    assert_eq!(bound_to(&r, "first"), "v");
    let mut c = pvc("second", "1Gi", &[ReadWriteOnce]);
    c.spec.volume_name = Some("v".into());
    c.metadata
        .annotations
        .insert(names::ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
    c.status.phase = Some(PvcPhase::Bound);
    r.create(Object::Pvc(c));
    let before = claim(&r, "second");
    r.machine.handle(r.now, Input::Resync);
    r.run();
    let after = claim(&r, "second");
    assert_eq!(after, before, "the claim was written");
    assert_eq!(after.phase(), PvcPhase::Bound, "not reset to Pending");
    let e = r
        .events
        .iter()
        .rfind(|e| &*e.object.name == "second")
        .unwrap();
    assert_eq!(e.reason, reason::FAILED_BINDING);
    assert_eq!(
        e.message,
        "volume \"v\" already bound to a different claim."
    );
}

/// FindMatchingVolume and checkVolumeSatisfyClaim: volumeAttributesClassName
/// must be equal, unset counting as "".
#[test]
fn a3_10_a3_6_volume_attributes_classes_must_match_and_unset_is_empty() {
    let mut r = rig();
    let mut gold = pv("gold", "5Gi", &[ReadWriteOnce]);
    gold.spec.volume_attributes_class_name = Some("gold".into());
    r.create(Object::Pv(gold));
    r.create(Object::Pv(pv("plain", "10Gi", &[ReadWriteOnce])));
    let mut wants_gold = pvc("wants-gold", "1Gi", &[ReadWriteOnce]);
    wants_gold.spec.volume_attributes_class_name = Some("gold".into());
    r.create(Object::Pvc(wants_gold));
    assert_eq!(bound_to(&r, "wants-gold"), "gold");

    r.create(Object::Pv(pv("plain-small", "2Gi", &[ReadWriteOnce])));
    let mut silver = pv("silver", "1Gi", &[ReadWriteOnce]);
    silver.spec.volume_attributes_class_name = Some("silver".into());
    r.create(Object::Pv(silver));
    r.create(Object::Pvc(pvc("plain-claim", "1Gi", &[ReadWriteOnce])));
    assert_eq!(
        bound_to(&r, "plain-claim"),
        "plain-small",
        "a claim without a class takes no volume that has one"
    );
    assert!(
        !r.writes
            .iter()
            .any(|w| matches!(w, ApiCall::Update(Object::Pv(v)) if v.name() == "silver")),
        "silver was claimed for a claim of another attributes class"
    );

    let mut named = pvc("named", "1Gi", &[ReadWriteOnce]);
    named.spec.volume_name = Some("silver".into());
    r.create(Object::Pvc(named));
    assert_eq!(claim(&r, "named").phase(), PvcPhase::Pending);
    let e = r.events.last().unwrap();
    assert_eq!(e.reason, reason::VOLUME_MISMATCH);
    assert_eq!(
        e.message,
        "Cannot bind to requested volume \"silver\": volumeAttributesClassName does not match"
    );

    let mut prebound = pv("prebound", "1Gi", &[ReadWriteOnce]);
    prebound.spec.claim_ref = Some(ObjectReference {
        kind: "PersistentVolumeClaim".into(),
        namespace: "default".into(),
        name: "pre".into(),
        uid: String::new(),
        ..Default::default()
    });
    prebound.spec.volume_attributes_class_name = Some("bronze".into());
    r.create(Object::Pv(prebound));
    r.create(Object::Pvc(pvc("pre", "1Gi", &[ReadWriteOnce])));
    assert_ne!(
        bound_to(&r, "pre"),
        "prebound",
        "a pre-bound volume of another attributes class is skipped"
    );
}

/// syncUnboundClaim, volumeName set, volume pre-bound to this claim (claimRef
/// without a UID) but too small: VolumeMismatch and Pending, not a binding.
#[test]
fn a3_4_completing_a_prebind_to_a_too_small_volume_is_volume_mismatch() {
    let mut r = rig();
    let mut v = pv("small", "1Mi", &[ReadWriteOnce]);
    v.spec.claim_ref = Some(ObjectReference {
        kind: "PersistentVolumeClaim".into(),
        namespace: "default".into(),
        name: "data".into(),
        uid: String::new(),
        ..Default::default()
    });
    r.create(Object::Pv(v));
    let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
    c.spec.volume_name = Some("small".into());
    r.create(Object::Pvc(c));
    assert_eq!(claim(&r, "data").phase(), PvcPhase::Pending);
    assert!(
        volume(&r, "small").spec.claim_ref.unwrap().uid.is_empty(),
        "the binding was completed"
    );
    let e = r.events.last().unwrap();
    assert_eq!(e.reason, reason::VOLUME_MISMATCH);
    assert_eq!(
        e.message,
        "Cannot bind to requested volume \"small\": requested PV is too small"
    );
}

/// recycleVolumeOperation: a volume whose old claim is still used by a pod
/// stays Released with a Normal VolumeFailedRecycle before any recycler is
/// looked for; once the pod is gone, no recycler means Failed.
#[test]
fn a8_6_recycle_waits_while_pods_still_use_the_claim() {
    let mut r = rig();
    let mut v = pv("v", "1Gi", &[ReadWriteOnce]);
    v.spec.persistent_volume_reclaim_policy = Some(ReclaimPolicy::Recycle);
    r.create(Object::Pv(v));
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    assert_eq!(bound_to(&r, "data"), "v");
    r.create(Object::Pod(Pod::using_claim("default", "web", "data")));
    r.create(Object::Pod(Pod::using_claim("default", "api", "data")));
    // Neither a pod of another namespace nor one that terminated counts.
    r.create(Object::Pod(Pod::using_claim("other", "elsewhere", "data")));
    let mut done = Pod::using_claim("default", "done", "data");
    done.status.phase = Some(PodPhase::Succeeded);
    r.create(Object::Pod(done));
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolumeClaim,
        "default",
        "data",
    )));
    r.machine.handle(r.now, Input::Resync);
    r.run();
    assert_eq!(volume(&r, "v").phase(), PvPhase::Released);
    let e = r.events.last().unwrap();
    assert_eq!(e.type_, EventType::Normal);
    assert_eq!(e.reason, reason::VOLUME_FAILED_RECYCLE);
    assert_eq!(e.message, "Volume is used by pods: default/api,default/web");
    for p in ["web", "api"] {
        r.user(ApiCall::Delete(ObjectKey::new(Kind::Pod, "default", p)));
    }
    r.machine.handle(r.now, Input::Resync);
    r.run();
    let v = volume(&r, "v");
    assert_eq!(v.phase(), PvPhase::Failed);
    assert_eq!(v.status.message, "No recycler plugin found for the volume!");
}

/// syncVolume, claim bound to another volume (A6.7): a dynamically
/// provisioned volume under Delete is Released (and left to its
/// provisioner), not unbound and offered again.
#[test]
fn a6_7_a_provisioned_delete_volume_whose_claim_moved_on_is_released() {
    let mut r = rig();
    let mut v = pv("v", "1Gi", &[ReadWriteOnce]);
    v.spec.persistent_volume_reclaim_policy = Some(ReclaimPolicy::Delete);
    v.metadata
        .annotations
        .insert(names::ANN_PROVISIONED_BY.into(), "volplane.csi.io".into());
    r.create(Object::Pv(v));
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    assert_eq!(bound_to(&r, "data"), "v");
    r.create(Object::Pv(pv("w", "1Gi", &[ReadWriteOnce])));
    let mut c = claim(&r, "data");
    c.spec.volume_name = Some("w".into());
    r.user(ApiCall::Update(Object::Pvc(c)));
    let v = volume(&r, "v");
    assert_eq!(v.phase(), PvPhase::Released);
    assert_eq!(
        v.spec.claim_ref.map(|c| c.name),
        Some("data".into()),
        "unbound"
    );
    r.machine.handle(r.now, Input::Resync);
    r.run();
    assert_eq!(
        volume(&r, "v").phase(),
        PvPhase::Released,
        "stays for the provisioner"
    );

    // Retain is unbound and offered again, as a user's volume would be.
    let mut r = rig();
    let mut v = pv("v", "1Gi", &[ReadWriteOnce]);
    v.metadata
        .annotations
        .insert(names::ANN_PROVISIONED_BY.into(), "volplane.csi.io".into());
    r.create(Object::Pv(v));
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    r.create(Object::Pv(pv("w", "1Gi", &[ReadWriteOnce])));
    let mut c = claim(&r, "data");
    c.spec.volume_name = Some("w".into());
    r.user(ApiCall::Update(Object::Pvc(c)));
    assert_eq!(volume(&r, "v").phase(), PvPhase::Available);
}
