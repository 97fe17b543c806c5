//! Requests the driver machine accepts and the answers it gives: one variant
//! per CSI RPC, already validated field by field at the wire boundary.
//!
//! Fields mirror the CSI messages of the same names (the CSI spec documents
//! them); what the machine checks and answers is documented on the machine.

use serde::{Deserialize, Serialize};

use super::types::*;

#[derive(Debug, Clone, PartialEq, Hash)]
/// `CreateVolume`: the CSI request of that name, validated field by field.
pub struct CreateVolume {
    /// The name the CO chose (the same name, the same volume).
    pub name: String,
    /// The size range asked for.
    pub capacity: CapacityRange,
    /// How the volume will be used.
    pub capabilities: Vec<Capability>,
    /// The StorageClass parameters, `csi.storage.k8s.io/` keys stripped.
    pub parameters: Attributes,
    /// Mutable parameters (a VolumeAttributesClass's).
    pub mutable_parameters: Attributes,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
    /// A snapshot or volume to fill the new volume from.
    pub content_source: Option<ContentSource>,
    /// Where the volume must (and should) be reachable from.
    pub accessibility: Option<TopologyRequirement>,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `DeleteVolume`: the CSI request of that name, validated field by field.
pub struct DeleteVolume {
    /// The volume, by the id its backend gave it.
    pub volume_id: String,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `ControllerPublish`: the CSI request of that name, validated field by field.
pub struct ControllerPublish {
    /// The volume, by the id its backend gave it.
    pub volume_id: String,
    /// The node, by the id NodeGetInfo reported.
    pub node_id: String,
    /// How the volume is used.
    pub capability: Capability,
    /// Published read-only.
    pub readonly: bool,
    /// What CreateVolume returned for the volume to carry to the node.
    pub volume_context: Attributes,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `ControllerUnpublish`: the CSI request of that name, validated field by field.
pub struct ControllerUnpublish {
    /// The volume, by the id its backend gave it.
    pub volume_id: String,
    /// `None`: unpublish from every node.
    pub node_id: Option<String>,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `ValidateCapabilities`: the CSI request of that name, validated field by field.
pub struct ValidateCapabilities {
    /// The volume, by the id its backend gave it.
    pub volume_id: String,
    /// What CreateVolume returned for the volume to carry to the node.
    pub volume_context: Attributes,
    /// How the volume will be used.
    pub capabilities: Vec<Capability>,
    /// The StorageClass parameters, `csi.storage.k8s.io/` keys stripped.
    pub parameters: Attributes,
    /// Mutable parameters (a VolumeAttributesClass's).
    pub mutable_parameters: Attributes,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `ListVolumes`: the CSI request of that name, validated field by field.
pub struct ListVolumes {
    /// 0: no limit.
    pub max_entries: u32,
    /// Where a previous page ended (empty: from the start).
    pub starting_token: String,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `GetCapacity`: the CSI request of that name, validated field by field.
pub struct GetCapacity {
    /// How the volume will be used.
    pub capabilities: Vec<Capability>,
    /// The StorageClass parameters, `csi.storage.k8s.io/` keys stripped.
    pub parameters: Attributes,
    /// Where the node can reach volumes from.
    pub accessible_topology: Option<Topology>,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `ControllerExpand`: the CSI request of that name, validated field by field.
pub struct ControllerExpand {
    /// The volume, by the id its backend gave it.
    pub volume_id: String,
    /// The size range asked for.
    pub capacity: CapacityRange,
    /// How the volume is used.
    pub capability: Option<Capability>,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `ControllerModify`: the CSI request of that name, validated field by field.
pub struct ControllerModify {
    /// The volume, by the id its backend gave it.
    pub volume_id: String,
    /// Mutable parameters (a VolumeAttributesClass's).
    pub mutable_parameters: Attributes,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `CreateSnapshot`: the CSI request of that name, validated field by field.
pub struct CreateSnapshot {
    /// The volume the snapshot is of.
    pub source_volume_id: String,
    /// The name the CO chose (the same name, the same volume).
    pub name: String,
    /// The StorageClass parameters, `csi.storage.k8s.io/` keys stripped.
    pub parameters: Attributes,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `DeleteSnapshot`: the CSI request of that name, validated field by field.
pub struct DeleteSnapshot {
    /// The snapshot, by id.
    pub snapshot_id: String,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `ListSnapshots`: the CSI request of that name, validated field by field.
pub struct ListSnapshots {
    /// 0: no limit.
    pub max_entries: u32,
    /// Where a previous page ended (empty: from the start).
    pub starting_token: String,
    /// Only snapshots of this volume (empty: any).
    pub source_volume_id: String,
    /// Only this snapshot (empty: any).
    pub snapshot_id: String,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `CreateGroupSnapshot`: the CSI request of that name, validated field by field.
pub struct CreateGroupSnapshot {
    /// The name the CO chose (the same name, the same volume).
    pub name: String,
    /// The volumes to snapshot together.
    pub source_volume_ids: Vec<String>,
    /// The StorageClass parameters, `csi.storage.k8s.io/` keys stripped.
    pub parameters: Attributes,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `DeleteGroupSnapshot`: the CSI request of that name, validated field by field.
pub struct DeleteGroupSnapshot {
    /// The group snapshot, by id.
    pub group_snapshot_id: String,
    /// The members the CO believes the group has (empty: not given).
    pub snapshot_ids: Vec<String>,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `NodeStage`: the CSI request of that name, validated field by field.
pub struct NodeStage {
    /// The volume, by the id its backend gave it.
    pub volume_id: String,
    /// What ControllerPublish returned for this node.
    pub publish_context: Attributes,
    /// The node-global staging path, under the kubelet directory.
    pub staging_target_path: String,
    /// How the volume is used.
    pub capability: Capability,
    /// What CreateVolume returned for the volume to carry to the node.
    pub volume_context: Attributes,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `NodeUnstage`: the CSI request of that name, validated field by field.
pub struct NodeUnstage {
    /// The volume, by the id its backend gave it.
    pub volume_id: String,
    /// The node-global staging path, under the kubelet directory.
    pub staging_target_path: String,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `NodePublish`: the CSI request of that name, validated field by field.
pub struct NodePublish {
    /// The volume, by the id its backend gave it.
    pub volume_id: String,
    /// What ControllerPublish returned for this node.
    pub publish_context: Attributes,
    /// Empty when the CO did not stage (the driver lacks STAGE_UNSTAGE).
    pub staging_target_path: String,
    /// The pod's target path, under the kubelet directory.
    pub target_path: String,
    /// How the volume is used.
    pub capability: Capability,
    /// Published read-only.
    pub readonly: bool,
    /// What CreateVolume returned for the volume to carry to the node.
    pub volume_context: Attributes,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `NodeUnpublish`: the CSI request of that name, validated field by field.
pub struct NodeUnpublish {
    /// The volume, by the id its backend gave it.
    pub volume_id: String,
    /// The pod's target path, under the kubelet directory.
    pub target_path: String,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `NodeVolumeStats`: the CSI request of that name, validated field by field.
pub struct NodeVolumeStats {
    /// The volume, by the id its backend gave it.
    pub volume_id: String,
    /// A path the volume is published or staged at.
    pub volume_path: String,
    /// The node-global staging path, under the kubelet directory.
    pub staging_target_path: String,
}

#[derive(Debug, Clone, PartialEq, Hash)]
/// `NodeExpand`: the CSI request of that name, validated field by field.
pub struct NodeExpand {
    /// The volume, by the id its backend gave it.
    pub volume_id: String,
    /// A path the volume is published or staged at.
    pub volume_path: String,
    /// The size range asked for.
    pub capacity: CapacityRange,
    /// The node-global staging path, under the kubelet directory.
    pub staging_target_path: String,
    /// How the volume is used.
    pub capability: Option<Capability>,
    /// The secrets the CO sent for this call (never logged).
    pub secrets: Secrets,
}

/// Every request the driver machine handles.
#[derive(Debug, Clone, PartialEq, Hash)]
pub enum Request {
    /// The GetPluginInfo RPC.
    GetPluginInfo,
    /// The GetPluginCapabilities RPC.
    GetPluginCapabilities,
    /// The Probe RPC.
    Probe,
    /// The CreateVolume RPC.
    CreateVolume(CreateVolume),
    /// The DeleteVolume RPC.
    DeleteVolume(DeleteVolume),
    /// The ControllerPublish RPC.
    ControllerPublish(ControllerPublish),
    /// The ControllerUnpublish RPC.
    ControllerUnpublish(ControllerUnpublish),
    /// The ValidateCapabilities RPC.
    ValidateCapabilities(ValidateCapabilities),
    /// The ListVolumes RPC.
    ListVolumes(ListVolumes),
    /// The GetCapacity RPC.
    GetCapacity(GetCapacity),
    /// The ControllerGetCapabilities RPC.
    ControllerGetCapabilities,
    /// The ControllerExpand RPC.
    ControllerExpand(ControllerExpand),
    /// The ControllerGetVolume RPC.
    ControllerGetVolume {
        /// The volume, by the id its backend gave it.
        volume_id: String,
    },
    /// The ControllerModify RPC.
    ControllerModify(ControllerModify),
    /// The CreateSnapshot RPC.
    CreateSnapshot(CreateSnapshot),
    /// The DeleteSnapshot RPC.
    DeleteSnapshot(DeleteSnapshot),
    /// The ListSnapshots RPC.
    ListSnapshots(ListSnapshots),
    /// The GetSnapshot RPC.
    GetSnapshot {
        /// The snapshot, by id.
        snapshot_id: String,
    },
    /// The GroupControllerGetCapabilities RPC.
    GroupControllerGetCapabilities,
    /// The CreateGroupSnapshot RPC.
    CreateGroupSnapshot(CreateGroupSnapshot),
    /// The DeleteGroupSnapshot RPC.
    DeleteGroupSnapshot(DeleteGroupSnapshot),
    /// `snapshot_ids`: the members the CO believes the group has (empty: not given).
    GetGroupSnapshot {
        /// The group snapshot, by id.
        group_snapshot_id: String,
        /// The group's member snapshots, by id.
        snapshot_ids: Vec<String>,
        /// The secrets the CO sent for this call (never logged).
        secrets: Secrets,
    },
    /// The NodeStage RPC.
    NodeStage(NodeStage),
    /// The NodeUnstage RPC.
    NodeUnstage(NodeUnstage),
    /// The NodePublish RPC.
    NodePublish(NodePublish),
    /// The NodeUnpublish RPC.
    NodeUnpublish(NodeUnpublish),
    /// The NodeVolumeStats RPC.
    NodeVolumeStats(NodeVolumeStats),
    /// The NodeExpand RPC.
    NodeExpand(NodeExpand),
    /// The NodeGetCapabilities RPC.
    NodeGetCapabilities,
    /// The NodeGetInfo RPC.
    NodeGetInfo,
}

/// The secrets field of a request of a kind that carries one, borrowed as
/// `$($b)*` (`ref` or `ref mut`), with the name csi-sanity's secrets file
/// gives that call's secrets.
macro_rules! request_secrets {
    ($request:expr, $($b:tt)*) => {
        match $request {
            Request::CreateVolume(CreateVolume { $($b)* secrets, .. }) => Some(("CreateVolumeSecret", secrets)),
            Request::DeleteVolume(DeleteVolume { $($b)* secrets, .. }) => Some(("DeleteVolumeSecret", secrets)),
            Request::ControllerPublish(ControllerPublish { $($b)* secrets, .. }) => {
                Some(("ControllerPublishVolumeSecret", secrets))
            }
            Request::ControllerUnpublish(ControllerUnpublish { $($b)* secrets, .. }) => {
                Some(("ControllerUnpublishVolumeSecret", secrets))
            }
            Request::ValidateCapabilities(ValidateCapabilities { $($b)* secrets, .. }) => {
                Some(("ControllerValidateVolumeCapabilitiesSecret", secrets))
            }
            Request::ControllerExpand(ControllerExpand { $($b)* secrets, .. }) => {
                Some(("ControllerExpandVolumeSecret", secrets))
            }
            Request::ControllerModify(ControllerModify { $($b)* secrets, .. }) => {
                Some(("ControllerModifyVolumeSecret", secrets))
            }
            Request::CreateSnapshot(CreateSnapshot { $($b)* secrets, .. }) => Some(("CreateSnapshotSecret", secrets)),
            Request::DeleteSnapshot(DeleteSnapshot { $($b)* secrets, .. }) => Some(("DeleteSnapshotSecret", secrets)),
            Request::ListSnapshots(ListSnapshots { $($b)* secrets, .. }) => Some(("ListSnapshotsSecret", secrets)),
            Request::CreateGroupSnapshot(CreateGroupSnapshot { $($b)* secrets, .. }) => {
                Some(("CreateVolumeGroupSnapshotSecret", secrets))
            }
            Request::DeleteGroupSnapshot(DeleteGroupSnapshot { $($b)* secrets, .. }) => {
                Some(("DeleteVolumeGroupSnapshotSecret", secrets))
            }
            Request::GetGroupSnapshot { $($b)* secrets, .. } => Some(("GetVolumeGroupSnapshotSecret", secrets)),
            Request::NodeStage(NodeStage { $($b)* secrets, .. }) => Some(("NodeStageVolumeSecret", secrets)),
            Request::NodePublish(NodePublish { $($b)* secrets, .. }) => Some(("NodePublishVolumeSecret", secrets)),
            Request::NodeExpand(NodeExpand { $($b)* secrets, .. }) => Some(("NodeExpandVolumeSecret", secrets)),
            _ => None,
        }
    };
}

impl Request {
    /// The request's secrets, if it is of a kind that carries any, with
    /// the key csi-sanity's secrets file gives them
    /// (`CreateVolumeSecret`, `NodeStageVolumeSecret`…).
    pub fn secrets(&self) -> Option<(&'static str, &Secrets)> {
        request_secrets!(*self, ref)
    }

    /// [`Request::secrets`], to set them.
    pub fn secrets_mut(&mut self) -> Option<(&'static str, &mut Secrets)> {
        request_secrets!(*self, ref mut)
    }

    /// The RPC's name as CSI spells it (for logs and errors).
    pub fn method(&self) -> &'static str {
        match self {
            Request::GetPluginInfo => "GetPluginInfo",
            Request::GetPluginCapabilities => "GetPluginCapabilities",
            Request::Probe => "Probe",
            Request::CreateVolume(_) => "CreateVolume",
            Request::DeleteVolume(_) => "DeleteVolume",
            Request::ControllerPublish(_) => "ControllerPublishVolume",
            Request::ControllerUnpublish(_) => "ControllerUnpublishVolume",
            Request::ValidateCapabilities(_) => "ValidateVolumeCapabilities",
            Request::ListVolumes(_) => "ListVolumes",
            Request::GetCapacity(_) => "GetCapacity",
            Request::ControllerGetCapabilities => "ControllerGetCapabilities",
            Request::ControllerExpand(_) => "ControllerExpandVolume",
            Request::ControllerGetVolume { .. } => "ControllerGetVolume",
            Request::ControllerModify(_) => "ControllerModifyVolume",
            Request::CreateSnapshot(_) => "CreateSnapshot",
            Request::DeleteSnapshot(_) => "DeleteSnapshot",
            Request::ListSnapshots(_) => "ListSnapshots",
            Request::GetSnapshot { .. } => "GetSnapshot",
            Request::GroupControllerGetCapabilities => "GroupControllerGetCapabilities",
            Request::CreateGroupSnapshot(_) => "CreateVolumeGroupSnapshot",
            Request::DeleteGroupSnapshot(_) => "DeleteVolumeGroupSnapshot",
            Request::GetGroupSnapshot { .. } => "GetVolumeGroupSnapshot",
            Request::NodeStage(_) => "NodeStageVolume",
            Request::NodeUnstage(_) => "NodeUnstageVolume",
            Request::NodePublish(_) => "NodePublishVolume",
            Request::NodeUnpublish(_) => "NodeUnpublishVolume",
            Request::NodeVolumeStats(_) => "NodeGetVolumeStats",
            Request::NodeExpand(_) => "NodeExpandVolume",
            Request::NodeGetCapabilities => "NodeGetCapabilities",
            Request::NodeGetInfo => "NodeGetInfo",
        }
    }

    /// The volume the request is about (the CreateVolume name for creates).
    pub fn volume(&self) -> Option<&str> {
        Some(match self {
            Request::CreateVolume(r) => &r.name,
            Request::DeleteVolume(r) => &r.volume_id,
            Request::ControllerPublish(r) => &r.volume_id,
            Request::ControllerUnpublish(r) => &r.volume_id,
            Request::ValidateCapabilities(r) => &r.volume_id,
            Request::ControllerExpand(r) => &r.volume_id,
            Request::ControllerGetVolume { volume_id } => volume_id,
            Request::ControllerModify(r) => &r.volume_id,
            Request::CreateSnapshot(r) => &r.source_volume_id,
            Request::NodeStage(r) => &r.volume_id,
            Request::NodeUnstage(r) => &r.volume_id,
            Request::NodePublish(r) => &r.volume_id,
            Request::NodeUnpublish(r) => &r.volume_id,
            Request::NodeVolumeStats(r) => &r.volume_id,
            Request::NodeExpand(r) => &r.volume_id,
            _ => return None,
        })
    }

    /// The snapshot the request is about (the CreateSnapshot name for creates).
    pub fn snapshot(&self) -> Option<&str> {
        Some(match self {
            Request::CreateSnapshot(r) => &r.name,
            Request::DeleteSnapshot(r) => &r.snapshot_id,
            Request::GetSnapshot { snapshot_id } => snapshot_id,
            Request::CreateGroupSnapshot(r) => &r.name,
            Request::DeleteGroupSnapshot(r) => &r.group_snapshot_id,
            Request::GetGroupSnapshot {
                group_snapshot_id, ..
            } => group_snapshot_id,
            _ => return None,
        })
    }

    /// What the request is about, for logs: its volume, else its snapshot.
    pub fn subject(&self) -> Option<&str> {
        self.volume().or(self.snapshot())
    }

    /// The node path the request is about, if any (for logs).
    pub fn path(&self) -> Option<&str> {
        Some(match self {
            Request::NodeStage(r) => &r.staging_target_path,
            Request::NodeUnstage(r) => &r.staging_target_path,
            Request::NodePublish(r) => &r.target_path,
            Request::NodeUnpublish(r) => &r.target_path,
            Request::NodeVolumeStats(r) => &r.volume_path,
            Request::NodeExpand(r) => &r.volume_path,
            _ => return None,
        })
    }
}

/// Controller capabilities (CSI `ControllerServiceCapability.RPC.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
pub enum ControllerCapability {
    /// CSI's `CREATE_DELETE_VOLUME`.
    CreateDeleteVolume,
    /// CSI's `PUBLISH_UNPUBLISH_VOLUME`.
    PublishUnpublishVolume,
    /// CSI's `LIST_VOLUMES`.
    ListVolumes,
    /// CSI's `GET_CAPACITY`.
    GetCapacity,
    /// CSI's `PUBLISH_READONLY`.
    PublishReadonly,
    /// CSI's `EXPAND_VOLUME`.
    ExpandVolume,
    /// CSI's `LIST_VOLUMES_PUBLISHED_NODES`.
    ListVolumesPublishedNodes,
    /// CSI's `VOLUME_CONDITION`.
    VolumeCondition,
    /// CSI's `GET_VOLUME`.
    GetVolume,
    /// CSI's `SINGLE_NODE_MULTI_WRITER`.
    SingleNodeMultiWriter,
    /// CSI's `MODIFY_VOLUME`.
    ModifyVolume,
    /// CSI's `CREATE_DELETE_SNAPSHOT`.
    CreateDeleteSnapshot,
    /// CSI's `LIST_SNAPSHOTS`.
    ListSnapshots,
    /// CSI's `CLONE_VOLUME`.
    CloneVolume,
    /// CSI's `GET_SNAPSHOT`.
    GetSnapshot,
}

/// Node capabilities (CSI `NodeServiceCapability.RPC.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
pub enum NodeCapability {
    /// CSI's `STAGE_UNSTAGE_VOLUME`.
    StageUnstageVolume,
    /// CSI's `GET_VOLUME_STATS`.
    GetVolumeStats,
    /// CSI's `EXPAND_VOLUME`.
    ExpandVolume,
    /// CSI's `VOLUME_CONDITION`.
    VolumeCondition,
    /// CSI's `SINGLE_NODE_MULTI_WRITER`.
    SingleNodeMultiWriter,
}

/// Group controller capabilities (CSI `GroupControllerServiceCapability.RPC.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
pub enum GroupCapability {
    /// CSI's `CREATE_DELETE_GET_VOLUME_GROUP_SNAPSHOT`.
    CreateDeleteGetVolumeGroupSnapshot,
}

/// Plugin capabilities (CSI `PluginCapability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
pub enum PluginCapability {
    /// CSI's `CONTROLLER_SERVICE`.
    ControllerService,
    /// CSI's `GROUP_CONTROLLER_SERVICE`.
    GroupControllerService,
    /// CSI's `VOLUME_ACCESSIBILITY_CONSTRAINTS`.
    VolumeAccessibilityConstraints,
    /// CSI's `ONLINE_EXPANSION`.
    OnlineExpansion,
    /// CSI's `OFFLINE_EXPANSION`.
    OfflineExpansion,
}

/// An entry of `ListVolumes`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListedVolume {
    /// The volume.
    pub volume: Volume,
    /// The nodes the volume is published to.
    pub published_node_ids: Vec<String>,
    /// The volume's health, when the driver knows it.
    pub condition: Option<VolumeCondition>,
}

/// Every answer the driver machine gives.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Response {
    /// The answer: plugin info.
    PluginInfo {
        /// The driver's name.
        name: String,
        /// The driver's version.
        vendor_version: String,
        /// GetPluginInfo's manifest.
        manifest: Attributes,
    },
    /// The answer: plugin capabilities.
    PluginCapabilities(Vec<PluginCapability>),
    /// The answer: probe.
    Probe {
        /// True when the driver is ready to serve.
        ready: bool,
    },
    /// The answer: volume.
    Volume(Volume),
    /// The answer: empty.
    Empty,
    /// The answer: published.
    Published {
        /// What ControllerPublish returned for this node.
        publish_context: Attributes,
    },
    /// The answer: validated.
    Validated {
        /// `None`: not confirmed; the message says why.
        confirmed: Option<Vec<Capability>>,
        /// What CreateVolume returned for the volume to carry to the node.
        volume_context: Attributes,
        /// The StorageClass parameters, `csi.storage.k8s.io/` keys stripped.
        parameters: Attributes,
        /// Mutable parameters (a VolumeAttributesClass's).
        mutable_parameters: Attributes,
        /// Why the capabilities were not confirmed, for a person.
        message: String,
    },
    /// The answer: volumes.
    Volumes {
        /// This page's entries.
        entries: Vec<ListedVolume>,
        /// Where the next page starts (empty: this was the last).
        next_token: String,
    },
    /// The answer: capacity.
    Capacity {
        /// Bytes free for new volumes.
        available_bytes: u64,
        /// The largest volume that can be made now.
        maximum_volume_size: Option<u64>,
        /// The smallest volume that can be made, if there is a floor.
        minimum_volume_size: Option<u64>,
    },
    /// The answer: controller capabilities.
    ControllerCapabilities(Vec<ControllerCapability>),
    /// The answer: controller expanded.
    ControllerExpanded {
        /// The volume's size now, in bytes.
        capacity_bytes: u64,
        /// True when NodeExpandVolume must follow on the node.
        node_expansion_required: bool,
    },
    /// The answer: controller volume.
    ControllerVolume(ListedVolume),
    /// The answer: stats.
    Stats {
        /// Space and inodes on the volume.
        usage: VolumeUsage,
        /// The volume's health, when the driver knows it.
        condition: Option<VolumeCondition>,
    },
    /// The answer: node expanded.
    NodeExpanded {
        /// The volume's size now, in bytes.
        capacity_bytes: u64,
    },
    /// The answer: snapshot.
    Snapshot(Snapshot),
    /// The answer: snapshots.
    Snapshots {
        /// This page's entries.
        entries: Vec<Snapshot>,
        /// Where the next page starts (empty: this was the last).
        next_token: String,
    },
    /// The answer: group snapshot.
    GroupSnapshot(GroupSnapshot),
    /// The answer: group capabilities.
    GroupCapabilities(Vec<GroupCapability>),
    /// The answer: node capabilities.
    NodeCapabilities(Vec<NodeCapability>),
    /// The answer: node info.
    NodeInfo {
        /// The node, by the id NodeGetInfo reported.
        node_id: String,
        /// The most volumes one node may have published (0: the CO decides).
        max_volumes_per_node: u64,
        /// Where the node can reach volumes from.
        accessible_topology: Option<Topology>,
    },
}
