//! A role's machine, of its own type: what the simulator clones, hashes
//! and restarts, and what the kube adapter and the lab run boxed.

use super::Role;
use crate::Tick;
use crate::attach::Attach;
use crate::binder::Binder;
use crate::capacity::CapacityTracker;
use crate::control::ControlMachine;
use crate::model::Kind;
use crate::protection::{Guarded, Protection};
use crate::provision::Provisioner;
use crate::resize::Resizer;
use crate::snapshot::{SnapshotController, Snapshotter};

/// One role's machine.
#[derive(Debug, Clone, Hash)]
pub enum RoleMachine {
    /// The PV controller's binder.
    Binder(Binder),
    /// external-provisioner.
    Provisioner(Provisioner),
    /// The attach/detach controller and external-attacher.
    Attach(Attach),
    /// external-resizer.
    Resizer(Resizer),
    /// pvc-protection or pv-protection.
    Protection(Protection),
    /// The snapshot controller.
    SnapshotController(SnapshotController),
    /// csi-snapshotter.
    Snapshotter(Snapshotter),
    /// external-provisioner's capacity tracker.
    Capacity(Box<CapacityTracker>),
}

impl RoleMachine {
    /// The role it plays.
    pub fn role(&self) -> Role {
        match self {
            RoleMachine::Binder(_) => Role::Binder,
            RoleMachine::Provisioner(_) => Role::Provisioner,
            RoleMachine::Attach(_) => Role::Attacher,
            RoleMachine::Resizer(_) => Role::Resizer,
            RoleMachine::Protection(p) => match p.guarded() {
                Guarded::Claims => Role::PvcProtection,
                Guarded::Volumes => Role::PvProtection,
            },
            RoleMachine::SnapshotController(_) => Role::SnapshotController,
            RoleMachine::Snapshotter(_) => Role::Snapshotter,
            RoleMachine::Capacity(_) => Role::Capacity,
        }
    }

    /// The machine, to drive.
    pub fn control(&mut self) -> &mut (dyn ControlMachine + Send + 'static) {
        match self {
            RoleMachine::Binder(m) => m,
            RoleMachine::Provisioner(m) => m,
            RoleMachine::Attach(m) => m,
            RoleMachine::Resizer(m) => m,
            RoleMachine::Protection(m) => m,
            RoleMachine::SnapshotController(m) => m,
            RoleMachine::Snapshotter(m) => m,
            RoleMachine::Capacity(m) => m.as_mut(),
        }
    }

    /// The machine, to look at.
    pub fn view(&self) -> &(dyn ControlMachine + Send + 'static) {
        match self {
            RoleMachine::Binder(m) => m,
            RoleMachine::Provisioner(m) => m,
            RoleMachine::Attach(m) => m,
            RoleMachine::Resizer(m) => m,
            RoleMachine::Protection(m) => m,
            RoleMachine::SnapshotController(m) => m,
            RoleMachine::Snapshotter(m) => m,
            RoleMachine::Capacity(m) => m.as_ref(),
        }
    }

    /// The machine, boxed, for a runner that needs no more than the
    /// contract.
    pub fn boxed(self) -> Box<dyn ControlMachine + Send> {
        match self {
            RoleMachine::Binder(m) => Box::new(m),
            RoleMachine::Provisioner(m) => Box::new(m),
            RoleMachine::Attach(m) => Box::new(m),
            RoleMachine::Resizer(m) => Box::new(m),
            RoleMachine::Protection(m) => Box::new(m),
            RoleMachine::SnapshotController(m) => Box::new(m),
            RoleMachine::Snapshotter(m) => Box::new(m),
            RoleMachine::Capacity(m) => m,
        }
    }

    /// Whether its informers watch `kind`.
    pub fn watches(&self, kind: Kind) -> bool {
        self.view().watches(kind)
    }

    /// Its earliest timer.
    pub fn poll_timeout(&self) -> Option<Tick> {
        self.view().poll_timeout()
    }

    /// Its invariants.
    pub fn check_invariants(&self) -> Result<(), crate::machine::Broken> {
        self.view().check_invariants()
    }
}
