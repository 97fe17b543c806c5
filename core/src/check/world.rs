//! The oracle's picture of a driver: what the CSI specification says must
//! now be true, given every answer so far. Written from the specification
//! alone, not from volplane's driver machine, so that volplane's own
//! driver is judged by something other than itself.
//!
//! One answer may leave the picture uncertain (a call whose answer was
//! lost may or may not have taken effect; calls in flight together took
//! effect in some order; a driver's choice where the specification leaves
//! one is unknown until seen), so the oracle keeps a set of worlds, each a
//! possible truth; an answer keeps the worlds that explain it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::step::Slot;

/// A volume the driver has (in one world).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Vol {
    /// The id CreateVolume answered; `None` while the only create that
    /// made it was lost.
    pub id: Option<String>,
    /// The bytes it was asked to have at least.
    pub asked: u64,
    /// The capacity last answered (0: unknown).
    pub bytes: u64,
    /// Published to this node (with the read-only flag), by ControllerPublishVolume.
    pub published: Option<bool>,
    /// What it was filled from: `Shape::FromSnapshot` or `Shape::Clone`.
    pub source: Option<super::step::Shape>,
    /// Asked for beyond this node's segment (`Shape::Elsewhere`).
    #[serde(default)]
    pub away: Option<Away>,
}

impl Vol {
    /// The CO may use it on this node: it was asked for here, or its
    /// create answered that this node reaches it. A volume this node
    /// cannot reach is kept off it, as Kubernetes schedules no pod of it
    /// here (the spec gives the plugin no error for such a publish).
    pub fn reachable(&self) -> bool {
        self.away.is_none_or(|a| a.reached)
    }
}

/// Where a volume asked for beyond this node's segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Away {
    /// This node's segment was requisite too (`Shape::Elsewhere`'s).
    pub here_too: bool,
    /// Its create answered that this node reaches it; until an answer says
    /// so (a lost one), it is kept off the node.
    pub reached: bool,
}

/// What the node holds of a volume (in one world): kept apart from the
/// volume itself, since a driver may delete a volume that is still staged.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeVol {
    /// The volume id the node holds it by (a slot's volume deleted and
    /// made again is another volume: the node still holds the old one).
    pub id: String,
    /// Staged at its staging path; `Some(true)`: in the read-only mode.
    pub staged: Option<bool>,
    /// Published at these targets, with their read-only flags.
    pub targets: BTreeMap<Slot, bool>,
}

impl NodeVol {
    /// Neither staged nor published.
    pub fn is_empty(&self) -> bool {
        self.staged.is_none() && self.targets.is_empty()
    }
}

/// A snapshot the driver has.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Snap {
    /// The id CreateSnapshot answered (`None` while lost).
    pub id: Option<String>,
    /// The volume slot it is of.
    pub of: Slot,
    /// The id of the volume it is of (the slot's volume then).
    pub source_id: String,
    /// Its size (0: unknown): a volume filled from it is at least as big.
    pub bytes: u64,
    /// Of a volume this node cannot reach: no volume here is filled from it.
    #[serde(default)]
    pub away: bool,
}

/// A group snapshot the driver has.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Group {
    /// The id CreateVolumeGroupSnapshot answered (`None` while lost).
    pub id: Option<String>,
    /// The volume slots it is of.
    pub of: (Slot, Slot),
    /// The ids of those volumes then.
    pub source_ids: (String, String),
}

/// A question the specification lets a driver answer either way; once a
/// driver has answered, it answers the same way after.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Choice {
    /// DeleteVolume of a volume published to a node by ControllerPublishVolume.
    DeletePublished,
    /// DeleteVolume of a volume staged or published on the node.
    DeleteOnNode,
    /// DeleteVolume of a volume with snapshots.
    DeleteWithSnapshots,
}

/// One possible truth about the driver.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct World {
    /// The volumes it has, by slot.
    pub volumes: BTreeMap<Slot, Vol>,
    /// What the node holds, by volume slot.
    pub node: BTreeMap<Slot, NodeVol>,
    /// The snapshots it has, by slot.
    pub snapshots: BTreeMap<Slot, Snap>,
    /// The group snapshots it has, by slot.
    pub groups: BTreeMap<Slot, Group>,
    /// How it answered the questions the specification leaves open
    /// (true: it allows).
    pub choices: BTreeMap<Choice, bool>,
    /// The most a new volume may take, as the last GetCapacity said, less
    /// what creates since were granted; unknown after a delete (which may
    /// give space back) and before any GetCapacity.
    #[serde(default)]
    pub capacity: Option<u64>,
}

impl World {
    /// What the node holds of `v` (empty if nothing).
    pub fn node(&self, v: Slot) -> NodeVol {
        self.node.get(&v).cloned().unwrap_or_default()
    }

    /// Sets what the node holds of `v`, dropping an empty entry.
    pub fn set_node(&mut self, v: Slot, n: NodeVol) {
        if n.is_empty() {
            self.node.remove(&v);
        } else {
            self.node.insert(v, n);
        }
    }

    /// The snapshots of volume `v` (a group snapshot's members too).
    pub fn snapshots_of(&self, v: Slot) -> impl Iterator<Item = Slot> + '_ {
        let grouped = self
            .groups
            .iter()
            .filter(move |(_, g)| g.of.0 == v || g.of.1 == v)
            .map(|(k, _)| 128 + *k);
        self.snapshots
            .iter()
            .filter(move |(_, s)| s.of == v)
            .map(|(k, _)| *k)
            .chain(grouped)
    }

    /// The ids of every volume that exists for certain in this world.
    pub fn volume_ids(&self) -> BTreeSet<&str> {
        self.volumes
            .values()
            .filter_map(|v| v.id.as_deref())
            .collect()
    }
}

/// What was seen at one path of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PathSeen {
    /// Something (a file, a directory, a device node) is at the path.
    pub exists: bool,
    /// A mount is at the path: `Some(read_only)`.
    pub mounted: Option<bool>,
    /// What is at the path is a block device.
    pub block_device: bool,
}

/// What the node looked like after a step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSeen {
    /// Each path asked about.
    pub paths: BTreeMap<String, PathSeen>,
    /// Mount points outside the kubelet directory.
    pub outside: BTreeSet<String>,
    /// What each mount seen (at a path asked about, or outside) mounts:
    /// its [`source ids`](source_id) — whose filesystem and which
    /// directory of it, and the device, when it is a loop device.
    pub sources: BTreeMap<String, BTreeSet<String>>,
    /// Mount points beneath the prefixes asked about.
    pub under: BTreeSet<String>,
    /// Files and directories beneath the prefixes asked about.
    pub left: BTreeSet<String>,
    /// The loop devices attached, each as `device → backing file` (asked
    /// with what lies outside the kubelet directory).
    pub loops: BTreeSet<String>,
    /// The entries of the storage directories asked about, each as
    /// `directory/name`; past the checker's bound on what a listing holds
    /// (`MOST_LISTED`) the rest are not read.
    pub stored: BTreeSet<String>,
}

/// The source id of a mount of the filesystem `major:minor` at its
/// directory `root`: two mounts with one id show the same files.
pub fn source_id(major: u32, minor: u32, root: &str) -> String {
    format!("{major}:{minor} {root}")
}

/// The source id of a device: a filesystem on it, or its node bound
/// elsewhere (a raw block volume's target).
pub fn device_id(device: &str) -> String {
    format!("device {device}")
}

/// Whether `id` is a [`device_id`].
pub fn is_device_id(id: &str) -> bool {
    id.starts_with("device ")
}

/// The device of an entry of [`NodeSeen::loops`] (`device → backing file`).
pub fn loop_device(entry: &str) -> &str {
    entry.split_once(" → ").map_or(entry, |(device, _)| device)
}
