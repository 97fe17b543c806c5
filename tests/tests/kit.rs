//! `volplane::testing` puts away what it made: a lifecycle that fails
//! unpublishes, unstages and deletes what it had got to (through the
//! driver's own calls), and a `DriverProcess` dropped while a test panics
//! unmounts what is left beneath it. Secrets files are read in
//! csi-sanity's format.

#[macro_use]
mod common;

use std::process::{Command, Stdio};
use std::sync::mpsc;

use volplane::testing::{Csi, DriverProcess, Error, Layout, Lifecycle, csi, secrets_file};

fn serve(plant: Option<&'static str>) -> impl Fn(&Layout) -> Command + Send + Sync + 'static {
    move |l: &Layout| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_volplane-under-test"));
        cmd.args([
            "serve",
            "--endpoint",
            &l.endpoint,
            "--node-id",
            common::NODE,
        ])
        .arg("--state-dir")
        .arg(&l.state_dir)
        .arg("--kubelet-dir")
        .arg(&l.kubelet_dir)
        .env("VOLPLANE_LOG", "error")
        .stdout(Stdio::null());
        if let Some(p) = plant {
            cmd.env("VOLPLANE_PLANT", p);
        }
        cmd
    }
}

/// Mount points beneath `root`.
fn mounts_beneath(root: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    volplane_core::mountinfo::parse(&text)
        .unwrap()
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|p| std::path::Path::new(p).starts_with(root))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_lifecycle_puts_away_what_it_made() {
    require_root!();
    // The driver answers NodePublishVolume OK without mounting: the
    // lifecycle fails where the data is not shared.
    let d = DriverProcess::start(serve(Some("publish-without-mount"))).unwrap();
    let csi = Csi::connect(&d.layout().endpoint).await.unwrap();
    let e = Lifecycle::new(&d.layout().kubelet_dir)
        .parameter("kind", "dir")
        .run(&csi)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Violation(_)), "{e:?}");
    assert_eq!(mounts_beneath(&d.layout().root), Vec::<String>::new());
    let listed = csi
        .controller
        .clone()
        .list_volumes(csi::ListVolumesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(
        listed.entries.is_empty(),
        "volumes left: {:?}",
        listed.entries
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_call_is_typed_with_its_code() {
    let d = DriverProcess::start(serve(None)).unwrap();
    let csi = Csi::connect(&d.layout().endpoint).await.unwrap();
    let e = Lifecycle::new(&d.layout().kubelet_dir)
        .parameter("kind", "no-such-kind")
        .run(&csi)
        .await
        .unwrap_err();
    match &e {
        Error::Call { call, code, .. } => {
            assert_eq!(call, "CreateVolume");
            assert_eq!(*code, volplane::testing::Code::InvalidArgument);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(e.code(), Some(volplane::testing::Code::InvalidArgument));
}

#[test]
fn a_test_that_panics_leaves_nothing_mounted() {
    require_root!();
    let (tx, rx) = mpsc::channel();
    let failing = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let d = DriverProcess::start(serve(None)).unwrap();
            let l = d.layout().clone();
            tx.send(l.root.clone()).unwrap();
            let csi = Csi::connect(&l.endpoint).await.unwrap();
            let capability = csi::VolumeCapability {
                access_type: Some(csi::volume_capability::AccessType::Mount(Default::default())),
                access_mode: Some(csi::volume_capability::AccessMode { mode: 1 }),
            };
            let v = csi
                .controller
                .clone()
                .create_volume(csi::CreateVolumeRequest {
                    name: "pvc-panics".into(),
                    volume_capabilities: vec![capability.clone()],
                    parameters: [("kind".to_string(), "dir".to_string())].into(),
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner()
                .volume
                .unwrap();
            let staging = l.kubelet_dir.join("plugins/stage");
            std::fs::create_dir_all(&staging).unwrap();
            let target = l.kubelet_dir.join("pods/p/mount");
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            let mut n = csi.node.clone();
            n.node_stage_volume(csi::NodeStageVolumeRequest {
                volume_id: v.volume_id.clone(),
                staging_target_path: staging.display().to_string(),
                volume_capability: Some(capability.clone()),
                ..Default::default()
            })
            .await
            .unwrap();
            n.node_publish_volume(csi::NodePublishVolumeRequest {
                volume_id: v.volume_id,
                staging_target_path: staging.display().to_string(),
                target_path: target.display().to_string(),
                volume_capability: Some(capability),
                ..Default::default()
            })
            .await
            .unwrap();
            assert!(!mounts_beneath(&l.root).is_empty(), "nothing was mounted");
            panic!("the test fails with the volume staged and published");
        })
    });
    let root = rx.recv().unwrap();
    assert!(failing.join().is_err(), "the test was meant to panic");
    assert_eq!(mounts_beneath(&root), Vec::<String>::new());
    assert!(!root.exists(), "{} was not removed", root.display());
}

#[test]
fn a_secrets_file_is_read_in_csi_sanitys_format() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("secrets.yaml");
    std::fs::write(
        &file,
        "CreateVolumeSecret:\n  token: t1\nNodeStageVolumeSecret:\n  token: t2\n",
    )
    .unwrap();
    let s = secrets_file(&file).unwrap();
    assert_eq!(s.get("CreateVolumeSecret").0["token"], "t1");
    assert_eq!(s.get("NodeStageVolumeSecret").0["token"], "t2");
    assert!(s.get("DeleteVolumeSecret").0.is_empty());
    std::fs::write(&file, "CreateVolumeSecrets:\n  token: t1\n").unwrap();
    let e = secrets_file(&file).unwrap_err().to_string();
    assert!(e.contains("unknown key \"CreateVolumeSecrets\""), "{e}");
}
