//! The simulation's actors: each control-plane machine, a node's plugin
//! watcher and node-driver-registrar, with how watch events reach them and
//! how a restart makes them fresh.

use super::registration;
use super::{DRIVER, Delivery, ROOT};
use crate::Tick;
use crate::attach::{Attach, AttachConfig};
use crate::binder::Binder;
use crate::capacity::{CapacityConfig, CapacityTracker};
use crate::control::catalogue::Role;
use crate::control::csi_map::DriverModes;
use crate::control::{ControlMachine, Input, Watch};
use crate::kubelet::{Kubelet, KubeletConfig};
use crate::machine::Machine;
use crate::model::Kind;
use crate::plant::Planted;
use crate::protection::{Guarded, Protection};
use crate::provision::{Provisioner, ProvisionerConfig};
use crate::registration::registrar::Registrar;
use crate::registration::watcher::{PluginWatcher, WatcherInput};
use crate::resize::{ResizeConfig, Resizer};
use crate::snapshot::{SnapshotController, Snapshotter};

/// A control-plane machine in the simulation.
#[derive(Debug, Clone, Hash)]
pub enum Actor {
    /// The PV controller.
    Binder(Binder),
    /// The external-provisioner.
    Provisioner(Provisioner),
    /// The attach/detach controller and attacher.
    Attach(Attach),
    /// The external-resizer.
    Resizer(Resizer),
    /// pvc-protection or pv-protection.
    Protection(Protection),
    /// The snapshot controller.
    Snapshots(SnapshotController),
    /// csi-snapshotter.
    Snapshotter(Snapshotter),
    /// external-provisioner's capacity tracker.
    Capacity(Box<CapacityTracker>),
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

/// external-provisioner's capacity tracker as the simulation runs it: no
/// poll (the cluster must go quiet), objects for every class (the
/// workload's classes bind at once).
pub(super) fn capacity_tracker(plant: Planted) -> Actor {
    let mut c = CapacityConfig::new(DRIVER, CAPACITY_NAMESPACE);
    c.plant = plant;
    c.poll_interval = None;
    c.immediate_binding = true;
    Actor::Capacity(Box::new(CapacityTracker::new(c)))
}

fn modes() -> DriverModes {
    DriverModes {
        single_node_multi_writer: true,
    }
}

impl Actor {
    /// The control-plane machine this actor is, if it is one.
    pub(super) fn control(&mut self) -> Option<&mut dyn ControlMachine> {
        Some(match self {
            Actor::Binder(m) => m,
            Actor::Provisioner(m) => m,
            Actor::Attach(m) => m,
            Actor::Resizer(m) => m,
            Actor::Protection(m) => m,
            Actor::Snapshots(m) => m,
            Actor::Snapshotter(m) => m,
            Actor::Capacity(m) => m.as_mut(),
            Actor::Kubelet(m) => m.as_mut(),
            Actor::Watcher(_) | Actor::Registrar { .. } => return None,
        })
    }

    pub(super) fn poll_timeout(&self) -> Option<Tick> {
        match self {
            Actor::Binder(m) => m.poll_timeout(),
            Actor::Provisioner(m) => m.poll_timeout(),
            Actor::Attach(m) => m.poll_timeout(),
            Actor::Resizer(m) => m.poll_timeout(),
            Actor::Protection(m) => m.poll_timeout(),
            Actor::Snapshots(m) => m.poll_timeout(),
            Actor::Snapshotter(m) => m.poll_timeout(),
            Actor::Capacity(m) => m.poll_timeout(),
            Actor::Kubelet(m) => m.poll_timeout(),
            Actor::Watcher(m) => m.poll_timeout(),
            Actor::Registrar { m, .. } => m.poll_timeout(),
        }
    }

    pub(super) fn check_invariants(&self) -> Result<(), String> {
        match self {
            Actor::Binder(m) => m.check_invariants(),
            Actor::Provisioner(m) => m.check_invariants(),
            Actor::Attach(m) => m.check_invariants(),
            Actor::Resizer(m) => m.check_invariants(),
            Actor::Protection(m) => m.check_invariants(),
            Actor::Snapshots(m) => m.check_invariants(),
            Actor::Snapshotter(m) => m.check_invariants(),
            Actor::Capacity(m) => m.check_invariants(),
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
            Actor::Binder(m) => m.watches(kind),
            Actor::Provisioner(m) => ControlMachine::watches(m, kind),
            Actor::Attach(m) => m.watches(kind),
            Actor::Resizer(m) => m.watches(kind),
            Actor::Protection(m) => ControlMachine::watches(m, kind),
            Actor::Snapshots(m) => ControlMachine::watches(m, kind),
            Actor::Snapshotter(m) => ControlMachine::watches(m, kind),
            Actor::Capacity(m) => ControlMachine::watches(m.as_ref(), kind),
            Actor::Kubelet(m) => m.watches(kind),
            Actor::Watcher(_) | Actor::Registrar { .. } => false,
        }
    }

    /// The role this actor plays, if it is a control-plane role.
    pub fn role(&self) -> Option<Role> {
        Some(match self {
            Actor::Binder(_) => Role::Binder,
            Actor::Provisioner(_) => Role::Provisioner,
            Actor::Attach(_) => Role::Attacher,
            Actor::Resizer(_) => Role::Resizer,
            Actor::Protection(p) => match p.guarded() {
                Guarded::Claims => Role::PvcProtection,
                Guarded::Volumes => Role::PvProtection,
            },
            Actor::Snapshots(_) => Role::SnapshotController,
            Actor::Snapshotter(_) => Role::Snapshotter,
            Actor::Capacity(_) => Role::Capacity,
            Actor::Kubelet(_) | Actor::Watcher(_) | Actor::Registrar { .. } => return None,
        })
    }

    /// The actor's name in the trace: its role's, or the node component's.
    pub fn name(&self) -> String {
        match self {
            Actor::Kubelet(k) => format!("kubelet/{}", k.config().node),
            Actor::Watcher(w) => format!("plugin-watcher/{}", w.node_name()),
            Actor::Registrar { node, .. } => format!("node-driver-registrar/{node}"),
            _ => self.role().map(Role::name).unwrap_or_default().into(),
        }
    }

    /// The same machine, as a fresh process would start it.
    pub(super) fn fresh(&self, plant: Planted) -> Actor {
        match self {
            Actor::Binder(_) => Actor::Binder(Binder::with_plant(plant)),
            Actor::Provisioner(_) => {
                let mut c = ProvisionerConfig::new(DRIVER);
                c.modes = modes();
                c.plant = plant;
                c.snapshots = true;
                c.topology = true;
                c.modify_volume = true;
                Actor::Provisioner(Provisioner::new(c))
            }
            Actor::Attach(_) => {
                let mut c = AttachConfig::new(DRIVER);
                c.modes = modes();
                c.plant = plant;
                Actor::Attach(Attach::new(c))
            }
            Actor::Resizer(_) => {
                let mut c = ResizeConfig::new(DRIVER);
                c.modes = modes();
                c.modify = true;
                c.plant = plant;
                Actor::Resizer(Resizer::new(c))
            }
            Actor::Protection(p) => Actor::Protection(Protection::new(p.guarded())),
            Actor::Snapshots(_) => Actor::Snapshots(SnapshotController::new().with_groups(true)),
            Actor::Snapshotter(_) => Actor::Snapshotter(Snapshotter::new(DRIVER).with_groups(true)),
            Actor::Capacity(_) => capacity_tracker(plant),
            Actor::Kubelet(k) => {
                let mut c = KubeletConfig::new(&k.config().node, DRIVER, ROOT);
                c.modes = modes();
                c.plant = plant;
                Actor::Kubelet(Box::new(Kubelet::new(c)))
            }
            Actor::Watcher(w) => Actor::Watcher(Box::new(PluginWatcher::new(w.node_name()))),
            Actor::Registrar { node, .. } => registration::registrar(node),
        }
    }
}
