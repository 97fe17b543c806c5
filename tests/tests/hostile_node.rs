//! The node side, tried as a hostile caller would: symlinks inside the
//! kubelet dir, devices and directories named in the caller's contexts,
//! paths that belong to another volume or to nobody, effects before checks,
//! a second instance. Each case is refused with the code the spec names, and
//! nothing outside the driver's own volumes changes: the mount table, the
//! loop devices, and the files around them are the same before and after.
//! Needs root (it makes loop devices and mounts).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use sha2::Digest;
use volplane_proto::csi;

const MIB: i64 = 1 << 20;

fn block_cap(mode: csi::volume_capability::access_mode::Mode) -> csi::VolumeCapability {
    capability(mode, true)
}

fn writer() -> csi::VolumeCapability {
    capability(
        csi::volume_capability::access_mode::Mode::SingleNodeWriter,
        false,
    )
}

/// What must not change: the mount table, loop devices and the files watched.
#[derive(Debug, PartialEq, Eq)]
struct Outside {
    mounts: BTreeSet<(String, String, String)>,
    loops: BTreeSet<(String, String)>,
    files: BTreeMap<PathBuf, String>,
}

/// True for what belongs to another test running beside this one (each
/// works in its own `/tmp/volplane-test-*` root).
fn another_tests(text: &str, mine: &Path) -> bool {
    text.contains("/volplane-test-") && !text.contains(&*mine.to_string_lossy())
}

/// The whole mount table and every loop device (but other tests' own),
/// and the files below `watched`.
fn snapshot(mine: &Path, watched: &[PathBuf]) -> Outside {
    let mine = mine.canonicalize().unwrap();
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mounts = volplane_core::mountinfo::parse(&text)
        .unwrap()
        .into_iter()
        .filter(|m| !another_tests(&m.mount_point, &mine))
        .map(|m| (m.mount_point, m.root, m.source))
        .collect();
    let mut loops = BTreeSet::new();
    for e in std::fs::read_dir("/sys/block").unwrap().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if let Ok(b) = std::fs::read_to_string(format!("/sys/block/{n}/loop/backing_file"))
            && !another_tests(&b, &mine)
        {
            loops.insert((n, b.trim().to_string()));
        }
    }
    let mut files = BTreeMap::new();
    for root in watched {
        for p in walk(root) {
            let digest = match std::fs::symlink_metadata(&p) {
                Ok(m) if m.is_file() => {
                    hex::encode(sha2::Sha256::digest(std::fs::read(&p).unwrap()))
                }
                Ok(m) if m.is_symlink() => format!("-> {:?}", std::fs::read_link(&p).unwrap()),
                Ok(_) => "dir".into(),
                Err(_) => "gone".into(),
            };
            files.insert(p, digest);
        }
    }
    Outside {
        mounts,
        loops,
        files,
    }
}

fn walk(p: &Path) -> Vec<PathBuf> {
    let mut out = vec![p.to_path_buf()];
    if std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) {
        for e in std::fs::read_dir(p).unwrap().flatten() {
            out.extend(walk(&e.path()));
        }
    }
    out
}

fn refused<T: std::fmt::Debug>(
    r: Result<T, tonic::Status>,
    code: tonic::Code,
    what: &str,
) -> String {
    let e = r.expect_err(what);
    assert_eq!(e.code(), code, "{what}: {e:?}");
    println!("refused as {:?}: {what}: {}", e.code(), e.message());
    e.message().to_string()
}

type Vol = Attached;

async fn volume(csi: &mut Csi, name: &str, kind: &str) -> Vol {
    create_and_attach(csi, name, kind, writer(), 32 * MIB).await
}

fn stage_req(v: &Vol, path: &str, cap: csi::VolumeCapability) -> csi::NodeStageVolumeRequest {
    csi::NodeStageVolumeRequest {
        volume_id: v.id.clone(),
        publish_context: v.publish_context.clone(),
        staging_target_path: path.into(),
        volume_capability: Some(cap),
        volume_context: v.context.clone(),
        ..Default::default()
    }
}

fn publish_req(
    v: &Vol,
    staging: &str,
    target: &str,
    cap: csi::VolumeCapability,
) -> csi::NodePublishVolumeRequest {
    csi::NodePublishVolumeRequest {
        volume_id: v.id.clone(),
        publish_context: v.publish_context.clone(),
        staging_target_path: staging.into(),
        target_path: target.into(),
        volume_capability: Some(cap),
        volume_context: v.context.clone(),
        ..Default::default()
    }
}

fn unpublish_req(id: &str, target: &str) -> csi::NodeUnpublishVolumeRequest {
    csi::NodeUnpublishVolumeRequest {
        volume_id: id.into(),
        target_path: target.into(),
    }
}

/// A loop device over a file outside every root: not the driver's.
struct Foreign {
    dev: String,
}

impl Foreign {
    fn attach(file: &Path) -> Foreign {
        std::fs::File::create(file)
            .unwrap()
            .set_len(16 << 20)
            .unwrap();
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(file)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        Foreign {
            dev: String::from_utf8(out.stdout).unwrap().trim().to_string(),
        }
    }

    fn blank(&self) -> bool {
        blank(&self.dev)
    }
}

/// Nothing was written on `dev`: blkid finds no signature.
fn blank(dev: &str) -> bool {
    Command::new("blkid")
        .args(["-p"])
        .arg(dev)
        .status()
        .unwrap()
        .code()
        == Some(2)
}

impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

both_runtimes!(
    symlinks_inside_the_kubelet_dir_are_never_followed,
    symlinks_inside_the_kubelet_dir_are_never_followed_on
);

async fn symlinks_inside_the_kubelet_dir_are_never_followed_on(rt: Runtime) {
    require_root!();
    let d = Driver::start(rt);
    let mut csi = d.client().await;
    let outside = d.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"not the driver's").unwrap();
    let raw = volume(&mut csi, "pvc-raw", "block").await;
    let single = csi::volume_capability::access_mode::Mode::SingleNodeWriter;
    let staging = d.staging(&raw.id);
    csi.node
        .node_stage_volume(stage_req(&raw, &staging, block_cap(single)))
        .await
        .unwrap();
    let fs = volume(&mut csi, "pvc-fs", "block").await;
    let fs_staging = d.staging(&fs.id);
    csi.node
        .node_stage_volume(stage_req(&fs, &fs_staging, writer()))
        .await
        .unwrap();

    let pods = d.kubelet().join("pods");
    std::fs::create_dir_all(pods.join("evil/volumes/kubernetes.io~csi/pv")).unwrap();
    let dangling = pods.join("evil/volumes/kubernetes.io~csi/pv/mount");
    std::os::unix::fs::symlink(outside.join("created"), &dangling).unwrap();
    std::os::unix::fs::symlink(d.state().join("volumes"), pods.join("into-volumes")).unwrap();
    std::os::unix::fs::symlink(&outside, pods.join("into-outside")).unwrap();
    let watched = [outside.clone(), d.state().join("volumes"), pods.clone()];
    let before = snapshot(d.root(), &watched);

    let cases: Vec<(PathBuf, &Vol, &str, csi::VolumeCapability, &str)> = vec![
        (
            dangling.clone(),
            &raw,
            &staging,
            block_cap(single),
            "raw-block publish to a dangling symlink",
        ),
        (
            pods.join(format!("into-volumes/{}.img", fs.id)),
            &fs,
            &fs_staging,
            writer(),
            "publish onto a symlink into the volumes dir",
        ),
        (
            pods.join("into-outside/mount"),
            &fs,
            &fs_staging,
            writer(),
            "publish below a symlink to outside",
        ),
    ];
    for (target, v, staging, cap, what) in &cases {
        let target = target.display().to_string();
        let r = csi
            .node
            .node_publish_volume(publish_req(v, staging, &target, cap.clone()))
            .await;
        refused(r, tonic::Code::FailedPrecondition, what);
        csi.node
            .node_unpublish_volume(unpublish_req(&v.id, &target))
            .await
            .unwrap();
    }
    assert!(
        !outside.join("created").exists(),
        "a file was created outside"
    );
    assert_eq!(
        snapshot(d.root(), &watched),
        before,
        "something outside the driver's volumes changed"
    );
}

both_runtimes!(
    caller_supplied_devices_and_directories_are_not_trusted,
    caller_supplied_devices_and_directories_are_not_trusted_on
);

async fn caller_supplied_devices_and_directories_are_not_trusted_on(rt: Runtime) {
    require_root!();
    let d = Driver::start(rt);
    let mut csi = d.client().await;
    let outside = d.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret"), b"host data").unwrap();
    let foreign = Foreign::attach(&outside.join("foreign.img"));
    // Both runtimes' tests run at once in this process: one link each.
    let shm_link = PathBuf::from(format!(
        "/dev/shm/volplane-evil-{}-{}",
        std::process::id(),
        rt.flag()
    ));
    let _ = std::fs::remove_file(&shm_link);
    std::os::unix::fs::symlink(&foreign.dev, &shm_link).unwrap();
    let mut v = volume(&mut csi, "pvc-real", "block").await;
    let staging = d.staging(&v.id);
    let never = Vol {
        id: "vol-0123456789abcdef0123".into(),
        context: [
            ("kind".into(), "dir".into()),
            ("path".into(), outside.display().to_string()),
        ]
        .into(),
        publish_context: [("device".into(), foreign.dev.clone())].into(),
    };
    let never_staging = d.staging(&never.id);
    let watched = [outside.clone(), d.state().join("volumes"), d.kubelet()];
    let before = snapshot(d.root(), &watched);

    for (dev, what) in [
        (
            foreign.dev.clone(),
            "a foreign loop device in publish_context",
        ),
        (
            shm_link.display().to_string(),
            "a /dev/shm symlink to a foreign device",
        ),
        ("/dev/null".to_string(), "a character device"),
    ] {
        v.publish_context.insert("device".into(), dev);
        refused(
            csi.node
                .node_stage_volume(stage_req(&v, &staging, writer()))
                .await,
            tonic::Code::FailedPrecondition,
            what,
        );
    }
    refused(
        csi.node
            .node_stage_volume(stage_req(&never, &never_staging, writer()))
            .await,
        tonic::Code::NotFound,
        "a volume id the driver never created, naming a host dir and a device",
    );
    let mut shaped = never;
    shaped.id = "pvc-not-ours".into();
    refused(
        csi.node
            .node_stage_volume(stage_req(&shaped, &never_staging, writer()))
            .await,
        tonic::Code::NotFound,
        "an id not of this driver's shape",
    );
    assert!(foreign.blank(), "the foreign device was written");
    assert_eq!(snapshot(d.root(), &watched), before);
    let _ = std::fs::remove_file(&shm_link);

    // A real dir volume whose context names a host directory stages its own.
    let dir = volume(&mut csi, "pvc-dir", "dir").await;
    let mut lying = Vol {
        context: dir.context.clone(),
        ..dir
    };
    lying
        .context
        .insert("path".into(), outside.display().to_string());
    let dir_staging = d.staging(&lying.id);
    csi.node
        .node_stage_volume(stage_req(&lying, &dir_staging, writer()))
        .await
        .unwrap();
    assert!(
        !Path::new(&dir_staging).join("secret").exists(),
        "the host dir was bound"
    );
    std::fs::write(Path::new(&dir_staging).join("mine"), b"x").unwrap();
    assert!(
        d.state()
            .join("volumes")
            .join(&lying.id)
            .join("mine")
            .exists()
    );
    csi.node
        .node_unstage_volume(csi::NodeUnstageVolumeRequest {
            volume_id: lying.id.clone(),
            staging_target_path: dir_staging.clone(),
        })
        .await
        .unwrap();
}

both_runtimes!(
    every_check_runs_before_any_effect,
    every_check_runs_before_any_effect_on
);

async fn every_check_runs_before_any_effect_on(rt: Runtime) {
    require_root!();
    let d = Driver::start(rt);
    let mut csi = d.client().await;
    let outside = d.root().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let v = volume(&mut csi, "pvc-blank", "block").await;
    let dev = v.publish_context["device"].clone();
    let plugins = d
        .kubelet()
        .join("plugins/kubernetes.io/csi/volplane.csi.io");
    std::fs::create_dir_all(&plugins).unwrap();
    std::os::unix::fs::symlink(&outside, plugins.join("linked")).unwrap();
    let busy = plugins.join("busy/globalmount");
    std::fs::create_dir_all(&busy).unwrap();
    std::fs::write(busy.join("keep"), b"someone's file").unwrap();
    let watched = [outside.clone(), d.kubelet()];
    let before = snapshot(d.root(), &watched);
    for (path, what) in [
        (
            plugins.join("linked/globalmount"),
            "a staging path below a symlink",
        ),
        (busy.clone(), "a staging directory that holds files"),
    ] {
        refused(
            csi.node
                .node_stage_volume(stage_req(&v, &path.display().to_string(), writer()))
                .await,
            tonic::Code::FailedPrecondition,
            what,
        );
        assert!(
            blank(&dev),
            "{what}: the device was formatted before the check"
        );
    }
    assert_eq!(snapshot(d.root(), &watched), before);
}

both_runtimes!(
    each_path_belongs_to_one_volume_and_foreign_mounts_are_left_alone,
    each_path_belongs_to_one_volume_and_foreign_mounts_are_left_alone_on
);

async fn each_path_belongs_to_one_volume_and_foreign_mounts_are_left_alone_on(rt: Runtime) {
    require_root!();
    let d = Driver::start(rt);
    let mut csi = d.client().await;
    let a = volume(&mut csi, "pvc-a", "dir").await;
    let b = volume(&mut csi, "pvc-b", "dir").await;
    let (sa, sb) = (d.staging(&a.id), d.staging(&b.id));
    for (v, s) in [(&a, &sa), (&b, &sb)] {
        csi.node
            .node_stage_volume(stage_req(v, s, writer()))
            .await
            .unwrap();
    }
    let t = d.target("pod-a", "pvc-a");
    csi.node
        .node_publish_volume(publish_req(&a, &sa, &t, writer()))
        .await
        .unwrap();
    // A foreign mount (not the driver's) at a kubelet-shaped staging path.
    let foreign = d
        .kubelet()
        .join("plugins/kubernetes.io/csi/volplane.csi.io/foreign/globalmount");
    std::fs::create_dir_all(&foreign).unwrap();
    assert!(
        Command::new("mount")
            .args(["-t", "tmpfs", "foreign"])
            .arg(&foreign)
            .status()
            .unwrap()
            .success()
    );
    std::fs::write(foreign.join("theirs"), b"x").unwrap();
    let foreign_s = foreign.display().to_string();
    let c = volume(&mut csi, "pvc-c", "dir").await;
    let watched = [d.state().join("volumes"), d.kubelet().join("plugins")];
    let before = snapshot(d.root(), &watched);

    refused(
        csi.node
            .node_publish_volume(publish_req(&b, &sb, &t, writer()))
            .await,
        tonic::Code::FailedPrecondition,
        "publishing volume b at volume a's target",
    );
    csi.node
        .node_unpublish_volume(unpublish_req(&b.id, &t))
        .await
        .unwrap();
    refused(
        csi.node
            .node_stage_volume(stage_req(&b, &sa, writer()))
            .await,
        tonic::Code::FailedPrecondition,
        "staging volume b at volume a's staging path (b is staged elsewhere)",
    );
    refused(
        csi.node
            .node_stage_volume(stage_req(&c, &sa, writer()))
            .await,
        tonic::Code::FailedPrecondition,
        "staging volume c at volume a's staging path",
    );
    refused(
        csi.node
            .node_stage_volume(stage_req(&c, &foreign_s, writer()))
            .await,
        tonic::Code::FailedPrecondition,
        "staging onto a mount point that is not the driver's",
    );
    csi.node
        .node_unstage_volume(csi::NodeUnstageVolumeRequest {
            volume_id: c.id.clone(),
            staging_target_path: foreign_s.clone(),
        })
        .await
        .unwrap();
    assert_eq!(
        snapshot(d.root(), &watched),
        before,
        "a's mounts or the foreign mount changed"
    );
    std::fs::write(Path::new(&t).join("through-a"), b"a").unwrap();
    assert!(
        d.state()
            .join("volumes")
            .join(&a.id)
            .join("through-a")
            .exists(),
        "a's target no longer reaches a"
    );

    // Two volumes staged at one fresh path at once: one wins, one mount.
    let shared = d
        .kubelet()
        .join("plugins/kubernetes.io/csi/volplane.csi.io/shared/globalmount");
    std::fs::create_dir_all(&shared).unwrap();
    let shared_s = shared.display().to_string();
    let d1 = volume(&mut csi, "pvc-d1", "dir").await;
    let d2 = volume(&mut csi, "pvc-d2", "dir").await;
    let (mut n1, mut n2) = (csi.node.clone(), csi.node.clone());
    let (r1, r2) = tokio::join!(
        n1.node_stage_volume(stage_req(&d1, &shared_s, writer())),
        n2.node_stage_volume(stage_req(&d2, &shared_s, writer()))
    );
    assert_eq!(
        [r1.is_ok(), r2.is_ok()].iter().filter(|ok| **ok).count(),
        1,
        "{r1:?} {r2:?}"
    );
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let stacked = volplane_core::mountinfo::parse(&text)
        .unwrap()
        .iter()
        .filter(|m| Path::new(&m.mount_point) == shared.canonicalize().unwrap())
        .count();
    assert_eq!(stacked, 1, "two mounts stacked at one staging path");
    let _ = Command::new("umount").arg(&foreign).status();
}

both_runtimes!(
    spec_codes_and_nothing_left_behind,
    spec_codes_and_nothing_left_behind_on
);

async fn spec_codes_and_nothing_left_behind_on(rt: Runtime) {
    require_root!();
    let d = Driver::start(rt);
    let mut csi = d.client().await;
    let huge = csi
        .controller
        .create_volume(csi::CreateVolumeRequest {
            name: "pvc-huge".into(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 1 << 60,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![writer()],
            parameters: params("block"),
            ..Default::default()
        })
        .await;
    refused(
        huge,
        tonic::Code::OutOfRange,
        "an image bigger than its filesystem",
    );
    let cap = csi
        .controller
        .get_capacity(csi::GetCapacityRequest::default())
        .await
        .expect("GetCapacity of the volumes dir")
        .into_inner();
    assert!(cap.available_capacity > 0, "{cap:?}");
    let left: Vec<_> = std::fs::read_dir(d.state().join("volumes"))
        .map(|r| r.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "a failed create left {left:?}");

    let v = volume(&mut csi, "pvc-codes", "dir").await;
    let staging = d.staging(&v.id);
    csi.node
        .node_stage_volume(stage_req(&v, &staging, writer()))
        .await
        .unwrap();
    for path in [
        "some/relative/path".to_string(),
        d.target("nobody", "pv"),
        "/etc".to_string(),
    ] {
        refused(
            csi.node
                .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
                    volume_id: v.id.clone(),
                    volume_path: path.clone(),
                    ..Default::default()
                })
                .await,
            tonic::Code::NotFound,
            &format!("NodeGetVolumeStats at {path}"),
        );
        refused(
            csi.node
                .node_expand_volume(csi::NodeExpandVolumeRequest {
                    volume_id: v.id.clone(),
                    volume_path: path.clone(),
                    ..Default::default()
                })
                .await,
            tonic::Code::NotFound,
            &format!("NodeExpandVolume at {path}"),
        );
    }
    let t = d.target("pod-full", "pv");
    std::fs::create_dir_all(&t).unwrap();
    std::fs::write(Path::new(&t).join("keep"), b"pod data").unwrap();
    refused(
        csi.node
            .node_publish_volume(publish_req(&v, &staging, &t, writer()))
            .await,
        tonic::Code::FailedPrecondition,
        "publishing onto a target that holds files",
    );
    csi.node
        .node_unpublish_volume(unpublish_req(&v.id, &t))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(Path::new(&t).join("keep")).unwrap(),
        b"pod data"
    );
}

both_runtimes!(
    one_instance_per_state_dir_and_endpoint,
    one_instance_per_state_dir_and_endpoint_on
);

async fn one_instance_per_state_dir_and_endpoint_on(rt: Runtime) {
    let d = Driver::start(rt);
    let mut csi = d.client().await;
    let other = d.root().join("other.sock");
    let out = d
        .serve_command(&d.state(), &format!("unix://{}", other.display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a second instance on one --state-dir started"
    );
    assert!(err.contains("holds the state directory"), "{err}");
    println!("refused: {}", err.trim());
    assert!(!other.exists());
    let out = d
        .serve_command(&d.root().join("state2"), &d.endpoint)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a second instance on one endpoint started"
    );
    assert!(err.contains("a live process already serves"), "{err}");
    println!("refused: {}", err.trim());
    assert!(
        d.root().join("csi.sock").exists(),
        "the live socket was removed"
    );
    csi.identity
        .probe(csi::ProbeRequest {})
        .await
        .expect("the first instance still serves");
}
