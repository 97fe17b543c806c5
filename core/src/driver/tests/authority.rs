//! The storage as the authority, answers checked against their requests,
//! access modes declared once, and plans that wait for their credentials.

use super::*;

/// A driver whose backend answers lookups and lists.
fn remote() -> Harness {
    let mut config = DriverConfig::new("volplane.csi.io", "test", "node-a");
    config.narrow(Features {
        lookup: true,
        list: true,
        ..Features::ALL
    });
    Harness::with(config)
}

fn volume(id: &str, bytes: u64) -> Volume {
    Volume {
        volume_id: id.into(),
        capacity_bytes: bytes,
        volume_context: Attributes::new(),
        accessible_topology: vec![],
        content_source: None,
    }
}

fn secrets(token: &str) -> Secrets {
    Secrets([("token".to_string(), token.to_string())].into())
}

/// The first plan `effects` carry out, with its operation.
fn first_plan(effects: &[Effect]) -> Option<(OpId, Plan)> {
    effects.iter().find_map(|e| match e {
        Effect::Execute { op, plan } => Some((*op, plan.clone())),
        _ => None,
    })
}

/// A new driver process over the state `h` left, as after kill -9.
fn restarted(h: &Harness) -> Harness {
    let config = DriverConfig::new("volplane.csi.io", "test", "node-a");
    Harness {
        d: Driver::new(config, h.d.state().clone()),
        rpc: 100,
        now: 100,
    }
}

impl Harness {
    /// Sends `request`; its one plan must be `expected`; completes that
    /// plan with `outcome` and returns the answer.
    fn answer_with(
        &mut self,
        request: Request,
        expected: impl Fn(&Plan) -> bool,
        outcome: Result<Outcome, Status>,
    ) -> Result<Response, Status> {
        let (rpc, effects) = self.send(request);
        let Some((op, plan)) = first_plan(&effects) else {
            panic!("no plan: {effects:?}")
        };
        assert!(expected(&plan), "{plan:?}");
        let effects = self.complete(op, outcome);
        self.finish(rpc, effects)
    }

    /// Completes the plan `op` with `outcome`; what the driver does next.
    fn complete(&mut self, op: OpId, outcome: Result<Outcome, Status>) -> Vec<Effect> {
        self.d.handle(
            self.now,
            Input::Done {
                op,
                result: outcome,
            },
        );
        self.drain()
    }
}

fn get(id: &str) -> Request {
    Request::ControllerGetVolume {
        volume_id: id.into(),
    }
}

fn lookup_of(id: &str) -> impl Fn(&Plan) -> bool + '_ {
    move |p| matches!(p, Plan::LookupVolume { volume_id, .. } if volume_id == id)
}

/// Given a controller started on an empty journal, when it is asked about
/// a volume the storage holds, then the storage is asked, the volume is
/// adopted, and every later call is served as by the one that made it.
#[test]
fn a_volume_the_journal_lacks_is_looked_up_adopted_and_served() {
    let mut h = remote();
    let found = Ok(Outcome::VolumeFound(Some(StoredVolume::new(volume(
        "vol-x",
        1 << 20,
    )))));
    let answer = h.answer_with(get("vol-x"), lookup_of("vol-x"), found);
    let Ok(Response::ControllerVolume(listed)) = answer else {
        panic!("{answer:?}")
    };
    assert_eq!(listed.volume.capacity_bytes, 1 << 20);
    assert!(h.d.state().volumes.contains_key("vol-x"), "adopted");
    let (_, effects) = h.send(get("vol-x"));
    assert!(executes(&effects).is_empty(), "known now: {effects:?}");
    let published = h.ok(cpublish("vol-x", "node-a", AccessMode::SingleNodeWriter));
    assert!(matches!(published, Response::Published { .. }));
    let Request::ControllerExpand(expand) = expand_req("vol-x", 2 << 20) else {
        unreachable!()
    };
    assert!(matches!(
        h.ok(Request::ControllerExpand(expand)),
        Response::ControllerExpanded { capacity_bytes, .. } if capacity_bytes == 2 << 20
    ));
    check_invariants(h.d.state()).unwrap();
}

impl Harness {
    /// Sends `request`, whose first plan must be a lookup of `id`; while
    /// it is in flight, a create answers `id`. The request and its lookup.
    fn made_while_looked_up(&mut self, request: Request, id: &str) -> (RpcId, OpId) {
        let (rpc, effects) = self.send(request);
        let Some((lookup, plan)) = first_plan(&effects) else {
            panic!("no lookup: {effects:?}")
        };
        assert!(lookup_of(id)(&plan), "{plan:?}");
        let (made, effects) = self.send(create(&format!("pvc-{id}"), 1 << 20));
        let Some((op, _)) = first_plan(&effects) else {
            panic!("no create: {effects:?}")
        };
        let effects = self.complete(op, Ok(Outcome::Created(volume(id, 1 << 20))));
        assert!(self.finish(made, effects).is_ok());
        (rpc, lookup)
    }
}

/// Given a lookup of an id the journal lacks, when a create answers that
/// id before the lookup completes, then the call is served from the
/// journal's record, not refused as INTERNAL.
#[test]
fn a_volume_made_while_it_was_looked_up_is_served_from_the_journal() {
    let mut h = remote();
    let (rpc, lookup) = h.made_while_looked_up(get("vol-x"), "vol-x");
    let effects = h.complete(lookup, Ok(Outcome::VolumeFound(None)));
    let answer = h.finish(rpc, effects);
    assert!(
        matches!(&answer, Ok(Response::ControllerVolume(v)) if v.volume.volume_id == "vol-x"),
        "{answer:?}"
    );
}

/// Given a group snapshot of two volumes the journal lacks, when the first
/// is made by a create while it is looked up, then the lookup's answer is
/// taken as the first's (let go: the journal's record is newer) and the
/// second is still put to the storage, not marked absent unasked.
#[test]
fn a_lookup_answer_is_for_the_volume_it_asked_about() {
    let mut h = remote();
    let group = Request::CreateGroupSnapshot(CreateGroupSnapshot {
        name: "g".into(),
        source_volume_ids: vec!["vol-a".into(), "vol-b".into()],
        parameters: Attributes::new(),
        secrets: Secrets::default(),
    });
    let (rpc, lookup) = h.made_while_looked_up(group, "vol-a");
    let effects = h.complete(lookup, Ok(Outcome::VolumeFound(None)));
    let Some((second, plan)) = first_plan(&effects) else {
        panic!("vol-b was not asked about: {effects:?}")
    };
    assert!(lookup_of("vol-b")(&plan), "{plan:?}");
    let stored = StoredVolume::new(volume("vol-b", 1 << 20));
    let effects = h.complete(second, Ok(Outcome::VolumeFound(Some(stored))));
    assert!(h.d.state().volumes.contains_key("vol-b"), "adopted");
    let Some((cut, plan)) = first_plan(&effects) else {
        panic!("no group snapshot: {effects:?}")
    };
    let Plan::CreateGroupSnapshot(g) = &plan else {
        panic!("{plan:?}")
    };
    let sources: Vec<&str> = g.sources.iter().map(|v| v.volume_id.as_str()).collect();
    assert_eq!(sources, ["vol-a", "vol-b"]);
    let effects = h.complete(cut, Ok(success(&plan)));
    let answer = h.finish(rpc, effects);
    assert!(
        matches!(answer, Ok(Response::GroupSnapshot(_))),
        "{answer:?}"
    );
}

fn expand_req(id: &str, bytes: u64) -> Request {
    Request::ControllerExpand(ControllerExpand {
        volume_id: id.into(),
        capacity: CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        },
        capability: None,
        secrets: Secrets::default(),
    })
}

#[test]
fn not_found_only_when_the_storage_has_nothing_either_and_its_failure_is_passed_on() {
    let mut h = remote();
    let e = h
        .answer_with(
            get("vol-x"),
            lookup_of("vol-x"),
            Ok(Outcome::VolumeFound(None)),
        )
        .unwrap_err();
    assert_eq!(e.code, Code::NotFound, "{e}");
    let down = Status::new(Code::Unavailable, "the appliance answered 503");
    let e = h
        .answer_with(get("vol-x"), lookup_of("vol-x"), Err(down))
        .unwrap_err();
    assert_eq!(e.code, Code::Unavailable, "the CO retries: {e}");
    assert!(h.d.state().volumes.is_empty());
    // An unpublish of something the storage does not hold is done.
    let unpublish = Request::ControllerUnpublish(ControllerUnpublish {
        volume_id: "vol-x".into(),
        node_id: Some("node-a".into()),
        secrets: Secrets::default(),
    });
    let answer = h.answer_with(
        unpublish,
        lookup_of("vol-x"),
        Ok(Outcome::VolumeFound(None)),
    );
    assert_eq!(answer, Ok(Response::Empty));
}

#[test]
fn a_lookup_answering_for_another_id_is_the_backends_mistake() {
    let mut h = remote();
    let wrong = Ok(Outcome::VolumeFound(Some(StoredVolume::new(volume(
        "vol-y", 1,
    )))));
    let e = h
        .answer_with(get("vol-x"), lookup_of("vol-x"), wrong)
        .unwrap_err();
    assert_eq!(e.code, Code::Internal);
    assert!(e.message.contains("Backend::lookup_volume"), "{e}");
    assert!(h.d.state().volumes.is_empty());
}

#[test]
fn without_lookups_or_for_an_id_no_backend_makes_nothing_is_asked() {
    let mut h = Harness::new();
    let (_, effects) = h.send(get("vol-x"));
    assert!(executes(&effects).is_empty(), "{effects:?}");
    let mut h = remote();
    let (_, effects) = h.send(get("../../etc"));
    assert!(executes(&effects).is_empty(), "{effects:?}");
    assert_eq!(h.err(get("../../etc")).code, Code::NotFound);
}

/// The storage says where a volume it holds is attached: that node's
/// publication is kept (uncertain), a single-node volume is not published
/// to a second node, and an unpublish from the first is carried out.
#[test]
fn an_adopted_volume_keeps_the_storages_attachments() {
    let mut h = remote();
    let mut stored = StoredVolume::new(volume("vol-x", 1));
    stored.published_node_ids = vec!["node-b".into()];
    let answer = h.answer_with(
        cpublish("vol-x", "node-a", AccessMode::SingleNodeWriter),
        lookup_of("vol-x"),
        Ok(Outcome::VolumeFound(Some(stored))),
    );
    assert_eq!(answer.unwrap_err().code, Code::FailedPrecondition);
    let unpublish = Request::ControllerUnpublish(ControllerUnpublish {
        volume_id: "vol-x".into(),
        node_id: Some("node-b".into()),
        secrets: Secrets::default(),
    });
    let (_, effects) = h.send(unpublish);
    assert!(
        matches!(&executes(&effects)[..], [Plan::ControllerUnpublish { node_ids, .. }] if node_ids == &["node-b".to_string()]),
        "{effects:?}"
    );
}

#[test]
fn list_volumes_answers_from_the_storage_with_its_tokens() {
    let mut h = remote();
    let list = Request::ListVolumes(ListVolumes {
        max_entries: 1,
        starting_token: "page-2".into(),
    });
    let page = VolumePage {
        entries: vec![StoredVolume::new(volume("vol-z", 5))],
        next_token: "page-3".into(),
    };
    let answer = h.answer_with(
        list,
        |p| matches!(p, Plan::ListVolumes { starting_token, max_entries: 1 } if starting_token == "page-2"),
        Ok(Outcome::VolumesListed(page)),
    );
    let Ok(Response::Volumes {
        entries,
        next_token,
    }) = answer
    else {
        panic!("{answer:?}")
    };
    assert_eq!(entries[0].volume.volume_id, "vol-z");
    assert_eq!(next_token, "page-3");
}

#[test]
fn a_snapshot_the_journal_lacks_is_looked_up_for_a_restore() {
    let mut h = remote();
    let snapshot = Snapshot {
        snapshot_id: "snap-s".into(),
        source_volume_id: "vol-a".into(),
        size_bytes: 1 << 20,
        creation_time: Timestamp::default(),
        ready_to_use: true,
        group_snapshot_id: String::new(),
    };
    let answer = h.answer_with(
        restore("r", "snap-s", 1 << 20),
        |p| matches!(p, Plan::LookupSnapshot { snapshot_id, .. } if snapshot_id == "snap-s"),
        Ok(Outcome::SnapshotFound(Some(snapshot))),
    );
    assert!(matches!(answer, Ok(Response::Volume(_))), "{answer:?}");
    check_invariants(h.d.state()).unwrap();
}

#[test]
fn a_short_expand_is_the_backends_mistake_not_a_success() {
    let mut h = Harness::new();
    let id = h.create_id("a");
    let short = Ok(Outcome::ControllerExpanded {
        capacity_bytes: 1 << 20,
        node_expansion_required: false,
    });
    let e = h
        .answer_with(
            expand_req(&id, 8 << 20),
            |p| matches!(p, Plan::ControllerExpand { .. }),
            short,
        )
        .unwrap_err();
    assert_eq!(e.code, Code::Internal);
    assert!(e.message.contains("Backend::controller_expand"), "{e}");
    assert!(e.message.contains("1048576 bytes"), "{e}");
}

#[test]
fn a_create_outside_the_requisite_topology_is_the_backends_mistake() {
    let mut h = Harness::new();
    let Request::CreateVolume(mut r) = create("a", 1) else {
        unreachable!()
    };
    r.accessibility = Some(TopologyRequirement {
        requisite: vec![[("zone".to_string(), "a".to_string())].into()],
        preferred: vec![],
    });
    let mut v = volume("vol-a", 1);
    v.accessible_topology = vec![[("zone".to_string(), "b".to_string())].into()];
    let e = h
        .answer_with(
            Request::CreateVolume(r),
            |p| matches!(p, Plan::CreateVolume(_)),
            Ok(Outcome::Created(v)),
        )
        .unwrap_err();
    assert_eq!(e.code, Code::Internal);
    assert!(e.message.contains("Backend::create_volume"), "{e}");
}

#[test]
fn multi_node_modes_are_refused_before_the_backend_unless_declared() {
    let mut config = DriverConfig::new("volplane.csi.io", "test", "node-a");
    config.narrow(Features::default());
    let mut h = Harness::with(config);
    let Request::CreateVolume(mut r) = create("a", 1) else {
        unreachable!()
    };
    r.capabilities = vec![mode_cap(AccessMode::MultiNodeMultiWriter)];
    let (_, effects) = h.send(Request::CreateVolume(r.clone()));
    assert!(executes(&effects).is_empty());
    let e = h.err(Request::CreateVolume(r.clone()));
    assert_eq!(e.code, Code::InvalidArgument);
    assert!(e.message.contains("MULTI_NODE_MULTI_WRITER"), "{e}");
    let mut h = Harness::new();
    assert!(matches!(
        h.ok(Request::CreateVolume(r)),
        Response::Volume(_)
    ));
}

/// A credentialed CreateVolume in flight when the process died: the next
/// one does not call the storage without its credentials; it waits for the
/// CO's retry, carries the plan out with the retry's secrets, and answers
/// the retry. Other volumes do not wait, and the driver is ready.
#[test]
fn a_credentialed_plan_waits_for_its_retry_and_runs_with_its_secrets() {
    let mut h = Harness::new();
    let Request::CreateVolume(mut r) = create("a", 1 << 20) else {
        unreachable!()
    };
    r.secrets = secrets("first");
    h.send(Request::CreateVolume(r.clone()));
    let state = h.d.state().clone();
    let stored: Vec<_> = {
        let mut s = state.clone();
        s.touch_all();
        s.take_changes()
    };
    let back = DriverState::from_records(
        stored
            .iter()
            .filter_map(|c| Some((c.table, c.key.as_str(), c.value.as_deref()?))),
    )
    .unwrap();
    let mut h = Harness {
        d: Driver::new(DriverConfig::new("volplane.csi.io", "test", "node-a"), back),
        rpc: 100,
        now: 100,
    };
    let effects = h.drain();
    assert!(
        executes(&effects).is_empty(),
        "nothing without credentials: {effects:?}"
    );
    assert_eq!(
        h.d.waiting_for_credentials(),
        vec!["CreateVolume \"a\"".to_string()]
    );
    assert_eq!(h.ok(Request::Probe), Response::Probe { ready: true });
    assert!(
        matches!(h.ok(create("b", 1)), Response::Volume(_)),
        "others go on"
    );
    r.secrets = secrets("retry");
    let (rpc, effects) = h.send(Request::CreateVolume(r.clone()));
    let [Plan::CreateVolume(p)] = &executes(&effects)[..] else {
        panic!("{effects:?}")
    };
    assert_eq!(p.secrets, secrets("retry"));
    let op = effects
        .iter()
        .find_map(|e| match e {
            Effect::Execute { op, .. } => Some(*op),
            _ => None,
        })
        .unwrap();
    let effects = h.complete(op, Ok(success(&Plan::CreateVolume(p.clone()))));
    assert!(
        effects.iter().any(|e| matches!(e, Effect::Reply { rpc: r, result: Ok(Response::Volume(v)) } if *r == rpc && v.volume_id == "vol-a")),
        "{effects:?}"
    );
    assert!(h.d.waiting_for_credentials().is_empty());
    assert_eq!(
        h.d.state().volumes.len(),
        2,
        "exactly one volume made for a"
    );
}

/// A credentialed ControllerPublish in flight when the process died, and
/// the CO moved on: its ControllerUnpublish (which carries the same
/// secrets) carries the publish out first with them, then undoes it — it
/// is not refused for as long as the driver runs.
#[test]
fn the_call_that_undoes_a_parked_publish_resumes_it_then_undoes_it() {
    let mut h = Harness::new();
    let id = h.create_id("a");
    let Request::ControllerPublish(mut p) = cpublish(&id, "node-a", AccessMode::SingleNodeWriter)
    else {
        unreachable!()
    };
    p.secrets = secrets("publish");
    h.send(Request::ControllerPublish(p));
    let d = Driver::new(
        DriverConfig::new("volplane.csi.io", "test", "node-a"),
        h.d.state().clone(),
    );
    let mut h = Harness {
        d,
        rpc: 100,
        now: 100,
    };
    assert!(
        executes(&h.drain()).is_empty(),
        "nothing without credentials"
    );
    assert_eq!(h.d.waiting_for_credentials().len(), 1);
    let unpublish = Request::ControllerUnpublish(ControllerUnpublish {
        volume_id: id.clone(),
        node_id: Some("node-a".into()),
        secrets: secrets("unpublish"),
    });
    let (_, effects) = h.send(unpublish);
    let (op, plan) = first_plan(&effects).expect("the publish, resumed");
    let Plan::ControllerPublish { secrets: s, .. } = &plan else {
        panic!("{plan:?}")
    };
    assert_eq!(*s, secrets("unpublish"), "with the call's secrets");
    let effects = h.complete(op, Ok(success(&plan)));
    let [
        Plan::ControllerUnpublish {
            node_ids,
            secrets: s,
            ..
        },
    ] = &executes(&effects)[..]
    else {
        panic!("then the unpublish: {effects:?}")
    };
    assert_eq!(node_ids, &vec!["node-a".to_string()]);
    assert_eq!(*s, secrets("unpublish"));
    assert!(h.d.waiting_for_credentials().is_empty());
}

#[test]
fn another_call_on_a_parked_volume_is_told_what_it_waits_for() {
    let mut h = Harness::new();
    let id = h.create_id("a");
    h.send(Request::DeleteVolume(DeleteVolume {
        volume_id: id.clone(),
        secrets: secrets("s"),
    }));
    let mut d = Driver::new(
        DriverConfig::new("volplane.csi.io", "test", "node-a"),
        h.d.state().clone(),
    );
    assert!(d.poll().is_none() || d.waiting_for_credentials().len() == 1);
    let mut h = Harness {
        d,
        rpc: 100,
        now: 100,
    };
    h.drain();
    let e = h.err(cpublish(&id, "node-a", AccessMode::SingleNodeWriter));
    assert_eq!(e.code, Code::Aborted);
    assert!(e.message.contains("DeleteVolume vol-a"), "{e}");
    assert!(e.message.contains("credentials"), "{e}");
    h.ok(Request::DeleteVolume(DeleteVolume {
        volume_id: id.clone(),
        secrets: secrets("s"),
    }));
    assert!(h.d.state().volumes.is_empty());
}

/// Any other call on a parked volume that carries secrets resumes the
/// parked plan with them (the CO may never retry the first call), then is
/// decided against what it left: a publish after a parked delete finds the
/// volume gone.
#[test]
fn another_credentialed_call_resumes_a_parked_plan_then_is_decided() {
    let mut h = Harness::new();
    let id = h.create_id("a");
    h.send(Request::DeleteVolume(DeleteVolume {
        volume_id: id.clone(),
        secrets: secrets("delete"),
    }));
    let mut h = restarted(&h);
    h.drain();
    let Request::ControllerPublish(mut p) = cpublish(&id, "node-a", AccessMode::SingleNodeWriter)
    else {
        unreachable!()
    };
    p.secrets = secrets("publish");
    let (rpc, effects) = h.send(Request::ControllerPublish(p));
    let (op, plan) = first_plan(&effects).expect("the delete, resumed");
    let Plan::DeleteVolume { secrets: s, .. } = &plan else {
        panic!("{plan:?}")
    };
    assert_eq!(*s, secrets("publish"));
    let effects = h.complete(op, Ok(success(&plan)));
    let answer = effects.iter().find_map(|e| match e {
        Effect::Reply { rpc: r, result } if *r == rpc => Some(result.clone()),
        _ => None,
    });
    assert!(
        matches!(&answer, Some(Err(e)) if e.code == Code::NotFound),
        "{answer:?}"
    );
    assert!(h.d.state().volumes.is_empty());
    assert!(h.d.waiting_for_credentials().is_empty());
}

/// A credentialed NodePublish in flight when the process died, and the pod
/// went: its NodeUnpublishVolume carries no secrets to resume it with, so
/// it takes the parked plan's place and unpublishes the target (which the
/// crashed publish may have mounted) — never refused for as long as the
/// driver runs. Likewise NodeUnstageVolume of a parked stage.
#[test]
fn the_node_call_that_undoes_a_parked_plan_takes_its_place() {
    let mut h = Harness::new();
    h.ok(stage("v"));
    let Request::NodePublish(mut p) = publish("v", "p1", AccessMode::SingleNodeWriter) else {
        unreachable!()
    };
    p.secrets = secrets("publish");
    h.send(Request::NodePublish(p));
    let mut h = restarted(&h);
    assert!(
        executes(&h.drain()).is_empty(),
        "nothing without credentials"
    );
    assert_eq!(h.d.waiting_for_credentials().len(), 1);
    let (_, effects) = h.send(unpublish("v", "p1"));
    let (op, plan) = first_plan(&effects).expect("an unpublish in the publish's place");
    let Plan::Unpublish(u) = &plan else {
        panic!("{plan:?}")
    };
    assert_eq!(u.target_path, target("p1"));
    assert!(h.d.waiting_for_credentials().is_empty());
    h.complete(op, Ok(success(&plan)));
    h.ok(unstage("v"));
    assert!(h.d.state().in_flight.is_empty() && h.d.state().node.is_empty());

    // A parked stage, undone by its unstage.
    let mut h = Harness::new();
    let Request::NodeStage(mut st) = stage("w") else {
        unreachable!()
    };
    st.secrets = secrets("stage");
    h.send(Request::NodeStage(st));
    let mut h = restarted(&h);
    h.drain();
    let (_, effects) = h.send(unstage("w"));
    let [Plan::Unstage(u)] = &executes(&effects)[..] else {
        panic!("an unstage in the stage's place: {effects:?}")
    };
    assert_eq!(u.staging_path, staging("w"));
    assert!(h.d.waiting_for_credentials().is_empty());
}

#[test]
fn a_plan_without_secrets_is_carried_out_again_at_once() {
    let mut h = Harness::new();
    h.send(create("a", 1));
    let mut d = Driver::new(
        DriverConfig::new("volplane.csi.io", "test", "node-a"),
        h.d.state().clone(),
    );
    assert!(matches!(d.poll(), Some(Effect::Execute { .. })));
    assert!(d.waiting_for_credentials().is_empty());
}

/// An in-flight record an earlier volplane wrote (no `credentialed`)
/// reads back; a plan of a kind that carries secrets waits for its retry.
#[test]
fn an_earlier_in_flight_record_reads_back() {
    #[derive(serde::Serialize)]
    struct Earlier<'a> {
        key: &'a str,
        plan: &'a Plan,
    }
    let plan = Plan::DeleteVolume {
        volume: volume("vol-a", 1),
        secrets: Secrets::default(),
    };
    let bytes = tracked::encode(&Earlier {
        key: "vol-a",
        plan: &plan,
    });
    let f = state::InFlight::decode(&bytes).unwrap();
    assert_eq!(
        (f.key.as_str(), &f.plan, f.credentialed),
        ("vol-a", &plan, true)
    );
    let now = tracked::encode(&f);
    assert_eq!(state::InFlight::decode(&now).unwrap(), f);
}

/// Each start records an incarnation larger than every earlier one, and
/// reads back what the last start recorded.
#[test]
fn incarnations_grow_across_starts() {
    let mut state = DriverState::default();
    let (first, record) = state.next_incarnation();
    assert_eq!(first, 1);
    let value = record.value.clone().unwrap();
    let mut back =
        DriverState::from_records([(record.table, record.key.as_str(), value.as_slice())]).unwrap();
    assert_eq!(back.incarnation, 1);
    assert_eq!(back.next_incarnation().0, 2);
    let bad = DriverState::from_records([("meta", "incarnation", b"x".as_slice())]).unwrap_err();
    assert_eq!(
        bad,
        crate::driver::RecordError::NotANumber("x".into()).at("meta", "incarnation")
    );
    assert_eq!(
        bad.to_string(),
        "table meta: record \"incarnation\": \"x\" is not a number"
    );
}
