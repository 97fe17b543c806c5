//! The one face every machine in this crate has, the timer table they keep
//! their deadlines in, and the one loop that drives any of them.
//!
//! # The contract
//!
//! A machine is a value that is told things and asked what to do next:
//!
//! * [`Machine::handle`] — something was observed (a request arrived, a watch
//!   delivered an object, the node's mounts were read) or an effect the
//!   machine asked for completed. Completions carry the [`OpId`](crate::OpId)
//!   of the effect they complete.
//! * [`Machine::poll`] — the next effect, or `None` when there is nothing to
//!   do until the machine is told something new. An adapter calls `poll`
//!   until it returns `None` after every `handle` (or every burst of
//!   `handle`s: inputs that arrived together may all be handed in first)
//!   and every `handle_timeout`, and carries the effects out **in the order
//!   they were polled**: an effect that must be durable or visible before what follows
//!   (the driver's `Persist`, a write before the write that depends on it) is
//!   polled first, and a machine that must wait for an effect's completion
//!   before it says more (the driver waits for its `Persist` to complete)
//!   returns `None` until that completion is handed in.
//! * [`Machine::poll_timeout`] — the earliest deadline the machine holds, if
//!   any. It may already be past: the adapter then calls `handle_timeout`
//!   at once. A deadline is reported until it has fired, and fires once.
//! * [`Machine::handle_timeout`] — time has reached `now`; deadlines due by
//!   then fire.
//!
//! `now` never goes backwards. A machine never assumes an effect succeeded
//! before its completion arrives: completions may report failure, arrive
//! twice, arrive late or never (a restart loses them), and the machine stays
//! correct. Restarts are inputs too: a restarted process is a fresh machine
//! told what it finds (its watches listed again, the mounts on its node).
//!
//! # The loop
//!
//! [`drain`] is the one loop: it fires the machine's due deadline, polls
//! every effect in order and hands each to a [`Carry`], feeds back the
//! completions the `Carry` knew at once, and returns the next deadline.
//! The test rig, the simulator, the service's pump and the lab all drive
//! their machines through it; only what they do with an effect differs.

use std::collections::{BTreeMap, VecDeque};

use crate::Tick;

/// The face of every machine (see the module documentation for the order
/// in which an adapter must call it).
pub trait Machine {
    /// What the machine is told.
    type Input;
    /// What the machine asks its adapter to do.
    type Effect;
    /// Something was observed, or an effect completed, at `now`.
    fn handle(&mut self, now: Tick, input: Self::Input);
    /// The next effect to carry out, in order; `None` until told more.
    fn poll(&mut self) -> Option<Self::Effect>;
    /// The earliest deadline not yet fired (possibly past).
    fn poll_timeout(&self) -> Option<Tick>;
    /// Time reached `now`: deadlines due by then fire.
    fn handle_timeout(&mut self, now: Tick);
    /// The machine's own invariants, a function over its state: the rig,
    /// the simulator, the properties and the fuzz targets check them after
    /// every step. `Err` says which one broke and how.
    fn check_invariants(&self) -> Result<(), Broken> {
        Ok(())
    }
}

/// A machine's invariant that does not hold, and how, for a person: a
/// bug in the machine, never a fault of the world it runs in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{0}")]
pub struct Broken(pub String);

impl From<String> for Broken {
    fn from(what: String) -> Broken {
        Broken(what)
    }
}

/// An effect its adapter could not carry out (a write that failed, a
/// socket that could not be opened, a call nobody answered), in the
/// adapter's words: the machine learns only that it failed, and says why
/// where it answers for it.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, thiserror::Error, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
#[error("{0}")]
pub struct EffectFailed(pub String);

impl From<String> for EffectFailed {
    fn from(why: String) -> EffectFailed {
        EffectFailed(why)
    }
}

impl From<&str> for EffectFailed {
    fn from(why: &str) -> EffectFailed {
        EffectFailed(why.to_string())
    }
}

impl From<&str> for Broken {
    fn from(what: &str) -> Broken {
        Broken(what.to_string())
    }
}

/// The invariant of a machine that works on one object (or volume) at a
/// time: the keys of its operations in flight are distinct, each is held
/// busy (`is_busy`), and nothing else is (`busy_count`). The adapters
/// check it after every turn and the simulator after every step: a few
/// operations are compared pairwise, allocating nothing; more (a thousand
/// claims at once) are sorted, so that the check stays O(n log n).
pub fn one_at_a_time<'a, K, I>(
    what: &str,
    in_flight: I,
    is_busy: impl Fn(&K) -> bool,
    busy_count: usize,
) -> Result<(), Broken>
where
    K: Ord + std::fmt::Debug + ?Sized + 'a,
    I: Iterator<Item = &'a K> + Clone,
{
    /// Up to this many, pairwise comparison is cheaper than sorting.
    const PAIRWISE: usize = 16;
    let mut n = 0;
    for k in in_flight.clone() {
        n += 1;
        if !is_busy(k) {
            return Err(format!(
                "{what}: an operation for {k:?} is in flight but it is not held busy"
            )
            .into());
        }
    }
    let twice = if n <= PAIRWISE {
        in_flight
            .clone()
            .enumerate()
            .find(|(i, k)| in_flight.clone().skip(i + 1).any(|o| o == *k))
            .map(|(_, k)| k)
    } else {
        let mut sorted: Vec<&K> = in_flight.collect();
        sorted.sort_unstable();
        sorted.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
    };
    if let Some(k) = twice {
        return Err(format!("{what}: two operations in flight for {k:?}").into());
    }
    if n != busy_count {
        return Err(format!("{what}: {busy_count} held busy but {n} operations in flight").into());
    }
    Ok(())
}

/// Carries out a machine's effects for [`drain`].
pub trait Carry<M: Machine + ?Sized> {
    /// Carries out `effect`, polled at `now` from `machine`. Completions
    /// known at once are pushed to `done`; [`drain`] hands them to the
    /// machine in order once this effect's turn is over. Completions that
    /// come later are fed with [`feed`] when they come.
    fn carry(&mut self, machine: &M, now: Tick, effect: M::Effect, done: &mut VecDeque<M::Input>);

    /// Whether it takes another effect now. An adapter whose effects wait
    /// their turn (a rate limit, a pool of workers) says no while enough
    /// wait: [`drain`] then stops polling, and what the machine has not
    /// decided yet stays with it (a dirty key, not a copy of an object),
    /// until a completion comes and the machine is drained again. An
    /// adapter that says no must have something under way whose
    /// completion it will feed, or the machine waits for its next input.
    fn ready(&self) -> bool {
        true
    }
}

impl<M, F> Carry<M> for F
where
    M: Machine + ?Sized,
    F: FnMut(&M, Tick, M::Effect, &mut VecDeque<M::Input>),
{
    fn carry(&mut self, machine: &M, now: Tick, effect: M::Effect, done: &mut VecDeque<M::Input>) {
        self(machine, now, effect, done)
    }
}

/// The one loop: fires `m`'s deadline if it is due by `now`, then polls
/// every effect and hands each to `carry` in order, feeding back the
/// completions `carry` reported at once, until the machine has nothing more
/// to say or `carry` is not [`Carry::ready`] for more. Returns the
/// machine's next deadline.
pub fn drain<M: Machine + ?Sized>(m: &mut M, now: Tick, carry: &mut impl Carry<M>) -> Option<Tick> {
    if m.poll_timeout().is_some_and(|t| t <= now) {
        m.handle_timeout(now);
    }
    let mut done = VecDeque::new();
    loop {
        while carry.ready()
            && let Some(effect) = m.poll()
        {
            carry.carry(m, now, effect, &mut done);
        }
        match done.pop_front() {
            Some(input) => m.handle(now, input),
            None => return m.poll_timeout(),
        }
    }
}

/// Hands `input` to `m` at `now`, then [`drain`]s it.
pub fn feed<M: Machine + ?Sized>(
    m: &mut M,
    now: Tick,
    input: M::Input,
    carry: &mut impl Carry<M>,
) -> Option<Tick> {
    m.handle(now, input);
    drain(m, now, carry)
}

/// Drains `m` and returns its effects instead of carrying them out (for an
/// adapter that carries effects out later, as the simulator does).
pub fn effects<M: Machine + ?Sized>(m: &mut M, now: Tick) -> Vec<M::Effect> {
    let mut out = Vec::new();
    drain(m, now, &mut |_: &M, _, e, _: &mut VecDeque<M::Input>| {
        out.push(e)
    });
    out
}

/// A machine's deadlines, as data: each timer `T` (a machine's closed
/// `Timer` enum, or a key for per-object retries) is armed at most once.
/// [`TimerTable::next`] is what `poll_timeout` returns; a deadline is
/// reported until it fires, and fires once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimerTable<T: Ord> {
    armed: BTreeMap<T, Tick>,
}

/// Deadlines through `canon::time`: the explorer counts states whose
/// deadlines are equally far off as one.
impl<T: Ord + std::hash::Hash> std::hash::Hash for TimerTable<T> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        h.write_usize(self.armed.len());
        for (timer, at) in &self.armed {
            timer.hash(h);
            crate::hasher::canon::time(h, *at);
        }
    }
}

impl<T: Ord> Default for TimerTable<T> {
    fn default() -> TimerTable<T> {
        TimerTable {
            armed: BTreeMap::new(),
        }
    }
}

impl<T: Ord + Clone> TimerTable<T> {
    /// Arms `timer` for `at`, replacing any earlier arming.
    pub fn set(&mut self, timer: T, at: Tick) {
        self.armed.insert(timer, at);
    }

    /// Disarms `timer`.
    pub fn stop(&mut self, timer: &T) {
        self.armed.remove(timer);
    }

    /// When `timer` fires, if armed.
    pub fn get(&self, timer: &T) -> Option<Tick> {
        self.armed.get(timer).copied()
    }

    /// The earliest armed deadline (possibly past).
    pub fn next(&self) -> Option<Tick> {
        self.armed.values().min().copied()
    }

    /// Disarms and returns every timer due by `now`, in the timers' order.
    pub fn expire(&mut self, now: Tick) -> Vec<T> {
        let due: Vec<T> = self
            .armed
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(t, _)| t.clone())
            .collect();
        for t in &due {
            self.armed.remove(t);
        }
        due
    }

    /// True when nothing is armed.
    pub fn is_empty(&self) -> bool {
        self.armed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts down: each input `n` asks for `n` effects, each completing at
    /// once with `n - 1`; a deadline at 10 asks for one more.
    #[derive(Default)]
    struct Countdown {
        queue: VecDeque<u32>,
        timers: TimerTable<()>,
        fired: u32,
    }

    impl Machine for Countdown {
        type Input = u32;
        type Effect = u32;
        fn handle(&mut self, _now: Tick, n: u32) {
            if n > 0 {
                self.queue.push_back(n);
            }
        }
        fn poll(&mut self) -> Option<u32> {
            self.queue.pop_front()
        }
        fn poll_timeout(&self) -> Option<Tick> {
            self.timers.next()
        }
        fn handle_timeout(&mut self, now: Tick) {
            for () in self.timers.expire(now) {
                self.fired += 1;
                self.queue.push_back(1);
            }
        }
    }

    #[test]
    fn the_loop_feeds_completions_back_in_order_until_quiet() {
        let mut m = Countdown::default();
        let mut seen = Vec::new();
        let mut carry = |_: &Countdown, _, e: u32, done: &mut VecDeque<u32>| {
            seen.push(e);
            done.push_back(e - 1);
        };
        assert_eq!(feed(&mut m, 0, 3, &mut carry), None);
        assert_eq!(seen, vec![3, 2, 1]);
    }

    /// Takes effects while fewer than `room` are under way; completes
    /// nothing at once (its completions come later, as a rate limit's).
    struct Held {
        room: usize,
        under_way: Vec<u32>,
    }

    impl Carry<Countdown> for Held {
        fn carry(&mut self, _: &Countdown, _: Tick, e: u32, _: &mut VecDeque<u32>) {
            self.under_way.push(e);
        }
        fn ready(&self) -> bool {
            self.under_way.len() < self.room
        }
    }

    #[test]
    fn an_adapter_that_is_not_ready_leaves_the_rest_with_the_machine() {
        let mut m = Countdown::default();
        for n in [5, 4, 3, 2, 1] {
            m.handle(0, n);
        }
        let mut held = Held {
            room: 2,
            under_way: Vec::new(),
        };
        drain(&mut m, 0, &mut held);
        assert_eq!(held.under_way, vec![5, 4], "polled only while ready");
        assert_eq!(m.queue, VecDeque::from([3, 2, 1]), "the rest not polled");
        // One completes and is fed: the loop takes one more, no further.
        held.under_way.remove(0);
        feed(&mut m, 1, 0, &mut held);
        assert_eq!(held.under_way, vec![4, 3]);
        held.under_way.clear();
        drain(&mut m, 2, &mut held);
        assert_eq!(held.under_way, vec![2, 1]);
        assert_eq!(m.queue, VecDeque::from([]));
    }

    #[test]
    fn a_due_deadline_fires_once_and_an_early_one_waits() {
        let mut m = Countdown::default();
        m.timers.set((), 10);
        assert_eq!(effects(&mut m, 5), Vec::<u32>::new());
        assert_eq!(m.poll_timeout(), Some(10));
        assert_eq!(effects(&mut m, 12), vec![1], "overdue: fires at once");
        assert_eq!(m.poll_timeout(), None);
        assert_eq!(effects(&mut m, 20), Vec::<u32>::new(), "fires once");
        assert_eq!(m.fired, 1);
    }

    #[test]
    fn the_table_expires_in_timer_order_and_rearms_by_replacing() {
        let mut t = TimerTable::default();
        t.set("b", 5);
        t.set("a", 7);
        t.set("b", 3);
        assert_eq!(t.next(), Some(3));
        assert_eq!(t.expire(7), vec!["a", "b"]);
        assert!(t.is_empty());
    }
}

#[cfg(test)]
mod one_at_a_time_tests {
    use super::one_at_a_time;

    fn check(keys: &[String], busy: &[&str]) -> Result<(), super::Broken> {
        let held = |k: &String| busy.contains(&k.as_str());
        one_at_a_time("m", keys.iter(), held, busy.len())
    }

    /// Few and many operations (pairwise and sorted) are judged alike.
    #[test]
    fn few_and_many_operations_are_judged_alike() {
        for n in [3usize, 16, 17, 1000] {
            let names: Vec<String> = (0..n).rev().map(|i| format!("pvc-{i}")).collect();
            let busy: Vec<&str> = names.iter().map(String::as_str).collect();
            assert_eq!(check(&names, &busy), Ok(()), "{n} distinct");
            let mut twice = names.clone();
            twice[n - 1] = names[0].clone();
            let err = check(&twice, &busy).unwrap_err();
            assert!(err.0.contains("two operations in flight for"), "{n}: {err}");
            let err = check(&names, &busy[1..]).unwrap_err();
            assert!(err.0.contains("not held busy"), "{n}: {err}");
            let err = check(&names[1..], &busy).unwrap_err();
            assert!(err.0.contains("held busy but"), "{n}: {err}");
        }
    }
}
