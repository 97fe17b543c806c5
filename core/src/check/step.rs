//! The calls `volplane check` makes, as abstract steps: a step names its
//! volume, snapshot and target by *slot* ("volume 2", "target 1 of volume
//! 2"), not by the ids a driver hands out, so that a sequence of steps can
//! be replayed against a fresh driver, shrunk, and printed for a person.
//! [`Names`] turns a slot into the name, id or path of one run.

use serde::{Deserialize, Serialize};

use crate::driver::{AccessMode, AccessType, Attributes, Capability, CapacityRange};

/// A volume, snapshot or target, by its place in the run.
pub type Slot = u8;

/// What a CreateVolume asks for, beside its slot's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Shape {
    /// The run's size and capability.
    Plain,
    /// Eight times the run's size: incompatible with a volume of the
    /// run's size under the same name.
    Larger,
    /// Filled from a snapshot.
    FromSnapshot(Slot),
    /// A clone of another volume.
    Clone(Slot),
    /// No name (INVALID_ARGUMENT).
    Unnamed,
    /// No capability (INVALID_ARGUMENT).
    NoCapability,
    /// Without the secrets the driver was declared to need (refused).
    NoSecrets,
    /// With a topology requirement beyond this node's segment, as
    /// external-provisioner builds one for a claim bound at once (every
    /// node's segment requisite) or for a StorageClass whose allowed
    /// topologies name other nodes only: `here_too`, requisite this node's
    /// segment and another's, the other preferred; else the other alone.
    /// A volume made where this node cannot reach is kept off it, as
    /// Kubernetes schedules no pod of it here.
    Elsewhere {
        /// This node's segment is requisite too.
        here_too: bool,
    },
}

/// Where a NodeGetVolumeStats looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum StatsAt {
    /// A target of the volume.
    Target(Slot),
    /// A path no volume was ever published at.
    Nowhere,
}

/// One step of a check: a CSI call (or, for `ListVolumes` and
/// `ListSnapshots`, a walk through every page), a write and read through
/// two targets, or a restart of the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Step {
    /// CreateVolume for slot `v`.
    CreateVolume {
        /// The volume slot.
        v: Slot,
        /// What is asked for.
        shape: Shape,
    },
    /// DeleteVolume of slot `v`'s volume (or an id no volume ever had).
    DeleteVolume {
        /// The volume slot.
        v: Slot,
    },
    /// ControllerPublishVolume to this node, or to a node that does not exist.
    ControllerPublish {
        /// The volume slot.
        v: Slot,
        /// False: a node id no node has.
        known_node: bool,
        /// Published read-only.
        readonly: bool,
    },
    /// ControllerUnpublishVolume from this node.
    ControllerUnpublish {
        /// The volume slot.
        v: Slot,
    },
    /// ValidateVolumeCapabilities with the run's capability.
    Validate {
        /// The volume slot.
        v: Slot,
    },
    /// ControllerGetVolume.
    GetVolume {
        /// The volume slot.
        v: Slot,
    },
    /// ControllerExpandVolume to `grow + 2` times the run's size.
    ControllerExpand {
        /// The volume slot.
        v: Slot,
        /// How much larger.
        grow: u8,
    },
    /// ControllerModifyVolume with the run's mutable parameters, or none.
    ControllerModify {
        /// The volume slot.
        v: Slot,
        /// Without mutable parameters (INVALID_ARGUMENT: they are REQUIRED).
        empty: bool,
    },
    /// ListVolumes, page after page, `page` entries at a time (0: the driver's choice).
    ListVolumes {
        /// Entries per page.
        page: u8,
    },
    /// ListVolumes from a token no page ever returned.
    ListVolumesBadToken,
    /// GetCapacity with the run's capability and parameters.
    GetCapacity,
    /// NodeStageVolume at the slot's staging path.
    NodeStage {
        /// The volume slot.
        v: Slot,
        /// With another access mode than the run's (read-only).
        other_mode: bool,
    },
    /// NodeUnstageVolume.
    NodeUnstage {
        /// The volume slot.
        v: Slot,
    },
    /// NodePublishVolume at target `t`.
    NodePublish {
        /// The volume slot.
        v: Slot,
        /// The target slot.
        t: Slot,
        /// Published read-only.
        readonly: bool,
    },
    /// NodeUnpublishVolume from target `t`.
    NodeUnpublish {
        /// The volume slot.
        v: Slot,
        /// The target slot.
        t: Slot,
    },
    /// NodeGetVolumeStats.
    Stats {
        /// The volume slot.
        v: Slot,
        /// Where.
        at: StatsAt,
    },
    /// NodeExpandVolume at target `t`, to `grow + 2` times the run's size.
    NodeExpand {
        /// The volume slot.
        v: Slot,
        /// The target slot.
        t: Slot,
        /// How much larger.
        grow: u8,
    },
    /// CreateSnapshot `s` of volume `v`.
    CreateSnapshot {
        /// The snapshot slot.
        s: Slot,
        /// The volume slot.
        v: Slot,
    },
    /// DeleteSnapshot.
    DeleteSnapshot {
        /// The snapshot slot.
        s: Slot,
    },
    /// ListSnapshots, page after page.
    ListSnapshots {
        /// Entries per page.
        page: u8,
    },
    /// CreateVolumeGroupSnapshot `g` of volumes `a` and `b`.
    CreateGroupSnapshot {
        /// The group snapshot slot.
        g: Slot,
        /// One volume slot.
        a: Slot,
        /// The other.
        b: Slot,
    },
    /// DeleteVolumeGroupSnapshot `g`.
    DeleteGroupSnapshot {
        /// The group snapshot slot.
        g: Slot,
    },
    /// Write a file through target `from` and read it back through `to`.
    Data {
        /// The volume slot.
        v: Slot,
        /// The target written through.
        from: Slot,
        /// The target read through.
        to: Slot,
    },
    /// Kill the driver (SIGKILL) and start it again; calls in flight are lost.
    Restart,
}

impl Step {
    /// The volume the step is about, if one.
    pub fn volume(&self) -> Option<Slot> {
        use Step::*;
        match *self {
            CreateVolume { v, .. }
            | DeleteVolume { v }
            | ControllerPublish { v, .. }
            | ControllerUnpublish { v }
            | Validate { v }
            | GetVolume { v }
            | ControllerExpand { v, .. }
            | ControllerModify { v, .. }
            | NodeStage { v, .. }
            | NodeUnstage { v }
            | NodePublish { v, .. }
            | NodeUnpublish { v, .. }
            | Stats { v, .. }
            | NodeExpand { v, .. }
            | CreateSnapshot { v, .. }
            | Data { v, .. } => Some(v),
            _ => None,
        }
    }

    /// The objects the step is about, as keys: volume `v` is `v`,
    /// snapshot `s` is `256 + s` (a driver serialises calls on either); group snapshot `g` is `512 + g`.
    pub fn objects(&self) -> Vec<u16> {
        let mut out: Vec<u16> = self.volume().map(u16::from).into_iter().collect();
        match *self {
            Step::CreateSnapshot { s, .. }
            | Step::DeleteSnapshot { s }
            | Step::CreateVolume {
                shape: Shape::FromSnapshot(s),
                ..
            } => out.push(256 + u16::from(s)),
            Step::CreateVolume {
                shape: Shape::Clone(from),
                ..
            } => out.push(u16::from(from)),
            Step::CreateGroupSnapshot { g, a, b } => {
                out.extend([u16::from(a), u16::from(b), 512 + u16::from(g)]);
            }
            Step::DeleteGroupSnapshot { g } => out.push(512 + u16::from(g)),
            _ => {}
        }
        out
    }

    /// True when the step acts on the node (the mounts are read after it).
    pub fn on_node(&self) -> bool {
        use Step::*;
        matches!(
            self,
            NodeStage { .. }
                | NodeUnstage { .. }
                | NodePublish { .. }
                | NodeUnpublish { .. }
                | NodeExpand { .. }
                | Restart
        )
    }

    /// True when the step makes or removes an object on the storage: the
    /// calls a kill in flight has the most to interrupt.
    pub fn makes(&self) -> bool {
        use Step::*;
        matches!(
            self,
            CreateVolume { .. }
                | DeleteVolume { .. }
                | CreateSnapshot { .. }
                | DeleteSnapshot { .. }
                | CreateGroupSnapshot { .. }
                | DeleteGroupSnapshot { .. }
        )
    }

    /// True when the step must run alone (a walk through pages).
    pub fn alone(&self) -> bool {
        matches!(self, Step::ListVolumes { .. } | Step::ListSnapshots { .. })
    }
}

/// How a step reads in a trace: the RPC and its slots.
impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use Step::*;
        match self {
            CreateVolume { v, shape } => match shape {
                Shape::Plain => write!(f, "CreateVolume v{v}"),
                Shape::Larger => write!(f, "CreateVolume v{v} (8× the size)"),
                Shape::FromSnapshot(s) => write!(f, "CreateVolume v{v} from snapshot s{s}"),
                Shape::Clone(from) => write!(f, "CreateVolume v{v}, a clone of v{from}"),
                Shape::Unnamed => write!(f, "CreateVolume without a name"),
                Shape::NoCapability => write!(f, "CreateVolume v{v} without a capability"),
                Shape::NoSecrets => write!(f, "CreateVolume v{v} without its secrets"),
                Shape::Elsewhere { here_too: false } => {
                    write!(f, "CreateVolume v{v} for another node's segment only")
                }
                Shape::Elsewhere { here_too: true } => write!(
                    f,
                    "CreateVolume v{v} for this node's segment or another's, the other preferred"
                ),
            },
            DeleteVolume { v } => write!(f, "DeleteVolume v{v}"),
            ControllerPublish {
                v,
                known_node,
                readonly,
            } => {
                let node = if *known_node {
                    "the node"
                } else {
                    "a node that does not exist"
                };
                let ro = if *readonly { ", read-only" } else { "" };
                write!(f, "ControllerPublishVolume v{v} to {node}{ro}")
            }
            ControllerUnpublish { v } => write!(f, "ControllerUnpublishVolume v{v}"),
            Validate { v } => write!(f, "ValidateVolumeCapabilities v{v}"),
            GetVolume { v } => write!(f, "ControllerGetVolume v{v}"),
            ControllerExpand { v, grow } => {
                write!(f, "ControllerExpandVolume v{v} to {}× the size", grow + 2)
            }
            ListVolumes { page } => write!(f, "ListVolumes, {page} per page"),
            ListVolumesBadToken => write!(f, "ListVolumes from a token no page returned"),
            GetCapacity => write!(f, "GetCapacity"),
            ControllerModify { v, empty } => {
                let what = if *empty {
                    " without mutable parameters"
                } else {
                    ""
                };
                write!(f, "ControllerModifyVolume v{v}{what}")
            }
            NodeStage { v, other_mode } => {
                let m = if *other_mode { " read-only mode" } else { "" };
                write!(f, "NodeStageVolume v{v}{m}")
            }
            NodeUnstage { v } => write!(f, "NodeUnstageVolume v{v}"),
            NodePublish { v, t, readonly } => {
                let ro = if *readonly { " read-only" } else { "" };
                write!(f, "NodePublishVolume v{v} at t{t}{ro}")
            }
            NodeUnpublish { v, t } => write!(f, "NodeUnpublishVolume v{v} from t{t}"),
            Stats { v, at } => match at {
                StatsAt::Target(t) => write!(f, "NodeGetVolumeStats v{v} at t{t}"),
                StatsAt::Nowhere => write!(f, "NodeGetVolumeStats v{v} at a path it never had"),
            },
            NodeExpand { v, t, grow } => {
                write!(f, "NodeExpandVolume v{v} at t{t} to {}× the size", grow + 2)
            }
            CreateSnapshot { s, v } => write!(f, "CreateSnapshot s{s} of v{v}"),
            DeleteSnapshot { s } => write!(f, "DeleteSnapshot s{s}"),
            ListSnapshots { page } => write!(f, "ListSnapshots, {page} per page"),
            Data { v, from, to } => write!(f, "write through v{v} t{from}, read through t{to}"),
            CreateGroupSnapshot { g, a, b } => {
                write!(f, "CreateVolumeGroupSnapshot g{g} of v{a} and v{b}")
            }
            DeleteGroupSnapshot { g } => write!(f, "DeleteVolumeGroupSnapshot g{g}"),
            Restart => write!(f, "kill the driver (SIGKILL) and start it again"),
        }
    }
}

/// The names, paths and request fields of one run: what a slot means.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Names {
    /// Every name and path of the run starts with it (`check-<seed>-<run>`).
    pub prefix: String,
    /// The kubelet directory the node paths are under.
    pub kubelet_dir: String,
    /// The driver's name (for the kubelet-style staging path).
    pub driver: String,
    /// The StorageClass parameters every CreateVolume carries.
    pub parameters: Attributes,
    /// The capability every volume is created and used with.
    pub capability: Capability,
    /// The run's volume size.
    pub bytes: u64,
    /// The mutable parameters ControllerModifyVolume sets (none: only
    /// the modify a driver must refuse is sent).
    #[serde(default)]
    pub mutable: Attributes,
    /// A topology segment of another node, where a CreateVolume of
    /// [`Shape::Elsewhere`] asks its volume to be (`--other-segment`);
    /// `None`: one made up from this node's keys, where no storage can
    /// make volumes (RESOURCE_EXHAUSTED is then due).
    #[serde(default)]
    pub elsewhere: Option<crate::driver::Topology>,
}

impl Names {
    /// CreateVolume's name for slot `v`.
    pub fn volume_name(&self, v: Slot) -> String {
        format!("{}-v{v}", self.prefix)
    }

    /// CreateSnapshot's name for slot `s`.
    pub fn snapshot_name(&self, s: Slot) -> String {
        format!("{}-s{s}", self.prefix)
    }

    /// An id no volume of this run ever had.
    pub fn missing_volume(&self, v: Slot) -> String {
        format!("{}-no-such-volume-v{v}", self.prefix)
    }

    /// CreateVolumeGroupSnapshot's name for slot `g`.
    pub fn group_name(&self, g: Slot) -> String {
        format!("{}-g{g}", self.prefix)
    }

    /// An id no group snapshot of this run ever had.
    pub fn missing_group(&self, g: Slot) -> String {
        format!("{}-no-such-group-g{g}", self.prefix)
    }

    /// An id no snapshot of this run ever had.
    pub fn missing_snapshot(&self, s: Slot) -> String {
        format!("{}-no-such-snapshot-s{s}", self.prefix)
    }

    /// A node id no node has.
    pub fn missing_node(&self) -> String {
        format!("{}-no-such-node", self.prefix)
    }

    /// The staging path of slot `v`, where the kubelet would put it.
    pub fn staging(&self, v: Slot) -> String {
        format!(
            "{}/plugins/kubernetes.io/csi/{}/{}-v{v}/globalmount",
            self.kubelet_dir, self.driver, self.prefix
        )
    }

    /// Target `t` of slot `v`, where the kubelet would put it.
    pub fn target(&self, v: Slot, t: Slot) -> String {
        format!(
            "{}/pods/{}-v{v}-t{t}/volumes/kubernetes.io~csi/{}-v{v}/mount",
            self.kubelet_dir, self.prefix, self.prefix
        )
    }

    /// A path beneath the kubelet directory no volume is ever published at.
    pub fn nowhere(&self) -> String {
        format!("{}/pods/{}-nowhere/mount", self.kubelet_dir, self.prefix)
    }

    /// Every directory of the run, to look for leftovers: its pods and its
    /// staging directories.
    pub fn run_dirs(&self) -> [String; 2] {
        [
            format!("{}/pods/{}-", self.kubelet_dir, self.prefix),
            format!(
                "{}/plugins/kubernetes.io/csi/{}/{}-",
                self.kubelet_dir, self.driver, self.prefix
            ),
        ]
    }

    /// The capability a step asks for: the run's, or its read-only variant.
    pub fn capability(&self, other_mode: bool) -> Capability {
        let mut c = self.capability.clone();
        if other_mode {
            c.access_mode = match c.access_mode {
                AccessMode::MultiNodeMultiWriter
                | AccessMode::MultiNodeSingleWriter
                | AccessMode::MultiNodeReaderOnly => AccessMode::MultiNodeReaderOnly,
                _ => AccessMode::SingleNodeReaderOnly,
            };
        }
        c
    }

    /// True when the run's volumes are raw block devices.
    pub fn block(&self) -> bool {
        matches!(self.capability.access_type, AccessType::Block)
    }

    /// The capacity range CreateVolume asks for.
    pub fn range(&self, shape: Shape) -> CapacityRange {
        let required_bytes = match shape {
            Shape::Larger => self.bytes * 8,
            _ => self.bytes,
        };
        CapacityRange {
            required_bytes,
            limit_bytes: 0,
        }
    }

    /// The size ControllerExpand and NodeExpand ask for.
    pub fn grown(&self, grow: u8) -> u64 {
        self.bytes * (u64::from(grow) + 2)
    }
}
