//! `volplane sim --exhaustive`: the small configuration explored
//! breadth-first, on one thread or several, showing its progress.

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use volplane_core::plant::Planted;
use volplane_core::sim::explore::{ExploreLimits, Explored, Move, Search, explore_reporting};
use volplane_core::sim::workload::{Action, small_configuration};

use super::SimArgs;

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
    Search::new(start, script, limits).run(|search, before| {
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
                if !progress(&search.so_far(before, done.load(Relaxed))) {
                    stop.store(true, Relaxed);
                }
            }
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect::<Vec<_>>()
        });
        if stop.load(Relaxed) {
            Err(expansions.len())
        } else {
            Ok(expansions)
        }
    })
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

pub(super) fn exhaustive(args: &SimArgs, plant: Planted) -> u8 {
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
            "interrupted: the search covered {} distinct states to depth {} of {}; {} were still waiting to be expanded; no invariant failed in the levels completed (the level under way was not judged)",
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
