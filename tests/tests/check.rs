//! `volplane check` against real drivers over their sockets, with real
//! mounts: `volplane serve` on both runtimes breaks no rule (with
//! restarts, several calls in flight, block and directory volumes), and
//! each mistake planted in the driver (`VOLPLANE_PLANT`) is found and
//! shrunk to a handful of calls. With VOLPLANE_TEST_CSI_SANITY, csi-sanity
//! runs against the same planted drivers, for comparison.
//!
//! The checks run one at a time: each watches the mounts outside its
//! kubelet directory, which another check's driver would change.

mod common;

use std::path::Path;
use std::process::Command;

use common::Runtime;
use volplane::testing::check::{Check, Report};
use volplane_core::check::{Level, report};
use volplane_core::driver::{AccessMode, Capability};
use volplane_core::plant::Plant;

/// One check at a time (see the module documentation).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The shell command that starts `volplane serve` in `root`.
fn serve(root: &Path, runtime: Runtime, plant: Option<Plant>) -> String {
    let plant = plant.map_or(String::new(), |p| format!("VOLPLANE_PLANT={} ", p.name()));
    format!(
        "{plant}VOLPLANE_LOG=error exec {} serve --runtime {} --endpoint unix://{root}/csi.sock --state-dir {root}/state --kubelet-dir {root}/kubelet --node-id {} >/dev/null",
        env!("CARGO_BIN_EXE_volplane-under-test"),
        runtime.flag(),
        common::NODE,
        root = root.display(),
    )
}

fn check_in(root: &Path, runtime: Runtime, plant: Option<Plant>) -> Check {
    std::fs::create_dir_all(root.join("kubelet")).unwrap();
    let endpoint = format!("unix://{}/csi.sock", root.display());
    let mut c = Check::new(&endpoint, root.join("kubelet"));
    c.restart = Some(serve(root, runtime, plant));
    c
}

fn print(what: &str, r: &Report, took: std::time::Duration) {
    eprintln!(
        "{what}: {} runs, {} steps in {:.1} s, {} MUST-rule failures",
        r.runs,
        r.steps,
        took.as_secs_f64(),
        r.failures.len()
    );
    eprint!("{}", report::summary(&r.tally));
    for f in &r.failures {
        eprint!("{}", f.trace);
    }
}

async fn serve_breaks_no_rule(runtime: Runtime) {
    require_root!();
    let _one = ONE_AT_A_TIME.lock().await;
    let root = tempfile::tempdir().unwrap();
    // Directory volumes, three calls in flight at once, restarts.
    let mut c = check_in(root.path(), runtime, None)
        .parameter("kind", "dir")
        .runs(4)
        .concurrency(3);
    c.steps = 150;
    c.capability = Capability::mount(AccessMode::MultiNodeMultiWriter);
    let start = std::time::Instant::now();
    let r = c.run(|_| {}).await.expect("the check runs");
    print(
        &format!("volplane serve ({}), dir volumes", runtime.flag()),
        &r,
        start.elapsed(),
    );
    assert!(r.failures.is_empty(), "volplane serve broke a rule");
    let checked = |rule| r.tally.counts.get(&rule).map_or(0, |c| c.0);
    use volplane_core::check::Rule;
    for rule in [
        Rule::DataShared,
        Rule::PublishMounts,
        Rule::SurvivesRestart,
        Rule::CreateIdempotent,
        Rule::ListComplete,
    ] {
        assert!(checked(rule) > 0, "{} was never checked", rule.name());
    }
    // Block volumes (a loop device, mkfs at the first stage), one call at a time.
    let root = tempfile::tempdir().unwrap();
    let mut c = check_in(root.path(), runtime, None).runs(2).seed(7);
    c.steps = 100;
    let start = std::time::Instant::now();
    let r = c.run(|_| {}).await.expect("the check runs");
    print(
        &format!("volplane serve ({}), block volumes", runtime.flag()),
        &r,
        start.elapsed(),
    );
    assert!(r.failures.is_empty(), "volplane serve broke a rule");
}

both_runtimes!(volplane_serve_breaks_no_rule, serve_breaks_no_rule);

/// How each plant is checked: calls in flight together, restarts.
fn shaped(plant: Plant, c: Check) -> Check {
    let c = match plant {
        // A race met on one run may be missed on the next (the more so on a
        // busy machine): each candidate is tried three times, so the shrink
        // gets a larger budget.
        Plant::CreateRepeatsInFlight | Plant::DeleteRacesPublish => Check {
            shrink_runs: 1_000,
            ..c.concurrency(2)
        },
        // A SHOULD-rule does not end the check: fewer runs (it shows in
        // one run of three or so).
        Plant::CapacityBelowGranted => c.runs(40),
        // Found only when a kill lands between the storage making the
        // volume and the driver recording it: restarts every few steps.
        // That window is a fraction of a millisecond for `volplane serve`
        // (a busy machine moves a kill out of it, run to run) and a remote
        // storage's round trip for a remote driver: widened to the latter
        // (VOLPLANE_SLOW_CREATE_MS=3), so the shrink's replays meet it too.
        Plant::ForgetInterruptedCreate => {
            let mut c = Check {
                shrink_runs: 1_000,
                ..c
            };
            c.restart = c.restart.map(|r| format!("VOLPLANE_SLOW_CREATE_MS=3 {r}"));
            c.bounds.restarts_per_mille = 150;
            c
        }
        _ => c,
    };
    match plant {
        Plant::ForgetVolumesOnRestart
        | Plant::ForgetMountsOnRestart
        | Plant::ForgetInterruptedCreate => c,
        _ => Check { restart: None, ..c },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_planted_mistake_is_found_and_shrunk() {
    require_root!();
    let _one = ONE_AT_A_TIME.lock().await;
    // VOLPLANE_TEST_PLANT=NAME checks that one plant alone (to measure it).
    let only = std::env::var("VOLPLANE_TEST_PLANT").ok();
    for plant in Plant::DRIVER {
        if only.as_deref().is_some_and(|name| name != plant.name()) {
            continue;
        }
        let root = tempfile::tempdir().unwrap();
        let c = check_in(root.path(), Runtime::Tokio, Some(plant))
            .parameter("kind", "dir")
            .runs(100);
        let mut c = shaped(plant, c);
        c.steps = 200;
        // Without --restart the test starts the driver itself.
        let _driver = c
            .restart
            .is_none()
            .then(|| Spawned::new(&serve(root.path(), Runtime::Tokio, Some(plant))));
        let start = std::time::Instant::now();
        let r = c.run(|_| {}).await.expect("the check runs");
        let took = start.elapsed();
        let found = match r.failures.first() {
            Some(f) => format!(
                "{} in run {}, shrunk {} → {} steps",
                f.rule.name(),
                r.runs,
                f.steps.0,
                f.steps.1
            ),
            None => match r.tally.broken(Level::Should).next() {
                Some(rule) => format!("{} (SHOULD) in {} runs", rule.name(), r.runs),
                None => "not found".to_string(),
            },
        };
        eprintln!("{:<28} {found} ({:.1} s)", plant.name(), took.as_secs_f64());
        if let Some(f) = r.failures.first() {
            eprint!("{}", f.trace);
            assert!(
                f.steps.1 <= 10,
                "{}: shrunk to {} steps, more than 10",
                plant.name(),
                f.steps.1
            );
        }
        assert!(
            !r.passed(true),
            "{}: not found in {} runs",
            plant.name(),
            r.runs
        );
        // Every run and shrink replay, failing or not, put away what it
        // mounted, whatever the driver did.
        let left = unmount_beneath(&root.path().join("kubelet"));
        assert!(left.is_empty(), "{}: left mounted: {left:?}", plant.name());
        unmount_beneath(root.path());
    }
}

/// `--jobs 2`: two runs at once, each job against its own `volplane
/// serve` (`{i}` in the endpoint, kubelet directory and restart command):
/// a sound driver passes with every run made and both instances used; a
/// planted mistake is found, shrunk against the instance that showed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_check_their_own_driver_instances() {
    require_root!();
    let _one = ONE_AT_A_TIME.lock().await;
    for plant in [None, Some(Plant::ForgetVolumesOnRestart)] {
        let root = tempfile::tempdir().unwrap();
        let each = root.path().join("job{i}");
        let mut c = Check::new(
            &format!("unix://{}/csi.sock", each.display()),
            each.join("kubelet"),
        )
        .parameter("kind", "dir")
        .runs(4)
        .jobs(2);
        c.restart = Some(serve(&each, Runtime::Tokio, plant));
        c.steps = 80;
        c.keep_going = true;
        let start = std::time::Instant::now();
        let mut runs_heard = 0;
        let r = c
            .run(|p| runs_heard = runs_heard.max(p.runs))
            .await
            .expect("the check runs");
        print(&format!("--jobs 2, plant {plant:?}"), &r, start.elapsed());
        assert_eq!(r.runs, 4, "every run made, two by each job");
        assert_eq!(runs_heard, 4, "progress counts both jobs' runs");
        for i in 0..2 {
            let state = root.path().join(format!("job{i}/state"));
            assert!(state.is_dir(), "job {i}'s driver never started");
        }
        match plant {
            None => assert!(r.failures.is_empty(), "volplane serve broke a rule"),
            Some(p) => {
                let f = r
                    .failures
                    .first()
                    .unwrap_or_else(|| panic!("{p:?} not found"));
                assert!(f.job < 2 && f.steps.1 <= f.steps.0);
                let mut seen = std::collections::BTreeSet::new();
                for f in &r.failures {
                    assert!(seen.insert(f.signature.clone()), "one finding shown twice");
                }
            }
        }
        for i in 0..2 {
            let left = unmount_beneath(&root.path().join(format!("job{i}/kubelet")));
            assert!(left.is_empty(), "job {i} left mounted: {left:?}");
        }
        unmount_beneath(root.path());
    }
}

/// Two mistakes that break one rule are two findings: a driver with both
/// races planted (a CreateVolume repeated in flight makes a second volume;
/// DeleteVolume and ControllerPublishVolume of one volume both succeed)
/// shows each shrunk on its own, not one of them under the rule's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_mistakes_under_one_rule_are_two_findings() {
    require_root!();
    let _one = ONE_AT_A_TIME.lock().await;
    let root = tempfile::tempdir().unwrap();
    let mut c = check_in(root.path(), Runtime::Tokio, None)
        .parameter("kind", "dir")
        .concurrency(2)
        .runs(25);
    c.restart = None;
    c.keep_going = true;
    c.shrink_runs = 1_000;
    let both = format!(
        "VOLPLANE_PLANT={},{} {}",
        Plant::CreateRepeatsInFlight.name(),
        Plant::DeleteRacesPublish.name(),
        serve(root.path(), Runtime::Tokio, None)
    );
    let _driver = Spawned::new(&both);
    let start = std::time::Instant::now();
    let r = c.run(|_| {}).await.expect("the check runs");
    print("two races planted", &r, start.elapsed());
    let shown: Vec<String> = r.failures.iter().map(|f| f.signature.to_string()).collect();
    eprintln!("findings: {shown:#?}");
    let distinct: std::collections::BTreeSet<_> = r.failures.iter().map(|f| &f.signature).collect();
    assert_eq!(
        distinct.len(),
        r.failures.len(),
        "a finding shown twice: {shown:?}"
    );
    assert!(
        shown.contains(
            &"concurrent-calls-in-some-order: CreateVolume v → OK ‖ CreateVolume v → OK"
                .to_string()
        ),
        "the create race is not its own finding: {shown:?}"
    );
    assert!(
        r.failures.iter().any(|f| f
            .signature
            .calls
            .iter()
            .any(|(call, _)| call.starts_with("DeleteVolume"))),
        "the delete race is not shown beside it: {shown:?}"
    );
    let runs: u32 =
        r.failures.iter().map(|f| f.runs).sum::<u32>() + r.unshrunk.values().sum::<u32>();
    assert_eq!(
        runs, r.failed_runs,
        "every failing run counts under one finding"
    );
    let left = unmount_beneath(&root.path().join("kubelet"));
    assert!(left.is_empty(), "failing runs left mounted: {left:?}");
    unmount_beneath(root.path());
}

/// A shared host: another tenant mounts and unmounts a tmpfs outside the
/// kubelet directory all through the check. `volplane serve` is not
/// blamed (the changes are listed as the host's); a driver with a create
/// race (two volumes for one name) is, and every failing run and shrink
/// replay puts away what it made — both volumes of a race, their loop
/// devices and mounts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_host_is_not_blamed_and_failing_runs_put_everything_away() {
    require_root!();
    let _one = ONE_AT_A_TIME.lock().await;
    let tenant = Tenant::start();
    for plant in [None, Some(Plant::CreateRepeatsInFlight)] {
        let root = tempfile::tempdir().unwrap();
        let mut c = check_in(root.path(), Runtime::Tokio, plant)
            .parameter("kind", "block")
            .concurrency(2)
            .runs(4);
        c.steps = 100;
        c.restart = None;
        c.keep_going = true;
        let _driver = Spawned::new(&serve(root.path(), Runtime::Tokio, plant));
        let start = std::time::Instant::now();
        let r = c.run(|_| {}).await.expect("the check runs");
        let name = plant.map_or("volplane serve", |p| p.name());
        print(&format!("{name} on a shared host"), &r, start.elapsed());
        eprintln!("the host's changes: {:?}", r.foreign);
        assert!(
            !r.foreign.is_empty(),
            "{name}: the tenant's mounts were not seen"
        );
        assert!(
            r.failures
                .iter()
                .all(|f| f.rule != volplane_core::check::Rule::NothingOutside),
            "{name}: the tenant's mounts were blamed on the driver"
        );
        assert_eq!(r.failures.is_empty(), plant.is_none(), "{name}");
        let volumes: Vec<String> = std::fs::read_dir(root.path().join("state/volumes"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("vol-"))
                    .collect()
            })
            .unwrap_or_default();
        assert!(volumes.is_empty(), "{name}: volumes left: {volumes:?}");
        let loops = loops_backed_under(root.path());
        assert!(loops.is_empty(), "{name}: loop devices left: {loops:?}");
        let left = unmount_beneath(root.path());
        assert!(left.is_empty(), "{name}: left mounted: {left:?}");
    }
    tenant.stop();
}

/// Another tenant of the host: a tmpfs mounted and unmounted outside any
/// kubelet directory, over and over, until dropped.
struct Tenant {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Tenant {
    fn start() -> Tenant {
        let dir = tempfile::tempdir().unwrap();
        let point = dir.path().to_path_buf();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            let pause = std::time::Duration::from_millis(20);
            while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                let mounted = Command::new("mount")
                    .args(["-t", "tmpfs", "tenant"])
                    .arg(&point)
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(mounted, "the tenant cannot mount at {}", point.display());
                std::thread::sleep(pause);
                let _ = rustix_umount(&point.display().to_string());
                std::thread::sleep(pause);
            }
        });
        Tenant {
            stop,
            thread: Some(thread),
            _dir: dir,
        }
    }
}

impl Tenant {
    /// Stops it; a tenant that could not mount fails the test.
    fn stop(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join()
                .expect("the tenant mounted and unmounted throughout");
        }
    }
}

impl Drop for Tenant {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The loop devices whose backing file lies beneath `root`.
fn loops_backed_under(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/sys/block")
        .into_iter()
        .flatten()
        .flatten()
    {
        let backing = std::fs::read_to_string(e.path().join("loop/backing_file"));
        if let Ok(file) = backing
            && file.trim().starts_with(&root.display().to_string())
        {
            found.push(format!(
                "{} → {}",
                e.file_name().to_string_lossy(),
                file.trim()
            ));
        }
    }
    found
}

/// A driver that cannot list — `guarded-driver`: credentials on every
/// create and delete, each volume a directory of its storage — is judged
/// by its storage directory (`--storage-dir`), and held to the credentials
/// it was declared to need (`--secrets-required`): sound, it breaks no rule
/// over restarting runs with calls in flight together and the secrets
/// file's password; planted to leave a deleted volume's directory, the
/// leak is found as nothing-left-on-storage, which no listing shows;
/// planted to serve a call without a password with the last one it saw
/// (credentials from nowhere), found as credentials-from-the-call. Sound,
/// it is zonal too (its node in zone `a`, its storage also in `b`, given
/// as `--other-segment`): volumes made in `b` are kept off the node (it
/// refuses to stage them), and creates for `b` alone or a made-up zone
/// are judged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_cannot_list_is_judged_by_its_storage_directory() {
    require_root!();
    let _one = ONE_AT_A_TIME.lock().await;
    use volplane_core::check::Rule;
    for planted in [
        None,
        Some(Rule::NothingStored),
        Some(Rule::CredentialsFromTheCall),
    ] {
        let knob = match planted {
            Some(Rule::NothingStored) => "GUARDED_KEEP_ON_DELETE=1",
            Some(_) => "GUARDED_STICKY_CREDENTIALS=1",
            None => "GUARDED_ZONE=a GUARDED_OTHER_ZONE=b",
        };
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        std::fs::create_dir_all(dir.join("storage")).unwrap();
        std::fs::create_dir_all(dir.join("kubelet")).unwrap();
        let secrets = dir.join("secrets.yaml");
        let password = "CreateVolumeSecret:\n  password: pw\nDeleteVolumeSecret:\n  password: pw\n";
        std::fs::write(&secrets, password).unwrap();
        let mut c = Check::new(
            &format!("unix://{}/csi.sock", dir.display()),
            dir.join("kubelet"),
        )
        .runs(if planted.is_some() { 10 } else { 6 })
        // One call at a time for the credentials: met among calls in
        // flight together, the finding is concurrent-calls-in-some-order,
        // whose shrink keeps the companions' answers.
        .concurrency(if planted == Some(Rule::CredentialsFromTheCall) {
            1
        } else {
            2
        });
        c.steps = 100;
        c.secrets = volplane::testing::secrets_file(&secrets).unwrap();
        c.secrets_required = true;
        c.storage_dirs = vec![dir.join("storage")];
        if planted.is_none() {
            c.other_segment = Some(
                [("topology.guarded.volplane.io/zone", "b")]
                    .into_iter()
                    .collect(),
            );
        }
        c.restart = Some(format!(
            "GUARDED_STORAGE={root}/storage GUARDED_PASSWORD=pw {knob} \
             VOLPLANE_LOG=error exec {bin} --endpoint unix://{root}/csi.sock --node-id {node} \
             --state-dir {root}/state --kubelet-dir {root}/kubelet >/dev/null 2>>{root}/driver.err",
            root = dir.display(),
            bin = env!("CARGO_BIN_EXE_guarded-driver"),
            node = common::NODE,
        ));
        let start = std::time::Instant::now();
        let r = c.run(|_| {}).await.expect("the check runs");
        print(
            &format!("guarded-driver, planted: {knob:?}"),
            &r,
            start.elapsed(),
        );
        let held = |rule| {
            let (checked, broken) = r.tally.counts.get(&rule).copied().unwrap_or_default();
            checked > 0 && broken == 0
        };
        match planted {
            Some(rule) => {
                let f = r.failures.first().expect("the planted bug is found");
                assert_eq!(f.rule, rule, "{}", f.trace);
                assert!(f.steps.1 <= 4, "shrunk to {} steps", f.steps.1);
                if rule == Rule::NothingStored {
                    assert!(f.trace.contains("storage directories"), "{}", f.trace);
                } else {
                    // The volume the bare create made broke a rule, so no
                    // world held it: deleted all the same, in every run and
                    // shrink replay.
                    let left: Vec<_> = std::fs::read_dir(dir.join("storage"))
                        .unwrap()
                        .map(|e| e.unwrap().file_name())
                        .collect();
                    assert!(left.is_empty(), "left on the storage: {left:?}");
                }
            }
            None => {
                assert!(r.failures.is_empty(), "guarded-driver broke a rule");
                // A stage or publish of a volume of the other zone, which
                // the CO must keep off this node, would be refused: a valid
                // call failed (SHOULD).
                let noted: Vec<_> = r.tally.broken(Level::Should).collect();
                assert!(noted.is_empty(), "guarded-driver broke {noted:?}");
                assert!(held(Rule::NothingStored), "the storage was never judged");
                assert!(
                    held(Rule::CredentialsFromTheCall),
                    "no create went without its secrets"
                );
                assert!(
                    held(Rule::CreateTopology),
                    "no create's topology was judged"
                );
                let said = std::fs::read_to_string(dir.join("driver.err")).unwrap_or_default();
                assert!(
                    said.contains("made in zone b"),
                    "no volume was made in the other zone: {said}"
                );
            }
        }
        let left = unmount_beneath(&dir.join("kubelet"));
        assert!(left.is_empty(), "left mounted: {left:?}");
    }
}

/// A driver the test runs itself (no restarts), killed when dropped.
struct Spawned(std::process::Child);

impl Spawned {
    fn new(command: &str) -> Spawned {
        Spawned(
            Command::new("sh")
                .arg("-c")
                .arg(command)
                .spawn()
                .expect("the driver starts"),
        )
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a planted driver leaked on purpose: unmounted, so the temporary
/// directory can go.
/// Unmounts whatever is left mounted beneath `root`; answers what was.
fn unmount_beneath(root: &Path) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let prefix = format!("{}/", root.display());
    let mut points: Vec<String> = volplane_core::mountinfo::parse(&text)
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|p| p.starts_with(&prefix))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in &points {
        let _ = rustix_umount(p);
    }
    points
}

fn rustix_umount(path: &str) -> std::io::Result<()> {
    let status = Command::new("umount").arg("-l").arg(path).status()?;
    if status.success() {
        Ok(())
    } else {
        Err(std::io::Error::other("umount failed"))
    }
}

/// csi-sanity against the same planted drivers: what it finds of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csi_sanity_against_the_planted_mistakes() {
    let Some(binary) = std::env::var_os("VOLPLANE_TEST_CSI_SANITY") else {
        eprintln!(
            "skipping csi-sanity against the planted mistakes: set VOLPLANE_TEST_CSI_SANITY to a csi-sanity binary"
        );
        return;
    };
    require_root!();
    let _one = ONE_AT_A_TIME.lock().await;
    for plant in Plant::DRIVER {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("kubelet/pods")).unwrap();
        std::fs::create_dir_all(root.path().join("kubelet/plugins")).unwrap();
        let driver = Spawned::new(&serve(root.path(), Runtime::Tokio, Some(plant)));
        std::thread::sleep(std::time::Duration::from_millis(500));
        let out = Command::new(&binary)
            .arg(format!("--csi.endpoint={}/csi.sock", root.path().display()))
            .arg(format!(
                "--csi.mountdir={}/kubelet/pods/mount",
                root.path().display()
            ))
            .arg(format!(
                "--csi.stagingdir={}/kubelet/plugins/stage",
                root.path().display()
            ))
            .output()
            .expect("csi-sanity runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let summary = text
            .lines()
            .rev()
            .find(|l| l.contains("Passed") && l.contains("Failed"))
            .unwrap_or("no summary line");
        let verdict = if out.status.success() {
            "passes"
        } else {
            "FAILS"
        };
        eprintln!(
            "csi-sanity {verdict} against {:<28} {}",
            plant.name(),
            summary.trim()
        );
        drop(driver);
        unmount_beneath(root.path());
    }
}
