//! Online expansion, raw block, read-only publishes and stats on the
//! reference driver, with real loop devices and filesystems.

mod common;

use common::*;
use volplane_proto::csi;
use volplane_proto::csi::volume_capability::access_mode::Mode;

async fn detach_and_delete(csi: &mut Csi, id: &str) {
    csi.controller
        .controller_unpublish_volume(csi::ControllerUnpublishVolumeRequest {
            volume_id: id.into(),
            node_id: NODE.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    csi.controller
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: id.into(),
            ..Default::default()
        })
        .await
        .unwrap();
}

fn fs_bytes(path: &str) -> u64 {
    let out = std::process::Command::new("df")
        .args(["-B1", "--output=size", path])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

both_runtimes!(
    online_expansion_grows_the_image_then_the_filesystem,
    online_expansion_grows_the_image_then_the_filesystem_on
);

async fn online_expansion_grows_the_image_then_the_filesystem_on(rt: Runtime) {
    require_root!();
    let d = Driver::start(rt);
    let mut csi = d.client().await;
    let cap = capability(Mode::SingleNodeWriter, false);
    let a = create_and_attach(&mut csi, "pvc-grow", "block", cap.clone(), 32 << 20).await;
    let staging = d.staging(&a.id);
    csi.node
        .node_stage_volume(csi::NodeStageVolumeRequest {
            volume_id: a.id.clone(),
            publish_context: a.publish_context.clone(),
            staging_target_path: staging.clone(),
            volume_capability: Some(cap.clone()),
            volume_context: a.context.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let before = fs_bytes(&staging);
    let r = csi
        .controller
        .controller_expand_volume(csi::ControllerExpandVolumeRequest {
            volume_id: a.id.clone(),
            capacity_range: Some(csi::CapacityRange {
                required_bytes: 128 << 20,
                limit_bytes: 0,
            }),
            volume_capability: Some(cap.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.capacity_bytes, 128 << 20);
    assert!(r.node_expansion_required);
    let expand = csi::NodeExpandVolumeRequest {
        volume_id: a.id.clone(),
        volume_path: staging.clone(),
        staging_target_path: staging.clone(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: 128 << 20,
            limit_bytes: 0,
        }),
        volume_capability: Some(cap.clone()),
        ..Default::default()
    };
    let stage = csi::NodeStageVolumeRequest {
        volume_id: a.id.clone(),
        publish_context: a.publish_context.clone(),
        staging_target_path: staging.clone(),
        volume_capability: Some(cap.clone()),
        volume_context: a.context.clone(),
        ..Default::default()
    };
    match csi.node.node_expand_volume(expand).await {
        Ok(n) => assert_eq!(n.into_inner().capacity_bytes, 128 << 20),
        Err(e) => {
            // Kernels refuse online ext4 growth without CAP_SYS_RESOURCE (as in
            // some sandboxes): the driver says FAILED_PRECONDITION, the CO
            // does not retry, and the next stage grows the filesystem.
            assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
            assert!(e.message().contains("CAP_SYS_RESOURCE"), "{e:?}");
            eprintln!("online growth refused here; growing at the next stage");
            csi.node
                .node_unstage_volume(csi::NodeUnstageVolumeRequest {
                    volume_id: a.id.clone(),
                    staging_target_path: staging.clone(),
                })
                .await
                .unwrap();
            csi.node.node_stage_volume(stage.clone()).await.unwrap();
        }
    }
    let after = fs_bytes(&staging);
    assert!(
        after > before * 3,
        "the filesystem grew: {before} -> {after}"
    );
    let stats = csi
        .node
        .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
            volume_id: a.id.clone(),
            volume_path: staging.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let bytes = stats
        .usage
        .iter()
        .find(|u| u.unit == csi::volume_usage::Unit::Bytes as i32)
        .unwrap();
    assert_eq!(bytes.total as u64, after);
    assert!(
        stats
            .usage
            .iter()
            .any(|u| u.unit == csi::volume_usage::Unit::Inodes as i32 && u.total > 0)
    );
    let missing = csi
        .node
        .node_get_volume_stats(csi::NodeGetVolumeStatsRequest {
            volume_id: "other".into(),
            volume_path: staging.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);

    csi.node
        .node_unstage_volume(csi::NodeUnstageVolumeRequest {
            volume_id: a.id.clone(),
            staging_target_path: staging.clone(),
        })
        .await
        .unwrap();
    detach_and_delete(&mut csi, &a.id).await;
    std::fs::remove_dir_all(std::path::Path::new(&staging).parent().unwrap()).unwrap();
    assert_eq!(d.leftovers(), Vec::<String>::new());
}

both_runtimes!(
    raw_block_publishes_the_device_and_read_only_publishes_refuse_writes,
    raw_block_publishes_the_device_and_read_only_publishes_refuse_writes_on
);

async fn raw_block_publishes_the_device_and_read_only_publishes_refuse_writes_on(rt: Runtime) {
    require_root!();
    let d = Driver::start(rt);
    let mut csi = d.client().await;

    // Raw block: the target is the device itself.
    let block = capability(Mode::SingleNodeWriter, true);
    let a = create_and_attach(&mut csi, "pvc-raw", "block", block.clone(), 16 << 20).await;
    let staging = d.staging(&a.id);
    let target = d.target("pod-raw", "pvc-raw");
    csi.node
        .node_stage_volume(csi::NodeStageVolumeRequest {
            volume_id: a.id.clone(),
            publish_context: a.publish_context.clone(),
            staging_target_path: staging.clone(),
            volume_capability: Some(block.clone()),
            volume_context: a.context.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    csi.node
        .node_publish_volume(csi::NodePublishVolumeRequest {
            volume_id: a.id.clone(),
            publish_context: a.publish_context.clone(),
            staging_target_path: staging.clone(),
            target_path: target.clone(),
            volume_capability: Some(block.clone()),
            volume_context: a.context.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    use std::os::unix::fs::FileTypeExt;
    assert!(
        std::fs::metadata(&target)
            .unwrap()
            .file_type()
            .is_block_device(),
        "the target is the device"
    );
    csi.node
        .node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
            volume_id: a.id.clone(),
            target_path: target.clone(),
        })
        .await
        .unwrap();
    csi.node
        .node_unstage_volume(csi::NodeUnstageVolumeRequest {
            volume_id: a.id.clone(),
            staging_target_path: staging.clone(),
        })
        .await
        .unwrap();
    detach_and_delete(&mut csi, &a.id).await;

    // Read-only publish of a filesystem volume.
    let fs = capability(Mode::SingleNodeMultiWriter, false);
    let b = create_and_attach(&mut csi, "pvc-ro", "block", fs.clone(), 16 << 20).await;
    let staging_b = d.staging(&b.id);
    let ro = d.target("pod-ro", "pvc-ro");
    csi.node
        .node_stage_volume(csi::NodeStageVolumeRequest {
            volume_id: b.id.clone(),
            publish_context: b.publish_context.clone(),
            staging_target_path: staging_b.clone(),
            volume_capability: Some(fs.clone()),
            volume_context: b.context.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    csi.node
        .node_publish_volume(csi::NodePublishVolumeRequest {
            volume_id: b.id.clone(),
            staging_target_path: staging_b.clone(),
            target_path: ro.clone(),
            volume_capability: Some(fs.clone()),
            readonly: true,
            volume_context: b.context.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let e = std::fs::write(format!("{ro}/x"), b"no").unwrap_err();
    assert_eq!(
        e.raw_os_error(),
        Some(30),
        "EROFS through the read-only target: {e}"
    );
    std::fs::write(format!("{staging_b}/x"), b"yes").expect("the staging mount stays writable");
    csi.node
        .node_unpublish_volume(csi::NodeUnpublishVolumeRequest {
            volume_id: b.id.clone(),
            target_path: ro.clone(),
        })
        .await
        .unwrap();
    csi.node
        .node_unstage_volume(csi::NodeUnstageVolumeRequest {
            volume_id: b.id.clone(),
            staging_target_path: staging_b.clone(),
        })
        .await
        .unwrap();
    detach_and_delete(&mut csi, &b.id).await;
    for s in [&staging, &staging_b] {
        std::fs::remove_dir_all(std::path::Path::new(s).parent().unwrap()).unwrap();
    }
    assert_eq!(d.leftovers(), Vec::<String>::new());
}

both_runtimes!(
    a_device_holding_a_filesystem_is_never_reformatted,
    a_device_holding_a_filesystem_is_never_reformatted_on
);

async fn a_device_holding_a_filesystem_is_never_reformatted_on(rt: Runtime) {
    require_root!();
    let d = Driver::start(rt);
    let mut csi = d.client().await;
    let cap = capability(Mode::SingleNodeWriter, false);
    let a = create_and_attach(&mut csi, "pvc-xfs", "block", cap.clone(), 32 << 20).await;
    let dev = a.publish_context["device"].clone();
    // Someone put a different filesystem (with data) on the device.
    assert!(
        std::process::Command::new("mkfs.ext2")
            .args(["-q", &dev])
            .status()
            .unwrap()
            .success()
    );
    let staging = d.staging(&a.id);
    let mut ext4 = cap.clone();
    if let Some(csi::volume_capability::AccessType::Mount(m)) = ext4.access_type.as_mut() {
        m.fs_type = "ext4".into();
    }
    let e = csi
        .node
        .node_stage_volume(csi::NodeStageVolumeRequest {
            volume_id: a.id.clone(),
            publish_context: a.publish_context.clone(),
            staging_target_path: staging.clone(),
            volume_capability: Some(ext4),
            volume_context: a.context.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("ext2"), "{e:?}");
    let probe = std::process::Command::new("blkid")
        .args(["-p", "-o", "value", "-s", "TYPE", &dev])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&probe.stdout).trim(),
        "ext2",
        "left untouched"
    );
    detach_and_delete(&mut csi, &a.id).await;
    std::fs::remove_dir_all(std::path::Path::new(&staging).parent().unwrap()).unwrap();
    assert_eq!(d.leftovers(), Vec::<String>::new());
}
