//! The checker as a machine: it asks its adapter to send CSI calls, make
//! the directories a CO makes, look at the node's mounts, write and read
//! through targets, and restart the driver; it judges every answer.
//!
//! A run goes: discover the driver (its name, capabilities, node id),
//! note the mounts outside the kubelet directory, then step after step
//! (generated from a seed, or replayed), each step or group of steps in
//! flight together judged once all have answered and the node was looked
//! at; then put everything of the run away, look for leftovers, and
//! remove the directories it made. The first broken MUST-rule ends the
//! steps; what the run made is still put away, unjudged.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use super::choose::Chooser;
use super::generate::{self, Bounds};
use super::group::{self, Look, Sent};
use super::oracle::{self, Answer, Breach, Known};
use super::render;
use super::rules::Rule;
use super::step::{Names, Shape, Slot, Step};
use super::world::{NodeSeen, World};
use crate::driver::{Request, Response};
use crate::machine::Machine;
use crate::rng::Rng;
use crate::{OpId, Tick};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Discover(usize),
    Baseline,
    Steps,
    Teardown(u8),
    Inventory(inventory::Taking),
    Strays,
    Leftovers,
    Sweep,
    Tidy,
    Done,
}

/// Unsure answers in a row to one call (retried each time) that break
/// [`Rule::Converges`].
const RETRIES: u8 = 5;

/// Most entries a walk through ListVolumes or ListSnapshots pages holds,
/// and most entries of the storage directories taken stock of: past it,
/// what the storage holds is not judged.
pub const MOST_LISTED: usize = 100_000;

/// The discovery calls, in order.
const DISCOVER: [Request; 6] = [
    Request::GetPluginInfo,
    Request::GetPluginCapabilities,
    Request::Probe,
    Request::ControllerGetCapabilities,
    Request::NodeGetCapabilities,
    Request::GroupControllerGetCapabilities,
];

/// A walk through pages in progress: the entries so far, the tokens seen.
#[derive(Debug, Clone, Default)]
struct Walk {
    volumes: Vec<crate::driver::ListedVolume>,
    snapshots: Vec<crate::driver::Snapshot>,
    tokens: BTreeSet<String>,
    pages: u32,
}

/// The checker machine (see the module documentation).
#[derive(Debug)]
pub struct Checker {
    config: Config,
    rng: Chooser,
    phase: Phase,
    next_op: u64,
    queue: VecDeque<Effect>,
    /// The group in flight: its steps, answers as they come.
    group: Vec<(Step, Option<Answer>, OpId)>,
    walk: Walk,
    /// Directories being made before the group's calls go.
    making: usize,
    /// The look in flight, if any.
    looking: Option<OpId>,
    worlds: Vec<World>,
    known: Known,
    outcome: Outcome,
    /// The mounts outside the kubelet directory at the last look, each
    /// with its source ids.
    outside: BTreeMap<String, BTreeSet<String>>,
    /// The source ids of the driver's objects seen so far (the `outside`
    /// module).
    mine: BTreeSet<String>,
    touched: BTreeSet<(Slot, Slot)>,
    /// The loop devices attached before the run.
    loops: BTreeSet<String>,
    /// Objects (as [`Step::objects`] keys) a lost call may still be working on.
    lingering: BTreeSet<u16>,
    unsettled: Option<(Step, u8)>,
    groups: u32,
    /// Judging stopped (a violation): what is left is put away unjudged.
    stopped: bool,
    /// The discovery call in flight.
    asking: Option<OpId>,
    /// The steps of this teardown round not yet sent.
    pending_teardown: VecDeque<Step>,
    /// The group of the last restart, if any.
    restarted: Option<u32>,
    /// What the storage listed before the run (drivers that list).
    stored_before: Option<inventory::Stored>,
    /// The inventory being taken.
    stored_now: inventory::Stored,
    /// What the storage directories held before the run.
    dirs_before: BTreeSet<String>,
    /// Volume and snapshot ids the run's creates were answered and no
    /// delete of them was answered OK ([`Made`]).
    made: Made,
    /// Deletes of ids no step names any more, being sent (the strays).
    strays: VecDeque<Request>,
}

/// What a run made on the storage and has not seen deleted, by id.
#[derive(Debug, Default)]
struct Made {
    volumes: BTreeSet<String>,
    snapshots: BTreeSet<String>,
}

impl Checker {
    /// A checker for one run.
    pub fn new(config: Config) -> Checker {
        let mut c = Checker {
            rng: match &config.choices {
                Some(bytes) => Chooser::Bytes {
                    bytes: bytes.clone(),
                    at: 0,
                },
                None => Chooser::Seeded(Rng::new(config.seed)),
            },
            config,
            phase: Phase::Discover(0),
            next_op: 0,
            queue: VecDeque::new(),
            group: Vec::new(),
            walk: Walk::default(),
            making: 0,
            looking: None,
            worlds: vec![World::default()],
            known: Known::default(),
            outcome: Outcome::default(),
            outside: BTreeMap::new(),
            mine: BTreeSet::new(),
            touched: BTreeSet::new(),
            lingering: BTreeSet::new(),
            loops: BTreeSet::new(),
            unsettled: None,
            groups: 0,
            stopped: false,
            asking: None,
            pending_teardown: VecDeque::new(),
            restarted: None,
            stored_before: None,
            stored_now: inventory::Stored::default(),
            dirs_before: BTreeSet::new(),
            made: Made::default(),
            strays: VecDeque::new(),
        };
        c.discover(0);
        c
    }

    /// The run's outcome, once it is over.
    pub fn outcome(&self) -> Option<&Outcome> {
        (self.phase == Phase::Done).then_some(&self.outcome)
    }

    /// The groups run so far (for progress).
    pub fn groups(&self) -> u32 {
        self.groups
    }

    /// The run's names.
    pub fn names(&self) -> &Names {
        &self.config.names
    }

    fn op(&mut self) -> OpId {
        self.next_op += 1;
        OpId(self.next_op)
    }

    fn fail(&mut self, why: String) {
        self.outcome.error = Some(why);
        self.phase = Phase::Done;
    }

    /// Starts the next group, or moves on to putting things away.
    fn next_group(&mut self) {
        if self.stopped || self.outcome.violation.is_some() {
            self.stopped = true;
            return self.teardown(0);
        }
        let steps = match &self.config.program {
            Some(p) => match p.get(self.groups as usize) {
                Some(g) => g.clone(),
                None => return self.teardown(0),
            },
            None if self.groups >= self.config.steps || self.rng.exhausted() => {
                return self.teardown(0);
            }
            None => self.choose(),
        };
        self.groups += 1;
        self.start(steps);
    }

    fn choose(&mut self) -> Vec<Step> {
        // A call whose answer said nothing of its effect goes again, as a
        // CO retries it (`learn` counts how often).
        if let Some((step, _)) = self.unsettled {
            return vec![step];
        }
        let w = &self.worlds[0];
        let facts = &self.outcome.facts;
        let last = self.outcome.trace.last().map(|r| r.step);
        let first = generate::next(&mut self.rng, w, facts, &self.config.bounds, last);
        // Companions never restart: one restart per group, sent last.
        let calm = Bounds {
            restarts_per_mille: 0,
            ..self.config.bounds
        };
        if first == Step::Restart {
            // Half the time while a call is in flight, the more often one
            // that makes or removes something on the storage.
            if self.rng.chance(500) {
                for _ in 0..3 {
                    let s = generate::next(&mut self.rng, w, facts, &calm, None);
                    if s.makes() {
                        return vec![s, Step::Restart];
                    }
                }
                let s = generate::next(&mut self.rng, w, facts, &calm, None);
                if !s.alone() {
                    return vec![s, Step::Restart];
                }
            }
            return vec![Step::Restart];
        }
        let k = usize::from(self.config.concurrency.max(1));
        if first.alone() || k == 1 {
            return vec![first];
        }
        let n = 1 + self.rng.below(k);
        let mut steps = vec![first];
        while steps.len() < n {
            let s = generate::next(&mut self.rng, w, facts, &calm, None);
            if !s.alone() {
                steps.push(s);
            }
        }
        steps
    }

    /// Sends a group: the directories a CO makes first, then the calls.
    fn start(&mut self, steps: Vec<Step>) {
        self.walk = Walk::default();
        self.group = steps.iter().map(|s| (*s, None, OpId(0))).collect();
        let mut dirs = BTreeSet::new();
        for s in &steps {
            match *s {
                Step::NodeStage { v, .. } => {
                    dirs.insert(self.config.names.staging(v));
                }
                Step::NodePublish { v, t, .. } => {
                    let target = self.config.names.target(v, t);
                    let parent = target
                        .rsplit_once('/')
                        .map_or(target.clone(), |(p, _)| p.to_string());
                    dirs.insert(parent);
                    if self
                        .outcome
                        .facts
                        .node_has(crate::driver::NodeCapability::StageUnstageVolume)
                    {
                        dirs.insert(self.config.names.staging(v));
                    }
                    self.touched.insert((v, t));
                }
                _ => {}
            }
        }
        self.making = dirs.len();
        for path in dirs {
            let op = self.op();
            self.queue.push_back(Effect::MakeDir { op, path });
        }
        if self.making == 0 {
            self.send();
        }
    }

    /// When a restart kills, in microseconds after the group's calls are
    /// sent: between 0.1 and 40 ms, log-uniformly, so calls of every length
    /// (a quick local create, a slow remote one) are interrupted part-way
    /// as often. Drawn from the run's seed and the calls in flight alone
    /// (see [`Effect::Restart`]).
    fn kill_after_micros(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = crate::hasher::StateHasher::default();
        self.config.seed.hash(&mut h);
        for (step, _, _) in &self.group {
            step.hash(&mut h);
        }
        let u = (h.finish() % 1_000) as f64 / 1_000.0;
        (100.0 * 400f64.powf(u)) as u64
    }

    fn send(&mut self) {
        for i in 0..self.group.len() {
            let step = self.group[i].0;
            let op = self.op();
            self.group[i].2 = op;
            let effect = match step {
                Step::Data { v, from, to } => Effect::Data {
                    op,
                    write: self.config.names.target(v, from),
                    read: self.config.names.target(v, to),
                    token: format!("{}-g{}-{i}", self.config.names.prefix, self.groups),
                },
                Step::Restart => Effect::Restart {
                    op,
                    after_micros: self.kill_after_micros(),
                },
                _ => {
                    let names = &self.config.names;
                    let facts = &self.outcome.facts;
                    match render::request(&step, names, &self.known, facts) {
                        Some(mut request) => {
                            let bare = matches!(
                                step,
                                Step::CreateVolume {
                                    shape: Shape::NoSecrets,
                                    ..
                                }
                            );
                            if !bare {
                                self.config.secrets.apply(&mut request);
                            }
                            Effect::Call { op, request }
                        }
                        None => continue,
                    }
                }
            };
            self.queue.push_back(effect);
        }
    }

    fn answered(&mut self, op: OpId, answer: Answer) {
        if let Phase::Discover(d) = self.phase {
            if self.asking == Some(op) {
                self.asking = None;
                self.discovered(d, answer);
            }
            return;
        }
        if self.phase == Phase::Strays {
            if self.asking == Some(op) {
                self.asking = None;
                self.next_stray();
            }
            return;
        }
        if let Phase::Inventory(taking) = self.phase {
            if self.asking == Some(op) {
                self.asking = None;
                self.inventory_page(taking, answer);
            }
            return;
        }
        let Some(i) = self.group.iter().position(|(_, _, o)| *o == op) else {
            return;
        };
        let step = self.group[i].0;
        if step == Step::Restart
            && let Answer::Lost(why) = &answer
        {
            // The driver does not come back: its acknowledged state is lost
            // to the CO, and nothing more can be asked of it. The group goes
            // into the trace as it stands.
            let g = self.groups;
            for (s, a, _) in std::mem::take(&mut self.group) {
                let answer = match (s, a) {
                    (Step::Restart, _) => answer.clone(),
                    (_, Some(a)) => a,
                    (_, None) => Answer::Lost("the driver was killed".to_string()),
                };
                self.outcome.trace.push(Record {
                    group: g,
                    step: s,
                    answer,
                });
            }
            self.outcome.driver_gone = true;
            let detail = format!("after SIGKILL the driver did not serve again: {why}");
            return self.violate(Breach {
                rule: Rule::SurvivesRestart,
                detail,
            });
        }
        if step.alone() && matches!(step, Step::ListVolumes { .. } | Step::ListSnapshots { .. }) {
            if let Some(answer) = self.page(step, op, answer) {
                self.group[i].1 = Some(answer);
            } else {
                return;
            }
        } else {
            self.group[i].1 = Some(answer);
        }
        if self.group.iter().all(|(_, a, _)| a.is_some()) {
            self.all_answered();
        }
    }

    /// A page of a walk came: the next page is asked for, or the walk's
    /// whole answer is returned.
    fn page(&mut self, step: Step, op: OpId, answer: Answer) -> Option<Answer> {
        let Answer::Reply(r) = answer else {
            return Some(answer);
        };
        let max = match step {
            Step::ListVolumes { page } | Step::ListSnapshots { page } => page,
            _ => 0,
        };
        let (n, token) = match r {
            Response::Volumes {
                entries,
                next_token,
            } => {
                let n = entries.len();
                self.walk.volumes.extend(entries);
                (n, next_token)
            }
            Response::Snapshots {
                entries,
                next_token,
            } => {
                let n = entries.len();
                self.walk.snapshots.extend(entries);
                (n, next_token)
            }
            other => return Some(Answer::Reply(other)),
        };
        if let Err(b) = oracle::page(max, n, &token, &self.walk.tokens) {
            return Some(Answer::Malformed(format!(
                "{} ({})",
                b.detail,
                b.rule.name()
            )));
        }
        self.walk.pages += 1;
        // A driver whose pages never end must not make the check hold them all.
        if self.walk.volumes.len() + self.walk.snapshots.len() > MOST_LISTED {
            return Some(Answer::Malformed(format!(
                "more than {MOST_LISTED} entries over {} pages, and still a next_token: the pages do not end (list-every-object-once)",
                self.walk.pages
            )));
        }
        if token.is_empty() || self.walk.pages >= 10_000 {
            let whole = match step {
                Step::ListSnapshots { .. } => Response::Snapshots {
                    entries: std::mem::take(&mut self.walk.snapshots),
                    next_token: String::new(),
                },
                _ => Response::Volumes {
                    entries: std::mem::take(&mut self.walk.volumes),
                    next_token: String::new(),
                },
            };
            return Some(Answer::Reply(whole));
        }
        self.walk.tokens.insert(token.clone());
        let _ = op;
        let next = self.op();
        if let Some(slot) = self.group.iter_mut().find(|(s, _, _)| *s == step) {
            slot.2 = next;
        }
        let mut request = render::page(&step, &token);
        self.config.secrets.apply(&mut request);
        self.queue.push_back(Effect::Call { op: next, request });
        None
    }

    fn all_answered(&mut self) {
        let node = self
            .group
            .iter()
            .any(|(s, _, _)| s.on_node() || matches!(s, Step::Data { .. }));
        if node && !self.stopped {
            let op = self.op();
            self.looking = Some(op);
            let names = &self.config.names;
            let mut paths = Vec::new();
            let mut vols = BTreeSet::new();
            for &(v, t) in &self.touched {
                paths.push(names.target(v, t));
                vols.insert(v);
            }
            paths.extend(vols.into_iter().map(|v| names.staging(v)));
            self.queue.push_back(Effect::Look {
                op,
                paths,
                under: Vec::new(),
                outside: self.config.watch_outside,
                storage: Vec::new(),
            });
        } else {
            self.settle(None);
        }
    }

    /// Judges the group in flight (with what the node showed after it).
    fn settle(&mut self, seen: Option<NodeSeen>) {
        let group = std::mem::take(&mut self.group);
        let sent: Vec<Sent> = group
            .iter()
            .map(|(step, answer, _)| {
                let mine = step.objects();
                let shared = group
                    .iter()
                    .filter(|(s, _, _)| s.objects().iter().any(|o| mine.contains(o)))
                    .count()
                    > 1;
                let lingering = mine.iter().any(|o| self.lingering.contains(o));
                Sent {
                    step: *step,
                    answer: answer
                        .clone()
                        .unwrap_or(Answer::Lost("no answer".to_string())),
                    busy: shared || lingering,
                }
            })
            .collect();
        let g = self.groups;
        for s in &sent {
            self.outcome.trace.push(Record {
                group: g,
                step: s.step,
                answer: s.answer.clone(),
            });
        }
        self.outcome
            .program
            .push(sent.iter().map(|s| s.step).collect());
        if self.stopped {
            return self.after_teardown_step();
        }
        // Judged after the group (whose answers say what the run made, for
        // the teardown to put away), unless the group breaks a rule itself.
        let outside = seen.as_ref().and_then(|seen| self.outside_changed(seen));
        let targets: Vec<(Slot, Slot)> = self.touched.iter().copied().collect();
        let look = seen.as_ref().map(|seen| Look {
            seen,
            targets: &targets,
        });
        let judged = group::judge(
            &self.worlds,
            &sent,
            &self.config.names,
            &self.outcome.facts,
            &self.known,
            look,
            &mut self.outcome.tally,
        );
        self.outcome
            .notes
            .extend(judged.notes.into_iter().map(|b| (g, b)));
        if self.restarted.is_some() {
            self.outcome.tally.checked(Rule::SurvivesRestart);
        }
        for s in &sent {
            self.learn(s);
        }
        if let Some(b) = judged.breach {
            let b = self.after_restart(b);
            return self.violate(b);
        }
        if sent.iter().any(|s| s.step == Step::Restart) {
            self.restarted = Some(g);
        }
        self.worlds = judged.worlds;
        if let Some(b) = outside {
            return self.violate(b);
        }
        if let Some(b) = self.converged(&sent, g) {
            return self.violate(b);
        }
        self.known.node = self.worlds[0]
            .node
            .iter()
            .filter(|(_, n)| !n.id.is_empty())
            .map(|(v, n)| (*v, n.id.clone()))
            .collect();
        match self.phase {
            Phase::Teardown(round) => self.after_teardown_step_judged(round),
            _ => self.next_group(),
        }
    }

    /// A call retried [`RETRIES`] times whose answers still said nothing
    /// of its effect: with no answer through, it does not converge (the
    /// breach); INTERNAL every time is a failure, noted, and the run goes on.
    fn converged(&mut self, sent: &[Sent], g: u32) -> Option<Breach> {
        if let Some((step, tries)) = self.unsettled
            && tries >= RETRIES
        {
            let last = sent.iter().find(|s| s.step == step).map(|s| &s.answer);
            let lost = last.is_some_and(Answer::lost);
            let last = last.map_or(String::new(), Answer::to_string);
            if lost {
                let detail = format!(
                    "{step}: {tries} tries in a row, no answer that says whether it took effect (the last: {last})"
                );
                return Some(Breach {
                    rule: Rule::Converges,
                    detail,
                });
            }
            // INTERNAL or UNKNOWN every time: a failure, not an interruption.
            self.unsettled = None;
            self.outcome.tally.violated(Rule::ValidCallSucceeds);
            let detail = format!(
                "{step}: {tries} tries in a row answered {last}; a CO retries that for ever"
            );
            self.outcome.notes.push((
                g,
                Breach {
                    rule: Rule::ValidCallSucceeds,
                    detail,
                },
            ));
        } else if self.unsettled.is_some() {
            self.outcome.tally.checked(Rule::Converges);
        }
        None
    }

    /// A breach after a restart that says acknowledged state was lost may
    /// be the driver's failing to survive the restart: it says so, and
    /// [`Rule::SurvivesRestart`] counts it too.
    fn after_restart(&mut self, b: Breach) -> Breach {
        let Some(at) = self.restarted else { return b };
        // The rules a lost record breaks (a pagination or code mistake
        // after a restart is the driver's anyway: the detail says when).
        let lost = matches!(
            b.rule,
            Rule::Acknowledged
                | Rule::CreateIdempotent
                | Rule::SnapshotIdempotent
                | Rule::PublishMounts
                | Rule::UnpublishUnmounts
                | Rule::UnstageUnmounts
        );
        if lost {
            self.outcome.tally.violated(Rule::SurvivesRestart);
        }
        Breach {
            rule: b.rule,
            detail: format!(
                "{} (after the driver was killed and restarted at step {at})",
                b.detail
            ),
        }
    }

    fn violate(&mut self, breach: Breach) {
        self.outcome.tally.violated(breach.rule);
        self.outcome.violation = Some(Violation {
            breach,
            group: self.groups,
        });
        self.stopped = true;
        self.teardown(0);
    }

    /// Takes in the ids and contexts an answer handed out.
    fn learn(&mut self, s: &Sent) {
        let objects = s.step.objects();
        if s.answer.unsure() {
            self.lingering.extend(objects.iter().copied());
            if !matches!(s.step, Step::Restart | Step::Data { .. }) {
                let tries = match self.unsettled {
                    Some((u, n)) if u == s.step => n + 1,
                    _ => 1,
                };
                self.unsettled = Some((s.step, tries));
            }
            return;
        }
        if matches!(s.answer, Answer::Reply(_)) {
            for o in &objects {
                self.lingering.remove(o);
            }
        }
        if self.unsettled.is_some_and(|(u, _)| u == s.step) {
            self.unsettled = None;
        }
        let Answer::Reply(r) = &s.answer else { return };
        match (s.step, r) {
            (Step::CreateVolume { v, .. }, Response::Volume(vol)) => {
                self.made.volumes.insert(vol.volume_id.clone());
                self.known.volumes.insert(v, vol.volume_id.clone());
                self.known
                    .volume_context
                    .insert(v, vol.volume_context.clone());
            }
            (
                Step::ControllerPublish {
                    v,
                    known_node: true,
                    ..
                },
                Response::Published { publish_context },
            ) => {
                self.known
                    .publish_context
                    .insert(v, publish_context.clone());
            }
            (Step::DeleteVolume { v }, _) => {
                if let Some(id) = self.known.volumes.get(&v) {
                    self.made.volumes.remove(id);
                }
            }
            (Step::DeleteSnapshot { s }, _) => {
                if let Some(id) = self.known.snapshots.get(&s) {
                    self.made.snapshots.remove(id);
                }
            }
            (Step::CreateSnapshot { s, .. }, Response::Snapshot(snap)) => {
                self.made.snapshots.insert(snap.snapshot_id.clone());
                self.known.snapshots.insert(s, snap.snapshot_id.clone());
            }
            (Step::CreateGroupSnapshot { g, .. }, Response::GroupSnapshot(group)) => {
                self.known.groups.insert(g, group.group_snapshot_id.clone());
            }
            _ => {}
        }
    }
}

mod discover;
mod inventory;
mod outside;
pub use outside::MOST_FOREIGN;
mod teardown;

pub use super::protocol::{Config, Effect, Input, Outcome, Program, Record, Violation};

impl Machine for Checker {
    type Input = Input;
    type Effect = Effect;

    fn handle(&mut self, _now: Tick, input: Input) {
        match input {
            Input::Answered { op, answer } => self.answered(op, answer),
            Input::Made { op: _, result } => match self.phase {
                Phase::Sweep => self.tidy(),
                Phase::Tidy => self.look_for_files(),
                _ if self.making > 0 => {
                    // A directory the CO could not make: the driver is not
                    // to blame, and the run cannot go on.
                    if let Err(why) = result {
                        return self.fail(format!("making a directory as a CO would: {why}"));
                    }
                    self.making -= 1;
                    if self.making == 0 {
                        self.send();
                    }
                }
                _ => {}
            },
            Input::Seen { op, seen } => {
                if self.looking != Some(op) {
                    return;
                }
                self.looking = None;
                match self.phase {
                    Phase::Baseline => {
                        self.outside = outside::outside_of(&seen);
                        self.loops = seen.loops;
                        self.dirs_before = seen.stored;
                        self.take_inventory(true);
                    }
                    Phase::Leftovers => {
                        self.left_behind(&seen);
                        self.judge_storage_dirs(&seen.stored);
                        self.sweep(&seen);
                    }
                    Phase::Tidy => {
                        self.left_behind(&seen);
                        self.phase = Phase::Done;
                    }
                    _ => self.settle(Some(seen)),
                }
            }
        }
    }

    fn poll(&mut self) -> Option<Effect> {
        self.queue.pop_front()
    }

    fn poll_timeout(&self) -> Option<Tick> {
        None
    }

    fn handle_timeout(&mut self, _now: Tick) {}

    fn check_invariants(&self) -> Result<(), crate::machine::Broken> {
        if self.worlds.is_empty() && self.phase != Phase::Done && !self.stopped {
            return Err("check: no world explains the answers, yet the run goes on".into());
        }
        Ok(())
    }
}
