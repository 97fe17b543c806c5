//! What serving CSI on a socket needs before and after the runtime's own
//! accept loop, shared by both runtimes: the socket path, a stale socket
//! removed, the pump over the persisted state, the services; at the end, our
//! socket removed.

use std::path::PathBuf;
use std::sync::Arc;

use volplane_core::driver::DriverConfig;
use volplane_host::Host;

use crate::{Backend, Blocking, CsiService, NodeHost, Pump, PumpConfig, PumpError};
use volplane_proto::endpoint::{self, EndpointError};

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Endpoint(#[from] EndpointError),
    #[error(transparent)]
    Pump(#[from] PumpError),
    #[error("listen on {path}: {source}")]
    Listen {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("gRPC server: {0}")]
    Transport(String),
    #[error("cannot install the SIGTERM/SIGINT handlers: {0}")]
    Signals(#[source] std::io::Error),
}

/// Everything a runtime needs to serve, ready.
pub struct Prepared<B> {
    /// The socket to listen on (a stale one was removed).
    pub path: PathBuf,
    /// Run this on the runtime's executor.
    pub pump: Pump<B>,
    pub service: CsiService,
    /// Serve the Controller service.
    pub controller: bool,
    /// Serve the Node service.
    pub node: bool,
}

impl<B> std::fmt::Debug for Prepared<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("path", &self.path)
            .finish()
    }
}

/// Parses the endpoint, removes a stale socket, and builds the pump over
/// the persisted state.
pub async fn prepare<B: Backend>(
    endpoint: &str,
    mut config: DriverConfig,
    backend: B,
    host: Host,
    pump_config: PumpConfig,
    pool: Arc<dyn Blocking>,
) -> Result<Prepared<B>, ServeError> {
    config.narrow(backend.features());
    let path = endpoint::socket_path(endpoint)?;
    endpoint::prepare_socket(&path)?;
    let (controller, node) = (config.controller, config.node);
    let counted = pump_config
        .metrics
        .clone()
        .map(|m| (m, config.name.clone()));
    let (pump, handle) = Pump::new(
        config,
        Arc::new(backend),
        NodeHost::new(Arc::new(host), pool),
        pump_config,
    )
    .await?;
    tracing::info!(endpoint, "serving CSI");
    Ok(Prepared {
        path,
        pump,
        service: CsiService::new(handle).counted(counted),
        controller,
        node,
    })
}

/// After the accept loop ended: remove our socket, wait for the pump to
/// finish what is in flight.
pub async fn finish(
    path: &std::path::Path,
    served: Result<(), ServeError>,
    pump: impl std::future::Future<Output = Result<(), PumpError>>,
) -> Result<(), ServeError> {
    endpoint::remove_socket(path);
    served?;
    pump.await?;
    tracing::info!(socket = %path.display(), "stopped");
    Ok(())
}
