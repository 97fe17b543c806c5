//! `volplane registrar`: node-driver-registrar (volplane-service's, on
//! tokio), with its flags. It exits 1 with the kubelet's reason when the
//! kubelet refuses the driver, and 0 (its socket removed) on SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use volplane_service::{RegistrarSetup, run_registrar};

#[derive(Debug, Args)]
pub struct RegistrarArgs {
    /// The driver's socket, as this container reaches it.
    #[arg(long, default_value = "/csi/csi.sock")]
    pub csi_address: String,
    /// The driver's socket on the host, as the kubelet reaches it.
    #[arg(long)]
    pub kubelet_registration_path: String,
    /// The kubelet's plugin registry, as this container reaches it.
    #[arg(long, default_value = "/registration")]
    pub plugin_registration_path: PathBuf,
    /// Listen in this directory instead and put a symlink to the socket in
    /// the registry (for registries that cannot hold a socket).
    #[arg(long)]
    pub registration_socket_dir: Option<PathBuf>,
    /// Log verbosity (klog's -v).
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
}

/// Runs the registrar until SIGTERM or the kubelet's refusal; the exit code.
pub fn run(args: RegistrarArgs) -> Result<u8, String> {
    if !args.kubelet_registration_path.starts_with('/') {
        return Err(format!(
            "--kubelet-registration-path {:?} must be the absolute host path of the driver's socket",
            args.kubelet_registration_path
        ));
    }
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async move {
        let stop = volplane_tokio::termination().map_err(|e| e.to_string())?;
        let setup = RegistrarSetup {
            csi_socket: PathBuf::from(args.csi_address.trim_start_matches("unix://")),
            kubelet_registration_path: args.kubelet_registration_path,
            registry: args.plugin_registration_path,
            via_symlink: args.registration_socket_dir,
        };
        let exit = run_registrar(Arc::new(volplane_tokio::TokioRegistrar), setup, stop).await;
        if exit.code == 0 {
            tracing::info!("{}", exit.reason);
        } else {
            tracing::error!("{}", exit.reason);
        }
        Ok(u8::try_from(exit.code).unwrap_or(1))
    })
}
