//! loop-block as the kubelet drives it — attached, staged (formatted),
//! published — straight through, killed between every two steps, hostile
//! paths, and csi-sanity when VOLPLANE_TEST_CSI_SANITY names its binary.
//! Loop devices and mounts need root (see `may_mount`).

use std::process::Command;

use volplane::testing::{Csi, DriverProcess, Layout, Lifecycle, csi_sanity, may_mount};

fn loop_block(l: &Layout) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_loop-block"));
    cmd.args(["--endpoint", &l.endpoint])
        .arg("--state-dir")
        .arg(&l.state_dir)
        .arg("--kubelet-dir")
        .arg(&l.kubelet_dir)
        .env("VOLPLANE_LOG", "error");
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_is_attached_staged_published_and_gone_after() {
    if !may_mount("the lifecycle") {
        return;
    }
    let mut d = DriverProcess::start(loop_block).unwrap();
    let csi = Csi::connect(&d.layout().endpoint).await.unwrap();
    let lifecycle = Lifecycle::new(&d.layout().kubelet_dir);
    let report = lifecycle.run(&csi).await.unwrap();
    eprintln!("loop-block: {}", report.steps.join(" → "));
    assert_eq!(report.leftovers, Vec::<String>::new());
    let report = Lifecycle::new(&d.layout().kubelet_dir)
        .name("pvc-raw")
        .block()
        .run(&csi)
        .await
        .unwrap();
    eprintln!("loop-block, raw block: {}", report.steps.join(" → "));
    assert_eq!(report.leftovers, Vec::<String>::new());
    let layout = d.layout().clone();
    let report = lifecycle
        .name("pvc-killed")
        .run_restarting(&layout.endpoint, || d.restart())
        .await
        .unwrap();
    eprintln!("loop-block, killed {} times: ok", report.restarts);
    assert_eq!(report.leftovers, Vec::<String>::new());
    let csi = Csi::connect(&layout.endpoint).await.unwrap();
    let report = Lifecycle::new(&layout.kubelet_dir)
        .name("pvc-hostile")
        .run_hostile(&csi)
        .await
        .unwrap();
    eprintln!("loop-block, hostile: {:#?}", report.steps);
    let images: Vec<_> = std::fs::read_dir(layout.state_dir.join("volumes"))
        .unwrap()
        .flatten()
        .collect();
    assert!(images.is_empty(), "images left: {images:?}");
}

#[test]
fn csi_sanity_passes_and_skips_only_what_is_not_declared() {
    if std::env::var_os("VOLPLANE_TEST_CSI_SANITY").is_some() && !may_mount("csi-sanity") {
        return;
    }
    let d = DriverProcess::start(loop_block).unwrap();
    // 64 MiB volumes: each is a real (sparse) image that must fit.
    let Some(sanity) = csi_sanity(d.layout(), &["--csi.testvolumesize=67108864"]) else {
        eprintln!("skipping csi-sanity: set VOLPLANE_TEST_CSI_SANITY to a csi-sanity binary");
        return;
    };
    let sanity = sanity.unwrap();
    eprintln!("csi-sanity on loop-block: {}", sanity.summary);
    eprintln!("skipped because: {:#?}", sanity.skipped_because);
    // loop-block declares attach and block only.
    let undeclared = [
        "Expand", "Modify", "Snapshot", "Capacity", "Group", "Cloning",
    ];
    for r in &sanity.skipped_because {
        assert!(
            (r.ends_with("not supported") && undeclared.iter().any(|u| r.contains(u)))
                // A csi-sanity option, for drivers that report a limit.
                || r == "testnodevolumeattachlimit not enabled",
            "csi-sanity skipped a spec for a reason other than an undeclared feature: {r}"
        );
    }
}
