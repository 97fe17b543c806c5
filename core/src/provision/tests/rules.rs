//! The provisioner's finer rules: which volumes it owns (B5.1), when the
//! finalizer is added (B5.2), which attachment blocks a delete (B5.4), the
//! legacy fstype parameter, and the PV built from what the driver
//! answered (B3.1).

use super::*;
use crate::control::Input;

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

pub(super) fn bound_volume(phase: PvPhase) -> PersistentVolume {
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
    r.input(Input::Watch(crate::control::Watch::Applied(
        Object::Pv(v).into(),
    )));
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
    registered_node(&mut r, "node-1", "topology.volplane.csi.io/zone", "a");
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

/// A provisioner with topology over two zones (`node-a` in zone-a,
/// `node-b` in zone-b), a WaitForFirstConsumer class allowing both, and a
/// claim whose selected node is `node`.
fn zoned(strict: bool, node: &str) -> Rig<Provisioner> {
    let mut config = ProvisionerConfig::new(DRIVER);
    config.topology = true;
    config.strict_topology = strict;
    let mut r = Rig::new(Provisioner::new(config));
    r.answer_csi(|call| match call {
        Request::CreateVolume(c) => created(c),
        other => Err(Status::unimplemented(other.method())),
    });
    let key = "topology.volplane.io/zone";
    let mut sc = StorageClass::new("fast", DRIVER);
    sc.volume_binding_mode = Some(BindingMode::WaitForFirstConsumer);
    sc.allowed_topologies = vec![TopologySelectorTerm {
        match_label_expressions: vec![TopologySelectorLabelRequirement {
            key: key.into(),
            values: vec!["zone-b".into(), "zone-a".into()],
        }],
    }];
    r.create(Object::Class(sc));
    for (name, zone) in [("node-a", "zone-a"), ("node-b", "zone-b")] {
        registered_node(&mut r, name, key, zone);
    }
    let mut c = claim("data");
    c.metadata
        .annotations
        .insert(names::ANN_SELECTED_NODE.into(), node.into());
    r.create(Object::Pvc(c));
    r
}

fn zones_of(ts: &[driver::Topology]) -> Vec<&str> {
    ts.iter()
        .map(|t| t.get("topology.volplane.io/zone").unwrap_or("?"))
        .collect()
}

#[test]
fn b2_topology_the_class_allows_both_zones_and_the_selected_one_leads() {
    let r = zoned(false, "node-b");
    let calls = creates(&r);
    let a = calls[0].accessibility.as_ref().expect("requirements");
    assert_eq!(zones_of(&a.requisite), ["zone-a", "zone-b"]);
    assert_eq!(zones_of(&a.preferred), ["zone-b", "zone-a"]);
}

#[test]
fn b2_topology_strict_asks_for_the_selected_nodes_zone_alone() {
    let r = zoned(true, "node-a");
    let calls = creates(&r);
    let a = calls[0].accessibility.as_ref().expect("requirements");
    assert_eq!(zones_of(&a.requisite), ["zone-a"]);
    assert_eq!(zones_of(&a.preferred), ["zone-a"]);
}

#[test]
fn b2_topology_a_selected_node_that_is_gone_is_handed_back_to_the_scheduler() {
    let r = zoned(false, "node-gone");
    assert!(creates(&r).is_empty(), "no CreateVolume");
    assert_eq!(
        failures(&r),
        [
            "error generating accessibility requirements: csinodes.storage.k8s.io \"node-gone\" not found"
        ]
    );
    let Some(Object::Pvc(after)) = r.get(Kind::PersistentVolumeClaim, "default", "data") else {
        panic!("the claim is there")
    };
    assert!(!after.metadata.has_annotation(names::ANN_SELECTED_NODE));
}

/// --volume-name-prefix, --volume-name-uuid-length and
/// --extra-create-metadata, as external-provisioner names and describes
/// its volumes.
#[test]
fn b2_volume_names_and_extra_metadata_follow_the_flags() {
    let mut config = ProvisionerConfig::new(DRIVER);
    config.volume_name_prefix = "vol".into();
    config.volume_name_uuid_length = Some(8);
    config.extra_create_metadata = true;
    let uid = "1234abcd-5678-90ef-aaaa-bbbbccccdddd";
    assert_eq!(config.volume_name(uid), "vol-1234abcd");
    let mut r = Rig::new(Provisioner::new(config));
    r.answer_csi(|call| match call {
        Request::CreateVolume(c) => created(c),
        other => Err(Status::unimplemented(other.method())),
    });
    class(&mut r, &[("type", "fast")]);
    let Object::Pvc(c) = r.create(Object::Pvc(claim("data"))) else {
        unreachable!()
    };
    let calls = creates(&r);
    let name = calls[0].name.clone();
    let plain: String = c
        .metadata
        .uid
        .chars()
        .filter(|c| *c != '-')
        .take(8)
        .collect();
    assert_eq!(name, format!("vol-{plain}"));
    let p = &calls[0].parameters;
    assert_eq!(p.get(names::PARAM_PVC_NAME), Some("data"));
    assert_eq!(p.get(names::PARAM_PVC_NAMESPACE), Some("default"));
    assert_eq!(p.get(names::PARAM_PV_NAME), Some(name.as_str()));
    assert_eq!(p.get("type"), Some("fast"));
    assert!(pv(&r, &name).is_some(), "the PV has the volume's name");
    let ProvisionerConfig {
        volume_name_prefix, ..
    } = ProvisionerConfig::new(DRIVER);
    assert_eq!(volume_name_prefix, "pvc", "upstream's default");
}

/// `--controller-publish-readonly`: a claim whose only access mode is
/// ReadOnlyMany gets a read-only PV; any other, or the flag off, does not.
#[test]
fn b3_controller_publish_readonly_marks_read_only_many_volumes() {
    for (flag, modes, read_only) in [
        (true, vec![AccessMode::ReadOnlyMany], true),
        (
            true,
            vec![AccessMode::ReadOnlyMany, AccessMode::ReadWriteMany],
            false,
        ),
        (true, vec![AccessMode::ReadWriteOnce], false),
        (false, vec![AccessMode::ReadOnlyMany], false),
    ] {
        let mut config = ProvisionerConfig::new(DRIVER);
        config.controller_publish_readonly = flag;
        let mut r = Rig::new(Provisioner::new(config));
        r.answer_csi(|call| match call {
            Request::CreateVolume(c) => created(c),
            other => Err(Status::unimplemented(other.method())),
        });
        class(&mut r, &[]);
        let mut c = claim("data");
        c.spec.access_modes = modes.clone();
        let Object::Pvc(c) = r.create(Object::Pvc(c)) else {
            unreachable!()
        };
        let pv = pv(&r, &format!("pvc-{}", c.metadata.uid)).expect("provisioned");
        assert_eq!(
            pv.spec.csi.unwrap().read_only,
            read_only,
            "{flag} {modes:?}"
        );
    }
}
