//! The driver's vocabulary: names as CSI spells them, what a request is
//! about, and the invariants of its state, each named.

use super::*;
use crate::driver::state::{
    InFlight, NodeVolume, Publication, StageRecord, TargetRecord, VolumeRecord,
};

#[test]
fn access_modes_are_named_as_csi_spells_them_and_read_only_where_they_only_read() {
    let table = [
        (AccessMode::SingleNodeWriter, "SINGLE_NODE_WRITER", false),
        (
            AccessMode::SingleNodeReaderOnly,
            "SINGLE_NODE_READER_ONLY",
            true,
        ),
        (
            AccessMode::MultiNodeReaderOnly,
            "MULTI_NODE_READER_ONLY",
            true,
        ),
        (
            AccessMode::MultiNodeSingleWriter,
            "MULTI_NODE_SINGLE_WRITER",
            false,
        ),
        (
            AccessMode::MultiNodeMultiWriter,
            "MULTI_NODE_MULTI_WRITER",
            false,
        ),
        (
            AccessMode::SingleNodeSingleWriter,
            "SINGLE_NODE_SINGLE_WRITER",
            false,
        ),
        (
            AccessMode::SingleNodeMultiWriter,
            "SINGLE_NODE_MULTI_WRITER",
            false,
        ),
    ];
    assert_eq!(table.len(), AccessMode::ALL.len());
    for (mode, name, read_only) in table {
        assert_eq!(mode.csi_name(), name);
        assert_eq!(mode.read_only(), read_only, "{name}");
    }
}

#[test]
fn capabilities_print_their_type_filesystem_and_mode() {
    let mut mount = Capability::mount(AccessMode::SingleNodeWriter);
    assert_eq!(mount.to_string(), "mount/SINGLE_NODE_WRITER");
    if let AccessType::Mount { fs_type, .. } = &mut mount.access_type {
        *fs_type = "xfs".into();
    }
    assert_eq!(mount.to_string(), "mount(xfs)/SINGLE_NODE_WRITER");
    let block = Capability::block(AccessMode::MultiNodeMultiWriter);
    assert!(block.access_type.is_block());
    assert!(!mount.access_type.is_block());
    assert_eq!(block.to_string(), "block/MULTI_NODE_MULTI_WRITER");
}

#[test]
fn a_capacity_range_admits_its_bounds_and_nothing_outside() {
    let r = CapacityRange {
        required_bytes: 10,
        limit_bytes: 20,
    };
    assert!(r.admits(10) && r.admits(20) && r.admits(15));
    assert!(!r.admits(9) && !r.admits(21));
    let open = CapacityRange {
        required_bytes: 10,
        limit_bytes: 0,
    };
    assert!(open.admits(u64::MAX));
}

#[test]
fn secrets_never_print() {
    let s = Secrets([("password".to_string(), "hunter2".to_string())].into());
    assert_eq!(format!("{s:?}"), "<1 secret(s) redacted>");
}

#[test]
fn plans_have_distinct_kind_names_for_logs_and_crash_hooks() {
    let v = Volume {
        volume_id: "v".into(),
        capacity_bytes: 0,
        volume_context: Attributes::new(),
        accessible_topology: vec![],
        content_source: None,
    };
    let Request::NodeStage(s) = stage("v") else {
        unreachable!()
    };
    let stage_plan = StagePlan {
        volume_id: "v".into(),
        staging_path: s.staging_target_path,
        capability: s.capability,
        publish_context: Attributes::new(),
        volume_context: Attributes::new(),
        secrets: Secrets::default(),
    };
    let plans = [
        (
            Plan::DeleteVolume {
                volume: v.clone(),
                secrets: Secrets::default(),
            },
            "delete",
        ),
        (Plan::Stage(stage_plan.clone()), "stage"),
        (Plan::Unstage(stage_plan), "unstage"),
        (
            Plan::DeleteSnapshot {
                snapshot: cut(
                    &SnapshotPlan {
                        name: "s".into(),
                        source: v.clone(),
                        parameters: Attributes::new(),
                        secrets: Secrets::default(),
                    },
                    true,
                ),
                secrets: Secrets::default(),
            },
            "delete-snapshot",
        ),
        (
            Plan::VolumeStats {
                volume_id: "v".into(),
                volume_path: "/p".into(),
                block: false,
            },
            "volume-stats",
        ),
    ];
    for (plan, kind) in plans {
        assert_eq!(plan.kind(), kind);
    }
}

#[test]
fn a_request_names_the_volume_and_path_it_is_about() {
    let id = "vol-1".to_string();
    let requests = [
        (create(&id, 1), Some(id.as_str()), None),
        (
            Request::ValidateCapabilities(ValidateCapabilities {
                volume_id: id.clone(),
                volume_context: Attributes::new(),
                capabilities: vec![],
                parameters: Attributes::new(),
                mutable_parameters: Attributes::new(),
                secrets: Secrets::default(),
            }),
            Some(id.as_str()),
            None,
        ),
        (
            Request::ControllerExpand(ControllerExpand {
                volume_id: id.clone(),
                capacity: CapacityRange::default(),
                capability: None,
                secrets: Secrets::default(),
            }),
            Some(id.as_str()),
            None,
        ),
        (
            Request::ControllerGetVolume {
                volume_id: id.clone(),
            },
            Some(id.as_str()),
            None,
        ),
        (
            Request::ControllerModify(ControllerModify {
                volume_id: id.clone(),
                mutable_parameters: Attributes::new(),
                secrets: Secrets::default(),
            }),
            Some(id.as_str()),
            None,
        ),
        (
            Request::NodeVolumeStats(NodeVolumeStats {
                volume_id: id.clone(),
                volume_path: "/p/stats".into(),
                staging_target_path: String::new(),
            }),
            Some(id.as_str()),
            Some("/p/stats"),
        ),
        (
            Request::NodeExpand(NodeExpand {
                volume_id: id.clone(),
                volume_path: "/p/expand".into(),
                capacity: CapacityRange::default(),
                staging_target_path: String::new(),
                capability: None,
                secrets: Secrets::default(),
            }),
            Some(id.as_str()),
            Some("/p/expand"),
        ),
        (Request::Probe, None, None),
    ];
    for (r, volume, path) in requests {
        assert_eq!(r.volume(), volume, "{}", r.method());
        assert_eq!(r.subject(), volume, "{}", r.method());
        assert_eq!(r.path(), path, "{}", r.method());
    }
    let delete = Request::DeleteSnapshot(DeleteSnapshot {
        snapshot_id: "snap-1".into(),
        secrets: Secrets::default(),
    });
    assert_eq!((delete.volume(), delete.subject()), (None, Some("snap-1")));
}

fn stage_record(path: &str) -> StageRecord {
    StageRecord {
        staging_path: path.into(),
        capability: Capability::mount(AccessMode::SingleNodeWriter),
        publish_context: Attributes::new(),
        volume_context: Attributes::new(),
        certain: true,
    }
}

fn target_record(staging: &str) -> TargetRecord {
    TargetRecord {
        staging_path: staging.into(),
        capability: Capability::mount(AccessMode::SingleNodeWriter),
        readonly: false,
        publish_context: Attributes::new(),
        volume_context: Attributes::new(),
        certain: true,
    }
}

fn volume_record(name: &str, mode: AccessMode, nodes: &[&str]) -> VolumeRecord {
    VolumeRecord {
        name: name.into(),
        volume: Volume {
            volume_id: format!("vol-{name}"),
            capacity_bytes: 1,
            volume_context: Attributes::new(),
            accessible_topology: vec![],
            content_source: None,
        },
        capabilities: vec![],
        parameters: Attributes::new(),
        mutable_parameters: Attributes::new(),
        accessibility: None,
        capacity: CapacityRange::default(),
        node_expansion_required: false,
        published: nodes
            .iter()
            .map(|n| {
                (
                    n.to_string(),
                    Publication {
                        capability: Capability::mount(mode),
                        readonly: false,
                        publish_context: Attributes::new(),
                        certain: true,
                    },
                )
            })
            .collect(),
    }
}

/// Each invariant, broken alone, is named; the state around it is sound.
#[test]
fn each_broken_invariant_is_named() {
    let sound = || {
        let mut s = DriverState::default();
        s.volumes.insert(&volume_record(
            "a",
            AccessMode::MultiNodeMultiWriter,
            &["n1", "n2"],
        ));
        let mut nv = NodeVolume {
            stage: Some(stage_record("/s")),
            ..Default::default()
        };
        nv.targets.insert("/t".into(), target_record("/s"));
        s.node.insert("vol-a".into(), nv);
        s
    };
    check_invariants(&sound()).unwrap();
    assert_eq!(sound().targets("vol-a"), vec!["/t"]);
    assert!(sound().targets("vol-b").is_empty());
    type Breaks = Box<dyn Fn(&mut DriverState)>;
    let broken: Vec<(Breaks, &str)> = vec![
        (
            Box::new(|s| {
                s.node.insert("vol-b".into(), NodeVolume::default());
            }),
            "recorded with nothing on it",
        ),
        (
            Box::new(|s| {
                let nv = s.node.get_mut("vol-a").unwrap();
                nv.targets.insert("/t2".into(), target_record("/elsewhere"));
            }),
            "that is not staged",
        ),
        (
            Box::new(|s| {
                s.node.get_mut("vol-a").unwrap().stage = None;
            }),
            "that is not staged",
        ),
        (
            Box::new(|s| {
                let mut twin = volume_record("b", AccessMode::MultiNodeMultiWriter, &[]);
                twin.name = "a".into();
                s.volumes.insert(&twin);
            }),
            "volumes vol-a and vol-b are both named a",
        ),
        (
            Box::new(|s| {
                s.volumes.update("vol-a", |v| {
                    let p = v.published.get_mut("n2").unwrap();
                    p.capability = Capability::mount(AccessMode::SingleNodeWriter);
                });
            }),
            "is published to 2 nodes",
        ),
        (
            Box::new(|s| {
                for op in [1, 2] {
                    s.in_flight.insert(
                        crate::OpId(op),
                        InFlight {
                            key: "vol-a".into(),
                            plan: Plan::DeleteVolume {
                                volume: s.volumes.unpacked("vol-a").unwrap().volume,
                                secrets: Secrets::default(),
                            },
                            rpc: None,
                            credentialed: false,
                        },
                    );
                }
            }),
            "two operations in flight hold vol-a",
        ),
    ];
    for (breaks, named) in broken {
        let mut s = sound();
        breaks(&mut s);
        let e = check_invariants(&s).unwrap_err();
        assert!(e.0.contains(named), "{named}: {e}");
    }
    // One publication to one node of a single-node volume is fine.
    let mut s = sound();
    s.volumes
        .insert(&volume_record("a", AccessMode::SingleNodeWriter, &["n1"]));
    check_invariants(&s).unwrap();
}

/// The snapshot and group invariants, each broken alone, are named.
#[test]
fn each_broken_snapshot_invariant_is_named() {
    use crate::driver::state::{GroupRecord, SnapshotRecord};
    let snap = |id: &str, group: &str| Snapshot {
        snapshot_id: id.into(),
        source_volume_id: "vol-a".into(),
        size_bytes: 1,
        creation_time: Timestamp::default(),
        ready_to_use: true,
        group_snapshot_id: group.into(),
    };
    let sound = || {
        let mut s = DriverState::default();
        s.snapshots.insert(
            "snap-1".into(),
            SnapshotRecord {
                name: "s1".into(),
                snapshot: snap("snap-1", ""),
                parameters: Attributes::new(),
            },
        );
        s.snapshot_names.insert("s1".into(), "snap-1".into());
        s.snapshots.insert(
            "snap-m".into(),
            SnapshotRecord {
                name: String::new(),
                snapshot: snap("snap-m", "group-g"),
                parameters: Attributes::new(),
            },
        );
        s.groups.insert(
            "group-g".into(),
            GroupRecord {
                name: "g".into(),
                group: GroupSnapshot {
                    group_snapshot_id: "group-g".into(),
                    snapshots: vec![snap("snap-m", "group-g")],
                    creation_time: Timestamp::default(),
                    ready_to_use: true,
                },
                parameters: Attributes::new(),
            },
        );
        s.group_names.insert("g".into(), "group-g".into());
        s
    };
    check_invariants(&sound()).unwrap();
    type Breaks = Box<dyn Fn(&mut DriverState)>;
    let broken: Vec<(Breaks, &str)> = vec![
        (
            Box::new(|s| {
                s.snapshot_names.insert("other".into(), "snap-1".into());
            }),
            "snapshot name other maps to snapshot snap-1 that does not carry it",
        ),
        (
            Box::new(|s| {
                s.snapshot_names.clear();
            }),
            "snapshot snap-1 is missing from the name index",
        ),
        (
            Box::new(|s| {
                s.snapshots.get_mut("snap-1").unwrap().snapshot.snapshot_id = "snap-2".into();
            }),
            "snapshot snap-1 is recorded as snap-2",
        ),
        (
            Box::new(|s| {
                let mut g = s.groups["group-g"].clone();
                g.group.snapshots.clear();
                s.groups.insert("group-g".into(), g);
            }),
            "snapshot snap-m has no name and is no member of its group group-g",
        ),
        (
            Box::new(|s| {
                s.group_names.clear();
            }),
            "group snapshot group-g is missing from the name index",
        ),
        (
            Box::new(|s| {
                s.snapshots.remove("snap-m");
            }),
            "group snapshot group-g names member snap-m that is not recorded",
        ),
    ];
    for (breaks, named) in broken {
        let mut s = sound();
        breaks(&mut s);
        let e = check_invariants(&s).unwrap_err();
        assert_eq!(e, named.into());
    }
}
