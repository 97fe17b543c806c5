//! Campaigns beyond one machine: `--shard I/N` runs the seeds that are I
//! modulo N, `--summary FILE` writes what a run covered as one line of
//! JSON, and `--merge FILE…` adds the shards' summaries into the totals one
//! machine would have printed for the same seeds (runs are deterministic).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};
use volplane_core::sim::Stats;
use volplane_core::sim::lease::LeaseRun;

/// `--shard I/N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// Which shard, from 0.
    pub index: u64,
    /// How many.
    pub count: u64,
}

impl Shard {
    /// The whole campaign.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Whether this shard runs `seed`.
    pub fn runs(self, seed: u64) -> bool {
        seed % self.count == self.index
    }
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || {
            format!(
                "{s:?}: a shard is I/N with 0 ≤ I < N (as a Job's completion index and completions)"
            )
        };
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// One seed that broke an invariant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// The step it broke at.
    pub step: u64,
    /// What broke.
    pub what: String,
}

/// What a campaign (or a shard of one) covered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Seeds run.
    pub runs: u64,
    /// Steps taken.
    pub steps: u64,
    /// Invariant checks made.
    pub checks: u64,
    /// Seconds spent (summed over shards).
    pub secs: f64,
    /// Faults injected, by kind.
    pub faults: BTreeMap<String, u64>,
    /// "PV phase", "CSI call"… → the values reached.
    pub seen: BTreeMap<String, BTreeSet<String>>,
    /// Seeds that broke an invariant (a shard stops at its first).
    pub failures: Vec<Failure>,
    /// Leader-election runs.
    pub lease_runs: u64,
    /// Their events, takeovers and Lease writes.
    pub lease: (u64, u64, u64),
    /// Seconds the leader-election runs took.
    pub lease_secs: f64,
}

/// The key a summary's JSON line starts with, so that it is found among a
/// pod's other log lines.
const MARK: &str = "volplane_sim_summary";

impl Summary {
    /// Adds one run's statistics.
    pub fn add_run(&mut self, s: &Stats) {
        self.runs += 1;
        self.steps += s.steps;
        self.checks += s.checks;
        for (k, v) in &s.faults {
            *self.faults.entry(k.to_string()).or_default() += v;
        }
        for (k, v) in &s.seen {
            self.seen
                .entry(k.to_string())
                .or_default()
                .extend(v.iter().cloned());
        }
    }

    /// Adds one leader-election run.
    pub fn add_lease(&mut self, r: &LeaseRun) {
        self.lease_runs += 1;
        self.lease.0 += r.events;
        self.lease.1 += r.takeovers;
        self.lease.2 += r.writes;
    }

    /// Adds another shard's summary.
    pub fn merge(&mut self, o: Summary) {
        self.runs += o.runs;
        self.steps += o.steps;
        self.checks += o.checks;
        self.secs += o.secs;
        for (k, v) in o.faults {
            *self.faults.entry(k).or_default() += v;
        }
        for (k, v) in o.seen {
            self.seen.entry(k).or_default().extend(v);
        }
        self.failures.extend(o.failures);
        self.failures.sort_by_key(|f| f.seed);
        self.lease_runs += o.lease_runs;
        self.lease.0 += o.lease.0;
        self.lease.1 += o.lease.1;
        self.lease.2 += o.lease.2;
        self.lease_secs += o.lease_secs;
    }

    /// The totals, as a run on one machine prints them.
    pub fn print(&self) {
        println!(
            "{} steps in {:.2}s ({:.0} steps/s), {} invariant checks",
            self.steps,
            self.secs,
            self.steps as f64 / self.secs.max(1e-9),
            self.checks
        );
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        println!(
            "faults injected: {}",
            if faults.is_empty() {
                "none".into()
            } else {
                faults.join(", ")
            }
        );
        for (k, v) in &self.seen {
            println!(
                "{k} reached: {}",
                v.iter().cloned().collect::<Vec<_>>().join(", ")
            );
        }
    }

    /// The leader-election line.
    pub fn print_lease(&self) {
        println!(
            "leader election: {} runs × 3 candidates × 10 min, no two leaders acting ({} events, {} takeovers, {} lease writes, {:.2}s)",
            self.lease_runs, self.lease.0, self.lease.1, self.lease.2, self.lease_secs
        );
    }

    /// Writes the summary as one JSON line to `path` (`-`: standard output).
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let mut line = serde_json::json!({ MARK: self }).to_string();
        line.push('\n');
        if path == Path::new("-") {
            print!("{line}");
            return Ok(());
        }
        std::fs::write(path, line).map_err(|e| format!("--summary {}: {e}", path.display()))
    }

    /// The summaries in `text`: a file `--summary` wrote, or logs (`kubectl
    /// logs` of the shards' pods) with their lines among others.
    pub fn parse(text: &str) -> Vec<Summary> {
        #[derive(Deserialize)]
        struct Marked {
            volplane_sim_summary: Summary,
        }
        text.lines()
            .filter(|l| l.contains(MARK))
            .filter_map(|l| serde_json::from_str::<Marked>(l.trim()).ok())
            .map(|m| m.volplane_sim_summary)
            .collect()
    }
}

/// `--merge`: the shards' summaries added up and printed; 1 when a shard
/// saw an invariant fail, 2 when a file has no summary.
pub fn merge(paths: &[std::path::PathBuf]) -> u8 {
    let mut total = Summary::default();
    let mut shards = 0;
    for path in paths {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("volplane sim --merge: {}: {e}", path.display());
                return 2;
            }
        };
        let found = Summary::parse(&text);
        if found.is_empty() {
            eprintln!(
                "volplane sim --merge: {}: no summary in it (a shard writes one with --summary)",
                path.display()
            );
            return 2;
        }
        for s in found {
            shards += 1;
            total.merge(s);
        }
    }
    println!("{shards} shards, {} runs", total.runs);
    for f in &total.failures {
        println!(
            "invariant failed with seed {} at step {}: {}",
            f.seed, f.step, f.what
        );
    }
    if total.failures.is_empty() {
        println!("{} runs, no invariant failed", total.runs);
    }
    total.print();
    if total.lease_runs > 0 {
        total.print_lease();
    }
    u8::from(!total.failures.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_is_its_index_of_a_count() {
        assert_eq!("1/3".parse(), Ok(Shard { index: 1, count: 3 }));
        for bad in ["3/3", "1", "a/2", "0/0", "-1/2"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        let s: Shard = "1/3".parse().unwrap();
        assert_eq!((0..9).filter(|x| s.runs(*x)).collect::<Vec<_>>(), [1, 4, 7]);
    }

    #[test]
    fn a_summary_is_found_among_log_lines_and_merges() {
        let mut a = Summary {
            runs: 2,
            steps: 10,
            faults: [("CSI error".to_string(), 1)].into(),
            ..Summary::default()
        };
        let path =
            std::env::temp_dir().join(format!("volplane-summary-{}.json", std::process::id()));
        a.write(&path).unwrap();
        let written = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let log = format!("2000 runs…\n{}\ndone\n{}", written.trim(), written);
        assert_eq!(Summary::parse(&log), [a.clone(), a.clone()]);
        a.merge(Summary {
            runs: 1,
            steps: 5,
            faults: [("CSI error".to_string(), 2)].into(),
            ..Summary::default()
        });
        assert_eq!((a.runs, a.steps, a.faults["CSI error"]), (3, 15, 3));
    }
}

#[cfg(test)]
mod campaign_tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        sim: crate::sim::SimArgs,
    }

    /// `volplane sim ARGS --summary FILE`, and the summary it wrote.
    fn sim(args: &[&str], name: &str) -> Summary {
        let path =
            std::env::temp_dir().join(format!("volplane-{name}-{}.json", std::process::id()));
        let summary = format!("--summary={}", path.display());
        let argv = ["volplane-sim"]
            .iter()
            .chain(args)
            .copied()
            .chain([summary.as_str()]);
        assert_eq!(
            crate::sim::run(Command::parse_from(argv).sim, crate::knobs::Knobs::Refused),
            0,
            "{args:?}"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        Summary::parse(&text).pop().expect("a summary")
    }

    #[test]
    fn shards_add_up_to_the_campaign_run_on_one_machine() {
        let whole = sim(&["--runs=6", "--faults=0.2"], "whole");
        let mut merged = sim(&["--runs=6", "--faults=0.2", "--shard=0/2"], "shard0");
        merged.merge(sim(&["--runs=6", "--faults=0.2", "--shard=1/2"], "shard1"));
        let totals = |s: &Summary| {
            (
                s.runs,
                s.steps,
                s.checks,
                s.faults.clone(),
                s.seen.clone(),
                s.lease_runs,
                s.lease,
            )
        };
        assert_eq!(totals(&merged), totals(&whole));
        assert_eq!(whole.runs, 6);
        assert!(whole.steps > 0 && whole.failures.is_empty());
    }
}
