//! `volplane sim`: the deterministic simulator and model checker.

use std::time::Instant;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use volplane_core::plant::{Plant, Planted};
use volplane_core::sim::explore::{ExploreLimits, Explored, Move, Search, explore_reporting};
use volplane_core::sim::shrink::shrink;
use volplane_core::sim::workload::{Action, from_manifests, generate, play, small_configuration};
use volplane_core::sim::{Faults, SimConfig, Stats};

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
    /// Plant a known bug (see --list-plants; a build with `--features plants`).
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
}

fn add(total: &mut Stats, s: &Stats) {
    total.steps += s.steps;
    total.checks += s.checks;
    for (k, v) in &s.faults {
        *total.faults.entry(k).or_default() += v;
    }
    for (k, v) in &s.seen {
        total.seen.entry(k).or_default().extend(v.iter().cloned());
    }
}

fn summary(total: &Stats, secs: f64) {
    println!(
        "{} steps in {secs:.2}s ({:.0} steps/s), {} invariant checks",
        total.steps,
        total.steps as f64 / secs.max(1e-9),
        total.checks
    );
    let faults: Vec<String> = total
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
    for (k, v) in &total.seen {
        println!(
            "{k} reached: {}",
            v.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
}

/// The planted bug `--plant` names (none without it); `None` after
/// saying why it cannot be planted.
fn planted(args: &SimArgs) -> Option<Planted> {
    Some(match args.plant.as_deref().map(|p| (p, Plant::parse(p))) {
        None => Planted::default(),
        Some((name, None)) => {
            eprintln!("volplane sim: unknown --plant {name:?}; --list-plants shows them");
            return None;
        }
        #[cfg(feature = "plants")]
        Some((_, Some(p))) => Planted::new(Some(p)),
        #[cfg(not(feature = "plants"))]
        Some((name, Some(_))) => {
            eprintln!(
                "volplane sim: --plant {name}: this build has no planted bugs; build it with `cargo build --release -p volplane-cli --features plants`"
            );
            return None;
        }
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
pub fn run(args: SimArgs) -> u8 {
    if args.list_plants {
        for p in Plant::ALL {
            println!("{:<38} {}", p.name(), p.describe());
        }
        return 0;
    }
    let Some(plant) = planted(&args) else {
        return 2;
    };
    if !(0.0..=1.0).contains(&args.faults) || args.nodes == 0 {
        eprintln!("volplane sim: --faults takes 0.0–1.0 and --nodes at least 1");
        return 2;
    }
    if args.exhaustive {
        return exhaustive(&args, plant);
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
    let mut total = Stats::default();
    for seed in args.seed..args.seed + args.runs {
        let mut config = SimConfig::new(args.nodes, seed);
        config.faults = Faults::at(args.faults);
        config.plant = plant;
        // The search keeps no trace; shrinking replays the failure with one.
        config.trace = false;
        let actions = manifest
            .clone()
            .unwrap_or_else(|| generate(seed, args.nodes, args.pods, args.actions));
        let sim = play(config.clone(), &actions, args.steps);
        add(&mut total, &sim.stats);
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
            summary(&total, start.elapsed().as_secs_f64());
            return 1;
        }
    }
    bar.finish_and_clear();
    println!("{} runs, no invariant failed", args.runs);
    summary(&total, start.elapsed().as_secs_f64());
    leader_election(&args)
}

/// The leader election of the controller roles: three candidates, one
/// Lease, slow calls, lost answers and pauses, one run per seed; checked
/// after every event that never two act at once.
fn leader_election(args: &SimArgs) -> u8 {
    use volplane_core::sim::lease;
    let start = std::time::Instant::now();
    let timings = volplane_core::lease::LeaseTimings::default();
    let mut total = lease::LeaseRun::default();
    for seed in args.seed..args.seed + args.runs {
        match lease::run(seed, 3, timings, 600_000) {
            Ok(r) => {
                total.events += r.events;
                total.takeovers += r.takeovers;
                total.writes += r.writes;
            }
            Err(e) => {
                println!("leader election: invariant failed with seed {seed}: {e}");
                return 1;
            }
        }
    }
    println!(
        "leader election: {} runs × 3 candidates × 10 min, no two leaders acting ({} events, {} takeovers, {} lease writes, {:.2}s)",
        args.runs,
        total.events,
        total.takeovers,
        total.writes,
        start.elapsed().as_secs_f64()
    );
    0
}

/// [`explore_reporting`] with each level's states expanded on `jobs`
/// threads; this thread shows the progress.
fn explore_on(
    jobs: usize,
    start: &volplane_core::sim::Sim,
    script: &[Action],
    limits: ExploreLimits,
    progress: &mut dyn FnMut(&Explored) -> bool,
) -> Explored {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
    let mut search = Search::new(start, script, limits);
    let mut expanded = 0u64;
    loop {
        let n = search.level().len();
        let (next, done, stop) = (
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicBool::new(false),
        );
        let expansions = std::thread::scope(|s| {
            let work = || {
                let mut mine = Vec::new();
                while !stop.load(Relaxed) {
                    let i = next.fetch_add(1, Relaxed);
                    if i >= n {
                        break;
                    }
                    mine.push(search.expand(i));
                    done.fetch_add(1, Relaxed);
                }
                mine
            };
            let workers: Vec<_> = (0..jobs).map(|_| s.spawn(work)).collect();
            while !workers.iter().all(|w| w.is_finished()) {
                std::thread::sleep(std::time::Duration::from_millis(50));
                let d = done.load(Relaxed);
                let mut so_far = search.explored(n - d);
                so_far.expansions = expanded + d as u64;
                if !progress(&so_far) {
                    stop.store(true, Relaxed);
                }
            }
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect::<Vec<_>>()
        });
        if stop.load(Relaxed) {
            let mut so_far = search.explored(n - expansions.len());
            so_far.expansions = expanded + expansions.len() as u64;
            so_far.interrupted = true;
            return so_far;
        }
        expanded += n as u64;
        if !search.merge(expansions) {
            return search.explored(0);
        }
    }
}

/// Set at the first SIGINT or SIGTERM, for a long search to stop and say
/// what it covered.
fn interrupt_flag() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let set = flag.clone();
    let watcher = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(signalled) = volplane_tokio::termination() {
                    signalled.await;
                    set.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            });
        });
    if let Err(e) = watcher {
        eprintln!("warning: an interrupt will end the search without a summary: {e}");
    }
    flag
}

fn exhaustive(args: &SimArgs, plant: Planted) -> u8 {
    let (start, script) = small_configuration(plant);
    let limits = ExploreLimits {
        depth: args.depth,
        max_faults: 2,
        max_states: args.max_states,
        finish_steps: args.steps,
    };
    println!(
        "exploring the small configuration (2 nodes, 2 claims, 3 pods, at most 2 faults) to depth {}…",
        args.depth
    );
    let t = Instant::now();
    let interrupted = interrupt_flag();
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed} {msg}").expect("a valid template"),
    );
    let mut progress = |e: &Explored| {
        bar.set_message(format!(
            "{} distinct states ({:.0}/s), deepest {} moves, {} waiting",
            e.states,
            e.states as f64 / t.elapsed().as_secs_f64().max(1e-9),
            e.deepest,
            e.pending
        ));
        bar.tick();
        !interrupted.load(std::sync::atomic::Ordering::Relaxed)
    };
    let found = match args.jobs {
        0 | 1 => explore_reporting(&start, &script, limits, &mut progress),
        jobs => explore_on(jobs, &start, &script, limits, &mut progress),
    };
    bar.finish_and_clear();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{} distinct states ({} expansions) in {secs:.2}s ({:.0} states/s), deepest {} moves, {} branches finished ({} joined a finish already played){}",
        found.states,
        found.expansions,
        found.states as f64 / secs.max(1e-9),
        found.deepest,
        found.branches_finished,
        found.finishes_joined,
        if found.truncated {
            " (stopped at --max-states)"
        } else {
            ""
        }
    );
    if found.interrupted {
        println!(
            "interrupted: the search covered {} distinct states to depth {} of {}; {} were still waiting to be expanded; no invariant failed in what was covered",
            found.states, found.deepest, args.depth, found.pending
        );
        return 130;
    }
    match found.counterexample {
        None => {
            println!("no invariant failed");
            0
        }
        Some((moves, trace, what)) => {
            println!("invariant failed after {} moves:", moves.len());
            for m in &moves {
                match m {
                    Move::Act => println!("  next user action"),
                    Move::Choice(c) => println!("  {c:?}"),
                }
            }
            println!("trace:");
            for l in &trace {
                println!("  {l}");
            }
            println!("violated: {what}");
            1
        }
    }
}

#[cfg(test)]
mod parallel_tests {
    use super::*;

    #[test]
    fn two_jobs_find_what_one_finds() {
        let (start, script) = small_configuration(Planted::default());
        let limits = ExploreLimits {
            depth: 3,
            max_faults: 2,
            max_states: 100_000,
            finish_steps: 20_000,
        };
        let one = explore_reporting(&start, &script, limits, &mut |_| true);
        let two = explore_on(2, &start, &script, limits, &mut |_| true);
        assert_eq!(
            (
                one.states,
                one.expansions,
                one.deepest,
                one.counterexample.is_none()
            ),
            (two.states, two.expansions, two.deepest, true)
        );
        assert!(one.states > 100, "{one:?}");
        // Told to stop, the workers stop and the search says it was cut short.
        let cut = explore_on(2, &start, &script, limits, &mut |_| false);
        assert!(cut.interrupted && cut.states < one.states, "{cut:?}");
    }
}
