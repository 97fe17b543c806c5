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
