//! The engine every control-plane machine runs on, and the one place the
//! machine contract is implemented for all of them.
//!
//! An [`Engine`] owns what the controllers used to write out each on their
//! own: the object cache, the dirty set, per-key backoff, the table of
//! operations in flight with what each one was for, the queue of effects
//! decided and not yet polled, the clock, and the sync gate. A
//! [`Controller`] supplies only what is its own, in the spirit of
//! kube-runtime's `reconcile` and `error_policy`:
//!
//! * [`Controller::observe`] — what a watch event dirties (and how it
//!   enters the cache);
//! * [`Controller::reconcile`] — one dirty key's pass, which decides
//!   effects through [`Engine::api`], [`Engine::csi`] and [`Engine::event`];
//! * [`Controller::api_done`] / [`Controller::csi_done`] — what a completion
//!   means, handed the record the operation was issued with.
//!
//! Every [`Controller`] is a [`Machine`] told [`Input`]s that asks for
//! [`Effect`]s: the blanket implementation below is the whole of that
//! glue. No retry happens without a timer or a new input: backoff deadlines
//! are the engine's timers, and a fired one dirties its key.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::{Hash, Hasher};

use crate::hasher::canon;
use crate::machine::Machine;
use crate::{OpId, Tick};

use super::{ApiCall, ApiResult, Backoff, Cache, CsiCall, CsiResult, Effect, Event, Input, Watch};

/// The state every controller keeps the same way. `K` is the key a pass
/// reconciles; `C` is the record kept for an operation in flight, handed
/// back with its completion; `R` is what a failure backs off (the key
/// itself unless the controller retries by something else, such as a UID).
#[derive(Debug, Clone)]
pub struct Engine<K: Ord, C, R: Ord = K> {
    /// The objects the controller's watches delivered.
    pub cache: Cache,
    /// Keys to reconcile at the next poll, in order.
    pub dirty: BTreeSet<K>,
    /// Per-key backoff after a failure: the engine's timers.
    pub backoff: Backoff<R>,
    calls: BTreeMap<OpId, C>,
    queue: VecDeque<Effect>,
    next_op: u64,
    now: Tick,
    /// Restarted, and waiting for `Input::Synced`.
    unsynced: bool,
}

/// The op counter through `canon::op` and the clock through `canon::time`:
/// the explorer counts states equal up to renumbering as one.
impl<K: Ord + Hash, C: Hash, R: Ord + Hash> Hash for Engine<K, C, R> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let Engine {
            cache,
            dirty,
            backoff,
            calls,
            queue,
            next_op,
            now,
            unsynced,
        } = self;
        (cache, dirty, backoff, calls, queue, unsynced).hash(h);
        canon::op(h, *next_op);
        canon::time(h, *now);
    }
}

/// The sidecars' retry defaults: 1 s doubling to 5 min.
impl<K: Ord + Clone, C, R: Ord + Clone> Default for Engine<K, C, R> {
    fn default() -> Self {
        Engine::new(1_000, 300_000)
    }
}

impl<K: Ord + Clone, C, R: Ord + Clone> Engine<K, C, R> {
    /// An engine with empty memory whose retries wait `retry_start`,
    /// doubling up to `retry_max`.
    pub fn new(retry_start: Tick, retry_max: Tick) -> Engine<K, C, R> {
        Engine {
            cache: Cache::default(),
            dirty: BTreeSet::new(),
            backoff: Backoff::new(retry_start, retry_max),
            calls: BTreeMap::new(),
            queue: VecDeque::new(),
            next_op: 0,
            now: 0,
            unsynced: false,
        }
    }

    /// The latest time the controller was told.
    pub fn now(&self) -> Tick {
        self.now
    }

    fn issue(&mut self, what: C) -> OpId {
        self.next_op += 1;
        let op = OpId(self.next_op);
        self.calls.insert(op, what);
        op
    }

    /// Asks for an API call; `what` comes back with its completion.
    pub fn api(&mut self, call: ApiCall, what: C) -> OpId {
        let op = self.issue(what);
        self.queue.push_back(Effect::Api { op, call });
        op
    }

    /// Asks for a CSI call (`node`: the node plugin that serves it, None
    /// for the controller); `what` comes back with its completion.
    pub fn csi(&mut self, node: Option<String>, call: CsiCall, what: C) -> OpId {
        let op = self.issue(what);
        self.queue.push_back(Effect::Csi { op, node, call });
        op
    }

    /// Records an event for the user.
    pub fn event(&mut self, event: Event) {
        self.queue.push_back(Effect::Event(event));
    }

    /// The records of the operations in flight, oldest first.
    pub fn in_flight(&self) -> impl Iterator<Item = &C> + Clone {
        self.calls.values()
    }

    /// How many operations are in flight.
    pub fn in_flight_count(&self) -> usize {
        self.calls.len()
    }

    /// Marks `key` to be reconciled at the next poll.
    pub fn mark(&mut self, key: K) {
        self.dirty.insert(key);
    }

    /// True when `key` failed and its backoff has not run out.
    pub fn waiting<Q>(&self, key: &Q) -> bool
    where
        R: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.backoff.waiting(key, self.now)
    }

    /// Records a failure of `key` now: it waits out its backoff.
    pub fn fail(&mut self, key: R) -> Tick {
        self.backoff.fail(key, self.now)
    }

    /// Records a failure of `key` now whose retry waits until `until`.
    pub fn hold(&mut self, key: R, until: Tick) {
        self.backoff.hold(key, until);
    }

    /// A watch event that is news about `key` ends its backoff's wait, as
    /// an informer event requeues a key whatever its rate limiter says.
    pub fn news<Q>(&mut self, key: &Q)
    where
        R: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.backoff.news(key)
    }

    /// The default way a watch event enters the cache: applied or
    /// deleted, after `mark` has dirtied what it affects.
    pub fn apply(&mut self, watch: Watch) {
        match watch {
            Watch::Applied(o) => {
                self.cache.apply(o);
            }
            Watch::Deleted(o) => {
                self.cache.delete(&o);
            }
        }
    }
}

/// A control-plane machine's own part: what its events dirty, what a pass
/// over one key decides, and what a completion means. The [`Engine`] does
/// the rest, and every `Controller` is a [`Machine`].
pub trait Controller {
    /// The key a pass reconciles and a failure backs off.
    type Key: Ord + Clone;
    /// What the controller remembers about an operation in flight.
    type Call;
    /// What a failure backs off (often [`Controller::Key`]).
    type Retry: Ord + Clone;

    /// The controller's engine.
    fn engine(&self) -> &Engine<Self::Key, Self::Call, Self::Retry>;
    /// The controller's engine, to change.
    fn engine_mut(&mut self) -> &mut Engine<Self::Key, Self::Call, Self::Retry>;

    /// A backoff ran out: dirty what it held back.
    fn retry(&mut self, key: Self::Retry);

    /// A watch delivered an object: dirty the keys it can affect and bring
    /// it into the cache.
    fn observe(&mut self, watch: Watch);

    /// One pass over a dirty key.
    fn reconcile(&mut self, key: Self::Key);

    /// An API call this controller made completed.
    fn api_done(&mut self, call: Self::Call, result: ApiResult);

    /// A CSI call this controller made completed.
    fn csi_done(&mut self, _call: Self::Call, _result: CsiResult) {}

    /// The periodic resync (only controllers with a sync period act).
    fn resync(&mut self) {}

    /// What a restarted kubelet found mounted (only the kubelet reads it).
    fn reconstruct(&mut self, _observed: super::Observed) {}

    /// The controller's own deadline besides its backoff, if any.
    fn deadline(&self) -> Option<Tick> {
        None
    }

    /// Time reached `now`: the controller's own deadlines due by then fire
    /// (after the backoffs due, handed to [`Controller::retry`]).
    fn fire(&mut self, _now: Tick) {}

    /// The controller's invariants, over its state.
    fn invariants(&self) -> Result<(), String> {
        Ok(())
    }
}

impl<T: Controller> Machine for T {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Tick, input: Input) {
        let engine = self.engine_mut();
        engine.now = engine.now.max(now);
        match input {
            Input::Restarted => engine.unsynced = true,
            Input::Synced => engine.unsynced = false,
            Input::Watch(watch) => self.observe(watch),
            Input::ApiDone { op, result } => {
                if let Some(call) = engine.calls.remove(&op) {
                    self.api_done(call, result);
                }
                // Nothing in flight: no late answer can resurrect a
                // deleted object any more.
                let engine = self.engine_mut();
                if engine.calls.is_empty() {
                    engine.cache.settled();
                }
            }
            Input::CsiDone { op, result } => {
                if let Some(call) = engine.calls.remove(&op) {
                    self.csi_done(call, result);
                }
            }
            Input::Resync => self.resync(),
            Input::Reconstruct(observed) => self.reconstruct(observed),
        }
    }

    fn poll(&mut self) -> Option<Effect> {
        if self.engine().unsynced {
            return None;
        }
        loop {
            let engine = self.engine_mut();
            if let Some(effect) = engine.queue.pop_front() {
                return Some(effect);
            }
            let key = engine.dirty.pop_first()?;
            self.reconcile(key);
        }
    }

    fn poll_timeout(&self) -> Option<Tick> {
        let backoff = self.engine().backoff.next_timer();
        match (backoff, Controller::deadline(self)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Tick) {
        let engine = self.engine_mut();
        engine.now = engine.now.max(now);
        let now = engine.now;
        for key in engine.backoff.fire_due(now) {
            self.retry(key);
        }
        self.fire(now);
    }

    fn check_invariants(&self) -> Result<(), String> {
        self.invariants()
    }
}
