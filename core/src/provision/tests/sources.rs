//! A claim's data source: a clone's source claim and a restore's snapshot
//! are checked as upstream checks them, and held by external-provisioner's
//! finalizers while CreateVolume may still read them (B5.6).

use std::cell::Cell;
use std::rc::Rc;

use super::rules::bound_volume;
use super::*;
use crate::model::names::{FINALIZER_CLONING_PROTECTION, FINALIZER_PROVISIONER_SNAPSHOT_SOURCE};

/// A Bound claim `src` of 1Gi bound both ways to the Bound volume `pv-src`
/// (handle `vol-src`) of `mode`.
fn bound_source(r: &mut Rig<Provisioner>, mode: VolumeMode) {
    let mut src = claim("src");
    src.metadata.annotations.clear();
    src.spec.volume_name = Some("pv-src".into());
    src.status.phase = Some(PvcPhase::Bound);
    let Object::Pvc(src) = r.create(Object::Pvc(src)) else {
        unreachable!()
    };
    let mut v = bound_volume(PvPhase::Bound);
    v.metadata.name = "pv-src".into();
    v.spec.csi.as_mut().unwrap().volume_handle = "vol-src".into();
    v.spec.volume_mode = Some(mode);
    v.spec.claim_ref = Some(ObjectReference {
        namespace: "default".into(),
        name: "src".into(),
        uid: src.metadata.uid.clone(),
        ..Default::default()
    });
    r.create(Object::Pv(v));
}

fn cloning(name: &str) -> PersistentVolumeClaim {
    let mut c = claim(name);
    c.spec.data_source = Some(TypedLocalObjectReference {
        api_group: None,
        kind: "PersistentVolumeClaim".into(),
        name: "src".into(),
    });
    c
}

/// The finalizers of the object of `kind` named `name` in "default".
fn finalizers(r: &Rig<Provisioner>, kind: Kind, name: &str) -> Vec<String> {
    r.get(kind, "default", name)
        .map(|o| o.meta().finalizers.clone())
        .unwrap_or_default()
}

/// A rig whose CreateVolume answers ABORTED while `busy` is set.
fn rig_with_busy_driver(snapshots: bool) -> (Rig<Provisioner>, Rc<Cell<bool>>) {
    let mut config = ProvisionerConfig::new(DRIVER);
    config.snapshots = snapshots;
    let mut r = Rig::new(Provisioner::new(config));
    let busy = Rc::new(Cell::new(true));
    let b = busy.clone();
    r.answer_csi(move |call| match call {
        Request::CreateVolume(_) if b.get() => Err(Status::new(Code::Aborted, "busy")),
        Request::CreateVolume(c) => created(c),
        other => Err(Status::unimplemented(other.method())),
    });
    class(&mut r, &[]);
    (r, busy)
}

#[test]
fn b1_8_b2_a_clone_names_its_volume_and_other_sources_are_left_to_a_populator() {
    let mut r = rig();
    class(&mut r, &[]);
    bound_source(&mut r, VolumeMode::Filesystem);
    let mut c = claim("copy");
    c.spec.data_source = Some(TypedLocalObjectReference {
        api_group: None,
        kind: "PersistentVolumeClaim".into(),
        name: "src".into(),
    });
    r.create(Object::Pvc(c));
    assert_eq!(
        creates(&r)[0].content_source,
        Some(driver::ContentSource::Volume("vol-src".into()))
    );
    // B1.8: a data source of another kind is left to a populator.
    let mut c = claim("odd");
    c.spec.data_source = Some(TypedLocalObjectReference {
        api_group: Some("example.com".into()),
        kind: "Widget".into(),
        name: "w".into(),
    });
    r.create(Object::Pvc(c));
    assert_eq!(creates(&r).len(), 1);
    assert!(failures(&r).is_empty(), "{:?}", failures(&r));
    assert!(r.events.iter().any(|e| e.reason == reason::PROVISIONING
        && e.message == "Assuming an external populator will provision the volume"));
}

/// A provisioner that watches the snapshot kinds.
fn snapshot_rig() -> Rig<Provisioner> {
    let mut config = ProvisionerConfig::new(DRIVER);
    config.snapshots = true;
    let mut r = Rig::new(Provisioner::new(config));
    r.answer_csi(|call| match call {
        Request::CreateVolume(c) => created(c),
        other => Err(Status::unimplemented(other.method())),
    });
    class(&mut r, &[]);
    r
}

/// A ready snapshot `s1` of `bytes`, bound to its content with handle `snap-h`.
fn ready_snapshot(r: &mut Rig<Provisioner>, bytes: u64) {
    let mut s = VolumeSnapshot::of_claim("default", "s1", "src", "snaps");
    s.metadata.uid = "snap-uid".into();
    s.status = Some(VolumeSnapshotStatus {
        bound_volume_snapshot_content_name: Some("snapcontent-snap-uid".into()),
        ready_to_use: Some(true),
        restore_size: Some(Quantity::from_bytes(bytes)),
        ..Default::default()
    });
    let Object::Snapshot(s) = r.create(Object::Snapshot(s)) else {
        unreachable!()
    };
    let mut c = VolumeSnapshotContent::new("snapcontent-snap-uid");
    c.spec.driver = DRIVER.into();
    c.spec.source.volume_handle = Some("vol-src".into());
    c.spec.volume_snapshot_ref = ObjectReference {
        namespace: "default".into(),
        name: "s1".into(),
        uid: s.metadata.uid.clone(),
        ..Default::default()
    };
    c.status = Some(VolumeSnapshotContentStatus {
        snapshot_handle: Some("snap-h".into()),
        ready_to_use: Some(true),
        ..Default::default()
    });
    r.create(Object::Content(c));
}

fn restoring(name: &str) -> PersistentVolumeClaim {
    let mut c = claim(name);
    c.spec.data_source = Some(TypedLocalObjectReference {
        api_group: Some("snapshot.storage.k8s.io".into()),
        kind: "VolumeSnapshot".into(),
        name: "s1".into(),
    });
    c
}

#[test]
fn b2_a_claim_restored_from_a_ready_snapshot_names_its_handle() {
    let mut r = snapshot_rig();
    r.create(Object::Pvc(restoring("restore")));
    assert!(creates(&r).is_empty());
    assert!(
        failures(&r)
            .iter()
            .any(|m| m.contains("volumesnapshots.snapshot.storage.k8s.io \"s1\" not found")),
        "{:?}",
        failures(&r)
    );
    // The snapshot appears: the claim is provisioned from it (no backoff
    // wait: the snapshot's arrival marks the claim).
    ready_snapshot(&mut r, 1 << 30);
    r.advance(2_000);
    assert_eq!(
        creates(&r)[0].content_source,
        Some(driver::ContentSource::Snapshot("snap-h".into()))
    );
}

#[test]
fn b2_a_restore_smaller_than_its_snapshot_or_of_another_group_is_refused() {
    let mut r = snapshot_rig();
    ready_snapshot(&mut r, 2 << 30);
    r.create(Object::Pvc(restoring("small")));
    assert!(creates(&r).is_empty());
    assert!(
        failures(&r).iter().any(|m| m.contains("requested volume size 1073741824 is less than the size 2147483648 for the source snapshot s1")),
        "{:?}",
        failures(&r)
    );
    let mut c = restoring("wrong-group");
    c.spec.data_source.as_mut().unwrap().api_group = Some("example.com".into());
    r.create(Object::Pvc(c));
    assert!(
        failures(&r)
            .iter()
            .any(|m| m.contains("does not belong to the right APIGroup"))
    );
}

/// --prevent-volume-mode-conversion (on by default): a Filesystem
/// snapshot is not restored as a Block volume unless its content carries
/// the allow-volume-mode-change annotation.
#[test]
fn b2_a_restore_that_changes_the_volume_mode_needs_the_contents_permission() {
    let mut r = snapshot_rig();
    ready_snapshot(&mut r, 1 << 30);
    let key = ObjectKey::new(Kind::VolumeSnapshotContent, "", "snapcontent-snap-uid");
    let Some(Object::Content(mut c)) = r.get(key.kind, "", &key.name).cloned() else {
        panic!("the content is there")
    };
    c.spec.source_volume_mode = Some("Filesystem".into());
    r.user(ApiCall::Update(Object::Content(c.clone())));
    let mut block = restoring("raw");
    block.spec.volume_mode = Some(VolumeMode::Block);
    r.create(Object::Pvc(block));
    assert!(creates(&r).is_empty(), "not restored as Block");
    assert!(
        failures(&r).iter().any(|m| m.contains(
            "requested volume default/raw modifies the mode of the source volume but does not have permission to do so. snapshot.storage.kubernetes.io/allow-volume-mode-change annotation is not present on snapshotcontent snapcontent-snap-uid"
        )),
        "{:?}",
        failures(&r)
    );
    // The same mode needs no permission.
    r.create(Object::Pvc(restoring("fs")));
    assert_eq!(creates(&r).len(), 1);
    // The permission, given by whoever may write contents: restored.
    let Some(Object::Content(mut c)) = r.get(key.kind, "", &key.name).cloned() else {
        panic!("the content is there")
    };
    c.metadata
        .annotations
        .insert(names::ANN_ALLOW_VOLUME_MODE_CHANGE.into(), "true".into());
    r.user(ApiCall::Update(Object::Content(c)));
    r.advance(600_000);
    assert_eq!(creates(&r).len(), 2, "the Block restore too");
}

#[test]
fn b2_a_clone_source_is_checked_as_upstream_checks_it() {
    type Change = fn(&mut Rig<Provisioner>);
    let cases: [(&str, Change, &str); 6] = [
        (
            "not bound",
            |r| {
                let Some(Object::Pvc(mut s)) = r
                    .get(Kind::PersistentVolumeClaim, "default", "src")
                    .cloned()
                else {
                    unreachable!()
                };
                s.status.phase = Some(PvcPhase::Pending);
                r.user(ApiCall::UpdateStatus(Object::Pvc(s)));
            },
            "the PVC DataSource src must have a status of Bound",
        ),
        (
            "being deleted",
            |r| {
                let Some(Object::Pvc(mut s)) = r
                    .get(Kind::PersistentVolumeClaim, "default", "src")
                    .cloned()
                else {
                    unreachable!()
                };
                s.metadata
                    .finalizers
                    .push("kubernetes.io/pvc-protection".into());
                r.user(ApiCall::Update(Object::Pvc(s)));
                r.user(ApiCall::Delete(ObjectKey::new(
                    Kind::PersistentVolumeClaim,
                    "default",
                    "src",
                )));
            },
            "the PVC DataSource src is currently being deleted",
        ),
        (
            "bigger than the clone",
            |r| {
                let Some(Object::Pvc(mut s)) = r
                    .get(Kind::PersistentVolumeClaim, "default", "src")
                    .cloned()
                else {
                    unreachable!()
                };
                s.spec
                    .resources
                    .requests
                    .insert("storage".into(), Quantity::parse("2Gi").unwrap());
                r.user(ApiCall::Update(Object::Pvc(s)));
            },
            "new PVC request must be greater than or equal in size to the specified PVC data source, requested 1073741824 but source is 2147483648",
        ),
        (
            "of another driver",
            |r| {
                let Some(Object::Pv(mut v)) = r.get(Kind::PersistentVolume, "", "pv-src").cloned()
                else {
                    unreachable!()
                };
                v.spec.csi.as_mut().unwrap().driver = "other.csi.io".into();
                r.user(ApiCall::Update(Object::Pv(v)));
            },
            "claim in dataSource not bound or invalid",
        ),
        (
            "bound to another claim",
            |r| {
                let Some(Object::Pv(mut v)) = r.get(Kind::PersistentVolume, "", "pv-src").cloned()
                else {
                    unreachable!()
                };
                v.spec.claim_ref.as_mut().unwrap().uid = "someone-else".into();
                r.user(ApiCall::Update(Object::Pv(v)));
            },
            "claim in dataSource not bound or invalid",
        ),
        (
            "a block volume",
            |r| {
                let Some(Object::Pv(mut v)) = r.get(Kind::PersistentVolume, "", "pv-src").cloned()
                else {
                    unreachable!()
                };
                v.spec.volume_mode = Some(VolumeMode::Block);
                r.user(ApiCall::Update(Object::Pv(v)));
            },
            "Source is Block, but new PVC requested Filesystem",
        ),
    ];
    for (what, change, message) in cases {
        let mut r = rig();
        class(&mut r, &[]);
        bound_source(&mut r, VolumeMode::Filesystem);
        change(&mut r);
        r.create(Object::Pvc(cloning("copy")));
        assert!(creates(&r).is_empty(), "a source {what} is not cloned");
        assert!(
            failures(&r).iter().any(|m| m.contains(message)),
            "a source {what}: {:?}",
            failures(&r)
        );
        assert!(
            finalizers(&r, Kind::PersistentVolumeClaim, "src")
                .iter()
                .all(|f| f != FINALIZER_CLONING_PROTECTION),
            "a source {what} is not held"
        );
    }
}

#[test]
fn b5_6_a_clone_source_is_held_until_every_copy_of_it_is_made() {
    let (mut r, busy) = rig_with_busy_driver(false);
    bound_source(&mut r, VolumeMode::Filesystem);
    let Object::Pvc(copy) = r.create(Object::Pvc(cloning("copy"))) else {
        unreachable!()
    };
    // Held before the first CreateVolume, which does not settle.
    assert_eq!(creates(&r).len(), 1);
    let held =
        |w: &ApiCall| matches!(w, ApiCall::Update(Object::Pvc(s)) if s.metadata.name == "src");
    assert_eq!(r.writes.iter().filter(|w| held(w)).count(), 1);
    assert_eq!(
        finalizers(&r, Kind::PersistentVolumeClaim, "src"),
        [FINALIZER_CLONING_PROTECTION]
    );
    // The clone is deleted while its CreateVolume may still run: the
    // retry goes on, and so does the hold.
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::PersistentVolumeClaim,
        "default",
        "copy",
    )));
    r.advance(2_000);
    assert_eq!(creates(&r).len(), 2);
    assert_eq!(
        finalizers(&r, Kind::PersistentVolumeClaim, "src"),
        [FINALIZER_CLONING_PROTECTION]
    );
    // Another provisioner's Pending clone of it counts too.
    let mut theirs = cloning("theirs");
    theirs.metadata.annotations.clear();
    let Object::Pvc(theirs) = r.create(Object::Pvc(theirs)) else {
        unreachable!()
    };
    busy.set(false);
    r.advance(5_000);
    assert!(pv(&r, &format!("pvc-{}", copy.metadata.uid)).is_some());
    assert_eq!(
        finalizers(&r, Kind::PersistentVolumeClaim, "src"),
        [FINALIZER_CLONING_PROTECTION],
        "held while another clone of it is Pending"
    );
    let mut bound = theirs;
    bound.status.phase = Some(PvcPhase::Bound);
    r.user(ApiCall::UpdateStatus(Object::Pvc(bound)));
    assert!(finalizers(&r, Kind::PersistentVolumeClaim, "src").is_empty());
}

#[test]
fn b5_6_a_snapshot_is_held_while_restored_and_serves_a_restore_begun_before_its_deletion() {
    let (mut r, busy) = rig_with_busy_driver(true);
    ready_snapshot(&mut r, 1 << 30);
    let Object::Pvc(restore) = r.create(Object::Pvc(restoring("restore"))) else {
        unreachable!()
    };
    assert_eq!(creates(&r).len(), 1);
    assert_eq!(
        finalizers(&r, Kind::VolumeSnapshot, "s1"),
        [FINALIZER_PROVISIONER_SNAPSHOT_SOURCE]
    );
    // The snapshot is deleted while held: restores go on, as upstream's
    // (one begun before, and one asked for now).
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeSnapshot,
        "default",
        "s1",
    )));
    assert!(
        r.get(Kind::VolumeSnapshot, "default", "s1")
            .is_some_and(|s| s.meta().deleting())
    );
    let Object::Pvc(late) = r.create(Object::Pvc(restoring("late"))) else {
        unreachable!()
    };
    assert_eq!(creates(&r).len(), 2);
    busy.set(false);
    r.advance(2_000);
    for c in [&restore, &late] {
        assert!(pv(&r, &format!("pvc-{}", c.metadata.uid)).is_some());
    }
    // Released once both have their volumes: the deletion completes.
    assert!(r.get(Kind::VolumeSnapshot, "default", "s1").is_none());
    assert!(
        failures(&r).iter().all(|m| !m.contains("being deleted")),
        "{:?}",
        failures(&r)
    );
}

#[test]
fn b5_6_a_snapshot_being_deleted_without_the_hold_is_not_restored() {
    let mut r = snapshot_rig();
    ready_snapshot(&mut r, 1 << 30);
    let Some(Object::Snapshot(mut s)) = r.get(Kind::VolumeSnapshot, "default", "s1").cloned()
    else {
        unreachable!()
    };
    s.metadata
        .finalizers
        .push(names::FINALIZER_SNAPSHOT_BOUND.into());
    r.user(ApiCall::Update(Object::Snapshot(s)));
    r.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeSnapshot,
        "default",
        "s1",
    )));
    r.create(Object::Pvc(restoring("restore")));
    assert!(creates(&r).is_empty());
    assert!(
        failures(&r)
            .iter()
            .any(|m| m.contains("snapshot s1 is being deleted")),
        "{:?}",
        failures(&r)
    );
    assert_eq!(
        finalizers(&r, Kind::VolumeSnapshot, "s1"),
        [names::FINALIZER_SNAPSHOT_BOUND]
    );
}

#[test]
fn b2_a_data_source_ref_restores_as_a_data_source_does_and_another_namespace_is_refused() {
    let mut r = snapshot_rig();
    ready_snapshot(&mut r, 1 << 30);
    let mut c = claim("by-ref");
    c.spec.data_source_ref = Some(TypedObjectReference {
        api_group: Some("snapshot.storage.k8s.io".into()),
        kind: "VolumeSnapshot".into(),
        name: "s1".into(),
        namespace: None,
    });
    r.create(Object::Pvc(c));
    assert_eq!(
        creates(&r)[0].content_source,
        Some(driver::ContentSource::Snapshot("snap-h".into()))
    );
    assert_eq!(
        finalizers(&r, Kind::VolumeSnapshot, "s1"),
        Vec::<String>::new(),
        "held while restored, released once its volume is made"
    );
    let mut c = claim("elsewhere");
    c.spec.data_source_ref = Some(TypedObjectReference {
        api_group: Some("snapshot.storage.k8s.io".into()),
        kind: "VolumeSnapshot".into(),
        name: "s1".into(),
        namespace: Some("other".into()),
    });
    r.create(Object::Pvc(c));
    assert_eq!(creates(&r).len(), 1);
    assert!(failures(&r).contains(
        &"dataSourceRef namespace specified but the CrossNamespaceVolumeDataSource feature is disabled"
    ));
}

#[test]
fn b3_2_a_clone_the_driver_did_not_fill_from_its_source_is_deleted_and_tried_again() {
    let mut r = rig();
    let filled = Rc::new(Cell::new(false));
    let f = filled.clone();
    r.answer_csi(move |call| match call {
        Request::CreateVolume(c) => Ok(Response::Volume(driver::Volume {
            volume_id: format!("vol-{}", c.name),
            capacity_bytes: c.capacity.required_bytes,
            volume_context: Default::default(),
            accessible_topology: vec![],
            content_source: if f.get() {
                c.content_source.clone()
            } else {
                None
            },
        })),
        Request::DeleteVolume(_) => Ok(Response::Empty),
        other => Err(Status::unimplemented(other.method())),
    });
    class(&mut r, &[]);
    bound_source(&mut r, VolumeMode::Filesystem);
    let Object::Pvc(copy) = r.create(Object::Pvc(cloning("copy"))) else {
        unreachable!()
    };
    let pv_name = format!("pvc-{}", copy.metadata.uid);
    assert!(pv(&r, &pv_name).is_none());
    assert!(
        failures(&r)
            .iter()
            .any(|m| m.ends_with(": volume content source missing")),
        "{:?}",
        failures(&r)
    );
    let deleted: Vec<&str> = r
        .csi_calls
        .iter()
        .filter_map(|(_, c)| match c {
            Request::DeleteVolume(d) => Some(d.volume_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, [format!("vol-{pv_name}")]);
    filled.set(true);
    r.advance(5_000);
    assert!(pv(&r, &pv_name).is_some());
}
