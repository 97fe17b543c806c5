//! Group snapshots: by name, every member or none, members restorable and
//! listed but deleted only with their group.

use super::*;

fn group(name: &str, sources: &[&str]) -> Request {
    Request::CreateGroupSnapshot(CreateGroupSnapshot {
        name: name.into(),
        source_volume_ids: sources.iter().map(|s| s.to_string()).collect(),
        parameters: Attributes::new(),
        secrets: Secrets::default(),
    })
}

fn delete_group(id: &str, members: &[&str]) -> Request {
    Request::DeleteGroupSnapshot(DeleteGroupSnapshot {
        group_snapshot_id: id.into(),
        snapshot_ids: members.iter().map(|s| s.to_string()).collect(),
        secrets: Secrets::default(),
    })
}

fn cut_group(h: &mut Harness, name: &str, sources: &[&str]) -> GroupSnapshot {
    match h.ok(group(name, sources)) {
        Response::GroupSnapshot(g) => g,
        r => panic!("{r:?}"),
    }
}

#[test]
fn a_group_is_cut_once_by_name_and_refused_for_other_volumes() {
    let mut h = Harness::new();
    let (a, b, c) = (h.create_id("a"), h.create_id("b"), h.create_id("c"));
    let g = cut_group(&mut h, "g", &[&a, &b]);
    assert_eq!(g.snapshots.len(), 2);
    assert!(
        g.snapshots
            .iter()
            .all(|s| s.group_snapshot_id == g.group_snapshot_id)
    );
    assert!(g.ready_to_use);
    let (_, effects) = h.send(group("g", &[&b, &a]));
    assert!(
        executes(&effects).is_empty(),
        "the same set, answered from memory"
    );
    assert_eq!(h.ok(group("g", &[&b, &a])), Response::GroupSnapshot(g));
    assert_eq!(h.err(group("g", &[&a, &c])).code, Code::AlreadyExists);
    assert_eq!(h.err(group("g2", &[&a, "vol-none"])).code, Code::NotFound);
    assert_eq!(h.err(group("g3", &[&a, &a])).code, Code::InvalidArgument);
}

#[test]
fn members_are_listed_and_restored_but_deleted_only_with_their_group() {
    let mut h = Harness::new();
    let (a, b) = (h.create_id("a"), h.create_id("b"));
    let g = cut_group(&mut h, "g", &[&a, &b]);
    let member = g.snapshots[0].snapshot_id.clone();
    let Response::Snapshots { entries, .. } = h.ok(Request::ListSnapshots(ListSnapshots {
        max_entries: 0,
        starting_token: String::new(),
        source_volume_id: String::new(),
        snapshot_id: member.clone(),
        secrets: Default::default(),
    })) else {
        panic!()
    };
    assert_eq!(entries[0].group_snapshot_id, g.group_snapshot_id);
    h.ok(restore("r", &member, 0));
    let e = h.err(Request::DeleteSnapshot(DeleteSnapshot {
        snapshot_id: member.clone(),
        secrets: Secrets::default(),
    }));
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(e.message.contains(&g.group_snapshot_id), "{e}");
    let e = h.err(delete_group(&g.group_snapshot_id, &[&member]));
    assert_eq!(e.code, Code::InvalidArgument, "not every member named: {e}");
    let members: Vec<&str> = g.snapshots.iter().map(|s| s.snapshot_id.as_str()).collect();
    h.ok(delete_group(&g.group_snapshot_id, &members));
    assert!(h.d.state().snapshots.is_empty());
    assert!(h.d.state().groups.is_empty());
    h.ok(delete_group(&g.group_snapshot_id, &[]));
    let e = h.err(Request::GetGroupSnapshot {
        group_snapshot_id: g.group_snapshot_id.clone(),
        snapshot_ids: vec![],
        secrets: Default::default(),
    });
    assert_eq!(e.code, Code::NotFound);
}

#[test]
fn a_backend_that_cuts_other_members_than_asked_records_nothing() {
    let mut h = Harness::new();
    let (a, b) = (h.create_id("a"), h.create_id("b"));
    let (_, effects) = h.send(group("g", &[&a, &b]));
    let [Effect::Execute { op, plan }] = &effects[1..] else {
        panic!("{effects:?}")
    };
    let Outcome::GroupCreated(mut g) = success(plan) else {
        panic!()
    };
    g.snapshots.pop();
    h.d.handle(
        h.now,
        Input::Done {
            op: *op,
            result: Ok(Outcome::GroupCreated(g)),
        },
    );
    let effects = h.drain();
    assert!(
        effects.iter().any(|e| matches!(
            e,
            Effect::Reply { result: Err(s), .. } if s.code == Code::Internal
        )),
        "{effects:?}"
    );
    assert!(h.d.state().snapshots.is_empty());
    assert!(h.d.state().groups.is_empty());
    check_invariants(h.d.state()).unwrap();
}

#[test]
fn a_volume_in_a_group_being_cut_is_not_deleted() {
    let mut h = Harness::new();
    let (a, b) = (h.create_id("a"), h.create_id("b"));
    let (_, effects) = h.send(group("g", &[&a, &b]));
    assert_eq!(executes(&effects).len(), 1);
    let e = h.err(Request::DeleteVolume(DeleteVolume {
        volume_id: b,
        secrets: Secrets::default(),
    }));
    assert_eq!(e.code, Code::Aborted);
}

#[test]
fn a_backend_without_group_snapshots_offers_no_group_controller() {
    let mut config = DriverConfig::new("d", "t", "n");
    config.narrow(Features::default());
    let mut h = Harness::with(config);
    let Response::PluginCapabilities(caps) = h.ok(Request::GetPluginCapabilities) else {
        panic!()
    };
    assert!(!caps.contains(&PluginCapability::GroupControllerService));
    assert_eq!(
        h.err(Request::GroupControllerGetCapabilities).code,
        Code::Unimplemented
    );
    let a = h.create_id("a");
    assert_eq!(h.err(group("g", &[&a])).code, Code::Unimplemented);
}
