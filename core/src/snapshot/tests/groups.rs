//! Group snapshots through the snapshot controller and csi-snapshotter
//! together: a dynamic group cut, its members made and bound, a member
//! refused deletion alone, the group deleted with its members; a
//! pre-provisioned group checked and retained.

use super::*;
use crate::model::names::{
    FINALIZER_SNAPSHOT_IN_GROUP, csi_group_snapshot_name, group_content_name, group_member_names,
};

/// The driver's answer to CreateVolumeGroupSnapshot: `group-<name>`, one
/// ready member `snap-<volume>` per source.
fn cut_group(c: &driver::CreateGroupSnapshot) -> driver::GroupSnapshot {
    let id = format!("group-{}", c.name);
    driver::GroupSnapshot {
        group_snapshot_id: id.clone(),
        snapshots: c
            .source_volume_ids
            .iter()
            .map(|v| driver::Snapshot {
                snapshot_id: format!("snap-{v}"),
                source_volume_id: v.clone(),
                size_bytes: 1 << 30,
                creation_time: driver::Timestamp {
                    seconds: 1_700_000_000,
                    nanos: 0,
                },
                ready_to_use: true,
                group_snapshot_id: id.clone(),
            })
            .collect(),
        creation_time: driver::Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        },
        ready_to_use: true,
    }
}

fn groups_healthy(call: &CsiCall) -> CsiResult {
    match call {
        Request::CreateGroupSnapshot(c) => Ok(Response::GroupSnapshot(cut_group(c))),
        Request::GetGroupSnapshot {
            group_snapshot_id,
            snapshot_ids,
            ..
        } => Ok(Response::GroupSnapshot(driver::GroupSnapshot {
            group_snapshot_id: group_snapshot_id.clone(),
            snapshots: snapshot_ids
                .iter()
                .map(|s| driver::Snapshot {
                    snapshot_id: s.clone(),
                    source_volume_id: format!("vol-of-{s}"),
                    size_bytes: 1 << 20,
                    creation_time: driver::Timestamp::default(),
                    ready_to_use: true,
                    group_snapshot_id: group_snapshot_id.clone(),
                })
                .collect(),
            creation_time: driver::Timestamp::default(),
            ready_to_use: true,
        })),
        Request::DeleteGroupSnapshot(_) => Ok(Response::Empty),
        other => healthy(other),
    }
}

/// Claims `a` and `b` labelled app=db and `c` unlabelled, each bound to a
/// CSI volume `vol-<name>`, and the group class `group` (policy `policy`).
fn with_claims(policy: DeletionPolicy) -> World {
    let mut w = World::new();
    w.csi = Box::new(groups_healthy);
    w.create(Object::GroupSnapshotClass(VolumeGroupSnapshotClass::new(
        "group", DRIVER, policy,
    )));
    for name in ["a", "b", "c"] {
        let mut c = PersistentVolumeClaim::new("default", name);
        c.spec.volume_name = Some(format!("pv-{name}"));
        c.status.phase = Some(PvcPhase::Bound);
        if name != "c" {
            c.metadata.labels.insert("app".into(), "db".into());
        }
        let Object::Pvc(c) = w.create(Object::Pvc(c)) else {
            unreachable!()
        };
        let mut pv = PersistentVolume::new(&format!("pv-{name}"));
        pv.spec.csi = Some(CsiSource {
            driver: DRIVER.into(),
            volume_handle: format!("vol-{name}"),
            ..Default::default()
        });
        pv.spec.claim_ref = Some(ObjectReference {
            namespace: "default".into(),
            name: name.into(),
            uid: c.metadata.uid.clone(),
            ..Default::default()
        });
        w.create(Object::Pv(pv));
    }
    w
}

fn selector(app: &str) -> LabelSelector {
    LabelSelector {
        match_labels: [("app".to_string(), app.to_string())].into(),
        match_expressions: Vec::new(),
    }
}

impl World {
    fn group(&self, name: &str) -> Option<VolumeGroupSnapshot> {
        let key = ObjectKey::new(Kind::VolumeGroupSnapshot, "default", name);
        match self.store.get(&key) {
            Some(Object::GroupSnapshot(g)) => Some(g.clone()),
            _ => None,
        }
    }

    fn group_content(&self, name: &str) -> Option<VolumeGroupSnapshotContent> {
        let key = ObjectKey::new(Kind::VolumeGroupSnapshotContent, "", name);
        match self.store.get(&key) {
            Some(Object::GroupContent(c)) => Some(c.clone()),
            _ => None,
        }
    }

    fn calls(&self, method: &str) -> usize {
        self.csi_calls
            .iter()
            .filter(|c| c.method() == method)
            .count()
    }
}

#[test]
fn a_dynamic_group_is_cut_once_and_its_members_are_made_bound_and_ready() {
    let mut w = with_claims(DeletionPolicy::Delete);
    let Object::GroupSnapshot(g) = w.create(Object::GroupSnapshot(VolumeGroupSnapshot::of_claims(
        "default",
        "db",
        selector("db"),
        "group",
    ))) else {
        unreachable!()
    };
    let uid = g.metadata.uid.clone();
    let creates: Vec<&driver::CreateGroupSnapshot> = w
        .csi_calls
        .iter()
        .filter_map(|c| match c {
            Request::CreateGroupSnapshot(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(creates.len(), 1, "{:?}", w.csi_calls);
    assert_eq!(creates[0].name, csi_group_snapshot_name(&uid));
    assert_eq!(creates[0].source_volume_ids, ["vol-a", "vol-b"]);
    let g = w.group("db").unwrap();
    assert!(g.ready(), "{:?}", g.status);
    assert_eq!(g.bound_content(), Some(group_content_name(&uid).as_str()));
    assert!(
        g.metadata
            .has_finalizer(names::FINALIZER_GROUP_SNAPSHOT_BOUND)
    );
    let content = w.group_content(&group_content_name(&uid)).unwrap();
    assert!(
        content
            .metadata
            .has_finalizer(names::FINALIZER_GROUP_CONTENT_BOUND)
    );
    assert!(
        !content
            .metadata
            .has_annotation(names::ANN_GROUP_BEING_CREATED)
    );
    for claim in ["a", "b"] {
        let volume = format!("vol-{claim}");
        let (s, c) = group_member_names(&uid, &volume);
        let s = w.snapshot(&s).expect("a member snapshot");
        let c = w.content(&c).expect("a member content");
        assert!(s.ready(), "{:?}", s.status);
        assert_eq!(
            s.spec.source.persistent_volume_claim_name.as_deref(),
            Some(claim)
        );
        assert_eq!(s.bound_content(), Some(c.metadata.name.as_str()));
        let status = s.status.as_ref().unwrap();
        assert_eq!(status.volume_group_snapshot_name.as_deref(), Some("db"));
        assert_eq!(
            status.restore_size.as_ref().map(Quantity::bytes),
            Some(1 << 30)
        );
        assert!(s.metadata.has_finalizer(FINALIZER_SNAPSHOT_IN_GROUP));
        assert_eq!(s.metadata.owner_references[0].uid, uid);
        assert_eq!(c.spec.volume_snapshot_ref.uid, s.metadata.uid);
        assert_eq!(c.snapshot_handle(), Some(format!("snap-{volume}").as_str()));
        assert_eq!(
            c.metadata.annotation(names::ANN_GROUP_SNAPSHOT_HANDLE),
            Some(format!("group-{}", csi_group_snapshot_name(&uid)).as_str())
        );
    }
    // Members are not cut on their own.
    assert_eq!(w.calls("CreateSnapshot"), 0);
    let reasons = w.reasons();
    for r in [
        reason::CREATING_GROUP_SNAPSHOT,
        reason::GROUP_SNAPSHOT_CREATED,
        reason::GROUP_SNAPSHOT_READY,
    ] {
        assert_eq!(
            reasons.iter().filter(|x| **x == r).count(),
            1,
            "{r}: {reasons:?}"
        );
    }
}

#[test]
fn a_member_is_deleted_only_with_its_group_and_the_group_deletes_the_storage_once() {
    let mut w = with_claims(DeletionPolicy::Delete);
    let Object::GroupSnapshot(g) = w.create(Object::GroupSnapshot(VolumeGroupSnapshot::of_claims(
        "default",
        "db",
        selector("db"),
        "group",
    ))) else {
        unreachable!()
    };
    let uid = g.metadata.uid.clone();
    let (member, _) = group_member_names(&uid, "vol-a");
    w.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeSnapshot,
        "default",
        &member,
    )));
    assert!(w.snapshot(&member).is_some_and(|s| s.metadata.deleting()));
    assert!(
        w.events
            .iter()
            .any(|e| e.reason == reason::SNAPSHOT_DELETE_PENDING
                && e.message.contains("belongs to group snapshot default/db")),
        "{:?}",
        w.events
    );
    w.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeGroupSnapshot,
        "default",
        "db",
    )));
    w.advance(10_000);
    assert!(w.group("db").is_none());
    assert!(w.group_content(&group_content_name(&uid)).is_none());
    for volume in ["vol-a", "vol-b"] {
        let (s, c) = group_member_names(&uid, volume);
        assert!(w.snapshot(&s).is_none(), "member {s} left");
        assert!(w.content(&c).is_none(), "member content {c} left");
    }
    let deletes: Vec<&driver::DeleteGroupSnapshot> = w
        .csi_calls
        .iter()
        .filter_map(|c| match c {
            Request::DeleteGroupSnapshot(d) => Some(d),
            _ => None,
        })
        .collect();
    assert_eq!(deletes.len(), 1);
    assert_eq!(deletes[0].snapshot_ids, ["snap-vol-a", "snap-vol-b"]);
    assert_eq!(w.calls("DeleteSnapshot"), 0, "members go with their group");
}

#[test]
fn a_group_that_selects_nothing_or_two_sources_says_why() {
    let mut w = with_claims(DeletionPolicy::Delete);
    w.create(Object::GroupSnapshot(VolumeGroupSnapshot::of_claims(
        "default",
        "none",
        selector("none"),
        "group",
    )));
    let error = |w: &World, name: &str| {
        w.group(name)
            .and_then(|g| g.status)
            .and_then(|s| s.error)
            .and_then(|e| e.message)
            .unwrap_or_default()
    };
    assert_eq!(
        error(&w, "none"),
        "failed to create group snapshot content with error label selector app=none for group snapshot not applied to any PVC"
    );
    let mut both = VolumeGroupSnapshot::of_claims("default", "both", selector("db"), "group");
    both.spec.source.volume_group_snapshot_content_name = Some("x".into());
    w.create(Object::GroupSnapshot(both));
    assert_eq!(
        error(&w, "both"),
        "Exactly one of Selector and VolumeGroupSnapshotContentName should be specified"
    );
    assert_eq!(w.calls("CreateVolumeGroupSnapshot"), 0);
}

#[test]
fn a_pre_provisioned_group_is_bound_checked_with_the_driver_and_retained() {
    let mut w = with_claims(DeletionPolicy::Retain);
    let mut c = VolumeGroupSnapshotContent::new("old-group");
    c.spec.driver = DRIVER.into();
    c.spec.deletion_policy = DeletionPolicy::Retain;
    c.spec.volume_group_snapshot_ref = ObjectReference {
        namespace: "default".into(),
        name: "restored".into(),
        ..Default::default()
    };
    c.spec.source.group_snapshot_handles = Some(GroupSnapshotHandles {
        volume_group_snapshot_handle: "g-old".into(),
        volume_snapshot_handles: vec!["s-1".into(), "s-2".into()],
    });
    w.create(Object::GroupContent(c));
    let mut g = VolumeGroupSnapshot::of_claims("default", "restored", selector("db"), "group");
    g.spec.source.selector = None;
    g.spec.source.volume_group_snapshot_content_name = Some("old-group".into());
    w.create(Object::GroupSnapshot(g));
    let g = w.group("restored").unwrap();
    assert!(g.ready(), "{:?}", g.status);
    let c = w.group_content("old-group").unwrap();
    assert_eq!(c.spec.volume_group_snapshot_ref.uid, g.metadata.uid);
    let listed = &c.status.as_ref().unwrap().volume_snapshot_info_list;
    assert_eq!(listed.len(), 2);
    assert_eq!(w.calls("GetVolumeGroupSnapshot"), 1);
    w.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeGroupSnapshot,
        "default",
        "restored",
    )));
    w.advance(10_000);
    assert!(w.group("restored").is_none());
    assert!(
        w.group_content("old-group").is_some(),
        "Retain keeps the content"
    );
    assert_eq!(w.calls("DeleteVolumeGroupSnapshot"), 0);
}

/// The group class's `group-snapshotter-secret-*` pair: written on the
/// group content and handed to CreateVolumeGroupSnapshot and
/// DeleteVolumeGroupSnapshot (the pair is no driver parameter).
#[test]
fn the_group_class_secret_reaches_the_group_calls() {
    let mut w = with_claims(DeletionPolicy::Delete);
    let mut class = VolumeGroupSnapshotClass::new("group", DRIVER, DeletionPolicy::Delete);
    class.parameters = [
        (
            "csi.storage.k8s.io/group-snapshotter-secret-name",
            "${volumegroupsnapshot.name}-creds",
        ),
        (
            "csi.storage.k8s.io/group-snapshotter-secret-namespace",
            "${volumegroupsnapshot.namespace}",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    w.user(ApiCall::Update(Object::GroupSnapshotClass(class)));
    w.create(Object::Secret(Secret::new(
        "default",
        "db-creds",
        &[("token", "g-t0ken")],
    )));
    let Object::GroupSnapshot(g) = w.create(Object::GroupSnapshot(VolumeGroupSnapshot::of_claims(
        "default",
        "db",
        selector("db"),
        "group",
    ))) else {
        unreachable!()
    };
    let content = w
        .group_content(&group_content_name(&g.metadata.uid))
        .expect("a group content");
    assert_eq!(
        content
            .metadata
            .annotations
            .get(names::ANN_GROUP_DELETION_SECRET_NAME),
        Some("db-creds")
    );
    w.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeGroupSnapshot,
        "default",
        "db",
    )));
    let tokens: Vec<(&str, Option<&str>)> = w
        .csi_calls
        .iter()
        .filter_map(|c| match c {
            Request::CreateGroupSnapshot(c) => {
                assert!(c.parameters.is_empty(), "{:?}", c.parameters);
                Some(("create", c.secrets.0.get("token").map(String::as_str)))
            }
            Request::DeleteGroupSnapshot(d) => {
                Some(("delete", d.secrets.0.get("token").map(String::as_str)))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        tokens,
        [("create", Some("g-t0ken")), ("delete", Some("g-t0ken"))]
    );
}

/// GetVolumeGroupSnapshot of a pre-provisioned group gets its class's
/// `group-snapshotter-get-secret-*` (upstream's
/// checkandUpdateGroupSnapshotContentStatus), the content's name resolved.
#[test]
fn a_pre_provisioned_group_is_checked_with_the_class_get_secret() {
    let mut w = with_claims(DeletionPolicy::Retain);
    let mut class = VolumeGroupSnapshotClass::new("imported", DRIVER, DeletionPolicy::Retain);
    class.parameters = [
        (
            "csi.storage.k8s.io/group-snapshotter-get-secret-name",
            "get-${volumegroupsnapshotcontent.name}",
        ),
        (
            "csi.storage.k8s.io/group-snapshotter-get-secret-namespace",
            "kube-system",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    w.create(Object::GroupSnapshotClass(class));
    w.create(Object::Secret(Secret::new(
        "kube-system",
        "get-old-group",
        &[("token", "get-t0ken")],
    )));
    let mut c = VolumeGroupSnapshotContent::new("old-group");
    c.spec.driver = DRIVER.into();
    c.spec.deletion_policy = DeletionPolicy::Retain;
    c.spec.volume_group_snapshot_class_name = Some("imported".into());
    c.spec.source.group_snapshot_handles = Some(GroupSnapshotHandles {
        volume_group_snapshot_handle: "g-old".into(),
        volume_snapshot_handles: vec!["s-1".into()],
    });
    w.create(Object::GroupContent(c));
    let tokens: Vec<Option<&str>> = w
        .csi_calls
        .iter()
        .filter_map(|c| match c {
            Request::GetGroupSnapshot { secrets, .. } => {
                Some(secrets.0.get("token").map(String::as_str))
            }
            _ => None,
        })
        .collect();
    assert_eq!(tokens, [Some("get-t0ken")]);
    assert!(w.group_content("old-group").unwrap().ready());
}
