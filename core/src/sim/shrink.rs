//! Shrinking a failing run: the fewest user actions (delta debugging, same
//! seed) that still fail, then the trace up to the first violation.

use super::workload::{Action, play};
use super::{Sim, SimConfig};

/// A failing run, shrunk.
#[derive(Debug, Clone, Hash)]
pub struct Shrunk {
    /// The smallest workload still failing.
    pub actions: Vec<Action>,
    /// The trace up to and including the first violation's step.
    pub trace: Vec<String>,
    /// The invariant it breaks.
    pub violation: String,
    /// Runs tried while shrinking.
    pub tries: usize,
}

fn fails(config: &SimConfig, actions: &[Action], settle: u64, kind: Option<&str>) -> Option<Sim> {
    let sim = play(config.clone(), actions, settle);
    let v = sim.violations.first()?;
    kind.is_none_or(|k| v.kind == k).then_some(sim)
}

/// Removes chunks of actions while the run still fails (ddmin), then cuts the
/// trace at the first violation.
pub fn shrink(config: &SimConfig, actions: &[Action], settle: u64) -> Option<Shrunk> {
    // Tried without a trace; the smallest is replayed with one at the end.
    let mut config = config.clone();
    config.trace = false;
    let config = &config;
    let mut best = actions.to_vec();
    let kind = fails(config, &best, settle, None)?.violations[0].kind;
    let mut tries = 1;
    let mut chunk = best.len().div_ceil(2).max(1);
    while chunk >= 1 && tries < 2_000 {
        let mut reduced = false;
        let mut start = 0;
        while start < best.len() && tries < 2_000 {
            let mut candidate = best.clone();
            candidate.drain(start..(start + chunk).min(best.len()));
            tries += 1;
            if fails(config, &candidate, settle, Some(kind)).is_some() {
                best = candidate;
                reduced = true;
            } else {
                start += chunk;
            }
        }
        if !reduced {
            if chunk == 1 {
                break;
            }
            chunk = chunk.div_ceil(2);
        }
    }
    let mut traced = config.clone();
    traced.trace = true;
    let sim = play(traced, &best, settle);
    let first = sim.violations[0].clone();
    let trace = super::explore::upto(&sim.trace, first.step);
    Some(Shrunk {
        actions: best,
        trace,
        violation: first.what,
        tries,
    })
}
