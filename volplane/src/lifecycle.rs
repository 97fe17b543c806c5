//! The steps of [`Lifecycle::run`](crate::testing::Lifecycle::run).

use std::path::Path;

use crate::testing::{Csi, Lifecycle, Report, csi};
use csi::controller_service_capability::rpc::Type as Ctl;
use csi::node_service_capability::rpc::Type as Nd;
use csi::volume_capability::access_mode::Mode;
use csi::volume_capability::{AccessMode, AccessType, MountVolume};

const CONTENT: &[u8] = b"written through one pod, read through another\n";

/// A call made twice: a CO repeats any call whose answer it did not get.
macro_rules! twice {
    ($report:expr, $step:literal, $call:expr) => {{
        $report.steps.push($step.to_string());
        let first = $call.await.map_err(|e| format!("{}: {e:?}", $step))?;
        $call.await.map_err(|e| {
            format!(
                "{} sent again (must succeed as the first did): {e:?}",
                $step
            )
        })?;
        first.into_inner()
    }};
}

fn capability() -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume::default())),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeMultiWriter as i32,
        }),
    }
}

pub(crate) async fn run(l: &Lifecycle, csi: &Csi) -> Result<Report, String> {
    let mut report = Report::default();
    let (mut c, mut n) = (csi.controller.clone(), csi.node.clone());
    let ctl: Vec<i32> = c
        .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
        .await
        .map_err(|e| format!("ControllerGetCapabilities: {e:?}"))?
        .into_inner()
        .capabilities
        .iter()
        .filter_map(|c| {
            let csi::controller_service_capability::Type::Rpc(r) = c.r#type.as_ref()?;
            Some(r.r#type)
        })
        .collect();
    let node_caps = n
        .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
        .await
        .map_err(|e| format!("NodeGetCapabilities: {e:?}"))?
        .into_inner()
        .capabilities;
    let stages = node_caps.iter().any(|c| {
        matches!(&c.r#type, Some(csi::node_service_capability::Type::Rpc(r)) if r.r#type == Nd::StageUnstageVolume as i32)
    });
    let attaches = ctl.contains(&(Ctl::PublishUnpublishVolume as i32));
    let node_id = match l.node_id() {
        Some(id) => id.to_string(),
        None => {
            n.node_get_info(csi::NodeGetInfoRequest {})
                .await
                .map_err(|e| format!("NodeGetInfo: {e:?}"))?
                .into_inner()
                .node_id
        }
    };
    let create = csi::CreateVolumeRequest {
        name: l.volume_name().into(),
        capacity_range: Some(csi::CapacityRange {
            required_bytes: l.bytes(),
            limit_bytes: 0,
        }),
        volume_capabilities: vec![capability()],
        parameters: l.parameters().clone(),
        ..Default::default()
    };
    let volume = twice!(report, "CreateVolume", c.create_volume(create.clone()))
        .volume
        .ok_or("CreateVolume answered no volume")?;
    let id = volume.volume_id.clone();
    let mut publish_context = Default::default();
    if attaches {
        let req = csi::ControllerPublishVolumeRequest {
            volume_id: id.clone(),
            node_id: node_id.clone(),
            volume_capability: Some(capability()),
            volume_context: volume.volume_context.clone(),
            ..Default::default()
        };
        publish_context = twice!(
            report,
            "ControllerPublishVolume",
            c.controller_publish_volume(req.clone())
        )
        .publish_context;
    }
    let staging = l.staging(&id);
    if stages {
        std::fs::create_dir_all(staging.parent().unwrap())
            .map_err(|e| format!("create {}: {e}", staging.display()))?;
        let req = csi::NodeStageVolumeRequest {
            volume_id: id.clone(),
            publish_context: publish_context.clone(),
            staging_target_path: staging.display().to_string(),
            volume_capability: Some(capability()),
            volume_context: volume.volume_context.clone(),
            ..Default::default()
        };
        twice!(report, "NodeStageVolume", n.node_stage_volume(req.clone()));
    }
    for pod in 0..2 {
        let target = l.target(pod);
        std::fs::create_dir_all(target.parent().unwrap())
            .map_err(|e| format!("create {}: {e}", target.display()))?;
        let req = csi::NodePublishVolumeRequest {
            volume_id: id.clone(),
            publish_context: publish_context.clone(),
            staging_target_path: if stages {
                staging.display().to_string()
            } else {
                String::new()
            },
            target_path: target.display().to_string(),
            volume_capability: Some(capability()),
            volume_context: volume.volume_context.clone(),
            ..Default::default()
        };
        twice!(
            report,
            "NodePublishVolume",
            n.node_publish_volume(req.clone())
        );
    }
    data_is_shared(&l.target(0), &l.target(1))?;
    for pod in 0..2 {
        let req = csi::NodeUnpublishVolumeRequest {
            volume_id: id.clone(),
            target_path: l.target(pod).display().to_string(),
        };
        twice!(
            report,
            "NodeUnpublishVolume",
            n.node_unpublish_volume(req.clone())
        );
    }
    if stages {
        let req = csi::NodeUnstageVolumeRequest {
            volume_id: id.clone(),
            staging_target_path: staging.display().to_string(),
        };
        twice!(
            report,
            "NodeUnstageVolume",
            n.node_unstage_volume(req.clone())
        );
        let _ = std::fs::remove_dir_all(staging.parent().unwrap());
    }
    if attaches {
        let req = csi::ControllerUnpublishVolumeRequest {
            volume_id: id.clone(),
            node_id,
            ..Default::default()
        };
        twice!(
            report,
            "ControllerUnpublishVolume",
            c.controller_unpublish_volume(req.clone())
        );
    }
    let req = csi::DeleteVolumeRequest {
        volume_id: id,
        ..Default::default()
    };
    twice!(report, "DeleteVolume", c.delete_volume(req.clone()));
    report.leftovers = leftovers(l.kubelet());
    Ok(report)
}

/// What one pod writes, the other reads.
fn data_is_shared(first: &Path, second: &Path) -> Result<(), String> {
    let written = first.join("volplane-testing.txt");
    std::fs::write(&written, CONTENT).map_err(|e| format!("write {}: {e}", written.display()))?;
    let read = second.join("volplane-testing.txt");
    match std::fs::read(&read) {
        Ok(b) if b == CONTENT => Ok(()),
        Ok(b) => Err(format!("{} holds {} other bytes", read.display(), b.len())),
        Err(e) => Err(format!(
            "{} (published from the same volume) cannot be read: {e}",
            read.display()
        )),
    }
}

/// Mounts below `kubelet` and publish targets still there.
fn leftovers(kubelet: &Path) -> Vec<String> {
    let real = std::fs::canonicalize(kubelet).unwrap_or_else(|_| kubelet.to_path_buf());
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out: Vec<String> = volplane_core::mountinfo::parse(&text)
        .unwrap_or_default()
        .into_iter()
        .filter(|m| Path::new(&m.mount_point).starts_with(&real))
        .map(|m| format!("mount {}", m.mount_point))
        .collect();
    let pods = real.join("pods");
    for pod in std::fs::read_dir(&pods).into_iter().flatten().flatten() {
        let csi = pod.path().join("volumes/kubernetes.io~csi");
        for v in std::fs::read_dir(&csi).into_iter().flatten().flatten() {
            if v.path().join("mount").exists() {
                out.push(format!("target {}", v.path().join("mount").display()));
            }
        }
    }
    out
}
