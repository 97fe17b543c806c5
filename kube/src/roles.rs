//! Which machines `volplane controller` runs: the roles its switches ask
//! for, each configured from the driver's capabilities and the flags, and a
//! line for each role that cannot run, saying why.

use std::collections::BTreeSet;
use std::time::Duration;

use volplane_core::Tick;
use volplane_core::attach::{Attach, AttachConfig};
use volplane_core::binder::Binder;
use volplane_core::control::ControlMachine;
use volplane_core::control::catalogue::Role as CatalogueRole;
use volplane_core::control::csi_map::DriverModes;
use volplane_core::driver::{ControllerCapability as Cap, PluginCapability};
use volplane_core::model::Kind;
use volplane_core::protection::{Guarded, Protection};
use volplane_core::provision::node::NodeScope;
use volplane_core::provision::{Provisioner, ProvisionerConfig};
use volplane_core::resize::{ResizeConfig, Resizer};
use volplane_core::snapshot::{SnapshotController, Snapshotter};

use crate::config::{CapacityTracking, ControllerConfig, DriverFacts, NodeDeployment};

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

/// The machines the switches and the driver's capabilities call for, and
/// a line for each role that is off although switched on, saying why.
pub fn roles(facts: &DriverFacts, config: &ControllerConfig) -> (Vec<Role>, Vec<String>) {
    let r = config.roles;
    let modes = DriverModes {
        single_node_multi_writer: facts.has(Cap::SingleNodeMultiWriter),
    };
    let mut out = Vec::new();
    let mut off = Vec::new();
    let retry = (
        millis(config.retry_interval.0),
        millis(config.retry_interval.1),
    );
    // What a role watches is its machine's own list, the one the
    // simulator and the lab deliver by too.
    let role = |name, machine: Box<dyn ControlMachine + Send>| Role {
        name,
        kinds: Kind::ALL
            .into_iter()
            .filter(|k| machine.watches(*k))
            .collect(),
        machine,
        optional: BTreeSet::new(),
    };
    if r.provisioner && facts.has(Cap::CreateDeleteVolume) {
        let mut c = provisioner_config(facts, config, modes);
        (c.retry_start, c.retry_max) = retry;
        let mut provisioner = role(
            CatalogueRole::Provisioner.name(),
            Box::new(Provisioner::new(c)),
        );
        provisioner.optional = provisioner
            .kinds
            .iter()
            .copied()
            .filter(|k| from_crd(*k))
            .collect();
        out.push(provisioner);
    } else if r.provisioner {
        off.push("provisioner: the driver has no CREATE_DELETE_VOLUME".into());
    }
    if r.attacher || r.attach_detach {
        let mut c = AttachConfig::new(&facts.name);
        c.modes = modes;
        c.trivial = !facts.has(Cap::PublishUnpublishVolume);
        c.publish_readonly = facts.has(Cap::PublishReadonly);
        c.attach_detach = r.attach_detach;
        (c.retry_start, c.retry_max) = retry;
        c.node = config.node_deployment.as_ref().map(|n| n.node.clone());
        out.push(role(
            CatalogueRole::Attacher.name(),
            Box::new(Attach::new(c)),
        ));
    }
    let (expand, modify) = (facts.has(Cap::ExpandVolume), facts.has(Cap::ModifyVolume));
    if r.resizer && (expand || modify) {
        let mut c = ResizeConfig::new(&facts.name);
        c.modes = modes;
        (c.expand, c.modify) = (expand, modify);
        c.extra_modify_metadata = config.extra_modify_metadata;
        (c.retry_start, c.retry_max) = retry;
        c.node_topology = config.node_deployment.as_ref().map(|n| n.topology.clone());
        out.push(role(
            CatalogueRole::Resizer.name(),
            Box::new(Resizer::new(c)),
        ));
    } else if r.resizer {
        off.push("resizer: the driver has neither EXPAND_VOLUME nor MODIFY_VOLUME".into());
    }
    if let Some(tracking) = &config.capacity {
        match capacity_role(facts, tracking, config.node_deployment.as_ref()) {
            Ok(role) => out.push(role),
            Err(why) => off.push(why),
        }
    }
    if r.binder {
        out.push(role(CatalogueRole::Binder.name(), Box::new(Binder::new())));
    }
    let group_controller = facts
        .plugin
        .contains(&PluginCapability::GroupControllerService);
    if r.snapshotter && r.group_snapshots && !group_controller {
        off.push("snapshotter: group snapshots: the driver has no GROUP_CONTROLLER_SERVICE".into());
    }
    if r.snapshotter && facts.has(Cap::CreateDeleteSnapshot) {
        let (prefix, length) = &config.snapshot_naming;
        let s = Snapshotter::new(&facts.name)
            .with_groups(r.group_snapshots && group_controller)
            .with_naming(prefix, *length)
            .with_retry(retry.0, retry.1)
            .with_extra_create_metadata(config.extra_create_metadata);
        out.push(role(CatalogueRole::Snapshotter.name(), Box::new(s)));
    } else if r.snapshotter {
        off.push("snapshotter: the driver has no CREATE_DELETE_SNAPSHOT".into());
    }
    if r.snapshot_controller {
        let s = SnapshotController::new()
            .with_groups(r.group_snapshots)
            .with_retry(retry.0, retry.1);
        out.push(role(CatalogueRole::SnapshotController.name(), Box::new(s)));
    }
    for (on, guarded, name) in [
        (
            r.pvc_protection,
            Guarded::Claims,
            CatalogueRole::PvcProtection.name(),
        ),
        (
            r.pv_protection,
            Guarded::Volumes,
            CatalogueRole::PvProtection.name(),
        ),
    ] {
        if on {
            out.push(role(name, Box::new(Protection::new(guarded))));
        }
    }
    (out, off)
}

/// True for a kind a CustomResourceDefinition brings (external-snapshotter's).
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

/// external-provisioner's configuration from the driver and the flags.
fn provisioner_config(
    facts: &DriverFacts,
    config: &ControllerConfig,
    modes: DriverModes,
) -> ProvisionerConfig {
    let mut c = ProvisionerConfig::new(&facts.name);
    c.identity = provisioner_identity(&facts.name);
    c.modes = modes;
    c.topology = facts
        .plugin
        .contains(&PluginCapability::VolumeAccessibilityConstraints);
    c.default_fs_type = config.default_fs_type.clone();
    c.strict_topology = config.strict_topology;
    c.immediate_topology = config.immediate_topology;
    c.prevent_volume_mode_conversion = config.prevent_volume_mode_conversion;
    c.extra_create_metadata = config.extra_create_metadata;
    c.controller_publish_readonly = config.controller_publish_readonly;
    (c.volume_name_prefix, c.volume_name_uuid_length) = config.volume_naming.clone();
    c.snapshots = config.roles.snapshotter || config.restore_snapshots;
    c.modify_volume = facts.has(Cap::ModifyVolume);
    c.node = config.node_deployment.as_ref().map(|n| NodeScope {
        node: n.node.clone(),
        topology: n.topology.clone(),
        immediate_binding: n.immediate_binding,
        base_delay: millis(n.base_delay),
        max_delay: millis(n.max_delay),
    });
    c
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

/// A duration as the machines' clock counts it.
fn millis(d: Duration) -> Tick {
    d.as_millis().try_into().unwrap_or(Tick::MAX)
}

/// The capacity tracker `--enable-capacity` asks for, or why it cannot run.
fn capacity_role(
    facts: &DriverFacts,
    tracking: &CapacityTracking,
    node: Option<&NodeDeployment>,
) -> Result<Role, String> {
    use volplane_core::capacity::{self, CapacityConfig, CapacityTracker};
    if !facts.has(Cap::GetCapacity) {
        return Err("capacity: the driver has no GET_CAPACITY".into());
    }
    let mut c = CapacityConfig::new(&facts.name, &tracking.namespace);
    c.owner = tracking.owner.clone();
    c.poll_interval = Some(millis(tracking.poll_interval));
    c.immediate_binding = tracking.immediate_binding;
    if let Some(node) = node {
        c.fixed_segment = Some(node.topology.clone());
        c.managed_by = capacity::managed_by_node(&node.node);
    }
    let machine = CapacityTracker::new(c);
    let kinds = Kind::ALL
        .into_iter()
        .filter(|k| machine.watches(*k))
        .collect();
    Ok(Role {
        name: CatalogueRole::Capacity.name(),
        machine: Box::new(machine),
        kinds,
        optional: BTreeSet::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Roles;
    use volplane_core::sim::{Sim, SimConfig};

    /// Every switch on, for a driver that can do everything the simulated
    /// one can: the roles the simulator runs, as the adapter makes them.
    fn adapter_roles() -> Vec<Role> {
        use Cap::*;
        let facts = DriverFacts {
            name: volplane_core::sim::DRIVER.into(),
            controller: vec![
                CreateDeleteVolume,
                PublishUnpublishVolume,
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
        };
        let config = ControllerConfig {
            roles: Roles {
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
            },
            capacity: Some(CapacityTracking {
                namespace: "kube-system".into(),
                owner: None,
                poll_interval: Duration::from_secs(60),
                immediate_binding: true,
            }),
            ..ControllerConfig::default()
        };
        let (roles, off) = roles(&facts, &config);
        assert_eq!(off, Vec::<String>::new());
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
