//! Properties of the driver machine over random sessions.

use quickcheck::{Arbitrary, Gen, TestResult};

use crate::control::chaos::checker;

use super::*;

/// One step of a random session against the node and controller.
#[derive(Debug, Clone)]
enum Step {
    Send(Request),
    /// Complete the oldest outstanding plan, successfully or not; a
    /// snapshot cut successfully is ready to use, or not yet.
    Complete(bool, bool),
}

const VOLUMES: [&str; 2] = ["v1", "v2"];
const PODS: [&str; 3] = ["p1", "p2", "p3"];

fn pick<T: Clone>(g: &mut Gen, xs: &[T]) -> T {
    g.choose(xs).unwrap().clone()
}

impl Arbitrary for Step {
    fn arbitrary(g: &mut Gen) -> Step {
        let v = pick(g, &VOLUMES);
        let pod = pick(g, &PODS);
        let mode = pick(
            g,
            &[
                AccessMode::SingleNodeWriter,
                AccessMode::SingleNodeMultiWriter,
            ],
        );
        let request = match u8::arbitrary(g) % 14 {
            0 => stage_at(v, &staging(v), mode),
            1 => unstage(v),
            2 => publish(v, pod, mode),
            3 => unpublish(v, pod),
            4 => create(v, pick(g, &[1u64 << 20, 1 << 21])),
            5 => cpublish(&format!("vol-{v}"), "node-a", mode),
            6 => Request::ControllerUnpublish(ControllerUnpublish {
                volume_id: format!("vol-{v}"),
                node_id: None,
                secrets: Secrets::default(),
            }),
            7 => Request::DeleteVolume(DeleteVolume {
                volume_id: format!("vol-{v}"),
                secrets: Secrets::default(),
            }),
            8 => snapshot(&format!("s-{v}"), &format!("vol-{v}")),
            9 => Request::DeleteSnapshot(DeleteSnapshot {
                snapshot_id: format!("snap-s-{v}"),
                secrets: Secrets::default(),
            }),
            10 => restore(&format!("r-{v}"), &format!("snap-s-{v}"), 1 << 21),
            11 => Request::CreateGroupSnapshot(CreateGroupSnapshot {
                name: "g".into(),
                source_volume_ids: vec!["vol-v1".into(), "vol-v2".into()],
                parameters: Attributes::new(),
                secrets: Secrets::default(),
            }),
            12 => Request::DeleteGroupSnapshot(DeleteGroupSnapshot {
                group_snapshot_id: "group-g".into(),
                snapshot_ids: vec![],
                secrets: Secrets::default(),
            }),
            _ => return Step::Complete(bool::arbitrary(g), bool::arbitrary(g)),
        };
        Step::Send(request)
    }
}

/// A checker with a reproducible seed: `VOLPLANE_QC_SEED` overrides it.
/// Runs steps and checks after each: the state invariants; no Unstage
/// plan while that volume has targets; no Publish plan before its stage.
/// Also: a snapshot is never reported ready before a cut of it completed
/// ready; neither a source volume nor a source snapshot is deleted
/// while a plan copies from it.
fn safe(steps: Vec<Step>) -> bool {
    let mut h = Harness::new();
    let mut pending = std::collections::VecDeque::new();
    let mut ready = std::collections::BTreeSet::new();
    for step in steps {
        let effects = match step {
            Step::Send(r) => h.send(r).1,
            Step::Complete(ok, cut_ready) => match pending.pop_front() {
                Some((op, plan)) => {
                    let result = match (&plan, ok) {
                        (_, false) => Err(Status::internal("injected")),
                        (Plan::CreateSnapshot(p), true) => {
                            if cut_ready {
                                ready.insert(format!("snap-{}", p.name));
                            }
                            Ok(Outcome::SnapshotCreated(cut(p, cut_ready)))
                        }
                        (plan, true) => Ok(success(plan)),
                    };
                    h.d.handle(h.now, Input::Done { op, result });
                    h.drain()
                }
                None => vec![],
            },
        };
        for e in effects {
            if let Effect::Reply {
                result: Ok(Response::Snapshot(s)),
                ..
            } = &e
                && s.ready_to_use
                && !ready.contains(&s.snapshot_id)
            {
                eprintln!("{} reported ready before it was", s.snapshot_id);
                return false;
            }
            if let Effect::Execute { op, plan } = e {
                let copying = |id: &str| {
                    pending.iter().any(|(_, p): &(OpId, Plan)| match p {
                        Plan::CreateSnapshot(s) => s.source.volume_id == id,
                        Plan::CreateGroupSnapshot(g) => g.sources.iter().any(|v| v.volume_id == id),
                        Plan::CreateVolume(c) => c.source.as_ref().is_some_and(|s| match s {
                            Source::Snapshot(s) => s.snapshot_id == id,
                            Source::Volume(v) => v.volume_id == id,
                        }),
                        _ => false,
                    })
                };
                match &plan {
                    Plan::DeleteVolume { volume, .. } if copying(&volume.volume_id) => {
                        return false;
                    }
                    Plan::DeleteSnapshot { snapshot, .. } if copying(&snapshot.snapshot_id) => {
                        return false;
                    }
                    _ => {}
                }
                match &plan {
                    Plan::Unstage(p) if !h.d.state().targets(&p.volume_id).is_empty() => {
                        return false;
                    }
                    Plan::Publish(p) => {
                        let staged =
                            h.d.state()
                                .node
                                .get(&p.volume_id)
                                .and_then(|v| v.stage.as_ref());
                        if !staged.is_some_and(|s| s.certain && s.staging_path == p.staging_path) {
                            return false;
                        }
                    }
                    Plan::DeleteVolume { volume, .. }
                        if h.d
                            .state()
                            .volumes
                            .unpacked(&volume.volume_id)
                            .is_some_and(|v| !v.published.is_empty()) =>
                    {
                        return false;
                    }
                    _ => {}
                }
                pending.push_back((op, plan));
            }
        }
        if let Err(e) = check_invariants(h.d.state()) {
            eprintln!("invariant: {e}");
            return false;
        }
    }
    true
}

/// After any history, a request that just succeeded, repeated at once,
/// gets the same answer and produces no plan.
fn idempotent(steps: Vec<Step>, last: Step) -> TestResult {
    let mut h = Harness::new();
    for step in steps {
        if let Step::Send(r) = step {
            let _ = h.call(r);
        }
    }
    // Only a request that succeeds says anything about repeating it.
    let Step::Send(r) = last else {
        return TestResult::discard();
    };
    let Ok(first) = h.call(r.clone()) else {
        return TestResult::discard();
    };
    if matches!(r, Request::DeleteVolume(_) | Request::DeleteSnapshot(_)) {
        // The storage, not the journal, says what is gone: a repeated
        // delete is put to it again, and answers the same.
        return TestResult::from_bool(h.call(r) == Ok(first));
    }
    let (_, effects) = h.send(r);
    // A persist may go meanwhile: earlier outcomes, answered before they
    // were written, whose time to be written came.
    let effects: Vec<Effect> = effects
        .into_iter()
        .filter(|e| !matches!(e, Effect::Persist { .. }))
        .collect();
    TestResult::from_bool(
        executes(&effects).is_empty()
            && matches!(&effects[..], [Effect::Reply { result: Ok(again), .. }] if *again == first),
    )
}

#[test]
fn no_unstage_with_live_publishes_and_no_publish_before_stage() {
    checker(500, 60).quickcheck(safe as fn(Vec<Step>) -> bool);
}

#[test]
fn any_request_repeated_gives_the_same_answer_and_no_new_effect() {
    checker(500, 40).quickcheck(idempotent as fn(Vec<Step>, Step) -> TestResult);
}
