//! The deterministic simulator: a whole cluster from the core's machines on
//! one object store — binder, provisioner, attach/detach, resizer, a kubelet
//! per node — and the CSI driver machine over a simulated storage backend.
//!
//! A seeded scheduler chooses what happens next among everything pending: a
//! watch event for a machine (late, never reordered per machine), an API or
//! CSI completion, a timer, a fault. An API write's answer travels apart
//! from the watch events: it may arrive before the event of its own write
//! or after the events of newer writes by other machines (as a late
//! response does), never before the write was made. Faults: a CSI call refused with a code
//! the spec allows for it; a call that times out although its effect
//! happened; a driver that crashes after acting and restarts from its
//! persisted state; a controller or kubelet that restarts and loses its
//! memory; a node that reboots and loses its mounts; an API write conflict; a
//! duplicated watch event. Safety invariants ([`check`]) are checked after
//! every step; liveness once faults stop. The same seed and workload give the
//! same trace, byte for byte.

mod actor;
mod attributes;
pub mod backend;
mod capacity;
pub mod check;
mod expansion;
mod fingerprint;
/// Writes a line of the trace, when the run keeps one (formatting nothing
/// otherwise: most of a search's steps are never read).
macro_rules! note {
    ($sim:expr, $($arg:tt)*) => {
        if $sim.config.trace {
            $sim.trace.push(format!($($arg)*));
        }
    };
}

mod config;
pub mod explore;

pub mod lease;
mod registration;
pub mod shrink;
#[cfg(test)]
mod tests;
pub mod workload;

use std::collections::{BTreeMap, BTreeSet};

use crate::control::{ApiCall, ApiResult, CsiCall, Effect, Event, HotLoopGuard, Input, Watch};
use crate::driver::Request;
use crate::machine::{self, Machine};
use crate::model::*;
use crate::registration::registrar::RegistrarInput;
use crate::registration::watcher::{PluginWatcher, WatcherInput};
use crate::roles::Role;
use crate::store::Store;
use crate::{OpId, Tick};

pub use actor::{Actor, driver_facts};
use backend::{CallFault, DriverProcess, Storage, allowed_errors, error_classes};
pub use check::Violation;
pub use config::{Faults, Rng, SimConfig};

/// The simulated driver's name.
pub const DRIVER: &str = "sim.volplane.io";
/// The simulated kubelet root.
pub const ROOT: &str = "/var/lib/kubelet";
/// The topology key the simulated driver reports its node's zone under.
pub const ZONE_KEY: &str = "topology.sim.volplane.io/zone";

/// The zone of simulated node `node-<i>`: `zone-a` for even `i`,
/// `zone-b` for odd (so two nodes or more span two zones).
pub fn zone_of(node: &str) -> &'static str {
    let i: usize = node
        .strip_prefix("node-")
        .and_then(|i| i.parse().ok())
        .unwrap_or(0);
    if i.is_multiple_of(2) {
        "zone-a"
    } else {
        "zone-b"
    }
}

/// Something waiting to be delivered to an actor.
#[derive(Debug, Clone, Hash)]
enum Delivery {
    Input(Input),
    /// For a plugin watcher.
    Watcher(WatcherInput),
    /// For a node-driver-registrar.
    Registrar(RegistrarInput),
    /// A CSI call to carry out against the driver, then answer.
    Csi {
        op: OpId,
        node: Option<String>,
        call: CsiCall,
    },
}

/// One thing the scheduler may make happen next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Choice {
    /// Deliver the next item of actor `i`'s inbox (a CSI call with `fault`).
    Deliver {
        /// The actor.
        actor: usize,
        /// A fault for a CSI call, if any.
        fault: Option<CallFault>,
    },
    /// Deliver the next answer to an API call of actor `i` (answers travel
    /// apart from watch events, so they may overtake or trail them).
    Answer {
        /// The actor.
        actor: usize,
    },
    /// Advance the clock to the next timer.
    Timers,
    /// An actor restarts and loses its memory.
    Restart {
        /// Which.
        actor: usize,
    },
    /// A node reboots and loses its mounts (its kubelet restarts too).
    Reboot {
        /// Which.
        node: usize,
    },
}

/// What a run saw, for the summary.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Steps taken.
    pub steps: u64,
    /// Invariant checks made.
    pub checks: u64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<&'static str, u64>,
    /// "PV phase", "PVC phase", "CSI call"… → values seen.
    pub seen: BTreeMap<&'static str, BTreeSet<String>>,
}

/// A simulated cluster. See the module documentation.
#[derive(Debug, Clone)]
pub struct Sim {
    /// How it runs.
    pub config: SimConfig,
    /// The API server's objects.
    pub store: Store,
    /// The machines.
    pub actors: Vec<Actor>,
    inbox: fingerprint::Queues<Delivery>,
    /// Each actor's answers to its API calls, in the order they were made.
    answers: fingerprint::Queues<Input>,
    /// Each control machine's calls since its last news (no hot loop).
    guards: Vec<HotLoopGuard>,
    /// The controller's driver process.
    pub controller: DriverProcess,
    /// Each node's driver process.
    pub nodes: BTreeMap<String, DriverProcess>,
    /// What really exists.
    pub storage: Storage,
    rng: Rng,
    /// The clock.
    pub now: Tick,
    /// One line per step.
    pub trace: Vec<String>,
    /// Every event the machines recorded.
    pub events: Vec<Event>,
    /// Invariants broken so far.
    pub violations: Vec<Violation>,
    /// What the run saw.
    pub stats: Stats,
    /// Claims the user deleted: uid → the reclaim policy of their PV then.
    pub deleted_claims: BTreeMap<String, Option<ReclaimPolicy>>,
    /// Faults are injected only while this is set.
    pub faults_on: bool,
    /// The store version when each object was created (by uid), and when
    /// the user asked to delete each claim (by uid).
    created_at: BTreeMap<String, u64>,
    delete_asked_at: BTreeMap<String, u64>,
    /// The registration sockets and the calls between watchers and registrars.
    registry: registration::Registry,
    /// Actors handed something since their last drain (see `drain_all`).
    woken: Vec<bool>,
    /// Actors drained since their invariants were last checked (an actor
    /// not drained has not changed).
    unchecked: Vec<bool>,
    /// Calls that could change storage so far, and the (store version,
    /// that count) the world's invariants were last checked at: what they
    /// read has not changed while both stay the same.
    storage_writes: u64,
    world_checked_at: Option<(u64, u64)>,
    /// Actors changed since their part of the state was last hashed.
    changed: Vec<bool>,
    fingerprints: fingerprint::Fingerprints,
}

impl Sim {
    /// A cluster of `config.nodes` nodes, registration under way.
    pub fn new(config: SimConfig) -> Sim {
        let plant = config.plant;
        let mut actors = actor::control_plane(&config);
        let mut nodes = BTreeMap::new();
        for i in 0..config.nodes {
            let name = format!("node-{i}");
            actors.push(actor::kubelet(&name, plant));
            actors.push(Actor::Watcher(Box::new(PluginWatcher::new(&name))));
            actors.push(registration::registrar(&name));
            nodes.insert(name.clone(), DriverProcess::new(&name, false, plant));
        }
        let count = actors.len();
        let (inbox, answers) = (
            fingerprint::Queues::new(count),
            fingerprint::Queues::new(count),
        );
        let guards = vec![HotLoopGuard::default(); count];
        let mut s = Sim {
            rng: Rng::new(config.seed),
            controller: DriverProcess::new("controller", true, plant),
            config,
            store: Store::with_admission(),
            actors,
            inbox,
            answers,
            guards,
            nodes,
            storage: Storage::default(),
            now: 0,
            trace: Vec::new(),
            events: Vec::new(),
            violations: Vec::new(),
            stats: Stats::default(),
            deleted_claims: BTreeMap::new(),
            faults_on: true,
            created_at: BTreeMap::new(),
            delete_asked_at: BTreeMap::new(),
            registry: registration::Registry::default(),
            woken: vec![true; count],
            unchecked: vec![true; count],
            storage_writes: 0,
            world_checked_at: None,
            changed: vec![true; count],
            fingerprints: fingerprint::Fingerprints::default(),
        };
        let names: Vec<String> = s.nodes.keys().cloned().collect();
        for name in names {
            s.user(ApiCall::Create(Object::Node(Node::new(&name))));
            s.user(ApiCall::Create(Object::CsiNode(CsiNode::new(&name))));
        }
        for a in 0..s.actors.len() {
            if matches!(s.actors[a], Actor::Registrar { .. }) {
                s.inbox[a].push_back(Delivery::Registrar(RegistrarInput::Start));
            }
        }
        s
    }

    /// A user's (or the scheduler's) write, applied now.
    pub fn user(&mut self, call: ApiCall) -> ApiResult {
        if let ApiCall::Delete(key) = &call
            && key.kind == Kind::PersistentVolumeClaim
            && let Some(Object::Pvc(c)) = self.store.get(key)
        {
            let policy =
                match self
                    .store
                    .get(&ObjectKey::new(Kind::PersistentVolume, "", c.volume_name()))
                {
                    Some(Object::Pv(pv)) => Some(pv.reclaim_policy()),
                    _ => None,
                };
            self.deleted_claims.insert(c.metadata.uid.clone(), policy);
            self.delete_asked_at
                .entry(c.metadata.uid.clone())
                .or_insert(self.store.version());
        }
        note!(
            self,
            "{:>6} t={} user {} {}",
            self.stats.steps,
            self.now,
            call.verb(),
            call.key()
        );
        let (result, watches) = self.store.apply(self.now, &call);
        if let (ApiCall::Create(_), ApiResult::Ok(Some(o))) = (&call, &result) {
            self.created_at
                .insert(o.meta().uid.clone(), self.store.version());
        }
        self.broadcast(watches);
        self.drain_all();
        result
    }

    fn broadcast(&mut self, watches: Vec<Watch>) {
        for w in watches {
            match &w {
                Watch::Applied(o) => self.observe(o),
                Watch::Deleted(o) => match &**o {
                    Object::Pvc(c) => self.check_claim_removed(c),
                    Object::Pv(pv) => self.check_volume_removed(pv),
                    _ => {}
                },
            }
            for a in 0..self.actors.len() {
                if let Some(d) = self.actors[a].watch(&w) {
                    self.inbox[a].push_back(d);
                }
            }
        }
    }

    fn observe(&mut self, o: &Object) {
        let (k, v) = match o {
            Object::Pv(pv) => ("PV phase", pv.phase().to_string()),
            Object::Pvc(c) => ("PVC phase", c.phase().to_string()),
            Object::Va(va) => (
                "VolumeAttachment",
                if va.status.attached {
                    "attached".into()
                } else {
                    "not attached".into()
                },
            ),
            _ => return,
        };
        self.stats.seen.entry(k).or_default().insert(v);
    }

    fn fault(&mut self, kind: &'static str) {
        *self.stats.faults.entry(kind).or_default() += 1;
    }

    /// Emits every actor's pending effects into the world (after telling
    /// any actor whose timer is overdue, as a runtime's pump would).
    ///
    /// A control machine changes only when it is handed something (an
    /// input, a restart) or its timer is due, and each drain empties it;
    /// so a machine neither woken since its last drain nor due has nothing
    /// to say, and is not asked.
    fn drain_all(&mut self) {
        for a in 0..self.actors.len() {
            let now = self.now;
            let woken = std::mem::take(&mut self.woken[a]);
            let Some(m) = self.actors[a].control() else {
                // The registrar and the plugin watcher: likewise asked only
                // when woken or due.
                let due = self.actors[a].poll_timeout().is_some_and(|t| t <= now);
                if woken || due {
                    self.unchecked[a] = true;
                    self.changed[a] = true;
                    self.drain_registration(a);
                }
                continue;
            };
            let due = m.poll_timeout().is_some_and(|t| t <= now);
            if !woken && !due {
                continue;
            }
            if due {
                self.guards[a].news();
            }
            self.unchecked[a] = true;
            self.changed[a] = true;
            for e in machine::effects(m, now) {
                if let Err(e) = self.guards[a].effect(&e) {
                    let who = self.actors[a].name();
                    self.violate("hot loop", format!("{who}: {e}"));
                }
                match e {
                    Effect::Event(e) => self.events.push(e),
                    Effect::Api { op, call } => {
                        if self.config.trace {
                            let what = format!("{} {}", call.verb(), call.key());
                            let who = self.actors[a].name();
                            note!(self, "{:>6} t={now} {who} -> {op} {what}", self.stats.steps);
                        }
                        let (result, watches) = self.api(call);
                        self.answers[a].push_back(Input::ApiDone { op, result });
                        self.broadcast(watches);
                    }
                    Effect::Csi { op, node, call } => {
                        self.inbox[a].push_back(Delivery::Csi { op, node, call })
                    }
                }
            }
        }
    }

    /// Everything the scheduler could do next (faults limited by `allow_faults`).
    pub fn choices(&self, allow_faults: bool) -> Vec<Choice> {
        let mut out = Vec::new();
        for (a, q) in self.inbox.iter().enumerate() {
            let Some(head) = q.front() else { continue };
            out.push(Choice::Deliver {
                actor: a,
                fault: None,
            });
            if allow_faults && let Delivery::Csi { call, .. } = head {
                let mutating = !matches!(
                    call,
                    Request::NodeGetInfo | Request::Probe | Request::GetCapacity(_)
                );
                if mutating {
                    for code in error_classes(call) {
                        out.push(Choice::Deliver {
                            actor: a,
                            fault: Some(CallFault::Error(code)),
                        });
                    }
                    out.push(Choice::Deliver {
                        actor: a,
                        fault: Some(CallFault::TimeoutAfterEffect),
                    });
                    out.push(Choice::Deliver {
                        actor: a,
                        fault: Some(CallFault::CrashAfterEffect),
                    });
                }
            }
        }
        for (a, q) in self.answers.iter().enumerate() {
            if !q.is_empty() {
                out.push(Choice::Answer { actor: a });
            }
        }
        if out.is_empty() && self.next_timer().is_some() {
            out.push(Choice::Timers);
        }
        if allow_faults && !out.is_empty() {
            for a in 0..self.actors.len() {
                out.push(Choice::Restart { actor: a });
            }
            for n in 0..self.nodes.len() {
                out.push(Choice::Reboot { node: n });
            }
        }
        out
    }

    fn next_timer(&self) -> Option<Tick> {
        self.actors
            .iter()
            .filter_map(Actor::poll_timeout)
            .filter(|t| *t > self.now)
            .min()
    }

    /// Makes `choice` happen, then checks the safety invariants.
    pub fn apply(&mut self, choice: Choice) {
        self.stats.steps += 1;
        let step = self.stats.steps;
        match choice {
            Choice::Timers => {
                let Some(t) = self.next_timer() else { return };
                self.now = t;
                note!(self, "{step:>6} t={} timers", self.now);
            }
            Choice::Deliver { actor, fault } => self.deliver(actor, fault),
            Choice::Answer { actor } => self.answer(actor),
            Choice::Restart { actor } => {
                self.fault("machine restart");
                let name = self.actors[actor].name();
                note!(
                    self,
                    "{step:>6} t={} {name} RESTARTS (memory lost)",
                    self.now
                );
                self.restart(actor);
            }
            Choice::Reboot { node } => {
                self.fault("node reboot");
                let name = format!("node-{node}");
                note!(
                    self,
                    "{step:>6} t={} {name} REBOOTS (mounts lost)",
                    self.now
                );
                let now = self.now;
                self.storage_writes += 1;
                if let Some(d) = self.nodes.get_mut(&name) {
                    d.reboot(&mut self.storage, &name, now);
                }
                // Every process of the node starts again: kubelet, plugin
                // watcher, node-driver-registrar (its sockets are gone).
                self.registry_reboot(&name);
                for role in ["kubelet", "plugin-watcher", "node-driver-registrar"] {
                    if let Some(a) = self
                        .actors
                        .iter()
                        .position(|a| a.name() == format!("{role}/{name}"))
                    {
                        self.restart(a);
                    }
                }
            }
        }
        self.drain_all();
        self.check_world();
    }

    /// An actor restarts: a fresh machine that waits for its caches to sync,
    /// a fresh watch (everything listed again, then `Synced`), and nothing it
    /// was waiting for ever arrives.
    fn restart(&mut self, actor: usize) {
        let now = self.now;
        self.woken[actor] = true;
        self.changed[actor] = true;
        self.actors[actor] = self.actors[actor].fresh(&self.config);
        self.inbox[actor].clear();
        self.answers[actor].clear();
        self.guards[actor] = HotLoopGuard::default();
        let Some(m) = self.actors[actor].control() else {
            self.restart_registration(actor);
            return;
        };
        m.handle(now, Input::Restarted);
        if let Actor::Kubelet(k) = &mut self.actors[actor] {
            let observed =
                check::observed_mounts(&self.storage, &self.store, &k.config().node.clone());
            k.handle(now, Input::Reconstruct(observed));
        }
        let objects: Vec<_> = self
            .store
            .shared()
            .filter(|o| self.actors[actor].watches(o.kind()))
            .cloned()
            .collect();
        for o in objects {
            self.inbox[actor].push_back(Delivery::Input(Input::Watch(Watch::Applied(o))));
        }
        self.inbox[actor].push_back(Delivery::Input(Input::Synced));
    }

    fn deliver(&mut self, a: usize, fault: Option<CallFault>) {
        let Some(d) = self.inbox[a].pop_front() else {
            return;
        };
        let step = self.stats.steps;
        self.now += self.config.delivery_ticks;
        self.woken[a] = true;
        self.changed[a] = true;
        let name = self.actors[a].name();
        match d {
            Delivery::Input(input) => {
                if self.faults_on
                    && matches!(input, Input::Watch(_))
                    && self.rng.chance(self.config.faults.duplicate_watch)
                {
                    self.fault("duplicated watch event");
                    self.inbox[a].push_front(Delivery::Input(input.clone()));
                }
                note!(
                    self,
                    "{step:>6} t={} {name} <- {}",
                    self.now,
                    describe(&input)
                );
                self.guards[a].input(&input);
                if let Some(m) = self.actors[a].control() {
                    m.handle(self.now, input);
                }
            }
            Delivery::Watcher(input) => self.deliver_watcher(a, &name, input),
            Delivery::Registrar(input) => self.deliver_registrar(a, &name, input),
            Delivery::Csi { op, node, call } => {
                self.check_call(&name, node.as_deref(), &call);
                if let Some(f) = fault {
                    self.fault(match f {
                        CallFault::Error(_) => "CSI error",
                        CallFault::TimeoutAfterEffect => "CSI timeout after effect",
                        CallFault::CrashAfterEffect => "driver crash after effect",
                    });
                }
                let now = self.now;
                self.storage_writes += 1;
                let where_ = node.clone().unwrap_or_else(|| "controller".into());
                let result = match node.as_deref() {
                    Some(n) if !self.registered(n) => Err(crate::Status::new(
                        crate::Code::Unavailable,
                        format!(
                            "driver name {DRIVER} not found in the list of registered CSI drivers"
                        ),
                    )),
                    Some(n) => self
                        .nodes
                        .get_mut(n)
                        .map(|p| p.call(&mut self.storage, Some(n), now, call.clone(), fault))
                        .unwrap_or_else(|| Err(crate::Status::internal("no such node"))),
                    None => self
                        .controller
                        .call(&mut self.storage, None, now, call.clone(), fault),
                };
                let code = match &result {
                    Ok(_) => "OK".to_string(),
                    Err(e) => e.code.name().to_string(),
                };
                self.stats
                    .seen
                    .entry("CSI call")
                    .or_default()
                    .insert(call.method().to_string());
                note!(
                    self,
                    "{step:>6} t={} {name} -> {} {} {where_} = {code}",
                    self.now,
                    call.method(),
                    call.volume().unwrap_or("")
                );
                let done = Input::CsiDone { op, result };
                self.guards[a].input(&done);
                if let Some(m) = self.actors[a].control() {
                    m.handle(self.now, done);
                }
            }
        }
    }

    /// Hands actor `a` the answer to its oldest API call still unanswered.
    fn answer(&mut self, a: usize) {
        let Some(input) = self.answers[a].pop_front() else {
            return;
        };
        self.now += self.config.delivery_ticks;
        self.woken[a] = true;
        self.changed[a] = true;
        note!(
            self,
            "{:>6} t={} {} <- {}",
            self.stats.steps,
            self.now,
            self.actors[a].name(),
            describe(&input)
        );
        self.guards[a].input(&input);
        if let Some(m) = self.actors[a].control() {
            m.handle(self.now, input);
        }
    }

    /// One step chosen by the seed: a delivery (possibly faulted) or a timer,
    /// and now and then a restart or a reboot. False when nothing is left.
    pub fn step(&mut self) -> bool {
        self.drain_all();
        let choices = self.choices(false);
        if choices.is_empty() {
            return false;
        }
        let f = self.config.faults;
        if self.faults_on && self.rng.chance(f.restart) {
            let actor = self.rng.below(self.actors.len());
            self.apply(Choice::Restart { actor });
            return true;
        }
        if self.faults_on && !self.nodes.is_empty() && self.rng.chance(f.reboot) {
            let node = self.rng.below(self.nodes.len());
            self.apply(Choice::Reboot { node });
            return true;
        }
        let mut choice = choices[self.rng.below(choices.len())];
        if let Choice::Deliver { actor, .. } = choice
            && self.faults_on
            && let Some(Delivery::Csi { call, .. }) = self.inbox[actor].front()
            && !matches!(
                call,
                Request::NodeGetInfo | Request::Probe | Request::GetCapacity(_)
            )
        {
            let codes = allowed_errors(call);
            let fault = if self.rng.chance(f.csi_error) {
                Some(CallFault::Error(codes[self.rng.below(codes.len())]))
            } else if self.rng.chance(f.csi_timeout) {
                Some(CallFault::TimeoutAfterEffect)
            } else if self.rng.chance(f.driver_crash) {
                Some(CallFault::CrashAfterEffect)
            } else {
                None
            };
            choice = Choice::Deliver { actor, fault };
        }
        self.apply(choice);
        true
    }

    /// The capacity tracker polls once (a resync): what changed the storage
    /// without an event is then in its objects. False without a tracker.
    pub fn poll_capacity(&mut self) -> bool {
        let tracker = self
            .actors
            .iter()
            .position(|a| a.role() == Some(Role::Capacity));
        if let Some(a) = tracker {
            self.inbox[a].push_back(Delivery::Input(Input::Resync));
        }
        tracker.is_some()
    }

    /// Steps until nothing is pending or `max` steps; returns steps taken.
    pub fn run(&mut self, max: u64) -> u64 {
        let start = self.stats.steps;
        while self.stats.steps - start < max && self.step() {}
        self.stats.steps - start
    }
}

fn describe(i: &Input) -> String {
    match i {
        Input::Watch(Watch::Applied(o)) => {
            format!("watch {} rv={}", o.key(), o.meta().resource_version)
        }
        Input::Watch(Watch::Deleted(o)) => format!("watch deleted {}", o.key()),
        Input::ApiDone { op, result } => format!(
            "api {op} {}",
            match result {
                ApiResult::Ok(_) => "ok",
                ApiResult::Listed(_) => "listed",
                ApiResult::Conflict => "conflict",
                ApiResult::NotFound => "not found",
                ApiResult::AlreadyExists => "already exists",
                ApiResult::Failed(_) => "failed",
            }
        ),
        Input::CsiDone { op, .. } => format!("csi {op} done"),
        Input::Synced => "synced".into(),
        Input::Restarted => "restarted".into(),
        Input::Resync => "resync".into(),
        Input::Reconstruct(_) => "reconstruct".into(),
    }
}
