//! The kubelet's side of plugin registration over real sockets,
//! runtime-neutral: [`watch_registry`] polls `plugins_registry/` and says
//! which sockets appeared or went (symlinks included), and [`carry_out`]
//! does the core `PluginWatcher`'s calls — GetInfo and
//! NotifyRegistrationStatus through a [`RegistrationRuntime`], NodeGetInfo
//! through the caller's CSI client — and returns their completions.

use std::collections::BTreeSet;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

use futures::FutureExt;
use volplane_core::Status;
use volplane_core::driver::Response;
use volplane_core::machine::EffectFailed;
use volplane_core::registration::watcher::{WatcherEffect, WatcherInput};

use crate::RegistrationRuntime;

/// How often the registry is read (the kubelet uses fsnotify; a poll this
/// short is as prompt for registration, and sees symlinked sockets too).
pub const REGISTRY_POLL: Duration = Duration::from_millis(100);

/// The `*.sock` entries of `registry`, as paths (none when it cannot be read).
pub fn registry_sockets(registry: &Path) -> BTreeSet<String> {
    std::fs::read_dir(registry)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".sock"))
                .map(|e| e.path().display().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Polls `registry` until `stop` completes, calling `changed(socket, true)`
/// for every socket that appears and `changed(socket, false)` for every one
/// that goes.
pub async fn watch_registry(
    rt: &dyn RegistrationRuntime,
    registry: &Path,
    mut changed: impl FnMut(&str, bool),
    stop: impl Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop.fuse());
    let mut known = BTreeSet::new();
    loop {
        let now = registry_sockets(registry);
        for added in now.difference(&known) {
            changed(added, true);
        }
        for gone in known.difference(&now) {
            changed(gone, false);
        }
        known = now;
        let mut tick = rt.sleep(REGISTRY_POLL).fuse();
        futures::select_biased! {
            _ = stop => return,
            _ = tick => {}
        }
    }
}

/// Carries out one of the watcher's calls and returns its completion;
/// `node_get_info` calls NodeGetInfo on a CSI endpoint. API calls are the
/// caller's (`None`).
pub async fn carry_out<F>(
    rt: &dyn RegistrationRuntime,
    effect: WatcherEffect,
    node_get_info: impl FnOnce(String) -> F,
) -> Option<WatcherInput>
where
    F: Future<Output = Result<Response, Status>>,
{
    Some(match effect {
        WatcherEffect::GetInfo { op, socket } => {
            let result = rt.get_info(&socket).await;
            match &result {
                Ok(info) => tracing::info!(
                    socket,
                    driver = info.name,
                    endpoint = info.endpoint,
                    versions = ?info.supported_versions,
                    "GetInfo"
                ),
                Err(e) => tracing::warn!(socket, "GetInfo failed: {e}"),
            }
            WatcherInput::InfoDone {
                op,
                result: result.map_err(|e| EffectFailed(e.to_string())),
            }
        }
        WatcherEffect::NodeGetInfo { op, endpoint } => WatcherInput::NodeInfoDone {
            op,
            result: node_get_info(endpoint).await,
        },
        WatcherEffect::Notify {
            op,
            socket,
            registered,
            error,
        } => {
            // The plugin learning it is not told changes nothing here: the
            // kubelet does not retry a notification either.
            if let Err(e) = rt.notify(&socket, registered, error).await {
                tracing::warn!(socket, "{e}");
            }
            WatcherInput::NotifyDone { op }
        }
        WatcherEffect::Api { .. } => return None,
    })
}
