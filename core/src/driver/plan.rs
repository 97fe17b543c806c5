//! What the driver machine asks its adapter to carry out, and what comes back.
//!
//! Every mutating plan is recorded in the machine's state *before* the adapter
//! sees it (write-ahead), so a restart finds it and carries it out again. A
//! backend must therefore make every plan idempotent: carrying out a plan that
//! already (partly) happened finishes it and reports success.

use serde::{Deserialize, Serialize};

use super::types::*;

/// Create backing storage for a new volume. The backend chooses the volume id
/// and must return the same volume when asked again for the same `name`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash)]
pub struct CreatePlan {
    /// The volume's name (CreateVolume.name): the same name, the same volume.
    pub name: String,
    /// The size range asked for.
    pub capacity: CapacityRange,
    /// The size the machine suggests: `required_bytes`, or the driver's
    /// default (within `limit_bytes`) when the request leaves it open.
    pub suggested_bytes: u64,
    /// How the volume will be used (each must be supported).
    pub capabilities: Vec<Capability>,
    /// The storage class parameters, `csi.storage.k8s.io/` keys stripped.
    pub parameters: Attributes,
    /// Mutable parameters (a VolumeAttributesClass's).
    pub mutable_parameters: Attributes,
    /// A snapshot or volume to fill the new volume from.
    pub content_source: Option<ContentSource>,
    /// The driver's record of that snapshot or volume (never the caller's
    /// word): what the backend copies from.
    #[serde(default)]
    pub source: Option<Source>,
    /// Where the volume must (and should) be reachable from.
    pub accessibility: Option<TopologyRequirement>,
    #[serde(skip)]
    /// The provisioner's secrets.
    pub secrets: Secrets,
}

/// The driver's record of what a new volume is filled from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash)]
pub enum Source {
    /// Restore this snapshot.
    Snapshot(Snapshot),
    /// Clone this volume.
    Volume(Volume),
}

/// Cut a snapshot of a volume. The backend chooses the snapshot id and must
/// return the same snapshot when asked again for the same `name`, reporting
/// whether it is ready to use yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash)]
pub struct SnapshotPlan {
    /// The snapshot's name (CreateSnapshot.name): the same name, the same snapshot.
    pub name: String,
    /// The volume to cut it from, as the driver recorded it.
    pub source: Volume,
    /// The snapshot class parameters, `csi.storage.k8s.io/` keys stripped.
    pub parameters: Attributes,
    #[serde(skip)]
    /// The snapshotter's secrets.
    pub secrets: Secrets,
}

/// Cut snapshots of several volumes at one point in time, every one or
/// none. The backend chooses the ids and must return the same group when
/// asked again for the same `name`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash)]
pub struct GroupPlan {
    /// The group's name (CreateVolumeGroupSnapshot.name).
    pub name: String,
    /// The volumes, as the driver recorded them, in the order asked.
    pub sources: Vec<Volume>,
    /// The group snapshot class parameters.
    pub parameters: Attributes,
    #[serde(skip)]
    /// The snapshotter's secrets.
    pub secrets: Secrets,
}

/// Make a volume usable at the staging path on this node (format when empty,
/// then mount; or whatever the backend's storage needs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash)]
pub struct StagePlan {
    /// The volume to stage or unstage.
    pub volume_id: String,
    /// The global mount path, already checked to lie under the driver's roots.
    pub staging_path: String,
    /// Mount or block, with the access mode.
    pub capability: Capability,
    /// What ControllerPublish answered (hints at most: the backend proves the source).
    pub publish_context: Attributes,
    /// What CreateVolume answered (hints at most).
    pub volume_context: Attributes,
    #[serde(skip)]
    /// The node-stage secrets.
    pub secrets: Secrets,
}

/// Make a volume visible at a workload's target path (a bind mount of the
/// staging path, or of the device for raw block).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash)]
pub struct PublishPlan {
    /// The volume to publish or unpublish.
    pub volume_id: String,
    /// Empty when the driver does not stage.
    pub staging_path: String,
    /// The pod's target path, already checked to lie under the driver's roots.
    pub target_path: String,
    /// Mount or block, with the access mode.
    pub capability: Capability,
    /// Publish read-only.
    pub readonly: bool,
    /// What ControllerPublish answered (hints at most).
    pub publish_context: Attributes,
    /// What CreateVolume answered (hints at most).
    pub volume_context: Attributes,
    #[serde(skip)]
    /// The node-publish secrets.
    pub secrets: Secrets,
}

/// The secrets field of a plan of a kind that carries one, borrowed as
/// `$($b)*` (`ref` or `ref mut`).
macro_rules! secrets_of {
    ($plan:expr, $($b:tt)*) => {
        match $plan {
            Plan::CreateVolume(CreatePlan { $($b)* secrets, .. })
            | Plan::CreateSnapshot(SnapshotPlan { $($b)* secrets, .. })
            | Plan::CreateGroupSnapshot(GroupPlan { $($b)* secrets, .. })
            | Plan::Stage(StagePlan { $($b)* secrets, .. })
            | Plan::Publish(PublishPlan { $($b)* secrets, .. })
            | Plan::DeleteVolume { $($b)* secrets, .. }
            | Plan::ControllerPublish { $($b)* secrets, .. }
            | Plan::ControllerUnpublish { $($b)* secrets, .. }
            | Plan::ControllerExpand { $($b)* secrets, .. }
            | Plan::ControllerModify { $($b)* secrets, .. }
            | Plan::DeleteSnapshot { $($b)* secrets, .. }
            | Plan::DeleteGroupSnapshot { $($b)* secrets, .. }
            | Plan::LookupVolume { $($b)* secrets, .. }
            | Plan::LookupSnapshot { $($b)* secrets, .. }
            | Plan::ListSnapshots { $($b)* secrets, .. } => Some(secrets),
            Plan::GetCapacity { .. }
            | Plan::Unstage(_)
            | Plan::Unpublish(_)
            | Plan::NodeExpand { .. }
            | Plan::ListVolumes { .. }
            | Plan::VolumeStats { .. } => None,
        }
    };
}

/// One step for the adapter to carry out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash)]
pub enum Plan {
    /// Create the volume (or find the one already made for this name).
    CreateVolume(CreatePlan),
    /// Delete the volume's storage; a volume already gone is success.
    DeleteVolume {
        /// The volume as the driver recorded it.
        volume: Volume,
        #[serde(skip)]
        /// The deleter's secrets.
        secrets: Secrets,
    },
    /// Make the volume available to a node.
    ControllerPublish {
        /// The volume as the driver recorded it.
        volume: Volume,
        /// The node, as NodeGetInfo names it.
        node_id: String,
        /// How the node will use it.
        capability: Capability,
        /// Publish read-only.
        readonly: bool,
        #[serde(skip)]
        /// The publisher's secrets.
        secrets: Secrets,
    },
    /// Unpublish from each of `node_ids` in turn.
    ControllerUnpublish {
        /// The volume as the driver recorded it.
        volume: Volume,
        /// The nodes to unpublish from.
        node_ids: Vec<String>,
        /// Nodes the volume stays published to (a backend whose nodes
        /// share one device keeps it for them).
        #[serde(default)]
        still_published: Vec<String>,
        #[serde(skip)]
        /// The unpublisher's secrets.
        secrets: Secrets,
    },
    /// Grow the volume's storage.
    ControllerExpand {
        /// The volume as the driver recorded it.
        volume: Volume,
        /// The size range asked for.
        capacity: CapacityRange,
        /// How the volume is used, when the CO says.
        capability: Option<Capability>,
        #[serde(skip)]
        /// The expander's secrets.
        secrets: Secrets,
    },
    /// Apply mutable parameters to the volume.
    ControllerModify {
        /// The volume as the driver recorded it.
        volume: Volume,
        /// The parameters to apply.
        mutable_parameters: Attributes,
        #[serde(skip)]
        /// The modifier's secrets.
        secrets: Secrets,
    },
    /// Cut a snapshot (or report how far the one of this name has got).
    CreateSnapshot(SnapshotPlan),
    /// Delete the snapshot; one already gone is success.
    DeleteSnapshot {
        /// The snapshot as the driver recorded it.
        snapshot: Snapshot,
        #[serde(skip)]
        /// The deleter's secrets.
        secrets: Secrets,
    },
    /// Cut a group snapshot (or report how far the one of this name has got).
    CreateGroupSnapshot(GroupPlan),
    /// Delete the group and every member; one already gone is success.
    DeleteGroupSnapshot {
        /// The group as the driver recorded it.
        group: GroupSnapshot,
        #[serde(skip)]
        /// The deleter's secrets.
        secrets: Secrets,
    },
    /// A query: free capacity for volumes with these parameters.
    GetCapacity {
        /// The capabilities volumes must support.
        capabilities: Vec<Capability>,
        /// The storage class parameters.
        parameters: Attributes,
        /// The segment asked about, if any.
        accessible_topology: Option<Topology>,
    },
    /// Stage the volume at its global mount path.
    Stage(StagePlan),
    /// Undo a stage: unmount the staging path and remove what the stage made.
    Unstage(StagePlan),
    /// Publish the volume at a pod's target path.
    Publish(PublishPlan),
    /// Undo a publish: unmount the target and remove it.
    Unpublish(PublishPlan),
    /// Grow the filesystem (or nothing, for raw block) on this node.
    NodeExpand {
        /// The volume to grow.
        volume_id: String,
        /// Where the filesystem (or device, for raw block) is reachable.
        volume_path: String,
        /// Its global mount path, when staged.
        staging_path: String,
        /// How it is used, when the CO says.
        capability: Option<Capability>,
        /// The size to reach.
        required_bytes: u64,
        /// What ControllerPublish answered (hints at most).
        publish_context: Attributes,
        /// What CreateVolume answered (hints at most).
        volume_context: Attributes,
    },
    /// A query: usage of the volume at `volume_path`.
    VolumeStats {
        /// The volume asked about.
        volume_id: String,
        /// Where it is published or staged (a path the driver recorded).
        volume_path: String,
        /// Published for raw block access.
        block: bool,
    },
    /// A query: what the storage holds under volume id `volume_id`
    /// (the journal holds nothing of it).
    LookupVolume {
        /// The id a request named.
        volume_id: String,
        #[serde(skip)]
        /// The secrets of the request that named it.
        secrets: Secrets,
    },
    /// A query: what the storage holds under snapshot id `snapshot_id`.
    LookupSnapshot {
        /// The id a request named.
        snapshot_id: String,
        #[serde(skip)]
        /// The secrets of the request that named it.
        secrets: Secrets,
    },
    /// A query: a page of the storage's volumes (ListVolumes).
    ListVolumes {
        /// Where the page starts: a token the storage handed out (empty:
        /// from the start).
        starting_token: String,
        /// At most this many (0: as many as the storage likes).
        max_entries: u32,
    },
    /// A query: a page of the storage's snapshots (ListSnapshots).
    ListSnapshots {
        /// Where the page starts (empty: from the start).
        starting_token: String,
        /// At most this many (0: as many as the storage likes).
        max_entries: u32,
        /// Only snapshots of this volume (empty: any).
        source_volume_id: String,
        /// Only this snapshot (empty: any).
        snapshot_id: String,
        #[serde(skip)]
        /// The lister's secrets.
        secrets: Secrets,
    },
}

impl Plan {
    /// A short name for logs: `stage`, `publish`, …
    pub fn kind(&self) -> &'static str {
        match self {
            Plan::CreateVolume(_) => "create",
            Plan::DeleteVolume { .. } => "delete",
            Plan::ControllerPublish { .. } => "controller-publish",
            Plan::ControllerUnpublish { .. } => "controller-unpublish",
            Plan::ControllerExpand { .. } => "controller-expand",
            Plan::ControllerModify { .. } => "controller-modify",
            Plan::CreateSnapshot(_) => "create-snapshot",
            Plan::DeleteSnapshot { .. } => "delete-snapshot",
            Plan::CreateGroupSnapshot(_) => "create-group-snapshot",
            Plan::DeleteGroupSnapshot { .. } => "delete-group-snapshot",
            Plan::GetCapacity { .. } => "get-capacity",
            Plan::Stage(_) => "stage",
            Plan::Unstage(_) => "unstage",
            Plan::Publish(_) => "publish",
            Plan::Unpublish(_) => "unpublish",
            Plan::NodeExpand { .. } => "node-expand",
            Plan::VolumeStats { .. } => "volume-stats",
            Plan::LookupVolume { .. } => "lookup-volume",
            Plan::LookupSnapshot { .. } => "lookup-snapshot",
            Plan::ListVolumes { .. } => "list-volumes",
            Plan::ListSnapshots { .. } => "list-snapshots",
        }
    }

    /// The secrets the plan carries (the request's), if it is of a kind
    /// that carries any. They are never persisted: a plan read back after
    /// a restart has none.
    pub fn secrets(&self) -> Option<&Secrets> {
        secrets_of!(*self, ref)
    }

    /// Gives the plan `secrets` (a retry's, for a plan read back after a
    /// restart); a plan of a kind that carries none is left as it is.
    pub fn set_secrets(&mut self, secrets: Secrets) {
        if let Some(slot) = secrets_of!(*self, ref mut) {
            *slot = secrets;
        }
    }

    /// What the plan is about, for a person: `CreateVolume "pvc-1"`,
    /// `DeleteVolume vol-1`, `NodeStageVolume vol-1 at /var/lib/…`.
    pub fn describe(&self) -> String {
        match self {
            Plan::CreateVolume(p) => format!("CreateVolume {:?}", p.name),
            Plan::DeleteVolume { volume, .. } => format!("DeleteVolume {}", volume.volume_id),
            Plan::ControllerPublish {
                volume, node_id, ..
            } => format!(
                "ControllerPublishVolume {} to node {node_id}",
                volume.volume_id
            ),
            Plan::ControllerUnpublish {
                volume, node_ids, ..
            } => format!(
                "ControllerUnpublishVolume {} from node(s) {}",
                volume.volume_id,
                node_ids.join(", ")
            ),
            Plan::ControllerExpand { volume, .. } => {
                format!("ControllerExpandVolume {}", volume.volume_id)
            }
            Plan::ControllerModify { volume, .. } => {
                format!("ControllerModifyVolume {}", volume.volume_id)
            }
            Plan::CreateSnapshot(p) => format!("CreateSnapshot {:?}", p.name),
            Plan::DeleteSnapshot { snapshot, .. } => {
                format!("DeleteSnapshot {}", snapshot.snapshot_id)
            }
            Plan::CreateGroupSnapshot(p) => format!("CreateVolumeGroupSnapshot {:?}", p.name),
            Plan::DeleteGroupSnapshot { group, .. } => {
                format!("DeleteVolumeGroupSnapshot {}", group.group_snapshot_id)
            }
            Plan::Stage(p) => format!("NodeStageVolume {} at {}", p.volume_id, p.staging_path),
            Plan::Unstage(p) => {
                format!("NodeUnstageVolume {} at {}", p.volume_id, p.staging_path)
            }
            Plan::Publish(p) => format!("NodePublishVolume {} at {}", p.volume_id, p.target_path),
            Plan::Unpublish(p) => {
                format!("NodeUnpublishVolume {} at {}", p.volume_id, p.target_path)
            }
            Plan::NodeExpand { volume_id, .. } => format!("NodeExpandVolume {volume_id}"),
            other => other.kind().to_string(),
        }
    }

    /// A plan carried out on the node (stage, publish and their undoing,
    /// node expansion): its effects are mounts, which a reboot takes away.
    pub fn on_node(&self) -> bool {
        matches!(
            self,
            Plan::Stage(_)
                | Plan::Unstage(_)
                | Plan::Publish(_)
                | Plan::Unpublish(_)
                | Plan::NodeExpand { .. }
        )
    }

    /// Queries change nothing, hold no volume lock and are not persisted.
    pub fn is_query(&self) -> bool {
        matches!(
            self,
            Plan::GetCapacity { .. }
                | Plan::VolumeStats { .. }
                | Plan::LookupVolume { .. }
                | Plan::LookupSnapshot { .. }
                | Plan::ListVolumes { .. }
                | Plan::ListSnapshots { .. }
        )
    }
}

/// What a carried-out plan produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum Outcome {
    /// The plan completed and has nothing to report.
    Done,
    /// The volume was created (or found).
    Created(Volume),
    /// The snapshot was cut (or found), ready to use or not yet.
    SnapshotCreated(Snapshot),
    /// The group snapshot was cut (or found).
    GroupCreated(GroupSnapshot),
    /// The volume was published to the node.
    Published {
        /// What NodeStage and NodePublish will receive.
        publish_context: Attributes,
    },
    /// The volume's storage grew.
    ControllerExpanded {
        /// Its size now.
        capacity_bytes: u64,
        /// The node must grow the filesystem too.
        node_expansion_required: bool,
    },
    /// What GetCapacity found.
    Capacity {
        /// Bytes free for new volumes.
        available_bytes: u64,
        /// The largest volume that can be made, if limited.
        maximum_volume_size: Option<u64>,
        /// The smallest volume that can be made, if limited.
        minimum_volume_size: Option<u64>,
    },
    /// The filesystem grew.
    NodeExpanded {
        /// Its size now.
        capacity_bytes: u64,
    },
    /// What NodeGetVolumeStats found.
    Stats {
        /// Bytes and inodes used and free.
        usage: VolumeUsage,
        /// Whether the volume is healthy, if known.
        condition: Option<VolumeCondition>,
    },
    /// What the storage holds under a volume id (`None`: nothing).
    VolumeFound(Option<StoredVolume>),
    /// What the storage holds under a snapshot id (`None`: nothing).
    SnapshotFound(Option<Snapshot>),
    /// A page of the storage's volumes.
    VolumesListed(VolumePage),
    /// A page of the storage's snapshots.
    SnapshotsListed(SnapshotPage),
}
