//! volplane on tokio: serves the CSI services on a unix socket, connects CSI
//! clients, and offloads blocking host work to tokio's blocking pool.
//!
//! Everything runtime-neutral (validation, the driver machine, the pump, the
//! backend trait) lives in `volplane-proto`; this crate holds only the
//! transport, spawning and signals.

use std::future::Future;
use std::sync::Arc;

use tokio::net::UnixListener;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint, Server};
use volplane_core::driver::DriverConfig;
use volplane_host::Host;
use volplane_proto::csi::controller_server::ControllerServer;
use volplane_proto::csi::identity_server::IdentityServer;
use volplane_proto::csi::node_server::NodeServer;
use volplane_proto::endpoint::{self, EndpointError};
use volplane_proto::service::{
    Backend, Blocking, CsiService, NodeHost, Pump, PumpConfig, PumpError,
};

/// tokio's blocking pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioBlocking;

impl Blocking for TokioBlocking {
    fn spawn(&self, job: Box<dyn FnOnce() + Send>) {
        tokio::task::spawn_blocking(job);
    }
}

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
    Transport(#[from] tonic::transport::Error),
}

/// Serves Identity (always), Controller (when `config.controller`) and Node
/// (when `config.node`) on `endpoint` until `shutdown` completes; removes a
/// stale socket first and its own socket at the end.
pub async fn serve<B: Backend>(
    endpoint: &str,
    config: DriverConfig,
    backend: B,
    host: Host,
    pump_config: PumpConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    let path = endpoint::socket_path(endpoint)?;
    endpoint::prepare_socket(&path)?;
    let node_host = NodeHost::new(Arc::new(host), Arc::new(TokioBlocking));
    let (controller, node) = (config.controller, config.node);
    let (pump, handle) = Pump::new(config, Arc::new(backend), node_host, pump_config).await?;
    let pump = tokio::spawn(pump.run());
    let listener = UnixListener::bind(&path).map_err(|source| ServeError::Listen {
        path: path.display().to_string(),
        source,
    })?;
    tracing::info!(endpoint, "serving CSI");
    let svc = CsiService::new(handle);
    let result = Server::builder()
        .add_service(IdentityServer::new(svc.clone()))
        .add_optional_service(controller.then(|| ControllerServer::new(svc.clone())))
        .add_optional_service(node.then(|| NodeServer::new(svc.clone())))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await;
    drop(svc);
    endpoint::remove_socket(&path);
    result?;
    match pump.await {
        Ok(r) => r?,
        Err(e) => tracing::error!("the driver pump panicked: {e}"),
    }
    tracing::info!(endpoint, "stopped");
    Ok(())
}

/// Completes at SIGTERM or SIGINT.
pub async fn termination() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install SIGINT handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
}

/// A gRPC channel to a CSI endpoint (`unix:///path/csi.sock`).
pub async fn connect(endpoint: &str) -> Result<Channel, tonic::transport::Error> {
    let path = endpoint::socket_path(endpoint).map(|p| format!("unix://{}", p.display()));
    let uri = path.unwrap_or_else(|_| endpoint.to_string());
    Endpoint::from_shared(uri)?.connect().await
}
