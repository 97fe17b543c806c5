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
use volplane_proto::limits::Limits;

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    /// The endpoint is not a unix socket volplane may use.
    Endpoint(#[from] EndpointError),
    #[error(transparent)]
    /// The driver pump failed.
    Pump(#[from] PumpError),
    #[error("listen on {path}: {source}")]
    /// The socket could not be listened on.
    Listen {
        /// The socket's path.
        path: String,
        #[source]
        /// Why.
        source: std::io::Error,
    },
    #[error("gRPC server: {0}")]
    /// The gRPC server failed.
    Transport(String),
    #[error("--http-endpoint {address}: {source}")]
    /// The `/metrics` and `/healthz` address could not be listened on.
    Http {
        /// The address, as listened on.
        address: String,
        #[source]
        /// Why.
        source: std::io::Error,
    },
    #[error("cannot install the SIGTERM/SIGINT handlers: {0}")]
    /// The signal handlers could not be installed.
    Signals(#[source] std::io::Error),
    #[error("{0}; the driver stops so that it is started again")]
    /// A task that runs beside the socket (the `/healthz` and `/metrics`
    /// server) ended: why (see [`watched`]).
    Task(String),
}

/// Everything a runtime needs to serve, ready.
pub struct Prepared<B> {
    /// The socket to listen on (a stale one was removed).
    pub path: PathBuf,
    /// Run this on the runtime's executor.
    pub pump: Pump<B>,
    /// The CSI services, ready to be served.
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

/// The CSI services a driver serves on its socket: Identity always,
/// Controller and GroupController when `controller`, Node when `node`; each
/// refusing a request message larger than `limits.message`.
pub fn csi_routes(
    service: CsiService,
    controller: bool,
    node: bool,
    limits: &Limits,
) -> tonic::service::Routes {
    use volplane_proto::csi::controller_server::ControllerServer;
    use volplane_proto::csi::group_controller_server::GroupControllerServer;
    use volplane_proto::csi::identity_server::IdentityServer;
    use volplane_proto::csi::node_server::NodeServer;
    let message = limits.message;
    let mut routes = tonic::service::Routes::new(
        IdentityServer::new(service.clone()).max_decoding_message_size(message),
    );
    if controller {
        routes = routes
            .add_service(ControllerServer::new(service.clone()).max_decoding_message_size(message))
            .add_service(
                GroupControllerServer::new(service.clone()).max_decoding_message_size(message),
            );
    }
    if node {
        routes = routes.add_service(NodeServer::new(service).max_decoding_message_size(message));
    }
    routes
}

/// The pump's run, watched: the second future completes when the run ends,
/// whether by an error or a panic (a damaged store, a backend's bug). While
/// the server holds its handles the pump only ends that way, and a driver
/// whose pump is gone can only answer "unavailable": the runtime stops
/// serving when it completes, so the process exits with the reason and the
/// kubelet (or whoever runs it) starts it again, instead of a driver that
/// looks alive and does nothing.
pub fn supervised(
    run: impl std::future::Future<Output = Result<(), PumpError>> + Send,
) -> (
    impl std::future::Future<Output = Result<(), PumpError>> + Send,
    impl std::future::Future<Output = ()> + Send + Unpin,
) {
    use futures::FutureExt;
    let (ended_tx, ended_rx) = futures::channel::oneshot::channel::<()>();
    let watched = async move {
        let result = match std::panic::AssertUnwindSafe(run).catch_unwind().await {
            Ok(result) => result,
            Err(panic) => Err(PumpError::Stopped(format!(
                "the driver pump panicked: {} (a bug in volplane or in its backend; the log above says where). \
                 The driver exits so that it is started again, and then finishes what was in flight",
                panic_message(panic.as_ref())
            ))),
        };
        if let Err(e) = &result {
            tracing::error!(error = %e, "the driver pump stopped; stopping the server so the driver restarts");
        }
        let _ = ended_tx.send(());
        result
    };
    (watched, ended_rx.map(|_| ()))
}

/// A task that must run as long as the process does (a role, an
/// informer, the `/healthz` and `/metrics` server), watched: the first
/// future runs it; the second completes, with why, when it ends — by
/// returning or by panicking — and the process then stops (with that
/// reason in its log and a non-zero exit), instead of going on without it
/// while looking healthy.
pub fn watched(
    name: impl Into<String>,
    task: impl std::future::Future<Output = ()> + Send,
) -> (
    impl std::future::Future<Output = ()> + Send,
    impl std::future::Future<Output = String> + Send + Unpin,
) {
    use futures::FutureExt;
    let name = name.into();
    let (ended_tx, ended_rx) = futures::channel::oneshot::channel::<String>();
    let run = async move {
        let why = match std::panic::AssertUnwindSafe(task).catch_unwind().await {
            Ok(()) => format!("{name} stopped"),
            Err(panic) => format!("{name} panicked: {}", panic_message(panic.as_ref())),
        };
        tracing::error!("{why}; the process stops so that it is started again");
        let _ = ended_tx.send(why);
    };
    // A task dropped unfinished (the runtime shutting down) says nothing.
    let ended = ended_rx.map(|why| why.unwrap_or_default()).boxed();
    (run, ended)
}

/// Why a watched task beside the serving ended, if one did (see
/// [`watch_beside`]).
#[derive(Debug, Clone, Default)]
pub struct TaskEnded(std::sync::Arc<std::sync::Mutex<Option<String>>>);

impl TaskEnded {
    /// An error naming the task that ended, if one did.
    pub fn ended(&self) -> Result<(), ServeError> {
        match self.0.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(why) => Err(ServeError::Task(why)),
            None => Ok(()),
        }
    }
}

/// `stop`, or the end of the watched task `ended` (if any), whichever
/// comes first: serving stops at either, and the [`TaskEnded`] says which.
pub fn watch_beside(
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    ended: Option<impl std::future::Future<Output = String> + Send + Unpin + 'static>,
) -> (
    impl std::future::Future<Output = ()> + Send + 'static,
    TaskEnded,
) {
    let why = TaskEnded::default();
    let record = why.clone();
    let ended = async move {
        match ended {
            Some(ended) => {
                let reason = ended.await;
                *record.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(reason);
            }
            None => std::future::pending().await,
        }
    };
    let stop = until_either(stop, Box::pin(ended));
    (stop, why)
}

/// What a panic said, when it said it as text.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// Completes at the first of `shutdown` and `ended` (see [`supervised`]).
pub async fn until_either(
    shutdown: impl std::future::Future<Output = ()>,
    ended: impl std::future::Future<Output = ()> + Unpin,
) {
    let shutdown = std::pin::pin!(shutdown);
    futures::future::select(shutdown, ended).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watched_task_that_ends_or_panics_says_which_and_why() {
        let (run, ended) = watched("the /healthz server", async {});
        futures::executor::block_on(run);
        assert_eq!(
            futures::executor::block_on(ended),
            "the /healthz server stopped"
        );
        let (run, ended) = watched("role attacher", async { panic!("index 3 out of range") });
        futures::executor::block_on(run);
        assert_eq!(
            futures::executor::block_on(ended),
            "role attacher panicked: index 3 out of range"
        );
    }

    #[test]
    fn a_pump_that_panics_ends_the_serving_with_what_it_said() {
        let (run, ended) = supervised(async { panic!("store page 7 is damaged") });
        let result = futures::executor::block_on(run);
        let Err(PumpError::Stopped(why)) = result else {
            panic!("a panicking pump must end in an error, got {result:?}")
        };
        assert!(
            why.contains("panicked") && why.contains("store page 7 is damaged"),
            "{why}"
        );
        futures::executor::block_on(until_either(futures::future::pending(), ended));
    }

    #[test]
    fn a_pump_that_fails_ends_the_serving_and_one_still_running_does_not() {
        let (run, ended) = supervised(async { Err(PumpError::Stopped("gone".into())) });
        assert!(futures::executor::block_on(run).is_err());
        futures::executor::block_on(until_either(futures::future::pending(), ended));
        // Not yet run: nothing ended, the shutdown signal decides.
        let (_run, mut ended) = supervised(async { Ok(()) });
        use futures::FutureExt;
        assert!((&mut ended).now_or_never().is_none());
        futures::executor::block_on(until_either(async {}, ended));
    }
}
