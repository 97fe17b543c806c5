//! remote-appliance as the kubelet drives it, against its appliance as a
//! real process on loopback that answers 1 request in 30 with 503 and
//! makes 1 in 20 wait: straight through (filesystem and raw block), killed
//! between every two steps, hostile paths, `volplane check` with secrets
//! (with and without restarts), and csi-sanity with a secrets file (slow
//! answers only) when VOLPLANE_TEST_CSI_SANITY names its binary. Loop devices and mounts need
//! root (see `may_mount`).

mod common;

use common::{Appliance, secrets};
use volplane::testing::check::{Check, Rule};
use volplane::testing::{Csi, DriverProcess, Lifecycle, SECRET_KEYS, csi_sanity, may_mount};

/// The trial's rhythm: 1 in 30 busy, 1 in 20 slow (200 ms).
const FAULTS: [&str; 6] = [
    "--busy-every",
    "30",
    "--slow-every",
    "20",
    "--slow-ms",
    "200",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_lives_through_busy_and_slow_storage_and_nothing_is_left() {
    if !may_mount("the lifecycle") {
        return;
    }
    // Few requests in a lifecycle: busier, so that some are refused.
    let appliance =
        Appliance::start(&["--busy-every", "5", "--slow-every", "4", "--slow-ms", "200"]);
    let mut d = DriverProcess::start(appliance.driver()).unwrap();
    let csi = Csi::connect(&d.layout().endpoint).await.unwrap();
    let lifecycle = Lifecycle::new(&d.layout().kubelet_dir).secrets(secrets());
    let report = lifecycle.run(&csi).await.unwrap();
    eprintln!("remote-appliance: {}", report.steps.join(" → "));
    assert_eq!(report.leftovers, Vec::<String>::new());
    let report = lifecycle
        .clone()
        .name("pvc-raw")
        .block()
        .run(&csi)
        .await
        .unwrap();
    assert_eq!(report.leftovers, Vec::<String>::new());
    let layout = d.layout().clone();
    let report = lifecycle
        .clone()
        .name("pvc-killed")
        .run_restarting(&layout.endpoint, || d.restart())
        .await
        .unwrap();
    eprintln!("remote-appliance, killed {} times: ok", report.restarts);
    assert_eq!(report.leftovers, Vec::<String>::new());
    let csi = Csi::connect(&layout.endpoint).await.unwrap();
    let report = lifecycle
        .name("pvc-hostile")
        .run_hostile(&csi)
        .await
        .unwrap();
    eprintln!("remote-appliance, hostile: {:#?}", report.steps);
    assert_eq!(appliance.volumes(), vec![], "volumes left on the appliance");
    let stats = appliance.stats();
    eprintln!("appliance: {stats:?}");
    assert_eq!(
        stats.unauthorized, 0,
        "a call reached the appliance without its token"
    );
    assert!(stats.busy > 0, "the appliance was never busy: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_with_secrets_breaks_no_rule_and_leaves_nothing_on_the_appliance() {
    if !may_mount("volplane check") {
        return;
    }
    let appliance = Appliance::start(&FAULTS);
    let d = DriverProcess::start(appliance.driver()).unwrap();
    let l = d.layout().clone();
    let mut check = Check::new(&l.endpoint, &l.kubelet_dir)
        .secrets(secrets())
        .runs(4)
        .concurrency(2);
    check.steps = 120;
    check.watch_outside = false;
    // The appliance needs its token: a create without it must make nothing.
    check.secrets_required = true;
    let report = check.run(|_| {}).await.unwrap();
    eprintln!(
        "volplane check on remote-appliance: {} runs, {} steps, {} rules checked",
        report.runs,
        report.steps,
        report.tally.counts.len()
    );
    if let Some(f) = report.failures.first() {
        panic!("{}", f.trace);
    }
    let stored = report.tally.counts.get(&Rule::NothingStored).copied();
    assert!(
        stored.is_some_and(|(checked, _)| checked > 0),
        "the storage side was never judged"
    );
    let bare = report
        .tally
        .counts
        .get(&Rule::CredentialsFromTheCall)
        .copied();
    assert!(
        bare.is_some_and(|(checked, _)| checked > 0),
        "no create went without its token"
    );
    assert_eq!(appliance.volumes(), vec![]);
    drop(d);
    // What the creates sent without a token were refused for.
    let refused = appliance.stats().unauthorized;
    // With restarts: the check starts the driver itself and kills it now and then.
    let d = DriverProcess::start(appliance.driver()).unwrap();
    let l = d.layout().clone();
    let shell = appliance.driver_shell(&l);
    drop(d);
    let mut check = Check::new(&l.endpoint, &l.kubelet_dir)
        .secrets(secrets())
        .runs(3);
    check.steps = 120;
    check.watch_outside = false;
    check.restart = Some(shell);
    let report = check.run(|_| {}).await.unwrap();
    eprintln!(
        "with restarts: {} runs, {} steps",
        report.runs, report.steps
    );
    if let Some(f) = report.failures.first() {
        panic!("{}", f.trace);
    }
    // A replay after a restart never goes to the appliance without its token.
    assert_eq!(appliance.stats().unauthorized, refused);
}

#[test]
fn csi_sanity_passes_with_a_secrets_file() {
    if std::env::var_os("VOLPLANE_TEST_CSI_SANITY").is_some() && !may_mount("csi-sanity") {
        return;
    }
    // Slow, never busy: csi-sanity does not retry a busy answer in its
    // cleanup as a CO would.
    let appliance = Appliance::start(&FAULTS[2..]);
    let d = DriverProcess::start(appliance.driver()).unwrap();
    let file = d.layout().root.join("secrets.yaml");
    let yaml: String = SECRET_KEYS
        .iter()
        .map(|k| format!("{k}:\n  token: {}\n", common::TOKEN))
        .collect();
    std::fs::write(&file, yaml).unwrap();
    let secrets = format!("--csi.secrets={}", file.display());
    let Some(sanity) = csi_sanity(d.layout(), &["--csi.testvolumesize=67108864", &secrets]) else {
        eprintln!("skipping csi-sanity: set VOLPLANE_TEST_CSI_SANITY to a csi-sanity binary");
        return;
    };
    let sanity = sanity.unwrap();
    eprintln!("csi-sanity on remote-appliance: {}", sanity.summary);
    eprintln!("skipped because: {:#?}", sanity.skipped_because);
    // remote-appliance declares no attach, snapshots, capacity or modify.
    let undeclared = [
        "Publish",
        "Unpublish",
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
    assert_eq!(appliance.stats().unauthorized, 0);
}
