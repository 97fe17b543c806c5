//! Registration as kubelet and node-driver-registrar do it, over real
//! sockets: the registrar ([`run_registrar`], the core's `Registrar` machine)
//! serves `<driver>-reg.sock`; the kubelet side ([`watch_registry`] and
//! [`carry_out`]) polls `plugins_registry/`, dials what appears (symlinks
//! included), and feeds the core's `PluginWatcher` in the world.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use volplane_core::control::CsiCall;
use volplane_core::machine;
use volplane_core::registration::PluginInfo;
use volplane_core::registration::registrar::{
    Registrar, RegistrarConfig, RegistrarEffect, RegistrarInput,
};
use volplane_core::registration::watcher::{WatcherEffect, WatcherInput};
use volplane_proto::client::CsiClient;
use volplane_proto::registration as pb;
use volplane_proto::registration::registration_client::RegistrationClient;

use crate::engine::Shared;

/// How a registrar publishes its socket.
#[derive(Debug, Clone)]
pub struct RegistrarSetup {
    pub node: String,
    /// The driver's CSI socket (`--csi-address` and
    /// `--kubelet-registration-path`: the same path in the lab).
    pub csi_socket: PathBuf,
    /// The kubelet's plugin registry.
    pub registry: PathBuf,
    /// Listen here and put a symlink to the socket in the registry.
    pub via_symlink: Option<PathBuf>,
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Option<PluginInfo>>>>>;

/// The registration service the kubelet dials: each RPC goes to the
/// registrar machine and waits for its answer.
#[derive(Debug, Clone)]
struct Service {
    tx: mpsc::UnboundedSender<RegistrarInput>,
    pending: Pending,
    next: Arc<std::sync::atomic::AtomicU64>,
}

impl Service {
    async fn ask(&self, input: impl FnOnce(u64) -> RegistrarInput) -> Option<PluginInfo> {
        let rpc = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("pending").insert(rpc, tx);
        let _ = self.tx.send(input(rpc));
        rx.await.ok().flatten()
    }
}

#[tonic::async_trait]
impl pb::registration_server::Registration for Service {
    async fn get_info(
        &self,
        _: tonic::Request<pb::InfoRequest>,
    ) -> Result<tonic::Response<pb::PluginInfo>, tonic::Status> {
        let info = self
            .ask(|rpc| RegistrarInput::GetInfo { rpc })
            .await
            .ok_or_else(|| tonic::Status::unavailable("the registrar is shutting down"))?;
        Ok(tonic::Response::new(pb::PluginInfo {
            r#type: info.type_,
            name: info.name,
            endpoint: info.endpoint,
            supported_versions: info.supported_versions,
        }))
    }

    async fn notify_registration_status(
        &self,
        request: tonic::Request<pb::RegistrationStatus>,
    ) -> Result<tonic::Response<pb::RegistrationStatusResponse>, tonic::Status> {
        let s = request.into_inner();
        self.ask(|rpc| RegistrarInput::Status {
            rpc,
            registered: s.plugin_registered,
            error: s.error,
        })
        .await;
        Ok(tonic::Response::new(pb::RegistrationStatusResponse {}))
    }
}

/// node-driver-registrar for one node, until `stop` turns true.
pub async fn run_registrar(
    shared: Arc<Shared>,
    setup: RegistrarSetup,
    mut stop: watch::Receiver<bool>,
) {
    let listen_dir = setup.via_symlink.clone().unwrap_or(setup.registry.clone());
    let mut r = Registrar::new(RegistrarConfig::new(
        &listen_dir.display().to_string(),
        &setup.csi_socket.display().to_string(),
    ));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let service = Service {
        tx: tx.clone(),
        pending: Arc::default(),
        next: Arc::default(),
    };
    let (server_stop, _) = watch::channel(false);
    let node = setup.node.clone();
    let mut input = Some(RegistrarInput::Start);
    loop {
        let mut exited = false;
        let mut carry = |_: &Registrar, _, e, done: &mut VecDeque<RegistrarInput>| match e {
            RegistrarEffect::GetPluginInfo { op } => {
                let tx = tx.clone();
                let socket = setup.csi_socket.display().to_string();
                tokio::spawn(async move {
                    let result = match volplane_tokio::connect(&socket).await {
                        Ok(ch) => CsiClient::new(ch, None).call(&CsiCall::GetPluginInfo).await,
                        Err(e) => Err(volplane_core::Status::new(
                            volplane_core::Code::Unavailable,
                            format!("connect {socket}: {e}"),
                        )),
                    };
                    let _ = tx.send(RegistrarInput::PluginInfo { op, result });
                });
            }
            RegistrarEffect::Listen { op, socket } => {
                let result = listen(&socket, service.clone(), server_stop.subscribe());
                if result.is_ok() {
                    link_socket(&shared, &setup, &socket);
                }
                done.push_back(RegistrarInput::Listening { op, result });
            }
            RegistrarEffect::Info { rpc, info } => answer(&service.pending, rpc, Some(info)),
            RegistrarEffect::Ack { rpc } => answer(&service.pending, rpc, None),
            RegistrarEffect::RemoveSocket { socket } => {
                let _ = server_stop.send(true);
                let _ = std::fs::remove_file(&socket);
                if let Some(name) = Path::new(&socket).file_name()
                    && setup.via_symlink.is_some()
                {
                    let _ = std::fs::remove_file(setup.registry.join(name));
                }
            }
            RegistrarEffect::Exit { code, reason } => {
                shared.say(format!(
                    "{node:<8} node-driver-registrar exited ({code}): {reason}"
                ));
                exited = true;
            }
        };
        let deadline = match input.take() {
            Some(i) => machine::feed(&mut r, shared.now(), i, &mut carry),
            None => machine::drain(&mut r, shared.now(), &mut carry),
        };
        if exited {
            return;
        }
        let sleep = deadline.map_or(Duration::from_secs(3600), |t| shared.until(t));
        tokio::select! {
            Some(received) = rx.recv() => {
                if let RegistrarInput::Status { registered, error, .. } = &received {
                    shared.say(format!(
                        "{node:<8} node-driver-registrar: NotifyRegistrationStatus registered={registered}{}",
                        if error.is_empty() { String::new() } else { format!(" error={error:?}") }
                    ));
                }
                input = Some(received);
            }
            _ = tokio::time::sleep(sleep) => {}
            _ = stop.changed() => input = Some(RegistrarInput::Terminate),
        }
    }
}

/// The registration socket listens: with `via_symlink`, link it into the
/// registry (as a registrar in a container whose socket dir is mounted
/// elsewhere), and say so.
fn link_socket(shared: &Shared, setup: &RegistrarSetup, socket: &str) {
    let node = &setup.node;
    if let Some(dir) = &setup.via_symlink {
        let name = Path::new(socket).file_name().unwrap_or_default();
        let link = setup.registry.join(name);
        let _ = std::fs::remove_file(&link);
        if let Err(e) = std::os::unix::fs::symlink(socket, &link) {
            shared.say(format!(
                "{node:<8} node-driver-registrar: symlink {}: {e}",
                link.display()
            ));
        } else {
            shared.say(format!(
                "{node:<8} node-driver-registrar: {} -> {}",
                link.display(),
                dir.join(name).display()
            ));
        }
    }
    shared.say(format!(
        "{node:<8} node-driver-registrar: listening on {socket}"
    ));
}

fn answer(pending: &Pending, rpc: u64, info: Option<PluginInfo>) {
    if let Some(tx) = pending.lock().expect("pending").remove(&rpc) {
        let _ = tx.send(info);
    }
}

fn listen(socket: &str, service: Service, mut stop: watch::Receiver<bool>) -> Result<(), String> {
    let path = Path::new(socket);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let _ = std::fs::remove_file(path);
    let listener =
        tokio::net::UnixListener::bind(path).map_err(|e| format!("listen on {socket}: {e}"))?;
    tokio::spawn(volplane_tokio::serve_registration(
        listener,
        service,
        async move {
            let _ = stop.wait_for(|s| *s).await;
        },
    ));
    Ok(())
}

/// The kubelet's plugin watcher for one node: polls the registry every
/// 100 ms and tells the world what appeared or went.
pub async fn watch_registry(
    shared: Arc<Shared>,
    node: String,
    registry: PathBuf,
    mut stop: watch::Receiver<bool>,
) {
    let mut known = BTreeSet::new();
    loop {
        let now: BTreeSet<String> = std::fs::read_dir(&registry)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".sock"))
                    .map(|e| e.path().display().to_string())
                    .collect()
            })
            .unwrap_or_default();
        for added in now.difference(&known) {
            shared.with(|w, t| w.registry_changed(t, &node, added, true));
        }
        for gone in known.difference(&now) {
            shared.with(|w, t| w.registry_changed(t, &node, gone, false));
        }
        known = now;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Carries out a plugin watcher's RPC and reports it back.
pub async fn carry_out(shared: Arc<Shared>, node: String, effect: WatcherEffect) {
    let input = match effect {
        WatcherEffect::GetInfo { op, socket } => {
            let result = async {
                let ch = volplane_tokio::connect(&socket)
                    .await
                    .map_err(|e| format!("dial {socket}: {e}"))?;
                let info = RegistrationClient::new(ch)
                    .get_info(pb::InfoRequest {})
                    .await
                    .map_err(|e| format!("GetInfo on {socket}: {}", e.message()))?
                    .into_inner();
                Ok(PluginInfo {
                    type_: info.r#type,
                    name: info.name,
                    endpoint: info.endpoint,
                    supported_versions: info.supported_versions,
                })
            }
            .await;
            if let Ok(info) = &result {
                shared.say(format!(
                    "{node:<8} kubelet: GetInfo {socket}: {} {} at {} versions {:?}",
                    info.type_, info.name, info.endpoint, info.supported_versions
                ));
            }
            WatcherInput::InfoDone { op, result }
        }
        WatcherEffect::NodeGetInfo { op, endpoint } => {
            let result = shared.csi(&node, &endpoint, &CsiCall::NodeGetInfo).await;
            WatcherInput::NodeInfoDone { op, result }
        }
        WatcherEffect::Notify {
            op,
            socket,
            registered,
            error,
        } => {
            if let Ok(ch) = volplane_tokio::connect(&socket).await {
                let _ = RegistrationClient::new(ch)
                    .notify_registration_status(pb::RegistrationStatus {
                        plugin_registered: registered,
                        error,
                    })
                    .await;
            }
            WatcherInput::NotifyDone { op }
        }
        WatcherEffect::Api { .. } => return,
    };
    shared.with(|w, t| w.watcher_done(t, &node, input));
}
