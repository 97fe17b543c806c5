//! The engine's contract: exclusion per key, retry requeues, the error
//! policy, and how long a failed call's retry waits.
use super::*;
use crate::api::{ApiFailure, RETRY_REFUSED_AFTER};
use crate::model::{Kind, ObjectKey};

/// Gets one object for a key, and backs the key off when that fails.
struct Getter;

impl Controller for Getter {
    type Key = String;
    type Call = String;
    type Retry = String;
    fn retry(&mut self, cx: &mut Cx<Self>, key: String) {
        cx.mark(key);
    }
    fn watches(&self, kind: Kind) -> bool {
        kind == Kind::PersistentVolume
    }
    fn observe(&mut self, _: &mut Cx<Self>, _: Watch) {}
    fn reconcile(&mut self, cx: &mut Cx<Self>, key: String) {
        let object = ObjectKey::new(Kind::PersistentVolume, "", &key);
        cx.api(ApiCall::Get(object), key);
    }
    fn api_done(&mut self, cx: &mut Cx<Self>, key: String, result: ApiResult) {
        if result.failure().is_some() {
            cx.fail(key);
        }
    }
}

/// A getter whose error policy waits a minute after any failure.
struct Patient;

impl Controller for Patient {
    type Key = String;
    type Call = String;
    type Retry = String;
    fn retry(&mut self, cx: &mut Cx<Self>, key: String) {
        Getter.retry(cx, key)
    }
    fn watches(&self, kind: Kind) -> bool {
        Getter.watches(kind)
    }
    fn observe(&mut self, _: &mut Cx<Self>, _: Watch) {}
    fn reconcile(&mut self, cx: &mut Cx<Self>, key: String) {
        Getter.reconcile(cx, key)
    }
    fn api_done(&mut self, cx: &mut Cx<Self>, key: String, result: ApiResult) {
        Getter.api_done(cx, key, result)
    }
    fn error_policy(&self, _: &ApiFailure) -> Action {
        Action::WaitAtLeast(60_000)
    }
}

#[test]
fn a_controllers_error_policy_decides_its_retry() {
    let mut p = Engine::driving(Patient, 1_000, 300_000);
    p.parts_mut().1.mark("pv-1".into());
    let Some(Effect::Api { op, .. }) = p.poll() else {
        panic!("a get")
    };
    let result = ApiResult::Failed(ApiFailure::Transport("reset".into()));
    p.handle(10, Input::ApiDone { op, result });
    assert_eq!(
        p.poll_timeout(),
        Some(60_010),
        "the policy's minute, not 1 s"
    );
    assert!(p.context().waiting("pv-1"));
}

#[test]
fn an_operation_holds_its_keys_until_it_completes_and_once() {
    let mut g = Engine::driving(Getter, 1_000, 300_000);
    let (_, cx) = g.parts_mut();
    let get = |name: &str| ApiCall::Get(ObjectKey::new(Kind::PersistentVolume, "", name));
    let op = cx.api_holding(["a".to_string(), "b".into()], get("a"), "a".into());
    assert!(cx.busy("a") && cx.busy("b") && !cx.idle("a") && cx.idle("c"));
    assert_eq!(cx.held_count(), 2);
    assert!(g.check_invariants().is_ok());
    let result = ApiResult::Ok(None);
    g.handle(0, Input::ApiDone { op, result });
    assert!(!g.context().busy("a") && !g.context().busy("b"), "let go");
    let (_, cx) = g.parts_mut();
    cx.api_holding(["a".to_string()], get("a"), "a".into());
    cx.api_holding(["a".to_string()], get("a"), "a".into());
    let err = g.check_invariants().unwrap_err();
    assert!(
        err.0.contains("two operations in flight for \"a\""),
        "{err}"
    );
}

#[test]
fn what_a_retry_requeues_is_marked_when_its_backoff_runs_out_and_let_go_on_success() {
    let mut g = Engine::driving(Getter, 1_000, 300_000);
    let (_, cx) = g.parts_mut();
    cx.fail("pv-1".into());
    cx.requeue("pv-1".into(), ["claim-1".to_string()]);
    assert!(g.check_invariants().is_ok());
    g.handle_timeout(1_000);
    assert!(g.context().is_marked(&"claim-1".to_string()), "requeued");
    assert!(g.context().is_marked(&"pv-1".to_string()), "retried");
    let (_, cx) = g.parts_mut();
    cx.fail("pv-2".into());
    cx.requeue("pv-2".into(), ["claim-2".to_string()]);
    cx.succeed(&"pv-2".to_string());
    assert!(cx.take_requeue(&"pv-2".to_string()).is_empty(), "let go");
    // Remembered with no failure: the engine says so.
    let (_, cx) = g.parts_mut();
    cx.requeue("pv-3".into(), ["claim-3".to_string()]);
    let err = g.check_invariants().unwrap_err();
    assert!(err.0.contains("no failure to retry"), "{err}");
}

/// When the key is retried after its get failed with `failure` at 10.
fn retried_after(failure: ApiFailure) -> Option<Tick> {
    let mut g = Engine::driving(Getter, 1_000, 300_000);
    g.parts_mut().1.mark("pv-1".into());
    let Some(Effect::Api { op, .. }) = g.poll() else {
        panic!("a get")
    };
    let result = ApiResult::Failed(failure);
    g.handle(10, Input::ApiDone { op, result });
    g.poll_timeout().map(|t| t - 10)
}

#[test]
fn the_fault_of_a_failed_call_decides_how_long_its_retry_waits() {
    let forbidden = ApiFailure::from_status(403, "pv is forbidden".into(), 0);
    assert!(matches!(forbidden, ApiFailure::Forbidden(_)));
    assert_eq!(retried_after(forbidden), Some(RETRY_REFUSED_AFTER));
    let invalid = ApiFailure::from_status(422, "spec.capacity: Required".into(), 0);
    assert_eq!(retried_after(invalid), Some(RETRY_REFUSED_AFTER));
    let throttled = ApiFailure::from_status(429, "slow down".into(), 7);
    assert_eq!(retried_after(throttled), Some(7_000), "Retry-After: 7");
    let busy = ApiFailure::from_status(503, "etcd leader changed".into(), 0);
    assert!(matches!(busy, ApiFailure::Server { code: 503, .. }));
    assert_eq!(retried_after(busy), Some(1_000), "the usual backoff");
    let timeout = ApiFailure::from_status(504, "gateway".into(), 0);
    assert!(matches!(timeout, ApiFailure::Timeout(_)));
    assert_eq!(
        retried_after(ApiFailure::Transport("reset".into())),
        Some(1_000)
    );
}

#[test]
fn a_refused_call_says_why_and_when_it_is_retried() {
    let forbidden = ApiFailure::Forbidden("persistentvolumes is forbidden".into());
    let said = forbidden.to_string();
    assert!(
        said.starts_with("forbidden: persistentvolumes is forbidden"),
        "{said}"
    );
    assert!(
        said.contains("RBAC") && said.contains("every 5 min"),
        "{said}"
    );
    assert_eq!(forbidden.message(), "persistentvolumes is forbidden");
    let throttled = ApiFailure::from_status(429, "slow down".into(), 0);
    assert!(throttled.to_string().contains("after 1 s"), "{throttled}");
}

#[test]
fn the_queue_of_decided_effects_gives_its_room_back_once_polled_empty() {
    let mut g = Engine::driving(Getter, 1_000, 300_000);
    let (_, cx) = g.parts_mut();
    for i in 0..1_000 {
        let key = ObjectKey::new(Kind::PersistentVolume, "", &format!("pv-{i}"));
        cx.api(ApiCall::Get(key), format!("pv-{i}"));
    }
    let mut polled = 0;
    while g.poll().is_some() {
        polled += 1;
        if polled < 1_000 {
            assert!(
                g.context().queue.capacity() >= 1_000 - polled,
                "kept while in use"
            );
        }
    }
    assert_eq!(polled, 1_000);
    assert!(g.context().queue.capacity() <= QUEUE_ROOM_KEPT);
}
