//! The provisioner's finer rules: which volumes it owns (B5.1), when the
//! finalizer is added (B5.2), which attachment blocks a delete (B5.4), the
//! legacy fstype parameter, clones from a claim, and the PV built from
//! what the driver answered (B3.1).

use super::*;

/// A Released, Delete volume with the given ownership marks and no finalizer.
fn foreign(
    r: &mut Rig<Provisioner>,
    provisioned_by: Option<&str>,
    migrated_to: Option<&str>,
    csi_driver: &str,
) {
    let mut v = PersistentVolume::new("pvc-1");
    v.spec.persistent_volume_reclaim_policy = Some(ReclaimPolicy::Delete);
    v.spec.csi = Some(CsiSource {
        driver: csi_driver.into(),
        volume_handle: "vol-1".into(),
        ..Default::default()
    });
    let ann = &mut v.metadata.annotations;
    if let Some(p) = provisioned_by {
        ann.insert(names::ANN_PROVISIONED_BY.into(), p.into());
    }
    if let Some(m) = migrated_to {
        ann.insert(names::ANN_MIGRATED_TO.into(), m.into());
    }
    v.status.phase = Some(PvPhase::Released);
    r.create(Object::Pv(v));
}

fn deletes(r: &Rig<Provisioner>) -> usize {
    r.csi_calls
        .iter()
        .filter(|(_, c)| matches!(c, Request::DeleteVolume(_)))
        .count()
}

#[test]
fn b5_1_only_volumes_this_provisioner_owns_are_deleted() {
    // (provisioned-by, migrated-to, spec.csi.driver, owned)
    let cases = [
        (Some("other.csi.io"), None, DRIVER, false),
        (Some(DRIVER), None, "other.csi.io", true),
        (None, Some(DRIVER), "other.csi.io", true),
        (None, Some("other.csi.io"), "other.csi.io", false),
        (None, None, DRIVER, true),
        (None, None, "other.csi.io", false),
    ];
    for (by, migrated, csi, owned) in cases {
        let mut r = rig();
        foreign(&mut r, by, migrated, csi);
        assert_eq!(
            deletes(&r),
            usize::from(owned),
            "provisioned-by {by:?}, migrated-to {migrated:?}, csi driver {csi}"
        );
    }
}

fn bound_volume(phase: PvPhase) -> PersistentVolume {
    let mut v = PersistentVolume::new("pvc-1");
    v.spec.persistent_volume_reclaim_policy = Some(ReclaimPolicy::Delete);
    v.spec.csi = Some(CsiSource {
        driver: DRIVER.into(),
        volume_handle: "vol-1".into(),
        ..Default::default()
    });
    v.metadata
        .annotations
        .insert(names::ANN_PROVISIONED_BY.into(), DRIVER.into());
    v.status.phase = Some(phase);
    v
}

#[test]
fn b5_2_the_finalizer_goes_only_on_bound_volumes_not_being_deleted() {
    let mut r = rig();
    r.create(Object::Pv(bound_volume(PvPhase::Available)));
    assert!(r.writes.is_empty(), "an Available volume: {:?}", r.writes);
    let mut r = rig();
    r.create(Object::Pv(bound_volume(PvPhase::Bound)));
    assert!(
        pv(&r, "pvc-1")
            .unwrap()
            .metadata
            .has_finalizer(names::FINALIZER_EXTERNAL_PROVISIONER)
    );
    // Bound, but being deleted (another finalizer holds it): left alone.
    let mut r = rig();
    let mut v = bound_volume(PvPhase::Bound);
    v.metadata
        .finalizers
        .push("kubernetes.io/pv-protection".into());
    r.store.apply(r.now, &ApiCall::Create(Object::Pv(v)));
    r.store.apply(
        r.now,
        &ApiCall::Delete(ObjectKey::new(Kind::PersistentVolume, "", "pvc-1")),
    );
    let Some(Object::Pv(v)) = r.get(Kind::PersistentVolume, "", "pvc-1").cloned() else {
        panic!()
    };
    assert!(v.metadata.deleting());
    r.input(Input::Watch(crate::control::Watch::Applied(Object::Pv(v))));
    assert!(r.writes.is_empty(), "a deleting volume: {:?}", r.writes);
}

#[test]
fn b5_4_an_attachment_of_another_volume_does_not_block_a_delete() {
    let mut r = rig();
    r.create(Object::Va(VolumeAttachment::new(
        "csi-y",
        DRIVER,
        "node-a",
        "pvc-other",
    )));
    released(&mut r, ReclaimPolicy::Delete);
    assert_eq!(deletes(&r), 1);
    assert!(!r.reasons().contains(&reason::VOLUME_FAILED_DELETE));
}

#[test]
fn b2_6_the_legacy_fstype_parameter_is_used_and_conflicts_with_the_prefixed_one() {
    let mut r = rig();
    class(&mut r, &[("fstype", "xfs")]);
    r.create(Object::Pvc(claim("data")));
    assert!(
        matches!(&creates(&r)[0].capabilities[0].access_type, driver::AccessType::Mount { fs_type, .. } if fs_type == "xfs"),
        "{:?}",
        creates(&r)
    );
    let mut r = rig();
    class(
        &mut r,
        &[("fstype", "xfs"), ("csi.storage.k8s.io/fstype", "ext4")],
    );
    r.create(Object::Pvc(claim("data")));
    assert!(creates(&r).is_empty());
    assert!(
        failures(&r)
            .iter()
            .any(|m| m.contains("cannot both be set")),
        "{:?}",
        failures(&r)
    );
}

#[test]
fn b1_8_b2_a_clone_names_its_volume_and_other_sources_are_left_to_a_populator() {
    let mut r = rig();
    class(&mut r, &[]);
    let mut v = bound_volume(PvPhase::Bound);
    v.metadata.name = "pv-src".into();
    v.spec.csi.as_mut().unwrap().volume_handle = "vol-src".into();
    r.create(Object::Pv(v));
    let mut src = PersistentVolumeClaim::new("default", "src");
    src.spec.volume_name = Some("pv-src".into());
    r.create(Object::Pvc(src));
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

#[test]
fn b3_1_a_volume_reported_without_a_size_gets_the_size_asked_for() {
    let mut r = rig();
    r.answer_csi(|call| match call {
        Request::CreateVolume(c) => Ok(Response::Volume(driver::Volume {
            volume_id: format!("vol-{}", c.name),
            capacity_bytes: 0,
            volume_context: Default::default(),
            accessible_topology: vec![],
            content_source: None,
        })),
        other => Err(Status::unimplemented(other.method())),
    });
    class(&mut r, &[]);
    let Object::Pvc(c) = r.create(Object::Pvc(claim("data"))) else {
        unreachable!()
    };
    let v = pv(&r, &format!("pvc-{}", c.metadata.uid)).expect("a PV");
    assert_eq!(v.capacity().unwrap().bytes(), 1 << 30);
}

/// A provisioner whose driver reports `topology` for every volume.
fn topology_rig(enabled: bool, topology: Vec<driver::Topology>) -> Rig<Provisioner> {
    let mut config = ProvisionerConfig::new(DRIVER);
    config.topology = enabled;
    let mut r = Rig::new(Provisioner::new(config));
    r.answer_csi(move |call| match call {
        Request::CreateVolume(c) => Ok(Response::Volume(driver::Volume {
            volume_id: format!("vol-{}", c.name),
            capacity_bytes: c.capacity.required_bytes,
            volume_context: Default::default(),
            accessible_topology: topology.clone(),
            content_source: None,
        })),
        other => Err(Status::unimplemented(other.method())),
    });
    class(&mut r, &[]);
    r
}

#[test]
fn b3_1_node_affinity_only_with_topology_on_and_a_reported_segment() {
    let zone: driver::Topology =
        [("topology.volplane.csi.io/zone".to_string(), "a".to_string())].into();
    for (enabled, reported, affinity) in [
        (true, vec![zone.clone()], true),
        (false, vec![zone.clone()], false),
        (true, vec![], false),
    ] {
        let mut r = topology_rig(enabled, reported.clone());
        let Object::Pvc(c) = r.create(Object::Pvc(claim("data"))) else {
            unreachable!()
        };
        let v = pv(&r, &format!("pvc-{}", c.metadata.uid)).expect("a PV");
        assert_eq!(
            v.spec.node_affinity.is_some(),
            affinity,
            "topology {enabled}, reported {reported:?}"
        );
    }
}
