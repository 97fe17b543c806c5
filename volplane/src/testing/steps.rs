//! The steps of [`Lifecycle`](super::Lifecycle), run straight through or
//! with the driver restarted between every two, and putting away what a
//! run made when it stops early.

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use super::{Csi, Error, Lifecycle, Report, csi};
use csi::controller_service_capability::rpc::Type as Ctl;
use csi::node_service_capability::rpc::Type as Nd;
use csi::volume_capability::access_mode::Mode;
use csi::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};

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

/// How often a call answered with a transient code is tried again, as a
/// CO retries it, and how long apart.
const RETRIES: u32 = 30;
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// A code a CO answers by trying again later: the storage busy or slow,
/// another call on the volume in flight.
pub(crate) fn transient(code: tonic::Code) -> bool {
    matches!(
        code,
        tonic::Code::Unavailable | tonic::Code::Aborted | tonic::Code::DeadlineExceeded
    )
}

/// A call, tried again while it is answered with a transient code.
macro_rules! retried {
    ($call:expr) => {{
        let mut tries = 0;
        loop {
            match $call.await {
                Err(e) if transient(e.code()) && tries < RETRIES => {
                    tries += 1;
                    tokio::time::sleep(RETRY_AFTER).await;
                }
                answer => break answer,
            }
        }
    }};
}

/// A call made twice: a CO repeats any call whose answer it did not get.
macro_rules! twice {
    ($report:expr, $step:literal, $call:expr) => {{
        $report.steps.push($step.to_string());
        let first = retried!($call).map_err(|e| Error::call($step, &e))?;
        retried!($call).map_err(|e| {
            Error::call(
                concat!($step, " sent again (must succeed as the first did)"),
                &e,
            )
        })?;
        first.into_inner()
    }};
}

/// The capability a lifecycle's volume is created and used with.
pub(crate) fn capability(block: bool) -> csi::VolumeCapability {
    let access_type = if block {
        AccessType::Block(BlockVolume::default())
    } else {
        AccessType::Mount(MountVolume::default())
    };
    csi::VolumeCapability {
        access_type: Some(access_type),
        access_mode: Some(AccessMode {
            mode: Mode::SingleNodeMultiWriter as i32,
        }),
    }
}

/// What a run has made so far, to put away if it stops early.
#[derive(Debug, Default)]
struct Made {
    volume: bool,
    attached: bool,
    staged: bool,
    published: BTreeSet<usize>,
}

/// What a run has learnt so far.
pub(crate) struct Run<'a> {
    l: &'a Lifecycle,
    stages: bool,
    attaches: bool,
    node_id: String,
    volume: csi::Volume,
    publish_context: HashMap<String, String>,
    made: Made,
    pub(crate) report: Report,
}

impl<'a> Run<'a> {
    /// Asks the driver what it does (capabilities, node id).
    pub(crate) async fn start(l: &'a Lifecycle, csi: &Csi) -> Result<Run<'a>, Error> {
        let (mut c, mut n) = (csi.controller.clone(), csi.node.clone());
        let ctl: Vec<i32> = c
            .controller_get_capabilities(csi::ControllerGetCapabilitiesRequest {})
            .await
            .map_err(|e| Error::call("ControllerGetCapabilities", &e))?
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
            .map_err(|e| Error::call("NodeGetCapabilities", &e))?
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
                    .map_err(|e| Error::call("NodeGetInfo", &e))?
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
            publish_context: HashMap::new(),
            made: Made::default(),
            report: Report::default(),
        })
    }

    /// The volume, once created.
    pub(crate) fn volume(&self) -> &csi::Volume {
        &self.volume
    }

    /// What ControllerPublish answered (empty when the driver does not attach).
    pub(crate) fn publish_context(&self) -> &HashMap<String, String> {
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

    /// The secrets the call `key` names carries.
    pub(crate) fn secret(&self, key: &str) -> HashMap<String, String> {
        self.l.secret(key)
    }

    /// The capability every call carries.
    pub(crate) fn capability(&self) -> csi::VolumeCapability {
        capability(self.l.is_block())
    }

    /// Takes `step` (nothing when the driver does not do it).
    pub(crate) async fn step(&mut self, csi: &Csi, step: Step) -> Result<(), Error> {
        match step {
            Step::Share => data_is_shared(&self.l.target(0), &self.l.target(1), self.l.is_block()),
            Step::Create | Step::Attach | Step::Detach | Step::Delete => {
                self.controller_step(csi, step).await
            }
            Step::Stage | Step::Publish(_) | Step::Unpublish(_) | Step::Unstage => {
                self.node_step(csi, step).await
            }
        }
    }

    /// Puts away what the run made, last made first, through the driver's
    /// own calls; their answers are not judged (the run already failed).
    pub(crate) async fn put_away(&mut self, csi: &Csi) {
        let pods: Vec<usize> = self.made.published.iter().copied().collect();
        let mut undo: Vec<Step> = pods.into_iter().map(Step::Unpublish).collect();
        if self.made.staged {
            undo.push(Step::Unstage);
        }
        if self.made.attached {
            undo.push(Step::Detach);
        }
        if self.made.volume {
            undo.push(Step::Delete);
        }
        let steps = std::mem::take(&mut self.report.steps);
        for step in undo {
            let _ = self.step(csi, step).await;
        }
        self.report.steps = steps;
    }

    /// A controller call: create, attach, detach, delete (each sent twice).
    async fn controller_step(&mut self, csi: &Csi, step: Step) -> Result<(), Error> {
        let mut c = csi.controller.clone();
        let report = &mut self.report;
        let id = self.volume.volume_id.clone();
        let capability = capability(self.l.is_block());
        match step {
            Step::Create => {
                let req = csi::CreateVolumeRequest {
                    name: self.l.volume_name().into(),
                    capacity_range: Some(csi::CapacityRange {
                        required_bytes: self.l.required_bytes(),
                        limit_bytes: 0,
                    }),
                    volume_capabilities: vec![capability],
                    parameters: self.l.parameters().clone(),
                    secrets: self.l.secret("CreateVolumeSecret"),
                    ..Default::default()
                };
                let answer = twice!(report, "CreateVolume", c.create_volume(req.clone()));
                self.volume = answer.volume.ok_or_else(|| {
                    Error::Violation("CreateVolume answered OK with no volume".into())
                })?;
                self.made.volume = true;
            }
            Step::Attach if self.attaches => {
                let req = csi::ControllerPublishVolumeRequest {
                    volume_id: id,
                    node_id: self.node_id.clone(),
                    volume_capability: Some(capability),
                    volume_context: self.volume.volume_context.clone(),
                    secrets: self.l.secret("ControllerPublishVolumeSecret"),
                    ..Default::default()
                };
                self.made.attached = true;
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
                    secrets: self.l.secret("ControllerUnpublishVolumeSecret"),
                };
                twice!(
                    report,
                    "ControllerUnpublishVolume",
                    c.controller_unpublish_volume(req.clone())
                );
                self.made.attached = false;
            }
            Step::Delete => {
                let req = csi::DeleteVolumeRequest {
                    volume_id: id,
                    secrets: self.l.secret("DeleteVolumeSecret"),
                };
                twice!(report, "DeleteVolume", c.delete_volume(req.clone()));
                self.made.volume = false;
                report.leftovers = leftovers(self.l.kubelet());
            }
            _ => {}
        }
        Ok(())
    }

    /// A node call: stage, publish, unpublish, unstage (each sent twice).
    async fn node_step(&mut self, csi: &Csi, step: Step) -> Result<(), Error> {
        let mut n = csi.node.clone();
        let staged = self.staging_path();
        let report = &mut self.report;
        let id = self.volume.volume_id.clone();
        let staging = self.l.staging(&id);
        let capability = capability(self.l.is_block());
        match step {
            Step::Stage if self.stages => {
                make_parent(&staging)?;
                let req = csi::NodeStageVolumeRequest {
                    volume_id: id,
                    publish_context: self.publish_context.clone(),
                    staging_target_path: staging.display().to_string(),
                    volume_capability: Some(capability),
                    volume_context: self.volume.volume_context.clone(),
                    secrets: self.l.secret("NodeStageVolumeSecret"),
                };
                self.made.staged = true;
                twice!(report, "NodeStageVolume", n.node_stage_volume(req.clone()));
            }
            Step::Publish(pod) => {
                let target = self.l.target(pod);
                make_parent(&target)?;
                let req = csi::NodePublishVolumeRequest {
                    volume_id: id,
                    publish_context: self.publish_context.clone(),
                    staging_target_path: staged,
                    target_path: target.display().to_string(),
                    volume_capability: Some(capability),
                    volume_context: self.volume.volume_context.clone(),
                    secrets: self.l.secret("NodePublishVolumeSecret"),
                    ..Default::default()
                };
                self.made.published.insert(pod);
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
                self.made.published.remove(&pod);
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
                self.made.staged = false;
                // The CO removes the directory it made (kubelet's UnmountDevice).
                let _ = std::fs::remove_dir_all(staging.parent().unwrap_or(&staging));
            }
            _ => {}
        }
        Ok(())
    }
}

fn make_parent(path: &Path) -> Result<(), Error> {
    let parent = path.parent().unwrap_or(path);
    std::fs::create_dir_all(parent)
        .map_err(|e| Error::Setup(format!("create {}: {e}", parent.display())))
}

/// What one pod writes, the other reads: a file in a filesystem, or the
/// first bytes of a raw block device.
fn data_is_shared(first: &Path, second: &Path, block: bool) -> Result<(), Error> {
    let (written, read) = if block {
        (first.to_path_buf(), second.to_path_buf())
    } else {
        (
            first.join("volplane-testing.txt"),
            second.join("volplane-testing.txt"),
        )
    };
    write(&written, block)
        .map_err(|e| Error::Violation(format!("write through {}: {e}", written.display())))?;
    let mut got = vec![0; CONTENT.len()];
    let read_back = std::fs::File::open(&read).and_then(|mut f| f.read_exact(&mut got));
    match read_back {
        Ok(()) if got == CONTENT => Ok(()),
        Ok(()) => Err(Error::Violation(format!(
            "{} (published from the same volume) holds other bytes than were written through {}",
            read.display(),
            written.display()
        ))),
        Err(e) => Err(Error::Violation(format!(
            "{} (published from the same volume) cannot be read: {e}",
            read.display()
        ))),
    }
}

fn write(path: &Path, block: bool) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(!block)
        .truncate(!block)
        .open(path)?;
    f.seek(SeekFrom::Start(0))?;
    f.write_all(CONTENT)?;
    f.sync_all()
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
