//! A driver that is killed is started again at once, and starts (issue 29):
//! none of its descriptors outlives it in a child, and a start that finds
//! the state lock held by a dying process waits for it instead of exiting.

mod common;

use std::time::{Duration, Instant};

use common::*;
use volplane_proto::csi;

/// Descriptors of `pid` above stderr that are not close-on-exec, with what
/// they are.
fn inheritable(pid: u32) -> Vec<String> {
    const O_CLOEXEC: u32 = 0o2_000_000;
    let mut out = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap() {
        let e = e.unwrap();
        let fd: u32 = e.file_name().to_string_lossy().parse().unwrap();
        let Ok(info) = std::fs::read_to_string(e.path()) else {
            continue; // closed meanwhile
        };
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            .unwrap_or(0);
        if fd > 2 && flags & O_CLOEXEC == 0 {
            let what = std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            out.push(format!("fd {fd} ({what})"));
        }
    }
    out
}

both_runtimes!(
    every_descriptor_is_close_on_exec,
    every_descriptor_is_close_on_exec_on
);

/// The state lock, the sockets, the runtime's own: a child (mkfs, blkid,
/// losetup) inherits none of them.
async fn every_descriptor_is_close_on_exec_on(rt: Runtime) {
    let d = Driver::start(rt);
    let mut csi = d.client().await;
    csi.identity
        .probe(csi::ProbeRequest::default())
        .await
        .unwrap();
    create_and_attach(&mut csi, "pvc-fds", "dir", multi_writer(), 1 << 20).await;
    // What the driver got from this test process (cargo's jobserver pipe)
    // is not the driver's to close.
    let ours = inheritable(std::process::id());
    let opened: Vec<String> = inheritable(d.pid())
        .into_iter()
        .filter(|fd| !ours.contains(fd))
        .collect();
    assert_eq!(opened, Vec::<String>::new());
}

/// The children of `pid` whose command name starts with `name`.
fn children_named(pid: u32, name: &str) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid …; comm may hold spaces and parentheses.
        let Some((head, tail)) = stat.rsplit_once(')') else {
            continue;
        };
        let comm = head.split_once('(').map_or("", |(_, c)| c);
        let ppid = tail.split_whitespace().nth(1).and_then(|p| p.parse().ok());
        if ppid == Some(pid) && comm.starts_with(name) {
            n += 1;
        }
    }
    n
}

both_runtimes!(
    a_driver_killed_while_mkfs_runs_always_starts_again,
    a_driver_killed_while_mkfs_runs_always_starts_again_on
);

/// Kills the driver while NodeStage runs mkfs on a fresh volume and starts
/// it again at once, `VOLPLANE_TEST_KILL_ROUNDS` times (10): it always
/// starts, the stage then succeeds, and nothing is left at the end.
async fn a_driver_killed_while_mkfs_runs_always_starts_again_on(rt: Runtime) {
    require_root!();
    let rounds = common::cluster::env_number("VOLPLANE_TEST_KILL_ROUNDS", 10);
    let mut d = Driver::start(rt);
    let (mut starts, mut refusals, mut during_mkfs) = (0, 0, 0);
    let mut slowest = Duration::ZERO;
    let mut retries = 0;
    for round in 0..rounds {
        let mut csi = d.client().await;
        let name = format!("pvc-kill-{round}");
        let a = create_and_attach(&mut csi, &name, "block", multi_writer(), 64 << 20).await;
        let stage = csi::NodeStageVolumeRequest {
            volume_id: a.id.clone(),
            publish_context: a.publish_context.clone(),
            staging_target_path: d.staging(&a.id),
            volume_capability: Some(multi_writer()),
            volume_context: a.context.clone(),
            ..Default::default()
        };
        let mut node = csi.node.clone();
        let call = tokio::spawn({
            let stage = stage.clone();
            async move { node.node_stage_volume(stage).await }
        });
        let pid = d.pid();
        let deadline = Instant::now() + Duration::from_secs(10);
        while children_named(pid, "mkfs") == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(200));
        }
        if children_named(pid, "mkfs") > 0 {
            during_mkfs += 1;
        }
        d.kill();
        let _ = call.await;
        let start = Instant::now();
        match d.try_spawn(None) {
            Ok(()) => starts += 1,
            Err(status) => {
                refusals += 1;
                eprintln!("round {round}: the restarted driver exited: {status}");
                d.spawn(None);
            }
        }
        slowest = slowest.max(start.elapsed());
        let csi = d.client().await;
        retries += staged_after_all(&csi, stage.clone()).await;
        tear_down(&csi, &a.id, &stage.staging_target_path).await;
    }
    eprintln!(
        "{}: {rounds} kills ({during_mkfs} while mkfs ran), {starts} starts, {refusals} \
         refusals, slowest start {} ms; NodeStage answered {retries} times with an error \
         (ABORTED: the stage the kill cut short is finished first) before it succeeded",
        rt.flag(),
        slowest.as_millis()
    );
    assert_eq!(refusals, 0);
    assert!(
        during_mkfs * 2 >= rounds,
        "mkfs was running at only {during_mkfs} of {rounds} kills"
    );
    assert_eq!(d.leftovers(), Vec::<String>::new());
}

/// NodeStage, retried (as the kubelet does) until it succeeds: the mkfs the
/// killed driver started may still hold the device for a moment.
/// How many times it was answered with an error first.
async fn staged_after_all(csi: &Csi, stage: csi::NodeStageVolumeRequest) -> usize {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut errors = 0;
    loop {
        let mut node = csi.node.clone();
        match node.node_stage_volume(stage.clone()).await {
            Ok(_) => return errors,
            Err(e) if Instant::now() < deadline => {
                if e.code() != tonic::Code::Aborted {
                    eprintln!("NodeStage again after a kill: {e:?}");
                }
                errors += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("NodeStage never succeeded after the kill: {e:?}"),
        }
    }
}

async fn tear_down(csi: &Csi, id: &str, staging: &str) {
    let (mut node, mut controller) = (csi.node.clone(), csi.controller.clone());
    node.node_unstage_volume(csi::NodeUnstageVolumeRequest {
        volume_id: id.into(),
        staging_target_path: staging.into(),
    })
    .await
    .expect("NodeUnstage");
    controller
        .controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
            volume_id: id.into(),
            node_id: NODE.into(),
            ..Default::default()
        })
        .await
        .expect("ControllerUnpublish");
    controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: id.into(),
            ..Default::default()
        })
        .await
        .expect("DeleteVolume");
    let _ = std::fs::remove_dir_all(std::path::Path::new(staging).parent().unwrap());
}
