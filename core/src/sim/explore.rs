//! Exhaustive mode: every interleaving of what can happen next — each
//! pending delivery, each allowed fault, each next user action — from a
//! starting state, breadth-first to a depth bound, with states hashed so
//! each is explored once. Every state is also finished without faults in
//! one fixed order and checked for convergence, so liveness mistakes are
//! found too, on a shortest path. A level's states are expanded apart from
//! each other ([`Search::expand`]), so a caller may spread them over
//! threads and get the same answer.

use std::collections::HashSet;

use super::workload::Action;
use super::{Choice, Sim};

/// Bounds of an exhaustive search.
#[derive(Debug, Clone, Copy)]
pub struct ExploreLimits {
    /// Moves from the starting state.
    pub depth: usize,
    /// Faults (failed or timed-out calls, crashes, restarts, reboots) per branch.
    pub max_faults: usize,
    /// Stop after this many distinct states.
    pub max_states: u64,
    /// Steps allowed to finish a branch without faults.
    pub finish_steps: u64,
}

/// One move of the search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// The next user action of the script.
    Act,
    /// A scheduler choice.
    Choice(Choice),
}

/// What the search found.
#[derive(Debug, Clone, Default)]
pub struct Explored {
    /// Distinct states visited (canonical: see `Sim::state_hash`).
    pub states: u64,
    /// States expanded: a state reached again with more moves or faults
    /// left than before is expanded again, so nothing within the bounds is
    /// cut short by having been seen deeper first.
    pub expansions: u64,
    /// The deepest level expanded.
    pub deepest: usize,
    /// States finished: played on without faults to quiet and checked for
    /// convergence.
    pub branches_finished: u64,
    /// The moves to the first violation, its trace and what failed.
    pub counterexample: Option<(Vec<Move>, Vec<String>, String)>,
    /// The search stopped at `max_states` before covering the bound.
    pub truncated: bool,
    /// Finished branches cut short on joining a finish already played.
    pub finishes_joined: u64,
    /// States waiting to be expanded when the search stopped (or last
    /// reported its progress).
    pub pending: u64,
    /// The search was stopped by its progress callback (the user's
    /// interrupt) before covering the bound.
    pub interrupted: bool,
}

/// How often (in expansions) a search reports its progress.
pub const PROGRESS_EVERY: u64 = 256;

/// What a state was reached with: moves made and faults used.
type Budget = (usize, usize);

/// The states seen, by canonical hash and script position, each with the
/// budgets it was expanded with (none better than another).
#[derive(Default)]
struct Seen(std::collections::HashMap<(u64, usize), Vec<Budget>>);

enum Visit {
    New,
    /// Seen, but now with more moves or faults left.
    Again,
    /// Seen with at least as many moves and faults left.
    Covered,
}

impl Seen {
    fn visit(&mut self, state: (u64, usize), (moves, faults): Budget) -> Visit {
        let budgets = self.0.entry(state).or_default();
        if budgets.iter().any(|&(m, f)| m <= moves && f <= faults) {
            return Visit::Covered;
        }
        let first = budgets.is_empty();
        budgets.retain(|&(m, f)| !(moves <= m && faults <= f));
        budgets.push((moves, faults));
        if first { Visit::New } else { Visit::Again }
    }
}

/// The trace lines up to and including `step`.
pub fn upto(trace: &[String], step: u64) -> Vec<String> {
    trace
        .iter()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .is_none_or(|n| n <= step)
        })
        .cloned()
        .collect()
}

fn is_fault(c: &Choice) -> bool {
    matches!(
        c,
        Choice::Deliver { fault: Some(_), .. } | Choice::Restart { .. } | Choice::Reboot { .. }
    )
}

/// The moves from a state, in the order a level lists their children:
/// faulted deliveries first (crashes, then timeouts, then refusals), then
/// plain deliveries, restarts and reboots, the next user action, and the
/// clock last — so among equally short failures the one reported puts
/// faults early and lets user actions overtake retries.
fn order(sim: &Sim, can_act: bool, faults_left: bool) -> Vec<Move> {
    let choices = sim.choices(faults_left);
    let rank = |c: &Choice| match c {
        Choice::Deliver {
            fault: Some(super::backend::CallFault::CrashAfterEffect),
            ..
        } => 0,
        Choice::Deliver {
            fault: Some(super::backend::CallFault::TimeoutAfterEffect),
            ..
        } => 1,
        Choice::Deliver { fault: Some(_), .. } => 2,
        Choice::Deliver { fault: None, .. } | Choice::Answer { .. } => 3,
        Choice::Restart { .. } | Choice::Reboot { .. } => 4,
        Choice::Timers => 6,
    };
    let mut moves: Vec<(u8, Move)> = choices
        .into_iter()
        .map(|c| (rank(&c), Move::Choice(c)))
        .collect();
    if can_act {
        moves.push((5, Move::Act));
    }
    moves.sort_by_key(|(r, _)| *r);
    moves.into_iter().map(|(_, m)| m).collect()
}

/// Finishes a branch: the script's remaining actions at once (a user who
/// does not wait: what they overlap is where mistakes hide), then
/// fault-free first-choice steps until quiet; then the convergence check.
fn finish(sim: Sim, script: &[Action], pos: usize, limits: &ExploreLimits) -> Sim {
    finish_joining(sim, script, pos, limits, None).sim
}

/// A finish, and the points it passed.
struct Finished {
    sim: Sim,
    /// The states it passed where it started and after each move of the
    /// clock.
    passed: Vec<u64>,
    /// It met a point of a finish already known to end well, and stopped.
    joined: bool,
}

/// [`finish`], stopping where it meets a point of `good` (a finish is one
/// fixed sequence of steps, so from there it is known to end well). The
/// points looked at are where every finish passes the same way: where it
/// starts, and after each move of the clock (everything else done).
fn finish_joining(
    mut sim: Sim,
    script: &[Action],
    pos: usize,
    limits: &ExploreLimits,
    good: Option<&HashSet<u64>>,
) -> Finished {
    sim.faults_on = false;
    for a in &script[pos..] {
        sim.act(a);
    }
    let mut passed = Vec::new();
    let point = |sim: &mut Sim, passed: &mut Vec<u64>| {
        let Some(good) = good else { return false };
        let key = sim.state_hash();
        passed.push(key);
        good.contains(&key) && sim.violations.is_empty()
    };
    if point(&mut sim, &mut passed) {
        return Finished {
            sim,
            passed,
            joined: true,
        };
    }
    let mut steps = 0;
    while steps < limits.finish_steps {
        let Some(c) = sim.choices(false).first().copied() else {
            break;
        };
        sim.apply(c);
        steps += 1;
        if matches!(c, Choice::Timers) && point(&mut sim, &mut passed) {
            return Finished {
                sim,
                passed,
                joined: true,
            };
        }
    }
    if sim.violations.is_empty() {
        sim.check_converged();
    }
    Finished {
        sim,
        passed,
        joined: false,
    }
}

/// Plays `path` from `start` again, this time with a trace (the search
/// keeps none), and finishes the branch when the failure came there.
fn replay(
    start: &Sim,
    script: &[Action],
    path: &[Move],
    finished: bool,
    limits: &ExploreLimits,
) -> Sim {
    let mut sim = start.clone();
    sim.config.trace = true;
    let pos = play(&mut sim, script, path);
    if finished {
        sim = finish(sim, script, pos, limits);
    }
    sim
}

/// Makes the moves of `path`; returns how many script actions they took.
fn play(sim: &mut Sim, script: &[Action], path: &[Move]) -> usize {
    let mut pos = 0;
    for m in path {
        match m {
            Move::Act => {
                sim.act(&script[pos]);
                pos += 1;
            }
            Move::Choice(c) => sim.apply(*c),
        }
    }
    pos
}

/// The counterexample of a failing branch: its moves, the trace to the
/// first violation, and what was violated.
fn counterexample(
    start: &Sim,
    script: &[Action],
    path: Vec<Move>,
    finished: bool,
    limits: &ExploreLimits,
) -> (Vec<Move>, Vec<String>, String) {
    let sim = replay(start, script, &path, finished, limits);
    let v = sim
        .violations
        .first()
        .expect("a replayed failure fails again");
    (path, upto(&sim.trace, v.step), v.what.clone())
}

/// A state waiting to be expanded, by the moves that reach it from the
/// start (a level of a search can hold many; a path is small, a state is
/// not).
#[derive(Debug, Clone)]
pub struct Work {
    path: Vec<Move>,
    pos: usize,
    faults: usize,
}

/// A child state found by an expansion, before the level's merge decides
/// whether it is new.
#[derive(Debug)]
struct Child {
    key: (u64, usize),
    faults: usize,
    parent: usize,
    mv: Move,
}

/// What expanding one state of a level found. Expansions are pure: any
/// number may run at once (`volplane sim --jobs`), and their merge, in
/// the level's order, decides the same whatever ran where.
#[derive(Debug, Default)]
pub struct Expansion {
    index: usize,
    children: Vec<Child>,
    /// Points the finish passed that are known to end well.
    good: Vec<u64>,
    joined: bool,
    /// The first failure: the moves to it, and whether it came in the finish.
    failure: Option<(Vec<Move>, bool)>,
}

/// A breadth-first search, level by level: every state at one depth is
/// expanded (its moves made) and finished (played on without faults and
/// checked for convergence), then the children no state seen before covers
/// make the next level. The first failure found is on a shortest path, and
/// among equally short ones the first in the level's order, so any number
/// of workers find the same one.
pub struct Search<'a> {
    origin: Sim,
    script: &'a [Action],
    limits: ExploreLimits,
    seen: Seen,
    good: HashSet<u64>,
    level: Vec<Work>,
    depth: usize,
    out: Explored,
    done: bool,
}

impl std::fmt::Debug for Search<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Search")
            .field("depth", &self.depth)
            .field("level", &self.level.len())
            .field("states", &self.out.states)
            .finish_non_exhaustive()
    }
}

impl<'a> Search<'a> {
    /// A search from `start`, with `script` the user actions still to come.
    pub fn new(start: &Sim, script: &'a [Action], limits: ExploreLimits) -> Search<'a> {
        let mut origin = start.clone();
        origin.trace.clear();
        origin.faults_on = false;
        origin.config.trace = false;
        // Between two timers everything happens at one instant: two
        // deliveries to different machines that do not interact then reach
        // one state in either order, and the seen set merges the two
        // branches (a random run moves the clock a tick per delivery; no
        // deadline the machines set comes due within a search's few moves
        // either way).
        origin.config.delivery_ticks = 0;
        let mut seen = Seen::default();
        seen.visit((origin.state_hash(), 0), (0, 0));
        Search {
            origin,
            script,
            limits,
            seen,
            good: HashSet::new(),
            level: vec![Work {
                path: Vec::new(),
                pos: 0,
                faults: 0,
            }],
            depth: 0,
            out: Explored {
                states: 1,
                ..Explored::default()
            },
            done: false,
        }
    }

    /// The states of the current level, to expand (none once the search is
    /// over).
    pub fn level(&self) -> &[Work] {
        if self.done { &[] } else { &self.level }
    }

    /// Expands the level's state `index`: finishes it, and makes each of
    /// its moves (unless it is at the depth bound).
    pub fn expand(&self, index: usize) -> Expansion {
        let work = &self.level[index];
        let mut out = Expansion {
            index,
            ..Expansion::default()
        };
        let mut sim = self.origin.clone();
        play(&mut sim, self.script, &work.path);
        let moves = order(
            &sim,
            work.pos < self.script.len(),
            work.faults < self.limits.max_faults,
        );
        let leaf = moves.is_empty() || work.path.len() >= self.limits.depth;
        if !leaf {
            for m in &moves {
                let mut child = sim.clone();
                let (mut pos, mut faults) = (work.pos, work.faults);
                match m {
                    Move::Act => {
                        child.act(&self.script[pos]);
                        pos += 1;
                    }
                    Move::Choice(c) => {
                        faults += usize::from(is_fault(c));
                        child.apply(*c);
                    }
                }
                if !child.violations.is_empty() {
                    let mut path = work.path.clone();
                    path.push(*m);
                    out.failure = Some((path, false));
                    return out;
                }
                out.children.push(Child {
                    key: (child.state_hash(), pos),
                    faults,
                    parent: index,
                    mv: *m,
                });
            }
        }
        let finished = self.finish(sim, work.pos, &mut out);
        if !finished {
            out.children.clear();
            out.failure = Some((work.path.clone(), true));
        }
        out
    }

    /// Finishes a state as [`finish`] does, joining a finish already known
    /// to end well where it meets one; false when it fails.
    fn finish(&self, sim: Sim, pos: usize, out: &mut Expansion) -> bool {
        let f = finish_joining(sim, self.script, pos, &self.limits, Some(&self.good));
        let good = f.sim.violations.is_empty();
        if good {
            out.good = f.passed;
            out.joined = f.joined;
        }
        good
    }

    /// Takes in the level's expansions (in any order; all of them, or the
    /// search is cut short) and makes the next level. False when the search
    /// is over: a failure found, the bound covered or `max_states` reached.
    pub fn merge(&mut self, mut expansions: Vec<Expansion>) -> bool {
        expansions.sort_by_key(|e| e.index);
        let level = std::mem::take(&mut self.level);
        self.out.deepest = self.depth;
        let mut next = Vec::new();
        for e in &expansions {
            self.out.expansions += 1;
            self.out.branches_finished += 1;
            self.out.finishes_joined += u64::from(e.joined);
            self.good.extend(e.good.iter().copied());
            if let Some((path, finished)) = &e.failure {
                self.out.counterexample = Some(counterexample(
                    &self.origin,
                    self.script,
                    path.clone(),
                    *finished,
                    &self.limits,
                ));
                self.done = true;
                return false;
            }
        }
        for c in expansions.into_iter().flat_map(|e| e.children) {
            match self.seen.visit(c.key, (self.depth + 1, c.faults)) {
                Visit::Covered => continue,
                Visit::New => self.out.states += 1,
                Visit::Again => {}
            }
            let parent = &level[c.parent];
            let mut path = parent.path.clone();
            path.push(c.mv);
            let pos = parent.pos + usize::from(c.mv == Move::Act);
            next.push(Work {
                path,
                pos,
                faults: c.faults,
            });
            if self.out.states >= self.limits.max_states {
                self.out.truncated = true;
                self.done = true;
                return false;
            }
        }
        self.depth += 1;
        self.level = next;
        self.done = self.level.is_empty();
        !self.done
    }

    /// What the search found so far, `done` states of the current level
    /// expanded after `before` expansions in the levels before it.
    pub fn so_far(&self, before: u64, done: usize) -> Explored {
        Explored {
            pending: (self.level().len() - done) as u64,
            expansions: before + done as u64,
            ..self.out.clone()
        }
    }

    /// What the search found, once over.
    pub fn explored(&self) -> Explored {
        self.out.clone()
    }

    /// Runs the search to its end, level by level: `expand_level` expands
    /// every state of the current level (on one thread or several; the
    /// expansions seen before it are passed for its progress reports) and
    /// answers them, or how many it expanded when told to stop — then the
    /// search ends, marked interrupted.
    pub fn run(
        mut self,
        mut expand_level: impl FnMut(&Search<'a>, u64) -> Result<Vec<Expansion>, usize>,
    ) -> Explored {
        let mut before = 0u64;
        loop {
            let n = self.level().len();
            match expand_level(&self, before) {
                Err(done) => {
                    return Explored {
                        interrupted: true,
                        ..self.so_far(before, done)
                    };
                }
                Ok(expansions) => {
                    before += n as u64;
                    if !self.merge(expansions) {
                        return self.explored();
                    }
                }
            }
        }
    }
}

/// Explores from `start`, with `script` the user actions still to come.
pub fn explore(start: &Sim, script: &[Action], limits: ExploreLimits) -> Explored {
    explore_reporting(start, script, limits, &mut |_| true)
}

/// [`explore`], showing `progress` what has been covered every
/// [`PROGRESS_EVERY`] expansions; the search stops (marked interrupted)
/// when it answers false.
pub fn explore_reporting(
    start: &Sim,
    script: &[Action],
    limits: ExploreLimits,
    progress: &mut dyn FnMut(&Explored) -> bool,
) -> Explored {
    Search::new(start, script, limits).run(|search, before| {
        let n = search.level().len();
        let mut expansions = Vec::with_capacity(n);
        for i in 0..n {
            expansions.push(search.expand(i));
            if (before + i as u64 + 1).is_multiple_of(PROGRESS_EVERY)
                && !progress(&search.so_far(before, i + 1))
            {
                return Err(i + 1);
            }
        }
        Ok(expansions)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_seen_again_with_more_left_is_expanded_again() {
        let mut seen = Seen::default();
        let s = (7, 0);
        assert!(matches!(seen.visit(s, (5, 1)), Visit::New));
        // Reached again deeper or with more faults used: nothing new below.
        assert!(matches!(seen.visit(s, (5, 1)), Visit::Covered));
        assert!(matches!(seen.visit(s, (6, 2)), Visit::Covered));
        // Reached sooner: more moves left before the bound, so again.
        assert!(matches!(seen.visit(s, (3, 1)), Visit::Again));
        // Fewer faults used but deeper: neither budget covers the other.
        assert!(matches!(seen.visit(s, (4, 0)), Visit::Again));
        assert!(matches!(seen.visit(s, (4, 1)), Visit::Covered));
        // The same state at another point of the script is another state.
        assert!(matches!(seen.visit((7, 1), (9, 2)), Visit::New));
    }
}
