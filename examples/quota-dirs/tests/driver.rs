//! quota-dirs as the kubelet drives it: straight through, killed between
//! every two steps, hostile paths, and csi-sanity when
//! VOLPLANE_TEST_CSI_SANITY names its binary — all from volplane::testing.
//! Mounting needs root (see `may_mount`).

use std::process::Command;

use volplane::testing::{Csi, DriverProcess, Layout, Lifecycle, csi_sanity, may_mount};

fn quota_dirs(l: &Layout) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_quota-dirs"));
    cmd.args(["--endpoint", &l.endpoint])
        .arg("--state-dir")
        .arg(&l.state_dir)
        .arg("--kubelet-dir")
        .arg(&l.kubelet_dir)
        .env("VOLPLANE_LOG", "error");
    cmd
}

/// Nothing of the volumes is left in the driver's storage.
fn no_storage_left(d: &DriverProcess) {
    let volumes = d.layout().state_dir.join("volumes");
    let left: Vec<_> = std::fs::read_dir(&volumes).unwrap().flatten().collect();
    assert!(left.is_empty(), "storage left: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_lives_and_leaves_nothing_behind() {
    if !may_mount("the lifecycle") {
        return;
    }
    let d = DriverProcess::start(quota_dirs).unwrap();
    let csi = Csi::connect(&d.layout().endpoint).await.unwrap();
    let report = Lifecycle::new(&d.layout().kubelet_dir)
        .run(&csi)
        .await
        .unwrap();
    eprintln!("quota-dirs: {}", report.steps.join(" → "));
    assert_eq!(report.leftovers, Vec::<String>::new());
    no_storage_left(&d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_survives_a_kill_between_every_two_steps() {
    if !may_mount("the lifecycle with restarts") {
        return;
    }
    let mut d = DriverProcess::start(quota_dirs).unwrap();
    let layout = d.layout().clone();
    let report = Lifecycle::new(&layout.kubelet_dir)
        .run_restarting(&layout.endpoint, || d.restart())
        .await
        .unwrap();
    eprintln!(
        "quota-dirs, killed {} times: {}",
        report.restarts,
        report.steps.join(" → ")
    );
    assert_eq!(report.leftovers, Vec::<String>::new());
    no_storage_left(&d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_node_paths_are_refused_and_touch_nothing() {
    if !may_mount("the hostile paths") {
        return;
    }
    let d = DriverProcess::start(quota_dirs).unwrap();
    let csi = Csi::connect(&d.layout().endpoint).await.unwrap();
    let report = Lifecycle::new(&d.layout().kubelet_dir)
        .run_hostile(&csi)
        .await
        .unwrap();
    eprintln!("quota-dirs, hostile: {:#?}", report.steps);
    assert_eq!(report.leftovers, Vec::<String>::new());
    no_storage_left(&d);
}

#[test]
fn csi_sanity_passes_and_skips_only_what_is_not_declared() {
    if std::env::var_os("VOLPLANE_TEST_CSI_SANITY").is_some() && !may_mount("csi-sanity") {
        return;
    }
    let d = DriverProcess::start(quota_dirs).unwrap();
    let Some(sanity) = csi_sanity(d.layout(), &[]) else {
        eprintln!("skipping csi-sanity: set VOLPLANE_TEST_CSI_SANITY to a csi-sanity binary");
        return;
    };
    let sanity = sanity.unwrap();
    eprintln!("csi-sanity on quota-dirs: {}", sanity.summary);
    eprintln!("skipped because: {:#?}", sanity.skipped_because);
    // quota-dirs declares no Features: all of these go unadvertised.
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
    for r in &sanity.skipped_because {
        assert!(
            r.ends_with("not supported") && undeclared.iter().any(|u| r.contains(u)),
            "csi-sanity skipped a spec for a reason other than an undeclared feature: {r}"
        );
    }
}
