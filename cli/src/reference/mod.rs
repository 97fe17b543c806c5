//! volplane's reference backend: volumes on the local machine.
//!
//! StorageClass parameter `kind` picks the volume kind:
//! * `block` (default): a sparse image file `<volumes-dir>/<id>.img`.
//!   ControllerPublish attaches it as a loop device and returns the device
//!   in `publish_context["device"]`; NodeStage formats it only if it holds no
//!   filesystem and mounts it; raw-block access publishes the device itself.
//! * `dir`: a directory `<volumes-dir>/<id>/`, bind-mounted at the staging
//!   path. Its capacity is nominal (no quota).
//!
//! Snapshots, restores and clones copy a volume's image or directory tree
//! (`snapshot.rs`); a volume made from a snapshot or another volume is of
//! that source's kind.
//!
//! Volume ids are `vol-` and 20 hex digits of SHA-256 of the CreateVolume
//! name, so the same name always maps to the same storage.

mod inventory;
mod snapshot;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use volplane_core::driver::{
    Attributes, Capability, CapacityRange, CreatePlan, Features, GroupPlan, GroupSnapshot, Secrets,
    Snapshot, SnapshotPage, SnapshotPlan, StoredVolume, Topology, Volume, VolumePage,
};
use volplane_core::{Code, Status};
use volplane_host::loopdev;
use volplane_service::{
    Backend, CapacityInfo, DEVICE_KEY, NodeHost, NodeSource, SnapshotQuery, host_status,
};

/// The topology key the reference driver reports.
pub const ZONE_KEY: &str = "topology.volplane.io/zone";
const KIND: &str = "kind";
/// The keys under this prefix are the CO's, not the StorageClass's:
/// external-provisioner's `--extra-create-metadata` (and the resizer's
/// `--extra-modify-metadata`) add the claim's and volume's names under it
/// (`csi.storage.k8s.io/pvc/name`, `…/pvc/namespace`, `…/pv/name`).
const CO_METADATA_PREFIX: &str = "csi.storage.k8s.io/";

fn is_co_metadata(key: &str) -> bool {
    key.starts_with(CO_METADATA_PREFIX)
}
const MIB: u64 = 1 << 20;
/// Smallest volume, of either kind. A 1 MiB image formats as ext4 (1 KiB
/// blocks, no journal: mke2fs makes none below 2048 blocks) and grows with
/// resize2fs; Kubernetes' e2e suites claim 1Mi and restore a snapshot into
/// a claim of the same size, which a larger floor would refuse.
pub const MIN_VOLUME_BYTES: u64 = MIB;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Block,
    Dir,
}

/// The reference backend.
#[derive(Debug, Clone)]
pub struct Reference {
    volumes_dir: PathBuf,
    zone: String,
    /// The mutable parameters volumes may have (`--mutable-parameter`).
    mutable: BTreeSet<String>,
}

fn volume_id(name: &str) -> String {
    let digest = Sha256::digest(name.as_bytes());
    format!("vol-{}", &hex::encode(digest)[..20])
}

fn kind_of(params: &Attributes) -> Result<Kind, Status> {
    if let Some(unknown) = params.keys().find(|k| *k != KIND && !is_co_metadata(k)) {
        return Err(Status::invalid(format!(
            "parameters: {unknown:?} is not a parameter of volplane's reference driver (it knows \"kind\", and the CO's own {CO_METADATA_PREFIX}… keys)"
        )));
    }
    match params.get(KIND) {
        None | Some("block") => Ok(Kind::Block),
        Some("dir") => Ok(Kind::Dir),
        Some(other) => Err(Status::invalid(format!(
            "parameters: kind {other:?} is not a volume kind; use \"block\" or \"dir\""
        ))),
    }
}

fn context_kind(context: &Attributes) -> Kind {
    match context.get(KIND) {
        Some("dir") => Kind::Dir,
        _ => Kind::Block,
    }
}

/// Rounds up to whole MiB, within the range. Without a required size the
/// default, or the limit where that is smaller.
fn size_for(range: CapacityRange, default: u64, min: u64) -> Result<u64, Status> {
    let want = match (range.required_bytes, range.limit_bytes) {
        (0, 0) => default,
        (0, limit) => default.min(limit),
        (required, _) => required,
    };
    let want = want.max(1);
    let size = want.max(min).div_ceil(MIB) * MIB;
    if range.limit_bytes != 0 && size > range.limit_bytes {
        if range.limit_bytes >= min.max(want) {
            return Ok(range.limit_bytes);
        }
        let why = if range.limit_bytes < want {
            format!("the {want} bytes required")
        } else {
            format!("the smallest volume this driver makes ({min} bytes)")
        };
        return Err(Status::new(
            Code::OutOfRange,
            format!(
                "capacity_range: limit_bytes {} is below {why}; raise the limit or ask for less",
                range.limit_bytes
            ),
        ));
    }
    Ok(size)
}

impl Reference {
    /// Grows a filled volume's image to `size` (a directory's size is
    /// nominal); returns its size.
    async fn fit(&self, host: &NodeHost, id: &str, kind: Kind, size: u64) -> Result<u64, Status> {
        if kind == Kind::Dir {
            return Ok(size);
        }
        let image = self.image(id);
        host.run(move |h| h.grow_image(&image, size))
            .await
            .map_err(|e| host_status(&format!("size volume {id}"), e))?;
        Ok(size)
    }

    /// The reference backend over `volumes_dir`, in topology zone `zone`.
    pub fn new(volumes_dir: impl Into<PathBuf>, zone: impl Into<String>) -> Reference {
        Reference {
            volumes_dir: volumes_dir.into(),
            zone: zone.into(),
            mutable: BTreeSet::new(),
        }
    }

    /// Accepts these mutable parameters (and so ControllerModifyVolume).
    pub fn accepting(mut self, names: impl IntoIterator<Item = String>) -> Reference {
        self.mutable.extend(names);
        self
    }

    /// Refuses mutable parameters this driver was not told to accept. Their
    /// values are the storage's business; the reference driver keeps them
    /// as given (volplane records them and ControllerGetVolume reports them).
    fn check_mutable(&self, volume: &str, params: &Attributes) -> Result<(), Status> {
        match params
            .keys()
            .find(|k| !self.mutable.contains(*k) && !is_co_metadata(k))
        {
            None => Ok(()),
            Some(k) if self.mutable.is_empty() => Err(Status::invalid(format!(
                "{volume}: mutable parameter {k:?} is not supported: this driver was started with no --mutable-parameter"
            ))),
            Some(k) => Err(Status::invalid(format!(
                "{volume}: mutable parameter {k:?} is not supported; this driver accepts {}",
                self.mutable
                    .iter()
                    .map(|n| format!("{n:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    fn image(&self, id: &str) -> PathBuf {
        self.volumes_dir.join(format!("{id}.img"))
    }

    fn dir(&self, id: &str) -> PathBuf {
        self.volumes_dir.join(id)
    }

    fn topology(&self) -> Topology {
        [(ZONE_KEY.to_string(), self.zone.clone())].into()
    }

    /// Checks the requested topology includes this driver's zone.
    fn check_topology(&self, plan: &CreatePlan) -> Result<(), Status> {
        let Some(req) = &plan.accessibility else {
            return Ok(());
        };
        let ours = |t: &Topology| t.get(ZONE_KEY).is_none_or(|z| *z == self.zone);
        if !req.requisite.is_empty() && !req.requisite.iter().any(ours) {
            return Err(Status::new(
                Code::ResourceExhausted,
                format!(
                    "volumes can only be made in zone {:?}, which no requisite topology allows",
                    self.zone
                ),
            ));
        }
        Ok(())
    }
}

impl Backend for Reference {
    fn features(&self) -> Features {
        Features {
            modify: !self.mutable.is_empty(),
            ..Features::ALL
        }
    }

    async fn lookup_volume(
        &self,
        host: &NodeHost,
        volume_id: &str,
        _secrets: &Secrets,
    ) -> Result<Option<StoredVolume>, Status> {
        self.stored_volume(host, volume_id).await
    }

    async fn list_volumes(
        &self,
        host: &NodeHost,
        starting_token: &str,
        max_entries: u32,
    ) -> Result<VolumePage, Status> {
        self.volume_page(host, starting_token, max_entries).await
    }

    async fn lookup_snapshot(
        &self,
        host: &NodeHost,
        snapshot_id: &str,
        _secrets: &Secrets,
    ) -> Result<Option<Snapshot>, Status> {
        self.stored_snapshot(host, snapshot_id).await
    }

    async fn list_snapshots(
        &self,
        host: &NodeHost,
        query: &SnapshotQuery<'_>,
    ) -> Result<SnapshotPage, Status> {
        self.snapshot_page(host, query).await
    }

    async fn create_group_snapshot(
        &self,
        host: &NodeHost,
        plan: &GroupPlan,
    ) -> Result<GroupSnapshot, Status> {
        self.cut_group(host, plan).await
    }

    async fn delete_group_snapshot(
        &self,
        host: &NodeHost,
        group: &GroupSnapshot,
        _secrets: &Secrets,
    ) -> Result<(), Status> {
        self.drop_group(host, group).await
    }

    async fn controller_modify(
        &self,
        _host: &NodeHost,
        volume: &Volume,
        mutable_parameters: &Attributes,
        _secrets: &Secrets,
    ) -> Result<(), Status> {
        self.check_mutable(&format!("volume {}", volume.volume_id), mutable_parameters)
    }

    async fn create_snapshot(
        &self,
        host: &NodeHost,
        plan: &SnapshotPlan,
    ) -> Result<Snapshot, Status> {
        self.cut(host, plan).await
    }

    async fn delete_snapshot(
        &self,
        host: &NodeHost,
        snapshot: &Snapshot,
        _secrets: &Secrets,
    ) -> Result<(), Status> {
        self.drop_snapshot(host, &snapshot.snapshot_id).await
    }

    async fn create_volume(&self, host: &NodeHost, plan: &CreatePlan) -> Result<Volume, Status> {
        let kind = kind_of(&plan.parameters)?;
        if kind == Kind::Dir && plan.capabilities.iter().any(|c| c.access_type.is_block()) {
            return Err(Status::invalid(
                "volume_capabilities: raw block access needs kind \"block\", not \"dir\"",
            ));
        }
        self.check_topology(plan)?;
        self.check_mutable(&format!("volume {:?}", plan.name), &plan.mutable_parameters)?;
        let id = volume_id(&plan.name);
        let size = size_for(plan.capacity, plan.suggested_bytes, MIN_VOLUME_BYTES)?;
        let (path, kind_name) = match kind {
            Kind::Block => (self.image(&id), "block"),
            Kind::Dir => (self.dir(&id), "dir"),
        };
        let capacity = match &plan.source {
            Some(source) => {
                let copied = self.fill(host, &id, kind, source).await?;
                self.fit(host, &id, kind, size.max(copied)).await?
            }
            None => host
                .run(move |h| -> volplane_host::Result<u64> {
                    match kind {
                        Kind::Dir => h.create_dir(&path).map(|_| size),
                        Kind::Block => h.create_image(&path, size),
                    }
                })
                .await
                .map_err(|e| host_status(&format!("create volume {:?}", plan.name), e))?,
        };
        Ok(Volume {
            volume_id: id,
            capacity_bytes: capacity,
            volume_context: [(KIND.to_string(), kind_name.to_string())].into(),
            accessible_topology: vec![self.topology()],
            content_source: plan.content_source.clone(),
        })
    }

    async fn delete_volume(
        &self,
        host: &NodeHost,
        volume: &Volume,
        _secrets: &Secrets,
    ) -> Result<(), Status> {
        if !is_volume_id(&volume.volume_id) {
            // Not one of ours, so there is nothing of it to delete.
            return Ok(());
        }
        let id = volume.volume_id.clone();
        let (image, dir) = (self.image(&id), self.dir(&id));
        host.run(move |h| {
            if let Some(dev) = h.loop_device_of(&image)? {
                return Err(volplane_host::HostError::Refused(format!(
                    "volume {id} is still attached as {}; ControllerUnpublishVolume it first",
                    dev.path().display()
                )));
            }
            h.remove(&image)?;
            h.remove_tree(&dir)
        })
        .await
        .map_err(|e| host_status(&format!("delete volume {}", volume.volume_id), e))
    }

    async fn controller_publish(
        &self,
        host: &NodeHost,
        volume: &Volume,
        node_id: &str,
        _capability: &Capability,
        _readonly: bool,
        _secrets: &Secrets,
    ) -> Result<Attributes, Status> {
        if context_kind(&volume.volume_context) == Kind::Dir {
            return Ok(Attributes::new());
        }
        let image = self.image(&volume.volume_id);
        let dev = host
            .run(move |h| h.loop_attach(&image))
            .await
            .map_err(|e| {
                host_status(
                    &format!("attach volume {} for node {node_id}", volume.volume_id),
                    e,
                )
            })?;
        Ok([(DEVICE_KEY.to_string(), dev.display().to_string())].into())
    }

    async fn controller_unpublish(
        &self,
        host: &NodeHost,
        volume: &Volume,
        node_id: &str,
        still_published: &[String],
        _secrets: &Secrets,
    ) -> Result<(), Status> {
        // Every node of this machine shares the one loop device: it goes
        // only with the last publication.
        if context_kind(&volume.volume_context) == Kind::Dir || !still_published.is_empty() {
            return Ok(());
        }
        let image = self.image(&volume.volume_id);
        host.run(move |h| h.loop_detach(&image)).await.map_err(|e| {
            host_status(
                &format!("detach volume {} from node {node_id}", volume.volume_id),
                e,
            )
        })
    }

    async fn controller_expand(
        &self,
        host: &NodeHost,
        volume: &Volume,
        capacity: CapacityRange,
        capability: Option<&Capability>,
        _secrets: &Secrets,
    ) -> Result<(u64, bool), Status> {
        let size = size_for(capacity, capacity.required_bytes, 0)?.max(volume.capacity_bytes);
        // A size beyond the whole filesystem can never be had: OUT_OF_RANGE
        // (the CSI spec's "unsupported capacity"), which the resizer
        // records as infeasible until the user asks for less.
        let dir = self.volumes_dir.clone();
        let total = host
            .run(move |h| h.usage(&dir))
            .await
            .map_err(|e| host_status("ControllerExpandVolume", e))?
            .total_bytes;
        if size > total {
            return Err(Status::new(
                Code::OutOfRange,
                format!(
                    "volume {} cannot grow to {size} bytes: its storage holds {total} bytes in all; ask for at most that",
                    volume.volume_id
                ),
            ));
        }
        if context_kind(&volume.volume_context) == Kind::Dir {
            return Ok((size, false));
        }
        let image = self.image(&volume.volume_id);
        let grown = host
            .run(move |h| -> volplane_host::Result<u64> {
                h.grow_image(&image, size)?;
                if let Some(dev) = h.loop_device_of(&image)? {
                    h.loop_refresh(&dev)?;
                }
                Ok(size)
            })
            .await
            .map_err(|e| host_status(&format!("expand volume {}", volume.volume_id), e))?;
        let block = capability.is_some_and(|c| c.access_type.is_block());
        Ok((grown, !block))
    }

    async fn get_capacity(
        &self,
        host: &NodeHost,
        _parameters: &Attributes,
        _capabilities: &[Capability],
        topology: Option<&Topology>,
    ) -> Result<CapacityInfo, Status> {
        if topology.is_some_and(|t| t.get(ZONE_KEY).is_some_and(|z| *z != self.zone)) {
            return Ok(CapacityInfo::default());
        }
        let dir = self.volumes_dir.clone();
        let available = host
            .run(move |h| h.usage(&dir))
            .await
            .map_err(|e| host_status("GetCapacity", e))?
            .available_bytes;
        Ok(CapacityInfo {
            available_bytes: available,
            maximum_volume_size: Some(available),
            minimum_volume_size: Some(MIB),
        })
    }

    /// The volume's own storage, found from its id alone: a block volume's
    /// loop device is the one the kernel says is backed by its image in the
    /// volumes directory (a `publish_context` device naming anything else is
    /// refused); a dir volume's directory is the one in the volumes
    /// directory. Nothing a caller names is used unchecked.
    async fn node_source(
        &self,
        host: &NodeHost,
        volume_id: &str,
        publish_context: &Attributes,
        _volume_context: &Attributes,
    ) -> Result<NodeSource, Status> {
        if !is_volume_id(volume_id) {
            return Err(Status::not_found(format!(
                "volume {volume_id:?} was not made by this driver (its volume ids are \"vol-\" and 20 hex digits)"
            )));
        }
        let id = volume_id.to_string();
        let (image, dir) = (self.image(&id), self.dir(&id));
        let hint = publish_context.get(DEVICE_KEY).map(str::to_string);
        host.run(move |h| -> volplane_host::Result<NodeSource> {
            if let Some(img) = h.open_existing(&image)? {
                let Some(dev) = h.loop_device_of(&image)? else {
                    return Err(volplane_host::HostError::Refused(format!(
                        "volume {id} is not attached on this node: no loop device is backed by its image; ControllerPublishVolume attaches it"
                    )));
                };
                if let Some(hint) = hint
                    && Path::new(&hint) != dev.path()
                {
                    let named = h.device(&hint).ok();
                    if !named.is_some_and(|d| loopdev::backs(&d, &img).unwrap_or(false)) {
                        return Err(volplane_host::HostError::Refused(format!(
                            "publish_context.device {hint:?} does not hold volume {id} (its image is attached as {})",
                            dev.path().display()
                        )));
                    }
                }
                return Ok(NodeSource::Device(dev.path().to_path_buf()));
            }
            match h.open_existing(&dir)? {
                Some(d) if d.stat()?.is_dir() => Ok(NodeSource::Directory(dir)),
                _ => Err(volplane_host::HostError::NotFound(format!(
                    "volume {id} does not exist on this node"
                ))),
            }
        })
        .await
        .map_err(|e| host_status(&format!("volume {volume_id}"), e))
    }
}

/// True for ids this driver makes: `vol-` and 20 lowercase hex digits.
fn is_volume_id(id: &str) -> bool {
    is_id("vol-", id)
}

/// True for `prefix` and 20 lowercase hex digits (the ids this driver makes).
fn is_id(prefix: &str, id: &str) -> bool {
    id.strip_prefix(prefix).is_some_and(|h| {
        h.len() == 20
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_path_safe() {
        assert_eq!(volume_id("pvc-1"), volume_id("pvc-1"));
        assert_ne!(volume_id("pvc-1"), volume_id("pvc-2"));
        assert!(volume_id("../../etc").starts_with("vol-"));
        assert!(!volume_id("../../etc").contains('/'));
        assert!(is_volume_id(&volume_id("x")));
        assert!(!is_volume_id("vol-../../etc/passwd"));
        assert!(!is_volume_id("vol-0123456789ABCDEF0123"));
    }

    #[test]
    fn parameters_are_checked() {
        assert_eq!(kind_of(&Attributes::new()).unwrap(), Kind::Block);
        assert_eq!(
            kind_of(&[("kind".into(), "dir".into())].into()).unwrap(),
            Kind::Dir
        );
        assert_eq!(
            kind_of(&[("kind".into(), "nfs".into())].into())
                .unwrap_err()
                .code,
            Code::InvalidArgument
        );
        assert_eq!(
            kind_of(&[("size".into(), "1".into())].into())
                .unwrap_err()
                .code,
            Code::InvalidArgument
        );
    }

    /// What external-provisioner's --extra-create-metadata adds is the
    /// CO's, not a parameter to judge: a claim must provision with it (the
    /// e2e suites' first run failed every CreateVolume on it).
    #[test]
    fn the_cos_metadata_is_not_a_parameter() {
        let with_metadata: Attributes = [
            ("kind".into(), "dir".into()),
            ("csi.storage.k8s.io/pvc/name".into(), "data".into()),
            ("csi.storage.k8s.io/pvc/namespace".into(), "default".into()),
            ("csi.storage.k8s.io/pv/name".into(), "pvc-1".into()),
        ]
        .into();
        assert_eq!(kind_of(&with_metadata).unwrap(), Kind::Dir);
        let modify: Attributes = [
            ("iops".into(), "100".into()),
            ("csi.storage.k8s.io/pvc/name".into(), "data".into()),
        ]
        .into();
        let reference = Reference::new("/nonexistent", "local").accepting(["iops".to_string()]);
        assert!(reference.check_mutable("volume v", &modify).is_ok());
        let unknown: Attributes = [("throughput".into(), "1".into())].into();
        assert!(reference.check_mutable("volume v", &unknown).is_err());
    }

    #[test]
    fn sizes_round_to_mib_within_range() {
        let r = |required_bytes, limit_bytes| CapacityRange {
            required_bytes,
            limit_bytes,
        };
        assert_eq!(
            size_for(r(0, 0), 1 << 30, MIN_VOLUME_BYTES).unwrap(),
            1 << 30
        );
        assert_eq!(
            size_for(r(1, 0), 1 << 30, MIN_VOLUME_BYTES).unwrap(),
            MIN_VOLUME_BYTES
        );
        assert_eq!(size_for(r(MIB + 1, 0), 0, 0).unwrap(), 2 * MIB);
        assert_eq!(size_for(r(MIB + 1, MIB + 10), 0, 0).unwrap(), MIB + 10);
        assert_eq!(size_for(r(0, MIB), 1 << 30, MIN_VOLUME_BYTES).unwrap(), MIB);
        assert_eq!(
            size_for(r(0, MIB / 2), 1 << 30, MIN_VOLUME_BYTES)
                .unwrap_err()
                .code,
            Code::OutOfRange
        );
        let e = size_for(r(0, MIB / 2), 1 << 30, MIN_VOLUME_BYTES).unwrap_err();
        assert!(
            e.message
                .contains("smallest volume this driver makes (1048576 bytes)"),
            "{e:?}"
        );
        let e = size_for(r(3 * MIB, 2 * MIB), 0, MIN_VOLUME_BYTES).unwrap_err();
        assert!(
            e.message.contains("below the 3145728 bytes required"),
            "{e:?}"
        );
    }
}
