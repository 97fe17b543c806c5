//! quota-dirs as the kubelet drives it (volplane::testing), and csi-sanity
//! when VOLPLANE_TEST_CSI_SANITY names its binary. Mounting needs root:
//! without it the lifecycle is skipped, unless VOLPLANE_REQUIRE_ALL=1 (CI)
//! makes that a failure.

use std::path::Path;
use std::process::{Child, Command};

use volplane::testing::{Csi, Lifecycle};

/// A quota-dirs process in a temporary directory of its own.
struct Running {
    child: Child,
    dir: tempfile::TempDir,
    endpoint: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn start() -> Running {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("unix://{}/csi.sock", dir.path().display());
        let child = spawn(dir.path(), &endpoint);
        Running {
            child,
            dir,
            endpoint,
        }
    }

    /// SIGKILL, as a crash would, and start again on the same state.
    fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(self.dir.path(), &self.endpoint);
    }

    fn kubelet(&self) -> std::path::PathBuf {
        self.dir.path().join("kubelet")
    }
}

fn spawn(dir: &Path, endpoint: &str) -> Child {
    Command::new(env!("CARGO_BIN_EXE_quota-dirs"))
        .arg("--endpoint")
        .arg(endpoint)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .arg("--kubelet-dir")
        .arg(dir.join("kubelet"))
        .env("VOLPLANE_LOG", "warn")
        .spawn()
        .expect("start quota-dirs")
}

fn may_mount(test: &str) -> bool {
    if rustix_is_root() {
        return true;
    }
    assert!(
        std::env::var("VOLPLANE_REQUIRE_ALL").as_deref() != Ok("1"),
        "{test} needs root to mount"
    );
    eprintln!("skipping {test}: mounting needs root");
    false
}

fn rustix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1).map(|u| u == "0"))
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_lives_and_leaves_nothing_behind() {
    if !may_mount("the lifecycle") {
        return;
    }
    let running = Running::start();
    let csi = Csi::connect(&running.endpoint).await.unwrap();
    let report = Lifecycle::new(running.kubelet()).run(&csi).await.unwrap();
    eprintln!("quota-dirs: {}", report.steps.join(" → "));
    assert_eq!(report.leftovers, Vec::<String>::new());
    no_storage_left(&running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_survives_a_kill_between_every_two_steps() {
    if !may_mount("the lifecycle with restarts") {
        return;
    }
    let mut running = Running::start();
    let (endpoint, kubelet) = (running.endpoint.clone(), running.kubelet());
    let report = Lifecycle::new(kubelet)
        .run_restarting(&endpoint, || running.restart())
        .await
        .unwrap();
    eprintln!(
        "quota-dirs, killed {} times: {}",
        report.restarts,
        report.steps.join(" → ")
    );
    assert_eq!(report.leftovers, Vec::<String>::new());
    no_storage_left(&running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_node_paths_are_refused_and_touch_nothing() {
    if !may_mount("the hostile paths") {
        return;
    }
    let running = Running::start();
    let csi = Csi::connect(&running.endpoint).await.unwrap();
    let report = Lifecycle::new(running.kubelet())
        .run_hostile(&csi)
        .await
        .unwrap();
    eprintln!("quota-dirs, hostile: {:#?}", report.steps);
    assert_eq!(report.leftovers, Vec::<String>::new());
    no_storage_left(&running);
}

fn no_storage_left(running: &Running) {
    let volumes = running.dir.path().join("state/volumes");
    let left: Vec<_> = std::fs::read_dir(&volumes).unwrap().flatten().collect();
    assert!(left.is_empty(), "storage left: {left:?}");
}

#[test]
fn csi_sanity_passes_what_it_declares() {
    let Some(sanity) = std::env::var_os("VOLPLANE_TEST_CSI_SANITY") else {
        eprintln!("skipping csi-sanity: set VOLPLANE_TEST_CSI_SANITY to a csi-sanity binary");
        return;
    };
    if !may_mount("csi-sanity") {
        return;
    }
    let running = Running::start();
    let (endpoint, kubelet) = (running.endpoint.clone(), running.kubelet());
    std::fs::create_dir_all(kubelet.join("plugins")).unwrap();
    std::fs::create_dir_all(kubelet.join("pods/sanity")).unwrap();
    let out = Command::new(Path::new(&sanity))
        .arg(format!(
            "--csi.endpoint={}",
            endpoint.trim_start_matches("unix://")
        ))
        .arg(format!(
            "--csi.mountdir={}",
            kubelet.join("pods/sanity/mount").display()
        ))
        .arg(format!(
            "--csi.stagingdir={}",
            kubelet.join("plugins/stage").display()
        ))
        .args(["--ginkgo.v", "--ginkgo.no-color"])
        .output()
        .expect("csi-sanity runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = text.lines().rev().find(|l| l.contains("Passed"));
    eprintln!("csi-sanity on quota-dirs: {}", summary.unwrap_or(""));
    assert!(out.status.success(), "csi-sanity failed:\n{text}");
    // Why specs were skipped: each must be a capability quota-dirs does not
    // declare (it declares no Features).
    let mut reasons: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter_map(|l| l.strip_prefix("[SKIPPED] "))
        .filter(|l| !l.starts_with("in ["))
        .collect();
    reasons.sort();
    reasons.dedup();
    eprintln!("skipped because: {reasons:#?}");
    let undeclared = [
        "Publish",
        "Unpublish",
        "Expand",
        "Modify",
        "Snapshot",
        "Capacity",
        "Group",
        "Cloning",
    ];
    for r in reasons {
        assert!(
            r.ends_with("not supported") && undeclared.iter().any(|u| r.contains(u)),
            "csi-sanity skipped a spec for a reason other than an undeclared feature: {r}"
        );
    }
}
