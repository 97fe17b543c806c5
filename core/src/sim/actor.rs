//! The simulation's actors: each control-plane machine, a node's plugin
//! watcher and node-driver-registrar, with how watch events reach them and
//! how a restart makes them fresh.

use super::registration;
use super::{DRIVER, Delivery, ROOT};
use crate::Tick;
use crate::attach::{Attach, AttachConfig};
use crate::binder::Binder;
use crate::capacity::{CapacityConfig, CapacityTracker};
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

    /// How a watch event of `kind` reaches this actor, if its informers
    /// watch that kind.
    pub(super) fn watch(&self, w: &Watch) -> Option<Delivery> {
        let kind = match w {
            Watch::Applied(o) | Watch::Deleted(o) => o.kind(),
        };
        match self {
            Actor::Protection(p) if !p.watches(kind) => None,
            Actor::Snapshots(m) if !m.watches(kind) => None,
            Actor::Snapshotter(m) if !m.watches(kind) => None,
            Actor::Provisioner(m) if !m.watches(kind) => None,
            Actor::Capacity(m) if !m.watches(kind) => None,
            // Only the snapshot machines (and the provisioner) watch the
            // snapshot kinds.
            Actor::Binder(_) | Actor::Attach(_) | Actor::Resizer(_) | Actor::Kubelet(_)
                if matches!(
                    kind,
                    Kind::VolumeSnapshot | Kind::VolumeSnapshotContent | Kind::VolumeSnapshotClass
                ) =>
            {
                None
            }
            Actor::Binder(_) | Actor::Attach(_) | Actor::Kubelet(_)
                if kind == Kind::VolumeAttributesClass =>
            {
                None
            }
            // Only the capacity tracker watches its objects.
            Actor::Binder(_) | Actor::Attach(_) | Actor::Resizer(_) | Actor::Kubelet(_)
                if kind == Kind::CsiStorageCapacity =>
            {
                None
            }
            Actor::Watcher(_) => matches!(kind, Kind::Node | Kind::CsiNode)
                .then(|| Delivery::Watcher(WatcherInput::Watch(w.clone()))),
            Actor::Registrar { .. } => None,
            _ => Some(Delivery::Input(Input::Watch(w.clone()))),
        }
    }

    /// The actor's name in the trace.
    pub fn name(&self) -> String {
        match self {
            Actor::Binder(_) => "binder".into(),
            Actor::Provisioner(_) => "provisioner".into(),
            Actor::Attach(_) => "attach".into(),
            Actor::Resizer(_) => "resizer".into(),
            Actor::Protection(p) => match p.guarded() {
                Guarded::Claims => "pvc-protection".into(),
                Guarded::Volumes => "pv-protection".into(),
            },
            Actor::Snapshots(_) => "snapshot-controller".into(),
            Actor::Snapshotter(_) => "csi-snapshotter".into(),
            Actor::Capacity(_) => "capacity".into(),
            Actor::Kubelet(k) => format!("kubelet/{}", k.config().node),
            Actor::Watcher(w) => format!("plugin-watcher/{}", w.node_name()),
            Actor::Registrar { node, .. } => format!("node-driver-registrar/{node}"),
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
