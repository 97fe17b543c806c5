//! Several runs at once, each job against its own instance of the driver
//! (`volplane check --jobs N`): job `i` gets the endpoint, the kubelet
//! directory, the restart command and the driver log with `{i}` replaced
//! by its number, and runs `i`, `i + N`, `i + 2N`… of the check's seeds.
//! Their reports are merged into one, findings by signature.

use std::collections::BTreeMap;
use std::path::PathBuf;

use tokio::task::JoinSet;

use super::{Check, Failure, Progress, Report};

/// The placeholder a job's number replaces.
pub const JOB: &str = "{i}";

/// Which of the check's runs a job makes: `index`, `index + count`, …
#[derive(Debug, Clone, Copy)]
pub(super) struct Shard {
    pub index: u32,
    pub count: u32,
}

impl Shard {
    /// The whole check in one job.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// The run numbers of this shard, of `runs`.
    pub fn runs(self, runs: u32) -> impl Iterator<Item = u32> {
        (self.index..runs).step_by(self.count.max(1) as usize)
    }
}

impl Check {
    /// `n` jobs at once, each against its own driver instance: the
    /// endpoint, the kubelet directory and the restart command must each
    /// name `{i}`, which a job's number (0, 1, …) replaces.
    pub fn jobs(mut self, n: u32) -> Check {
        self.jobs = n.max(1);
        self
    }

    /// The check as job `i` makes it: `{i}` replaced by `i` in the
    /// endpoint, the kubelet directory, the restart command and the driver
    /// log (nothing is checked or made).
    pub fn job(&self, i: u32) -> Check {
        let n = i.to_string();
        let mut c = self.clone();
        c.endpoint = c.endpoint.replace(JOB, &n);
        c.kubelet_dir = PathBuf::from(c.kubelet_dir.to_string_lossy().replace(JOB, &n));
        c.restart = c.restart.map(|r| r.replace(JOB, &n));
        c.storage_dirs = (c.storage_dirs.iter())
            .map(|d| PathBuf::from(d.to_string_lossy().replace(JOB, &n)))
            .collect();
        c.driver_log = c.driver_log.map(|log| {
            let text = log.to_string_lossy().into_owned();
            if text.contains(JOB) {
                PathBuf::from(text.replace(JOB, &n))
            } else {
                PathBuf::from(format!("{text}.{n}"))
            }
        });
        c.jobs = 1;
        c
    }

    /// Job `i`, ready to run: its kubelet directory made. Refuses a check
    /// whose jobs would share a driver or a kubelet directory.
    fn job_ready(&self, i: u32) -> Result<Check, String> {
        let templated = [
            ("endpoint", Some(self.endpoint.clone())),
            (
                "kubelet directory",
                Some(self.kubelet_dir.to_string_lossy().into_owned()),
            ),
            ("restart command", self.restart.clone()),
        ];
        let storage = (self.storage_dirs.iter())
            .map(|d| ("storage directory", Some(d.to_string_lossy().into_owned())));
        for (what, text) in templated.into_iter().chain(storage) {
            if let Some(text) = text
                && self.jobs > 1
                && !text.contains(JOB)
            {
                return Err(format!(
                    "{} jobs need {JOB} in the {what} ({text:?}): each job checks its own driver instance, \
                     with its own socket, kubelet directory and state",
                    self.jobs
                ));
            }
        }
        let mut c = self.job(i);
        std::fs::create_dir_all(&c.kubelet_dir)
            .and_then(|()| c.kubelet_dir.canonicalize())
            .map(|dir| c.kubelet_dir = dir)
            .map_err(|e| {
                format!(
                    "job {i}'s kubelet directory {}: {e}",
                    c.kubelet_dir.display()
                )
            })?;
        // Each job's driver mounts outside the others' kubelet directories
        // and makes loop devices: what lies outside cannot be judged.
        c.watch_outside &= self.jobs == 1;
        Ok(c)
    }

    /// True when the endpoint, the kubelet directory or the restart
    /// command names `{i}` (one job is then job 0).
    pub(super) fn templated(&self) -> bool {
        self.endpoint.contains(JOB)
            || self.kubelet_dir.to_string_lossy().contains(JOB)
            || self.restart.as_ref().is_some_and(|r| r.contains(JOB))
    }

    /// Runs the jobs at once, each on a task of its own; `progress` hears
    /// the runs and steps of all of them.
    pub(super) async fn run_jobs(
        &self,
        mut progress: impl FnMut(Progress),
    ) -> Result<Report, String> {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Progress)>();
        let mut tasks = JoinSet::new();
        for i in 0..self.jobs {
            let job = self.job_ready(i)?;
            let tx = tx.clone();
            let shard = Shard {
                index: i,
                count: self.jobs,
            };
            tasks.spawn(async move {
                let report = job
                    .runs_all(shard, |p| {
                        let _ = tx.send((i as usize, p));
                    })
                    .await;
                (i, report)
            });
        }
        drop(tx);
        let mut each: Vec<Option<Progress>> = vec![None; self.jobs as usize];
        let mut reports = BTreeMap::new();
        loop {
            tokio::select! {
                Some((i, p)) = rx.recv() => {
                    each[i] = Some(p);
                    progress(total(&each, self.runs));
                }
                done = tasks.join_next() => match done {
                    None => break,
                    Some(Ok((i, Ok(report)))) => {
                        reports.insert(i, report);
                    }
                    Some(Ok((i, Err(e)))) => return Err(format!("job {i}: {e}")),
                    Some(Err(e)) => return Err(format!("a job's task failed: {e}")),
                },
            }
        }
        Ok(merge(reports, self.max_findings))
    }
}

/// Where all the jobs have got to together.
fn total(each: &[Option<Progress>], of: u32) -> Progress {
    let seen = each.iter().flatten();
    Progress {
        runs: seen.clone().map(|p| p.runs).sum(),
        of,
        steps: seen.clone().map(|p| p.steps).sum(),
        shrinking: seen.filter_map(|p| p.shrinking).max(),
    }
}

/// The jobs' reports as one: counts added, findings of one signature one
/// finding (the run that found it first, by seed), at most `max_findings`
/// shown and the rest counted.
pub(super) fn merge(reports: BTreeMap<u32, Report>, max_findings: usize) -> Report {
    let mut all = Report::default();
    let mut failures: Vec<Failure> = Vec::new();
    for (job, r) in reports {
        all.runs += r.runs;
        all.steps += r.steps;
        all.tally.merge(&r.tally);
        all.notes.extend(r.notes);
        all.take_foreign(&r.foreign);
        all.failed_runs += r.failed_runs;
        all.driver_gone |= r.driver_gone;
        if all.stopped.is_none() {
            all.stopped = r.stopped.map(|why| format!("job {job}: {why}"));
        }
        for (sig, n) in r.unshrunk {
            *all.unshrunk.entry(sig).or_default() += n;
        }
        for f in r.failures {
            let same = |g: &&mut Failure| g.signature == f.signature || g.found_as == f.found_as;
            match failures.iter_mut().find(same) {
                Some(g) if f.seed < g.seed => {
                    let runs = g.runs + f.runs;
                    *g = f;
                    g.runs = runs;
                }
                Some(g) => g.runs += f.runs,
                None => failures.push(f),
            }
        }
    }
    failures.sort_by_key(|f| f.seed);
    for f in failures.split_off(max_findings.max(1).min(failures.len())) {
        *all.unshrunk.entry(f.signature).or_default() += f.runs;
    }
    // A finding one job counted unshrunk and another shrunk is shown.
    for f in &mut failures {
        let shown = all.unshrunk.remove(&f.signature).unwrap_or(0)
            + all.unshrunk.remove(&f.found_as).unwrap_or(0);
        f.runs += shown;
    }
    all.notes.sort_by_key(|(seed, _)| *seed);
    all.failures = failures;
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::check::{Replay, Rule, Signature};
    use volplane_core::check::Bounds;
    use volplane_core::check::CallSecrets;

    fn finding(rule: Rule, call: &str, seed: u64, job: u32) -> Failure {
        let signature = Signature {
            rule,
            calls: vec![(call.to_string(), "OK".to_string())],
        };
        Failure {
            rule,
            signature: signature.clone(),
            found_as: signature,
            runs: 1,
            job,
            seed,
            steps: (40, 3),
            trace: String::new(),
            replay: Replay {
                names: Check::new("unix:///csi.sock", "/k").names(String::new()),
                seed,
                bounds: Bounds::default(),
                program: Default::default(),
            },
        }
    }

    fn report(runs: u32, failures: Vec<Failure>) -> Report {
        let mut tally = volplane_core::check::Tally::default();
        tally.checked(Rule::Linearizable);
        Report {
            runs,
            steps: u64::from(runs) * 10,
            tally,
            failed_runs: failures.len() as u32,
            failures,
            ..Report::default()
        }
    }

    #[test]
    fn the_jobs_reports_are_one_with_findings_by_signature() {
        let reports = BTreeMap::from([
            (
                0,
                report(
                    2,
                    vec![
                        finding(Rule::Linearizable, "CreateVolume", 3, 0),
                        finding(Rule::ListComplete, "ListVolumes", 5, 0),
                    ],
                ),
            ),
            (
                1,
                report(2, vec![finding(Rule::Linearizable, "CreateVolume", 2, 1)]),
            ),
        ]);
        let all = merge(reports, 10);
        assert_eq!((all.runs, all.steps, all.failed_runs), (4, 40, 3));
        assert_eq!(all.tally.counts[&Rule::Linearizable], (2, 0));
        let shown: Vec<(Rule, u64, u32, u32)> = all
            .failures
            .iter()
            .map(|f| (f.rule, f.seed, f.job, f.runs))
            .collect();
        // One finding seen by both jobs: the earlier seed's, both runs.
        assert_eq!(
            shown,
            [(Rule::Linearizable, 2, 1, 2), (Rule::ListComplete, 5, 0, 1)]
        );
        // Beyond the most shown, a finding is counted, not shown.
        let reports = BTreeMap::from([(
            0,
            report(
                2,
                vec![
                    finding(Rule::Linearizable, "CreateVolume", 3, 0),
                    finding(Rule::ListComplete, "ListVolumes", 5, 0),
                ],
            ),
        )]);
        let all = merge(reports, 1);
        assert_eq!(all.failures.len(), 1);
        assert_eq!(all.unshrunk.values().sum::<u32>(), 1);
    }

    #[test]
    fn jobs_sharing_a_driver_are_refused_before_anything_runs() {
        let c = Check::new("unix:///tmp/one/csi.sock", "/tmp/k{i}").jobs(2);
        let e = c.job_ready(0).unwrap_err();
        assert!(e.contains("{i} in the endpoint"), "{e}");
        let mut c = Check::new("unix:///tmp/j{i}/csi.sock", "/tmp/k{i}").jobs(2);
        c.restart = Some("driver --endpoint unix:///tmp/one/csi.sock".into());
        let e = c.job_ready(1).unwrap_err();
        assert!(e.contains("{i} in the restart command"), "{e}");
        let mut c = Check::new("unix:///tmp/j{i}/csi.sock", "/tmp/k{i}").jobs(2);
        c.storage_dirs = vec!["/srv/volumes".into()];
        let e = c.job_ready(1).unwrap_err();
        assert!(e.contains("{i} in the storage directory"), "{e}");
        // A storage directory that cannot be read is refused, not taken
        // to hold nothing.
        let mut c = Check::new("unix:///tmp/j/csi.sock", "/tmp/k");
        c.storage_dirs = vec!["/nonexistent/volplane-volumes".into()];
        let e = c.storage_readable().unwrap_err();
        assert!(
            e.contains("/nonexistent/volplane-volumes: cannot read it"),
            "{e}"
        );
        c.storage_dirs = vec![std::env::temp_dir()];
        assert!(c.ready().is_ok());
        // Secrets declared required, and none given to CreateVolume.
        c.secrets_required = true;
        let e = c.ready().unwrap_err();
        assert!(e.contains("gives CreateVolume no secrets"), "{e}");
        let password = [("password".to_string(), "p".to_string())].into();
        c.secrets = CallSecrets::everywhere(&password);
        assert!(c.ready().is_ok());
        // Job 1, made: its own names everywhere.
        let dir = tempfile::tempdir().unwrap();
        let mut c = Check::new("unix:///run/j{i}/csi.sock", dir.path().join("k{i}")).jobs(2);
        c.restart = Some("driver --endpoint unix:///run/j{i}/csi.sock".into());
        c.storage_dirs = vec!["/srv/j{i}/volumes".into()];
        let j = c.job_ready(1).unwrap();
        assert_eq!(j.storage_dirs, [PathBuf::from("/srv/j1/volumes")]);
        assert_eq!(j.endpoint, "unix:///run/j1/csi.sock");
        assert_eq!(
            j.restart.as_deref(),
            Some("driver --endpoint unix:///run/j1/csi.sock")
        );
        assert!(j.kubelet_dir.ends_with("k1") && j.kubelet_dir.is_dir());
        assert!(!j.watch_outside);
        assert_eq!(
            Shard { index: 1, count: 2 }.runs(5).collect::<Vec<_>>(),
            [1, 3]
        );
    }
}
