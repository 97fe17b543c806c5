//! Scenario tests of the snapshot controller and csi-snapshotter together,
//! over one API server store, with a driver that answers as asked.

use std::collections::VecDeque;

use super::*;
use crate::control::{ApiCall, CsiCall, CsiResult, Effect, Event, Input};
use crate::driver::{self, Request, Response};
use crate::machine::Machine;
use crate::model::names::{self, reason};
use crate::model::*;
use crate::store::Store;
use crate::{Status, Tick};

mod faults;
mod groups;
mod secrets;

const DRIVER: &str = "volplane.csi.io";

/// Both machines and the API server; the driver is a closure.
struct World {
    store: Store,
    controller: SnapshotController,
    sidecar: Snapshotter,
    inbox: [VecDeque<Input>; 2],
    now: Tick,
    events: Vec<Event>,
    csi_calls: Vec<CsiCall>,
    csi: Box<dyn FnMut(&CsiCall) -> CsiResult>,
}

/// The snapshot the driver cuts for a CreateSnapshot: `snap-<name>`, 1 GiB.
fn cut(c: &driver::CreateSnapshot, ready: bool) -> driver::Snapshot {
    driver::Snapshot {
        snapshot_id: format!("snap-{}", c.name),
        source_volume_id: c.source_volume_id.clone(),
        size_bytes: 1 << 30,
        creation_time: driver::Timestamp {
            seconds: 1_700_000_000,
            nanos: 0,
        },
        ready_to_use: ready,
        group_snapshot_id: String::new(),
    }
}

fn healthy(call: &CsiCall) -> CsiResult {
    match call {
        Request::CreateSnapshot(c) => Ok(Response::Snapshot(cut(c, true))),
        Request::DeleteSnapshot(_) => Ok(Response::Empty),
        Request::ListSnapshots(l) => Ok(Response::Snapshots {
            entries: vec![driver::Snapshot {
                snapshot_id: l.snapshot_id.clone(),
                source_volume_id: "vol-old".into(),
                size_bytes: 2 << 30,
                creation_time: driver::Timestamp {
                    seconds: 1_600_000_000,
                    nanos: 0,
                },
                ready_to_use: true,
                group_snapshot_id: String::new(),
            }],
            next_token: String::new(),
        }),
        other => Err(Status::unimplemented(other.method())),
    }
}

impl World {
    fn new() -> World {
        World {
            store: Store::new(),
            controller: SnapshotController::new().with_groups(true),
            sidecar: Snapshotter::new(DRIVER).with_groups(true),
            inbox: [VecDeque::new(), VecDeque::new()],
            now: 0,
            events: Vec::new(),
            csi_calls: Vec::new(),
            csi: Box::new(healthy),
        }
    }

    /// A world with a class (policy `policy`) and claim `data` bound to a
    /// CSI volume `vol-1`.
    fn with_claim(policy: DeletionPolicy) -> World {
        let mut w = World::new();
        w.create(Object::SnapshotClass(VolumeSnapshotClass::new(
            "snaps", DRIVER, policy,
        )));
        let mut pv = PersistentVolume::new("pv-1");
        pv.spec.csi = Some(CsiSource {
            driver: DRIVER.into(),
            volume_handle: "vol-1".into(),
            ..Default::default()
        });
        w.create(Object::Pv(pv));
        let mut c = PersistentVolumeClaim::new("default", "data");
        c.spec.volume_name = Some("pv-1".into());
        c.status.phase = Some(PvcPhase::Bound);
        w.create(Object::Pvc(c));
        w
    }

    fn deliver(&mut self, watches: Vec<crate::control::Watch>) {
        for x in watches {
            for inbox in &mut self.inbox {
                inbox.push_back(Input::Watch(x.clone()));
            }
        }
    }

    fn create(&mut self, o: Object) -> Object {
        let (r, watches) = self.store.apply(self.now, &ApiCall::Create(o));
        self.deliver(watches);
        self.run();
        match r {
            crate::control::ApiResult::Ok(Some(o)) => std::sync::Arc::unwrap_or_clone(o),
            r => panic!("create failed: {r:?}"),
        }
    }

    fn user(&mut self, call: ApiCall) {
        let (_, watches) = self.store.apply(self.now, &call);
        self.deliver(watches);
        self.run();
    }

    /// Runs both machines until neither has anything to do.
    fn run(&mut self) {
        for _ in 0..10_000 {
            let mut moved = false;
            for i in 0..2 {
                while let Some(input) = self.inbox[i].pop_front() {
                    moved = true;
                    match i {
                        0 => self.controller.handle(self.now, input),
                        _ => self.sidecar.handle(self.now, input),
                    }
                }
                let effect = match i {
                    0 => self.controller.poll(),
                    _ => self.sidecar.poll(),
                };
                if let Some(e) = effect {
                    moved = true;
                    self.carry(i, e);
                }
            }
            self.controller.check_invariants().unwrap();
            self.sidecar.check_invariants().unwrap();
            if !moved {
                return;
            }
        }
        panic!("the machines did not settle");
    }

    fn carry(&mut self, i: usize, e: Effect) {
        match e {
            Effect::Event(ev) => self.events.push(ev),
            Effect::Api { op, call } => {
                let (result, watches) = self.store.apply(self.now, &call);
                if std::env::var_os("SNAP_DEBUG").is_some() {
                    eprintln!("{i}: {call:?}\n  -> {result:?}");
                }
                self.inbox[i].push_back(Input::ApiDone { op, result });
                self.deliver(watches);
            }
            Effect::Csi { op, call, .. } => {
                let result = (self.csi)(&call);
                self.csi_calls.push(call);
                self.inbox[i].push_back(Input::CsiDone { op, result });
            }
        }
    }

    /// Advances the clock, firing both machines' timers.
    fn advance(&mut self, ms: Tick) {
        let end = self.now + ms;
        loop {
            let next = [self.controller.poll_timeout(), self.sidecar.poll_timeout()]
                .into_iter()
                .flatten()
                .filter(|t| *t <= end)
                .min();
            let Some(t) = next else { break };
            self.now = self.now.max(t);
            self.controller.handle_timeout(self.now);
            self.sidecar.handle_timeout(self.now);
            self.run();
        }
        self.now = end;
        self.run();
    }

    fn snapshot(&self, name: &str) -> Option<VolumeSnapshot> {
        match self
            .store
            .get(&ObjectKey::new(Kind::VolumeSnapshot, "default", name))
        {
            Some(Object::Snapshot(s)) => Some(s.clone()),
            _ => None,
        }
    }

    fn content(&self, name: &str) -> Option<VolumeSnapshotContent> {
        match self
            .store
            .get(&ObjectKey::new(Kind::VolumeSnapshotContent, "", name))
        {
            Some(Object::Content(c)) => Some(c.clone()),
            _ => None,
        }
    }

    fn claim(&self) -> PersistentVolumeClaim {
        match self.store.get(&ObjectKey::new(
            Kind::PersistentVolumeClaim,
            "default",
            "data",
        )) {
            Some(Object::Pvc(c)) => c.clone(),
            _ => panic!("no claim"),
        }
    }

    fn reasons(&self) -> Vec<&str> {
        self.events.iter().map(|e| e.reason.as_str()).collect()
    }

    fn snap(&mut self, name: &str) -> VolumeSnapshot {
        let Object::Snapshot(s) = self.create(Object::Snapshot(VolumeSnapshot::of_claim(
            "default", name, "data", "snaps",
        ))) else {
            unreachable!()
        };
        s
    }
}

#[test]
fn a_dynamic_snapshot_gets_its_content_cut_and_becomes_ready() {
    let mut w = World::with_claim(DeletionPolicy::Delete);
    let s = w.snap("s1");
    let content_name = names::snapshot_content_name(&s.metadata.uid);
    let c = w.content(&content_name).expect("snapcontent-<uid>");
    assert_eq!(c.spec.source.volume_handle.as_deref(), Some("vol-1"));
    assert_eq!(c.spec.volume_snapshot_class_name.as_deref(), Some("snaps"));
    assert_eq!(c.spec.driver, DRIVER);
    assert_eq!(c.spec.volume_snapshot_ref.uid, s.metadata.uid);
    assert!(c.metadata.has_finalizer(names::FINALIZER_CONTENT_BOUND));
    assert!(
        !c.metadata
            .annotations
            .contains_key(names::ANN_SNAPSHOT_BEING_CREATED)
    );
    let status = c.status.clone().unwrap();
    assert_eq!(
        status.snapshot_handle,
        Some(format!("snap-snapshot-{}", s.metadata.uid))
    );
    assert_eq!(status.creation_time, Some(1_700_000_000_000_000_000));
    assert_eq!(status.restore_size, Some(1 << 30));
    let [Request::CreateSnapshot(req)] = &w.csi_calls[..] else {
        panic!("{:?}", w.csi_calls)
    };
    assert_eq!(req.name, format!("snapshot-{}", s.metadata.uid));
    assert_eq!(req.source_volume_id, "vol-1");
    let s = w.snapshot("s1").unwrap();
    assert!(s.ready());
    assert_eq!(s.bound_content(), Some(content_name.as_str()));
    let st = s.status.clone().unwrap();
    assert_eq!(st.creation_time.as_deref(), Some("2023-11-14T22:13:20Z"));
    assert_eq!(st.restore_size.unwrap().bytes(), 1 << 30);
    assert!(
        s.metadata
            .has_finalizer(names::FINALIZER_SNAPSHOT_AS_SOURCE)
    );
    assert!(s.metadata.has_finalizer(names::FINALIZER_SNAPSHOT_BOUND));
    assert_eq!(
        w.reasons(),
        vec![
            reason::CREATING_SNAPSHOT,
            reason::SNAPSHOT_CREATED,
            reason::SNAPSHOT_READY
        ]
    );
    assert!(
        !w.claim()
            .metadata
            .has_finalizer(names::FINALIZER_PVC_AS_SNAPSHOT_SOURCE),
        "the claim is let go once the snapshot is ready"
    );
}

#[test]
fn deleting_a_snapshot_with_policy_delete_deletes_the_storage_snapshot_then_both_objects() {
    let mut w = World::with_claim(DeletionPolicy::Delete);
    let s = w.snap("s1");
    let content_name = names::snapshot_content_name(&s.metadata.uid);
    let handle = w
        .content(&content_name)
        .unwrap()
        .snapshot_handle()
        .unwrap()
        .to_string();
    w.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeSnapshot,
        "default",
        "s1",
    )));
    assert!(
        w.csi_calls
            .iter()
            .any(|c| matches!(c, Request::DeleteSnapshot(d) if d.snapshot_id == handle)),
        "{:?}",
        w.csi_calls
    );
    assert!(w.content(&content_name).is_none(), "the content is gone");
    assert!(w.snapshot("s1").is_none(), "the snapshot is gone");
}

#[test]
fn deleting_a_snapshot_with_policy_retain_keeps_the_content_and_the_storage_snapshot() {
    let mut w = World::with_claim(DeletionPolicy::Retain);
    let s = w.snap("s1");
    let content_name = names::snapshot_content_name(&s.metadata.uid);
    w.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeSnapshot,
        "default",
        "s1",
    )));
    assert!(w.snapshot("s1").is_none());
    let c = w.content(&content_name).expect("retained");
    assert!(
        c.metadata
            .annotations
            .contains_key(names::ANN_SNAPSHOT_BEING_DELETED)
    );
    assert!(
        !w.csi_calls
            .iter()
            .any(|c| matches!(c, Request::DeleteSnapshot(_)))
    );
}

/// A pre-provisioned content: the driver's `handle`, bound to snapshot
/// default/`snapshot`.
fn pre_provisioned(
    name: &str,
    handle: &str,
    policy: DeletionPolicy,
    snapshot: &str,
) -> VolumeSnapshotContent {
    let mut c = VolumeSnapshotContent::new(name);
    c.spec.driver = DRIVER.into();
    c.spec.deletion_policy = policy;
    c.spec.source.snapshot_handle = Some(handle.into());
    c.spec.volume_snapshot_ref = ObjectReference {
        namespace: "default".into(),
        name: snapshot.into(),
        ..Default::default()
    };
    c
}

#[test]
fn a_pre_provisioned_content_is_bound_checked_with_the_driver_and_reported() {
    let mut w = World::new();
    let c = pre_provisioned("imported", "snap-old", DeletionPolicy::Retain, "restored");
    w.create(Object::Content(c));
    let mut s = VolumeSnapshot::of_claim("default", "restored", "", "");
    s.spec.source = VolumeSnapshotSource {
        persistent_volume_claim_name: None,
        volume_snapshot_content_name: Some("imported".into()),
    };
    s.spec.volume_snapshot_class_name = None;
    let Object::Snapshot(s) = w.create(Object::Snapshot(s)) else {
        unreachable!()
    };
    let c = w.content("imported").unwrap();
    assert_eq!(c.spec.volume_snapshot_ref.uid, s.metadata.uid, "bound");
    assert!(matches!(&w.csi_calls[..], [Request::ListSnapshots(l)] if l.snapshot_id == "snap-old"));
    let s = w.snapshot("restored").unwrap();
    assert!(s.ready());
    assert_eq!(s.status.unwrap().restore_size.unwrap().bytes(), 2 << 30);
    assert!(
        !s_has_bound(&w, "restored"),
        "policy Retain: no bound finalizer"
    );
}

fn s_has_bound(w: &World, name: &str) -> bool {
    w.snapshot(name)
        .unwrap()
        .metadata
        .has_finalizer(names::FINALIZER_SNAPSHOT_BOUND)
}

#[test]
fn a_snapshot_not_ready_yet_is_asked_after_until_it_is() {
    let mut w = World::with_claim(DeletionPolicy::Delete);
    let mut calls = 0;
    w.csi = Box::new(move |call| match call {
        Request::CreateSnapshot(c) => {
            calls += 1;
            Ok(Response::Snapshot(cut(c, calls >= 3)))
        }
        other => healthy(other),
    });
    w.snap("s1");
    assert!(!w.snapshot("s1").unwrap().ready());
    w.advance(60_000);
    let creates = w
        .csi_calls
        .iter()
        .filter(|c| matches!(c, Request::CreateSnapshot(_)))
        .count();
    assert_eq!(creates, 3, "asked again with backoff until ready");
    assert!(w.snapshot("s1").unwrap().ready());
}

#[test]
fn a_final_create_error_is_reported_on_both_objects_and_ends_the_being_created_mark() {
    let mut w = World::with_claim(DeletionPolicy::Delete);
    w.csi = Box::new(|call| match call {
        Request::CreateSnapshot(_) => Err(Status::invalid("bad parameters")),
        other => healthy(other),
    });
    let s = w.snap("s1");
    let c = w
        .content(&names::snapshot_content_name(&s.metadata.uid))
        .unwrap();
    assert!(
        !c.metadata
            .annotations
            .contains_key(names::ANN_SNAPSHOT_BEING_CREATED)
    );
    let msg = c.status.unwrap().error.unwrap().message.unwrap();
    assert!(
        msg.starts_with("Failed to create snapshot: failed to take snapshot of the volume vol-1"),
        "{msg}"
    );
    assert!(w.reasons().contains(&reason::SNAPSHOT_CREATION_FAILED));
    let s = w.snapshot("s1").unwrap();
    assert_eq!(
        s.status.unwrap().error.unwrap().message,
        Some(msg),
        "copied up"
    );
}

#[test]
fn a_snapshot_with_two_sources_or_no_class_is_refused_with_a_reason() {
    let mut w = World::with_claim(DeletionPolicy::Delete);
    let mut s = VolumeSnapshot::of_claim("default", "both", "data", "snaps");
    s.spec.source.volume_snapshot_content_name = Some("x".into());
    w.create(Object::Snapshot(s));
    assert!(w.reasons().contains(&reason::SNAPSHOT_VALIDATION_ERROR));
    let mut s = VolumeSnapshot::of_claim("default", "classless", "data", "");
    s.spec.volume_snapshot_class_name = None;
    w.create(Object::Snapshot(s));
    let s = w.snapshot("classless").unwrap();
    let msg = s.status.unwrap().error.unwrap().message.unwrap();
    assert!(msg.contains("cannot find default snapshot class"), "{msg}");
    // A default class of the volume's driver is taken and written back.
    let mut class = VolumeSnapshotClass::new("default-snaps", DRIVER, DeletionPolicy::Delete);
    class
        .metadata
        .annotations
        .insert(names::ANN_DEFAULT_SNAPSHOT_CLASS.into(), "true".into());
    w.create(Object::SnapshotClass(class));
    w.advance(5_000);
    let s = w.snapshot("classless").unwrap();
    assert_eq!(
        s.spec.volume_snapshot_class_name.as_deref(),
        Some("default-snaps")
    );
    assert!(s.ready());
}

#[test]
fn a_snapshot_a_pending_claim_restores_from_is_not_deleted_yet() {
    let mut w = World::with_claim(DeletionPolicy::Delete);
    w.snap("s1");
    let mut restore = PersistentVolumeClaim::new("default", "restore");
    restore.spec.data_source = Some(TypedLocalObjectReference {
        api_group: Some("snapshot.storage.k8s.io".into()),
        kind: "VolumeSnapshot".into(),
        name: "s1".into(),
    });
    w.create(Object::Pvc(restore.clone()));
    w.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeSnapshot,
        "default",
        "s1",
    )));
    assert!(
        w.snapshot("s1").is_some(),
        "held while the claim is Pending"
    );
    assert!(w.reasons().contains(&reason::SNAPSHOT_DELETE_PENDING));
    assert!(
        !w.csi_calls
            .iter()
            .any(|c| matches!(c, Request::DeleteSnapshot(_)))
    );
    // The claim binds: the snapshot goes.
    let Some(Object::Pvc(mut bound)) = w
        .store
        .get(&ObjectKey::new(
            Kind::PersistentVolumeClaim,
            "default",
            "restore",
        ))
        .cloned()
    else {
        panic!()
    };
    bound.status.phase = Some(PvcPhase::Bound);
    w.user(ApiCall::UpdateStatus(Object::Pvc(bound)));
    w.advance(5_000);
    assert!(w.snapshot("s1").is_none());
}

#[test]
fn class_parameters_reach_the_driver_without_the_sidecars_own() {
    let params = [
        ("csi.storage.k8s.io/snapshotter-secret-name", "s"),
        ("tier", "cold"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(
        csi_parameters(&params).unwrap(),
        [("tier".to_string(), "cold".to_string())].into()
    );
    let bad = [("csi.storage.k8s.io/fstype".to_string(), "x".to_string())].into();
    let e = csi_parameters(&bad).unwrap_err();
    assert_eq!(
        e,
        super::ReservedParameter("csi.storage.k8s.io/fstype".into())
    );
    assert!(e.to_string().contains("reserved namespace"), "{e}");
}

/// Found by the simulator: a snapshot deleted before its content got the
/// bound finalizer. Deleting that content at once would drop it without
/// DeleteSnapshot and leak the storage snapshot; the finalizer goes on first.
#[test]
fn a_content_is_deleted_only_once_it_carries_its_finalizer() {
    let mut c = SnapshotController::new();
    let mut s = VolumeSnapshot::of_claim("default", "s1", "data", "snaps");
    s.metadata.uid = "uid-s".into();
    s.metadata.finalizers = vec![names::FINALIZER_SNAPSHOT_AS_SOURCE.into()];
    s.metadata.deletion_timestamp = Some("2026-11-23T00:00:00Z".into());
    s.status = Some(VolumeSnapshotStatus {
        bound_volume_snapshot_content_name: Some("snapcontent-uid-s".into()),
        ..Default::default()
    });
    let mut content = VolumeSnapshotContent::new("snapcontent-uid-s");
    content.spec.driver = DRIVER.into();
    content.spec.source.volume_handle = Some("vol-1".into());
    content.spec.volume_snapshot_ref = ObjectReference {
        namespace: "default".into(),
        name: "s1".into(),
        uid: "uid-s".into(),
        ..Default::default()
    };
    content
        .metadata
        .annotations
        .insert(names::ANN_SNAPSHOT_BEING_DELETED.into(), "yes".into());
    for o in [Object::Content(content), Object::Snapshot(s)] {
        c.handle(0, Input::Watch(crate::control::Watch::Applied(o.into())));
    }
    let Some(Effect::Api { call, .. }) = c.poll() else {
        panic!("a write")
    };
    let ApiCall::Update(Object::Content(next)) = call else {
        panic!("not deleted first: {call:?}")
    };
    assert!(next.metadata.has_finalizer(names::FINALIZER_CONTENT_BOUND));
}

#[test]
fn a_content_whose_class_is_missing_waits_for_it_without_a_timer() {
    let mut w = World::new();
    let mut c = VolumeSnapshotContent::new("snapcontent-x");
    c.spec.driver = DRIVER.into();
    c.spec.source.volume_handle = Some("vol-1".into());
    c.spec.volume_snapshot_class_name = Some("later".into());
    c.spec.volume_snapshot_ref = ObjectReference {
        namespace: "default".into(),
        name: "x".into(),
        uid: "uid-x".into(),
        ..Default::default()
    };
    w.create(Object::Content(c));
    let c = w.content("snapcontent-x").unwrap();
    let msg = c.status.unwrap().error.unwrap().message.unwrap();
    assert!(msg.contains("\\\"later\\\" not found"), "{msg}");
    assert_eq!(
        w.sidecar.poll_timeout(),
        None,
        "nothing to retry on a timer"
    );
    w.create(Object::SnapshotClass(VolumeSnapshotClass::new(
        "later",
        DRIVER,
        DeletionPolicy::Delete,
    )));
    assert!(
        w.content("snapcontent-x").unwrap().ready(),
        "cut once the class came"
    );
}

#[test]
fn a_pre_provisioned_snapshot_the_driver_does_not_list_is_reported_with_its_handle() {
    let mut w = World::new();
    w.csi = Box::new(|call| match call {
        Request::ListSnapshots(_) => Ok(Response::Snapshots {
            entries: vec![],
            next_token: String::new(),
        }),
        other => healthy(other),
    });
    let mut c = VolumeSnapshotContent::new("imported");
    c.spec.driver = DRIVER.into();
    c.spec.source.snapshot_handle = Some("snap-gone".into());
    c.spec.volume_snapshot_ref = ObjectReference {
        namespace: "default".into(),
        name: "restored".into(),
        uid: "uid-r".into(),
        ..Default::default()
    };
    w.create(Object::Content(c));
    let msg = w
        .content("imported")
        .unwrap()
        .status
        .unwrap()
        .error
        .unwrap()
        .message
        .unwrap();
    assert!(
        msg.contains("\"snap-gone\"") && msg.contains("snapshotHandle"),
        "{msg}"
    );
    assert!(w.reasons().contains(&reason::SNAPSHOT_CONTENT_CHECK_FAILED));
}

/// The content records its source's volume mode (`sourceVolumeMode`), which
/// a restore may not change without the content's permission.
#[test]
fn a_dynamic_content_records_the_volume_mode_of_its_source() {
    let mut w = World::with_claim(DeletionPolicy::Delete);
    let Some(Object::Pv(mut pv)) = w
        .store
        .get(&ObjectKey::new(Kind::PersistentVolume, "", "pv-1"))
        .cloned()
    else {
        panic!("the PV is there")
    };
    pv.spec.volume_mode = Some(VolumeMode::Block);
    w.user(ApiCall::Update(Object::Pv(pv)));
    let s = w.snap("s1");
    let content = w
        .content(&names::snapshot_content_name(&s.metadata.uid))
        .expect("a content");
    assert_eq!(content.spec.source_volume_mode.as_deref(), Some("Block"));
}

/// --snapshot-name-prefix, --snapshot-name-uuid-length and
/// --extra-create-metadata, as csi-snapshotter names and describes its
/// snapshots.
#[test]
fn snapshot_names_and_extra_metadata_follow_the_flags() {
    let mut w = World::with_claim(DeletionPolicy::Delete);
    w.sidecar = Snapshotter::new(DRIVER)
        .with_groups(true)
        .with_naming("snap", Some(6))
        .with_extra_create_metadata(true);
    for o in w.store.objects().cloned().collect::<Vec<_>>() {
        w.inbox[1].push_back(Input::Watch(crate::control::Watch::Applied(o.into())));
    }
    let s = w.snap("s1");
    let Some(Request::CreateSnapshot(c)) = w.csi_calls.first() else {
        panic!("{:?}", w.csi_calls)
    };
    let plain: String = s
        .metadata
        .uid
        .chars()
        .filter(|c| *c != '-')
        .take(6)
        .collect();
    assert_eq!(c.name, format!("snap-{plain}"));
    assert_eq!(c.parameters.get(names::PARAM_SNAPSHOT_NAME), Some("s1"));
    assert_eq!(
        c.parameters.get(names::PARAM_SNAPSHOT_NAMESPACE),
        Some("default")
    );
    assert_eq!(
        c.parameters.get(names::PARAM_SNAPSHOT_CONTENT_NAME),
        Some(names::snapshot_content_name(&s.metadata.uid).as_str())
    );
}

/// Found by the e2e suite's pre-provisioned group snapshot (retain
/// policy): a pre-provisioned content whose snapshot the driver lists as a
/// group's member is a member (its `volumeGroupSnapshotHandle`, as
/// upstream's check records it). Deleted, it goes without a DeleteSnapshot
/// — the driver refuses a member's, and the content stayed for ever.
#[test]
fn a_pre_provisioned_member_of_a_group_is_deleted_without_delete_snapshot() {
    let mut w = World::new();
    w.csi = Box::new(|call| match call {
        Request::DeleteSnapshot(_) => Err(Status::invalid(
            "snapshot snap-m belongs to group snapshot group-1",
        )),
        other => healthy(other).map(|r| match r {
            // The driver lists the snapshot as group-1's member.
            Response::Snapshots {
                mut entries,
                next_token,
            } => {
                for e in &mut entries {
                    e.group_snapshot_id = "group-1".into();
                }
                Response::Snapshots {
                    entries,
                    next_token,
                }
            }
            r => r,
        }),
    });
    let c = pre_provisioned("member", "snap-m", DeletionPolicy::Delete, "m");
    w.create(Object::Content(c));
    let status = w.content("member").unwrap().status.unwrap();
    assert_eq!(
        status.volume_group_snapshot_handle.as_deref(),
        Some("group-1")
    );
    w.user(ApiCall::Delete(ObjectKey::new(
        Kind::VolumeSnapshotContent,
        "",
        "member",
    )));
    assert!(
        !w.csi_calls
            .iter()
            .any(|c| matches!(c, Request::DeleteSnapshot(_))),
        "{:?}",
        w.csi_calls
    );
    assert!(w.content("member").is_none(), "the content is gone");
}
