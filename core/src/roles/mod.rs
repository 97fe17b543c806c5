//! The role catalogue: every control-plane role — its name, the flags that
//! configure it, how it is made from what the driver says about itself —
//! in one place. `volplane controller` (the kube adapter), the simulator
//! and the lab all make their machines here, so each runs the production
//! wiring; what a role watches is its machine's own list
//! ([`crate::control::ControlMachine::watches`]), so every runner delivers it the same
//! events.

use std::collections::BTreeMap;

use crate::Tick;
use crate::attach::{Attach, AttachConfig};
use crate::binder::Binder;
use crate::capacity::{self, CapacityConfig, CapacityTracker};
use crate::control::csi_map::DriverModes;
use crate::driver::{ControllerCapability as Cap, PluginCapability};
use crate::model::{Kind, OwnerReference};
use crate::plant::Planted;
use crate::protection::{Guarded, Protection};
use crate::provision::node::NodeScope;
use crate::provision::{Provisioner, ProvisionerConfig};
use crate::resize::{ResizeConfig, Resizer};
use crate::snapshot::{SnapshotController, Snapshotter};

mod machine;
pub use machine::RoleMachine;
#[cfg(test)]
mod tests;

/// One control-plane role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// external-provisioner.
    Provisioner,
    /// external-attacher, and the attach/detach controller.
    Attacher,
    /// external-resizer.
    Resizer,
    /// external-provisioner's capacity tracker.
    Capacity,
    /// The PV controller's binder.
    Binder,
    /// csi-snapshotter.
    Snapshotter,
    /// external-snapshotter's snapshot controller.
    SnapshotController,
    /// The pvc-protection controller.
    PvcProtection,
    /// The pv-protection controller.
    PvProtection,
}

impl Role {
    /// Every role.
    pub const ALL: [Role; 9] = [
        Role::Provisioner,
        Role::Attacher,
        Role::Resizer,
        Role::Capacity,
        Role::Binder,
        Role::Snapshotter,
        Role::SnapshotController,
        Role::PvcProtection,
        Role::PvProtection,
    ];

    /// Its name (`volplane controller`'s logs, metrics and Leases, the
    /// simulator's traces).
    pub fn name(self) -> &'static str {
        match self {
            Role::Provisioner => "provisioner",
            Role::Attacher => "attacher",
            Role::Resizer => "resizer",
            Role::Capacity => "capacity",
            Role::Binder => "binder",
            Role::Snapshotter => "snapshotter",
            Role::SnapshotController => "snapshot-controller",
            Role::PvcProtection => "pvc-protection",
            Role::PvProtection => "pv-protection",
        }
    }

    /// The role named `name`.
    pub fn named(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.name() == name)
    }
}

/// A role switched on that the driver cannot serve, and what it lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RoleOff {
    /// The driver lacks the capability the role needs.
    #[error("{role}: the driver has no {capability}")]
    Lacks {
        /// The role (or a part of one).
        role: &'static str,
        /// The capability's name as the CSI spec spells it.
        capability: &'static str,
    },
    /// The driver has neither of two capabilities, one of which the role
    /// needs.
    #[error("{role}: the driver has neither {first} nor {second}")]
    LacksEither {
        /// The role.
        role: &'static str,
        /// One capability it could use.
        first: &'static str,
        /// The other.
        second: &'static str,
    },
}

/// Which roles run (the sidecars' `--enable-*`-style switches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switches {
    /// external-provisioner.
    pub provisioner: bool,
    /// external-attacher.
    pub attacher: bool,
    /// external-resizer.
    pub resizer: bool,
    /// The PV controller's binder (off: kube-controller-manager's).
    pub binder: bool,
    /// The attach/detach controller (off: kube-controller-manager's).
    pub attach_detach: bool,
    /// pvc-protection (off: kube-controller-manager's).
    pub pvc_protection: bool,
    /// pv-protection (off: kube-controller-manager's).
    pub pv_protection: bool,
    /// csi-snapshotter, and restores from VolumeSnapshots in the
    /// provisioner (off: needs the snapshot CRDs).
    pub snapshotter: bool,
    /// The snapshot controller (off: external-snapshotter's).
    pub snapshot_controller: bool,
    /// VolumeGroupSnapshots in the snapshotter and the snapshot controller
    /// (off: needs the group snapshot CRDs, and a driver with the
    /// GroupController for the snapshotter).
    pub group_snapshots: bool,
}

impl Default for Switches {
    /// The sidecars': provisioner, attacher and resizer.
    fn default() -> Switches {
        Switches {
            provisioner: true,
            attacher: true,
            resizer: true,
            ..Switches::none()
        }
    }
}

impl Switches {
    /// No role.
    pub fn none() -> Switches {
        Switches {
            provisioner: false,
            attacher: false,
            resizer: false,
            binder: false,
            attach_detach: false,
            pvc_protection: false,
            pv_protection: false,
            snapshotter: false,
            snapshot_controller: false,
            group_snapshots: false,
        }
    }

    /// Every role, group snapshots too.
    pub fn all() -> Switches {
        Switches {
            provisioner: true,
            attacher: true,
            resizer: true,
            binder: true,
            attach_detach: true,
            pvc_protection: true,
            pv_protection: true,
            snapshotter: true,
            snapshot_controller: true,
            group_snapshots: true,
        }
    }
}

/// `--enable-capacity`: where the CSIStorageCapacity objects go and how
/// they are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapacityTracking {
    /// The namespace of the objects (`NAMESPACE`, the controller's own).
    pub namespace: String,
    /// Their owner (`--capacity-ownerref-level`), if any.
    pub owner: Option<OwnerReference>,
    /// `--capacity-poll-interval`; `None`: only when something changes
    /// (the simulator's, whose cluster must go quiet).
    pub poll_interval: Option<Tick>,
    /// `--capacity-for-immediate-binding`.
    pub immediate_binding: bool,
}

/// `--node-deployment`: this controller runs beside the driver on one node
/// and provisions only for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDeployment {
    /// The node (`NODE_NAME`).
    pub node: String,
    /// The node's topology segment, as the driver's NodeGetInfo reports it.
    pub topology: BTreeMap<String, String>,
    /// `--node-deployment-immediate-binding`.
    pub immediate_binding: bool,
    /// `--node-deployment-base-delay`.
    pub base_delay: Tick,
    /// `--node-deployment-max-delay`.
    pub max_delay: Tick,
}

/// The sidecars' flags that shape what the roles decide: each flag once,
/// in the machines' units. The command line fills it; so do the simulator
/// and the lab.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flags {
    /// Which roles run.
    pub switches: Switches,
    /// `--default-fstype`.
    pub default_fs_type: String,
    /// `--strict-topology`.
    pub strict_topology: bool,
    /// `--immediate-topology`.
    pub immediate_topology: bool,
    /// `--prevent-volume-mode-conversion`.
    pub prevent_volume_mode_conversion: bool,
    /// `--extra-create-metadata`.
    pub extra_create_metadata: bool,
    /// `--extra-modify-metadata`.
    pub extra_modify_metadata: bool,
    /// `--controller-publish-readonly`.
    pub controller_publish_readonly: bool,
    /// `--volume-name-prefix` and `--volume-name-uuid-length`.
    pub volume_naming: (String, Option<usize>),
    /// `--snapshot-name-prefix` and `--snapshot-name-uuid-length`.
    pub snapshot_naming: (String, Option<usize>),
    /// `--enable-capacity`.
    pub capacity: Option<CapacityTracking>,
    /// `--node-deployment`.
    pub node_deployment: Option<NodeDeployment>,
    /// `--retry-interval-start` and `--retry-interval-max`: a failed
    /// operation is retried after the first, doubling up to the second.
    pub retry_interval: (Tick, Tick),
    /// The provisioner restores claims from VolumeSnapshots without the
    /// snapshotter role (as external-provisioner does on its own).
    pub restore_snapshots: bool,
    /// The provisioner's instance identity (external-provisioner's
    /// `<start ms>-<number>-<driver>`); `None`: `volplane-<driver>`.
    pub provisioner_identity: Option<String>,
    /// Bugs planted in the machines (empty but in a `plants` build).
    pub plant: Planted,
}

impl Default for Flags {
    /// The sidecars' defaults.
    fn default() -> Flags {
        Flags {
            switches: Switches::default(),
            default_fs_type: String::new(),
            strict_topology: false,
            immediate_topology: true,
            prevent_volume_mode_conversion: true,
            extra_create_metadata: false,
            extra_modify_metadata: false,
            controller_publish_readonly: false,
            volume_naming: ("pvc".into(), None),
            snapshot_naming: ("snapshot".into(), None),
            capacity: None,
            node_deployment: None,
            retry_interval: (1_000, 300_000),
            restore_snapshots: false,
            provisioner_identity: None,
            plant: Planted::default(),
        }
    }
}

/// What the driver says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverFacts {
    /// GetPluginInfo's name.
    pub name: String,
    /// ControllerGetCapabilities.
    pub controller: Vec<Cap>,
    /// GetPluginCapabilities.
    pub plugin: Vec<PluginCapability>,
}

impl DriverFacts {
    /// True when the driver has controller capability `c`.
    pub fn has(&self, c: Cap) -> bool {
        self.controller.contains(&c)
    }

    fn modes(&self) -> DriverModes {
        DriverModes {
            single_node_multi_writer: self.has(Cap::SingleNodeMultiWriter),
        }
    }

    fn group_controller(&self) -> bool {
        self.plugin
            .contains(&PluginCapability::GroupControllerService)
    }
}

/// The machines the switches and the driver's capabilities call for, in
/// [`Role::ALL`]'s order, and a line for each role that is off although
/// switched on, saying why.
#[derive(Debug)]
pub struct Made {
    /// The machines.
    pub machines: Vec<RoleMachine>,
    /// Why a role switched on does not run.
    pub off: Vec<RoleOff>,
}

/// Makes every role `flags` switch on that the driver can serve.
pub fn make(facts: &DriverFacts, flags: &Flags) -> Made {
    let mut made = Made {
        machines: Vec::new(),
        off: Vec::new(),
    };
    let s = flags.switches;
    if s.snapshotter && s.group_snapshots && !facts.group_controller() {
        made.off.push(RoleOff::Lacks {
            role: "snapshotter: group snapshots",
            capability: "GROUP_CONTROLLER_SERVICE",
        });
    }
    for role in Role::ALL {
        match make_one(role, facts, flags) {
            Ok(Some(m)) => made.machines.push(m),
            Ok(None) => {}
            Err(why) => made.off.push(why),
        }
    }
    made
}

/// The role's machine as a fresh process makes it: `None` when its switch
/// is off, an error saying why when the driver cannot serve it.
pub fn make_one(
    role: Role,
    facts: &DriverFacts,
    flags: &Flags,
) -> Result<Option<RoleMachine>, RoleOff> {
    let s = flags.switches;
    let (retry_start, retry_max) = flags.retry_interval;
    let need = |cap: Cap, capability: &'static str| match facts.has(cap) {
        true => Ok(()),
        false => Err(RoleOff::Lacks {
            role: role.name(),
            capability,
        }),
    };
    Ok(Some(match role {
        Role::Provisioner if s.provisioner => {
            need(Cap::CreateDeleteVolume, "CREATE_DELETE_VOLUME")?;
            RoleMachine::Provisioner(Provisioner::new(provisioner_config(facts, flags)))
        }
        Role::Attacher if s.attacher || s.attach_detach => {
            let mut c = AttachConfig::new(&facts.name);
            c.modes = facts.modes();
            c.trivial = !facts.has(Cap::PublishUnpublishVolume);
            c.publish_readonly = facts.has(Cap::PublishReadonly);
            c.attach_detach = s.attach_detach;
            (c.retry_start, c.retry_max) = flags.retry_interval;
            c.node = flags.node_deployment.as_ref().map(|n| n.node.clone());
            c.plant = flags.plant;
            RoleMachine::Attach(Attach::new(c))
        }
        Role::Resizer if s.resizer => {
            let (expand, modify) = (facts.has(Cap::ExpandVolume), facts.has(Cap::ModifyVolume));
            if !expand && !modify {
                return Err(RoleOff::LacksEither {
                    role: role.name(),
                    first: "EXPAND_VOLUME",
                    second: "MODIFY_VOLUME",
                });
            }
            let mut c = ResizeConfig::new(&facts.name);
            c.modes = facts.modes();
            (c.expand, c.modify) = (expand, modify);
            c.extra_modify_metadata = flags.extra_modify_metadata;
            (c.retry_start, c.retry_max) = flags.retry_interval;
            c.node_topology = flags.node_deployment.as_ref().map(|n| n.topology.clone());
            c.plant = flags.plant;
            RoleMachine::Resizer(Resizer::new(c))
        }
        Role::Capacity => match &flags.capacity {
            None => return Ok(None),
            Some(tracking) => {
                need(Cap::GetCapacity, "GET_CAPACITY")?;
                let c = capacity_config(facts, flags, tracking);
                RoleMachine::Capacity(Box::new(CapacityTracker::new(c)))
            }
        },
        Role::Binder if s.binder => RoleMachine::Binder(Binder::with_plant(flags.plant)),
        Role::Snapshotter if s.snapshotter => {
            need(Cap::CreateDeleteSnapshot, "CREATE_DELETE_SNAPSHOT")?;
            let (prefix, length) = &flags.snapshot_naming;
            let m = Snapshotter::new(&facts.name)
                .with_groups(s.group_snapshots && facts.group_controller())
                .with_naming(prefix, *length)
                .with_retry(retry_start, retry_max)
                .with_extra_create_metadata(flags.extra_create_metadata);
            RoleMachine::Snapshotter(m)
        }
        Role::SnapshotController if s.snapshot_controller => RoleMachine::SnapshotController(
            SnapshotController::new()
                .with_groups(s.group_snapshots)
                .with_retry(retry_start, retry_max),
        ),
        Role::PvcProtection if s.pvc_protection => {
            RoleMachine::Protection(Protection::new(Guarded::Claims))
        }
        Role::PvProtection if s.pv_protection => {
            RoleMachine::Protection(Protection::new(Guarded::Volumes))
        }
        _ => return Ok(None),
    }))
}

/// external-provisioner's configuration from the driver and the flags.
fn provisioner_config(facts: &DriverFacts, flags: &Flags) -> ProvisionerConfig {
    let mut c = ProvisionerConfig::new(&facts.name);
    if let Some(identity) = &flags.provisioner_identity {
        c.identity = identity.clone();
    }
    c.modes = facts.modes();
    c.topology = facts
        .plugin
        .contains(&PluginCapability::VolumeAccessibilityConstraints);
    c.default_fs_type = flags.default_fs_type.clone();
    c.strict_topology = flags.strict_topology;
    c.immediate_topology = flags.immediate_topology;
    c.prevent_volume_mode_conversion = flags.prevent_volume_mode_conversion;
    c.extra_create_metadata = flags.extra_create_metadata;
    c.controller_publish_readonly = flags.controller_publish_readonly;
    (c.volume_name_prefix, c.volume_name_uuid_length) = flags.volume_naming.clone();
    c.snapshots = flags.switches.snapshotter || flags.restore_snapshots;
    c.modify_volume = facts.has(Cap::ModifyVolume);
    (c.retry_start, c.retry_max) = flags.retry_interval;
    c.node = flags.node_deployment.as_ref().map(|n| NodeScope {
        node: n.node.clone(),
        topology: n.topology.clone(),
        immediate_binding: n.immediate_binding,
        base_delay: n.base_delay,
        max_delay: n.max_delay,
    });
    c.plant = flags.plant;
    c
}

/// The capacity tracker's configuration from `--enable-capacity`'s setup.
fn capacity_config(facts: &DriverFacts, flags: &Flags, t: &CapacityTracking) -> CapacityConfig {
    let mut c = CapacityConfig::new(&facts.name, &t.namespace);
    c.owner = t.owner.clone();
    c.poll_interval = t.poll_interval;
    c.immediate_binding = t.immediate_binding;
    (c.retry_start, c.retry_max) = flags.retry_interval;
    if let Some(node) = &flags.node_deployment {
        c.fixed_segment = Some(node.topology.clone());
        c.managed_by = capacity::managed_by_node(&node.node);
    }
    c.plant = flags.plant;
    c
}

/// True for a kind a CustomResourceDefinition brings (external-snapshotter's):
/// a role watches it without waiting for it, so that it runs while the
/// CRDs are not installed.
pub fn from_crd(kind: Kind) -> bool {
    use Kind::*;
    matches!(
        kind,
        VolumeSnapshot
            | VolumeSnapshotContent
            | VolumeSnapshotClass
            | VolumeGroupSnapshot
            | VolumeGroupSnapshotContent
            | VolumeGroupSnapshotClass
    )
}
