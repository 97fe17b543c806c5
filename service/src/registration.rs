//! node-driver-registrar over real sockets, runtime-neutral: the core's
//! [`Registrar`] machine on the one loop, its registration socket served by
//! whichever runtime supplies a [`RegistrationRuntime`] (tokio and smol both
//! do). The kubelet dials the socket; each RPC goes to the loop through a
//! mailbox and waits for the machine's answer.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::{FutureExt, StreamExt};
use volplane_core::Status;
use volplane_core::driver::Response;
use volplane_core::machine::{self, EffectFailed};
use volplane_core::registration::PluginInfo;
use volplane_core::registration::registrar::{
    Registrar, RegistrarConfig, RegistrarEffect, RegistrarInput,
};
use volplane_proto::registration as pb;
use volplane_sync::mailbox;
use volplane_sync::reply::{self, ReplySender};

pub use crate::drive::BoxFuture;
use crate::drive::{Runtime, Turn};

/// Why a call on a registration socket, or serving one, failed.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// The socket could not be dialled.
    #[error("dial {socket}: {reason}")]
    Dial {
        /// The registration socket.
        socket: String,
        /// What the transport said.
        reason: String,
    },
    /// The plugin answered a call with an error.
    #[error("{method} on {socket}: {message}")]
    Call {
        /// The registration socket.
        socket: String,
        /// `GetInfo` or `NotifyRegistrationStatus`.
        method: &'static str,
        /// The plugin's message.
        message: String,
    },
    /// The registrar's own socket could not be made: its directory, the
    /// listener, or the link into the kubelet's registry.
    #[error("{what} {}: {source}", path.display())]
    Socket {
        /// `listen on`, `create`, `symlink`.
        what: &'static str,
        /// The path it was made at.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
}

/// What a runtime supplies to the registrar, beside a timer and tasks.
pub trait RegistrationRuntime: Runtime {
    /// Calls GetPluginInfo on the driver's CSI socket.
    fn plugin_info(&self, csi_socket: &str) -> BoxFuture<Result<Response, Status>>;
    /// Serves `service` on the unix socket `path` (already free) until
    /// `stop` completes, on a task of its own; fails when it cannot listen.
    fn serve(
        &self,
        path: &Path,
        service: RegistrationService,
        stop: BoxFuture<()>,
    ) -> Result<(), RegistrationError>;
    /// The kubelet's GetInfo on a registration socket.
    fn get_info(&self, socket: &str) -> BoxFuture<Result<PluginInfo, RegistrationError>>;
    /// The kubelet's NotifyRegistrationStatus on a registration socket.
    fn notify(
        &self,
        socket: &str,
        registered: bool,
        error: String,
    ) -> BoxFuture<Result<(), RegistrationError>>;
}

/// GetPluginInfo over `connected`, a channel a runtime opened to `socket`
/// (or why it could not): what every [`RegistrationRuntime::plugin_info`] does.
pub async fn get_plugin_info<T, E>(
    socket: &str,
    connected: Result<T, E>,
    origin: Option<http::Uri>,
) -> Result<Response, Status>
where
    T: volplane_proto::client::Transport,
    E: std::fmt::Display,
{
    let ch = connected.map_err(|e| {
        Status::new(
            volplane_core::Code::Unavailable,
            format!("connect {socket}: {e}"),
        )
    })?;
    volplane_proto::client::CsiClient::new(ch, origin)
        .call(&volplane_core::driver::Request::GetPluginInfo)
        .await
}

/// GetInfo over `connected`, a channel a runtime opened to the registration
/// socket `socket`: what every [`RegistrationRuntime::get_info`] does.
pub async fn get_info<T, E>(
    socket: &str,
    connected: Result<T, E>,
    origin: Option<http::Uri>,
) -> Result<PluginInfo, RegistrationError>
where
    T: volplane_proto::client::Transport,
    E: std::fmt::Display,
{
    let info = registration_client(dialled(socket, connected)?, origin)
        .get_info(pb::InfoRequest {})
        .await
        .map_err(|e| answered(socket, "GetInfo", &e))?;
    Ok(info.into_inner().into())
}

/// NotifyRegistrationStatus over `connected` (see [`get_info`]).
pub async fn notify<T, E>(
    socket: &str,
    connected: Result<T, E>,
    origin: Option<http::Uri>,
    registered: bool,
    error: String,
) -> Result<(), RegistrationError>
where
    T: volplane_proto::client::Transport,
    E: std::fmt::Display,
{
    registration_client(dialled(socket, connected)?, origin)
        .notify_registration_status(pb::RegistrationStatus {
            plugin_registered: registered,
            error,
        })
        .await
        .map_err(|e| answered(socket, "NotifyRegistrationStatus", &e))?;
    Ok(())
}

/// The channel a runtime opened to `socket`, or why not.
fn dialled<T, E: std::fmt::Display>(
    socket: &str,
    connected: Result<T, E>,
) -> Result<T, RegistrationError> {
    connected.map_err(|e| RegistrationError::Dial {
        socket: socket.to_string(),
        reason: e.to_string(),
    })
}

/// The plugin's error answer to `method`.
fn answered(socket: &str, method: &'static str, status: &tonic::Status) -> RegistrationError {
    RegistrationError::Call {
        socket: socket.to_string(),
        method,
        message: status.message().to_string(),
    }
}

fn registration_client<T: volplane_proto::client::Transport>(
    ch: T,
    origin: Option<http::Uri>,
) -> pb::registration_client::RegistrationClient<T> {
    match origin {
        None => pb::registration_client::RegistrationClient::new(ch),
        Some(o) => pb::registration_client::RegistrationClient::with_origin(ch, o),
    }
}

/// How the registrar runs (node-driver-registrar's flags).
#[derive(Debug, Clone)]
pub struct RegistrarSetup {
    /// `--csi-address`: the driver's socket, as this process reaches it.
    pub csi_socket: PathBuf,
    /// `--kubelet-registration-path`: the driver's socket as the kubelet
    /// reaches it (told to the kubelet in GetInfo).
    pub kubelet_registration_path: String,
    /// The kubelet's plugin registry (`/var/lib/kubelet/plugins_registry`).
    pub registry: PathBuf,
    /// Listen here instead, and put a symlink to the socket in the registry.
    pub via_symlink: Option<PathBuf>,
}

/// Why the registrar stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrarExit {
    /// The process exit code (0 after SIGTERM, 1 when refused).
    pub code: i32,
    /// Why, for the log.
    pub reason: String,
}

type Pending = Arc<Mutex<BTreeMap<u64, ReplySender<Option<PluginInfo>>>>>;

/// The registration service the kubelet dials.
#[derive(Debug, Clone)]
pub struct RegistrationService {
    tx: mailbox::Sender<RegistrarInput>,
    pending: Pending,
    next: Arc<AtomicU64>,
}

impl RegistrationService {
    async fn ask(&self, input: impl FnOnce(u64) -> RegistrarInput) -> Option<PluginInfo> {
        let rpc = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = reply::slot();
        self.pending.lock().ok()?.insert(rpc, tx);
        self.tx.send(input(rpc)).ok()?;
        rx.await.flatten()
    }

    fn answer(&self, rpc: u64, info: Option<PluginInfo>) {
        let slot = self.pending.lock().ok().and_then(|mut p| p.remove(&rpc));
        if let Some(tx) = slot {
            tx.send(info);
        }
    }
}

#[tonic::async_trait]
impl pb::registration_server::Registration for RegistrationService {
    async fn get_info(
        &self,
        _: tonic::Request<pb::InfoRequest>,
    ) -> Result<tonic::Response<pb::PluginInfo>, tonic::Status> {
        let info = self
            .ask(|rpc| RegistrarInput::GetInfo { rpc })
            .await
            .ok_or_else(|| tonic::Status::unavailable("the registrar is shutting down"))?;
        Ok(tonic::Response::new(info.into()))
    }

    async fn notify_registration_status(
        &self,
        request: tonic::Request<pb::RegistrationStatus>,
    ) -> Result<tonic::Response<pb::RegistrationStatusResponse>, tonic::Status> {
        let s = request.into_inner();
        tracing::info!(
            registered = s.plugin_registered,
            error = %s.error,
            "NotifyRegistrationStatus"
        );
        self.ask(|rpc| RegistrarInput::Status {
            rpc,
            registered: s.plugin_registered,
            error: s.error,
        })
        .await;
        Ok(tonic::Response::new(pb::RegistrationStatusResponse {}))
    }
}

/// Runs node-driver-registrar until `stop` completes (then it removes its
/// socket and returns code 0) or the kubelet refuses the driver (code 1).
pub async fn run_registrar(
    rt: Arc<dyn RegistrationRuntime>,
    setup: RegistrarSetup,
    stop: impl Future<Output = ()>,
) -> RegistrarExit {
    let listen_dir = setup.via_symlink.clone().unwrap_or(setup.registry.clone());
    let mut registrar = Registrar::new(RegistrarConfig::new(
        &listen_dir.display().to_string(),
        &setup.kubelet_registration_path,
    ));
    let (tx, rx) = mailbox::channel();
    let service = RegistrationService {
        tx: tx.clone(),
        pending: Arc::default(),
        next: Arc::default(),
    };
    let (server_stop, server_stopped) = futures::channel::oneshot::channel::<()>();
    let mut turn = RegistrarTurn {
        rt: rt.clone(),
        setup,
        tx,
        service,
        server_stop: Some(server_stop),
        server_stopped: Some(server_stopped),
        exit: None,
    };
    // A stop comes first, whatever else is waiting.
    let stopping = stop.into_stream().map(|()| RegistrarInput::Terminate);
    let received =
        futures::stream::unfold(
            rx,
            |rx| async move { rx.recv().await.map(|input| (input, rx)) },
        );
    let inputs = futures::stream::select_with_strategy(
        Box::pin(stopping),
        Box::pin(received),
        |_: &mut ()| futures::stream::PollNext::Left,
    );
    let runtime: &dyn Runtime = &*rt;
    crate::drive::drive(
        &mut registrar,
        runtime,
        crate::Clock::start(),
        Some(RegistrarInput::Start),
        inputs,
        &mut turn,
    )
    .await;
    turn.exit.unwrap_or(RegistrarExit {
        code: 0,
        reason: "stopped".into(),
    })
}

/// What the registrar's loop carries out, and when it ends.
struct RegistrarTurn {
    rt: Arc<dyn RegistrationRuntime>,
    setup: RegistrarSetup,
    tx: mailbox::Sender<RegistrarInput>,
    service: RegistrationService,
    server_stop: Option<futures::channel::oneshot::Sender<()>>,
    server_stopped: Option<futures::channel::oneshot::Receiver<()>>,
    exit: Option<RegistrarExit>,
}

impl machine::Carry<Registrar> for RegistrarTurn {
    fn carry(
        &mut self,
        _: &Registrar,
        _: volplane_core::Tick,
        effect: RegistrarEffect,
        done: &mut VecDeque<RegistrarInput>,
    ) {
        match effect {
            RegistrarEffect::GetPluginInfo { op } => {
                let socket = self.setup.csi_socket.display().to_string();
                let (tx, call) = (self.tx.clone(), self.rt.plugin_info(&socket));
                self.rt.spawn(Box::pin(async move {
                    let _ = tx.send(RegistrarInput::PluginInfo {
                        op,
                        result: call.await,
                    });
                }));
            }
            RegistrarEffect::Listen { op, socket } => {
                let stopped = self.server_stopped.take().map(|s| s.map(|_| ()).boxed());
                let service = self.service.clone();
                // The machine keeps the reason as its message.
                let result = listen(&*self.rt, &self.setup, &socket, service, stopped)
                    .map_err(|e| EffectFailed(e.to_string()));
                done.push_back(RegistrarInput::Listening { op, result });
            }
            RegistrarEffect::Info { rpc, info } => self.service.answer(rpc, Some(info)),
            RegistrarEffect::Ack { rpc } => self.service.answer(rpc, None),
            RegistrarEffect::RemoveSocket { socket } => {
                drop(self.server_stop.take());
                let _ = std::fs::remove_file(&socket);
                if let (Some(_), Some(name)) =
                    (&self.setup.via_symlink, Path::new(&socket).file_name())
                {
                    let _ = std::fs::remove_file(self.setup.registry.join(name));
                }
            }
            RegistrarEffect::Exit { code, reason } => {
                self.exit = Some(RegistrarExit { code, reason })
            }
        }
    }
}

impl Turn<Registrar> for RegistrarTurn {
    fn after(&mut self, _: &Registrar) -> std::ops::ControlFlow<()> {
        if self.exit.is_some() {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        }
    }
}

/// Listens on `socket` (with `via_symlink`, links it into the registry).
fn listen(
    rt: &dyn RegistrationRuntime,
    setup: &RegistrarSetup,
    socket: &str,
    service: RegistrationService,
    stopped: Option<BoxFuture<()>>,
) -> Result<(), RegistrationError> {
    let path = Path::new(socket);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| RegistrationError::Socket {
            what: "create",
            path: dir.to_path_buf(),
            source,
        })?;
    }
    let _ = std::fs::remove_file(path);
    let stopped = stopped.unwrap_or_else(|| Box::pin(futures::future::pending()));
    rt.serve(path, service, stopped)?;
    if setup.via_symlink.is_some() {
        let name = path.file_name().unwrap_or_default();
        let link = setup.registry.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(path, &link).map_err(|source| RegistrationError::Socket {
            what: "symlink",
            path: link.clone(),
            source,
        })?;
        tracing::info!(link = %link.display(), socket, "registration socket linked");
    }
    tracing::info!(socket, "listening for the kubelet");
    Ok(())
}
