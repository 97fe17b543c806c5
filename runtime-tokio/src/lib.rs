//! volplane on tokio: serves the CSI services on a unix socket, connects CSI
//! clients, and offloads blocking host work to tokio's blocking pool.
//!
//! Everything runtime-neutral (validation, the driver machine, the pump, the
//! backend trait, socket housekeeping) lives in `volplane-service`; this crate
//! holds only the transport, spawning and signals. `volplane-smol` reads alike.

#![deny(missing_docs)]

mod fixed;

use std::future::Future;
use std::sync::Arc;

pub use fixed::FixedStream;
use tokio::net::UnixListener;
use tonic::service::Routes;
use tonic::transport::{Channel, Endpoint, Server};
use volplane_core::driver::DriverConfig;
use volplane_host::Host;
use volplane_proto::endpoint;
use volplane_proto::limits::{Limits, MAX_FRAME};
use volplane_proto::status::Answers;
pub use volplane_service::ServeError;
use volplane_service::{Backend, Blocking, PumpConfig, PumpError, finish, prepare};

/// tokio's blocking pool.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioBlocking;

impl Blocking for TokioBlocking {
    fn spawn(&self, job: Box<dyn FnOnce() + Send>) {
        tokio::task::spawn_blocking(job);
    }
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
    let p = prepare(
        endpoint,
        config,
        backend,
        host,
        pump_config,
        Arc::new(TokioBlocking),
    )
    .await?;
    let (run, pump_ended) = volplane_service::supervised(p.pump.run(Arc::new(Tokio)));
    let pump = tokio::spawn(run);
    let listener = volplane_proto::endpoint::listen(&p.path)
        .and_then(UnixListener::from_std)
        .map_err(|source| ServeError::Listen {
            path: p.path.display().to_string(),
            source,
        })?;
    let limits = Limits::DEFAULT;
    let routes = volplane_service::csi_routes(p.service, p.controller, p.node, &limits);
    let served = server(&limits)
        .add_routes(routes)
        .serve_with_incoming_shutdown(
            fixed::incoming(listener, &p.path, &limits),
            volplane_service::until_either(shutdown, pump_ended),
        )
        .await
        .map_err(|e| ServeError::Transport(e.to_string()));
    finish(&p.path, served, async move {
        pump.await
            .unwrap_or_else(|e| Err(PumpError::Stopped(format!("the driver pump ended: {e}"))))
    })
    .await
}

type Bounded =
    tower_layer::Stack<tower_layer::LayerFn<fn(Routes) -> Answers<Routes>>, tower_layer::Identity>;

/// A tonic server held to `limits` (see `volplane_proto::limits`), whose
/// early answers name what went wrong (see `volplane_proto::status`).
fn server(limits: &Limits) -> Server<Bounded> {
    let answers: fn(Routes) -> Answers<Routes> = Answers::new;
    Server::builder()
        .max_concurrent_streams(limits.streams)
        .http2_max_header_list_size(limits.header_list)
        .http2_max_pending_accept_reset_streams(Some(limits.pending_resets))
        .max_frame_size(MAX_FRAME as u32)
        .layer(tower_layer::layer_fn(answers))
}

/// Installs the SIGTERM and SIGINT handlers (call it inside the runtime);
/// the future completes at the first of them.
pub fn termination() -> Result<impl Future<Output = ()> + Send, ServeError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(ServeError::Signals)?;
    let mut int = signal(SignalKind::interrupt()).map_err(ServeError::Signals)?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    })
}

/// A gRPC channel to a CSI endpoint (`unix:///path/csi.sock`).
pub async fn connect(endpoint: &str) -> Result<Channel, tonic::transport::Error> {
    let path = endpoint::socket_path(endpoint).map(|p| format!("unix://{}", p.display()));
    let uri = path.unwrap_or_else(|_| endpoint.to_string());
    Endpoint::from_shared(uri)?.connect().await
}

/// Serves the kubelet plugin-registration API (node-driver-registrar's side)
/// on the unix socket `path` until `shutdown` completes. The caller creates
/// the listener's directory and removes the socket afterwards.
pub async fn serve_registration<R>(
    listener: UnixListener,
    service: R,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError>
where
    R: volplane_proto::registration::registration_server::Registration,
{
    use volplane_proto::registration::registration_server::RegistrationServer;
    let limits = Limits::DEFAULT;
    let path = listener
        .local_addr()
        .ok()
        .and_then(|a| a.as_pathname().map(|p| p.to_path_buf()))
        .unwrap_or_default();
    let service = RegistrationServer::new(service).max_decoding_message_size(limits.message);
    server(&limits)
        .add_routes(Routes::new(service))
        .serve_with_incoming_shutdown(fixed::incoming(listener, &path, &limits), shutdown)
        .await
        .map_err(|e| ServeError::Transport(e.to_string()))
}

/// node-driver-registrar's needs, on tokio (see `volplane_service::run_registrar`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioRegistrar;

/// The timer and tasks of the runtime-neutral loops (the Kubernetes
/// controller roles, the registrar), on tokio.
#[derive(Debug, Clone, Copy, Default)]
pub struct Tokio;

impl volplane_service::drive::Runtime for Tokio {
    fn sleep(&self, delay: std::time::Duration) -> volplane_service::drive::BoxFuture<()> {
        Box::pin(tokio::time::sleep(delay))
    }

    fn spawn(&self, task: volplane_service::drive::BoxFuture<()>) {
        tokio::spawn(task);
    }
}

impl volplane_service::drive::Runtime for TokioRegistrar {
    fn sleep(&self, delay: std::time::Duration) -> volplane_service::drive::BoxFuture<()> {
        Tokio.sleep(delay)
    }

    fn spawn(&self, task: volplane_service::drive::BoxFuture<()>) {
        Tokio.spawn(task)
    }
}

impl volplane_service::RegistrationRuntime for TokioRegistrar {
    fn plugin_info(
        &self,
        csi_socket: &str,
    ) -> volplane_service::registration::BoxFuture<
        Result<volplane_core::driver::Response, volplane_core::Status>,
    > {
        let socket = csi_socket.to_string();
        Box::pin(async move {
            volplane_service::registration::get_plugin_info(&socket, connect(&socket).await, None)
                .await
        })
    }

    fn get_info(
        &self,
        socket: &str,
    ) -> volplane_service::registration::BoxFuture<
        Result<volplane_core::registration::PluginInfo, volplane_service::RegistrationError>,
    > {
        let socket = socket.to_string();
        Box::pin(async move {
            volplane_service::registration::get_info(&socket, connect(&socket).await, None).await
        })
    }

    fn notify(
        &self,
        socket: &str,
        registered: bool,
        error: String,
    ) -> volplane_service::registration::BoxFuture<Result<(), volplane_service::RegistrationError>>
    {
        let socket = socket.to_string();
        Box::pin(async move {
            let connected = connect(&socket).await;
            volplane_service::registration::notify(&socket, connected, None, registered, error)
                .await
        })
    }

    fn serve(
        &self,
        path: &std::path::Path,
        service: volplane_service::RegistrationService,
        stop: volplane_service::registration::BoxFuture<()>,
    ) -> Result<(), volplane_service::RegistrationError> {
        let listener = volplane_proto::endpoint::listen(path)
            .and_then(UnixListener::from_std)
            .map_err(|source| volplane_service::RegistrationError::Socket {
                what: "listen on",
                path: path.to_path_buf(),
                source,
            })?;
        tokio::spawn(serve_registration(listener, service, stop));
        Ok(())
    }
}

pub use volplane_service::metrics::HealthProbe;

/// Listens for `--http-endpoint`: `host:port`, or `:port` for every interface.
pub async fn bind_http(address: &str) -> Result<tokio::net::TcpListener, ServeError> {
    let address = volplane_service::metrics::http_address(address);
    let listener = match tokio::net::TcpListener::bind(&address).await {
        Ok(listener) => listener,
        Err(source) => return Err(ServeError::Http { address, source }),
    };
    tracing::info!(address, "serving /metrics and /healthz");
    Ok(listener)
}

/// Serves `--http-endpoint` (`/metrics`, `/healthz`) on `listener` until
/// `stop` completes.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    metrics: Arc<volplane_service::metrics::Metrics>,
    probe: HealthProbe,
    stop: impl Future<Output = ()>,
) {
    use hyper::service::service_fn;
    let mut stop = std::pin::pin!(stop);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!("--http-endpoint: accept: {e}");
                    continue;
                }
            },
            _ = &mut stop => return,
        };
        let (metrics, probe) = (metrics.clone(), probe.clone());
        tokio::spawn(async move {
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let (metrics, probe) = (metrics.clone(), probe.clone());
                async move {
                    let a =
                        volplane_service::metrics::answer(req.uri().path(), &metrics, || probe())
                            .await;
                    hyper::Response::builder()
                        .status(a.status)
                        .header("content-type", a.content_type)
                        .body(http_body_util::Full::new(hyper::body::Bytes::from(a.body)))
                }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await
            {
                tracing::debug!("--http-endpoint connection: {e}");
            }
        });
    }
}
