//! node-driver-registrar (volplane-service's, runtime-neutral) on both
//! runtimes, against a real driver process, with the kubelet's side
//! (volplane-service's plugin-watcher adapter) on the same runtime: it finds
//! the socket, calls GetInfo and NodeGetInfo, answers
//! NotifyRegistrationStatus, and the registrar stays (registered) or exits 1
//! (refused), removing its socket either way when it stops.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use common::{Driver, Runtime};
use futures::{FutureExt, StreamExt};
use volplane_core::driver::Response;
use volplane_core::registration::PluginInfo;
use volplane_core::registration::watcher::{WatcherEffect, WatcherInput};
use volplane_core::{OpId, Status};
use volplane_proto::client::CsiClient;
use volplane_service::registration::BoxFuture;
use volplane_service::{
    RegistrarExit, RegistrarSetup, RegistrationRuntime, plugin_watcher, run_registrar,
};

const KUBELET_PATH: &str = "/var/lib/kubelet/plugins/volplane.csi.io/csi.sock";

/// Runs the registrar on `runtime` in a thread of its own until `stop` fires.
fn start(
    runtime: Runtime,
    setup: RegistrarSetup,
) -> (
    futures::channel::oneshot::Sender<()>,
    std::thread::JoinHandle<RegistrarExit>,
) {
    let (stop, stopped) = futures::channel::oneshot::channel::<()>();
    let stopped = async move {
        let _ = stopped.await;
    };
    let thread = std::thread::spawn(move || match runtime {
        Runtime::Tokio => tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(run_registrar(
                Arc::new(volplane_tokio::TokioRegistrar),
                setup,
                stopped,
            )),
        Runtime::Smol => {
            let rt = volplane_smol::Runtime::new(2).unwrap();
            rt.block_on(run_registrar(
                Arc::new(volplane_smol::SmolRegistrar(rt.clone())),
                setup,
                stopped,
            ))
        }
    });
    (stop, thread)
}

/// Runs `f` — the kubelet's side, volplane-service's plugin-watcher adapter
/// — on `runtime`, in a thread of its own.
fn kubelet<T: Send + 'static>(
    runtime: Runtime,
    f: impl FnOnce(Arc<dyn RegistrationRuntime>) -> BoxFuture<T> + Send + 'static,
) -> std::thread::JoinHandle<T> {
    std::thread::spawn(move || match runtime {
        Runtime::Tokio => tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(f(Arc::new(volplane_tokio::TokioRegistrar))),
        Runtime::Smol => {
            let rt = volplane_smol::Runtime::new(1).unwrap();
            rt.block_on(f(Arc::new(volplane_smol::SmolRegistrar(rt.clone()))))
        }
    })
}

/// NodeGetInfo on `endpoint` over `runtime`'s transport.
async fn node_get_info(runtime: Runtime, endpoint: String) -> Result<Response, Status> {
    let request = volplane_core::driver::Request::NodeGetInfo;
    match runtime {
        Runtime::Tokio => {
            let ch = volplane_tokio::connect(&endpoint).await.unwrap();
            CsiClient::new(ch, None).call(&request).await
        }
        Runtime::Smol => {
            let ch = volplane_smol::connect(&endpoint).await.unwrap();
            let origin = http::Uri::from_static("http://localhost");
            CsiClient::new(ch, Some(origin)).call(&request).await
        }
    }
}

/// The kubelet's side: waits for a socket in `registry`, then GetInfo,
/// NodeGetInfo on the driver (`csi`: as this process reaches it) and
/// NotifyRegistrationStatus(`accept`).
fn kubelet_registers(
    runtime: Runtime,
    registry: PathBuf,
    csi: String,
    accept: bool,
) -> std::thread::JoinHandle<(String, PluginInfo, Response)> {
    kubelet(runtime, move |rt| {
        Box::pin(async move {
            let (tx, mut rx) = futures::channel::mpsc::unbounded();
            let appeared = async {
                futures::select! {
                    _ = rx.next() => {}
                    _ = rt.sleep(Duration::from_secs(20)).fuse() => {}
                }
            };
            let changed = |socket: &str, added: bool| {
                let _ = tx.unbounded_send((socket.to_string(), added));
            };
            plugin_watcher::watch_registry(&*rt, &registry, changed, appeared).await;
            let socket = plugin_watcher::registry_sockets(&registry)
                .pop_first()
                .expect("no registration socket appeared within 20 s");
            let csi_call = |_kubelet_path: String| node_get_info(runtime, csi.clone());
            let get_info = WatcherEffect::GetInfo {
                op: OpId(1),
                socket: socket.clone(),
            };
            let Some(WatcherInput::InfoDone { result, .. }) =
                plugin_watcher::carry_out(&*rt, get_info, csi_call).await
            else {
                panic!("GetInfo completes with InfoDone");
            };
            let info = result.expect("GetInfo answered");
            let node_info = WatcherEffect::NodeGetInfo {
                op: OpId(2),
                endpoint: info.endpoint.clone(),
            };
            let Some(WatcherInput::NodeInfoDone { result, .. }) =
                plugin_watcher::carry_out(&*rt, node_info, csi_call).await
            else {
                panic!("NodeGetInfo completes with NodeInfoDone");
            };
            let node = result.expect("NodeGetInfo answered");
            let notify = WatcherEffect::Notify {
                op: OpId(3),
                socket: socket.clone(),
                registered: accept,
                error: if accept {
                    String::new()
                } else {
                    "refused by the test".into()
                },
            };
            let done = plugin_watcher::carry_out(&*rt, notify, csi_call).await;
            assert_eq!(done, Some(WatcherInput::NotifyDone { op: OpId(3) }));
            (socket, info, node)
        })
    })
}

async fn registration(runtime: Runtime, accept: bool) {
    require_root!();
    let d = Driver::start(Runtime::Tokio);
    let registry = d.root().join("plugins_registry");
    let setup = RegistrarSetup {
        csi_socket: PathBuf::from(d.endpoint.trim_start_matches("unix://")),
        kubelet_registration_path: KUBELET_PATH.into(),
        registry: registry.clone(),
        via_symlink: None,
    };
    let (stop, thread) = start(runtime, setup);
    let kubelet = kubelet_registers(runtime, registry.clone(), d.endpoint.clone(), accept);
    let joined = tokio::task::spawn_blocking(move || kubelet.join())
        .await
        .unwrap();
    let Ok((socket, info, node)) = joined else {
        let _ = stop.send(());
        panic!("the kubelet's side failed (see above)");
    };
    assert_eq!(
        socket,
        registry
            .join("volplane.csi.io-reg.sock")
            .display()
            .to_string()
    );
    assert_eq!(info.type_, "CSIPlugin");
    assert_eq!(info.name, "volplane.csi.io");
    assert_eq!(info.endpoint, KUBELET_PATH);
    assert_eq!(info.supported_versions, vec!["1.0.0".to_string()]);
    assert!(
        matches!(node, Response::NodeInfo { ref node_id, .. } if !node_id.is_empty()),
        "{node:?}"
    );
    let socket = PathBuf::from(socket);
    if accept {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(socket.exists(), "a registered registrar keeps its socket");
        stop.send(()).unwrap();
    }
    let exit = tokio::task::spawn_blocking(move || thread.join().unwrap())
        .await
        .unwrap();
    if accept {
        assert_eq!(exit.code, 0, "{exit:?}");
    } else {
        assert_eq!(exit.code, 1, "{exit:?}");
        assert!(exit.reason.contains("refused by the test"), "{exit:?}");
    }
    assert!(
        !socket.exists(),
        "the socket is removed when the registrar stops"
    );
}

async fn registered_until_stopped(runtime: Runtime) {
    registration(runtime, true).await
}

async fn refused_exits_1(runtime: Runtime) {
    registration(runtime, false).await
}

both_runtimes!(
    a_registered_registrar_serves_until_stopped,
    registered_until_stopped
);
both_runtimes!(a_refused_registrar_exits_1, refused_exits_1);

/// `volplane registrar` as a process: healthy while its socket is in
/// place, and on SIGTERM it exits 0 with the socket removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registrar_command_is_healthy_while_registered_and_stops_cleanly() {
    require_root!();
    let d = Driver::start(Runtime::Tokio);
    let registry = d.root().join("plugins_registry");
    std::fs::create_dir_all(&registry).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let address = format!("127.0.0.1:{port}");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_volplane-under-test"))
        .args(["registrar", "--csi-address", &d.endpoint])
        .args(["--kubelet-registration-path", KUBELET_PATH])
        .arg("--plugin-registration-path")
        .arg(&registry)
        .args(["--http-endpoint", &address])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let socket = registry.join("volplane.csi.io-reg.sock");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let healthz = loop {
        match common::http_get(&address, "/healthz").await {
            Some(h) if h.starts_with("HTTP/1.1 200") => break h,
            other if std::time::Instant::now() > deadline => {
                let _ = child.kill();
                panic!("no healthy /healthz within 20 s: {other:?}");
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    assert!(healthz.ends_with("ok\n"), "{healthz}");
    assert!(socket.exists());
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(!socket.exists(), "the socket is removed on SIGTERM");
}
