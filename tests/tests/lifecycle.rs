//! The volume lifecycle as kubelet drives it, against a real `volplane serve`
//! over a real unix socket, with real loop devices and mounts — and the same
//! lifecycle with the driver killed and restarted between every two steps.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use volplane_proto::csi;

/// What the lifecycle learns as it goes.
#[derive(Default)]
struct Volume {
    name: String,
    id: String,
    context: HashMap<String, String>,
    publish_context: HashMap<String, String>,
    staging: String,
    targets: Vec<String>,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Create,
    ControllerPublish,
    Stage,
    Publish(usize),
    WriteThrough(usize),
    ReadThrough(usize),
    Unpublish(usize),
    CheckStillStaged,
    Unstage,
    ReadStaged,
    ControllerUnpublish,
    Delete,
}

use Step::*;

const LIFECYCLE: &[Step] = &[
    Create,
    ControllerPublish,
    Stage,
    Publish(0),
    Publish(1),
    Publish(2),
    WriteThrough(0),
    ReadThrough(1),
    Unpublish(0),
    Unpublish(1),
    CheckStillStaged,
    Unpublish(2),
    Unstage,
    Stage,
    ReadStaged,
    Unstage,
    ControllerUnpublish,
    Delete,
];

impl Volume {
    fn named(name: &str) -> Volume {
        Volume {
            name: name.into(),
            ..Default::default()
        }
    }
}

/// True when something is mounted exactly at `path` (symlinks in it resolved,
/// as the mount table shows them).
fn mounted(path: &str) -> bool {
    let Ok(real) = std::fs::canonicalize(path) else {
        return false;
    };
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    volplane_core::mountinfo::parse(&text)
        .unwrap()
        .iter()
        .any(|m| std::path::Path::new(&m.mount_point) == real)
}

const CONTENT: &[u8] = b"written through one pod, read through another\n";

async fn run(d: &Driver, csi: &mut Csi, v: &mut Volume, step: Step) {
    match step {
        Create => {
            let vol = retry(|| {
                let mut c = csi.controller.clone();
                let v = &*v;
                async move {
                    c.create_volume(csi::CreateVolumeRequest {
                        name: v.name.clone(),
                        capacity_range: Some(csi::CapacityRange {
                            required_bytes: 64 << 20,
                            limit_bytes: 0,
                        }),
                        volume_capabilities: vec![multi_writer()],
                        parameters: params("block"),
                        ..Default::default()
                    })
                    .await
                }
            })
            .await
            .expect("CreateVolume")
            .into_inner()
            .volume
            .unwrap();
            assert_eq!(vol.capacity_bytes, 64 << 20);
            v.id = vol.volume_id;
            v.context = vol.volume_context;
            v.staging = d.staging(&v.id);
            v.targets = (0..3)
                .map(|i| d.target(&format!("pod-{i}"), &v.name))
                .collect();
        }
        ControllerPublish => {
            let r = retry(|| {
                let mut c = csi.controller.clone();
                let req = csi::ControllerPublishVolumeRequest {
                    volume_id: v.id.clone(),
                    node_id: NODE.into(),
                    volume_capability: Some(multi_writer()),
                    volume_context: v.context.clone(),
                    ..Default::default()
                };
                async move { c.controller_publish_volume(req).await }
            })
            .await
            .expect("ControllerPublishVolume")
            .into_inner();
            let dev = r
                .publish_context
                .get("device")
                .expect("publish_context has the device");
            assert!(dev.starts_with("/dev/loop"), "{dev}");
            v.publish_context = r.publish_context;
        }
        Stage => {
            retry(|| {
                let mut n = csi.node.clone();
                let req = stage_request(v);
                async move { n.node_stage_volume(req).await }
            })
            .await
            .expect("NodeStageVolume");
        }
        Publish(i) => {
            retry(|| {
                let mut n = csi.node.clone();
                let req = csi::NodePublishVolumeRequest {
                    volume_id: v.id.clone(),
                    publish_context: v.publish_context.clone(),
                    staging_target_path: v.staging.clone(),
                    target_path: v.targets[i].clone(),
                    volume_capability: Some(multi_writer()),
                    volume_context: v.context.clone(),
                    ..Default::default()
                };
                async move { n.node_publish_volume(req).await }
            })
            .await
            .expect("NodePublishVolume");
        }
        WriteThrough(i) => {
            std::fs::write(format!("{}/data.txt", v.targets[i]), CONTENT).unwrap();
            let f = std::fs::File::open(format!("{}/data.txt", v.targets[i])).unwrap();
            f.sync_all().unwrap();
        }
        ReadThrough(i) => {
            assert_eq!(
                std::fs::read(format!("{}/data.txt", v.targets[i])).unwrap(),
                CONTENT
            );
        }
        Unpublish(i) => {
            retry(|| {
                let mut n = csi.node.clone();
                let req = csi::NodeUnpublishVolumeRequest {
                    volume_id: v.id.clone(),
                    target_path: v.targets[i].clone(),
                };
                async move { n.node_unpublish_volume(req).await }
            })
            .await
            .expect("NodeUnpublishVolume");
            assert!(
                !std::path::Path::new(&v.targets[i]).exists(),
                "the driver removes the target it made"
            );
        }
        CheckStillStaged => {
            assert!(
                mounted(&v.staging),
                "unpublishing some pods must not unstage"
            );
        }
        Unstage => {
            retry(|| {
                let mut n = csi.node.clone();
                let req = csi::NodeUnstageVolumeRequest {
                    volume_id: v.id.clone(),
                    staging_target_path: v.staging.clone(),
                };
                async move { n.node_unstage_volume(req).await }
            })
            .await
            .expect("NodeUnstageVolume");
            assert!(!mounted(&v.staging), "unstaged");
        }
        ReadStaged => {
            assert_eq!(
                std::fs::read(format!("{}/data.txt", v.staging)).unwrap(),
                CONTENT,
                "data survived unstage and stage"
            );
        }
        ControllerUnpublish => {
            retry(|| {
                let mut c = csi.controller.clone();
                let req = csi::ControllerUnpublishVolumeRequest {
                    volume_id: v.id.clone(),
                    node_id: NODE.into(),
                    ..Default::default()
                };
                async move { c.controller_unpublish_volume(req).await }
            })
            .await
            .expect("ControllerUnpublishVolume");
        }
        Delete => {
            retry(|| {
                let mut c = csi.controller.clone();
                let req = csi::DeleteVolumeRequest {
                    volume_id: v.id.clone(),
                    ..Default::default()
                };
                async move { c.delete_volume(req).await }
            })
            .await
            .expect("DeleteVolume");
            // The CO removes the staging directory it created (kubelet's UnmountDevice).
            let _ = std::fs::remove_dir_all(std::path::Path::new(&v.staging).parent().unwrap());
        }
    }
}

fn stage_request(v: &Volume) -> csi::NodeStageVolumeRequest {
    csi::NodeStageVolumeRequest {
        volume_id: v.id.clone(),
        publish_context: v.publish_context.clone(),
        staging_target_path: v.staging.clone(),
        volume_capability: Some(multi_writer()),
        volume_context: v.context.clone(),
        ..Default::default()
    }
}

both_runtimes!(
    lifecycle_as_kubelet_drives_it_leaves_nothing_behind,
    lifecycle_as_kubelet_drives_it_leaves_nothing_behind_on
);

async fn lifecycle_as_kubelet_drives_it_leaves_nothing_behind_on(rt: Runtime) {
    require_root!();
    let mut d = Driver::start(rt);
    let mut csi = d.client().await;
    let mut v = Volume::named("pvc-lifecycle");
    for &step in LIFECYCLE {
        run(&d, &mut csi, &mut v, step).await;
    }
    assert_eq!(d.leftovers(), Vec::<String>::new());
    assert!(d.stop().success(), "SIGTERM is a clean exit");
    assert!(
        !d.root().join("csi.sock").exists(),
        "the socket is removed at shutdown"
    );
}

both_runtimes!(
    lifecycle_survives_a_kill_between_every_two_steps_and_in_the_middle_of_a_stage,
    lifecycle_survives_a_kill_between_every_two_steps_and_in_the_middle_of_a_stage_on
);

async fn lifecycle_survives_a_kill_between_every_two_steps_and_in_the_middle_of_a_stage_on(
    rt: Runtime,
) {
    require_root!();
    let mut d = Driver::start(rt);
    let mut csi = d.client().await;
    let mut v = Volume::named("pvc-lifecycle");
    let mut crashed_mid_stage = false;
    for (i, &step) in LIFECYCLE.iter().enumerate() {
        if matches!(step, Stage) && !crashed_mid_stage {
            // Die right after the mount, before the result is recorded.
            crashed_mid_stage = true;
            d.kill();
            d.spawn(Some("stage"));
            let mut c = d.client().await;
            let e = c.node.node_stage_volume(stage_request(&v)).await;
            assert!(e.is_err(), "the driver died mid-stage");
            d.wait_exit();
            d.spawn(None);
            csi = d.client().await;
        }
        run(&d, &mut csi, &mut v, step).await;
        if i + 1 < LIFECYCLE.len() {
            d.restart();
            csi = d.client().await;
        }
    }
    assert!(crashed_mid_stage);
    assert_eq!(d.leftovers(), Vec::<String>::new());
}

both_runtimes!(
    two_volumes_with_symlinked_roots_survive_a_kill_between_every_two_steps,
    two_volumes_with_symlinked_roots_survive_a_kill_between_every_two_steps_on
);

/// `--kubelet-dir` and `--state-dir` are symlinks: the records the driver
/// keeps (named as kubelet names paths) must still match the mount table
/// (which shows them resolved) after every restart, or mounts and loop
/// devices leak and DeleteVolume is refused forever.
async fn two_volumes_with_symlinked_roots_survive_a_kill_between_every_two_steps_on(rt: Runtime) {
    require_root!();
    let mut d = Driver::start_symlinked(rt);
    let mut csi = d.client().await;
    let mut vols = [Volume::named("pvc-a"), Volume::named("pvc-b")];
    for &step in LIFECYCLE {
        for v in vols.iter_mut() {
            run(&d, &mut csi, v, step).await;
            d.restart();
            csi = d.client().await;
        }
    }
    assert_ne!(vols[0].id, vols[1].id);
    assert_eq!(d.leftovers(), Vec::<String>::new());
}

both_runtimes!(
    a_panic_in_the_backend_stops_the_driver_instead_of_leaving_it_serving,
    a_panic_in_the_backend_stops_the_driver_instead_of_leaving_it_serving_on
);

/// A backend that panics mid-plan takes the pump down with it. A process
/// that kept serving would answer every later call "unavailable" forever,
/// and look alive to whoever runs it; it must exit instead, with its
/// socket removed, so that it is started again, and the operation it was
/// carrying out is finished at that start (its plan was recorded first).
async fn a_panic_in_the_backend_stops_the_driver_instead_of_leaving_it_serving_on(rt: Runtime) {
    require_root!();
    let mut d = Driver::start(rt);
    d.kill();
    d.spawn(Some("panic:create"));
    let request = csi::CreateVolumeRequest {
        name: "pvc-panic".into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 1 << 20,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![multi_writer()],
        parameters: params("dir"),
        ..Default::default()
    };
    let mut c = d.client().await;
    let e = c.controller.create_volume(request.clone()).await;
    assert!(e.is_err(), "the backend panicked mid-create: {e:?}");
    let status = d
        .exited_within(Duration::from_secs(20))
        .expect("a driver whose pump panicked must exit, not keep serving");
    assert!(!status.success(), "it exits with a failure: {status}");
    assert!(
        !d.root().join("csi.sock").exists(),
        "its socket is removed on the way out"
    );
    d.spawn(None);
    let mut c = d.client().await;
    let v = retry(|| {
        let mut c = c.controller.clone();
        let r = request.clone();
        async move { c.create_volume(r).await }
    })
    .await
    .expect("CreateVolume after the restart")
    .into_inner()
    .volume
    .expect("a volume");
    c.controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: v.volume_id,
            ..Default::default()
        })
        .await
        .expect("DeleteVolume");
    assert_eq!(d.leftovers(), Vec::<String>::new());
}
