//! The simulation's actors: each control-plane machine, a node's plugin
//! watcher and node-driver-registrar, with how watch events reach them and
//! how a restart makes them fresh.

use super::registration;
use super::{DRIVER, Delivery, ROOT, SimConfig};
use crate::Tick;
use crate::control::csi_map::DriverModes;
use crate::control::{ControlMachine, Input, Watch};
use crate::driver::{ControllerCapability as Cap, PluginCapability};
use crate::kubelet::{Kubelet, KubeletConfig};
use crate::machine::Machine;
use crate::model::Kind;
use crate::plant::Planted;
use crate::registration::registrar::Registrar;
use crate::registration::watcher::{PluginWatcher, WatcherInput};
use crate::roles::{self, CapacityTracking, DriverFacts, Flags, Role, RoleMachine, Switches};

/// A machine in the simulation.
#[derive(Debug, Clone, Hash)]
pub enum Actor {
    /// A control-plane role, made by the role catalogue as `volplane
    /// controller` makes it.
    Control(RoleMachine),
    /// A node's kubelet volume manager.
    Kubelet(Box<Kubelet>),
    /// A node's plugin watcher (the kubelet's plugin manager).
    Watcher(Box<PluginWatcher>),
    /// A node's node-driver-registrar.
    Registrar {
        /// The node it runs on.
        node: String,
        /// The machine.
        m: Box<Registrar>,
    },
}

/// The namespace of the simulated CSIStorageCapacity objects.
pub const CAPACITY_NAMESPACE: &str = "kube-system";

/// What the simulated driver says about itself: it can do everything.
pub fn driver_facts() -> DriverFacts {
    use Cap::*;
    DriverFacts {
        name: DRIVER.into(),
        controller: vec![
            CreateDeleteVolume,
            PublishUnpublishVolume,
            PublishReadonly,
            ExpandVolume,
            ModifyVolume,
            CreateDeleteSnapshot,
            GetCapacity,
            SingleNodeMultiWriter,
        ],
        plugin: vec![
            PluginCapability::ControllerService,
            PluginCapability::GroupControllerService,
            PluginCapability::VolumeAccessibilityConstraints,
        ],
    }
}

/// The flags the simulated `volplane controller` runs with: every role,
/// the sidecars' defaults, and, in the runs that track capacity,
/// `--enable-capacity` without a poll (the cluster must go quiet) and for
/// every class (the workload's classes bind at once).
pub fn flags(config: &SimConfig) -> Flags {
    Flags {
        switches: Switches::all(),
        capacity: config.capacity.then(|| CapacityTracking {
            namespace: CAPACITY_NAMESPACE.into(),
            owner: None,
            poll_interval: None,
            immediate_binding: true,
        }),
        plant: config.plant,
        ..Flags::default()
    }
}

/// The roles the simulation runs, in the order its actors list them.
const ROLES: [Role; 9] = [
    Role::Binder,
    Role::Provisioner,
    Role::Attacher,
    Role::Resizer,
    Role::PvcProtection,
    Role::PvProtection,
    Role::SnapshotController,
    Role::Snapshotter,
    Role::Capacity,
];

/// The control-plane actors, made by the role catalogue.
pub(super) fn control_plane(config: &SimConfig) -> Vec<Actor> {
    let (facts, flags) = (driver_facts(), flags(config));
    ROLES
        .into_iter()
        .filter_map(|role| made(role, &facts, &flags))
        .map(Actor::Control)
        .collect()
}

fn made(role: Role, facts: &DriverFacts, flags: &Flags) -> Option<RoleMachine> {
    roles::make_one(role, facts, flags)
        .unwrap_or_else(|why| panic!("the simulated driver serves every role: {why}"))
}

/// A node's kubelet as the simulation runs it.
pub(super) fn kubelet(node: &str, plant: Planted) -> Actor {
    let mut c = KubeletConfig::new(node, DRIVER, ROOT);
    c.modes = DriverModes {
        single_node_multi_writer: true,
    };
    c.plant = plant;
    Actor::Kubelet(Box::new(Kubelet::new(c)))
}

impl Actor {
    /// The control-plane machine this actor is, if it is one.
    pub(super) fn control(&mut self) -> Option<&mut dyn ControlMachine> {
        Some(match self {
            Actor::Control(m) => m.control(),
            Actor::Kubelet(m) => m.as_mut(),
            Actor::Watcher(_) | Actor::Registrar { .. } => return None,
        })
    }

    pub(super) fn poll_timeout(&self) -> Option<Tick> {
        match self {
            Actor::Control(m) => m.poll_timeout(),
            Actor::Kubelet(m) => m.poll_timeout(),
            Actor::Watcher(m) => m.poll_timeout(),
            Actor::Registrar { m, .. } => m.poll_timeout(),
        }
    }

    pub(super) fn check_invariants(&self) -> Result<(), crate::machine::Broken> {
        match self {
            Actor::Control(m) => m.check_invariants(),
            Actor::Kubelet(m) => m.check_invariants(),
            Actor::Watcher(m) => m.check_invariants(),
            Actor::Registrar { m, .. } => m.check_invariants(),
        }
    }

    /// How a watch event reaches this actor, if its informers watch its
    /// kind: by the machine's own list ([`ControlMachine::watches`]), the
    /// one the kube adapter runs it by; a plugin watcher hears of nodes.
    pub(super) fn watch(&self, w: &Watch) -> Option<Delivery> {
        let kind = w.kind();
        match self {
            Actor::Watcher(_) => matches!(kind, Kind::Node | Kind::CsiNode)
                .then(|| Delivery::Watcher(WatcherInput::Watch(w.clone()))),
            Actor::Registrar { .. } => None,
            _ => self
                .watches(kind)
                .then(|| Delivery::Input(Input::Watch(w.clone()))),
        }
    }

    /// Whether this actor's machine watches `kind` (the plugin watcher and
    /// the registrar watch no kind this way).
    pub fn watches(&self, kind: Kind) -> bool {
        match self {
            Actor::Control(m) => m.watches(kind),
            Actor::Kubelet(m) => m.watches(kind),
            Actor::Watcher(_) | Actor::Registrar { .. } => false,
        }
    }

    /// The role this actor plays, if it is a control-plane role.
    pub fn role(&self) -> Option<Role> {
        match self {
            Actor::Control(m) => Some(m.role()),
            Actor::Kubelet(_) | Actor::Watcher(_) | Actor::Registrar { .. } => None,
        }
    }

    /// The actor's name in the trace: its role's, or the node component's.
    pub fn name(&self) -> String {
        match self {
            Actor::Control(m) => m.role().name().into(),
            Actor::Kubelet(k) => format!("kubelet/{}", k.config().node),
            Actor::Watcher(w) => format!("plugin-watcher/{}", w.node_name()),
            Actor::Registrar { node, .. } => format!("node-driver-registrar/{node}"),
        }
    }

    /// The same machine, as a fresh process would start it.
    pub(super) fn fresh(&self, config: &SimConfig) -> Actor {
        match self {
            Actor::Control(m) => {
                let made = made(m.role(), &driver_facts(), &flags(config));
                Actor::Control(made.expect("a role the simulation runs is switched on"))
            }
            Actor::Kubelet(k) => kubelet(&k.config().node, config.plant),
            Actor::Watcher(w) => Actor::Watcher(Box::new(PluginWatcher::new(w.node_name()))),
            Actor::Registrar { node, .. } => registration::registrar(node),
        }
    }
}
