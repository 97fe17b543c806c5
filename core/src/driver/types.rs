//! The driver's own types for what CSI requests carry: validated once at the
//! wire boundary, then used by the machine and the backends.
//!
//! Fields mirror the CSI messages of the same names (see the CSI spec).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use super::attributes::Attributes;

/// A topology segment map, e.g. `{"topology.volplane.io/node": "node-a"}`.
pub type Topology = Attributes;

/// CSI access modes (`VolumeCapability.AccessMode.Mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AccessMode {
    /// SINGLE_NODE_WRITER: one node, read-write.
    SingleNodeWriter,
    /// SINGLE_NODE_READER_ONLY: one node, read-only.
    SingleNodeReaderOnly,
    /// MULTI_NODE_READER_ONLY: many nodes, read-only.
    MultiNodeReaderOnly,
    /// MULTI_NODE_SINGLE_WRITER: many nodes, one of them writing.
    MultiNodeSingleWriter,
    /// MULTI_NODE_MULTI_WRITER: many nodes, all writing.
    MultiNodeMultiWriter,
    /// SINGLE_NODE_SINGLE_WRITER: one pod on one node, read-write.
    SingleNodeSingleWriter,
    /// SINGLE_NODE_MULTI_WRITER: pods of one node, all writing.
    SingleNodeMultiWriter,
}

impl AccessMode {
    /// Every access mode.
    pub const ALL: [AccessMode; 7] = [
        AccessMode::SingleNodeWriter,
        AccessMode::SingleNodeReaderOnly,
        AccessMode::MultiNodeReaderOnly,
        AccessMode::MultiNodeSingleWriter,
        AccessMode::MultiNodeMultiWriter,
        AccessMode::SingleNodeSingleWriter,
        AccessMode::SingleNodeMultiWriter,
    ];

    /// True for modes that let the volume be published to more than one node.
    pub fn multi_node(self) -> bool {
        matches!(
            self,
            AccessMode::MultiNodeReaderOnly
                | AccessMode::MultiNodeSingleWriter
                | AccessMode::MultiNodeMultiWriter
        )
    }

    /// True for modes that allow several publish targets on one node
    /// (CSI: the MULTI_NODE modes and SINGLE_NODE_MULTI_WRITER).
    pub fn multi_target(self) -> bool {
        self.multi_node() || self == AccessMode::SingleNodeMultiWriter
    }

    /// True for modes that only ever read.
    pub fn read_only(self) -> bool {
        matches!(
            self,
            AccessMode::SingleNodeReaderOnly | AccessMode::MultiNodeReaderOnly
        )
    }

    /// The enum name as the CSI specification spells it.
    pub fn csi_name(self) -> &'static str {
        match self {
            AccessMode::SingleNodeWriter => "SINGLE_NODE_WRITER",
            AccessMode::SingleNodeReaderOnly => "SINGLE_NODE_READER_ONLY",
            AccessMode::MultiNodeReaderOnly => "MULTI_NODE_READER_ONLY",
            AccessMode::MultiNodeSingleWriter => "MULTI_NODE_SINGLE_WRITER",
            AccessMode::MultiNodeMultiWriter => "MULTI_NODE_MULTI_WRITER",
            AccessMode::SingleNodeSingleWriter => "SINGLE_NODE_SINGLE_WRITER",
            AccessMode::SingleNodeMultiWriter => "SINGLE_NODE_MULTI_WRITER",
        }
    }
}

/// How the workload reaches the volume.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum AccessType {
    /// A raw block device.
    Block,
    /// A mounted filesystem.
    Mount {
        /// Empty means "the driver's default".
        #[serde(default)]
        fs_type: String,
        #[serde(default)]
        /// Mount options the CO asks for.
        mount_flags: Vec<String>,
        #[serde(default)]
        /// The group the volume's files should be owned by (`volume_mount_group`).
        volume_mount_group: String,
    },
}

impl AccessType {
    /// True for raw block access.
    pub fn is_block(&self) -> bool {
        matches!(self, AccessType::Block)
    }
}

/// Why `id`, made by a backend, could not be given to a CO: the CO could
/// never name it again (CSI ids are at most 128 bytes; volplane refuses
/// ids with control characters and ids that are not relative paths of
/// plain components). `None` when it is usable.
pub fn unusable_id(id: &str) -> Option<String> {
    if id.is_empty() {
        return Some("is empty".into());
    }
    if id.len() > 128 {
        return Some(format!(
            "is {} bytes long, over the 128 CSI allows",
            id.len()
        ));
    }
    if id.chars().any(char::is_control) {
        return Some("holds control characters".into());
    }
    if id.starts_with('/') || id.split('/').any(|p| p == ".." || p == "." || p.is_empty()) {
        return Some("is not a relative path of plain components".into());
    }
    None
}

/// A `VolumeCapability`: access type plus access mode.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Capability {
    /// Raw block or a mounted filesystem.
    pub access_type: AccessType,
    /// Who may use the volume, from where.
    pub access_mode: AccessMode,
}

impl Capability {
    /// A mount capability with the default filesystem and no flags.
    pub fn mount(access_mode: AccessMode) -> Capability {
        Capability {
            access_type: AccessType::Mount {
                fs_type: String::new(),
                mount_flags: Vec::new(),
                volume_mount_group: String::new(),
            },
            access_mode,
        }
    }

    /// A raw-block capability.
    pub fn block(access_mode: AccessMode) -> Capability {
        Capability {
            access_type: AccessType::Block,
            access_mode,
        }
    }
}

impl std::fmt::Display for Capability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.access_type {
            AccessType::Block => write!(f, "block/{}", self.access_mode.csi_name()),
            AccessType::Mount { fs_type, .. } if fs_type.is_empty() => {
                write!(f, "mount/{}", self.access_mode.csi_name())
            }
            AccessType::Mount { fs_type, .. } => {
                write!(f, "mount({fs_type})/{}", self.access_mode.csi_name())
            }
        }
    }
}

/// `CapacityRange`, with 0 meaning "unspecified" as in CSI.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct CapacityRange {
    /// The least the volume may have (0: no lower bound).
    pub required_bytes: u64,
    /// The most the volume may have (0: no upper bound).
    pub limit_bytes: u64,
}

impl CapacityRange {
    /// Neither bound given.
    pub fn unspecified(&self) -> bool {
        self.required_bytes == 0 && self.limit_bytes == 0
    }

    /// True when `bytes` satisfies the range.
    pub fn admits(&self, bytes: u64) -> bool {
        bytes >= self.required_bytes && (self.limit_bytes == 0 || bytes <= self.limit_bytes)
    }
}

/// As a person reads it: "at least 1 bytes", "at most 5 bytes",
/// "1 to 5 bytes", "any size".
impl std::fmt::Display for CapacityRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.required_bytes, self.limit_bytes) {
            (0, 0) => write!(f, "any size"),
            (r, 0) => write!(f, "at least {r} bytes"),
            (0, l) => write!(f, "at most {l} bytes"),
            (r, l) if r == l => write!(f, "exactly {r} bytes"),
            (r, l) => write!(f, "{r} to {l} bytes"),
        }
    }
}

/// `VolumeContentSource`: what a new volume is pre-populated from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum ContentSource {
    /// A snapshot, by id.
    Snapshot(String),
    /// A volume, by id.
    Volume(String),
}

/// `TopologyRequirement`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct TopologyRequirement {
    /// Segments the volume must be accessible from (one of them).
    pub requisite: Vec<Topology>,
    /// Segments it should be accessible from, best first.
    pub preferred: Vec<Topology>,
}

impl TopologyRequirement {
    /// The CSI spec's test of where a volume is: it "is accessible from
    /// accessibility_requirements" when the requirement names no requisite
    /// segment, the volume reports no topology (accessible from anywhere),
    /// or one of its segments has every key/value of some requisite
    /// segment.
    pub fn admits(&self, at: &[Topology]) -> bool {
        self.requisite.is_empty()
            || at.is_empty()
            || at.iter().any(|segment| {
                self.requisite
                    .iter()
                    .any(|term| term.iter().all(|(k, v)| segment.get(k) == Some(v)))
            })
    }
}

/// Secrets from a request. Never persisted, never printed.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Secrets(pub BTreeMap<String, String>);

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} secret(s) redacted>", self.0.len())
    }
}

/// A provisioned volume as the controller knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct Volume {
    /// The id the backend chose; every later call names the volume by it.
    pub volume_id: String,
    /// Its size (0: unknown).
    pub capacity_bytes: u64,
    /// What the backend wants back at every node call (NodeStage, NodePublish…).
    pub volume_context: Attributes,
    /// The topology segments it can be reached from (empty: everywhere).
    pub accessible_topology: Vec<Topology>,
    #[serde(default)]
    /// What it was filled from, if anything.
    pub content_source: Option<ContentSource>,
}

/// A volume as the storage reports it, to a lookup by id or in a listing
/// ([`Features::lookup`], [`Features::list`]). volplane adopts it into its
/// journal when the journal does not hold it (a controller started on a new
/// state directory, a volume made by another instance or provisioned
/// statically), and serves it as if it had made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct StoredVolume {
    /// The volume, as CreateVolume answered it.
    pub volume: Volume,
    /// The CreateVolume name, where the storage keeps it (empty: unknown).
    pub name: String,
    /// The parameters it was created with, where the storage keeps them.
    pub parameters: Attributes,
    /// Its mutable parameters now, where the storage keeps them.
    pub mutable_parameters: Attributes,
    /// The capabilities it was created for (empty: unknown; then any
    /// capability the driver supports is taken as the volume's).
    pub capabilities: Vec<Capability>,
    /// The nodes it is attached to, as the storage sees it.
    pub published_node_ids: Vec<String>,
}

impl StoredVolume {
    /// What a storage that keeps nothing beside the volume itself reports.
    pub fn new(volume: Volume) -> StoredVolume {
        StoredVolume {
            volume,
            name: String::new(),
            parameters: Attributes::new(),
            mutable_parameters: Attributes::new(),
            capabilities: Vec::new(),
            published_node_ids: Vec::new(),
        }
    }
}

/// One page of the storage's volumes, in the storage's own order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct VolumePage {
    /// The volumes of this page.
    pub entries: Vec<StoredVolume>,
    /// Where the next page starts (empty: this was the last). Stable: a
    /// token handed out once must go on naming the same place.
    pub next_token: String,
}

/// One page of the storage's snapshots.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct SnapshotPage {
    /// The snapshots of this page.
    pub entries: Vec<Snapshot>,
    /// Where the next page starts (empty: this was the last).
    pub next_token: String,
}

/// `Snapshot`: a point-in-time copy of a volume, as the backend made it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct Snapshot {
    /// The id the backend chose.
    pub snapshot_id: String,
    /// The volume it is a copy of.
    pub source_volume_id: String,
    /// The size of the source volume when cut: the smallest volume it can
    /// be restored into (0: unknown).
    pub size_bytes: u64,
    /// When it was cut, as the backend's clock says.
    pub creation_time: Timestamp,
    /// False while the backend is still processing it (uploading): a
    /// volume cannot be restored from it yet.
    pub ready_to_use: bool,
    /// The group snapshot it belongs to, if any.
    pub group_snapshot_id: String,
}

/// `VolumeGroupSnapshot`: snapshots of several volumes cut at one point in
/// time, created and deleted together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct GroupSnapshot {
    /// The id the backend chose for the group.
    pub group_snapshot_id: String,
    /// One per source volume, each naming this group.
    pub snapshots: Vec<Snapshot>,
    /// When it was cut.
    pub creation_time: Timestamp,
    /// True once every member is ready to use.
    pub ready_to_use: bool,
}

/// A point in time: seconds and nanoseconds since the Unix epoch.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, Hash,
)]
pub struct Timestamp {
    /// Seconds since 1970.
    pub seconds: i64,
    /// Nanoseconds within that second.
    pub nanos: i32,
}

impl From<std::time::SystemTime> for Timestamp {
    /// The time as seconds and nanoseconds since the epoch (negative
    /// before it, with nanoseconds counted forwards, as protobuf's
    /// `Timestamp`).
    fn from(t: std::time::SystemTime) -> Timestamp {
        match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => Timestamp {
                seconds: d.as_secs() as i64,
                nanos: d.subsec_nanos() as i32,
            },
            Err(before) => {
                let d = before.duration();
                let (mut seconds, mut nanos) = (-(d.as_secs() as i64), -(d.subsec_nanos() as i32));
                if nanos < 0 {
                    seconds -= 1;
                    nanos += 1_000_000_000;
                }
                Timestamp { seconds, nanos }
            }
        }
    }
}

/// What a backend does beyond creating, deleting, staging and publishing
/// volumes: the one place it says so. volplane advertises exactly these
/// capabilities and never calls a backend method for one it lacks (the
/// request is answered as the CSI spec says for a capability not
/// advertised). Every field is false by default:
///
/// ```
/// # use volplane_core::driver::Features;
/// let features = Features { expand: true, node_expand: true, ..Features::default() };
/// # assert!(!features.attach);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Features {
    /// ControllerPublish and ControllerUnpublish (PUBLISH_UNPUBLISH_VOLUME,
    /// PUBLISH_READONLY, LIST_VOLUMES_PUBLISHED_NODES): the backend attaches
    /// volumes to nodes.
    pub attach: bool,
    /// ControllerExpandVolume (EXPAND_VOLUME, online expansion).
    pub expand: bool,
    /// NodeExpandVolume: a filesystem grown on the node after the volume.
    pub node_expand: bool,
    /// GetCapacity (GET_CAPACITY).
    pub capacity: bool,
    /// Raw block volumes (access type Block).
    pub block: bool,
    /// CreateSnapshot, DeleteSnapshot, and restoring a volume from one.
    pub snapshots: bool,
    /// Creating a volume from another volume.
    pub clones: bool,
    /// ControllerModifyVolume with mutable parameters.
    pub modify: bool,
    /// The GroupController service: group snapshots.
    pub group_snapshots: bool,
    /// The storage is the authority on what exists: it answers
    /// `Backend::lookup_volume` and `Backend::lookup_snapshot` by id. A request naming a
    /// volume or snapshot the journal does not hold (a controller started
    /// on a new state directory, a volume made by another instance or
    /// provisioned statically) is put to the storage before any answer,
    /// and what it holds is adopted. Without it, only DeleteVolume and
    /// DeleteSnapshot reach the storage for an id the journal lacks.
    pub lookup: bool,
    /// The storage lists its volumes and snapshots, a page at a time:
    /// ListVolumes and ListSnapshots answer from it, not from the journal.
    pub list: bool,
    /// A volume may be published to several nodes at once: the
    /// MULTI_NODE_* access modes. Without it they are refused with
    /// INVALID_ARGUMENT before the backend is called.
    pub multi_node: bool,
}

impl Features {
    /// Everything volplane can drive.
    pub const ALL: Features = Features {
        attach: true,
        expand: true,
        node_expand: true,
        capacity: true,
        block: true,
        snapshots: true,
        clones: true,
        modify: true,
        group_snapshots: true,
        lookup: true,
        list: true,
        multi_node: true,
    };
}

/// Space on a volume, from `NodeGetVolumeStats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct VolumeUsage {
    /// Capacity, in bytes.
    pub total_bytes: u64,
    /// Bytes in use.
    pub used_bytes: u64,
    /// Bytes free for use.
    pub available_bytes: u64,
    /// Inodes in all (0 for a raw block volume).
    pub total_inodes: u64,
    /// Inodes in use.
    pub used_inodes: u64,
    /// Inodes free.
    pub available_inodes: u64,
}

/// `VolumeCondition`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct VolumeCondition {
    /// True when the volume is not healthy.
    pub abnormal: bool,
    /// What is wrong, for a person.
    pub message: String,
}

#[cfg(test)]
mod range_tests {
    use super::CapacityRange;

    #[test]
    fn a_range_reads_as_a_person_says_it() {
        let r = |required_bytes, limit_bytes| CapacityRange {
            required_bytes,
            limit_bytes,
        };
        assert_eq!(r(0, 0).to_string(), "any size");
        assert_eq!(r(9_000_000, 0).to_string(), "at least 9000000 bytes");
        assert_eq!(r(0, 5).to_string(), "at most 5 bytes");
        assert_eq!(r(5, 5).to_string(), "exactly 5 bytes");
        assert_eq!(r(1, 5).to_string(), "1 to 5 bytes");
    }
}
