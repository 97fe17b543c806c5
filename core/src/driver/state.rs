//! The driver machine's state: plain data, persisted after every change.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::plan::Plan;
use super::types::*;
use crate::OpId;

/// Everything a driver process must remember across restarts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DriverState {
    /// Volumes by id (controller side).
    pub volumes: BTreeMap<String, VolumeRecord>,
    /// CreateVolume names to volume ids.
    pub names: BTreeMap<String, String>,
    /// Volumes present on this node (node side), by id.
    pub node: BTreeMap<String, NodeVolume>,
    /// Operations handed to the adapter and not yet completed. Recorded before
    /// the adapter sees them; carried out again after a restart.
    pub in_flight: BTreeMap<OpId, InFlight>,
    /// The next operation id (persisted, so ids are never reused).
    pub next_op: u64,
    /// Snapshots by id.
    #[serde(default)]
    pub snapshots: BTreeMap<String, SnapshotRecord>,
    /// CreateSnapshot names to snapshot ids (members of a group have none).
    #[serde(default)]
    pub snapshot_names: BTreeMap<String, String>,
    /// Group snapshots by id.
    #[serde(default)]
    pub groups: BTreeMap<String, GroupRecord>,
    /// CreateVolumeGroupSnapshot names to group ids.
    #[serde(default)]
    pub group_names: BTreeMap<String, String>,
}

/// A group snapshot the controller cut. Its members are in
/// [`DriverState::snapshots`] too, without a name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// The name CreateVolumeGroupSnapshot was asked with.
    pub name: String,
    /// The group as the backend last reported it.
    pub group: GroupSnapshot,
    /// The parameters it was cut with.
    pub parameters: Attributes,
}

/// A snapshot the controller cut.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    /// The name CreateSnapshot was asked with; empty for a group's member.
    pub name: String,
    /// The snapshot as the backend last reported it.
    pub snapshot: Snapshot,
    /// The parameters it was cut with.
    pub parameters: Attributes,
}

/// A volume the controller created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeRecord {
    /// The name CreateVolume was asked with.
    pub name: String,
    /// The volume as created.
    pub volume: Volume,
    /// The capabilities it was created for.
    pub capabilities: Vec<Capability>,
    /// The parameters it was created with.
    pub parameters: Attributes,
    /// Its mutable parameters now.
    pub mutable_parameters: Attributes,
    /// The topology requirement it was created for.
    pub accessibility: Option<TopologyRequirement>,
    /// The size range it was created (or last expanded) for.
    pub capacity: CapacityRange,
    /// The last expansion still needs the node to grow the filesystem.
    pub node_expansion_required: bool,
    /// Nodes the volume is published to (ControllerPublish).
    pub published: BTreeMap<String, Publication>,
}

/// A ControllerPublish to one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publication {
    /// How the node uses it.
    pub capability: Capability,
    /// Published read-only.
    pub readonly: bool,
    /// What the publish answered.
    pub publish_context: Attributes,
    /// False while the publish is in flight or after it failed: the effect may
    /// or may not have happened, so an unpublish must still be carried out.
    pub certain: bool,
}

/// A volume on this node: its stage (if any) and its published targets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeVolume {
    /// The global mount, if staged (or staging).
    pub stage: Option<StageRecord>,
    /// Pod target paths → their publish.
    pub targets: BTreeMap<String, TargetRecord>,
    /// Size the filesystem was last grown to by NodeExpandVolume.
    pub expanded_bytes: Option<u64>,
}

/// A NodeStageVolume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageRecord {
    /// The global mount path.
    pub staging_path: String,
    /// How it was staged.
    pub capability: Capability,
    /// The publish context it was staged with.
    pub publish_context: Attributes,
    /// The volume context it was staged with.
    pub volume_context: Attributes,
    /// The stage succeeded (false: it may or may not have happened).
    pub certain: bool,
}

/// A NodePublishVolume to one target path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetRecord {
    /// The global mount it was published from.
    pub staging_path: String,
    /// How it was published.
    pub capability: Capability,
    /// Published read-only.
    pub readonly: bool,
    /// The publish context it was published with.
    pub publish_context: Attributes,
    /// The volume context it was published with.
    pub volume_context: Attributes,
    /// The publish succeeded (false: it may or may not have happened).
    pub certain: bool,
}

/// An operation the adapter is carrying out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InFlight {
    /// The lock it holds: a volume id, or `name:<name>` for a create.
    pub key: String,
    /// The plan, carried out again after a restart.
    pub plan: Plan,
    /// The request waiting for the answer; `None` after a restart.
    #[serde(skip)]
    pub rpc: Option<u64>,
}

impl DriverState {
    /// True when an operation holding `key` is in flight.
    pub fn busy(&self, key: &str) -> bool {
        self.in_flight.values().any(|f| f.key == key)
    }

    /// True when a plan in flight reads volume or snapshot `id`: a snapshot
    /// being cut from it, or a volume being cloned or restored from it.
    pub fn reading(&self, id: &str) -> bool {
        self.in_flight.values().any(|f| match &f.plan {
            Plan::CreateSnapshot(p) => p.source.volume_id == id,
            Plan::CreateGroupSnapshot(p) => p.sources.iter().any(|v| v.volume_id == id),
            Plan::CreateVolume(p) => matches!(
                &p.content_source,
                Some(ContentSource::Snapshot(s) | ContentSource::Volume(s)) if s == id
            ),
            _ => false,
        })
    }

    /// Published targets of `volume_id` on this node.
    pub fn targets(&self, volume_id: &str) -> Vec<&str> {
        self.node
            .get(volume_id)
            .map(|v| v.targets.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }
}

/// Invariants of the driver state, used by unit tests, properties, the
/// simulator and the fuzzers. Returns the first violation found.
pub fn check_invariants(state: &DriverState) -> Result<(), String> {
    for (id, v) in &state.node {
        if v.stage.is_none() && v.targets.is_empty() {
            return Err(format!("node volume {id} is recorded with nothing on it"));
        }
        for (path, t) in &v.targets {
            if !t.staging_path.is_empty() {
                match &v.stage {
                    Some(s) if s.staging_path == t.staging_path => {}
                    _ => {
                        return Err(format!(
                            "volume {id} is published at {path} from staging path {} that is not staged",
                            t.staging_path
                        ));
                    }
                }
            }
        }
    }
    for (name, id) in &state.names {
        match state.volumes.get(id) {
            Some(r) if &r.name == name => {}
            _ => {
                return Err(format!(
                    "name {name} maps to volume {id} that does not carry it"
                ));
            }
        }
    }
    for (id, r) in &state.volumes {
        if state.names.get(&r.name) != Some(id) {
            return Err(format!("volume {id} is missing from the name index"));
        }
        let single: Vec<_> = r
            .published
            .iter()
            .filter(|(_, p)| !p.capability.access_mode.multi_node())
            .collect();
        if !single.is_empty() && r.published.len() > 1 {
            return Err(format!(
                "single-node volume {id} is published to {} nodes",
                r.published.len()
            ));
        }
    }
    for (name, id) in &state.snapshot_names {
        match state.snapshots.get(id) {
            Some(r) if &r.name == name => {}
            _ => {
                return Err(format!(
                    "snapshot name {name} maps to snapshot {id} that does not carry it"
                ));
            }
        }
    }
    for (id, r) in &state.snapshots {
        if r.snapshot.snapshot_id != *id {
            return Err(format!(
                "snapshot {id} is recorded as {}",
                r.snapshot.snapshot_id
            ));
        }
        let group = &r.snapshot.group_snapshot_id;
        if r.name.is_empty() {
            let member = state
                .groups
                .get(group)
                .is_some_and(|g| g.group.snapshots.iter().any(|s| s.snapshot_id == *id));
            if !member {
                return Err(format!(
                    "snapshot {id} has no name and is no member of a group"
                ));
            }
        } else if state.snapshot_names.get(&r.name) != Some(id) {
            return Err(format!("snapshot {id} is missing from the name index"));
        }
    }
    for (id, g) in &state.groups {
        if state.group_names.get(&g.name) != Some(id) {
            return Err(format!(
                "group snapshot {id} is missing from the name index"
            ));
        }
        for s in &g.group.snapshots {
            if !state.snapshots.contains_key(&s.snapshot_id) {
                return Err(format!(
                    "group snapshot {id} names member {} that is not recorded",
                    s.snapshot_id
                ));
            }
        }
    }
    let mut keys = std::collections::BTreeSet::new();
    for f in state.in_flight.values() {
        if !keys.insert(&f.key) {
            return Err(format!("two operations in flight hold {}", f.key));
        }
    }
    Ok(())
}
