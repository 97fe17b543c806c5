//! Registration as kubelet and node-driver-registrar do it, over real
//! sockets: the registrar ([`run_registrar`]: volplane-service's, on tokio)
//! serves `<driver>-reg.sock`; the kubelet side ([`watch_registry`] and
//! [`carry_out`]) polls `plugins_registry/`, dials what appears (symlinks
//! included), and feeds the core's `PluginWatcher` in the world.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use volplane_core::control::CsiCall;
use volplane_core::registration::PluginInfo;
use volplane_core::registration::watcher::{WatcherEffect, WatcherInput};
use volplane_proto::registration as pb;
use volplane_proto::registration::registration_client::RegistrationClient;

use crate::engine::Shared;

/// How a node's registrar publishes its socket.
#[derive(Debug, Clone)]
pub struct RegistrarSetup {
    /// The node.
    pub node: String,
    /// The driver's CSI socket (`--csi-address` and
    /// `--kubelet-registration-path`: the same path in the lab).
    pub csi_socket: PathBuf,
    /// The kubelet's plugin registry.
    pub registry: PathBuf,
    /// Listen here and put a symlink to the socket in the registry.
    pub via_symlink: Option<PathBuf>,
}

/// node-driver-registrar for one node (volplane-service's, on tokio),
/// until `stop` turns true.
pub async fn run_registrar(
    shared: Arc<Shared>,
    setup: RegistrarSetup,
    mut stop: watch::Receiver<bool>,
) {
    let node = setup.node.clone();
    let service_setup = volplane_service::RegistrarSetup {
        kubelet_registration_path: setup.csi_socket.display().to_string(),
        csi_socket: setup.csi_socket,
        registry: setup.registry,
        via_symlink: setup.via_symlink,
    };
    shared.say(format!("{node:<8} node-driver-registrar: started"));
    let exit = volplane_service::run_registrar(
        Arc::new(volplane_tokio::TokioRegistrar),
        service_setup,
        async move {
            let _ = stop.wait_for(|s| *s).await;
        },
    )
    .await;
    shared.say(format!(
        "{node:<8} node-driver-registrar exited ({}): {}",
        exit.code, exit.reason
    ));
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
