//! volplane on smol: serves the CSI services on a unix socket and connects
//! CSI clients with hyper 1's HTTP/2 on smol's executor, timer and I/O, with
//! no tokio runtime (tonic is used without its transport). Blocking host
//! work runs on volplane's bounded [`BlockingPool`].
//!
//! Everything runtime-neutral lives in `volplane-service`; this crate holds
//! only what differs from `volplane-tokio`: the executor, the transport, the
//! signals. The two read alike.

#![deny(missing_docs)]

mod client;
mod fixed;

use std::future::Future;
use std::sync::Arc;

use async_executor::Executor;
use futures::{FutureExt, StreamExt};
use smol_hyper::rt::{FuturesIo, SmolTimer};
use volplane_core::driver::DriverConfig;
use volplane_host::Host;
use volplane_proto::connections::{ConnectionTable, SWEEP_EVERY, peer_process};
use volplane_proto::limits::{Limits, MAX_FRAME};
use volplane_proto::status::Answers;
pub use volplane_service::ServeError;
use volplane_service::{Backend, BlockingPool, PumpConfig, finish, prepare};

pub use client::{Channel, ConnectError, connect};

/// A multi-threaded smol executor.
#[derive(Clone)]
pub struct Runtime {
    ex: Arc<Executor<'static>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").finish()
    }
}

impl Runtime {
    /// An executor run by `threads` worker threads (plus the caller of
    /// `block_on`); fails when the threads cannot be started.
    pub fn new(threads: usize) -> std::io::Result<Runtime> {
        let ex = Arc::new(Executor::new());
        for i in 0..threads.max(1) {
            let ex = ex.clone();
            std::thread::Builder::new()
                .name(format!("volplane-smol-{i}"))
                .spawn(move || smol::block_on(ex.run(std::future::pending::<()>())))?;
        }
        Ok(Runtime { ex })
    }

    /// Runs `f` to completion, helping the executor meanwhile.
    pub fn block_on<T>(&self, f: impl Future<Output = T>) -> T {
        smol::block_on(self.ex.run(f))
    }

    /// Spawns `f` on the executor.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl Future<Output = T> + Send + 'static,
    ) -> smol::Task<T> {
        self.ex.spawn(f)
    }
}

/// hyper's executor: spawns on the runtime.
#[derive(Clone)]
struct Spawner(Arc<Executor<'static>>);

impl<F> hyper::rt::Executor<F> for Spawner
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, f: F) {
        self.0.spawn(f).detach();
    }
}

/// Serves Identity (always), Controller (when `config.controller`) and Node
/// (when `config.node`) on `endpoint` until `shutdown` completes; removes a
/// stale socket first and its own socket at the end.
pub async fn serve<B: Backend>(
    rt: &Runtime,
    endpoint: &str,
    config: DriverConfig,
    backend: B,
    host: Host,
    pump_config: PumpConfig,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let p = prepare(
        endpoint,
        config,
        backend,
        host,
        pump_config,
        // Not smol's own pool: it never shrinks below 500 threads.
        Arc::new(BlockingPool::default()),
    )
    .await?;
    let (run, pump_ended) = volplane_service::supervised(p.pump.run(Arc::new(rt.clone())));
    let pump = rt.spawn(run);
    let listener = volplane_proto::endpoint::listen(&p.path)
        .and_then(smol::net::unix::UnixListener::try_from)
        .map_err(|source| ServeError::Listen {
            path: p.path.display().to_string(),
            source,
        })?;
    let routes = volplane_service::csi_routes(p.service, p.controller, p.node, &LIMITS);
    let shutdown = volplane_service::until_either(shutdown, pump_ended);
    let served = serve_routes(rt, &listener, &p.path, routes, shutdown).await;
    // The connection tasks are gone with serve_routes; the pump then drains.
    finish(&p.path, served, pump).await
}

/// The bounds of every socket served (see `volplane_proto::limits`).
const LIMITS: Limits = Limits::DEFAULT;

/// Serves `routes` over HTTP/2 on `listener` until `shutdown` completes,
/// held to [`LIMITS`], with early answers that name what went wrong (see
/// `volplane_proto::status`); dropping the connection tasks at the end
/// cancels them.
async fn serve_routes(
    rt: &Runtime,
    listener: &smol::net::unix::UnixListener,
    path: &std::path::Path,
    routes: tonic::service::Routes,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    let table = ConnectionTable::new(path, &LIMITS);
    let mut connections: Vec<smol::Task<()>> = Vec::new();
    let mut shutdown = std::pin::pin!(shutdown.fuse());
    let mut sweep = smol::Timer::interval(SWEEP_EVERY);
    loop {
        let accepted = futures::select_biased! {
            _ = shutdown => return Ok(()),
            a = listener.accept().fuse() => a,
            _ = sweep.next().fuse() => {
                table.sweep();
                continue;
            }
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                return Err(ServeError::Transport(format!(
                    "accept on {}: {e}",
                    path.display()
                )));
            }
        };
        connections.retain(|t| !t.is_finished());
        let process = peer_process(std::os::fd::AsFd::as_fd(&stream));
        let Some(place) = table.admit(process) else {
            continue;
        };
        let requests = place.requests();
        let service = hyper_util::service::TowerToHyperService::new(Answers::for_connection(
            routes.clone(),
            requests,
        ));
        let spawner = Spawner(rt.ex.clone());
        connections.push(rt.spawn(async move {
            let stream = fixed::FixedStream::new(stream, place, &LIMITS);
            let conn = hyper::server::conn::http2::Builder::new(spawner)
                .timer(SmolTimer::new())
                .max_concurrent_streams(LIMITS.streams)
                .max_header_list_size(LIMITS.header_list)
                .max_pending_accept_reset_streams(LIMITS.pending_resets)
                .max_frame_size(MAX_FRAME as u32)
                .serve_connection(FuturesIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!("connection ended: {e}");
            }
        }));
    }
}

/// node-driver-registrar's needs, on smol (see `volplane_service::run_registrar`).
#[derive(Debug, Clone)]
pub struct SmolRegistrar(pub Runtime);

/// `unix://` in front of a bare socket path.
fn unix_endpoint(socket: &str) -> String {
    if socket.starts_with("unix://") {
        socket.to_string()
    } else {
        format!("unix://{socket}")
    }
}

/// hyper's client needs a full URI: the socket is the authority.
fn origin() -> http::Uri {
    http::Uri::from_static("http://localhost")
}

/// The timer and tasks of the runtime-neutral loops, on this executor.
impl volplane_service::drive::Runtime for Runtime {
    fn sleep(&self, delay: std::time::Duration) -> volplane_service::drive::BoxFuture<()> {
        Box::pin(async move {
            smol::Timer::after(delay).await;
        })
    }

    fn spawn(&self, task: volplane_service::drive::BoxFuture<()>) {
        self.ex.spawn(task).detach();
    }
}

impl volplane_service::drive::Runtime for SmolRegistrar {
    fn sleep(&self, delay: std::time::Duration) -> volplane_service::drive::BoxFuture<()> {
        self.0.sleep(delay)
    }

    fn spawn(&self, task: volplane_service::drive::BoxFuture<()>) {
        volplane_service::drive::Runtime::spawn(&self.0, task)
    }
}

impl volplane_service::RegistrationRuntime for SmolRegistrar {
    fn plugin_info(
        &self,
        csi_socket: &str,
    ) -> volplane_service::registration::BoxFuture<
        Result<volplane_core::driver::Response, volplane_core::Status>,
    > {
        let socket = csi_socket.to_string();
        Box::pin(async move {
            let connected = connect(&unix_endpoint(&socket)).await;
            volplane_service::registration::get_plugin_info(&socket, connected, Some(origin()))
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
            let connected = connect(&unix_endpoint(&socket)).await;
            volplane_service::registration::get_info(&socket, connected, Some(origin())).await
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
            let connected = connect(&unix_endpoint(&socket)).await;
            volplane_service::registration::notify(
                &socket,
                connected,
                Some(origin()),
                registered,
                error,
            )
            .await
        })
    }

    fn serve(
        &self,
        path: &std::path::Path,
        service: volplane_service::RegistrationService,
        stop: volplane_service::registration::BoxFuture<()>,
    ) -> Result<(), volplane_service::RegistrationError> {
        use volplane_proto::registration::registration_server::RegistrationServer;
        let listener = volplane_proto::endpoint::listen(path)
            .and_then(smol::net::unix::UnixListener::try_from)
            .map_err(|source| volplane_service::RegistrationError::Socket {
                what: "listen on",
                path: path.to_path_buf(),
                source,
            })?;
        let (rt, path) = (self.0.clone(), path.to_path_buf());
        let service = RegistrationServer::new(service).max_decoding_message_size(LIMITS.message);
        let routes = tonic::service::Routes::new(service);
        self.0
            .spawn(async move {
                if let Err(e) = serve_routes(&rt, &listener, &path, routes, stop).await {
                    tracing::warn!("registration socket: {e}");
                }
            })
            .detach();
        Ok(())
    }
}

/// Installs the SIGTERM and SIGINT handlers; the future completes at the
/// first of them.
pub fn termination() -> Result<impl Future<Output = ()> + Send, ServeError> {
    use async_signal::{Signal, Signals};
    use futures::StreamExt;
    let mut signals = Signals::new([Signal::Term, Signal::Int]).map_err(ServeError::Signals)?;
    Ok(async move {
        match signals.next().await {
            Some(Ok(Signal::Term)) => tracing::info!("SIGTERM: shutting down"),
            _ => tracing::info!("SIGINT: shutting down"),
        }
    })
}

/// Listens for `--http-endpoint`: `host:port`, or `:port` for every interface.
pub async fn bind_http(address: &str) -> Result<smol::net::TcpListener, ServeError> {
    let address = volplane_service::metrics::http_address(address);
    let listener = match smol::net::TcpListener::bind(&address).await {
        Ok(listener) => listener,
        Err(source) => return Err(ServeError::Http { address, source }),
    };
    tracing::info!(address, "serving /metrics and /healthz");
    Ok(listener)
}

/// Serves `--http-endpoint` (`/metrics`, `/healthz`) on `listener` until
/// `stop` completes.
pub async fn serve_http(
    rt: Runtime,
    listener: smol::net::TcpListener,
    metrics: Arc<volplane_service::metrics::Metrics>,
    probe: volplane_service::metrics::HealthProbe,
    stop: impl Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop.fuse());
    loop {
        let accepted = futures::select_biased! {
            _ = stop => return,
            a = listener.accept().fuse() => a,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("--http-endpoint: accept: {e}");
                continue;
            }
        };
        let (metrics, probe) = (metrics.clone(), probe.clone());
        rt.spawn(async move {
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let (metrics, probe) = (metrics.clone(), probe.clone());
                    async move {
                        let a =
                            volplane_service::metrics::answer(req.uri().path(), &metrics, || {
                                probe()
                            })
                            .await;
                        hyper::Response::builder()
                            .status(a.status)
                            .header("content-type", a.content_type)
                            .body(http_body_util::Full::new(hyper::body::Bytes::from(a.body)))
                    }
                });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(FuturesIo::new(stream), service)
                .await
            {
                tracing::debug!("--http-endpoint connection: {e}");
            }
        })
        .detach();
    }
}
