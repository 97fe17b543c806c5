//! `volplane check`: judges any CSI driver on its socket against the CSI
//! specification's rules (`volplane::testing::check`), with a progress bar,
//! a summary per rule, and a shrunk trace and replay file for a violation.

mod results;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use volplane::testing::check::{Check, Failure, Replay, Report};
use volplane_core::check::{Level, report};
use volplane_core::driver::{AccessMode, Capability};
use volplane_core::model::Quantity;

/// `volplane check`'s flags.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The driver's endpoint, as the kubelet writes it.
    #[arg(long, default_value = "unix:///csi/csi.sock")]
    pub endpoint: String,
    /// The kubelet directory: staging and target paths are made beneath it,
    /// as the kubelet makes them (it must be where the driver accepts them).
    #[arg(long, default_value = "/var/lib/kubelet")]
    pub kubelet_dir: PathBuf,
    /// The first run's seed; runs use seed, seed+1, …
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Runs: each starts from nothing and puts everything away.
    #[arg(long, default_value_t = 10)]
    pub runs: u32,
    /// Steps per run.
    #[arg(long, default_value_t = 200)]
    pub steps: u32,
    /// Calls in flight together, at most (1–4).
    #[arg(long, default_value_t = 1)]
    pub concurrency: u8,
    /// Runs made at once, each job against its own instance of the driver:
    /// `{i}` in --endpoint, --kubelet-dir and --restart is the job's number
    /// (0, 1, …). Mounts outside the kubelet directories and loop devices
    /// are not judged (the jobs' drivers share the machine).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: u32,
    /// A StorageClass parameter for every CreateVolume (KEY=VALUE; repeat).
    #[arg(long = "parameter", value_name = "KEY=VALUE")]
    pub parameters: Vec<String>,
    /// A mutable parameter ControllerModifyVolume sets, as a
    /// VolumeAttributesClass would (KEY=VALUE; repeat).
    #[arg(long = "mutable-parameter", value_name = "KEY=VALUE")]
    pub mutable_parameters: Vec<String>,
    /// A topology segment of another node (KEY=VALUE; repeat for each
    /// key), where the storage can make volumes: a create now and then
    /// requires its volume there (alone, or beside this node's segment),
    /// and a volume made where this node cannot reach is kept off it.
    /// Without it, such creates name a segment no node has, and
    /// RESOURCE_EXHAUSTED is due. Only for drivers with topology.
    #[arg(long = "other-segment", value_name = "KEY=VALUE")]
    pub other_segment: Vec<String>,
    /// Volumes are a filesystem (mount) or raw block.
    #[arg(long, value_enum, default_value_t = AccessKind::Mount)]
    pub access_type: AccessKind,
    /// The access mode volumes are created and used with.
    #[arg(long, value_enum, default_value_t = Mode::SingleNodeWriter)]
    pub access_mode: Mode,
    /// The size of the volumes (a Kubernetes quantity).
    #[arg(long, default_value = "16Mi")]
    pub size: String,
    /// Seconds a call may take before it counts as lost.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// Fail on SHOULD-rules too.
    #[arg(long)]
    pub strict: bool,
    /// Do not judge mounts outside the kubelet directory at all (without
    /// it, only mounts of the driver's own volumes and devices are
    /// judged there; what else the host mounts is listed, not judged).
    #[arg(long)]
    pub ignore_outside: bool,
    /// A directory holding the driver's storage, an entry per volume or
    /// snapshot (a host-path driver's volumes, say); repeat for several.
    /// After each run's teardown an entry that was not there before the
    /// run breaks nothing-left-on-storage, as a listing would: for drivers
    /// that cannot list (with --jobs, name `{i}` in it)
    #[arg(long, value_name = "DIR")]
    pub storage_dir: Vec<PathBuf>,
    /// Start the driver with this shell command (instead of connecting to
    /// one already serving), and kill it with SIGKILL now and then —
    /// between calls and while they are in flight — and start it again:
    /// what it acknowledged must survive.
    #[arg(long, value_name = "COMMAND")]
    pub restart: Option<String>,
    /// Send the steps of a replay file again (written by a failing check).
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Go on after a run breaks a rule: every run is made, and the first
    /// run of each distinct finding (the rule, the calls involved and the
    /// kinds of their answers) is shrunk and reported.
    #[arg(long)]
    pub keep_going: bool,
    /// With --keep-going, the most distinct findings shrunk and reported
    /// (the rest are counted).
    #[arg(long, default_value_t = 10)]
    pub max_findings: usize,
    /// Write the results as JSON (the tally and every finding) to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the results as a JUnit XML report to FILE: a test case per
    /// rule checked, the broken ones failing with their shrunk traces.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Secrets for the calls that carry them, in csi-sanity's secrets-file
    /// format (YAML: CreateVolumeSecret, DeleteVolumeSecret,
    /// NodeStageVolumeSecret… each a map of keys to values).
    #[arg(long, value_name = "FILE")]
    pub secrets: Option<PathBuf>,
    /// The driver needs the secrets file's CreateVolume credentials: now
    /// and then a create of a new name goes without them, and must fail
    /// and make nothing (a driver that takes its credentials from another
    /// call, or from its own configuration, makes it).
    #[arg(long, requires = "secrets")]
    pub secrets_required: bool,
    /// Where a failing check writes its replay file (with --keep-going,
    /// one per finding: FILE's name with the finding's number and rule
    /// before the extension).
    #[arg(long, value_name = "FILE")]
    pub replay_out: Option<PathBuf>,
}

/// How volumes are accessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AccessKind {
    /// A mounted filesystem.
    Mount,
    /// A raw block device.
    Block,
}

/// CSI access modes, as flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// SINGLE_NODE_WRITER (ReadWriteOnce).
    SingleNodeWriter,
    /// SINGLE_NODE_SINGLE_WRITER (ReadWriteOncePod).
    SingleNodeSingleWriter,
    /// SINGLE_NODE_MULTI_WRITER.
    SingleNodeMultiWriter,
    /// MULTI_NODE_MULTI_WRITER (ReadWriteMany).
    MultiNodeMultiWriter,
}

fn check_of(args: &CheckArgs) -> Result<Check, String> {
    let size = Quantity::parse(&args.size)
        .map_err(|e| format!("--size {:?}: {e}", args.size))?
        .bytes();
    if size == 0 {
        return Err("--size must be more than 0".to_string());
    }
    let mode = match args.access_mode {
        Mode::SingleNodeWriter => AccessMode::SingleNodeWriter,
        Mode::SingleNodeSingleWriter => AccessMode::SingleNodeSingleWriter,
        Mode::SingleNodeMultiWriter => AccessMode::SingleNodeMultiWriter,
        Mode::MultiNodeMultiWriter => AccessMode::MultiNodeMultiWriter,
    };
    // With jobs, each job makes its own (the directory names `{i}`).
    let kubelet_dir = if args
        .kubelet_dir
        .to_string_lossy()
        .contains(volplane::testing::check::JOB)
    {
        args.kubelet_dir.clone()
    } else {
        std::fs::create_dir_all(&args.kubelet_dir)
            .and_then(|()| args.kubelet_dir.canonicalize())
            .map_err(|e| format!("--kubelet-dir {}: {e}", args.kubelet_dir.display()))?
    };
    let mut check = Check::new(&args.endpoint, kubelet_dir)
        .seed(args.seed)
        .runs(args.runs)
        .concurrency(args.concurrency)
        .jobs(args.jobs);
    check.steps = args.steps;
    check.bytes = size;
    check.call_timeout = Duration::from_secs(args.timeout.max(1));
    check.watch_outside = !args.ignore_outside && args.jobs == 1;
    check.keep_going = args.keep_going;
    check.max_findings = args.max_findings.max(1);
    check.restart = args.restart.clone();
    check.storage_dirs = args.storage_dir.clone();
    check.secrets_required = args.secrets_required;
    if let Some(file) = &args.secrets {
        check.secrets = volplane::testing::secrets_file(file).map_err(|e| e.to_string())?;
    }
    if check.restart.is_some() {
        let log =
            std::env::temp_dir().join(format!("volplane-check-{}-driver.log", std::process::id()));
        check.driver_log = Some(log);
    }
    check.capability = match args.access_type {
        AccessKind::Mount => Capability::mount(mode),
        AccessKind::Block => Capability::block(mode),
    };
    for p in &args.parameters {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("--parameter {p:?}: give KEY=VALUE"))?;
        check = check.parameter(k, v);
    }
    for p in &args.other_segment {
        let (k, v) = p
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| format!("--other-segment {p:?}: give KEY=VALUE"))?;
        (check.other_segment.get_or_insert_with(Default::default))
            .insert(k.to_string(), v.to_string());
    }
    for p in &args.mutable_parameters {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| format!("--mutable-parameter {p:?}: give KEY=VALUE"))?;
        check.mutable.insert(k.to_string(), v.to_string());
    }
    Ok(check)
}

/// Runs `volplane check`; the exit code: 0 passed, 1 a rule broken, 2 could not check.
pub fn run(args: CheckArgs) -> u8 {
    let check = match check_of(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("volplane check: {e}");
            return 2;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("volplane check: cannot start a runtime: {e}");
            return 2;
        }
    };
    if let Some(file) = &args.replay {
        // A replay is sent to one driver: job 0's, with jobs.
        return runtime.block_on(replay(&check.job(0), file));
    }
    let start = Instant::now();
    let bar = ProgressBar::new(u64::from(args.runs));
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} runs {msg}").expect("a valid template"),
    );
    let result = runtime.block_on(check.run(|p| {
        bar.set_position(u64::from(p.runs));
        match p.shrinking {
            None => bar.set_message(format!("{} steps", p.steps)),
            Some(n) => bar.set_message(format!("{} steps; shrinking, replay {n}", p.steps)),
        }
    }));
    bar.finish_and_clear();
    match result {
        Ok(report) => print(&args, &check, &report, start.elapsed()),
        Err(e) => {
            eprintln!("volplane check: {e}");
            2
        }
    }
}

fn print(args: &CheckArgs, check: &Check, r: &Report, took: Duration) -> u8 {
    println!(
        "{} runs, {} steps against {} in {:.1} s, {:.0} steps/s (seed {}, concurrency {}{})",
        r.runs,
        r.steps,
        check.endpoint,
        took.as_secs_f64(),
        r.steps as f64 / took.as_secs_f64().max(1e-3),
        check.seed,
        check.concurrency,
        if check.jobs > 1 {
            format!(", {} jobs", check.jobs)
        } else {
            String::new()
        }
    );
    if check.jobs > 1 && !args.ignore_outside {
        println!(
            "(with {} jobs, mounts outside the kubelet directories and loop devices are not judged: run with --jobs 1 to judge them)",
            check.jobs
        );
    }
    println!();
    print!("{}", report::summary(&r.tally));
    let mut shown = std::collections::BTreeSet::new();
    for (seed, note) in &r.notes {
        let rule = note.split(' ').next().unwrap_or_default().to_string();
        if shown.insert(rule) {
            println!("SHOULD: {note} (seed {seed})");
        }
    }
    if !r.foreign.is_empty() {
        let seen: Vec<&str> = r.foreign.iter().map(String::as_str).collect();
        println!(
            "warning: the host changed mounts outside the kubelet directory during the check, none of them of the driver's volumes or devices (not judged): {}",
            seen.join(", ")
        );
    }
    if let Some(log) = &check.driver_log {
        println!("the driver's output: {}", log.display());
    }
    let mut replays = Vec::new();
    for (i, f) in r.failures.iter().enumerate() {
        println!();
        if r.failures.len() > 1 || f.runs > 1 {
            println!(
                "finding {} of {}: {} ({} of the runs)",
                i + 1,
                r.failures.len(),
                f.signature,
                f.runs
            );
        }
        print!("{}", f.trace);
        println!(
            "(seed {}; {} steps shrunk to {})",
            f.seed, f.steps.0, f.steps.1
        );
        let several = (r.failures.len() > 1).then_some(i + 1);
        replays.push(write_replay(args, check, f, several));
    }
    if !r.unshrunk.is_empty() {
        println!();
        println!(
            "{} more findings, not shrunk (--max-findings {}):",
            r.unshrunk.len(),
            check.max_findings
        );
        for (sig, runs) in &r.unshrunk {
            println!("  {sig} ({runs} of the runs)");
        }
    }
    write_results(
        args,
        &results::Results::new(check, r, args.strict, took, &replays),
    );
    if let Some(why) = &r.stopped {
        println!("the check stopped after {} runs: {why}", r.runs);
    }
    if r.driver_gone {
        println!("the driver no longer starts: the check stopped there (its trace is not shrunk)");
    }
    if !r.failures.is_empty() {
        if r.failed_runs > 1 {
            println!("{} of {} runs broke a MUST-rule", r.failed_runs, r.runs);
        }
        return 1;
    }
    let should = r.tally.broken(Level::Should).count();
    if args.strict && should > 0 {
        println!("{should} SHOULD-rules broken (--strict)");
        return 1;
    }
    println!("no MUST-rule broken");
    0
}

/// Writes `f`'s replay file; answers the command that replays it.
fn write_replay(
    args: &CheckArgs,
    check: &Check,
    f: &Failure,
    number: Option<usize>,
) -> Option<String> {
    let default = PathBuf::from(format!("volplane-check-{}.json", f.seed));
    let mut file = args.replay_out.clone().unwrap_or(default);
    if let Some(n) = number {
        let stem = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        file.set_file_name(format!("{stem}-{n}-{}.json", f.rule.name()));
    }
    let written = serde_json::to_string_pretty(&f.replay)
        .map_err(|e| e.to_string())
        .and_then(|json| std::fs::write(&file, json).map_err(|e| e.to_string()));
    match written {
        Ok(()) => {
            // The job that found it: its own driver instance.
            let check = check.job(f.job);
            let restart = check
                .restart
                .as_ref()
                .map_or(String::new(), |r| format!(" --restart {}", shell_quoted(r)));
            let command = format!(
                "volplane check --endpoint {} --kubelet-dir {}{restart} --replay {}",
                check.endpoint,
                check.kubelet_dir.display(),
                file.display()
            );
            println!("replay: {command}");
            Some(command)
        }
        Err(e) => {
            eprintln!("volplane check: writing {}: {e}", file.display());
            None
        }
    }
}

/// `text` as one shell word.
fn shell_quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// Writes the results files asked for (`--json`, `--junit`).
fn write_results(args: &CheckArgs, results: &results::Results) {
    let files = [
        (&args.json, results.json()),
        (&args.junit, results.junit(args.strict)),
    ];
    for (file, text) in files {
        let Some(file) = file else { continue };
        if let Err(e) = std::fs::write(file, text) {
            eprintln!("volplane check: writing {}: {e}", file.display());
        }
    }
}

async fn replay(check: &Check, file: &PathBuf) -> u8 {
    let replay: Replay = match std::fs::read_to_string(file)
        .map_err(|e| e.to_string())
        .and_then(|s| serde_json::from_str(&s).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("volplane check: --replay {}: {e}", file.display());
            return 2;
        }
    };
    match check.replay(&replay).await {
        Ok(outcome) if outcome.violation.is_some() => {
            print!("{}", report::trace(&outcome));
            1
        }
        Ok(outcome) => {
            println!(
                "{} steps sent again: no MUST-rule broken this time (the driver may not be deterministic)",
                outcome.trace.len()
            );
            0
        }
        Err(e) => {
            eprintln!("volplane check: {e}");
            2
        }
    }
}
