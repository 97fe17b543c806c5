//! Snapshots, restores and clones: by name, by id, from memory, and never
//! from something that is changing or not ready.

use super::*;

fn snap_id(h: &mut Harness, name: &str, source: &str) -> String {
    match h.ok(snapshot(name, source)) {
        Response::Snapshot(s) => s.snapshot_id,
        r => panic!("{r:?}"),
    }
}

fn clone_of(name: &str, source: &str, required: u64) -> Request {
    let Request::CreateVolume(mut r) = create(name, required) else {
        unreachable!()
    };
    r.content_source = Some(ContentSource::Volume(source.into()));
    Request::CreateVolume(r)
}

fn list(source: &str, id: &str, max_entries: u32, token: &str) -> Request {
    Request::ListSnapshots(ListSnapshots {
        max_entries,
        starting_token: token.into(),
        source_volume_id: source.into(),
        snapshot_id: id.into(),
        secrets: Default::default(),
    })
}

fn listed(r: Response) -> (Vec<String>, String) {
    match r {
        Response::Snapshots {
            entries,
            next_token,
        } => (
            entries.into_iter().map(|s| s.snapshot_id).collect(),
            next_token,
        ),
        r => panic!("{r:?}"),
    }
}

#[test]
fn create_snapshot_is_idempotent_by_name_and_refuses_another_source() {
    let mut h = Harness::new();
    let a = h.create_id("a");
    let b = h.create_id("b");
    let first = h.ok(snapshot("s1", &a));
    let (_, effects) = h.send(snapshot("s1", &a));
    assert!(executes(&effects).is_empty(), "answered from memory");
    assert_eq!(h.ok(snapshot("s1", &a)), first);
    let e = h.err(snapshot("s1", &b));
    assert_eq!(e.code, Code::AlreadyExists);
    assert!(e.message.contains(&a), "{e}");
    let Request::CreateSnapshot(mut other) = snapshot("s1", &a) else {
        unreachable!()
    };
    other.parameters.insert("tier".into(), "cold".into());
    assert_eq!(
        h.err(Request::CreateSnapshot(other)).code,
        Code::AlreadyExists
    );
    assert_eq!(h.err(snapshot("s2", "vol-missing")).code, Code::NotFound);
}

#[test]
fn a_snapshot_not_ready_is_asked_after_again_and_cannot_be_restored_yet() {
    let mut h = Harness::new();
    let a = h.create_id("a");
    let (rpc, effects) = h.send(snapshot("s1", &a));
    let [Effect::Execute { op, plan }] = &effects[1..] else {
        panic!("{effects:?}")
    };
    let Plan::CreateSnapshot(p) = plan else {
        panic!("{plan:?}")
    };
    assert_eq!(
        p.source.volume_id, a,
        "the plan carries the driver's record"
    );
    let slow = cut(p, false);
    h.d.handle(
        h.now,
        Input::Done {
            op: *op,
            result: Ok(Outcome::SnapshotCreated(slow.clone())),
        },
    );
    let effects = h.drain();
    assert!(
        effects.contains(&Effect::Reply {
            rpc,
            result: Ok(Response::Snapshot(slow.clone()))
        }),
        "{effects:?}"
    );
    let e = h.err(restore("r", &slow.snapshot_id, 0));
    assert_eq!(e.code, Code::FailedPrecondition);
    assert!(e.message.contains("not ready"), "{e}");
    // Asked again: the backend is asked how far it got.
    let (_, effects) = h.send(snapshot("s1", &a));
    assert!(
        matches!(executes(&effects)[..], [Plan::CreateSnapshot(_)]),
        "{effects:?}"
    );
}

#[test]
fn delete_snapshot_of_an_unknown_id_is_ok_and_a_known_one_goes() {
    let mut h = Harness::new();
    let a = h.create_id("a");
    let id = snap_id(&mut h, "s1", &a);
    let delete = |id: &str| {
        Request::DeleteSnapshot(DeleteSnapshot {
            snapshot_id: id.into(),
            secrets: Secrets::default(),
        })
    };
    let (_, effects) = Harness::new().send(delete("snap-nobody"));
    assert!(
        matches!(&executes(&effects)[..], [Plan::DeleteSnapshot { snapshot, .. }] if snapshot.snapshot_id == "snap-nobody"),
        "the storage is asked: {effects:?}"
    );
    h.ok(delete("snap-nobody"));
    h.ok(delete(&id));
    assert!(h.d.state().snapshots.is_empty());
    assert!(h.d.state().snapshot_names.is_empty());
    let e = h.err(Request::GetSnapshot {
        snapshot_id: id.clone(),
    });
    assert_eq!(e.code, Code::NotFound);
}

#[test]
fn list_snapshots_filters_by_id_and_source_and_pages_with_tokens() {
    let mut h = Harness::new();
    let a = h.create_id("a");
    let b = h.create_id("b");
    for (name, source) in [("s1", &a), ("s2", &b), ("s3", &a), ("s4", &b)] {
        snap_id(&mut h, name, source);
    }
    let (all, token) = listed(h.ok(list("", "", 0, "")));
    assert_eq!(all, ["snap-s1", "snap-s2", "snap-s3", "snap-s4"]);
    assert!(token.is_empty());
    assert_eq!(listed(h.ok(list(&a, "", 0, ""))).0, ["snap-s1", "snap-s3"]);
    assert_eq!(listed(h.ok(list("", "snap-s2", 0, ""))).0, ["snap-s2"]);
    assert_eq!(
        listed(h.ok(list(&a, "snap-s2", 0, ""))).0,
        Vec::<String>::new()
    );
    assert!(listed(h.ok(list("", "snap-none", 0, ""))).0.is_empty());
    assert!(listed(h.ok(list("vol-none", "", 0, ""))).0.is_empty());
    // Pages of two among b's snapshots, then the rest.
    let (page, token) = listed(h.ok(list(&b, "", 1, "")));
    assert_eq!(
        (page, token.as_str()),
        (vec!["snap-s2".to_string()], "snap-s4")
    );
    let (page, token) = listed(h.ok(list(&b, "", 1, &token)));
    assert_eq!((page, token.as_str()), (vec!["snap-s4".to_string()], ""));
    let (page, token) = listed(h.ok(list("", "", 2, "")));
    assert_eq!(page.len(), 2);
    assert_eq!(listed(h.ok(list("", "", 0, &token))).0.len(), 2);
    assert_eq!(h.err(list("", "", 0, "garbage")).code, Code::Aborted);
}

#[test]
fn a_restore_gets_the_snapshot_record_its_size_and_names_its_source() {
    let mut h = Harness::new();
    let a = h.create_id("a");
    let id = snap_id(&mut h, "s1", &a);
    let e = h.err(restore("small", &id, 1 << 19));
    assert_eq!(e.code, Code::OutOfRange, "{e}");
    let (_, effects) = h.send(restore("r", &id, 0));
    let [Plan::CreateVolume(p)] = executes(&effects)[..] else {
        panic!("{effects:?}")
    };
    assert!(matches!(&p.source, Some(Source::Snapshot(s)) if s.snapshot_id == id));
    assert!(p.suggested_bytes >= 1 << 20);
    h.drain();
    let mut h = Harness::new();
    let a = h.create_id("a");
    let id = snap_id(&mut h, "s1", &a);
    let Response::Volume(v) = h.ok(restore("r", &id, 0)) else {
        panic!()
    };
    assert_eq!(
        v.content_source,
        Some(ContentSource::Snapshot(id.clone())),
        "the answer names what it was made from"
    );
    assert_eq!(h.err(restore("r2", "snap-none", 0)).code, Code::NotFound);
}

#[test]
fn a_clone_needs_its_source_volume_at_most_its_size() {
    let mut h = Harness::new();
    let a = h.create_id("a");
    let Response::Volume(v) = h.ok(clone_of("c", &a, 0)) else {
        panic!()
    };
    assert_eq!(v.content_source, Some(ContentSource::Volume(a.clone())));
    assert_eq!(h.err(clone_of("c2", "vol-none", 0)).code, Code::NotFound);
    assert_eq!(h.err(clone_of("c3", &a, 1 << 10)).code, Code::OutOfRange);
}

#[test]
fn nothing_is_deleted_while_it_is_being_copied() {
    let mut h = Harness::new();
    let a = h.create_id("a");
    // A snapshot being cut holds its source volume.
    let (_, effects) = h.send(snapshot("s1", &a));
    assert_eq!(executes(&effects).len(), 1);
    let e = h.err(Request::DeleteVolume(DeleteVolume {
        volume_id: a.clone(),
        secrets: Secrets::default(),
    }));
    assert_eq!(e.code, Code::Aborted);
    let mut h = Harness::new();
    let a = h.create_id("a");
    let id = snap_id(&mut h, "s1", &a);
    // A restore under way holds its snapshot.
    let (_, effects) = h.send(restore("r", &id, 0));
    assert_eq!(executes(&effects).len(), 1);
    let e = h.err(Request::DeleteSnapshot(DeleteSnapshot {
        snapshot_id: id.clone(),
        secrets: Secrets::default(),
    }));
    assert_eq!(e.code, Code::Aborted);
    assert!(e.message.contains(&id), "{e}");
}

#[test]
fn deleting_a_source_volume_leaves_its_snapshots_restorable() {
    let mut h = Harness::new();
    let a = h.create_id("a");
    let id = snap_id(&mut h, "s1", &a);
    h.ok(Request::DeleteVolume(DeleteVolume {
        volume_id: a,
        secrets: Secrets::default(),
    }));
    assert_eq!(
        listed(h.ok(list("", "", 0, ""))).0,
        std::slice::from_ref(&id)
    );
    h.ok(restore("r", &id, 0));
}

#[test]
fn a_snapshot_being_cut_when_the_driver_died_is_cut_again_at_restart() {
    let mut h = Harness::new();
    let a = h.create_id("a");
    h.send(snapshot("s1", &a));
    let state = h.d.state().clone();
    let mut d = Driver::new(h.d.config().clone(), state);
    let Some(Effect::Execute {
        plan: Plan::CreateSnapshot(p),
        ..
    }) = d.poll()
    else {
        panic!("the cut is carried out again")
    };
    assert_eq!(p.name, "s1");
}

#[test]
fn a_backend_without_snapshots_or_clones_advertises_neither() {
    let mut config = DriverConfig::new("d", "t", "n");
    config.narrow(Features::default());
    for c in [
        ControllerCapability::CreateDeleteSnapshot,
        ControllerCapability::ListSnapshots,
        ControllerCapability::GetSnapshot,
        ControllerCapability::CloneVolume,
        ControllerCapability::ModifyVolume,
    ] {
        assert!(!config.has(c), "{c:?}");
    }
    assert!(config.has(ControllerCapability::CreateDeleteVolume));
    let mut h = Harness::with(config);
    let a = h.create_id("a");
    assert_eq!(h.err(snapshot("s", &a)).code, Code::Unimplemented);
    let e = h.err(clone_of("c", &a, 0));
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(
        e.message
            .contains("cannot create volumes from other volumes"),
        "{e}"
    );
}
