//! What `volplane controller` is told (which roles run, their switches,
//! the sidecars' flags) and what it learns from the driver before any role
//! starts; why it stops.

use std::sync::Arc;
use std::time::Duration;

use volplane_core::driver::{Request, Response};
use volplane_core::{Code, Status};
use volplane_proto::client::{CsiClient, Transport};
use volplane_service::metrics::Metrics;

pub use volplane_core::roles::{CapacityTracking, DriverFacts, Flags, NodeDeployment, Switches};

/// How the controller runs: the sidecars' flags that shape the roles
/// (the role catalogue's [`Flags`], each once), and how this process
/// carries the roles out.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// The roles and their flags.
    pub flags: Flags,
    /// `--timeout`: how long a CSI call may take.
    pub timeout: Duration,
    /// How often every machine looks at every cached object again.
    pub resync: Duration,
    /// This replica's name (the events' reporting instance).
    pub identity: String,
    /// Where CSI calls, queue depths and retries are counted.
    pub metrics: Arc<Metrics>,
    /// `--kube-api-qps` and `--kube-api-burst`: each role's API calls go
    /// through a token bucket of this rate and burst (client-go's).
    pub kube_api: (f64, u32),
    /// `--worker-threads`: how many CSI calls each role has in flight at
    /// most.
    pub worker_threads: usize,
    /// Test knob (feature `fake-api`, never in a release build): this role
    /// panics when its caches sync, as a bug would; or, named `<Kind>
    /// informer` (`PersistentVolume informer`), that informer panics.
    #[cfg(feature = "fake-api")]
    pub panic_in: Option<&'static str>,
}

impl Default for ControllerConfig {
    fn default() -> ControllerConfig {
        ControllerConfig {
            flags: Flags::default(),
            timeout: Duration::from_secs(15),
            resync: Duration::from_secs(600),
            identity: "volplane".into(),
            metrics: Metrics::new(),
            kube_api: (
                volplane_core::control::ratelimit::DEFAULT_QPS,
                volplane_core::control::ratelimit::DEFAULT_BURST,
            ),
            worker_threads: 10,
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
