//! loom model checks of the pump's concurrency: handlers on their own
//! threads send requests through the mailbox and wait on reply slots while
//! the pump thread owns the driver machine through `PumpCore`.
//!
//! Run: `RUSTFLAGS="--cfg volplane_loom" LOOM_MAX_PREEMPTIONS=2 cargo test -p volplane-sync --release --test loom`
//!
//! Shown: no lost wake-up (every handler gets its answer, the pump sees the
//! end), no deadlock (loom fails on one), no lost update (the final state
//! holds every answered change), no double stage, no unstage while a
//! publish is live.
#![cfg(volplane_loom)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};

use loom::future::block_on;
use loom::thread;
use volplane_core::Code;
use volplane_core::driver::*;
use volplane_core::machine::{self, Machine};
use volplane_sync::core::{Answer, PumpCore, Work};
use volplane_sync::mailbox;
use volplane_sync::reply::{self, ReplySender};

/// Checks `f` under loom at the preemption bound LOOM_MAX_PREEMPTIONS (2
/// when unset) and prints how many interleavings were explored.
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let iterations = std::sync::Arc::new(AtomicUsize::new(0));
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    let bound = b.preemption_bound;
    let count = iterations.clone();
    b.check(move || {
        count.fetch_add(1, Ordering::Relaxed);
        f()
    });
    eprintln!(
        "loom: {name}: {} interleavings explored at preemption bound {:?}",
        iterations.load(Ordering::Relaxed),
        bound
    );
}

const STAGING: &str = "/var/lib/kubelet/plugins/x/v/globalmount";
const TARGET: &str = "/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv/mount";

fn stage() -> Request {
    Request::NodeStage(NodeStage {
        volume_id: "v".into(),
        publish_context: Default::default(),
        staging_target_path: STAGING.into(),
        capability: Capability::mount(AccessMode::SingleNodeMultiWriter),
        volume_context: Default::default(),
        secrets: Default::default(),
    })
}

fn publish() -> Request {
    Request::NodePublish(NodePublish {
        volume_id: "v".into(),
        publish_context: Default::default(),
        staging_target_path: STAGING.into(),
        target_path: TARGET.into(),
        capability: Capability::mount(AccessMode::SingleNodeMultiWriter),
        readonly: false,
        volume_context: Default::default(),
        secrets: Default::default(),
    })
}

/// What the pump thread saw: plans carried out, by kind, and the violations.
#[derive(Debug, Default)]
struct Seen {
    plans: Vec<&'static str>,
    problems: Vec<String>,
}

/// The pump thread: takes whatever is queued, then carries out the plans
/// (so requests can arrive while a plan for the same volume is pending),
/// until every sender is gone.
fn pump(
    rx: mailbox::Receiver<(Request, ReplySender<Answer>)>,
    driver: Driver,
) -> (Seen, DriverState) {
    block_on(async move {
        let mut core = PumpCore::new(driver);
        let mut seen = Seen::default();
        while let Some((req, reply)) = rx.recv().await {
            core.accept(0, req, reply);
            while let Some((req, reply)) = rx.try_recv() {
                core.accept(0, req, reply);
            }
            let mut pending = Vec::new();
            loop {
                let work = core.work(0);
                let idle = work.is_empty();
                for w in work {
                    match w {
                        Work::Persist { op, .. } => core.persisted(0, op, Ok(())),
                        Work::Execute { op, plan } => {
                            if let Plan::Unstage(p) = &plan
                                && !core.driver().state().targets(&p.volume_id).is_empty()
                            {
                                seen.problems
                                    .push("unstage planned while a publish is live".into());
                            }
                            seen.plans.push(plan.kind());
                            pending.push(op);
                        }
                    }
                }
                if idle {
                    let Some(op) = pending.pop() else { break };
                    core.complete(0, op, Ok(Outcome::Done));
                }
            }
        }
        assert_eq!(core.waiting(), 0, "a handler was left without an answer");
        (seen, core.driver().state().clone())
    })
}

fn send(tx: &mailbox::Sender<(Request, ReplySender<Answer>)>, req: Request) -> Answer {
    let (rtx, rrx) = reply::slot();
    tx.send((req, rtx)).expect("the pump is alive");
    block_on(rrx).expect("no lost wake-up: every request is answered")
}

#[test]
fn mailbox_wakes_the_receiver_and_sees_the_end() {
    model("mailbox", || {
        let (tx, rx) = mailbox::channel::<u32>();
        let tx2 = tx.clone();
        let a = thread::spawn(move || tx.send(1).unwrap());
        let b = thread::spawn(move || tx2.send(2).unwrap());
        let mut got = block_on(async {
            let mut got = Vec::new();
            while let Some(x) = rx.recv().await {
                got.push(x);
            }
            got
        });
        a.join().unwrap();
        b.join().unwrap();
        got.sort();
        assert_eq!(got, vec![1, 2]);
    });
}

#[test]
fn a_reply_wakes_its_waiter_or_says_none() {
    model("reply", || {
        let (tx, rx) = reply::slot::<u32>();
        let t = thread::spawn(move || tx.send(7));
        assert_eq!(block_on(rx), Some(7));
        t.join().unwrap();
        let (tx, rx) = reply::slot::<u32>();
        let t = thread::spawn(move || drop(tx));
        assert_eq!(
            block_on(rx),
            None,
            "an abandoned slot wakes its waiter with None"
        );
        t.join().unwrap();
    });
}

#[test]
fn concurrent_identical_stages_stage_once_and_lose_nothing() {
    model("two concurrent NodeStage", || {
        let driver = Driver::new(
            DriverConfig::new("loom.volplane.io", "0", "n"),
            DriverState::default(),
        );
        let (tx, rx) = mailbox::channel();
        let tx2 = tx.clone();
        let pump = thread::spawn(move || pump(rx, driver));
        let a = thread::spawn(move || send(&tx, stage()));
        let b = thread::spawn(move || send(&tx2, stage()));
        let (ra, rb) = (a.join().unwrap(), b.join().unwrap());
        let (seen, state) = pump.join().unwrap();
        for r in [&ra, &rb] {
            if let Err(e) = r {
                assert_eq!(e.code, Code::Aborted, "{e}");
            }
        }
        assert!(ra.is_ok() || rb.is_ok(), "one of them stages");
        assert_eq!(
            seen.plans.iter().filter(|k| **k == "stage").count(),
            1,
            "no double stage: {:?}",
            seen.plans
        );
        assert!(
            state.node["v"].stage.as_ref().is_some_and(|s| s.certain),
            "no lost update"
        );
    });
}

#[test]
fn unstage_racing_an_unpublish_never_unstages_under_a_live_publish() {
    model("NodeUnstage racing NodeUnpublish", || {
        // Staged and published before the race.
        let mut d = Driver::new(
            DriverConfig::new("loom.volplane.io", "0", "n"),
            DriverState::default(),
        );
        for (i, req) in [stage(), publish()].into_iter().enumerate() {
            d.handle(
                0,
                Input::Request {
                    rpc: i as u64,
                    request: req,
                },
            );
            let mut carry = |_: &Driver, _, e, done: &mut VecDeque<Input>| match e {
                Effect::Persist { op, .. } => {
                    done.push_back(Input::Persisted { op, result: Ok(()) })
                }
                Effect::Execute { op, .. } => done.push_back(Input::Done {
                    op,
                    result: Ok(Outcome::Done),
                }),
                Effect::Reply { .. } => {}
            };
            machine::drain(&mut d, 0, &mut carry);
        }
        let (tx, rx) = mailbox::channel();
        let tx2 = tx.clone();
        let pump = thread::spawn(move || pump(rx, d));
        let a = thread::spawn(move || {
            send(
                &tx,
                Request::NodeUnpublish(NodeUnpublish {
                    volume_id: "v".into(),
                    target_path: TARGET.into(),
                }),
            )
        });
        let b = thread::spawn(move || {
            send(
                &tx2,
                Request::NodeUnstage(NodeUnstage {
                    volume_id: "v".into(),
                    staging_target_path: STAGING.into(),
                }),
            )
        });
        let (unpublished, unstaged) = (a.join().unwrap(), b.join().unwrap());
        let (seen, state) = pump.join().unwrap();
        assert!(seen.problems.is_empty(), "{:?}", seen.problems);
        if let Err(e) = &unpublished {
            assert_eq!(e.code, Code::Aborted, "{e}");
        }
        match &unstaged {
            Ok(_) => assert!(
                state.node.get("v").is_none_or(|v| v.stage.is_none()),
                "an answered unstage is recorded"
            ),
            Err(e) => assert!(
                matches!(e.code, Code::Aborted | Code::FailedPrecondition),
                "{e}"
            ),
        }
    });
}
