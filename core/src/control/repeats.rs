//! No hot loop, checked: a control-plane machine never asks again for a
//! call that failed unless something new happened in between — any input
//! but a failed completion of one of its own calls (a watch event, a
//! resync, a restart, `Synced`, a call that succeeded), or one of its
//! timers firing.
//!
//! A machine that answers a failed call by asking again at once, with
//! nothing changed, asks forever: each answer is the cue for the next call,
//! and no timer paces it (issue 28: a conflict answered locally, retried at
//! once, spun a core for minutes). Retries go through the machine's backoff
//! or wait for news; [`HotLoopGuard`] is the check, used by the per-machine
//! properties (`chaos`), the simulator after every step and the kube
//! adapter's loop (where a repeat is logged as a bug). Two equal calls in
//! flight at once (two claims of one namespace each listing its pods) are
//! not a loop: only a call asked for again after it failed is.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

use super::{ApiResult, Effect, Input};
use crate::OpId;

/// The calls a machine asked for that failed since its last news.
/// See the module documentation.
#[derive(Debug, Clone, Default, Hash)]
pub struct HotLoopGuard {
    /// Calls in flight: their hashes by operation.
    in_flight: BTreeMap<OpId, u64>,
    /// Hashes of the calls that failed since the last news.
    answered: BTreeSet<u64>,
    /// A repeat was reported since the last news (reported once).
    reported: bool,
}

/// True when `input` is news to a machine: anything but a failed
/// completion of one of its own calls (a conflict, a refusal, an error:
/// the world as the machine knows it did not change). An answer that the
/// object is gone is news: the machine forgets it.
pub fn is_news(input: &Input) -> bool {
    !matches!(
        input,
        Input::ApiDone {
            result: ApiResult::Conflict | ApiResult::Failed(_) | ApiResult::AlreadyExists,
            ..
        } | Input::CsiDone { result: Err(_), .. }
    )
}

impl HotLoopGuard {
    /// The machine was told `input`.
    pub fn input(&mut self, input: &Input) {
        let answered = match input {
            Input::ApiDone { op, .. } | Input::CsiDone { op, .. } => self.in_flight.remove(op),
            _ => None,
        };
        if is_news(input) {
            self.news();
        } else if let Some(h) = answered {
            self.answered.insert(h);
        }
    }

    /// Something new happened: a timer fired, the machine restarted, or it
    /// was told news.
    pub fn news(&mut self) {
        self.answered.clear();
        self.reported = false;
    }

    /// The machine asked for `effect`. `Err` (once per stretch without
    /// news) when that call failed since its last news.
    pub fn effect(&mut self, effect: &Effect) -> Result<(), HotLoop> {
        // The fixed-key state hasher: fast, and the same in every run.
        let mut h = crate::hasher::StateHasher::default();
        let op = match effect {
            Effect::Event(_) => return Ok(()),
            Effect::Api { call, op } => {
                (0u8, call).hash(&mut h);
                *op
            }
            Effect::Csi { node, call, op } => {
                (1u8, node, call).hash(&mut h);
                *op
            }
        };
        let h = h.finish();
        self.in_flight.insert(op, h);
        if !self.answered.contains(&h) || self.reported {
            return Ok(());
        }
        self.reported = true;
        Err(HotLoop(describe(effect)))
    }
}

/// A call asked for again after it failed, with nothing new since.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "hot loop: asked again for {0} after it failed, with nothing new \
     since (no input but its own failed calls, no timer fired): a retry \
     must wait for its backoff or for news"
)]
pub struct HotLoop(
    /// The call, as a log line names it.
    pub String,
);

/// The call an effect asks for, as a log line names it.
pub fn describe(effect: &Effect) -> String {
    match effect {
        Effect::Api { call, .. } => format!("{} {}", call.verb(), call.key()),
        Effect::Csi { call, node, .. } => format!(
            "{} {}{}",
            call.method(),
            call.subject().unwrap_or(""),
            node.as_ref()
                .map(|n| format!(" on {n}"))
                .unwrap_or_default()
        ),
        Effect::Event(e) => format!("event {}", e.reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::ApiCall;
    use crate::model::{Kind, ObjectKey};

    fn delete(op: u64) -> Effect {
        Effect::Api {
            op: OpId(op),
            call: ApiCall::Delete(ObjectKey::new(Kind::PersistentVolume, "", "pv-1")),
        }
    }

    #[test]
    fn the_same_call_twice_with_only_its_completion_between_is_a_hot_loop() {
        let mut g = HotLoopGuard::default();
        assert!(g.effect(&delete(1)).is_ok());
        assert!(g.effect(&delete(9)).is_ok(), "two in flight at once");
        g.input(&Input::ApiDone {
            op: OpId(1),
            result: ApiResult::Conflict,
        });
        let e = g.effect(&delete(2)).unwrap_err();
        assert_eq!(e.0, "delete PersistentVolume/pv-1");
        assert!(g.effect(&delete(3)).is_ok(), "reported once per stretch");
    }

    #[test]
    fn news_or_a_timer_between_two_calls_is_no_hot_loop() {
        let mut g = HotLoopGuard::default();
        assert!(g.effect(&delete(1)).is_ok());
        let done = |op| Input::ApiDone {
            op: OpId(op),
            result: ApiResult::Conflict,
        };
        g.input(&done(1));
        g.input(&Input::Resync);
        assert!(g.effect(&delete(2)).is_ok());
        g.input(&done(2));
        g.news();
        assert!(g.effect(&delete(3)).is_ok());
    }
}
