//! The control-plane roles against a real cluster: external-provisioner,
//! external-attacher and external-resizer for any CSI driver (and, behind
//! flags, the PV controller's binder, the attach/detach controller and the
//! protection controllers), each a core machine on the core's one loop,
//! fed by shared informers, its API calls, CSI calls and events carried out
//! here.
//!
//! Nothing acts before every informer has listed: each machine starts
//! `Restarted` and is told `Synced` once all kinds are listed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::StreamExt;
use futures::channel::mpsc;
use kube::Client;
use std::sync::atomic::{AtomicUsize, Ordering};
use volplane_core::control::ratelimit::TokenBucket;
use volplane_core::control::repeats;
use volplane_core::control::{ApiResult, ControlMachine, Effect, HotLoopGuard, Input};
use volplane_core::model::Kind;
use volplane_core::{Code, Status, Tick};
use volplane_proto::client::{CsiClient, Transport};
use volplane_service::drive::{self as driver, Runtime, Turn};
use volplane_service::metrics::Metrics;

use crate::api::{ApiCaller, Seen};
use crate::events::Events;
pub use crate::roles::{Role, roles};
use crate::watch::{Feed, inform};

pub use crate::config::{
    CapacityTracking, ControllerConfig, ControllerError, DriverFacts, Flags, NodeDeployment,
    Switches, driver_facts,
};

type DynMachine = dyn ControlMachine + Send + 'static;

/// After this many failures in a row, a call's failures are logged as a
/// warning (then at every doubling: 10, 20, 40…), with the last error.
pub const WARN_AFTER_FAILURES: u32 = 5;

/// A role's event posts in flight at most.
const EVENT_POSTS_IN_FLIGHT: usize = 4;

/// What a machine's loop shares with the tasks carrying out its effects.
struct Context<T> {
    rt: Arc<dyn Runtime>,
    api: ApiCaller,
    events: Events,
    csi: CsiClient<T>,
    timeout: Duration,
    clock: volplane_service::Clock,
    driver: String,
    metrics: Arc<Metrics>,
    /// Failures in a row of each call (by what it names).
    failures: Mutex<BTreeMap<String, u32>>,
    /// The role's client-side rate limit.
    limiter: Mutex<TokenBucket>,
    /// The role's CSI calls in flight.
    workers: volplane_service::Permits,
    /// The role's event posts in flight (client-go's recorder posts from
    /// one goroutine; a few at once keep up without 10,000 in the air).
    event_posts: volplane_service::Permits,
    /// The role's API and CSI calls carried and not yet completed.
    ahead: CallsAhead,
    /// The role's work queue's name, for the metrics.
    queue: String,
    /// Where a panic in a task of the role is reported (the controller
    /// stops on it).
    crashed: mpsc::UnboundedSender<String>,
    /// Test knob (feature `fake-api`): the role panics when its caches sync.
    #[cfg(feature = "fake-api")]
    panic_on_sync: bool,
}

/// How many API and CSI calls a role has carried and not seen complete
/// before its machine is polled for more: what its rate limit lets go in
/// one burst and its workers take at once — enough that neither waits
/// for the machine — and never fewer than 8.
pub fn calls_ahead(burst: u32, workers: usize) -> usize {
    (burst as usize).saturating_add(workers).max(8)
}

/// A role's API and CSI calls carried and not yet completed (waiting for
/// their turn or in flight), and how many its machine is polled for at
/// most ([`calls_ahead`]): the rest stays undecided in the machine, a
/// dirty key each, instead of thousands of objects queued here.
struct CallsAhead {
    count: Arc<AtomicUsize>,
    most: usize,
}

impl CallsAhead {
    fn new(most: usize) -> CallsAhead {
        CallsAhead {
            count: Arc::default(),
            most,
        }
    }

    /// Room for another call.
    fn ready(&self) -> bool {
        self.count.load(Ordering::Relaxed) < self.most
    }

    /// Counts `effect` now, as it is carried (a task of its own runs it
    /// later: counted there, a drain would see no call ahead until it
    /// ended), if it is a call; until the mark is dropped.
    fn count(&self, effect: &Effect) -> Option<Ahead> {
        match effect {
            Effect::Api { .. } | Effect::Csi { .. } => {
                self.count.fetch_add(1, Ordering::Relaxed);
                Some(Ahead(self.count.clone()))
            }
            Effect::Event(_) => None,
        }
    }
}

/// A call counted ahead of its role's machine, until it is dropped: when
/// its completion is about to be handed in.
struct Ahead(Arc<AtomicUsize>);

impl Drop for Ahead {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Says whether the `n`th failure in a row of a call is logged: the
/// [`WARN_AFTER_FAILURES`]th, then each doubling of it.
pub fn warn_at(n: u32) -> bool {
    n >= WARN_AFTER_FAILURES
        && (n / WARN_AFTER_FAILURES).is_power_of_two()
        && n.is_multiple_of(WARN_AFTER_FAILURES)
}

impl<T: Transport> Context<T> {
    /// Counts a call's outcome: a success forgets its failures; a failure
    /// counts as a retry, and a run of them is logged now and then.
    fn outcome(&self, role: &'static str, what: &str, error: Option<String>) {
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let Some(error) = error else {
            failures.remove(what);
            return;
        };
        self.metrics.retried(role, &self.queue);
        let n = failures.entry(what.to_string()).or_insert(0);
        *n += 1;
        if warn_at(*n) {
            tracing::warn!(
                role,
                call = what,
                failures = *n,
                "{what} failed {n} times in a row, retrying with backoff; last error: {error}"
            );
        }
    }

    /// Waits for the role's turn at the API server (`--kube-api-qps`).
    async fn rate_limited(&self) {
        let now = self.clock.now();
        let wait = self
            .limiter
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reserve(now);
        if wait > 0 {
            self.rt.sleep(Duration::from_millis(wait)).await;
        }
    }

    /// Carries out one effect on a task of its own; its completion comes
    /// back through `done`. While the task waits for its turn (a token of
    /// `--kube-api-qps`, a worker for a CSI call) it holds only the effect,
    /// boxed: the call's own future, kilobytes of client state, is made
    /// once it may go — thousands of calls queued cost little.
    fn carry(self: &Arc<Self>, role: &'static str, effect: Effect, done: &Inbox) {
        let (ctx, done) = (self.clone(), done.clone());
        let crashed = self.crashed.clone();
        // Counted from now until just before its completion is sent: the
        // role is drained again with room for one more.
        let ahead = self.ahead.count(&effect);
        let effect = Box::new(effect);
        let work = async move {
            let _worker = match &*effect {
                Effect::Api { .. } => {
                    ctx.rate_limited().await;
                    None
                }
                Effect::Csi { .. } => Some(ctx.workers.acquire().await),
                // Events take no token: sharing the writes' bucket slowed
                // 1,000 claims to Bound from 54 s to 78 s (kube_memory).
                // A few posts at a time are enough.
                Effect::Event(_) => Some(ctx.event_posts.acquire().await),
            };
            let input = Box::pin(ctx.perform(role, *effect)).await;
            drop(ahead);
            if let Some(input) = input {
                done.send(input);
            }
        };
        self.rt.spawn(Box::pin(async move {
            if let Err(panic) = std::panic::AssertUnwindSafe(work).catch_unwind().await {
                let _ = crashed.unbounded_send(format!(
                    "role {role} panicked carrying out a call: {}",
                    panic_text(panic.as_ref())
                ));
            }
        }));
    }

    /// Carries out one effect whose turn has come; the role's next input.
    async fn perform(&self, role: &'static str, effect: Effect) -> Option<Input> {
        match effect {
            Effect::Api { op, call } => {
                let what = format!("{} {}", call.verb(), call.key());
                let result = self.api.call(call).await;
                tracing::debug!(role, "{what}: {result:?}");
                let error = match &result {
                    ApiResult::Conflict => Some("the object has been modified (409)".into()),
                    ApiResult::Failed(why) => Some(why.to_string()),
                    ApiResult::AlreadyExists => Some("it already exists (409)".into()),
                    ApiResult::Ok(_) | ApiResult::NotFound | ApiResult::Listed(_) => None,
                };
                self.outcome(role, &what, error);
                Some(Input::ApiDone { op, result })
            }
            Effect::Csi { op, call, node } => {
                let what = repeats::describe(&Effect::Csi {
                    op,
                    node,
                    call: call.clone(),
                });
                let mut csi = self.csi.clone();
                let started = Instant::now();
                let result = driver::within(&*self.rt, self.timeout, csi.call(&call))
                    .await
                    .unwrap_or_else(|| {
                        Err(Status::new(
                            Code::DeadlineExceeded,
                            format!("{} got no answer within {:?}", call.method(), self.timeout),
                        ))
                    });
                let code = result.as_ref().map_or_else(|s| s.code, |_| Code::Ok);
                self.metrics
                    .csi_call(&self.driver, call.method(), code, started.elapsed());
                let error = result
                    .as_ref()
                    .err()
                    .map(|s| format!("{}: {}", s.code.name(), s.message));
                self.outcome(role, &what, error);
                match &result {
                    Ok(_) => tracing::info!(
                        role,
                        volume = call.subject().unwrap_or(""),
                        "{}: OK",
                        call.method()
                    ),
                    Err(s) => tracing::warn!(
                        role,
                        volume = call.subject().unwrap_or(""),
                        "{}: {}: {}",
                        call.method(),
                        s.code.name(),
                        s.message
                    ),
                }
                Some(Input::CsiDone { op, result })
            }
            Effect::Event(e) => {
                self.events.record(e).await;
                None
            }
        }
    }
}

/// What a panic said.
fn panic_text(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// A role's inputs, each with when it came: the role's work queue, as
/// the metrics show it (client-go's `workqueue_*` under the queue's name).
#[derive(Clone)]
struct Inbox {
    tx: mpsc::UnboundedSender<(Instant, Input)>,
    depth: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
    queue: Arc<str>,
}

impl Inbox {
    fn new(
        metrics: Arc<Metrics>,
        queue: &str,
    ) -> (Inbox, mpsc::UnboundedReceiver<(Instant, Input)>) {
        let (tx, rx) = mpsc::unbounded();
        let depth = Arc::default();
        let queue = queue.into();
        (
            Inbox {
                tx,
                depth,
                metrics,
                queue,
            },
            rx,
        )
    }

    /// Counted before it is sent, so the receiver never counts it out
    /// first (the depth would wrap below zero).
    fn send(&self, input: Input) {
        self.depth.fetch_add(1, Ordering::Relaxed);
        if self.tx.unbounded_send((Instant::now(), input)).is_err() {
            self.depth.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        self.metrics.queue_added(&self.queue);
    }
}

/// The name upstream gives the work queue of the sidecar a role stands in
/// for (external-provisioner's `claims`, external-attacher's
/// `csi-attacher-va`, external-resizer's `<driver>-pvc`, csi-snapshotter's
/// `csi-snapshotter-content`); the role's name for the others.
pub fn queue_name(role: &str, driver: &str) -> String {
    match role {
        "provisioner" => "claims".into(),
        "attacher" => "csi-attacher-va".into(),
        "resizer" => format!("{driver}-pvc"),
        "snapshotter" => "csi-snapshotter-content".into(),
        other => other.into(),
    }
}

/// What a role's loop does around its machine: carries each effect out
/// on a task of its own and keeps the hot-loop guard.
struct RoleTurn<T> {
    name: &'static str,
    ctx: Arc<Context<T>>,
    done: Inbox,
    // A hot loop would be a bug of the machine's: said loudly, once per
    // stretch without news.
    guard: HotLoopGuard,
    /// When the turn under way began (`workqueue_work_duration_seconds`).
    turn_started: Option<Instant>,
    /// The operation metrics the role's sidecar keeps, if any.
    operations: Option<crate::role_metrics::RoleMetrics>,
}

impl<T: Transport> volplane_core::machine::Carry<DynMachine> for RoleTurn<T> {
    fn carry(&mut self, _: &DynMachine, _: Tick, effect: Effect, _: &mut VecDeque<Input>) {
        if let Err(e) = self.guard.effect(&effect) {
            tracing::error!(role = self.name, "bug: {e}");
        }
        if let (Some(m), Effect::Event(e)) = (&mut self.operations, &effect) {
            m.event(e, &self.ctx.metrics);
        }
        self.ctx.carry(self.name, effect, &self.done)
    }

    /// Room for another call: each one ahead completes with an input, so
    /// a role held back here is drained again when one does.
    fn ready(&self) -> bool {
        self.ctx.ahead.ready()
    }
}

impl<T: Transport> Turn<DynMachine> for RoleTurn<T> {
    fn before(&mut self, machine: &DynMachine, now: Tick, input: Option<&Input>) {
        self.turn_started = Some(Instant::now());
        if machine.poll_timeout().is_some_and(|t| t <= now) {
            self.guard.news();
        }
        #[cfg(feature = "fake-api")]
        if self.ctx.panic_on_sync && matches!(input, Some(Input::Synced)) {
            panic!("planted: role {} panics when its caches sync", self.name);
        }
        if let Some(i) = input {
            self.guard.input(i);
            if let Some(m) = &mut self.operations {
                m.input(i, &self.ctx.metrics);
            }
        }
    }

    fn after(&mut self, machine: &DynMachine) -> std::ops::ControlFlow<()> {
        let depth = self.done.depth.load(Ordering::Relaxed);
        self.ctx
            .metrics
            .queue_depth(self.name, &self.done.queue, depth);
        if let Some(started) = self.turn_started.take() {
            self.ctx
                .metrics
                .queue_worked(&self.done.queue, started.elapsed());
        }
        if let Err(e) = machine.check_invariants() {
            tracing::error!(role = self.name, "invariant broken: {e}");
        }
        std::ops::ControlFlow::Continue(())
    }
}

/// Runs one machine on the one driver until its inputs end.
async fn drive<T: Transport>(
    mut role: Role,
    ctx: Arc<Context<T>>,
    inputs: mpsc::UnboundedReceiver<(Instant, Input)>,
    done: Inbox,
) {
    let (depth, metrics, queue) = (done.depth.clone(), done.metrics.clone(), done.queue.clone());
    let inputs = inputs.map(move |(came, input)| {
        depth.fetch_sub(1, Ordering::Relaxed);
        metrics.queue_taken(&queue, came.elapsed());
        input
    });
    let (rt, clock) = (ctx.rt.clone(), ctx.clock);
    let mut turn = RoleTurn {
        name: role.name,
        ctx,
        done,
        guard: HotLoopGuard::default(),
        turn_started: None,
        operations: crate::role_metrics::RoleMetrics::for_role(role.name),
    };
    let machine: &mut DynMachine = &mut *role.machine;
    driver::drive(
        machine,
        &*rt,
        clock,
        Some(Input::Restarted),
        inputs,
        &mut turn,
    )
    .await;
}

/// Runs the roles until `stop` completes. `clients` gives the API client
/// of each role (by its name; `informers` for the shared watches), so each
/// role's requests carry its own User-Agent ([`crate::client`]).
pub async fn run<T: Transport>(
    rt: Arc<dyn Runtime>,
    clients: impl Fn(&str) -> Client,
    mut csi: CsiClient<T>,
    config: ControllerConfig,
    stop: impl Future<Output = ()>,
) -> Result<(), ControllerError> {
    let facts = driver_facts(&mut csi).await?;
    let (roles, off) = roles(&facts, &config);
    for why in &off {
        tracing::warn!("{why}");
    }
    if roles.is_empty() {
        return Err(ControllerError::NothingToDo(if off.is_empty() {
            "every role is switched off".into()
        } else {
            off.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        }));
    }
    let seen = Seen::default();
    let clock = volplane_service::Clock::start();
    // A panic anywhere (a role, an informer, a call a role makes) ends the
    // controller: a role that stopped silently would leave a process that
    // holds its Lease and looks healthy while it does nothing.
    let (crash_tx, mut crash_rx) = mpsc::unbounded::<String>();
    let context = |role: &'static str| {
        let client = clients(role);
        Arc::new(Context {
            rt: rt.clone(),
            api: ApiCaller::new(client.clone(), seen.clone()),
            events: Events::new(
                client,
                &format!("volplane-{}", facts.name),
                &config.identity,
                seen.clone(),
            ),
            csi: csi.clone(),
            timeout: config.timeout,
            clock,
            driver: facts.name.clone(),
            metrics: config.metrics.clone(),
            failures: Mutex::default(),
            limiter: Mutex::new(TokenBucket::new(config.kube_api.0, config.kube_api.1)),
            workers: volplane_service::Permits::new(config.worker_threads),
            event_posts: volplane_service::Permits::new(EVENT_POSTS_IN_FLIGHT),
            ahead: CallsAhead::new(calls_ahead(config.kube_api.1, config.worker_threads)),
            queue: queue_name(role, &facts.name),
            crashed: crash_tx.clone(),
            #[cfg(feature = "fake-api")]
            panic_on_sync: config.panic_in == Some(role),
        })
    };
    let kinds: BTreeSet<Kind> = roles.iter().flat_map(|r| r.kinds.iter().copied()).collect();
    let mut mailboxes: Vec<Mailbox> = Vec::new();
    // Every task is aborted when the controller stops.
    let mut tasks = Vec::new();
    let mut spawn = |name: String, task: driver::BoxFuture<()>| {
        let crashed = crash_tx.clone();
        // Roles and informers run until the controller stops them: one
        // that ends before, by returning or by panicking, ends it.
        let watched = async move {
            let why = match std::panic::AssertUnwindSafe(task).catch_unwind().await {
                Ok(()) => format!("{name} stopped"),
                Err(panic) => format!("{name} panicked: {}", panic_text(panic.as_ref())),
            };
            let _ = crashed.unbounded_send(why);
        };
        let (task, handle) = futures::future::abortable(watched);
        rt.spawn(Box::pin(task.map(|_| ())));
        tasks.push(handle);
    };
    for role in roles {
        tracing::info!(role = role.name, driver = facts.name, "starting");
        let queue = queue_name(role.name, &facts.name);
        let (inbox, rx) = Inbox::new(config.metrics.clone(), &queue);
        mailboxes.push(Mailbox {
            role: role.name,
            kinds: role.kinds.clone(),
            needs: role.kinds.difference(&role.optional).copied().collect(),
            inbox: inbox.clone(),
        });
        let ctx = context(role.name);
        spawn(
            format!("role {}", role.name),
            Box::pin(drive(role, ctx, rx, inbox)),
        );
    }
    let client = clients("informers");
    let (feed_tx, feed_rx) = mpsc::unbounded::<Feed>();
    for kind in &kinds {
        let tx = feed_tx.clone();
        // The capacity objects are watched in their namespace alone.
        let namespace = match (kind, &config.flags.capacity) {
            (Kind::CsiStorageCapacity, Some(t)) => t.namespace.clone(),
            _ => String::new(),
        };
        let informer = Box::pin(inform(
            rt.clone(),
            client.clone(),
            *kind,
            namespace,
            seen.clone(),
            move |f| {
                let _ = tx.unbounded_send(f);
            },
        ));
        let name = format!("the {kind:?} informer");
        #[cfg(feature = "fake-api")]
        let informer: driver::BoxFuture<()> = if config.panic_in == Some(&name[4..]) {
            Box::pin(async { panic!("planted in the informer (ControllerConfig::panic_in)") })
        } else {
            informer
        };
        spawn(name, informer);
    }
    let distributing = distribute(&rt, config.resync, &mailboxes, feed_rx, &seen, stop);
    let crashed = futures::select! {
        () = std::pin::pin!(distributing.fuse()) => None,
        why = crash_rx.next() => why,
    };
    for t in tasks {
        t.abort();
    }
    match crashed {
        Some(why) => {
            tracing::error!(
                "{why}; volplane controller stops so that it is started again with every role"
            );
            Err(ControllerError::Crashed(why))
        }
        None => Ok(()),
    }
}

/// A role's inbox, and the kinds it watches.
struct Mailbox {
    role: &'static str,
    kinds: BTreeSet<Kind>,
    /// The kinds that must have listed before it is told `Synced`.
    needs: BTreeSet<Kind>,
    inbox: Inbox,
}

/// Hands each informer's news to the roles that watch its kind. A role is
/// told `Synced` once every kind it needs has listed: a kind the API
/// server does not serve (a CRD not installed, a list RBAC forbids) holds
/// back only the roles that need it, and its informer keeps trying with
/// backoff, so they start once it is served. Every `period`, the synced
/// roles look at everything again.
async fn distribute(
    rt: &Arc<dyn Runtime>,
    period: Duration,
    mailboxes: &[Mailbox],
    mut feed_rx: mpsc::UnboundedReceiver<Feed>,
    seen: &Seen,
    stop: impl Future<Output = ()>,
) {
    let mut waiting: Vec<BTreeSet<Kind>> = mailboxes.iter().map(|m| m.needs.clone()).collect();
    for (m, _) in mailboxes.iter().zip(&waiting).filter(|(_, w)| w.is_empty()) {
        m.inbox.send(Input::Synced);
    }
    let mut resync = futures::stream::unfold(rt.clone(), move |rt| async move {
        rt.sleep(period).await;
        Some(((), rt))
    })
    .boxed()
    .fuse();
    let mut stop = std::pin::pin!(stop.fuse());
    loop {
        futures::select! {
            _ = stop => break,
            _ = resync.next() => {
                for (m, unlisted) in mailboxes.iter().zip(&waiting) {
                    if unlisted.is_empty() {
                        m.inbox.send(Input::Resync);
                    }
                }
            }
            feed = feed_rx.next() => match feed {
                Some(Feed::Watch(w)) => {
                    // The informer interned an applied object into `seen`
                    // already; a deletion is recorded here.
                    let o = match &w {
                        volplane_core::control::Watch::Applied(o) => o,
                        volplane_core::control::Watch::Deleted(o) => {
                            seen.deleted(o);
                            o
                        }
                    };
                    for m in mailboxes.iter().filter(|m| m.kinds.contains(&o.kind())) {
                        m.inbox.send(Input::Watch(w.clone()));
                    }
                }
                Some(Feed::Listed(kind)) => {
                    for (m, unlisted) in mailboxes.iter().zip(&mut waiting) {
                        if unlisted.remove(&kind) && unlisted.is_empty() {
                            tracing::info!(role = m.role, "caches synced: every kind it needs listed");
                            m.inbox.send(Input::Synced);
                        }
                    }
                }
                None => break,
            },
        }
    }
}

/// The roles as `name (kinds)`, for the startup log.
pub fn describe(roles: &[Role]) -> BTreeMap<&'static str, Vec<&'static str>> {
    roles
        .iter()
        .map(|r| (r.name, r.kinds.iter().map(|k| k.as_str()).collect()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use volplane_core::driver::ControllerCapability as Cap;

    fn facts(controller: &[Cap]) -> DriverFacts {
        DriverFacts {
            name: "volplane.csi.io".into(),
            controller: controller.to_vec(),
            plugin: vec![],
        }
    }

    /// A call is counted ahead the moment it is carried — before the task
    /// that runs it starts, so one drain stops at the bound — and until its
    /// mark goes; events are not counted.
    #[test]
    fn calls_are_counted_ahead_as_they_are_carried_up_to_the_bound() {
        use volplane_core::OpId;
        use volplane_core::control::{ApiCall, Event};
        use volplane_core::model::{Kind, ObjectKey};
        let key = ObjectKey::new(Kind::PersistentVolume, "", "pv");
        let call = |op| Effect::Api {
            op: OpId(op),
            call: ApiCall::Get(key.clone()),
        };
        let ahead = CallsAhead::new(calls_ahead(1, 2));
        assert_eq!(ahead.most, 8, "never fewer than 8");
        assert_eq!(calls_ahead(200, 10), 210);
        let mut marks: Vec<Ahead> = (0..7).filter_map(|op| ahead.count(&call(op))).collect();
        assert!(ahead.ready());
        let event = Effect::Event(Event::normal(key.clone(), "Reason", "note"));
        assert!(ahead.count(&event).is_none(), "an event is not a call");
        marks.extend(ahead.count(&call(7)));
        assert!(!ahead.ready(), "8 ahead: the machine is not polled");
        marks.pop();
        assert!(ahead.ready(), "one completed: room for one more");
        drop(marks);
        assert_eq!(ahead.count.load(Ordering::Relaxed), 0);
    }

    pub(super) fn with(switches: Switches) -> ControllerConfig {
        ControllerConfig {
            flags: Flags {
                switches,
                ..Flags::default()
            },
            ..ControllerConfig::default()
        }
    }

    /// csi-provisioner's stand-in restores from VolumeSnapshots on its
    /// own, and waits for nothing of theirs: without their CRDs it still
    /// provisions.
    #[test]
    fn the_provisioner_restores_without_the_snapshotter_and_does_not_wait_for_it() {
        let only = Switches {
            attacher: false,
            resizer: false,
            ..Switches::default()
        };
        let mut config = with(only);
        config.flags.restore_snapshots = true;
        let (made, _) = super::roles(&facts(&[Cap::CreateDeleteVolume]), &config);
        let [p] = &made[..] else { panic!("{made:?}") };
        assert!(p.kinds.contains(&Kind::VolumeSnapshot));
        assert!(p.optional.contains(&Kind::VolumeSnapshot));
        assert!(!p.optional.contains(&Kind::PersistentVolumeClaim));
        let (made, _) = super::roles(&facts(&[Cap::CreateDeleteVolume]), &with(only));
        assert!(
            !made[0].kinds.contains(&Kind::VolumeSnapshot),
            "off by default"
        );
    }

    #[test]
    fn the_snapshot_roles_run_when_asked_and_the_driver_can() {
        let on = Switches {
            snapshotter: true,
            snapshot_controller: true,
            resizer: false,
            ..Switches::default()
        };
        let caps = [Cap::CreateDeleteVolume, Cap::CreateDeleteSnapshot];
        let (made, off) = super::roles(&facts(&caps), &with(on));
        assert!(off.is_empty(), "{off:?}");
        let kinds = |name: &str| {
            made.iter()
                .find(|r| r.name == name)
                .map(|r| r.kinds.clone())
                .unwrap_or_else(|| panic!("no {name} role"))
        };
        assert_eq!(
            kinds("snapshotter"),
            [Kind::VolumeSnapshotContent, Kind::VolumeSnapshotClass].into()
        );
        assert!(kinds("snapshot-controller").contains(&Kind::VolumeSnapshot));
        assert!(kinds("provisioner").contains(&Kind::VolumeSnapshot));
        // A driver without snapshots: the role is off, and says why.
        let (made, off) = super::roles(&facts(&[Cap::CreateDeleteVolume]), &with(on));
        assert!(!made.iter().any(|r| r.name == "snapshotter"));
        assert_eq!(
            off,
            vec![volplane_core::roles::RoleOff::Lacks {
                role: "snapshotter",
                capability: "CREATE_DELETE_SNAPSHOT"
            }]
        );
        // Off by default: no snapshot kinds are watched (their CRDs may be absent).
        let (made, _) = super::roles(&facts(&caps), &with(Switches::default()));
        assert!(
            made.iter().all(|r| !r.kinds.contains(&Kind::VolumeSnapshot)
                && !r.kinds.contains(&Kind::VolumeSnapshotContent)),
            "{made:?}"
        );
    }
}

#[cfg(test)]
mod warning_tests {
    #[test]
    fn a_run_of_failures_is_logged_at_the_fifth_then_at_each_doubling() {
        let logged: Vec<u32> = (1..=80).filter(|n| super::warn_at(*n)).collect();
        assert_eq!(logged, vec![5, 10, 20, 40, 80]);
    }
}

#[cfg(test)]
mod group_tests {
    use super::*;
    use volplane_core::driver::{ControllerCapability as Cap, PluginCapability};

    #[test]
    fn group_snapshots_are_served_only_when_asked_and_the_driver_has_the_group_controller() {
        let roles = Switches {
            snapshotter: true,
            snapshot_controller: true,
            group_snapshots: true,
            resizer: false,
            ..Switches::default()
        };
        let config = super::tests::with(roles);
        let mut facts = DriverFacts {
            name: "volplane.csi.io".into(),
            controller: vec![Cap::CreateDeleteVolume, Cap::CreateDeleteSnapshot],
            plugin: vec![PluginCapability::GroupControllerService],
        };
        let kinds = |made: &[Role], name: &str| {
            made.iter()
                .find(|r| r.name == name)
                .map(|r| r.kinds.clone())
                .unwrap_or_default()
        };
        let (made, off) = roles_of(&facts, &config);
        assert!(off.is_empty(), "{off:?}");
        assert!(kinds(&made, "snapshotter").contains(&Kind::VolumeGroupSnapshotContent));
        assert!(kinds(&made, "snapshot-controller").contains(&Kind::VolumeGroupSnapshot));
        // Without the GroupController the snapshotter serves no groups, and says why.
        facts.plugin.clear();
        let (made, off) = roles_of(&facts, &config);
        assert!(!kinds(&made, "snapshotter").contains(&Kind::VolumeGroupSnapshotContent));
        assert_eq!(
            off.iter().map(ToString::to_string).collect::<Vec<_>>(),
            ["snapshotter: group snapshots: the driver has no GROUP_CONTROLLER_SERVICE"]
        );
        // Off by default: no group kinds are watched (their CRDs may be absent).
        let config = super::tests::with(Switches {
            group_snapshots: false,
            ..roles
        });
        let (made, _) = roles_of(&facts, &config);
        assert!(
            made.iter()
                .all(|r| !r.kinds.contains(&Kind::VolumeGroupSnapshot))
        );
    }

    fn roles_of(
        facts: &DriverFacts,
        config: &ControllerConfig,
    ) -> (Vec<Role>, Vec<volplane_core::roles::RoleOff>) {
        super::roles(facts, config)
    }
}
