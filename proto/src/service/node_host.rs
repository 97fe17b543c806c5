//! The default node-side behaviour, on `volplane-host`: format-if-empty and
//! mount a device at the staging path, bind-mount it into workload targets,
//! unmount and clean up, grow filesystems, report usage.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use volplane_core::driver::{AccessType, Attributes, PublishPlan, StagePlan, VolumeUsage};
use volplane_core::{Code, Status};
use volplane_host::{Formatted, Host, HostError};

use super::{Blocking, unblock};

/// The publish-context key holding the device path for NodeStage.
pub const DEVICE_KEY: &str = "device";
/// Filesystem made when the capability names none.
pub const DEFAULT_FS: &str = "ext4";

/// A host error as the status a CO should see.
pub fn host_status(what: &str, e: HostError) -> Status {
    let code = match &e {
        HostError::OutsideRoots { .. } => Code::InvalidArgument,
        HostError::Refused(_) => Code::FailedPrecondition,
        _ => Code::Internal,
    };
    Status::new(code, format!("{what}: {e}"))
}

/// Host operations made async by running them on a [`Blocking`] pool.
#[derive(Clone)]
pub struct NodeHost {
    host: Arc<Host>,
    pool: Arc<dyn Blocking>,
}

impl std::fmt::Debug for NodeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHost")
            .field("roots", &self.host.roots())
            .finish()
    }
}

/// The device in a publish context: an absolute path under /dev.
fn device(context: &Attributes) -> Result<PathBuf, Status> {
    let d = context.get(DEVICE_KEY).ok_or_else(|| {
        Status::failed_precondition(format!(
            "publish_context has no {DEVICE_KEY:?}: ControllerPublishVolume must attach the volume first"
        ))
    })?;
    let p = volplane_core::path::absolute("publish_context.device", d)?;
    if !volplane_core::path::is_under(&p, "/dev") {
        return Err(Status::invalid(format!(
            "publish_context.device {d:?} is not a device under /dev"
        )));
    }
    Ok(PathBuf::from(p))
}

impl NodeHost {
    pub fn new(host: Arc<Host>, pool: Arc<dyn Blocking>) -> NodeHost {
        NodeHost { host, pool }
    }

    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }

    pub fn pool(&self) -> &Arc<dyn Blocking> {
        &self.pool
    }

    /// Runs `f` with the host on the blocking pool.
    pub async fn run<T, F>(&self, f: F) -> T
    where
        T: Send + 'static,
        F: FnOnce(&Host) -> T + Send + 'static,
    {
        let host = self.host.clone();
        unblock(&*self.pool, move || f(&host)).await
    }

    /// Stages a device from `publish_context["device"]`: for mount access,
    /// formats it only if it holds no filesystem, then mounts it at the
    /// staging path; for raw block access there is nothing to do on the node.
    pub async fn stage_device(&self, plan: &StagePlan) -> Result<(), Status> {
        let AccessType::Mount {
            fs_type,
            mount_flags,
            ..
        } = &plan.capability.access_type
        else {
            return Ok(());
        };
        let dev = device(&plan.publish_context)?;
        let fs = if fs_type.is_empty() {
            DEFAULT_FS.to_string()
        } else {
            fs_type.clone()
        };
        let flags = mount_flags.clone();
        let staging = PathBuf::from(&plan.staging_path);
        let readonly = plan.capability.access_mode.read_only();
        let what = format!("stage {} at {}", dev.display(), staging.display());
        self.run(move |h| {
            if h.mount_at(&staging)?.is_none() {
                match h.format_if_empty(&dev, &fs)? {
                    Formatted::Existing(found) if found != fs => {
                        return Err(HostError::Refused(format!(
                            "{} holds a {found} filesystem, not the {fs} asked for; it was left untouched",
                            dev.display()
                        )));
                    }
                    Formatted::Existing(_) => {
                        // Grown while unstaged (or online growth was refused): fill the device now.
                        if h.grow_unmounted(&dev)? {
                            tracing::info!(device = %dev.display(), "grew the filesystem to fill its device before mounting");
                        }
                    }
                    Formatted::Created(_) => {}
                }
            }
            h.mount(&dev, &staging, &fs, &flags, readonly)
        })
        .await
        .map_err(|e| host_status(&what, e))
    }

    /// Unmounts the staging path (the CO removes the directory it created).
    pub async fn unstage(&self, plan: &StagePlan) -> Result<(), Status> {
        let staging = PathBuf::from(&plan.staging_path);
        let what = format!("unstage {}", staging.display());
        self.run(move |h| h.unmount(&staging))
            .await
            .map_err(|e| host_status(&what, e))
    }

    /// Bind-mounts the staging path (mount access) or the device (raw block)
    /// at the target, read-only when asked.
    pub async fn publish(&self, plan: &PublishPlan) -> Result<(), Status> {
        let source = if plan.capability.access_type.is_block() {
            device(&plan.publish_context)?
        } else if plan.staging_path.is_empty() {
            return Err(Status::failed_precondition(
                "NodePublishVolume without a staging_target_path: this backend publishes from the staging path",
            ));
        } else {
            PathBuf::from(&plan.staging_path)
        };
        self.bind(source, &plan.target_path, plan.readonly).await
    }

    /// Bind-mounts `source` at `target`.
    pub async fn bind(&self, source: PathBuf, target: &str, readonly: bool) -> Result<(), Status> {
        let target = PathBuf::from(target);
        let what = format!("publish {} at {}", source.display(), target.display());
        self.run(move |h| h.bind(&source, &target, readonly))
            .await
            .map_err(|e| host_status(&what, e))
    }

    /// Unmounts the target and removes it.
    pub async fn unpublish(&self, plan: &PublishPlan) -> Result<(), Status> {
        let target = PathBuf::from(&plan.target_path);
        let what = format!("unpublish {}", target.display());
        self.run(move |h| {
            h.unmount(&target)?;
            h.remove(&target)
        })
        .await
        .map_err(|e| host_status(&what, e))
    }

    /// Grows the filesystem on the publish context's device (mounted at
    /// `mount_point`) to fill the device; returns the device size.
    pub async fn expand(
        &self,
        publish_context: &Attributes,
        mount_point: &str,
        block: bool,
    ) -> Result<u64, Status> {
        let dev = device(publish_context)?;
        let mount_point = PathBuf::from(mount_point);
        let what = format!("expand {} at {}", dev.display(), mount_point.display());
        self.run(move |h| {
            if !block {
                h.grow(&dev, &mount_point)?;
            }
            volplane_host::loopdev::size(&dev)
        })
        .await
        .map_err(|e| host_status(&what, e))
    }

    /// Usage of the filesystem at `path`, or the size of the device there.
    pub async fn usage(&self, path: &str, block: bool) -> Result<VolumeUsage, Status> {
        let path = PathBuf::from(path);
        let what = format!("stats of {}", path.display());
        self.run(move |h| {
            if block {
                let size = volplane_host::loopdev::size(Path::new(&h.confine(&path)?))?;
                return Ok(VolumeUsage {
                    total_bytes: size,
                    ..Default::default()
                });
            }
            h.usage(&path)
        })
        .await
        .map_err(|e| host_status(&what, e))
    }
}
