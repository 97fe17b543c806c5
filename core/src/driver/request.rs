//! Requests the driver machine accepts and the answers it gives: one variant
//! per CSI RPC, already validated field by field at the wire boundary.
//!
//! Fields mirror the CSI messages of the same names (the CSI spec documents
//! them); what the machine checks and answers is documented on the machine.
#![allow(missing_docs)]

use serde::{Deserialize, Serialize};

use super::types::*;

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct CreateVolume {
    pub name: String,
    pub capacity: CapacityRange,
    pub capabilities: Vec<Capability>,
    pub parameters: Attributes,
    pub mutable_parameters: Attributes,
    pub secrets: Secrets,
    pub content_source: Option<ContentSource>,
    pub accessibility: Option<TopologyRequirement>,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct DeleteVolume {
    pub volume_id: String,
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct ControllerPublish {
    pub volume_id: String,
    pub node_id: String,
    pub capability: Capability,
    pub readonly: bool,
    pub volume_context: Attributes,
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct ControllerUnpublish {
    pub volume_id: String,
    /// `None`: unpublish from every node.
    pub node_id: Option<String>,
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct ValidateCapabilities {
    pub volume_id: String,
    pub volume_context: Attributes,
    pub capabilities: Vec<Capability>,
    pub parameters: Attributes,
    pub mutable_parameters: Attributes,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct ListVolumes {
    /// 0: no limit.
    pub max_entries: u32,
    pub starting_token: String,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct GetCapacity {
    pub capabilities: Vec<Capability>,
    pub parameters: Attributes,
    pub accessible_topology: Option<Topology>,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct ControllerExpand {
    pub volume_id: String,
    pub capacity: CapacityRange,
    pub capability: Option<Capability>,
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct ControllerModify {
    pub volume_id: String,
    pub mutable_parameters: Attributes,
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct CreateSnapshot {
    pub source_volume_id: String,
    pub name: String,
    pub parameters: Attributes,
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct DeleteSnapshot {
    pub snapshot_id: String,
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct ListSnapshots {
    /// 0: no limit.
    pub max_entries: u32,
    pub starting_token: String,
    /// Only snapshots of this volume (empty: any).
    pub source_volume_id: String,
    /// Only this snapshot (empty: any).
    pub snapshot_id: String,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct CreateGroupSnapshot {
    pub name: String,
    pub source_volume_ids: Vec<String>,
    pub parameters: Attributes,
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct DeleteGroupSnapshot {
    pub group_snapshot_id: String,
    /// The members the CO believes the group has (empty: not given).
    pub snapshot_ids: Vec<String>,
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct NodeStage {
    pub volume_id: String,
    pub publish_context: Attributes,
    pub staging_target_path: String,
    pub capability: Capability,
    pub volume_context: Attributes,
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct NodeUnstage {
    pub volume_id: String,
    pub staging_target_path: String,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct NodePublish {
    pub volume_id: String,
    pub publish_context: Attributes,
    /// Empty when the CO did not stage (the driver lacks STAGE_UNSTAGE).
    pub staging_target_path: String,
    pub target_path: String,
    pub capability: Capability,
    pub readonly: bool,
    pub volume_context: Attributes,
    pub secrets: Secrets,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct NodeUnpublish {
    pub volume_id: String,
    pub target_path: String,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct NodeVolumeStats {
    pub volume_id: String,
    pub volume_path: String,
    pub staging_target_path: String,
}

#[derive(Debug, Clone, PartialEq, Hash)]
pub struct NodeExpand {
    pub volume_id: String,
    pub volume_path: String,
    pub capacity: CapacityRange,
    pub staging_target_path: String,
    pub capability: Option<Capability>,
    pub secrets: Secrets,
}

/// Every request the driver machine handles.
#[derive(Debug, Clone, PartialEq, Hash)]
pub enum Request {
    GetPluginInfo,
    GetPluginCapabilities,
    Probe,
    CreateVolume(CreateVolume),
    DeleteVolume(DeleteVolume),
    ControllerPublish(ControllerPublish),
    ControllerUnpublish(ControllerUnpublish),
    ValidateCapabilities(ValidateCapabilities),
    ListVolumes(ListVolumes),
    GetCapacity(GetCapacity),
    ControllerGetCapabilities,
    ControllerExpand(ControllerExpand),
    ControllerGetVolume {
        volume_id: String,
    },
    ControllerModify(ControllerModify),
    CreateSnapshot(CreateSnapshot),
    DeleteSnapshot(DeleteSnapshot),
    ListSnapshots(ListSnapshots),
    GetSnapshot {
        snapshot_id: String,
    },
    GroupControllerGetCapabilities,
    CreateGroupSnapshot(CreateGroupSnapshot),
    DeleteGroupSnapshot(DeleteGroupSnapshot),
    /// `snapshot_ids`: the members the CO believes the group has (empty: not given).
    GetGroupSnapshot {
        group_snapshot_id: String,
        snapshot_ids: Vec<String>,
    },
    NodeStage(NodeStage),
    NodeUnstage(NodeUnstage),
    NodePublish(NodePublish),
    NodeUnpublish(NodeUnpublish),
    NodeVolumeStats(NodeVolumeStats),
    NodeExpand(NodeExpand),
    NodeGetCapabilities,
    NodeGetInfo,
}

impl Request {
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
    CreateDeleteVolume,
    PublishUnpublishVolume,
    ListVolumes,
    GetCapacity,
    PublishReadonly,
    ExpandVolume,
    ListVolumesPublishedNodes,
    VolumeCondition,
    GetVolume,
    SingleNodeMultiWriter,
    ModifyVolume,
    CreateDeleteSnapshot,
    ListSnapshots,
    CloneVolume,
    GetSnapshot,
}

/// Node capabilities (CSI `NodeServiceCapability.RPC.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
pub enum NodeCapability {
    StageUnstageVolume,
    GetVolumeStats,
    ExpandVolume,
    VolumeCondition,
    SingleNodeMultiWriter,
}

/// Group controller capabilities (CSI `GroupControllerServiceCapability.RPC.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
pub enum GroupCapability {
    CreateDeleteGetVolumeGroupSnapshot,
}

/// Plugin capabilities (CSI `PluginCapability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash)]
pub enum PluginCapability {
    ControllerService,
    GroupControllerService,
    VolumeAccessibilityConstraints,
    OnlineExpansion,
    OfflineExpansion,
}

/// An entry of `ListVolumes`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ListedVolume {
    pub volume: Volume,
    pub published_node_ids: Vec<String>,
    pub condition: Option<VolumeCondition>,
}

/// Every answer the driver machine gives.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Response {
    PluginInfo {
        name: String,
        vendor_version: String,
        manifest: Attributes,
    },
    PluginCapabilities(Vec<PluginCapability>),
    Probe {
        ready: bool,
    },
    Volume(Volume),
    Empty,
    Published {
        publish_context: Attributes,
    },
    Validated {
        /// `None`: not confirmed; the message says why.
        confirmed: Option<Vec<Capability>>,
        volume_context: Attributes,
        parameters: Attributes,
        mutable_parameters: Attributes,
        message: String,
    },
    Volumes {
        entries: Vec<ListedVolume>,
        next_token: String,
    },
    Capacity {
        available_bytes: u64,
        maximum_volume_size: Option<u64>,
        minimum_volume_size: Option<u64>,
    },
    ControllerCapabilities(Vec<ControllerCapability>),
    ControllerExpanded {
        capacity_bytes: u64,
        node_expansion_required: bool,
    },
    ControllerVolume(ListedVolume),
    Stats {
        usage: VolumeUsage,
        condition: Option<VolumeCondition>,
    },
    NodeExpanded {
        capacity_bytes: u64,
    },
    Snapshot(Snapshot),
    Snapshots {
        entries: Vec<Snapshot>,
        next_token: String,
    },
    GroupSnapshot(GroupSnapshot),
    GroupCapabilities(Vec<GroupCapability>),
    NodeCapabilities(Vec<NodeCapability>),
    NodeInfo {
        node_id: String,
        max_volumes_per_node: u64,
        accessible_topology: Option<Topology>,
    },
}
