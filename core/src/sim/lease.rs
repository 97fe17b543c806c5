//! Leader election under faults: candidates ([`Candidate`]) driven by the
//! one loop against one Lease held by an in-memory API server that
//! enforces the resourceVersion precondition, with slow calls, lost
//! answers (a write stored, its answer lost and reported as a failure) and
//! candidates paused and resumed. Checked after every event: never two
//! candidates acting at once.

use std::collections::BTreeMap;

use super::Rng;
use crate::Tick;
use crate::lease::{Candidate, LeaseEffect, LeaseInput, LeaseRecord, LeaseTimings};
use crate::machine::{Broken, Machine};

/// The Lease as the API server stores it.
#[derive(Debug, Clone, Default)]
struct Server {
    lease: Option<LeaseRecord>,
    version: u64,
    writes: u64,
}

impl Server {
    fn read(&self) -> Option<LeaseRecord> {
        self.lease.clone()
    }

    /// A create succeeds only when there is none; an update only at the
    /// version it was read at.
    fn write(&mut self, create: bool, record: &LeaseRecord) -> bool {
        let fresh = match &self.lease {
            None => create,
            Some(l) => !create && l.resource_version == record.resource_version,
        };
        if fresh {
            self.version += 1;
            self.writes += 1;
            let mut stored = record.clone();
            stored.resource_version = self.version.to_string();
            self.lease = Some(stored);
        }
        fresh
    }
}

/// A call on its way: served by the API server at `serve`, answered at
/// `answer` (`lost`: the answer never comes; the adapter's timeout reports
/// a failure instead).
#[derive(Debug, Clone)]
struct Call {
    who: usize,
    effect: LeaseEffect,
    lost: bool,
    outcome: Option<LeaseInput>,
}

/// What one run saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseRun {
    /// Events handled.
    pub events: u64,
    /// Times a candidate started leading.
    pub takeovers: u64,
    /// Lease writes stored.
    pub writes: u64,
}

/// Plays `candidates` candidates with `timings` for `until` ms of
/// simulated time from `seed`; `Err` names the first moment two acted at
/// once (or a candidate's own invariant broke).
pub fn run(
    seed: u64,
    candidates: usize,
    timings: LeaseTimings,
    until: Tick,
) -> Result<LeaseRun, Broken> {
    let mut rng = Rng::new(seed);
    let mut cs: Vec<Candidate> = (0..candidates)
        .map(|i| Candidate::new(&format!("replica-{i}"), timings))
        .collect();
    let mut paused_until = vec![0 as Tick; candidates];
    let mut server = Server::default();
    // (time, sequence) → what happens then: a call served, or answered.
    let mut agenda: BTreeMap<(Tick, u64), (Call, bool)> = BTreeMap::new();
    let mut seq = 0u64;
    let mut stats = LeaseRun::default();
    let mut now: Tick = 0;
    let latency = timings.retry_period.max(1);
    while now <= until {
        // The next thing due: a candidate's timer or a call on the agenda.
        let timer = (0..candidates)
            .filter_map(|i| cs[i].poll_timeout().map(|t| (t.max(paused_until[i]), i)))
            .min();
        let call = agenda.keys().next().copied();
        let timer_first = match (timer, call) {
            (Some((t, _)), Some((c, _))) => t <= c,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        if timer_first {
            let (t, i) = timer.expect("chosen above");
            now = now.max(t);
            cs[i].handle_timeout(now);
            stats.events += 1;
        } else {
            let key = call.expect("chosen above");
            now = now.max(key.0);
            let (mut c, served) = agenda.remove(&key).expect("chosen above");
            if !served {
                c.outcome = Some(serve(&mut server, &c.effect));
                let answer_at = now + 1 + rng.below(latency as usize) as Tick;
                seq += 1;
                agenda.insert((answer_at, seq), (c, true));
                continue;
            }
            // A lost answer is the adapter's timeout: the call failed, as
            // far as the candidate knows, whatever the server did.
            let input = if c.lost {
                c.effect
                    .unanswered("the request timed out")
                    .expect("a call")
            } else {
                c.outcome.take().expect("served")
            };
            let i = c.who;
            let at = now.max(paused_until[i]);
            if at > now {
                seq += 1;
                agenda.insert((at, seq), (c.clone_with(input), true));
                continue;
            }
            cs[i].handle(now, input);
            stats.events += 1;
        }
        // Every candidate's effects: calls go out, with faults.
        for (i, c) in cs.iter_mut().enumerate() {
            while let Some(e) = c.poll() {
                match e {
                    LeaseEffect::Leading(true) => stats.takeovers += 1,
                    LeaseEffect::Leading(false) => {}
                    effect => {
                        let lost = rng.chance(100);
                        let serve_at = now + rng.below(latency as usize) as Tick;
                        seq += 1;
                        let call = Call {
                            who: i,
                            effect,
                            lost,
                            outcome: None,
                        };
                        agenda.insert((serve_at, seq), (call, false));
                    }
                }
            }
            // Sometimes a candidate stops for a while (a long GC pause, a
            // node under pressure): its timers and answers wait.
            if rng.chance(5) {
                paused_until[i] = now + rng.below(timings.lease_duration as usize) as Tick;
            }
        }
        check(&cs, &paused_until, now)?;
    }
    stats.writes = server.writes;
    Ok(stats)
}

impl Call {
    fn clone_with(&self, input: LeaseInput) -> Call {
        Call {
            who: self.who,
            effect: self.effect.clone(),
            lost: false,
            outcome: Some(input),
        }
    }
}

fn serve(server: &mut Server, effect: &LeaseEffect) -> LeaseInput {
    match effect {
        LeaseEffect::Read { op } => LeaseInput::Read {
            op: *op,
            result: Ok(server.read()),
        },
        LeaseEffect::Write {
            op, create, record, ..
        } => LeaseInput::Written {
            op: *op,
            ok: server.write(*create, record),
        },
        LeaseEffect::Leading(_) => unreachable!("not a call"),
    }
}

/// Never two acting; each candidate's own invariant holds. A paused
/// candidate does nothing; a running one acts while it has said it leads
/// and its renew deadline has not passed (the adapter asks
/// [`Candidate::acting_at`] before each effect it carries).
fn check(cs: &[Candidate], paused_until: &[Tick], now: Tick) -> Result<(), Broken> {
    for c in cs {
        c.check_invariants()?;
    }
    let acting: Vec<&str> = cs
        .iter()
        .zip(paused_until)
        .filter(|(c, paused)| **paused <= now && c.acting_at(now))
        .map(|(c, _)| c.identity())
        .collect();
    if acting.len() > 1 {
        return Err(format!("two leaders acting at {now} ms: {}", acting.join(", ")).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_two_leaders_acting_under_slow_calls_lost_answers_and_pauses() {
        let mut takeovers = 0;
        for seed in 0..300 {
            let r = run(seed, 3, LeaseTimings::default(), 600_000)
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            takeovers += r.takeovers;
            assert!(r.writes > 0, "seed {seed}: nobody ever wrote the lease");
        }
        assert!(takeovers > 300, "leadership moved only {takeovers} times");
    }

    #[test]
    fn the_check_finds_two_leaders_when_the_renew_deadline_outlasts_the_lease() {
        // What `LeaseTimings::check` refuses: a leader keeps acting after
        // others may take over.
        let unsafe_timings = LeaseTimings {
            lease_duration: 5_000,
            renew_deadline: 12_000,
            retry_period: 1_000,
        };
        let found = (0..200).any(|seed| run(seed, 3, unsafe_timings, 300_000).is_err());
        assert!(found, "the simulation never saw two leaders");
    }
}
