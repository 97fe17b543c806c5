//! Registration as kubelet and node-driver-registrar do it, over real
//! sockets, both sides volplane-service's on tokio: the registrar
//! ([`run_registrar`]) serves `<driver>-reg.sock`; the kubelet side
//! ([`watch_registry`] and [`carry_out`]) polls `plugins_registry/`, dials
//! what appears (symlinks included), and feeds the core's `PluginWatcher`
//! in the world.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::watch;
use volplane_core::control::CsiCall;
use volplane_core::registration::watcher::{WatcherEffect, WatcherInput};
use volplane_service::plugin_watcher;
use volplane_tokio::TokioRegistrar;

use crate::shared::Shared;

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

/// The kubelet's plugin watcher for one node (volplane-service's, on
/// tokio): tells the world what appeared in or went from the registry.
pub async fn watch_registry(
    shared: Arc<Shared>,
    node: String,
    registry: PathBuf,
    mut stop: watch::Receiver<bool>,
) {
    let changed = |socket: &str, added: bool| {
        shared.with(|w, t| w.registry_changed(t, &node, socket, added));
    };
    let stop = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    plugin_watcher::watch_registry(&TokioRegistrar, &registry, changed, stop).await;
}

/// Carries out a plugin watcher's RPC and reports it back.
pub async fn carry_out(shared: Arc<Shared>, node: String, effect: WatcherEffect) {
    let csi = |endpoint: String| {
        let (shared, node) = (shared.clone(), node.clone());
        async move { shared.csi(&node, &endpoint, &CsiCall::NodeGetInfo).await }
    };
    let Some(input) = plugin_watcher::carry_out(&TokioRegistrar, effect, csi).await else {
        return;
    };
    if let WatcherInput::InfoDone {
        result: Ok(info), ..
    } = &input
    {
        shared.say(format!(
            "{node:<8} kubelet: GetInfo: {} {} at {} versions {:?}",
            info.type_, info.name, info.endpoint, info.supported_versions
        ));
    }
    shared.with(|w, t| w.watcher_done(t, &node, input));
}
