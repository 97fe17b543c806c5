//! The engine every control-plane machine runs on, and the one place the
//! machine contract is implemented for all of them.
//!
//! An [`Engine`] owns a controller and what the controllers used to write
//! out each on their own — its [`Context`]: the object cache, the dirty
//! set, per-key backoff, the table of operations in flight with what each
//! one was for, the queue of effects decided and not yet polled, the
//! clock, and the sync gate. A [`Controller`] supplies only what is its
//! own, in the spirit of kube-runtime's `reconcile` and `error_policy`,
//! each handed the context it acts through:
//!
//! * [`Controller::observe`] — what a watch event dirties (and how it
//!   enters the cache);
//! * [`Controller::reconcile`] — one dirty key's pass, which decides
//!   effects through [`Context::api`], [`Context::csi`] and
//!   [`Context::event`];
//! * [`Controller::api_done`] / [`Controller::csi_done`] — what a completion
//!   means, handed the record the operation was issued with.
//!
//! Every `Engine<C>` is a [`Machine`] told [`Input`]s that asks for
//! [`Effect`]s: its implementation below is the whole of that glue. No
//! controller holds or reaches into the engine: it is handed the context.
//! No retry happens without a timer or a new input: backoff deadlines are
//! the engine's timers, and a fired one dirties its key.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::hash::{Hash, Hasher};

use crate::hasher::canon;
use crate::machine::Machine;
use crate::{OpId, Tick};

use super::{
    ApiCall, ApiFailure, ApiResult, Backoff, Cache, CsiCall, CsiResult, Effect, Event, Input, Watch,
};

/// What the engine keeps the same way for every controller, and hands to
/// its passes. `K` is the key a pass reconciles; `C` is the record kept for
/// an operation in flight, handed back with its completion; `R` is what a
/// failure backs off (the key itself unless the controller retries by
/// something else, such as a UID).
#[derive(Debug, Clone)]
pub struct Context<K: Ord, C, R: Ord = K> {
    /// The objects the controller's watches delivered.
    cache: Cache,
    /// Keys to reconcile at the next poll, in order.
    dirty: BTreeSet<K>,
    /// Per-key backoff after a failure: the engine's timers.
    backoff: Backoff<R>,
    /// What else is reconciled when a key's backoff runs out (a write's
    /// failure holding back the syncs that waited on it).
    requeue: BTreeMap<R, BTreeSet<K>>,
    /// The operations in flight: what each was for, and the retry keys it
    /// holds busy until it completes.
    calls: BTreeMap<OpId, Issued<C, R>>,
    /// The keys an operation in flight holds (one operation per key).
    held: BTreeSet<R>,
    /// A key asked to be held by a second operation: the invariant the
    /// engine reports.
    held_twice: Option<String>,
    queue: VecDeque<Effect>,
    next_op: u64,
    now: Tick,
    /// Restarted, and waiting for `Input::Synced`.
    unsynced: bool,
    /// What the controller's error policy decided for the failed API call
    /// whose completion is being handled: [`Context::fail`] follows it.
    failing: Action,
}

/// An operation in flight: what it was for, and the keys it holds.
#[derive(Debug, Clone, Hash)]
struct Issued<C, R> {
    what: C,
    holds: Holds<R>,
}

/// The keys an operation holds: most hold one, kept without allocating.
#[derive(Debug, Clone, Hash)]
enum Holds<R> {
    One(R),
    Many(Vec<R>),
}

impl<R> Holds<R> {
    fn new(keys: impl IntoIterator<Item = R>) -> Holds<R> {
        let mut keys = keys.into_iter();
        match (keys.next(), keys.next()) {
            (Some(one), None) => Holds::One(one),
            (None, _) => Holds::Many(Vec::new()),
            (Some(a), Some(b)) => Holds::Many([a, b].into_iter().chain(keys).collect()),
        }
    }

    fn keys(&self) -> &[R] {
        match self {
            Holds::One(key) => std::slice::from_ref(key),
            Holds::Many(keys) => keys,
        }
    }
}

/// The op counter through `canon::op` and the clock through `canon::time`:
/// the explorer counts states equal up to renumbering as one.
impl<K: Ord + Hash, C: Hash, R: Ord + Hash> Hash for Context<K, C, R> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        let Context {
            cache,
            dirty,
            backoff,
            requeue,
            calls,
            held: _,
            held_twice,
            queue,
            next_op,
            now,
            unsynced,
            failing: _,
        } = self;
        (cache, dirty, backoff, requeue, calls, held_twice, queue).hash(h);
        unsynced.hash(h);
        canon::op(h, *next_op);
        canon::time(h, *now);
    }
}

/// The sidecars' retry defaults: 1 s doubling to 5 min.
impl<K: Ord + Clone, C, R: Ord + Clone> Default for Context<K, C, R> {
    fn default() -> Self {
        Context::new(1_000, 300_000)
    }
}

impl<K: Ord + Clone, C, R: Ord + Clone> Context<K, C, R> {
    /// A context with empty memory whose retries wait `retry_start`,
    /// doubling up to `retry_max`.
    pub fn new(retry_start: Tick, retry_max: Tick) -> Context<K, C, R> {
        Context {
            cache: Cache::default(),
            dirty: BTreeSet::new(),
            backoff: Backoff::new(retry_start, retry_max),
            requeue: BTreeMap::new(),
            calls: BTreeMap::new(),
            held: BTreeSet::new(),
            held_twice: None,
            queue: VecDeque::new(),
            next_op: 0,
            now: 0,
            unsynced: false,
            failing: Action::Backoff,
        }
    }

    /// The latest time the controller was told.
    pub fn now(&self) -> Tick {
        self.now
    }

    /// The objects the controller's watches delivered.
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// The cache, to write through what an API call answered.
    pub fn cache_mut(&mut self) -> &mut Cache {
        &mut self.cache
    }

    /// Marks every one of `keys` to be reconciled at the next poll.
    pub fn mark_all(&mut self, keys: impl IntoIterator<Item = K>) {
        self.dirty.extend(keys);
    }

    /// True when `key` waits to be reconciled.
    pub fn is_marked(&self, key: &K) -> bool {
        self.dirty.contains(key)
    }

    /// A call for `key` succeeded: its backoff starts over, and what its
    /// retry would have reconciled is let go.
    pub fn succeed(&mut self, key: &R) {
        self.backoff.succeed(key);
        self.requeue.remove(key);
    }

    /// When `key`'s backoff runs out, `keys` are reconciled too (besides
    /// what [`Controller::retry`] marks).
    pub fn requeue(&mut self, key: R, keys: impl IntoIterator<Item = K>) {
        self.requeue.entry(key).or_default().extend(keys);
    }

    /// What `key`'s retry would have reconciled, let go and handed back.
    pub fn take_requeue(&mut self, key: &R) -> BTreeSet<K> {
        self.requeue.remove(key).unwrap_or_default()
    }

    /// How many times in a row `key` has failed.
    pub fn failures<Q>(&self, key: &Q) -> u32
    where
        R: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.backoff.failures(key)
    }

    fn issue(&mut self, what: C, holds: Holds<R>) -> OpId
    where
        R: std::fmt::Debug,
    {
        self.next_op += 1;
        let op = OpId(self.next_op);
        for key in holds.keys() {
            if !self.held.insert(key.clone()) && self.held_twice.is_none() {
                self.held_twice = Some(format!("two operations in flight for {key:?}"));
            }
        }
        self.calls.insert(op, Issued { what, holds });
        op
    }

    /// The operation `op` completed: what it was for, its keys let go.
    fn complete(&mut self, op: OpId) -> Option<C> {
        let Issued { what, holds } = self.calls.remove(&op)?;
        for key in holds.keys() {
            self.held.remove(key);
        }
        Some(what)
    }

    /// Asks for an API call; `what` comes back with its completion.
    pub fn api(&mut self, call: ApiCall, what: C) -> OpId
    where
        R: std::fmt::Debug,
    {
        self.api_holding(None, call, what)
    }

    /// Asks for an API call that holds `keys` busy ([`Context::busy`])
    /// until it completes: one operation per key at a time.
    pub fn api_holding(&mut self, keys: impl IntoIterator<Item = R>, call: ApiCall, what: C) -> OpId
    where
        R: std::fmt::Debug,
    {
        let op = self.issue(what, Holds::new(keys));
        self.queue.push_back(Effect::Api { op, call });
        op
    }

    /// Asks for a CSI call (`node`: the node plugin that serves it, None
    /// for the controller); `what` comes back with its completion.
    pub fn csi(&mut self, node: Option<String>, call: CsiCall, what: C) -> OpId
    where
        R: std::fmt::Debug,
    {
        self.csi_holding(None, node, call, what)
    }

    /// Asks for a CSI call that holds `keys` busy until it completes.
    pub fn csi_holding(
        &mut self,
        keys: impl IntoIterator<Item = R>,
        node: Option<String>,
        call: CsiCall,
        what: C,
    ) -> OpId
    where
        R: std::fmt::Debug,
    {
        let op = self.issue(what, Holds::new(keys));
        self.queue.push_back(Effect::Csi { op, node, call });
        op
    }

    /// True when an operation in flight holds `key`.
    pub fn busy<Q>(&self, key: &Q) -> bool
    where
        R: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.held.contains(key)
    }

    /// How many keys operations in flight hold.
    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    /// True when `key` may be acted on now: no operation in flight holds
    /// it, and it is not waiting out a backoff.
    pub fn idle<Q>(&self, key: &Q) -> bool
    where
        R: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        !self.busy(key) && !self.waiting(key)
    }

    /// Records an event for the user.
    pub fn event(&mut self, event: Event) {
        self.queue.push_back(Effect::Event(event));
    }

    /// The records of the operations in flight, oldest first.
    pub fn in_flight(&self) -> impl Iterator<Item = &C> + Clone {
        self.calls.values().map(|issued| &issued.what)
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

    /// Records a failure of `key` now: it waits out its backoff — and, in
    /// the handling of a failed API call, at least what the controller's
    /// [`Controller::error_policy`] decided for that failure (by default
    /// long for a forbidden or invalid call, a 429's Retry-After).
    pub fn fail(&mut self, key: R) -> Tick {
        let at_least = match self.failing {
            Action::Backoff => 0,
            Action::WaitAtLeast(t) => t,
        };
        self.backoff.fail_at_least(key, self.now, at_least)
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
/// over one key decides, and what a completion means, each acting through
/// the [`Context`] it is handed. The [`Engine`] owns that context and the
/// controller, and is the [`Machine`].
pub trait Controller {
    /// The key a pass reconciles and a failure backs off.
    type Key: Ord + Clone;
    /// What the controller remembers about an operation in flight.
    type Call;
    /// What a failure backs off and an operation holds busy (often
    /// [`Controller::Key`]).
    type Retry: Ord + Clone + std::fmt::Debug;

    /// A backoff ran out: dirty what it held back.
    fn retry(&mut self, cx: &mut Cx<Self>, key: Self::Retry);

    /// Whether its informers watch `kind`: the one list every runner (the
    /// kube adapter, the simulator, the lab) delivers events by.
    fn watches(&self, kind: crate::model::Kind) -> bool;

    /// A watch delivered an object: dirty the keys it can affect and bring
    /// it into the cache.
    fn observe(&mut self, cx: &mut Cx<Self>, watch: Watch);

    /// One pass over a dirty key.
    fn reconcile(&mut self, cx: &mut Cx<Self>, key: Self::Key);

    /// An API call this controller made completed.
    fn api_done(&mut self, cx: &mut Cx<Self>, call: Self::Call, result: ApiResult);

    /// A CSI call this controller made completed.
    fn csi_done(&mut self, _cx: &mut Cx<Self>, _call: Self::Call, _result: CsiResult) {}

    /// What a failed API call's retry does (kube-runtime's `error_policy`),
    /// applied by [`Context::fail`] while its completion is handled. By
    /// default the fault decides ([`ApiFailure::retry_at_least`]): a
    /// forbidden or invalid call waits 5 min, since retrying sooner cannot
    /// help; a 429 what the server asked; anything else its backoff.
    fn error_policy(&self, failure: &ApiFailure) -> Action {
        match failure.retry_at_least() {
            Some(t) => Action::WaitAtLeast(t),
            None => Action::Backoff,
        }
    }

    /// The periodic resync (only controllers with a sync period act).
    fn resync(&mut self, _cx: &mut Cx<Self>) {}

    /// What a restarted kubelet found mounted (only the kubelet reads it).
    fn reconstruct(&mut self, _cx: &mut Cx<Self>, _observed: super::Observed) {}

    /// The controller's own deadline besides its backoff, if any.
    fn deadline(&self, _cx: &Cx<Self>) -> Option<Tick> {
        None
    }

    /// Time reached `now`: the controller's own deadlines due by then fire
    /// (after the backoffs due, handed to [`Controller::retry`]).
    fn fire(&mut self, _cx: &mut Cx<Self>, _now: Tick) {}

    /// The controller's invariants, over its state and its context.
    fn invariants(&self, _cx: &Cx<Self>) -> Result<(), crate::machine::Broken> {
        Ok(())
    }
}

/// What the engine does with a key whose call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Retry after the key's backoff (1 s doubling to 5 min by default).
    Backoff,
    /// Retry after the key's backoff, and not before this many ms.
    WaitAtLeast(Tick),
}

/// The most effects' room the queue of decided effects keeps once it is
/// empty.
const QUEUE_ROOM_KEPT: usize = 64;

/// The context a controller `C` is handed.
pub type Cx<C> = Context<<C as Controller>::Key, <C as Controller>::Call, <C as Controller>::Retry>;

/// A control-plane machine: the engine driving controller `C` through the
/// context it owns.
pub struct Engine<C: Controller> {
    cx: Cx<C>,
    controller: C,
}

impl<C: Controller> Engine<C> {
    /// The engine driving `controller`, with empty memory, its retries
    /// waiting `retry_start` doubling up to `retry_max`.
    pub fn driving(controller: C, retry_start: Tick, retry_max: Tick) -> Engine<C> {
        Engine {
            cx: Context::new(retry_start, retry_max),
            controller,
        }
    }

    /// Failed operations retried after `start` ms, doubling up to `max`
    /// (the sidecars' `--retry-interval-start`, `--retry-interval-max`).
    /// For an engine that has not run yet: its memory starts anew.
    pub fn with_retry(mut self, start: Tick, max: Tick) -> Engine<C> {
        self.cx = Context::new(start, max);
        self
    }

    /// The controller it drives.
    pub fn controller(&self) -> &C {
        &self.controller
    }

    /// The controller it drives, to change (a builder's setting).
    pub(crate) fn controller_mut(&mut self) -> &mut C {
        &mut self.controller
    }

    /// The context the controller acts through.
    pub fn context(&self) -> &Cx<C> {
        &self.cx
    }

    /// Both, to change: what a test sets up.
    #[cfg(test)]
    pub(crate) fn parts_mut(&mut self) -> (&mut C, &mut Cx<C>) {
        (&mut self.controller, &mut self.cx)
    }
}

/// The sidecars' retry defaults: 1 s doubling to 5 min.
impl<C: Controller + Default> Default for Engine<C> {
    fn default() -> Self {
        Engine::driving(C::default(), 1_000, 300_000)
    }
}

impl<C: Controller> std::ops::Deref for Engine<C> {
    type Target = C;
    fn deref(&self) -> &C {
        &self.controller
    }
}

impl<C: Controller + Clone> Clone for Engine<C>
where
    Cx<C>: Clone,
{
    fn clone(&self) -> Self {
        Engine {
            cx: self.cx.clone(),
            controller: self.controller.clone(),
        }
    }
}

impl<C: Controller + std::fmt::Debug> std::fmt::Debug for Engine<C>
where
    Cx<C>: std::fmt::Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("controller", &self.controller)
            .field("context", &self.cx)
            .finish()
    }
}

impl<C: Controller + Hash> Hash for Engine<C>
where
    Cx<C>: Hash,
{
    fn hash<H: Hasher>(&self, h: &mut H) {
        (&self.controller, &self.cx).hash(h);
    }
}

impl<C: Controller> Machine for Engine<C> {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, now: Tick, input: Input) {
        let Engine { cx, controller } = self;
        cx.now = cx.now.max(now);
        match input {
            Input::Restarted => cx.unsynced = true,
            Input::Synced => cx.unsynced = false,
            Input::Watch(watch) => controller.observe(cx, watch),
            Input::ApiDone { op, result } => {
                if let Some(call) = cx.complete(op) {
                    cx.failing = result
                        .failure()
                        .map_or(Action::Backoff, |f| controller.error_policy(f));
                    controller.api_done(cx, call, result);
                    cx.failing = Action::Backoff;
                }
                // Nothing in flight: no late answer can resurrect a
                // deleted object any more.
                if cx.calls.is_empty() {
                    cx.cache.settled();
                }
            }
            Input::CsiDone { op, result } => {
                if let Some(call) = cx.complete(op) {
                    controller.csi_done(cx, call, result);
                }
            }
            Input::Resync => controller.resync(cx),
            Input::Reconstruct(observed) => controller.reconstruct(cx, observed),
        }
    }

    fn poll(&mut self) -> Option<Effect> {
        let Engine { cx, controller } = self;
        if cx.unsynced {
            return None;
        }
        loop {
            if let Some(effect) = cx.queue.pop_front() {
                // A completion that decided thousands of writes at once
                // (a live list answering for a namespace's claims) must
                // not leave their room behind once they are polled.
                if cx.queue.is_empty() && cx.queue.capacity() > QUEUE_ROOM_KEPT {
                    cx.queue = VecDeque::new();
                }
                return Some(effect);
            }
            let key = cx.dirty.pop_first()?;
            controller.reconcile(cx, key);
        }
    }

    fn poll_timeout(&self) -> Option<Tick> {
        let backoff = self.cx.backoff.next_timer();
        match (backoff, self.controller.deadline(&self.cx)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Tick) {
        let Engine { cx, controller } = self;
        cx.now = cx.now.max(now);
        let now = cx.now;
        for key in cx.backoff.fire_due(now) {
            let requeued = cx.take_requeue(&key);
            cx.mark_all(requeued);
            controller.retry(cx, key);
        }
        controller.fire(cx, now);
    }

    fn check_invariants(&self) -> Result<(), crate::machine::Broken> {
        let name = std::any::type_name::<C>();
        if let Some(twice) = &self.cx.held_twice {
            return Err(format!("{name}: {twice}").into());
        }
        if let Some(k) = self.cx.requeue.keys().find(|k| self.cx.failures(*k) == 0) {
            return Err(
                format!("{name}: a retry of {k:?} is remembered with no failure to retry").into(),
            );
        }
        self.controller.invariants(&self.cx)
    }
}

#[cfg(test)]
mod tests;
