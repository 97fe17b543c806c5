//! A harness for property tests of one control-plane machine under faults:
//! its API writes meet conflicts, its CSI calls fail before or after their
//! effect, completions arrive late, out of order or twice, and the machine
//! restarts with empty memory. Watch events arrive late but in order, as an
//! informer delivers them. After every step the machine's own invariants
//! must hold; a test adds what its machine promises about the world.

use std::collections::VecDeque;

use super::{ApiCall, ApiResult, ControlMachine, CsiCall, CsiResult, Effect, Input, Watch};
use crate::machine;
use crate::rng::Rng;
use crate::store::Store;
use crate::{Code, Status, Tick};

/// A QuickCheck run of `tests` cases of size `size`, seeded from
/// `VOLPLANE_QC_SEED` (0x5eed unless set), so a failure replays.
pub fn checker(tests: u64, size: usize) -> quickcheck::QuickCheck {
    let seed = std::env::var("VOLPLANE_QC_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_u64);
    eprintln!("quickcheck seed {seed} (set VOLPLANE_QC_SEED to change it)");
    quickcheck::QuickCheck::new()
        .tests(tests)
        .rng(quickcheck::Gen::from_size_and_seed(size, seed))
}

/// One CSI call the machine made, and whether the driver carried it out.
#[derive(Debug, Clone)]
pub struct CsiRecord {
    /// The node whose plugin was called (None: the controller).
    pub node: Option<String>,
    /// The call.
    pub call: CsiCall,
    /// The call's effect happened (it may still have answered an error).
    pub done: bool,
}

/// The driver the machine calls: it sees the store.
type Driver = Box<dyn FnMut(&Store, &CsiCall) -> CsiResult>;
/// What a restarted process finds (the kubelet's mounts), from the calls
/// carried out so far.
type Found = Box<dyn Fn(&[CsiRecord], &Store) -> Vec<Input>>;

/// A machine, a store, and everything in flight between them.
#[allow(missing_debug_implementations)]
pub struct Chaos<M> {
    /// The machine under test (replaced by a fresh one at a restart).
    pub machine: M,
    fresh: Box<dyn Fn() -> M>,
    /// The API server's objects.
    pub store: Store,
    /// The clock.
    pub now: Tick,
    /// Watch events (and `Synced` after a relist), delivered in order.
    watches: VecDeque<Input>,
    /// Completions, delivered in any order.
    done: Vec<Input>,
    /// Every CSI call the machine made, in order.
    pub csi: Vec<CsiRecord>,
    answer: Driver,
    rng: Rng,
    /// Faults are injected only while this is set.
    pub faults: bool,
    /// Restarts are among the faults.
    pub restarts: bool,
    found: Option<Found>,
    /// The calls asked for since the machine's last news (no hot loop).
    guard: super::HotLoopGuard,
}

impl<M: ControlMachine> Chaos<M> {
    /// `fresh` makes the machine as a (re)started process has it; `answer`
    /// is the driver (it sees the store, for answers that depend on it).
    pub fn new(
        seed: u64,
        fresh: impl Fn() -> M + 'static,
        answer: impl FnMut(&Store, &CsiCall) -> CsiResult + 'static,
    ) -> Chaos<M> {
        Chaos {
            machine: fresh(),
            fresh: Box::new(fresh),
            store: Store::with_admission(),
            now: 0,
            watches: VecDeque::new(),
            done: Vec::new(),
            csi: Vec::new(),
            answer: Box::new(answer),
            rng: Rng::new(seed),
            faults: true,
            restarts: true,
            found: None,
            guard: super::HotLoopGuard::default(),
        }
    }

    /// After a restart, the machine is also told what `found` reports.
    pub fn on_restart(&mut self, found: impl Fn(&[CsiRecord], &Store) -> Vec<Input> + 'static) {
        self.found = Some(Box::new(found));
    }

    /// A user's write, applied now; its watch events are queued.
    pub fn user(&mut self, call: ApiCall) -> ApiResult {
        let (result, watches) = self.store.write(self.now, call);
        let machine = &self.machine;
        let watched = watches.into_iter().filter(|w| machine.watches(w.kind()));
        self.watches.extend(watched.map(Input::Watch));
        result
    }

    /// One step chosen by `choice`: deliver the next watch event, deliver
    /// (or, with faults, duplicate) a completion, restart, or let time
    /// pass. Then the machine drains. `Err` when its invariants break.
    pub fn step(&mut self, choice: u8) -> Result<(), ChaosFailure> {
        match choice % 8 {
            0..=2 => {
                if let Some(i) = self.watches.pop_front() {
                    self.guard.input(&i);
                    self.machine.handle(self.now, i);
                }
            }
            3..=5 if !self.done.is_empty() => {
                let i = self.rng.below(self.done.len());
                let input = if self.faults && choice % 8 == 5 {
                    self.done[i].clone()
                } else {
                    self.done.swap_remove(i)
                };
                self.guard.input(&input);
                self.machine.handle(self.now, input);
            }
            6 if self.faults && self.restarts && self.rng.chance(200) => self.restart(),
            _ => self.now += 1 + self.rng.below(4_000) as Tick,
        }
        self.drain()?;
        Ok(self.machine.check_invariants()?)
    }

    /// The process restarts: nothing in flight comes back; the watches list
    /// everything again, then say `Synced`.
    pub fn restart(&mut self) {
        self.machine = (self.fresh)();
        self.guard = super::HotLoopGuard::default();
        self.machine.handle(self.now, Input::Restarted);
        if let Some(found) = &self.found {
            for input in found(&self.csi, &self.store) {
                self.machine.handle(self.now, input);
            }
        }
        self.done.clear();
        self.watches = self
            .store
            .shared()
            .filter(|o| self.machine.watches(o.kind()))
            .map(|o| Input::Watch(Watch::Applied(o.clone())))
            .collect();
        self.watches.push_back(Input::Synced);
    }

    /// Faults stop; everything is delivered and time passes until the
    /// machine has nothing left to do.
    pub fn settle(&mut self) -> Result<(), ChaosFailure> {
        self.faults = false;
        for _ in 0..200 {
            while !self.watches.is_empty() || !self.done.is_empty() {
                self.step(0)?;
                self.step(3)?;
            }
            match self.machine.poll_timeout() {
                Some(t) => self.now = self.now.max(t),
                None => return Ok(()),
            }
            self.drain()?;
        }
        Err(ChaosFailure::Unsettled)
    }

    /// The machine says everything it has to say. `Err` when it asked
    /// for a call again with nothing new since (a hot loop).
    fn drain(&mut self) -> Result<(), ChaosFailure> {
        if self.machine.poll_timeout().is_some_and(|t| t <= self.now) {
            self.guard.news();
        }
        let mut looped = None;
        let Chaos {
            machine,
            store,
            now,
            watches,
            done,
            csi,
            answer,
            rng,
            faults,
            guard,
            ..
        } = self;
        let mut carry = |m: &M, now: Tick, e: Effect, _: &mut VecDeque<Input>| {
            if let Err(why) = guard.effect(&e) {
                looped.get_or_insert(why);
            }
            match e {
                Effect::Event(_) => {}
                Effect::Api { op, call } => {
                    let write = !matches!(call, ApiCall::Get(_) | ApiCall::List { .. });
                    let result = if *faults && write && rng.chance(150) {
                        ApiResult::Conflict
                    } else {
                        let (result, w) = store.apply(now, &call);
                        let watched = w.into_iter().filter(|w| m.watches(w.kind()));
                        watches.extend(watched.map(Input::Watch));
                        result
                    };
                    done.push(Input::ApiDone { op, result });
                }
                Effect::Csi { op, node, call } => {
                    let fault = if *faults { rng.below(10) } else { 9 };
                    let (result, happened) = match fault {
                        0 => (Err(Status::new(Code::Unavailable, "injected")), false),
                        1 => {
                            let _ = answer(store, &call);
                            (Err(Status::new(Code::DeadlineExceeded, "injected")), true)
                        }
                        _ => {
                            let r = answer(store, &call);
                            let ok = r.is_ok();
                            (r, ok)
                        }
                    };
                    csi.push(CsiRecord {
                        node,
                        call,
                        done: happened,
                    });
                    done.push(Input::CsiDone { op, result });
                }
            }
        };
        machine::drain(machine, *now, &mut carry);
        looped.map_or(Ok(()), |l| Err(ChaosFailure::HotLoop(l)))
    }
}

/// What a chaotic run of one machine found wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChaosFailure {
    /// One of its invariants broke.
    #[error("{0}")]
    Invariant(#[from] crate::machine::Broken),
    /// It asked for a failed call again with nothing new since.
    #[error("{0}")]
    HotLoop(#[from] crate::control::repeats::HotLoop),
    /// Faults stopped and it still had something to do after 200 rounds.
    #[error("the machine did not settle")]
    Unsettled,
}

/// The property every incremental controller keeps: playing `steps` — a
/// user's change where `change` makes one of `(what, x)`, else the clock
/// moving `x × tick` — reaches the same writes, CSI calls and events on
/// `incremental` as on `oracle`, which is told to resync (dirty every key,
/// the old whole-world pass) after every step. Both start as the same
/// world.
pub fn same_as_resync<M: ControlMachine + 'static>(
    mut incremental: super::rig::Rig<M>,
    mut oracle: super::rig::Rig<M>,
    steps: Vec<(u8, u8)>,
    change: impl Fn(&super::rig::Rig<M>, u8, u8) -> Option<ApiCall>,
    tick: Tick,
) -> quickcheck::TestResult {
    let (a, b) = (&mut incremental, &mut oracle);
    b.input(Input::Resync);
    for (i, (what, x)) in steps.into_iter().enumerate() {
        match change(a, what, x) {
            Some(call) => {
                a.user(call.clone());
                b.user(call);
            }
            None => {
                a.advance(Tick::from(x) * tick);
                b.advance(Tick::from(x) * tick);
            }
        }
        b.input(Input::Resync);
        if a.writes != b.writes || a.csi_calls != b.csi_calls || a.events != b.events {
            let n = a.writes.len().min(b.writes.len());
            let first = (0..n).find(|j| a.writes[*j] != b.writes[*j]).unwrap_or(n);
            return quickcheck::TestResult::error(format!(
                "after step {i} ({what}, {x}): incremental wrote {} times, whole-world {} ({} CSI calls vs {}, {} events vs {}); first difference at write {first}: {:?} vs {:?}",
                a.writes.len(),
                b.writes.len(),
                a.csi_calls.len(),
                b.csi_calls.len(),
                a.events.len(),
                b.events.len(),
                a.writes.get(first).map(|w| (w.verb(), w.key())),
                b.writes.get(first).map(|w| (w.verb(), w.key())),
            ));
        }
    }
    quickcheck::TestResult::passed()
}
