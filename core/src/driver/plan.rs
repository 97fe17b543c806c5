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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreatePlan {
    pub name: String,
    pub capacity: CapacityRange,
    /// The size the machine suggests: `required_bytes`, or the driver's
    /// default (within `limit_bytes`) when the request leaves it open.
    pub suggested_bytes: u64,
    pub capabilities: Vec<Capability>,
    pub parameters: Attributes,
    pub mutable_parameters: Attributes,
    pub content_source: Option<ContentSource>,
    pub accessibility: Option<TopologyRequirement>,
    #[serde(skip)]
    pub secrets: Secrets,
}

/// Make a volume usable at the staging path on this node (format when empty,
/// then mount; or whatever the backend's storage needs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StagePlan {
    pub volume_id: String,
    pub staging_path: String,
    pub capability: Capability,
    pub publish_context: Attributes,
    pub volume_context: Attributes,
    #[serde(skip)]
    pub secrets: Secrets,
}

/// Make a volume visible at a workload's target path (a bind mount of the
/// staging path, or of the device for raw block).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublishPlan {
    pub volume_id: String,
    /// Empty when the driver does not stage.
    pub staging_path: String,
    pub target_path: String,
    pub capability: Capability,
    pub readonly: bool,
    pub publish_context: Attributes,
    pub volume_context: Attributes,
    #[serde(skip)]
    pub secrets: Secrets,
}

/// One step for the adapter to carry out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Plan {
    CreateVolume(CreatePlan),
    DeleteVolume {
        volume: Volume,
        #[serde(skip)]
        secrets: Secrets,
    },
    ControllerPublish {
        volume: Volume,
        node_id: String,
        capability: Capability,
        readonly: bool,
        #[serde(skip)]
        secrets: Secrets,
    },
    /// Unpublish from each of `node_ids` in turn.
    ControllerUnpublish {
        volume: Volume,
        node_ids: Vec<String>,
        /// Nodes the volume stays published to (a backend whose nodes
        /// share one device keeps it for them).
        #[serde(default)]
        still_published: Vec<String>,
        #[serde(skip)]
        secrets: Secrets,
    },
    ControllerExpand {
        volume: Volume,
        capacity: CapacityRange,
        capability: Option<Capability>,
        #[serde(skip)]
        secrets: Secrets,
    },
    ControllerModify {
        volume: Volume,
        mutable_parameters: Attributes,
        #[serde(skip)]
        secrets: Secrets,
    },
    /// A query: free capacity for volumes with these parameters.
    GetCapacity {
        capabilities: Vec<Capability>,
        parameters: Attributes,
        accessible_topology: Option<Topology>,
    },
    Stage(StagePlan),
    /// Undo a stage: unmount the staging path and remove what the stage made.
    Unstage(StagePlan),
    Publish(PublishPlan),
    /// Undo a publish: unmount the target and remove it.
    Unpublish(PublishPlan),
    NodeExpand {
        volume_id: String,
        /// Where the filesystem (or device, for raw block) is reachable.
        volume_path: String,
        staging_path: String,
        capability: Option<Capability>,
        required_bytes: u64,
        publish_context: Attributes,
        volume_context: Attributes,
    },
    /// A query: usage of the volume at `volume_path`.
    VolumeStats {
        volume_id: String,
        volume_path: String,
        block: bool,
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
            Plan::GetCapacity { .. } => "get-capacity",
            Plan::Stage(_) => "stage",
            Plan::Unstage(_) => "unstage",
            Plan::Publish(_) => "publish",
            Plan::Unpublish(_) => "unpublish",
            Plan::NodeExpand { .. } => "node-expand",
            Plan::VolumeStats { .. } => "volume-stats",
        }
    }

    /// Queries change nothing, hold no volume lock and are not persisted.
    pub fn is_query(&self) -> bool {
        matches!(self, Plan::GetCapacity { .. } | Plan::VolumeStats { .. })
    }
}

/// What a carried-out plan produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The plan completed and has nothing to report.
    Done,
    Created(Volume),
    Published {
        publish_context: Attributes,
    },
    ControllerExpanded {
        capacity_bytes: u64,
        node_expansion_required: bool,
    },
    Capacity {
        available_bytes: u64,
        maximum_volume_size: Option<u64>,
        minimum_volume_size: Option<u64>,
    },
    NodeExpanded {
        capacity_bytes: u64,
    },
    Stats {
        usage: VolumeUsage,
        condition: Option<VolumeCondition>,
    },
}
