//! The steps of [`Lifecycle`](crate::testing::Lifecycle), run straight
//! through or with the driver restarted between every two.

use std::path::Path;

use crate::testing::{Csi, Lifecycle, Report, csi};
use csi::controller_service_capability::rpc::Type as Ctl;
use csi::node_service_capability::rpc::Type as Nd;
use csi::volume_capability::access_mode::Mode;
use csi::volume_capability::{AccessMode, AccessType, MountVolume};

const CONTENT: &[u8] = b"written through one pod, read through another\n";

/// One step of a volume's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Create,
    Attach,
    Stage,
    Publish(usize),
    Share,
    Unpublish(usize),
    Unstage,
    Detach,
    Delete,
}

pub(crate) const STEPS: &[Step] = &[
    Step::Create,
    Step::Attach,
    Step::Stage,
    Step::Publish(0),
    Step::Publish(1),
    Step::Share,
    Step::Unpublish(0),
    Step::Unpublish(1),
    Step::Unstage,
    Step::Detach,
    Step::Delete,
];

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

pub(crate) fn capability() -> csi::VolumeCapability {
    csi::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume::default())),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeMultiWriter as i32,
        }),
    }
}

/// What a run has learnt so far.
pub(crate) struct Run<'a> {
    l: &'a Lifecycle,
    stages: bool,
    attaches: bool,
    node_id: String,
    volume: csi::Volume,
    publish_context: std::collections::HashMap<String, String>,
    pub(crate) report: Report,
}

impl<'a> Run<'a> {
    /// Asks the driver what it does (capabilities, node id).
    pub(crate) async fn start(l: &'a Lifecycle, csi: &Csi) -> Result<Run<'a>, String> {
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
        let stages = n
            .node_get_capabilities(csi::NodeGetCapabilitiesRequest {})
            .await
            .map_err(|e| format!("NodeGetCapabilities: {e:?}"))?
            .into_inner()
            .capabilities
            .iter()
            .any(|c| {
                matches!(&c.r#type, Some(csi::node_service_capability::Type::Rpc(r))
                    if r.r#type == Nd::StageUnstageVolume as i32)
            });
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
        Ok(Run {
            l,
            stages,
            attaches: ctl.contains(&(Ctl::PublishUnpublishVolume as i32)),
            node_id,
            volume: csi::Volume::default(),
            publish_context: Default::default(),
            report: Report::default(),
        })
    }

    /// The volume, once created.
    pub(crate) fn volume(&self) -> &csi::Volume {
        &self.volume
    }

    /// What ControllerPublish answered (empty when the driver does not attach).
    pub(crate) fn publish_context(&self) -> &std::collections::HashMap<String, String> {
        &self.publish_context
    }

    /// True when the driver stages (STAGE_UNSTAGE_VOLUME).
    pub(crate) fn stages(&self) -> bool {
        self.stages
    }

    /// The staging path NodePublish names (empty when the driver does not stage).
    pub(crate) fn staging_path(&self) -> String {
        if self.stages {
            self.l.staging(&self.volume.volume_id).display().to_string()
        } else {
            String::new()
        }
    }

    /// Takes `step` (nothing when the driver does not do it).
    pub(crate) async fn step(&mut self, csi: &Csi, step: Step) -> Result<(), String> {
        match step {
            Step::Share => data_is_shared(&self.l.target(0), &self.l.target(1)),
            Step::Create | Step::Attach | Step::Detach | Step::Delete => {
                self.controller_step(csi, step).await
            }
            Step::Stage | Step::Publish(_) | Step::Unpublish(_) | Step::Unstage => {
                self.node_step(csi, step).await
            }
        }
    }

    /// A controller call: create, attach, detach, delete (each sent twice).
    async fn controller_step(&mut self, csi: &Csi, step: Step) -> Result<(), String> {
        let mut c = csi.controller.clone();
        let report = &mut self.report;
        let id = self.volume.volume_id.clone();
        match step {
            Step::Create => {
                let req = csi::CreateVolumeRequest {
                    name: self.l.volume_name().into(),
                    capacity_range: Some(csi::CapacityRange {
                        required_bytes: self.l.bytes(),
                        limit_bytes: 0,
                    }),
                    volume_capabilities: vec![capability()],
                    parameters: self.l.parameters().clone(),
                    ..Default::default()
                };
                self.volume = twice!(report, "CreateVolume", c.create_volume(req.clone()))
                    .volume
                    .ok_or("CreateVolume answered no volume")?;
            }
            Step::Attach if self.attaches => {
                let req = csi::ControllerPublishVolumeRequest {
                    volume_id: id,
                    node_id: self.node_id.clone(),
                    volume_capability: Some(capability()),
                    volume_context: self.volume.volume_context.clone(),
                    ..Default::default()
                };
                let answer = twice!(
                    report,
                    "ControllerPublishVolume",
                    c.controller_publish_volume(req.clone())
                );
                self.publish_context = answer.publish_context;
            }
            Step::Detach if self.attaches => {
                let req = csi::ControllerUnpublishVolumeRequest {
                    volume_id: id,
                    node_id: self.node_id.clone(),
                    ..Default::default()
                };
                twice!(
                    report,
                    "ControllerUnpublishVolume",
                    c.controller_unpublish_volume(req.clone())
                );
            }
            Step::Delete => {
                let req = csi::DeleteVolumeRequest {
                    volume_id: id,
                    ..Default::default()
                };
                twice!(report, "DeleteVolume", c.delete_volume(req.clone()));
                report.leftovers = leftovers(self.l.kubelet());
            }
            _ => {}
        }
        Ok(())
    }

    /// A node call: stage, publish, unpublish, unstage (each sent twice).
    async fn node_step(&mut self, csi: &Csi, step: Step) -> Result<(), String> {
        let mut n = csi.node.clone();
        let report = &mut self.report;
        let id = self.volume.volume_id.clone();
        let staging = self.l.staging(&id);
        match step {
            Step::Stage if self.stages => {
                make_parent(&staging)?;
                let req = csi::NodeStageVolumeRequest {
                    volume_id: id,
                    publish_context: self.publish_context.clone(),
                    staging_target_path: staging.display().to_string(),
                    volume_capability: Some(capability()),
                    volume_context: self.volume.volume_context.clone(),
                    ..Default::default()
                };
                twice!(report, "NodeStageVolume", n.node_stage_volume(req.clone()));
            }
            Step::Publish(pod) => {
                let target = self.l.target(pod);
                make_parent(&target)?;
                let staged = if self.stages {
                    staging.display().to_string()
                } else {
                    String::new()
                };
                let req = csi::NodePublishVolumeRequest {
                    volume_id: id,
                    publish_context: self.publish_context.clone(),
                    staging_target_path: staged,
                    target_path: target.display().to_string(),
                    volume_capability: Some(capability()),
                    volume_context: self.volume.volume_context.clone(),
                    ..Default::default()
                };
                twice!(
                    report,
                    "NodePublishVolume",
                    n.node_publish_volume(req.clone())
                );
            }
            Step::Unpublish(pod) => {
                let req = csi::NodeUnpublishVolumeRequest {
                    volume_id: id,
                    target_path: self.l.target(pod).display().to_string(),
                };
                twice!(
                    report,
                    "NodeUnpublishVolume",
                    n.node_unpublish_volume(req.clone())
                );
            }
            Step::Unstage if self.stages => {
                let req = csi::NodeUnstageVolumeRequest {
                    volume_id: id,
                    staging_target_path: staging.display().to_string(),
                };
                twice!(
                    report,
                    "NodeUnstageVolume",
                    n.node_unstage_volume(req.clone())
                );
                // The CO removes the directory it made (kubelet's UnmountDevice).
                let _ = std::fs::remove_dir_all(staging.parent().unwrap_or(&staging));
            }
            _ => {}
        }
        Ok(())
    }
}

fn make_parent(path: &Path) -> Result<(), String> {
    let parent = path.parent().unwrap_or(path);
    std::fs::create_dir_all(parent).map_err(|e| format!("create {}: {e}", parent.display()))
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
