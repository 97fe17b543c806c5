//! The binder read path by path against upstream's PV controller
//! (kubernetes/kubernetes pkg/controller/volume/persistentvolume,
//! pv_controller.go and pv_controller_base.go): each test names the rule of
//! SEMANTICS.md and the upstream function whose behaviour it pins down.

use super::*;
use crate::control::Input;
use crate::control::{ApiResult, Effect, EventType};

fn kinds_written(r: &Rig<Binder>, name: &str) -> usize {
    r.writes.iter().filter(|w| &*w.key().name == name).count()
}

fn lost_claim(name: &str, volume_name: &str) -> PersistentVolumeClaim {
    let mut c = pvc(name, "1Gi", &[ReadWriteOnce]);
    c.metadata
        .annotations
        .insert(names::ANN_BIND_COMPLETED.into(), "yes".into());
    c.spec.volume_name = Some(volume_name.into());
    c
}

/// A volume under `policy` whose claim is gone, in `phase`.
fn orphaned(policy: ReclaimPolicy, phase: PvPhase) -> PersistentVolume {
    let mut v = pv("v", "1Gi", &[ReadWriteOnce]);
    v.spec.persistent_volume_reclaim_policy = Some(policy);
    v.spec.claim_ref = Some(ObjectReference {
        kind: "PersistentVolumeClaim".into(),
        namespace: "default".into(),
        name: "gone".into(),
        uid: "uid-gone".into(),
        ..Default::default()
    });
    v.status.phase = Some(phase);
    v
}

/// syncVolume, claim found without a volumeName and another volumeMode:
/// upstream sends VolumeMismatch on the volume naming the claim and on the
/// claim naming the volume, and writes nothing.
#[test]
fn a6_5_a_volume_mode_mismatch_is_reported_on_both_sides_each_naming_the_other() {
    let mut r = rig();
    let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
    c.spec.volume_mode = Some(VolumeMode::Block);
    let c = r.create(Object::Pvc(c));
    let mut v = pv("v", "1Gi", &[ReadWriteOnce]);
    v.spec.claim_ref = Some(ObjectReference {
        kind: "PersistentVolumeClaim".into(),
        namespace: "default".into(),
        name: "data".into(),
        uid: c.meta().uid.clone(),
        ..Default::default()
    });
    v.status.phase = Some(PvPhase::Bound);
    r.create(Object::Pv(v));
    let on = |kind: Kind| {
        r.events
            .iter()
            .find(|e| e.object.kind == kind && e.reason == reason::VOLUME_MISMATCH)
            .map(|e| e.message.clone())
    };
    assert_eq!(
        on(Kind::PersistentVolume).as_deref(),
        Some(
            "Cannot bind PersistentVolume to requested PersistentVolumeClaim \"data\" due to incompatible volumeMode."
        )
    );
    assert_eq!(
        on(Kind::PersistentVolumeClaim).as_deref(),
        Some(
            "Cannot bind PersistentVolume \"v\" to requested PersistentVolumeClaim due to incompatible volumeMode."
        )
    );
    assert_eq!(kinds_written(&r, "v"), 0, "the volume was written");
}

/// updateVolumePhase: nothing is written when the phase is already set,
/// even when the message would differ; updateVolumePhaseWithEvent sends its
/// event only with a real change (A2.5, A8.7).
#[test]
fn a2_5_a8_7_a_phase_already_set_is_neither_rewritten_nor_announced_again() {
    let mut r = rig();
    let mut v = orphaned(ReclaimPolicy::Other("Shred".into()), PvPhase::Failed);
    v.status.message = "an older failure".into();
    r.create(Object::Pv(v));
    r.machine.handle(r.now, Input::Resync);
    r.run();
    let v = volume(&r, "v");
    assert_eq!(
        v.status.message, "an older failure",
        "the message was rewritten"
    );
    assert_eq!(kinds_written(&r, "v"), 0);
    assert!(
        r.events.is_empty(),
        "an event without a phase change: {:?}",
        r.events
    );

    // From Released the phase changes: one write, one event, after it.
    let mut r = rig();
    r.create(Object::Pv(orphaned(
        ReclaimPolicy::Other("Shred".into()),
        PvPhase::Released,
    )));
    r.machine.handle(r.now, Input::Resync);
    r.run();
    assert_eq!(volume(&r, "v").phase(), PvPhase::Failed);
    assert_eq!(r.reasons(), vec![reason::VOLUME_UNKNOWN_RECLAIM_POLICY]);
}

/// updateClaimStatusWithEvent: a bound claim already Lost gets no write
/// and no new ClaimLost; one that becomes Lost gets both, the event once.
#[test]
fn a5_1_a5_2_lost_is_announced_only_when_the_claim_becomes_lost() {
    let mut r = rig();
    let mut c = lost_claim("already", "");
    c.status.phase = Some(PvcPhase::Lost);
    r.create(Object::Pvc(c));
    r.machine.handle(r.now, Input::Resync);
    r.run();
    assert_eq!(kinds_written(&r, "already"), 0);
    assert!(r.events.is_empty(), "{:?}", r.events);

    let mut c = lost_claim("data", "vanished");
    c.status.phase = Some(PvcPhase::Bound);
    r.create(Object::Pvc(c));
    r.machine.handle(r.now, Input::Resync);
    r.run();
    assert_eq!(claim(&r, "data").phase(), PvcPhase::Lost);
    assert_eq!(r.reasons(), vec![reason::CLAIM_LOST]);
    assert_eq!(
        r.events[0].message,
        "Bound claim has lost its PersistentVolume. Data on the volume is lost!"
    );
}

/// updateClaimStatus: status.capacity is written on the way into Bound,
/// never for a claim already Bound (a difference may be on purpose);
/// currentVolumeAttributesClassName is taken from the volume when a Pending
/// claim binds and cleared with the volume's other fields when it is lost.
#[test]
fn a7_2_capacity_and_attributes_class_are_taken_only_on_the_way_into_bound() {
    let mut r = rig();
    let mut v = pv("v", "1Gi", &[ReadWriteOnce]);
    v.spec.volume_attributes_class_name = Some("gold".into());
    r.create(Object::Pv(v));
    let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
    c.spec.volume_attributes_class_name = Some("gold".into());
    c.status.phase = Some(PvcPhase::Pending);
    r.create(Object::Pvc(c));
    let c = claim(&r, "data");
    assert_eq!(c.phase(), PvcPhase::Bound);
    assert_eq!(
        c.status.current_volume_attributes_class_name.as_deref(),
        Some("gold")
    );
    assert_eq!(c.status.capacity.get("storage"), Some(&q("1Gi")));

    // Bound already, its capacity emptied by someone: left as it is.
    let mut emptied = c.clone();
    emptied.status.capacity.clear();
    r.user(ApiCall::UpdateStatus(Object::Pvc(emptied)));
    r.machine.handle(r.now, Input::Resync);
    r.run();
    assert!(claim(&r, "data").status.capacity.is_empty());

    // Lost: modes, capacity and the attributes class are cleared.
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolume,
        "",
        "v",
    )));
    let c = claim(&r, "data");
    assert_eq!(c.phase(), PvcPhase::Lost);
    assert!(c.status.access_modes.is_empty());
    assert_eq!(c.status.current_volume_attributes_class_name, None);
}

/// syncUnboundClaim, delayed binding without a selected node: after the
/// WaitForFirstConsumer event the claim is set Pending like every claim
/// that found nothing (a stale Bound status is reset).
#[test]
fn a4_3_a_claim_waiting_for_its_first_consumer_is_set_pending() {
    let mut r = rig();
    let mut sc = StorageClass::new("local", "volplane.csi.io");
    sc.volume_binding_mode = Some(BindingMode::WaitForFirstConsumer);
    r.create(Object::Class(sc));
    let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
    c.spec.storage_class_name = Some("local".into());
    c.status.phase = Some(PvcPhase::Bound);
    c.status.access_modes = vec![ReadWriteOnce];
    r.create(Object::Pvc(c));
    let c = claim(&r, "data");
    assert_eq!(c.phase(), PvcPhase::Pending);
    assert!(c.status.access_modes.is_empty());
    assert_eq!(r.reasons(), vec![reason::WAIT_FOR_FIRST_CONSUMER]);
}

/// The same event is not posted twice in a row for one object, and what
/// the binder remembers of an object's last event goes with the object: a
/// claim of the same name created again gets its event again (and 10,000
/// deleted claims leave nothing behind).
#[test]
fn a_repeated_event_is_posted_once_and_forgotten_with_its_object() {
    let mut r = rig();
    let mut sc = StorageClass::new("local", "volplane.csi.io");
    sc.volume_binding_mode = Some(BindingMode::WaitForFirstConsumer);
    r.create(Object::Class(sc));
    let waiting = || {
        let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
        c.spec.storage_class_name = Some("local".into());
        Object::Pvc(c)
    };
    r.create(waiting());
    r.input(Input::Resync);
    assert_eq!(r.reasons(), vec![reason::WAIT_FOR_FIRST_CONSUMER]);
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolumeClaim,
        "default",
        "data",
    )));
    assert!(r.machine.controller().last_event.is_empty());
    r.create(waiting());
    assert_eq!(
        r.reasons(),
        vec![
            reason::WAIT_FOR_FIRST_CONSUMER,
            reason::WAIT_FOR_FIRST_CONSUMER
        ]
    );
}

/// findDeletablePlugin: a provisioned-by naming an in-tree plugin (which
/// volplane has none of) fails with upstream's "no volume plugin matched
/// name"; an empty provisioned-by is no provisioner at all, so only a CSI
/// source leaves the volume to an external deleter.
#[test]
fn a8_4_an_in_tree_or_empty_provisioner_has_no_deleter() {
    for (provisioned_by, csi, failure) in [
        (
            Some("kubernetes.io/aws-ebs"),
            true,
            Some("no volume plugin matched name: kubernetes.io/aws-ebs"),
        ),
        (
            Some(""),
            false,
            Some("error getting deleter volume plugin for volume \"v\": no volume plugin matched"),
        ),
        (Some(""), true, None),
        (Some("volplane.csi.io"), false, None),
    ] {
        let mut r = rig();
        let mut v = orphaned(ReclaimPolicy::Delete, PvPhase::Released);
        if let Some(p) = provisioned_by {
            v.metadata
                .annotations
                .insert(names::ANN_PROVISIONED_BY.into(), p.into());
        }
        if csi {
            v.spec.csi = Some(CsiSource {
                driver: "volplane.csi.io".into(),
                volume_handle: "h".into(),
                ..Default::default()
            });
        }
        r.create(Object::Pv(v));
        r.machine.handle(r.now, Input::Resync);
        r.run();
        let v = volume(&r, "v");
        match failure {
            Some(msg) => {
                assert_eq!(v.phase(), PvPhase::Failed, "{provisioned_by:?}");
                assert_eq!(v.status.message, msg);
                assert_eq!(r.reasons(), vec![reason::VOLUME_FAILED_DELETE]);
            }
            None => {
                assert_eq!(v.phase(), PvPhase::Released, "{provisioned_by:?}");
                assert!(r.events.is_empty());
            }
        }
    }
}

/// setClaimProvisioner and provisionClaimOperationExternal: the GA
/// annotation alone says the claim is handed over (no write for a missing
/// beta one); a failed save is a Warning ProvisioningFailed "Error saving
/// claim", and ExternalProvisioning follows the save that succeeded.
#[test]
fn a9_3_the_ga_annotation_decides_and_a_failed_save_is_provisioning_failed() {
    let mut r = rig();
    r.create(Object::Class(StorageClass::new("fast", "volplane.csi.io")));
    let mut c = pvc("annotated", "1Gi", &[ReadWriteOnce]);
    c.spec.storage_class_name = Some("fast".into());
    c.metadata.annotations.insert(
        names::ANN_STORAGE_PROVISIONER.into(),
        "volplane.csi.io".into(),
    );
    r.create(Object::Pvc(c));
    assert_eq!(kinds_written(&r, "annotated"), 0);
    assert_eq!(r.reasons(), vec![reason::EXTERNAL_PROVISIONING]);

    let mut r = rig();
    r.create(Object::Class(StorageClass::new("fast", "volplane.csi.io")));
    let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
    c.spec.storage_class_name = Some("fast".into());
    let (_, watches) = r.store.apply(r.now, &ApiCall::Create(Object::Pvc(c)));
    for w in watches {
        r.machine.handle(r.now, Input::Watch(w));
    }
    let Some(Effect::Api {
        op,
        call: ApiCall::Update(_),
    }) = r.machine.poll()
    else {
        panic!("the provisioner annotation was not written first")
    };
    r.machine.handle(
        r.now,
        Input::ApiDone {
            op,
            result: ApiResult::Conflict,
        },
    );
    r.run();
    // Nothing newer is known: the save is retried after its backoff.
    r.advance(1_000);
    let e = &r.events[0];
    assert_eq!(
        (e.type_, e.reason.as_str()),
        (EventType::Warning, reason::PROVISIONING_FAILED)
    );
    assert_eq!(
        e.message,
        "Error saving claim: Operation cannot be fulfilled on persistentvolumeclaims \"data\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(
        r.reasons(),
        vec![reason::PROVISIONING_FAILED, reason::EXTERNAL_PROVISIONING],
        "the retried save succeeds and is announced"
    );
}

/// assignDefaultStorageClass (GetDefaultClass): only a class marked
/// default is given to a claim without one, the newest of several.
#[test]
fn a4_2_only_a_default_class_is_assigned_and_the_newest_default_wins() {
    let mut r = rig();
    r.create(Object::Class(StorageClass::new("plain", "volplane.csi.io")));
    let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
    c.spec.storage_class_name = None;
    r.create(Object::Pvc(c));
    assert_eq!(claim(&r, "data").spec.storage_class_name, None);

    // The newest wins even against a name that sorts first.
    for (name, at) in [
        ("a-old", "2026-01-01T00:00:00Z"),
        ("z-new", "2026-06-01T00:00:00Z"),
    ] {
        let mut sc = StorageClass::new(name, "volplane.csi.io");
        sc.metadata
            .annotations
            .insert(DEFAULT_CLASS_ANNOTATION.into(), "true".into());
        sc.metadata.creation_timestamp = Some(at.into());
        r.create(Object::Class(sc));
    }
    let mut c = pvc("later", "1Gi", &[ReadWriteOnce]);
    c.spec.storage_class_name = None;
    r.create(Object::Pvc(c));
    assert_eq!(
        claim(&r, "later").spec.storage_class_name.as_deref(),
        Some("z-new")
    );
}

/// emitEventForUnboundDelayBindingClaim (findNonScheduledPodsByPVC): only
/// pods of the claim's namespace, not scheduled and not terminated, are
/// named.
#[test]
fn a4_3_only_unscheduled_running_pods_of_the_namespace_are_named() {
    let mut r = rig();
    let mut sc = StorageClass::new("local", "volplane.csi.io");
    sc.volume_binding_mode = Some(BindingMode::WaitForFirstConsumer);
    r.create(Object::Class(sc));
    let mut scheduled = Pod::using_claim("default", "scheduled", "data");
    scheduled.spec.node_name = Some("node-a".into());
    let mut done = Pod::using_claim("default", "done", "data");
    done.status.phase = Some(PodPhase::Succeeded);
    for p in [
        scheduled,
        done,
        Pod::using_claim("other", "elsewhere", "data"),
        Pod::using_claim("default", "waiting", "data"),
    ] {
        r.create(Object::Pod(p));
    }
    let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
    c.spec.storage_class_name = Some("local".into());
    r.create(Object::Pvc(c));
    let e = r.events.last().unwrap();
    assert_eq!(e.reason, reason::WAIT_FOR_POD_SCHEDULED);
    assert_eq!(e.message, "waiting for pod waiting to be scheduled");
}

/// IsVolumeBoundToClaim: a volume pre-bound to a claim of the same name in
/// another namespace is not this claim's.
#[test]
fn a3_4_a_volume_prebound_to_another_namespace_is_not_taken() {
    let mut r = rig();
    let mut v = pv("v", "1Gi", &[ReadWriteOnce]);
    v.spec.claim_ref = Some(ObjectReference {
        kind: "PersistentVolumeClaim".into(),
        namespace: "other".into(),
        name: "data".into(),
        uid: String::new(),
        ..Default::default()
    });
    r.create(Object::Pv(v));
    r.create(Object::Pvc(pvc("data", "1Gi", &[ReadWriteOnce])));
    assert_eq!(claim(&r, "data").volume_name(), "");
    assert_eq!(volume(&r, "v").spec.claim_ref.unwrap().namespace, "other");
}

/// provisionClaim (findProvisionablePlugin): an in-tree provisioner volplane
/// has no plugin for is ProvisioningFailed, not handed to an external one;
/// a class that appears later is used at once (the class watch syncs the
/// claims still Pending), and one that goes is reported missing.
#[test]
fn a9_2_a9_3_classes_decide_provisioning_as_they_come_and_go() {
    let mut r = rig();
    r.create(Object::Class(StorageClass::new(
        "ebs",
        "kubernetes.io/aws-ebs",
    )));
    let mut c = pvc("in-tree", "1Gi", &[ReadWriteOnce]);
    c.spec.storage_class_name = Some("ebs".into());
    r.create(Object::Pvc(c));
    let e = r.events.last().unwrap();
    assert_eq!(e.reason, reason::PROVISIONING_FAILED);
    assert_eq!(
        e.message,
        "no volume plugin matched name: kubernetes.io/aws-ebs"
    );
    assert_eq!(
        claim(&r, "in-tree")
            .metadata
            .annotation(names::ANN_STORAGE_PROVISIONER),
        None
    );

    let mut c = pvc("early", "1Gi", &[ReadWriteOnce]);
    c.spec.storage_class_name = Some("fast".into());
    r.create(Object::Pvc(c));
    assert_eq!(
        r.events.last().unwrap().message,
        "storageclass.storage.k8s.io \"fast\" not found"
    );
    r.create(Object::Class(StorageClass::new("fast", "volplane.csi.io")));
    assert_eq!(
        claim(&r, "early")
            .metadata
            .annotation(names::ANN_STORAGE_PROVISIONER),
        Some("volplane.csi.io")
    );
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::StorageClass,
        "",
        "fast",
    )));
    assert_eq!(
        r.events.last().unwrap().message,
        "storageclass.storage.k8s.io \"fast\" not found",
        "the claim did not learn its class went"
    );
}

/// Found by the simulator (seed 934): the live read of a volume's claim
/// (A6.2) answers NotFound for the incarnation the volume names, while the
/// watch has already brought a claim made again under the same name. The
/// answer is about the old incarnation: the new claim stays known, and is
/// handed to its provisioner.
#[test]
fn a6_2_a_read_about_a_deleted_claim_does_not_forget_its_namesake() {
    let mut b = Binder::new();
    let class = StorageClass::new("fast", "csi.example.com");
    let mut v = pv("v", "1Gi", &[ReadWriteOnce]);
    v.spec.claim_ref = Some(ObjectReference {
        namespace: "default".into(),
        name: "data".into(),
        uid: "uid-old".into(),
        ..Default::default()
    });
    v.metadata
        .annotations
        .insert(names::ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
    v.metadata.resource_version = "1".into();
    for o in [Object::Class(class), Object::Pv(v)] {
        b.handle(0, Input::Watch(crate::control::Watch::Applied(o.into())));
    }
    b.handle(0, Input::Synced);
    // The volume's claim is not in the cache: the binder reads it live.
    let get = std::iter::from_fn(|| b.poll()).find_map(|e| match e {
        Effect::Api {
            op,
            call: ApiCall::Get(k),
        } if &*k.name == "data" => Some(op),
        _ => None,
    });
    let op = get.expect("a live read of the volume's claim");
    // Meanwhile a new claim of that name arrives.
    let mut c = pvc("data", "1Gi", &[ReadWriteOnce]);
    c.spec.storage_class_name = Some("fast".into());
    c.metadata.uid = "uid-new".into();
    c.metadata.resource_version = "5".into();
    b.handle(
        1,
        Input::Watch(crate::control::Watch::Applied(Object::Pvc(c).into())),
    );
    b.handle(
        2,
        Input::ApiDone {
            op,
            result: ApiResult::NotFound,
        },
    );
    let writes: Vec<ApiCall> = std::iter::from_fn(|| b.poll())
        .filter_map(|e| match e {
            Effect::Api { call, .. } => Some(call),
            _ => None,
        })
        .collect();
    assert!(
        writes
            .iter()
            .any(|w| matches!(w, ApiCall::Update(Object::Pvc(c))
            if c.metadata.uid == "uid-new"
                && c.metadata.has_annotation(names::ANN_STORAGE_PROVISIONER))),
        "the new claim is handed to its provisioner: {writes:?}"
    );
}
