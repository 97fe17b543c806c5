//! Write-ahead persistence: nothing runs before it is recorded, nothing is
//! answered before it is durable, and a failed write fails what it covered.

use super::*;

/// Polls without completing anything.
fn polled(d: &mut Driver) -> Vec<Effect> {
    std::iter::from_fn(|| d.poll()).collect()
}

#[test]
fn a_failed_persist_fails_the_request_and_runs_nothing() {
    let mut h = Harness::new();
    h.d.handle(
        1,
        Input::Request {
            rpc: 7,
            request: stage("v"),
        },
    );
    let [Effect::Persist { op, .. }] = polled(&mut h.d)[..] else {
        panic!("write-ahead: only the persist leaves first")
    };
    h.d.handle(
        2,
        Input::Persisted {
            op,
            result: Err("No space left on device".into()),
        },
    );
    let effects = polled(&mut h.d);
    let [
        Effect::Reply {
            rpc: 7,
            result: Err(e),
        },
    ] = &effects[..]
    else {
        panic!("the plan must not run: {effects:?}")
    };
    assert_eq!(e.code, Code::Unavailable);
    assert!(e.message.contains("No space left on device"), "{e}");
    assert!(h.d.state().in_flight.is_empty());
    assert!(polled(&mut h.d).is_empty(), "no persist retried in a loop");
    // The disk recovers: the retry persists and runs.
    let (_, effects) = h.send(stage("v"));
    assert!(
        matches!(
            &effects[..],
            [Effect::Persist { .. }, Effect::Execute { .. }]
        ),
        "{effects:?}"
    );
}

#[test]
fn an_answer_waits_for_the_persist_that_makes_it_true() {
    let mut h = Harness::new();
    let (_, effects) = h.send(stage("v"));
    let Effect::Execute { op, .. } = effects[1] else {
        panic!("{effects:?}")
    };
    h.d.handle(
        3,
        Input::Done {
            op,
            result: Ok(Outcome::Done),
        },
    );
    let [Effect::Persist { op: persist, .. }] = polled(&mut h.d)[..] else {
        panic!("the completion is persisted before it is answered")
    };
    // A repeat arrives while that persist is in flight: its answer rests
    // on the stage being recorded, so it waits too.
    h.d.handle(
        4,
        Input::Request {
            rpc: 99,
            request: stage("v"),
        },
    );
    assert!(polled(&mut h.d).is_empty(), "nothing leaves before durable");
    h.d.handle(
        5,
        Input::Persisted {
            op: persist,
            result: Ok(()),
        },
    );
    let rpcs: Vec<RpcId> = polled(&mut h.d)
        .iter()
        .filter_map(|e| match e {
            Effect::Reply { rpc, result: Ok(_) } => Some(*rpc),
            _ => None,
        })
        .collect();
    assert_eq!(rpcs, vec![1, 99]);
}

#[test]
fn a_restart_answers_no_request_of_the_last_process() {
    let mut h = Harness::new();
    h.send(stage("v"));
    let mut d = Driver::new(
        DriverConfig::new("volplane.csi.io", "test", "node-a"),
        h.d.state().clone(),
    );
    let Some(Effect::Execute { op, .. }) = d.poll() else {
        panic!("no recovery")
    };
    d.handle(
        1,
        Input::Done {
            op,
            result: Ok(Outcome::Done),
        },
    );
    let effects = polled(&mut d);
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Reply { .. })),
        "rpc ids of the last process mean nothing now: {effects:?}"
    );
}

/// The records of the persists that succeeded, applied in order, replay to
/// the state — also when a persist in between failed (its records are
/// written by the next one).
#[test]
fn the_records_of_successful_persists_replay_to_the_state_across_a_failed_one() {
    use std::collections::BTreeMap;
    let mut h = Harness::new();
    let mut journal: BTreeMap<(&'static str, String), Vec<u8>> = BTreeMap::new();
    let replayed = |journal: &BTreeMap<(&'static str, String), Vec<u8>>| {
        let state = DriverState::from_records(
            journal
                .iter()
                .map(|((t, k), v)| (*t, k.as_str(), v.as_slice())),
        )
        .unwrap();
        serde_json::to_value(&state).unwrap()
    };
    for (i, (volume, fail)) in [("a", false), ("b", true), ("c", false), ("b", false)]
        .into_iter()
        .enumerate()
    {
        h.now += 1;
        h.d.handle(
            h.now,
            Input::Request {
                rpc: 100 + i as u64,
                request: stage(volume),
            },
        );
        while let Some(e) = h.d.poll() {
            match e {
                Effect::Persist { op, changes } => {
                    let result = if fail {
                        Err("EIO".into())
                    } else {
                        for c in changes {
                            match c.value {
                                Some(v) => journal.insert((c.table, c.key), v),
                                None => journal.remove(&(c.table, c.key)),
                            };
                        }
                        Ok(())
                    };
                    h.d.handle(h.now, Input::Persisted { op, result });
                }
                Effect::Execute { op, .. } => h.d.handle(
                    h.now,
                    Input::Done {
                        op,
                        result: Ok(Outcome::Done),
                    },
                ),
                Effect::Reply { .. } => {}
            }
        }
        if !fail {
            assert_eq!(
                replayed(&journal),
                serde_json::to_value(h.d.state()).unwrap(),
                "after staging {volume}"
            );
        }
    }
    assert_eq!(h.d.state().node.len(), 3, "a, b and c are staged");
}

/// The next operation id is written when it changes, and again after a
/// write of it failed; a commit that only records results leaves it alone.
#[test]
fn the_next_operation_id_is_written_only_when_it_changed() {
    let has_next_op = |c: &[crate::driver::state::Change]| {
        c.iter().any(|c| c.table == "meta" && c.key == "next_op")
    };
    let mut s = DriverState::default();
    let first = s.take_changes();
    assert!(has_next_op(&first), "a new store learns it");
    assert!(!has_next_op(&s.take_changes()), "unchanged: not written");
    s.next_op += 1;
    let changed = s.take_changes();
    assert!(has_next_op(&changed));
    s.retouch(changed.iter().map(|c| (c.table, c.key.clone())).collect());
    assert!(
        has_next_op(&s.take_changes()),
        "its write failed: written again"
    );
    let mut loaded = DriverState::default();
    loaded.load_record("meta", "next_op", b"9").unwrap();
    assert_eq!(loaded.next_op, 9);
    assert!(!has_next_op(&loaded.take_changes()), "the store holds it");
    assert_eq!(
        loaded,
        {
            let mut l = DriverState::default();
            l.next_op = 9;
            l
        },
        "not part of the state"
    );
}

#[test]
fn a_controller_outcome_is_answered_before_it_is_written_and_replayed_when_lost() {
    let mut h = Harness::new();
    let (_, effects) = h.send(create("v", 1 << 20));
    let [Effect::Persist { .. }, Effect::Execute { op, ref plan }] = effects[..] else {
        panic!("write-ahead: the intent first: {effects:?}")
    };
    // What is on disk: the intent.
    let durable = h.d.state().clone();
    h.d.handle(
        3,
        Input::Done {
            op,
            result: Ok(success(plan)),
        },
    );
    let effects = polled(&mut h.d);
    let [
        Effect::Reply {
            result: Ok(Response::Volume(v)),
            ..
        },
    ] = &effects[..]
    else {
        panic!("the answer leaves at once, its outcome unwritten: {effects:?}")
    };
    // Written on its own when no other persist comes for it.
    assert_eq!(h.d.poll_timeout(), Some(3 + LAZY_FLUSH));
    h.d.handle_timeout(3 + LAZY_FLUSH);
    assert!(matches!(polled(&mut h.d)[..], [Effect::Persist { .. }]));
    // A crash before that: the intent is carried out again before anything
    // is served, and the volume answered is the one found.
    let mut d = Driver::new(
        DriverConfig::new("volplane.csi.io", "test", "node-a"),
        durable,
    );
    let Some(Effect::Execute { op, plan }) = d.poll() else {
        panic!("the create is not replayed")
    };
    d.handle(
        4,
        Input::Done {
            op,
            result: Ok(success(&plan)),
        },
    );
    polled(&mut d);
    assert_eq!(d.state().volumes.named("v"), Some(v.volume_id.as_str()));
}

#[test]
fn a_credentialed_or_failed_outcome_is_written_before_it_is_answered() {
    let mut h = Harness::new();
    let mut credentialed = create("v", 1 << 20);
    if let Request::CreateVolume(r) = &mut credentialed {
        r.secrets = Secrets([("token".to_string(), "t".to_string())].into());
    }
    let (_, effects) = h.send(credentialed);
    let Effect::Execute { op, ref plan } = effects[1] else {
        panic!("{effects:?}")
    };
    h.d.handle(
        3,
        Input::Done {
            op,
            result: Ok(success(plan)),
        },
    );
    assert!(
        matches!(polled(&mut h.d)[..], [Effect::Persist { .. }]),
        "a credentialed plan is not replayed: its outcome is written first"
    );
    let mut h = Harness::new();
    let (_, effects) = h.send(create("w", 1 << 20));
    let Effect::Execute { op, .. } = effects[1] else {
        panic!("{effects:?}")
    };
    h.d.handle(
        3,
        Input::Done {
            op,
            result: Err(Status::new(Code::ResourceExhausted, "full")),
        },
    );
    assert!(
        matches!(polled(&mut h.d)[..], [Effect::Persist { .. }]),
        "a failure is written before it is answered"
    );
}

#[test]
fn after_a_reboot_node_operations_in_flight_are_forgotten_not_replayed() {
    let mut h = Harness::new();
    h.d.handle(
        1,
        Input::Request {
            rpc: 1,
            request: stage("v"),
        },
    );
    polled(&mut h.d); // the intent is written; the stage is in flight
    let mut state = h.d.state().clone();
    assert!(state.start_boot("boot-a").is_some());
    // The same boot: a process restart, the stage is carried out again.
    let mut same = state.clone();
    assert!(same.start_boot("boot-a").is_none() && !same.rebooted);
    let mut d = Driver::new(DriverConfig::new("volplane.csi.io", "test", "node-a"), same);
    assert!(matches!(d.poll(), Some(Effect::Execute { .. })));
    // Another boot: the mounts are gone, nothing is mounted again.
    assert!(state.start_boot("boot-b").is_some() && state.rebooted);
    let mut d = Driver::new(
        DriverConfig::new("volplane.csi.io", "test", "node-a"),
        state,
    );
    let effects = polled(&mut d);
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Execute { .. })),
        "{effects:?}"
    );
    assert_eq!(d.forgotten_after_reboot().len(), 1);
    assert!(d.state().node.is_empty() && d.state().in_flight.is_empty());
}
