//! Exhaustive mode: every interleaving of what can happen next — each
//! pending delivery, each allowed fault, each next user action — from a
//! starting state, depth-first to a depth bound, with states hashed so each
//! is explored once. A branch cut at the bound, or with nothing left to do,
//! is finished without faults in one fixed order and checked for
//! convergence, so liveness mistakes are found too.

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
    /// The longest path explored.
    pub deepest: usize,
    /// Paths explored to their end.
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

struct Node {
    sim: Sim,
    pos: usize,
    faults: usize,
    path: Vec<Move>,
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

/// The moves from a state, in the order depth-first search tries them:
/// faulted deliveries first (crashes, then timeouts, then refusals), then
/// plain deliveries, restarts and reboots, the next user action, and the
/// clock last — so the first branches put faults early and let user actions
/// overtake retries, where mistakes hide.
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

/// Finishes a branch: remaining script actions, then fault-free first-choice
/// steps until quiet; then the convergence check.
fn finish(mut sim: Sim, script: &[Action], pos: usize, limits: &ExploreLimits) -> Sim {
    sim.faults_on = false;
    for a in &script[pos..] {
        sim.act(a);
    }
    let mut steps = 0;
    while steps < limits.finish_steps {
        let Some(c) = sim.choices(false).first().copied() else {
            break;
        };
        sim.apply(c);
        steps += 1;
    }
    if sim.violations.is_empty() {
        sim.check_converged();
    }
    sim
}

/// Canonical states known to finish without a violation. A finish without
/// faults is one fixed sequence of steps, so a branch that reaches such a
/// state is known to end well from there. States are looked up where a
/// finish lets the clock move (and where it starts): those points come at
/// the same places of two finishes that met, so a finish stops soon after
/// it joins one already played.
#[derive(Default)]
struct Finishes {
    good: HashSet<u64>,
    /// Finishes cut short by one already played.
    joined: u64,
}

impl Finishes {
    /// Finishes `sim` as [`finish`] does; `None` when it ends well (here or
    /// in a finish already played), the failed simulation otherwise.
    fn finish(
        &mut self,
        mut sim: Sim,
        script: &[Action],
        pos: usize,
        limits: &ExploreLimits,
    ) -> Option<Sim> {
        sim.faults_on = false;
        for a in &script[pos..] {
            sim.act(a);
        }
        let mut passed = vec![sim.state_hash()];
        let mut steps = 0;
        loop {
            let last = *passed.last().expect("the start is passed");
            if self.good.contains(&last) && sim.violations.is_empty() {
                self.joined += 1;
                self.good.extend(passed);
                return None;
            }
            let next = sim.choices(false).first().copied();
            let Some(c) = next.filter(|_| steps < limits.finish_steps) else {
                break;
            };
            sim.apply(c);
            steps += 1;
            if matches!(c, Choice::Timers) {
                passed.push(sim.state_hash());
            }
        }
        if sim.violations.is_empty() {
            sim.check_converged();
        }
        if !sim.violations.is_empty() {
            return Some(sim);
        }
        self.good.extend(passed);
        None
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
    if finished {
        sim = finish(sim, script, pos, limits);
    }
    sim
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
    let mut out = Explored::default();
    let mut seen = Seen::default();
    let mut start = start.clone();
    start.trace.clear();
    start.faults_on = false;
    start.config.trace = false;
    // Between two timers everything happens at one instant: two deliveries
    // to different machines that do not interact then reach one state in
    // either order, and the seen set merges the two branches (a random
    // run moves the clock a tick per delivery; no deadline the machines
    // set comes due within a search's few moves either way).
    start.config.delivery_ticks = 0;
    let origin = start.clone();
    let mut finishes = Finishes::default();
    let mut stack = vec![Node {
        sim: start,
        pos: 0,
        faults: 0,
        path: Vec::new(),
    }];
    while let Some(node) = stack.pop() {
        let budget = (node.path.len(), node.faults);
        match seen.visit((node.sim.state_hash(), node.pos), budget) {
            Visit::Covered => continue,
            Visit::New => out.states += 1,
            Visit::Again => {}
        }
        out.expansions += 1;
        out.deepest = out.deepest.max(node.path.len());
        if out.expansions % PROGRESS_EVERY == 0 {
            out.pending = stack.len() as u64;
            if !progress(&out) {
                out.interrupted = true;
                return out;
            }
        }
        if out.states >= limits.max_states {
            out.truncated = true;
            break;
        }
        let moves = order(
            &node.sim,
            node.pos < script.len(),
            node.faults < limits.max_faults,
        );
        if moves.is_empty() || node.path.len() >= limits.depth {
            out.branches_finished += 1;
            if finishes
                .finish(node.sim, script, node.pos, &limits)
                .is_some()
            {
                out.counterexample =
                    Some(counterexample(&origin, script, node.path, true, &limits));
                return out;
            }
            out.finishes_joined = finishes.joined;
            continue;
        }
        // Push in reverse so the first move is explored first; the last
        // pushed takes the node's own state instead of a copy.
        let mut parent = Some(node.sim);
        let last = moves.len() - 1;
        for (i, m) in moves.into_iter().rev().enumerate() {
            let mut sim = if i == last {
                parent.take().expect("taken once, by the last move")
            } else {
                parent.as_ref().expect("kept until the last move").clone()
            };
            let (mut pos, mut faults) = (node.pos, node.faults);
            match m {
                Move::Act => {
                    sim.act(&script[pos]);
                    pos += 1;
                }
                Move::Choice(c) => {
                    if is_fault(&c) {
                        faults += 1;
                    }
                    sim.apply(c);
                }
            }
            let mut path = node.path.clone();
            path.push(m);
            if !sim.violations.is_empty() {
                out.counterexample = Some(counterexample(&origin, script, path, false, &limits));
                return out;
            }
            stack.push(Node {
                sim,
                pos,
                faults,
                path,
            });
        }
    }
    out.pending = 0;
    out
}

/// Iterative deepening: the search at depths 4, 8, 16… up to `limits.depth`,
/// so the counterexample found is among the shortest.
pub fn explore_shortest(start: &Sim, script: &[Action], limits: ExploreLimits) -> Explored {
    let mut depth = 4;
    let mut total = (0, 0);
    loop {
        let d = depth.min(limits.depth);
        let mut found = explore(start, script, ExploreLimits { depth: d, ..limits });
        total.0 += found.states;
        total.1 += found.expansions;
        if found.counterexample.is_some() || d >= limits.depth {
            (found.states, found.expansions) = total;
            return found;
        }
        depth *= 2;
    }
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
