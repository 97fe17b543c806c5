//! `volplane lab` for real: the story of the demo with the exact CSI calls
//! per node, a node driver killed mid-stage, registration through a symlink
//! and deregistration, a dirty root, and a clean `down`. Needs root (mounts,
//! loop devices); skips with a reason otherwise.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use volplane_cli::lab::demo::{self, can_grow_mounted};
use volplane_cli::lab::{Lab, LabConfig};
use volplane_core::model::{Kind, Object, ObjectKey, PvPhase, PvcPhase};

const EXE: &str = env!("CARGO_BIN_EXE_volplane-under-test");
const WAIT: Duration = Duration::from_secs(90);

fn config(root: &Path, nodes: usize) -> LabConfig {
    let mut c = LabConfig::new(root.join("lab"), nodes);
    c.exe = EXE.into();
    c
}

macro_rules! need_root {
    () => {
        if !common::is_root() {
            common::skip(
                module_path!(),
                "the lab mounts filesystems and attaches loop devices (run as root)",
            );
            return;
        }
    };
}

/// Nothing of the lab at `root` is left: no mount, loop device, process or directory.
fn assert_clean(root: &Path) {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let r = root.display().to_string();
    assert!(!mounts.contains(&r), "mounts left under {r}:\n{mounts}");
    let loops = Command::new("losetup").arg("-a").output().unwrap();
    let loops = String::from_utf8_lossy(&loops.stdout);
    assert!(!loops.contains(&r), "loop devices left: {loops}");
    let procs: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&r))
        .collect();
    assert!(procs.is_empty(), "processes left: {procs:?}");
    assert!(!root.exists(), "{r} was not removed");
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_story_plays_with_the_exact_csi_calls_per_node() {
    need_root!();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), 2);
    let root = cfg.root.clone();
    let lab = Lab::start(cfg).await.unwrap();
    let played = demo::play(&lab).await;
    let (controller, a, b) = lab.with(|w, _| {
        (
            w.calls_on("controller"),
            w.calls_on("node-a"),
            w.calls_on("node-b"),
        )
    });
    let final_objects = lab.with(|w, _| {
        let pvs: Vec<_> = w
            .store
            .objects()
            .filter_map(|o| match o {
                Object::Pv(pv) => Some((pv.spec.claim_ref.clone().unwrap().name, pv.phase())),
                _ => None,
            })
            .collect();
        let others = w
            .store
            .objects()
            .filter(|o| {
                matches!(
                    o,
                    Object::Pod(_)
                        | Object::Pvc(_)
                        | Object::Va(_)
                        | Object::Snapshot(_)
                        | Object::Content(_)
                )
            })
            .count();
        (pvs, others)
    });
    let said = lab.down().await;
    played.unwrap();

    let (resize_controller, resize_a) = if can_grow_mounted() {
        (
            strs(&["ControllerExpandVolume"]),
            strs(&["NodeExpandVolume"]),
        )
    } else {
        (
            strs(&[
                "ControllerUnpublishVolume",
                "ControllerExpandVolume",
                "ControllerPublishVolume",
            ]),
            strs(&[
                "NodeUnpublishVolume",
                "NodeUnstageVolume",
                "NodeStageVolume",
                "NodePublishVolume",
                "NodeExpandVolume",
            ]),
        )
    };
    let mut want = strs(&[
        "GetPluginInfo",
        "ControllerGetCapabilities",
        "CreateVolume",
        "CreateVolume",
        // web-0 on node-a, web-2 on node-b, solo-a on node-a.
        "ControllerPublishVolume",
        "ControllerPublishVolume",
        "ControllerPublishVolume",
        // solo-a gone; then node-b's last pod gone.
        "ControllerUnpublishVolume",
        "ControllerUnpublishVolume",
    ]);
    want.extend(resize_controller);
    want.extend(strs(&[
        // The snapshot of pvc/shared, the claim restored from it on node-b.
        "CreateSnapshot",
        "CreateVolume",
        "ControllerPublishVolume",
        // The reader, the restored claim and the snapshot go.
        "ControllerUnpublishVolume",
        "DeleteVolume",
        "DeleteSnapshot",
        "ControllerUnpublishVolume",
        "DeleteVolume",
    ]));
    assert_eq!(controller, want, "controller calls");

    let mut want = strs(&[
        "NodeGetInfo",
        "NodeGetCapabilities",
        // web-0 stages and publishes; web-1 only publishes.
        "NodeStageVolume",
        "NodePublishVolume",
        "NodePublishVolume",
        // solo-a.
        "NodeStageVolume",
        "NodePublishVolume",
        "NodeUnpublishVolume",
        "NodeUnstageVolume",
        // scale to 1: web-1 unpublishes only.
        "NodeUnpublishVolume",
    ]);
    want.extend(resize_a);
    want.extend(strs(&["NodeUnpublishVolume", "NodeUnstageVolume"]));
    assert_eq!(a, want, "node-a calls");

    assert_eq!(
        b,
        strs(&[
            "NodeGetInfo",
            "NodeGetCapabilities",
            "NodeStageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume",
            // The reader of the restored claim.
            "NodeStageVolume",
            "NodePublishVolume",
            "NodeUnpublishVolume",
            "NodeUnstageVolume",
        ]),
        "node-b calls"
    );

    // Delete took its volume; Retain left its PV Released; nothing else remains.
    assert_eq!(
        final_objects,
        (vec![("single".to_string(), PvPhase::Released)], 0)
    );
    assert!(said.iter().any(|l| l.starts_with("removed")), "{said:?}");
    assert_clean(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_driver_killed_mid_stage_is_restarted_and_the_pod_runs() {
    need_root!();
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = config(tmp.path(), 1);
    cfg.crash = Some(("node-a".into(), "stage".into()));
    let root = cfg.root.clone();
    let lab = Lab::start(cfg).await.unwrap();
    let result = async {
        lab.with(|w, t| w.apply(t, demo::STORAGE))?;
        lab.with(|w, t| w.apply(t, demo::WEB))?;
        lab.wait_for("web-0 to run", WAIT, |w| w.running("web-0"))
            .await?;
        // Its container writes the note once the volume is published.
        lab.wait_for("web-0's note", WAIT, |w| {
            w.targets("web-0")
                .first()
                .is_some_and(|t| Path::new(t).join("web-0.txt").exists())
        })
        .await?;
        Ok::<_, volplane_cli::lab::LabError>(())
    }
    .await;
    let restarts = lab.driver_restarts("node-a");
    let staged = lab.with(|w, _| w.staged_on("node-a"));
    let targets = lab.with(|w, _| w.targets("web-0"));
    let note = targets
        .first()
        .map(|t| Path::new(t).join("web-0.txt").exists());
    lab.down().await;
    result.unwrap();
    assert_eq!(restarts, 1, "the driver crashed once after staging");
    assert_eq!(staged, 1);
    assert_eq!(note, Some(true), "web-0 wrote its note on the volume");
    assert_clean(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_through_a_symlink_and_deregistration_when_the_socket_goes() {
    need_root!();
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = config(tmp.path(), 1);
    cfg.via_symlink = true;
    let root = cfg.root.clone();
    let lab = Lab::start(cfg).await.unwrap();
    let link = lab
        .layout
        .registry_dir("node-a")
        .join("volplane.csi.io-reg.sock");
    let registered = lab.with(|w, _| {
        let csinode = w
            .store
            .get(&ObjectKey::new(Kind::CsiNode, "", "node-a"))
            .cloned();
        let node = w
            .store
            .get(&ObjectKey::new(Kind::Node, "", "node-a"))
            .cloned();
        (csinode, node)
    });
    let is_link = std::fs::symlink_metadata(&link).map(|m| m.file_type().is_symlink());
    std::fs::remove_file(&link).unwrap();
    let gone = lab
        .wait_for("the driver to deregister", WAIT, |w| {
            !w.registered("node-a")
                && matches!(
                    w.store.get(&ObjectKey::new(Kind::CsiNode, "", "node-a")),
                    Some(Object::CsiNode(n)) if n.spec.drivers.is_empty()
                )
        })
        .await;
    let annotation_after =
        lab.with(
            |w, _| match w.store.get(&ObjectKey::new(Kind::Node, "", "node-a")) {
                Some(Object::Node(n)) => n
                    .metadata
                    .annotations
                    .get("csi.volume.kubernetes.io/nodeid")
                    .map(str::to_owned),
                _ => None,
            },
        );
    lab.down().await;

    assert!(is_link.unwrap(), "the registry holds a symlink");
    let (Some(Object::CsiNode(csinode)), Some(Object::Node(node))) = registered else {
        panic!("no CSINode or Node: {registered:?}")
    };
    let entry = csinode
        .driver("volplane.csi.io")
        .expect("the CSINode entry");
    assert_eq!(entry.node_id, "node-a");
    assert_eq!(
        &node.metadata.annotations["csi.volume.kubernetes.io/nodeid"],
        r#"{"volplane.csi.io":"node-a"}"#
    );
    gone.unwrap();
    assert_eq!(annotation_after, None, "the annotation's key is removed");
    assert_clean(&root);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lab_up_refuses_a_running_lab_and_recovers_a_killed_one() {
    need_root!();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("lab");
    let r = root.display().to_string();
    let up = || {
        Command::new(EXE)
            .args(["lab", "--root", &r, "up", "--nodes", "1"])
            .output()
            .unwrap()
    };
    let first = up();
    assert!(first.status.success(), "{first:?}");
    let apply = Command::new(EXE)
        .args(["lab", "--root", &r, "apply", "-f"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/storage.yaml"))
        .output()
        .unwrap();
    assert!(apply.status.success(), "{apply:?}");
    assert!(String::from_utf8_lossy(&apply.stdout).contains("CreateVolume"));

    let second = up();
    assert_eq!(second.status.code(), Some(1));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(err.contains("a lab is already running at"), "{err}");

    // The lab dies without cleaning up: its drivers, sockets and volumes stay.
    let pid: i32 = std::fs::read_to_string(root.join("lab.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    Command::new("sh")
        .args(["-c", &format!("kill -9 {pid}")])
        .status()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(root.join("pids").exists());

    // A new lab cleans up what the dead one left and works.
    let mut cfg = config(tmp.path(), 1);
    cfg.root = root.clone();
    let lab = Lab::start(cfg).await.unwrap();
    let bound = async {
        lab.with(|w, t| w.apply(t, demo::STORAGE))?;
        lab.wait_for("claim shared to bind", WAIT, |w| {
            w.claim("shared")
                .is_some_and(|c| c.phase() == PvcPhase::Bound)
        })
        .await
    }
    .await;
    lab.down().await;
    bound.unwrap();
    assert_clean(&root);
}

#[test]
fn without_root_the_demo_says_so_and_touches_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("lab");
    let mut cmd = if common::is_root() {
        // Drop to nobody to see what a user without root sees.
        if Command::new("setpriv").arg("--help").output().is_err() {
            common::skip(
                module_path!(),
                "running as root and setpriv is not installed",
            );
            return;
        }
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", EXE]);
        c
    } else {
        Command::new(EXE)
    };
    let out = cmd
        .args(["lab", "--root"])
        .arg(&root)
        .arg("demo")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("must run as root"), "{err}");
    assert!(err.contains("nothing was touched"), "{err}");
    assert!(!root.exists());
}
