//! The control-plane roles, by the one set of names the kube adapter
//! (`volplane controller`'s logs, metrics and Leases), the simulator's
//! traces and the tests use. What a role watches is its machine's own
//! list ([`super::ControlMachine::watches`]), so every runner delivers the
//! same events to it.

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

    /// Its name.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_role_is_found_by_its_name() {
        for r in Role::ALL {
            assert_eq!(Role::named(r.name()), Some(r));
        }
        assert_eq!(Role::named("kubelet"), None);
    }
}
