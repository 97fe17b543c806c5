//! `volplane check` as a library: the checker machine
//! ([`volplane_core::check`]) driven against a real driver over its
//! socket, the node's mounts read from `/proc/self/mountinfo`. A driver's
//! own `cargo test` can call [`Check::run`]; the `volplane check` command
//! is this, with a progress line and the report printed.
//!
//! ```no_run
//! # async fn t() -> Result<(), volplane::testing::Error> {
//! use volplane::testing::check::Check;
//! let report = Check::new("unix:///tmp/driver/csi.sock", "/tmp/driver/kubelet")
//!     .runs(20)
//!     .run(|_| {})
//!     .await?;
//! assert!(report.failures.is_empty(), "{}", report.failures[0].trace);
//! # Ok(()) }
//! ```

mod carrier;
mod in_process;
mod jobs;
mod restarter;

use carrier::{Caller, Carrier};
pub use in_process::InProcess;
pub use jobs::JOB;
use jobs::Shard;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use restarter::Restarter;
pub use volplane_core::check::{Level, Rule, Tally};

use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use volplane_core::check::machine::{Checker, Config, Outcome, Program};
pub use volplane_core::check::report::Signature;
use volplane_core::check::{Bounds, CallSecrets, Names, Step, report, shrink};
use volplane_core::driver::{AccessMode, Attributes, Capability};
use volplane_core::machine;
use volplane_proto::client::CsiClient;

use super::Error;

type Client = CsiClient<tonic::transport::Channel>;

/// What to check, and how hard.
#[derive(Debug, Clone)]
pub struct Check {
    /// The driver's endpoint (`unix:///…/csi.sock`).
    pub endpoint: String,
    /// The kubelet directory the staging and target paths are made under.
    pub kubelet_dir: PathBuf,
    /// The first run's seed; run `r` uses `seed + r`.
    pub seed: u64,
    /// Runs (each starts from nothing and puts everything away).
    pub runs: u32,
    /// Steps (or groups of steps in flight together) per run.
    pub steps: u32,
    /// Steps in flight together, at most.
    pub concurrency: u8,
    /// StorageClass parameters every CreateVolume carries.
    pub parameters: Attributes,
    /// Mutable parameters ControllerModifyVolume sets (a
    /// VolumeAttributesClass's); none: only the modify a driver must refuse.
    pub mutable: Attributes,
    /// A topology segment of another node, where the storage can make
    /// volumes (`--other-segment`): see [`Names::elsewhere`].
    pub other_segment: Option<Attributes>,
    /// The capability volumes are created and used with.
    pub capability: Capability,
    /// The size of the run's volumes.
    pub bytes: u64,
    /// Volumes, targets, snapshots per run.
    pub bounds: Bounds,
    /// How long a call may take before it counts as lost.
    pub call_timeout: Duration,
    /// Judge the mounts outside the kubelet directory.
    pub watch_outside: bool,
    /// Most replays spent shrinking a failing run.
    pub shrink_runs: u32,
    /// Go on after a run breaks a rule: every run is made, and the first
    /// run of each distinct finding ([`Signature`]) is shrunk.
    pub keep_going: bool,
    /// Distinct findings shrunk and reported, at most (the rest are
    /// counted in [`Report::unshrunk`]).
    pub max_findings: usize,
    /// Start the driver with this shell command, and kill it (SIGKILL) and
    /// start it again now and then, between calls and while they are in
    /// flight.
    pub restart: Option<String>,
    /// Where the output of a driver the check starts goes (appended);
    /// `None`: to the check's own.
    pub driver_log: Option<PathBuf>,
    /// The secrets each call carries (csi-sanity's secrets-file keys:
    /// [`secrets_file`](crate::testing::secrets_file)). Never written to a
    /// replay file.
    pub secrets: CallSecrets,
    /// Jobs at once, each against its own driver instance ([`Check::jobs`]).
    pub jobs: u32,
    /// Directories holding the driver's storage, an entry per volume or
    /// snapshot (a host-path driver's): an entry left after the teardown
    /// that was not there before the run breaks `nothing-left-on-storage`,
    /// as a listing would — for drivers that cannot list. `{i}` is the job.
    pub storage_dirs: Vec<PathBuf>,
    /// The driver needs the credentials [`Check::secrets`] gives
    /// CreateVolume: now and then a create of a new name goes without
    /// them, and must fail and make nothing (`credentials-from-the-call`).
    pub secrets_required: bool,
}

impl Check {
    /// A check of the driver at `endpoint`, with node paths under `kubelet_dir`:
    /// 10 runs of 200 steps, one at a time, 16 MiB mount volumes
    /// (SINGLE_NODE_WRITER), no parameters.
    pub fn new(endpoint: &str, kubelet_dir: impl Into<PathBuf>) -> Check {
        Check {
            endpoint: endpoint.to_string(),
            kubelet_dir: kubelet_dir.into(),
            seed: 1,
            runs: 10,
            steps: 200,
            concurrency: 1,
            parameters: Attributes::new(),
            mutable: Attributes::new(),
            other_segment: None,
            capability: Capability::mount(AccessMode::SingleNodeWriter),
            bytes: 16 << 20,
            bounds: Bounds::default(),
            call_timeout: Duration::from_secs(120),
            watch_outside: true,
            shrink_runs: 300,
            keep_going: false,
            max_findings: 10,
            restart: None,
            driver_log: None,
            secrets: CallSecrets::default(),
            jobs: 1,
            storage_dirs: Vec::new(),
            secrets_required: false,
        }
    }

    /// Runs `n` runs.
    pub fn runs(mut self, n: u32) -> Check {
        self.runs = n;
        self
    }

    /// Seeds the first run.
    pub fn seed(mut self, seed: u64) -> Check {
        self.seed = seed;
        self
    }

    /// Up to `k` steps in flight together.
    pub fn concurrency(mut self, k: u8) -> Check {
        self.concurrency = k.clamp(1, 4);
        self
    }

    /// The secrets each call carries.
    pub fn secrets(mut self, secrets: CallSecrets) -> Check {
        self.secrets = secrets;
        self
    }

    /// Adds a StorageClass parameter.
    pub fn parameter(mut self, key: &str, value: &str) -> Check {
        self.parameters.insert(key.to_string(), value.to_string());
        self
    }
}

/// What a check found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Runs completed.
    pub runs: u32,
    /// Steps sent, in all.
    pub steps: u64,
    /// Rules checked and broken, over every run.
    pub tally: Tally,
    /// SHOULD-rules broken: the run's seed, and what.
    pub notes: Vec<(u64, String)>,
    /// The runs that broke a MUST-rule, shrunk: the first (with
    /// `keep_going`, the first of each distinct finding, up to
    /// `max_findings`).
    pub failures: Vec<Failure>,
    /// Findings met after `max_findings` were shrunk: each with the runs
    /// that showed it, not shrunk.
    pub unshrunk: std::collections::BTreeMap<Signature, u32>,
    /// Runs that broke a MUST-rule, in all.
    pub failed_runs: u32,
    /// The driver did not serve again after a restart: the check stopped there.
    pub driver_gone: bool,
    /// Mounts outside the kubelet directory the host changed during the
    /// check, none of them the driver's (the first few): not judged.
    pub foreign: std::collections::BTreeSet<String>,
    /// Why the check stopped before its last run, if it did (the driver
    /// stopped answering).
    pub stopped: Option<String>,
}

impl Report {
    /// Keeps `changes` the host made outside (up to the most kept).
    pub(super) fn take_foreign<'a>(&mut self, changes: impl IntoIterator<Item = &'a String>) {
        for c in changes {
            if self.foreign.len() < volplane_core::check::machine::MOST_FOREIGN {
                self.foreign.insert(c.clone());
            }
        }
    }

    /// True when no MUST-rule broke (and, when `strict`, no SHOULD-rule).
    pub fn passed(&self, strict: bool) -> bool {
        self.failures.is_empty() && (!strict || self.tally.broken(Level::Should).next().is_none())
    }
}

/// A run that broke a rule, made small.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The rule broken.
    pub rule: volplane_core::check::Rule,
    /// What makes it this finding, after shrinking.
    pub signature: Signature,
    /// What the run that found it showed before shrinking.
    pub found_as: Signature,
    /// The runs that showed it.
    pub runs: u32,
    /// The job that found it ([`Check::job`]; 0 without jobs).
    pub job: u32,
    /// The run's seed.
    pub seed: u64,
    /// Steps in the run up to the violation, and after shrinking.
    pub steps: (usize, usize),
    /// The shrunk run's trace, for a person.
    pub trace: String,
    /// What `--replay` sends again.
    pub replay: Replay,
}

/// A program to send again: `volplane check --replay FILE`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replay {
    /// The run's names (the prefix is chosen anew on replay).
    pub names: Names,
    /// Its seed.
    pub seed: u64,
    /// The volumes, targets and snapshots.
    pub bounds: Bounds,
    /// The steps.
    pub program: Program,
}

/// Where a check has got to.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    /// Runs done.
    pub runs: u32,
    /// Of.
    pub of: u32,
    /// Steps sent so far.
    pub steps: u64,
    /// Shrinking a failure: replays so far.
    pub shrinking: Option<u32>,
}

impl Check {
    fn names(&self, prefix: String) -> Names {
        Names {
            prefix,
            kubelet_dir: self.kubelet_dir.display().to_string(),
            driver: String::new(),
            parameters: self.parameters.clone(),
            capability: self.capability.clone(),
            bytes: self.bytes,
            mutable: self.mutable.clone(),
            elsewhere: self.other_segment.clone(),
        }
    }

    fn config(&self, names: Names, seed: u64, program: Option<Program>) -> Config {
        let mut bounds = self.bounds;
        if self.restart.is_some() && bounds.restarts_per_mille == 0 {
            bounds.restarts_per_mille = 25;
        }
        if self.restart.is_none() {
            bounds.restarts_per_mille = 0;
        }
        bounds.mutable_parameters = !self.mutable.is_empty();
        bounds.secrets_required = self.secrets_required;
        Config {
            names,
            seed,
            steps: self.steps,
            concurrency: self.concurrency,
            bounds,
            program,
            watch_outside: self.watch_outside,
            storage_dirs: self
                .storage_dirs
                .iter()
                .map(|d| d.to_string_lossy().into_owned())
                .collect(),
            choices: None,
            secrets: self.secrets.clone(),
        }
    }

    /// Runs the check; `progress` hears after every run and every replay
    /// while shrinking.
    pub async fn run(&self, progress: impl FnMut(Progress)) -> Result<Report, Error> {
        let report = if self.jobs > 1 || self.templated() {
            self.run_jobs(progress).await
        } else {
            self.runs_all(Shard::ALL, progress).await
        };
        report.map_err(Error::Setup)
    }

    async fn runs_all(
        &self,
        shard: Shard,
        mut progress: impl FnMut(Progress),
    ) -> Result<Report, String> {
        self.ready()?;
        let (client, restarter) = self.driver().await?;
        let client = Driver {
            client: Caller::Socket(client),
            restarter,
        };
        let nonce = format!("{}{}", nonce(), shard.index);
        let mut report = Report::default();
        let of = shard.runs(self.runs).count() as u32;
        for r in shard.runs(self.runs) {
            let seed = self.seed.wrapping_add(u64::from(r));
            let names = self.names(format!("check-{nonce}-{r}"));
            let outcome = match self.once(&client, self.config(names, seed, None)).await {
                Ok(o) => o,
                // The driver answered the runs before: it stopped answering.
                Err(e) if report.runs > 0 => {
                    report.stopped = Some(e);
                    break;
                }
                Err(e) => return Err(e),
            };
            report.runs += 1;
            report.steps += outcome.trace.len() as u64;
            report.tally.merge(&outcome.tally);
            report.take_foreign(&outcome.foreign);
            for (g, n) in &outcome.notes {
                let what = format!("{} at step {g}: {}", n.rule.name(), n.detail);
                report.notes.push((seed, what));
            }
            progress(Progress {
                runs: report.runs,
                of,
                steps: report.steps,
                shrinking: None,
            });
            if outcome.violation.is_some() {
                report.failed_runs += 1;
                if outcome.driver_gone {
                    report.failures.push(self.unshrunk(seed, &outcome));
                    report.driver_gone = true;
                    break;
                }
                let gone = self
                    .finding(&client, &nonce, seed, outcome, &mut progress, &mut report)
                    .await?;
                // The driver died for good while a replay restarted it.
                if let Some(gone) = gone {
                    report.failures.push(self.unshrunk(seed, &gone));
                    report.driver_gone = true;
                    break;
                }
                if !self.keep_going {
                    break;
                }
            }
        }
        for f in &mut report.failures {
            f.job = shard.index;
        }
        Ok(report)
    }

    /// Counts a failing run under the finding it shows, or shrinks it into
    /// a new one (while fewer than `max_findings` are shown). Answers the
    /// outcome of a replay the driver did not survive, if one did not.
    async fn finding(
        &self,
        client: &Driver,
        nonce: &str,
        seed: u64,
        outcome: Outcome,
        progress: &mut impl FnMut(Progress),
        report: &mut Report,
    ) -> Result<Option<Outcome>, String> {
        let Some(sig) = Signature::of(&outcome) else {
            return Ok(None);
        };
        let known = |f: &&mut Failure| f.found_as == sig || f.signature == sig;
        if let Some(f) = report.failures.iter_mut().find(known) {
            f.runs += 1;
            return Ok(None);
        }
        if report.failures.len() >= self.max_findings {
            *report.unshrunk.entry(sig).or_default() += 1;
            return Ok(None);
        }
        let cut = outcome.up_to_violation();
        let (failure, gone) = self
            .shrink(client, nonce, seed, cut, outcome, progress, report)
            .await?;
        // Shrunk, it may turn out to be a finding already shown.
        match report
            .failures
            .iter_mut()
            .find(|f| f.signature == failure.signature)
        {
            Some(f) => f.runs += 1,
            None => report.failures.push(failure),
        }
        Ok(gone)
    }

    /// Connects to the driver, or (with `restart`) starts it.
    async fn driver(&self) -> Result<(Client, Option<Arc<tokio::sync::Mutex<Restarter>>>), String> {
        match &self.restart {
            None => Ok((
                connect(&self.endpoint, Duration::from_secs(20)).await?,
                None,
            )),
            Some(command) => {
                let (r, client) =
                    Restarter::start(command, &self.endpoint, self.driver_log.as_deref())
                        .await
                        .map_err(|e| e.to_string())?;
                Ok((client, Some(Arc::new(tokio::sync::Mutex::new(r)))))
            }
        }
    }

    /// One run, from start to everything put away.
    async fn once(&self, driver: &Driver, config: Config) -> Result<Outcome, String> {
        let mut m = Checker::new(config);
        let mut carrier = Carrier {
            client: driver.client.clone(),
            restarter: driver.restarter.clone(),
            tasks: JoinSet::new(),
            kubelet_dir: self.kubelet_dir.clone(),
            timeout: self.call_timeout,
        };
        machine::drain(&mut m, 0, &mut carrier);
        loop {
            if let Some(outcome) = m.outcome() {
                if let Some(error) = &outcome.error {
                    return Err(error.clone());
                }
                return Ok(outcome.clone());
            }
            let Some(done) = carrier.tasks.join_next().await else {
                return Err("check: the checker waits, but nothing is in flight".to_string());
            };
            let (input, reconnected) =
                done.map_err(|e| format!("check: a call's task failed: {e}"))?;
            if let Some(client) = reconnected {
                carrier.client = Caller::Socket(client);
            }
            machine::feed(&mut m, 0, input, &mut carrier);
        }
    }

    /// Replays smaller programs while they break the same rule.
    #[allow(clippy::too_many_arguments)]
    async fn shrink(
        &self,
        client: &Driver,
        nonce: &str,
        seed: u64,
        program: Program,
        first: Outcome,
        progress: &mut impl FnMut(Progress),
        report: &Report,
    ) -> Result<(Failure, Option<Outcome>), String> {
        let found_as = Signature::of(&first).expect("a failing run broke a rule");
        let original = shrink::steps(&program);
        let (mut best, mut best_outcome) = (program, first);
        let mut tries = 0;
        let mut gone = None;
        'outer: loop {
            for candidate in shrink::candidates(&best) {
                // Concurrent calls race, and a kill lands inside a call or
                // after it by a fraction of a millisecond: a candidate that
                // keeps the race or the kill may still not meet it on one
                // run, so it is run up to three times before it is let go.
                // Sequential runs without kills are deterministic: once is
                // enough.
                let kills = candidate.iter().flatten().any(|s| *s == Step::Restart);
                let attempts = if self.concurrency > 1 || kills { 3 } else { 1 };
                for _ in 0..attempts {
                    if tries >= self.shrink_runs {
                        break 'outer;
                    }
                    tries += 1;
                    progress(Progress {
                        runs: report.runs,
                        of: self.runs,
                        steps: report.steps,
                        shrinking: Some(tries),
                    });
                    let names = self.names(format!("check-{nonce}-shrink{tries}"));
                    let outcome = self
                        .once(client, self.config(names, seed, Some(candidate.clone())))
                        .await;
                    // A driver that no longer answers cannot shrink anything more.
                    let outcome = match outcome {
                        Ok(o) if !o.driver_gone => o,
                        Ok(o) => {
                            gone = Some(o);
                            break 'outer;
                        }
                        Err(_) => break 'outer,
                    };
                    // The same finding only: a smaller run that breaks the
                    // rule through other calls is another bug.
                    if Signature::of(&outcome).is_some_and(|s| s.within(&found_as)) {
                        let cut = outcome.up_to_violation();
                        // Smaller only: a violation met later (in the teardown) is no gain.
                        if shrink::steps(&cut) < shrink::steps(&best) {
                            best = cut;
                            best_outcome = outcome;
                            continue 'outer;
                        }
                    }
                }
            }
            break;
        }
        let names = self.names(String::new());
        let failure = Failure {
            rule: found_as.rule,
            signature: Signature::of(&best_outcome).unwrap_or_else(|| found_as.clone()),
            found_as,
            runs: 1,
            job: 0,
            seed,
            steps: (original, shrink::steps(&best)),
            trace: report::trace(&best_outcome),
            replay: Replay {
                names,
                seed,
                bounds: self.bounds,
                program: best,
            },
        };
        Ok((failure, gone))
    }

    /// A run the driver did not survive, as it went: nothing to replay against.
    fn unshrunk(&self, seed: u64, outcome: &Outcome) -> Failure {
        let program = outcome.program.clone();
        let n = shrink::steps(&program);
        let signature = Signature::of(outcome).unwrap_or_else(|| Signature {
            rule: volplane_core::check::Rule::SurvivesRestart,
            calls: Vec::new(),
        });
        Failure {
            signature: signature.clone(),
            found_as: signature,
            runs: 1,
            job: 0,
            rule: outcome
                .violation
                .as_ref()
                .map_or(volplane_core::check::Rule::SurvivesRestart, |v| {
                    v.breach.rule
                }),
            seed,
            steps: (n, n),
            trace: report::trace(outcome),
            replay: Replay {
                names: self.names(String::new()),
                seed,
                bounds: self.bounds,
                program,
            },
        }
    }

    /// Sends `replay`'s steps again, judged anew.
    pub async fn replay(&self, replay: &Replay) -> Result<Outcome, Error> {
        self.ready().map_err(Error::Setup)?;
        let (client, restarter) = self.driver().await.map_err(Error::Setup)?;
        let client = Driver {
            client: Caller::Socket(client),
            restarter,
        };
        let mut names = replay.names.clone();
        names.prefix = format!("check-{}-replay", nonce());
        names.kubelet_dir = self.kubelet_dir.display().to_string();
        let mut config = self.config(names, replay.seed, Some(replay.program.clone()));
        config.bounds = replay.bounds;
        self.once(&client, config).await.map_err(Error::Setup)
    }
}

impl Check {
    /// Refuses what would make every run pass unjudged: a storage
    /// directory that cannot be read (a misspelt one would hold nothing),
    /// or secrets declared required that the secrets file does not give.
    fn ready(&self) -> Result<(), String> {
        if self.secrets_required && self.secrets.get("CreateVolumeSecret").0.is_empty() {
            return Err(
                "--secrets-required: the secrets file gives CreateVolume no secrets; name a file \
                 with a CreateVolumeSecret section (csi-sanity's format), or drop the flag"
                    .to_string(),
            );
        }
        self.storage_readable()
    }

    /// Refuses a storage directory that cannot be read: judged through it,
    /// a misspelt one would hold nothing and every run would pass.
    fn storage_readable(&self) -> Result<(), String> {
        for dir in &self.storage_dirs {
            if let Err(e) = std::fs::read_dir(dir) {
                return Err(format!(
                    "storage directory {}: cannot read it ({e}); name the directory where the \
                     driver keeps an entry per volume or snapshot",
                    dir.display()
                ));
            }
        }
        Ok(())
    }
}

/// A short tag that keeps one check's names apart from another's.
fn nonce() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros());
    format!(
        "{:x}",
        (t as u64 ^ u64::from(std::process::id())) & 0xff_ffff
    )
}

/// The driver: how to call it, and the process when the check owns it.
struct Driver {
    client: Caller,
    restarter: Option<Arc<tokio::sync::Mutex<Restarter>>>,
}

/// Connects to `endpoint`, trying for up to `wait` (a driver still starting).
async fn connect(endpoint: &str, wait: Duration) -> Result<Client, String> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match volplane_tokio::connect(endpoint).await {
            Ok(ch) => return Ok(CsiClient::new(ch, None)),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("cannot connect to {endpoint}: {e}"));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}
