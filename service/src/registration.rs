//! node-driver-registrar over real sockets, runtime-neutral: the core's
//! [`Registrar`] machine on the one loop, its registration socket served by
//! whichever runtime supplies a [`RegistrationRuntime`] (tokio and smol both
//! do). The kubelet dials the socket; each RPC goes to the loop through a
//! mailbox and waits for the machine's answer.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use volplane_core::Status;
use volplane_core::driver::Response;
use volplane_core::machine;
use volplane_core::registration::PluginInfo;
use volplane_core::registration::registrar::{
    Registrar, RegistrarConfig, RegistrarEffect, RegistrarInput,
};
use volplane_proto::registration as pb;
use volplane_sync::mailbox;
use volplane_sync::reply::{self, ReplySender};

/// A future the runtime runs.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// What a runtime supplies to the registrar.
pub trait RegistrationRuntime: Send + Sync + 'static {
    /// Calls GetPluginInfo on the driver's CSI socket.
    fn plugin_info(&self, csi_socket: &str) -> BoxFuture<Result<Response, Status>>;
    /// Serves `service` on the unix socket `path` (already free) until
    /// `stop` completes, on a task of its own; fails when it cannot listen.
    fn serve(
        &self,
        path: &Path,
        service: RegistrationService,
        stop: BoxFuture<()>,
    ) -> Result<(), String>;
    /// The kubelet's GetInfo on a registration socket.
    fn get_info(&self, socket: &str) -> BoxFuture<Result<PluginInfo, String>>;
    /// The kubelet's NotifyRegistrationStatus on a registration socket.
    fn notify(
        &self,
        socket: &str,
        registered: bool,
        error: String,
    ) -> BoxFuture<Result<(), String>>;
    /// Completes after `delay`.
    fn sleep(&self, delay: Duration) -> BoxFuture<()>;
    /// Runs `task` on its own.
    fn spawn(&self, task: BoxFuture<()>);
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
) -> Result<PluginInfo, String>
where
    T: volplane_proto::client::Transport,
    E: std::fmt::Display,
{
    let info = registration_client(
        connected.map_err(|e| format!("dial {socket}: {e}"))?,
        origin,
    )
    .get_info(pb::InfoRequest {})
    .await
    .map_err(|e| format!("GetInfo on {socket}: {}", e.message()))?;
    Ok(info.into_inner().into())
}

/// NotifyRegistrationStatus over `connected` (see [`get_info`]).
pub async fn notify<T, E>(
    socket: &str,
    connected: Result<T, E>,
    origin: Option<http::Uri>,
    registered: bool,
    error: String,
) -> Result<(), String>
where
    T: volplane_proto::client::Transport,
    E: std::fmt::Display,
{
    registration_client(
        connected.map_err(|e| format!("dial {socket}: {e}"))?,
        origin,
    )
    .notify_registration_status(pb::RegistrationStatus {
        plugin_registered: registered,
        error,
    })
    .await
    .map_err(|e| format!("NotifyRegistrationStatus on {socket}: {}", e.message()))?;
    Ok(())
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
    let mut r = Registrar::new(RegistrarConfig::new(
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
    let mut server_stop = Some(server_stop);
    let mut server_stopped = Some(server_stopped);
    let clock = crate::Clock::start();
    let now = || clock.now();
    let mut stop = std::pin::pin!(stop.fuse());
    let mut input = Some(RegistrarInput::Start);
    loop {
        let mut exit = None;
        let deadline = {
            let mut carry = |_: &Registrar, _, e, done: &mut VecDeque<RegistrarInput>| match e {
                RegistrarEffect::GetPluginInfo { op } => {
                    let (tx, call) = (
                        tx.clone(),
                        rt.plugin_info(&setup.csi_socket.display().to_string()),
                    );
                    rt.spawn(Box::pin(async move {
                        let _ = tx.send(RegistrarInput::PluginInfo {
                            op,
                            result: call.await,
                        });
                    }));
                }
                RegistrarEffect::Listen { op, socket } => {
                    let stopped = server_stopped.take().map(|s| s.map(|_| ()).boxed());
                    let result = listen(&*rt, &setup, &socket, service.clone(), stopped);
                    done.push_back(RegistrarInput::Listening { op, result });
                }
                RegistrarEffect::Info { rpc, info } => service.answer(rpc, Some(info)),
                RegistrarEffect::Ack { rpc } => service.answer(rpc, None),
                RegistrarEffect::RemoveSocket { socket } => {
                    drop(server_stop.take());
                    let _ = std::fs::remove_file(&socket);
                    if let (Some(_), Some(name)) =
                        (&setup.via_symlink, Path::new(&socket).file_name())
                    {
                        let _ = std::fs::remove_file(setup.registry.join(name));
                    }
                }
                RegistrarEffect::Exit { code, reason } => {
                    exit = Some(RegistrarExit { code, reason })
                }
            };
            match input.take() {
                Some(i) => machine::feed(&mut r, now(), i, &mut carry),
                None => machine::drain(&mut r, now(), &mut carry),
            }
        };
        if let Some(exit) = exit {
            return exit;
        }
        let sleep = deadline.map_or(Duration::from_secs(3600), |t| {
            Duration::from_millis(t.saturating_sub(now()))
        });
        let mut timer = rt.sleep(sleep).fuse();
        futures::select_biased! {
            _ = stop => input = Some(RegistrarInput::Terminate),
            received = rx.recv().fuse() => input = received,
            _ = timer => {}
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
) -> Result<(), String> {
    let path = Path::new(socket);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let _ = std::fs::remove_file(path);
    let stopped = stopped.unwrap_or_else(|| Box::pin(futures::future::pending()));
    rt.serve(path, service, stopped)?;
    if setup.via_symlink.is_some() {
        let name = path.file_name().unwrap_or_default();
        let link = setup.registry.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(path, &link)
            .map_err(|e| format!("symlink {}: {e}", link.display()))?;
        tracing::info!(link = %link.display(), socket, "registration socket linked");
    }
    tracing::info!(socket, "listening for the kubelet");
    Ok(())
}
