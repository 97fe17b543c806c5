//! The lifecycle through grpc C-core (Python's grpcio), which sends the
//! socket path as `:authority`: every conforming gRPC client is served.
//! Needs root and `python3 -c 'import grpc, grpc_tools'` (`.ci/run`
//! installs grpcio and grpcio-tools from PyPI).

mod common;

use std::process::Command;

use common::*;

fn grpcio_installed() -> bool {
    Command::new("python3")
        .args(["-c", "import grpc, grpc_tools"])
        .output()
        .is_ok_and(|o| o.status.success())
}

both_runtimes!(
    a_python_grpcio_client_drives_the_whole_lifecycle,
    a_python_grpcio_client_drives_the_whole_lifecycle_on
);

async fn a_python_grpcio_client_drives_the_whole_lifecycle_on(rt: Runtime) {
    require_root!();
    if !grpcio_installed() {
        skip(
            module_path!(),
            "python3 with grpcio and grpcio-tools is not installed (pip install grpcio grpcio-tools)",
        );
        return;
    }
    let d = Driver::start(rt);
    let _ = d.client().await;
    let here = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .arg(format!("{here}/python/csi_lifecycle.py"))
        .arg(format!("{here}/../proto/proto"))
        .arg(d.root().join("csi.sock"))
        .arg(d.kubelet())
        .arg(NODE)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "grpcio lifecycle failed:\n{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for call in [
        "GetPluginInfo",
        "CreateVolume",
        "NodeStageVolume",
        "NodePublishVolume",
        "NodeUnstageVolume",
        "DeleteVolume",
        "NodeGetVolumeStats NOT_FOUND",
    ] {
        assert!(said.contains(&format!("ok {call}")), "{said}");
    }
    assert_eq!(d.leftovers(), Vec::<String>::new());
}

/// A registration service that answers as node-driver-registrar does.
struct Registrar;

#[tonic::async_trait]
impl volplane_proto::registration::registration_server::Registration for Registrar {
    async fn get_info(
        &self,
        _: tonic::Request<volplane_proto::registration::InfoRequest>,
    ) -> Result<tonic::Response<volplane_proto::registration::PluginInfo>, tonic::Status> {
        Ok(tonic::Response::new(
            volplane_proto::registration::PluginInfo {
                r#type: "CSIPlugin".into(),
                name: DRIVER.into(),
                endpoint: "/var/lib/kubelet/plugins/volplane.csi.io/csi.sock".into(),
                supported_versions: vec!["1.0.0".into()],
            },
        ))
    }

    async fn notify_registration_status(
        &self,
        _: tonic::Request<volplane_proto::registration::RegistrationStatus>,
    ) -> Result<
        tonic::Response<volplane_proto::registration::RegistrationStatusResponse>,
        tonic::Status,
    > {
        Ok(tonic::Response::new(Default::default()))
    }
}

/// Kubelets that call a registration socket's GetInfo with the socket path
/// as `:authority` (as grpc C-core does) are served too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_socket_answers_grpcio_get_info() {
    if !grpcio_installed() {
        skip(
            module_path!(),
            "python3 with grpcio is not installed (pip install grpcio)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("volplane.csi.io-reg.sock");
    let listener = tokio::net::UnixListener::bind(&sock).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(volplane_tokio::serve_registration(
        listener,
        Registrar,
        async {
            let _ = stopped.await;
        },
    ));
    let script = r#"
import sys, grpc
ch = grpc.insecure_channel("unix://" + sys.argv[1])
get_info = ch.unary_unary("/pluginregistration.Registration/GetInfo",
                          request_serializer=lambda b: b, response_deserializer=lambda b: b)
print(get_info(b"", timeout=10).hex())
"#;
    let arg = sock.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args(["-c", script])
            .arg(arg)
            .output()
    })
    .await
    .unwrap()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply = hex::decode(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
    let info =
        <volplane_proto::registration::PluginInfo as prost::Message>::decode(&reply[..]).unwrap();
    assert_eq!(info.name, DRIVER);
    assert_eq!(info.r#type, "CSIPlugin");
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
