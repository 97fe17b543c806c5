//! Which machines `volplane controller` runs: the roles its switches ask
//! for, each configured from the driver's capabilities and the flags, and a
//! line for each role that cannot run, saying why.

use std::collections::BTreeSet;

use volplane_core::control::ControlMachine;
use volplane_core::model::Kind;
use volplane_core::roles::{self as catalogue, Role as CatalogueRole, RoleOff};

pub use volplane_core::roles::from_crd;

use crate::config::{ControllerConfig, DriverFacts};

/// One machine to run: its name in logs and events, the machine, the
/// kinds its informers watch.
pub struct Role {
    /// `provisioner`, `attacher`…
    pub name: &'static str,
    /// The machine.
    pub machine: Box<dyn ControlMachine + Send>,
    /// What it watches.
    pub kinds: BTreeSet<Kind>,
    /// What it watches without waiting for: kinds of an optional CRD (the
    /// provisioner restores from VolumeSnapshots, and provisions everything
    /// else while the snapshot CRDs are not installed).
    pub optional: BTreeSet<Kind>,
}

impl std::fmt::Debug for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Role")
            .field("name", &self.name)
            .field("kinds", &self.kinds)
            .finish_non_exhaustive()
    }
}

/// The machines the switches and the driver's capabilities call for, made
/// by the role catalogue (as the simulator and the lab make theirs), and a
/// line for each role that is off although switched on, saying why.
pub fn roles(facts: &DriverFacts, config: &ControllerConfig) -> (Vec<Role>, Vec<RoleOff>) {
    let mut flags = config.flags.clone();
    flags
        .provisioner_identity
        .get_or_insert_with(|| provisioner_identity(&facts.name));
    let made = catalogue::make(facts, &flags);
    let roles = made
        .machines
        .into_iter()
        .map(|m| {
            let role = m.role();
            let kinds: BTreeSet<Kind> = Kind::ALL.into_iter().filter(|k| m.watches(*k)).collect();
            // The provisioner restores from VolumeSnapshots, and provisions
            // everything else while the snapshot CRDs are not installed.
            let optional = match role {
                CatalogueRole::Provisioner => {
                    kinds.iter().copied().filter(|k| from_crd(*k)).collect()
                }
                _ => BTreeSet::new(),
            };
            Role {
                name: role.name(),
                machine: m.boxed(),
                kinds,
                optional,
            }
        })
        .collect();
    (roles, made.off)
}

/// external-provisioner's instance identity: `<start time in ms>-<a
/// number below 10000>-<driver>`, different for each process.
fn provisioner_identity(driver: &str) -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let spread = (since.subsec_nanos() ^ std::process::id().rotate_left(16)) % 10_000;
    format!("{}-{spread}-{driver}", since.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CapacityTracking, Flags, Switches};
    use volplane_core::sim::{Sim, SimConfig};

    /// Every switch on, for a driver that can do everything the simulated
    /// one can: the roles the simulator runs, as the adapter makes them.
    fn adapter_roles() -> Vec<Role> {
        let facts = volplane_core::sim::driver_facts();
        let config = ControllerConfig {
            flags: Flags {
                switches: Switches::all(),
                capacity: Some(CapacityTracking {
                    namespace: "kube-system".into(),
                    owner: None,
                    poll_interval: Some(60_000),
                    immediate_binding: true,
                }),
                ..Flags::default()
            },
            ..ControllerConfig::default()
        };
        let (roles, off) = roles(&facts, &config);
        assert!(off.is_empty(), "{off:?}");
        roles
    }

    /// The simulator runs the production wiring: each role it runs hears
    /// of exactly the kinds the kube adapter's informers deliver to it, and
    /// it runs every role the adapter can.
    #[test]
    fn the_simulator_delivers_each_role_exactly_what_the_adapter_does() {
        let adapter = adapter_roles();
        // Odd seeds run the capacity tracker too.
        let sim = Sim::new(SimConfig::new(1, 1));
        let mut seen = BTreeSet::new();
        for actor in &sim.actors {
            let Some(role) = actor.role() else {
                continue;
            };
            let runs = adapter
                .iter()
                .find(|r| r.name == role.name())
                .unwrap_or_else(|| panic!("the adapter runs no {}", role.name()));
            let delivered: BTreeSet<Kind> = Kind::ALL
                .into_iter()
                .filter(|k| actor.watches(*k))
                .collect();
            assert_eq!(delivered, runs.kinds, "{}", role.name());
            seen.insert(role.name());
        }
        let all: BTreeSet<&str> = adapter.iter().map(|r| r.name).collect();
        assert_eq!(seen, all, "roles the simulator does not run");
    }
}
