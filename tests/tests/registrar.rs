//! node-driver-registrar (volplane-service's, runtime-neutral) on both
//! runtimes, against a real driver process, with this test as the kubelet:
//! it finds the socket, calls GetInfo, answers NotifyRegistrationStatus,
//! and the registrar stays (registered) or exits 1 (refused), removing its
//! socket either way when it stops.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Driver, Runtime};
use volplane_proto::registration as pb;
use volplane_proto::registration::registration_client::RegistrationClient;
use volplane_service::{RegistrarExit, RegistrarSetup, run_registrar};

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
    let socket = registry.join("volplane.csi.io-reg.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        if Instant::now() >= deadline {
            stop.send(()).unwrap();
            let exit = thread.join().unwrap();
            panic!("no registration socket appeared; the registrar stopped with {exit:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let ch = volplane_tokio::connect(&socket.display().to_string())
        .await
        .unwrap();
    let mut kubelet = RegistrationClient::new(ch);
    let info = kubelet
        .get_info(pb::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.r#type, "CSIPlugin");
    assert_eq!(info.name, "volplane.csi.io");
    assert_eq!(info.endpoint, KUBELET_PATH);
    assert_eq!(info.supported_versions, vec!["1.0.0".to_string()]);
    let notified = kubelet
        .notify_registration_status(pb::RegistrationStatus {
            plugin_registered: accept,
            error: if accept {
                String::new()
            } else {
                "refused by the test".into()
            },
        })
        .await;
    // Refused, the registrar exits at once, as node-driver-registrar does:
    // its acknowledgement may not reach the kubelet.
    if accept {
        notified.unwrap();
    }
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
