//! What `volplane controller` is told (which roles run, their switches,
//! the sidecars' flags) and what it learns from the driver before any role
//! starts; why it stops.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use volplane_core::driver::{ControllerCapability as Cap, PluginCapability, Request, Response};
use volplane_core::{Code, Status};
use volplane_proto::client::{CsiClient, Transport};
use volplane_service::metrics::Metrics;

/// Which roles run (the sidecars' `--enable-*`-style switches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
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

impl Default for Roles {
    fn default() -> Roles {
        Roles {
            provisioner: true,
            attacher: true,
            resizer: true,
            binder: false,
            attach_detach: false,
            pvc_protection: false,
            pv_protection: false,
            snapshotter: false,
            snapshot_controller: false,
            group_snapshots: false,
        }
    }
}

/// `--enable-capacity`: where the CSIStorageCapacity objects go and how
/// they are kept.
#[derive(Debug, Clone)]
pub struct CapacityTracking {
    /// The namespace of the objects (`NAMESPACE`, the controller's own).
    pub namespace: String,
    /// Their owner (`--capacity-ownerref-level`), if any.
    pub owner: Option<volplane_core::model::OwnerReference>,
    /// `--capacity-poll-interval`.
    pub poll_interval: Duration,
    /// `--capacity-for-immediate-binding`.
    pub immediate_binding: bool,
}

/// `--node-deployment`: this controller runs beside the driver on one node
/// and provisions only for it.
#[derive(Debug, Clone)]
pub struct NodeDeployment {
    /// The node (`NODE_NAME`).
    pub node: String,
    /// The node's topology segment, as the driver's NodeGetInfo reports it.
    pub topology: BTreeMap<String, String>,
    /// `--node-deployment-immediate-binding`.
    pub immediate_binding: bool,
    /// `--node-deployment-base-delay`.
    pub base_delay: Duration,
    /// `--node-deployment-max-delay`.
    pub max_delay: Duration,
}

/// How the controller runs.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// The roles.
    pub roles: Roles,
    /// `--timeout`: how long a CSI call may take.
    pub timeout: Duration,
    /// How often every machine looks at every cached object again.
    pub resync: Duration,
    /// This replica's name (the events' reporting instance).
    pub identity: String,
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
    /// Where CSI calls, queue depths and retries are counted.
    pub metrics: Arc<Metrics>,
    /// `--kube-api-qps` and `--kube-api-burst`: each role's API calls go
    /// through a token bucket of this rate and burst (client-go's).
    pub kube_api: (f64, u32),
    /// `--worker-threads`: how many CSI calls each role has in flight at
    /// most.
    pub worker_threads: usize,
    /// `--retry-interval-start` and `--retry-interval-max`: a failed
    /// operation is retried after the first, doubling up to the second.
    pub retry_interval: (Duration, Duration),
    /// The provisioner restores claims from VolumeSnapshots without the
    /// snapshotter role (as external-provisioner does on its own).
    pub restore_snapshots: bool,
    /// Test knob (feature `fake-api`, never in a release build): this role
    /// panics when its caches sync, as a bug would; or, named `<Kind>
    /// informer` (`PersistentVolume informer`), that informer panics.
    #[cfg(feature = "fake-api")]
    pub panic_in: Option<&'static str>,
}

impl Default for ControllerConfig {
    fn default() -> ControllerConfig {
        ControllerConfig {
            roles: Roles::default(),
            timeout: Duration::from_secs(15),
            resync: Duration::from_secs(600),
            identity: "volplane".into(),
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
            metrics: Metrics::new(),
            kube_api: (
                volplane_core::control::ratelimit::DEFAULT_QPS,
                volplane_core::control::ratelimit::DEFAULT_BURST,
            ),
            worker_threads: 10,
            retry_interval: (Duration::from_secs(1), Duration::from_secs(300)),
            restore_snapshots: false,
            #[cfg(feature = "fake-api")]
            panic_in: None,
        }
    }
}

/// Why the controller stopped.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The driver did not say who it is or what it can do.
    #[error("the CSI driver did not answer {method}: {status}")]
    Driver {
        /// The call.
        method: &'static str,
        /// Its answer.
        status: Status,
    },
    /// No role can run with this driver and these switches.
    #[error("nothing to do: {0}")]
    NothingToDo(String),
    /// A role, an informer or a call a role made panicked (a bug): the
    /// controller stops rather than go on without it, so that it is
    /// started again (its pod restarts) with every role.
    #[error("{0}; volplane controller stops so that it is started again with every role")]
    Crashed(String),
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
}

/// Asks the driver its name and capabilities.
pub async fn driver_facts<T: Transport>(
    csi: &mut CsiClient<T>,
) -> Result<DriverFacts, ControllerError> {
    let ask = |method: &'static str| move |status| ControllerError::Driver { method, status };
    let Response::PluginInfo { name, .. } = csi
        .call(&Request::GetPluginInfo)
        .await
        .map_err(ask("GetPluginInfo"))?
    else {
        return Err(ask("GetPluginInfo")(Status::internal("not a plugin info")));
    };
    let plugin = match csi.call(&Request::GetPluginCapabilities).await {
        Ok(Response::PluginCapabilities(c)) => c,
        Ok(_) => Vec::new(),
        Err(s) => return Err(ask("GetPluginCapabilities")(s)),
    };
    let controller = match csi.call(&Request::ControllerGetCapabilities).await {
        Ok(Response::ControllerCapabilities(c)) => c,
        Ok(_) => Vec::new(),
        // A node-only driver: no controller service.
        Err(s) if s.code == Code::Unimplemented => Vec::new(),
        Err(s) => return Err(ask("ControllerGetCapabilities")(s)),
    };
    Ok(DriverFacts {
        name,
        controller,
        plugin,
    })
}
