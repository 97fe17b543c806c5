//! `volplane sim`: the deterministic simulator and model checker.

use std::time::Instant;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use volplane_core::plant::{Plant, Planted};

use crate::knobs::Knobs;
use volplane_core::sim::shrink::shrink;
use volplane_core::sim::workload::{Action, from_manifests, generate, play};
use volplane_core::sim::{Faults, SimConfig};

mod exhaustive;
mod shards;

/// `volplane sim`'s flags.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// The first seed; runs use seed, seed+1, …
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// How many seeds to run (random mode).
    #[arg(long, default_value_t = 20)]
    pub runs: u64,
    /// Most steps per run, including the settling after faults stop.
    #[arg(long, default_value_t = 100_000)]
    pub steps: u64,
    /// User actions per generated workload.
    #[arg(long, default_value_t = 40)]
    pub actions: usize,
    /// Nodes in the simulated cluster.
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// Pods per generated workload.
    #[arg(long, default_value_t = 4)]
    pub pods: usize,
    /// Fault rate, 0.0–1.0 (of CSI calls; restarts, reboots and conflicts scale with it).
    #[arg(long, default_value_t = 0.1)]
    pub faults: f64,
    /// Plant a known bug (see --list-plants; only the tests' own binary, volplane-under-test, has them).
    #[arg(long)]
    pub plant: Option<String>,
    /// Explore every interleaving of the small configuration instead.
    #[arg(long)]
    pub exhaustive: bool,
    /// Depth bound of --exhaustive.
    #[arg(long, default_value_t = 12)]
    pub depth: usize,
    /// Most distinct states --exhaustive visits.
    #[arg(long, default_value_t = 50_000)]
    pub max_states: u64,
    /// Threads --exhaustive expands states on (the answer is the same with
    /// any number).
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// List the bugs --plant knows and exit.
    #[arg(long)]
    pub list_plants: bool,
    /// Play the objects of these manifests (YAML or JSON) instead of a generated workload.
    #[arg(long)]
    pub manifest: Option<std::path::PathBuf>,
    /// Run only the seeds that are I modulo N (a campaign over N machines,
    /// such as the pods of an Indexed Job).
    #[arg(long, value_name = "I/N", default_value = "0/1")]
    pub shard: shards::Shard,
    /// Also write what the runs covered as one line of JSON to FILE (`-`:
    /// standard output), for --merge.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<std::path::PathBuf>,
    /// Add up the summaries the shards wrote (files, or their pods' logs)
    /// and print the totals; runs nothing.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub merge: Vec<std::path::PathBuf>,
}

/// The planted bug `--plant` names (none without it); `None` after
/// saying why it cannot be planted.
fn planted(args: &SimArgs, knobs: Knobs) -> Option<Planted> {
    Some(match args.plant.as_deref().map(|p| (p, Plant::parse(p))) {
        None => Planted::default(),
        Some((name, None)) => {
            eprintln!("volplane sim: unknown --plant {name:?}; --list-plants shows them");
            return None;
        }
        Some((name, Some(p))) => match knobs.plants() {
            #[cfg(feature = "plants")]
            true => Planted::new(Some(p)),
            _ => {
                eprintln!(
                    "volplane sim: --plant {}: this build has no planted bugs; the tests' own binary has them: `cargo build --release -p volplane-tests --bin volplane-under-test`",
                    name
                );
                let _ = p;
                return None;
            }
        },
    })
}

/// The actions of `--manifest`, if given; `Err` after saying why it cannot
/// be read.
fn read_manifest(args: &SimArgs) -> Result<Option<Vec<Action>>, ()> {
    match &args.manifest {
        None => Ok(None),
        Some(path) => match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| from_manifests(&t, args.nodes).map_err(|e| e.to_string()))
        {
            Ok(a) => Ok(Some(a)),
            Err(e) => {
                eprintln!("volplane sim: {}: {e}", path.display());
                Err(())
            }
        },
    }
}

/// Runs the simulator; the process exit code: 0 nothing failed, 1 an invariant failed, 2 bad arguments.
pub fn run(args: SimArgs, knobs: Knobs) -> u8 {
    if !args.merge.is_empty() {
        return shards::merge(&args.merge);
    }
    if args.list_plants {
        for p in Plant::ALL {
            println!("{:<38} {}", p.name(), p.describe());
        }
        return 0;
    }
    let Some(plant) = planted(&args, knobs) else {
        return 2;
    };
    if !(0.0..=1.0).contains(&args.faults) || args.nodes == 0 {
        eprintln!("volplane sim: --faults takes 0.0–1.0 and --nodes at least 1");
        return 2;
    }
    if args.exhaustive {
        return exhaustive::exhaustive(&args, plant);
    }
    let manifest = match read_manifest(&args) {
        Ok(m) => m,
        Err(()) => return 2,
    };
    let start = Instant::now();
    let bar = ProgressBar::new(args.runs);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} runs {msg}").expect("a valid template"),
    );
    let mut total = shards::Summary::default();
    let seeds: Vec<u64> = (args.seed..args.seed + args.runs)
        .filter(|s| args.shard.runs(*s))
        .collect();
    bar.set_length(seeds.len() as u64);
    for seed in seeds {
        let mut config = SimConfig::new(args.nodes, seed);
        config.faults = Faults::at(args.faults);
        config.plant = plant;
        // The search keeps no trace; shrinking replays the failure with one.
        config.trace = false;
        let actions = manifest
            .clone()
            .unwrap_or_else(|| generate(seed, args.nodes, args.pods, args.actions));
        let sim = play(config.clone(), &actions, args.steps);
        total.add_run(&sim.stats);
        bar.inc(1);
        bar.set_message(format!("{} steps", total.steps));
        if let Some(v) = sim.violations.first() {
            bar.finish_and_clear();
            println!(
                "invariant failed with seed {seed} at step {}: {}",
                v.step, v.what
            );
            println!("shrinking…");
            if let Some(s) = shrink(&config, &actions, args.steps) {
                println!(
                    "shrunk to {} of {} actions ({} runs tried):",
                    s.actions.len(),
                    actions.len(),
                    s.tries
                );
                for a in &s.actions {
                    println!("  {a}");
                }
                println!("trace ({} steps to the failure):", s.trace.len());
                for l in &s.trace {
                    println!("  {l}");
                }
                println!("violated: {}", s.violation);
            }
            println!(
                "replay: volplane sim --seed {seed} --runs 1 --actions {} --nodes {} --pods {} --faults {}{}",
                args.actions,
                args.nodes,
                args.pods,
                args.faults,
                plant
                    .get()
                    .map(|p| format!(" --plant {}", p.name()))
                    .unwrap_or_default()
            );
            total.secs = start.elapsed().as_secs_f64();
            total.failures.push(shards::Failure {
                seed,
                step: v.step,
                what: v.what.clone(),
            });
            total.print();
            return finish(&args, &total, 1);
        }
    }
    bar.finish_and_clear();
    println!("{} runs, no invariant failed", total.runs);
    total.secs = start.elapsed().as_secs_f64();
    total.print();
    let code = leader_election(&args, &mut total);
    finish(&args, &total, code)
}

/// Writes `--summary`, if asked; the exit code.
fn finish(args: &SimArgs, total: &shards::Summary, code: u8) -> u8 {
    match &args.summary {
        Some(path) => match total.write(path) {
            Ok(()) => code,
            Err(e) => {
                eprintln!("volplane sim: {e}");
                code.max(2)
            }
        },
        None => code,
    }
}

/// The leader election of the controller roles: three candidates, one
/// Lease, slow calls, lost answers and pauses, one run per seed; checked
/// after every event that never two act at once.
fn leader_election(args: &SimArgs, total: &mut shards::Summary) -> u8 {
    use volplane_core::sim::lease;
    let start = std::time::Instant::now();
    let timings = volplane_core::lease::LeaseTimings::default();
    let seeds = (args.seed..args.seed + args.runs).filter(|s| args.shard.runs(*s));
    for seed in seeds {
        match lease::run(seed, 3, timings, 600_000) {
            Ok(r) => total.add_lease(&r),
            Err(e) => {
                println!("leader election: invariant failed with seed {seed}: {e}");
                total.failures.push(shards::Failure {
                    seed,
                    step: 0,
                    what: format!("leader election: {e}"),
                });
                return 1;
            }
        }
    }
    total.lease_secs = start.elapsed().as_secs_f64();
    total.print_lease();
    0
}
