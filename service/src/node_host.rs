//! The default node-side behaviour, on `volplane-host`: format-if-empty and
//! mount a volume's proven device (or bind its directory) at the staging
//! path, bind-mount it into workload targets, unmount and clean up, grow
//! filesystems, report usage. Paths are resolved beneath the host's roots
//! by descriptor; nothing is mounted over, or unmounted from, a path whose
//! mount is not the volume's own.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use volplane_core::driver::{AccessType, PublishPlan, StagePlan, VolumeUsage};
use volplane_core::{Code, Status};
use volplane_host::{Formatted, Host, HostError, Identity};

use crate::{Blocking, unblock};

/// The publish-context key a controller's publish context may name the
/// device under. It is only a hint: a backend proves which device holds a
/// volume ([`Backend::node_source`](crate::Backend::node_source)).
pub const DEVICE_KEY: &str = "device";
/// Filesystem made when the capability names none.
pub const DEFAULT_FS: &str = "ext4";

/// A host error as the status a CO should see.
pub fn host_status(what: &str, e: HostError) -> Status {
    let code = match &e {
        HostError::OutsideRoots { .. } => Code::InvalidArgument,
        HostError::Refused(_) => Code::FailedPrecondition,
        HostError::NotFound(_) => Code::NotFound,
        HostError::NoSpace(_) => Code::ResourceExhausted,
        HostError::OutOfRange(_) => Code::OutOfRange,
        HostError::Stopped(_) | HostError::Busy(_) => Code::Unavailable,
        HostError::Io { source, .. } if source.kind() == std::io::ErrorKind::ResourceBusy => {
            Code::Unavailable
        }
        _ => Code::Internal,
    };
    let said = e.to_string();
    if said.contains(what) {
        // "volume v: volume v does not exist" says it twice.
        return Status::new(code, said);
    }
    Status::new(code, format!("{what}: {said}"))
}

/// Host operations made async by running them on a [`Blocking`] pool.
#[derive(Clone)]
pub struct NodeHost {
    host: Arc<Host>,
    pool: Arc<dyn Blocking>,
    incarnation: u64,
}

impl std::fmt::Debug for NodeHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeHost")
            .field("roots", &self.host.roots())
            .finish()
    }
}

/// Where a volume's data is on this node, as the backend proved it: the
/// node side mounts, formats or binds nothing else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeSource {
    /// A block device holding the volume (formatted if empty, then mounted;
    /// or published as is for raw block access).
    Device(PathBuf),
    /// A directory beneath one of the host's roots holding the volume
    /// (bind-mounted).
    Directory(PathBuf),
}

impl NodeSource {
    fn shown(&self) -> String {
        match self {
            NodeSource::Device(p) | NodeSource::Directory(p) => p.display().to_string(),
        }
    }
}

/// The source opened and checked on the host.
enum Held {
    Device(volplane_host::Device),
    Directory(volplane_host::Opened),
}

impl Held {
    fn open(h: &Host, source: &NodeSource) -> volplane_host::Result<Held> {
        Ok(match source {
            NodeSource::Device(p) => Held::Device(h.device(p)?),
            NodeSource::Directory(p) => {
                let dir = h.open(p)?;
                if !dir.stat()?.is_dir() {
                    return Err(HostError::Refused(format!(
                        "{} is not a directory",
                        p.display()
                    )));
                }
                Held::Directory(dir)
            }
        })
    }

    fn identity(&self) -> volplane_host::Result<Identity> {
        match self {
            Held::Device(d) => Ok(d.identity()),
            Held::Directory(d) => Ok(Identity::of(&d.stat()?)),
        }
    }
}

fn fs_of(fs_type: &str) -> String {
    if fs_type.is_empty() {
        DEFAULT_FS.to_string()
    } else {
        fs_type.to_string()
    }
}

/// Formats `dev` if it holds nothing, refuses a different filesystem, grows
/// one that is smaller than its device; then mounts it at `target`.
fn mount_device(
    h: &Host,
    dev: &volplane_host::Device,
    target: &Path,
    fs: &str,
    flags: &[String],
    readonly: bool,
) -> volplane_host::Result<()> {
    // Every check on the target before anything is written to the device.
    let t = h.create_dir(target)?;
    if volplane_host::check_target(&t, dev.identity())? {
        return Ok(());
    }
    drop(t);
    match h.format_if_empty(dev, fs)? {
        Formatted::Existing(found) if found != fs => {
            return Err(HostError::Refused(format!(
                "{} holds a {found} filesystem, not the {fs} asked for; it was left untouched",
                dev.path().display()
            )));
        }
        Formatted::Existing(_) => {
            // Grown while unstaged (or online growth was refused): fill the device now.
            if h.grow_unmounted(dev)? {
                tracing::info!(device = %dev.path().display(), "grew the filesystem to fill its device before mounting");
            }
        }
        Formatted::Created(_) => {}
    }
    h.mount(dev, target, fs, flags, readonly)
}

impl NodeHost {
    /// Host operations confined to `host`'s roots, run on `pool`.
    pub fn new(host: Arc<Host>, pool: Arc<dyn Blocking>) -> NodeHost {
        NodeHost {
            host,
            pool,
            incarnation: 0,
        }
    }

    /// The same host, for incarnation `n` of the driver.
    pub fn for_incarnation(mut self, n: u64) -> NodeHost {
        self.incarnation = n;
        self
    }

    /// This driver process's incarnation: a number recorded durably at
    /// start, before anything is served, and larger than that of every
    /// earlier process over the same state directory (0 when the state is
    /// kept in memory only). A **fencing token**: a backend whose storage
    /// can keep a number passes it with every change, and the storage
    /// refuses a change from an incarnation older than the newest it has
    /// seen, so a call of a killed process still in flight cannot act
    /// after its successor (a create landing after the successor's
    /// delete).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The confined host itself, for a backend's own checks.
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }

    /// The blocking pool its operations run on.
    pub fn pool(&self) -> &Arc<dyn Blocking> {
        &self.pool
    }

    /// Runs `f` with the host on the blocking pool; a pool that shuts down
    /// before running it answers [`HostError::Stopped`].
    pub async fn run<T, F>(&self, f: F) -> volplane_host::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Host) -> volplane_host::Result<T> + Send + 'static,
    {
        let host = self.host.clone();
        unblock(&*self.pool, move || f(&host))
            .await
            .unwrap_or_else(|| {
                Err(HostError::Stopped(
                    "the blocking pool stopped before running the operation".into(),
                ))
            })
    }

    /// Runs `f` on the blocking pool: a storage API client that blocks (a
    /// synchronous HTTP or SDK call) keeps the runtime's threads free. A
    /// pool that shuts down before running it answers UNAVAILABLE.
    pub async fn blocking<T, F>(&self, f: F) -> Result<T, Status>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, Status> + Send + 'static,
    {
        unblock(&*self.pool, f).await.unwrap_or_else(|| {
            Err(Status::new(
                volplane_core::Code::Unavailable,
                "the blocking pool stopped before running the call",
            ))
        })
    }

    /// Stages `source` at the staging path: for mount access, a device is
    /// formatted only if it holds no filesystem and mounted, a directory is
    /// bind-mounted; for raw block access a device needs nothing on the node.
    pub async fn stage(&self, plan: &StagePlan, source: NodeSource) -> Result<(), Status> {
        let what = format!(
            "stage volume {} ({}) at {}",
            plan.volume_id,
            source.shown(),
            plan.staging_path
        );
        let staging = PathBuf::from(&plan.staging_path);
        let access = plan.capability.access_type.clone();
        let readonly = plan.capability.access_mode.read_only();
        self.run(move |h| {
            let held = Held::open(h, &source)?;
            match (access, held) {
                (AccessType::Block, Held::Device(_)) => Ok(()),
                (AccessType::Block, Held::Directory(_)) => Err(HostError::Refused(
                    "a directory volume cannot be staged for raw block access".into(),
                )),
                (
                    AccessType::Mount {
                        fs_type,
                        mount_flags,
                        ..
                    },
                    Held::Device(dev),
                ) => mount_device(h, &dev, &staging, &fs_of(&fs_type), &mount_flags, readonly),
                (AccessType::Mount { .. }, Held::Directory(dir)) => {
                    h.bind(&dir, &staging, readonly)
                }
            }
        })
        .await
        .map_err(|e| host_status(&what, e))
    }

    /// Unmounts the staging path, as long as what is mounted there comes
    /// from `source` (when the backend could still say what that is).
    pub async fn unstage(
        &self,
        plan: &StagePlan,
        source: Option<NodeSource>,
    ) -> Result<(), Status> {
        let staging = PathBuf::from(&plan.staging_path);
        let what = format!(
            "unstage volume {} from {}",
            plan.volume_id,
            staging.display()
        );
        self.run(move |h| {
            let expected = expected(h, source.as_ref())?;
            h.unmount(&staging, expected)
        })
        .await
        .map_err(|e| host_status(&what, e))
    }

    /// Publishes at the target: bind-mounts the staging path (mount access;
    /// it must hold this volume's mount), or the device itself (raw block);
    /// a driver that does not stage mounts `source` at the target directly.
    pub async fn publish(&self, plan: &PublishPlan, source: NodeSource) -> Result<(), Status> {
        let what = format!("publish volume {} at {}", plan.volume_id, plan.target_path);
        let target = PathBuf::from(&plan.target_path);
        let staging = (!plan.staging_path.is_empty()).then(|| PathBuf::from(&plan.staging_path));
        let access = plan.capability.access_type.clone();
        let readonly = plan.readonly;
        self.run(move |h| {
            let held = Held::open(h, &source)?;
            match (access, held, staging) {
                (AccessType::Block, Held::Device(dev), _) => h.bind_device(&dev, &target, readonly),
                (AccessType::Block, Held::Directory(_), _) => Err(HostError::Refused(
                    "a directory volume cannot be published for raw block access".into(),
                )),
                (AccessType::Mount { .. }, held, Some(staging)) => {
                    let stage = h.open(&staging)?;
                    let st = stage.stat()?;
                    if !st.mount_root || !held.identity()?.matches(&st) {
                        return Err(HostError::Refused(format!(
                            "{} does not hold this volume's mount; NodeStageVolume it first",
                            staging.display()
                        )));
                    }
                    h.bind(&stage, &target, readonly)
                }
                (
                    AccessType::Mount {
                        fs_type,
                        mount_flags,
                        ..
                    },
                    Held::Device(dev),
                    None,
                ) => mount_device(h, &dev, &target, &fs_of(&fs_type), &mount_flags, readonly),
                (AccessType::Mount { .. }, Held::Directory(dir), None) => {
                    h.bind(&dir, &target, readonly)
                }
            }
        })
        .await
        .map_err(|e| host_status(&what, e))
    }

    /// Unmounts the target (as long as what is mounted there comes from
    /// `source`, when known) and removes it. A target that still holds files
    /// once unmounted is not the driver's to delete: it is left, and logged.
    pub async fn unpublish(
        &self,
        plan: &PublishPlan,
        source: Option<NodeSource>,
    ) -> Result<(), Status> {
        let target = PathBuf::from(&plan.target_path);
        let what = format!(
            "unpublish volume {} from {}",
            plan.volume_id,
            target.display()
        );
        self.run(move |h| {
            let expected = expected(h, source.as_ref())?;
            h.unmount(&target, expected)?;
            match h.remove(&target) {
                Err(e) if e.is_not_empty() => {
                    tracing::warn!(target = %target.display(), "left the target in place: it holds files that are not the volume's");
                    Ok(())
                }
                r => r,
            }
        })
        .await
        .map_err(|e| host_status(&what, e))
    }

    /// Grows the filesystem on `source` (mounted at `mount_point`) to fill
    /// its device; returns the device size. A directory has nothing to grow.
    pub async fn expand(
        &self,
        source: NodeSource,
        mount_point: &str,
        block: bool,
    ) -> Result<u64, Status> {
        let mount_point = PathBuf::from(mount_point);
        let what = format!("expand {} at {}", source.shown(), mount_point.display());
        self.run(move |h| match Held::open(h, &source)? {
            Held::Directory(_) => Ok(0),
            Held::Device(dev) => {
                if !block {
                    h.grow(&dev, &mount_point)?;
                }
                volplane_host::loopdev::device_size(&dev)
            }
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
                let size = volplane_host::loopdev::opened_size(&h.open(&path)?)?;
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

/// The identity mounts of `source` have, when the source can be opened.
fn expected(h: &Host, source: Option<&NodeSource>) -> volplane_host::Result<Option<Identity>> {
    let Some(source) = source else {
        return Ok(None);
    };
    match Held::open(h, source) {
        Ok(held) => held.identity().map(Some),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_names_its_subject_once() {
        let s = host_status(
            "volume v1",
            HostError::NotFound("volume v1 does not exist on this node".into()),
        );
        assert_eq!(s.code, Code::NotFound);
        assert_eq!(s.message, "volume v1 does not exist on this node");
        let s = host_status(
            "volume v1",
            HostError::Refused("/x passes through a symbolic link".into()),
        );
        assert_eq!(s.message, "volume v1: /x passes through a symbolic link");
    }
}
