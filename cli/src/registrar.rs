//! `volplane registrar`: node-driver-registrar (volplane-service's, on
//! tokio), with its flags. It exits 1 with the kubelet's reason when the
//! kubelet refuses the driver, and 0 (its socket removed) on SIGTERM.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use volplane_service::metrics::Unhealthy;
use volplane_service::{RegistrarSetup, run_registrar};

/// `volplane registrar`'s flags.
#[derive(Debug, Args)]
pub struct RegistrarArgs {
    /// The driver's socket, as this container reaches it.
    #[arg(long, default_value = "/csi/csi.sock")]
    pub csi_address: String,
    /// The driver's socket on the host, as the kubelet reaches it.
    #[arg(long, default_value = "")]
    pub kubelet_registration_path: String,
    /// The kubelet's plugin registry, as this container reaches it.
    #[arg(long, default_value = "/registration")]
    pub plugin_registration_path: PathBuf,
    /// Listen in this directory instead and put a symlink to the socket in
    /// the registry (for registries that cannot hold a socket).
    #[arg(long)]
    pub registration_socket_dir: Option<PathBuf>,
    /// Serve /healthz (200 while the registration socket is in place, as
    /// node-driver-registrar's) and /metrics here, e.g. `:9809`.
    #[arg(long)]
    pub http_endpoint: Option<String>,
    /// The older form of --http-endpoint: serve on `:<port>` (0: off).
    #[arg(long, default_value_t = 0)]
    pub health_port: u16,
    /// `registration` (the default) registers the driver;
    /// `kubelet-registration-probe` (an exec probe in many charts) exits 0,
    /// as node-driver-registrar's does today.
    #[arg(long, default_value = "registration", value_parser = ["registration", "kubelet-registration-probe"])]
    pub mode: String,
    /// How long to wait for the driver's socket at first (accepted; the
    /// registrar waits as long as it takes).
    #[arg(long, value_parser = crate::controller::duration)]
    pub connection_timeout: Option<std::time::Duration>,
    /// How long GetPluginInfo may take (accepted; see --connection-timeout).
    #[arg(long, value_parser = crate::controller::duration)]
    pub timeout: Option<std::time::Duration>,
    /// Log verbosity (klog's -v).
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
}

/// Runs the registrar until SIGTERM or the kubelet's refusal; the exit code.
pub fn run(args: RegistrarArgs) -> Result<u8, String> {
    if args.mode == "kubelet-registration-probe" {
        return Ok(0);
    }
    if !args.kubelet_registration_path.starts_with('/') {
        return Err(format!(
            "--kubelet-registration-path {:?} must be the absolute host path of the driver's socket",
            args.kubelet_registration_path
        ));
    }
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async move {
        let stop = volplane_tokio::termination().map_err(|e| e.to_string())?;
        let health_port = (args.health_port != 0).then(|| format!(":{}", args.health_port));
        let mut http_ended = None;
        if let Some(address) = args.http_endpoint.as_ref().or(health_port.as_ref()) {
            let listener = volplane_tokio::bind_http(address)
                .await
                .map_err(|e| e.to_string())?;
            let dir = args
                .registration_socket_dir
                .clone()
                .unwrap_or_else(|| args.plugin_registration_path.clone());
            let probe = socket_probe(args.csi_address.clone(), dir);
            let metrics = volplane_service::metrics::Metrics::new();
            let (serving, ended) = volplane_service::watched(
                "the /healthz server",
                volplane_tokio::serve_http(listener, metrics, probe, std::future::pending()),
            );
            tokio::spawn(serving);
            http_ended = Some(ended);
        }
        let setup = RegistrarSetup {
            csi_socket: PathBuf::from(args.csi_address.trim_start_matches("unix://")),
            kubelet_registration_path: args.kubelet_registration_path,
            registry: args.plugin_registration_path,
            via_symlink: args.registration_socket_dir,
        };
        let (stop, task_ended) = volplane_service::watch_beside(stop, http_ended);
        let exit = run_registrar(Arc::new(volplane_tokio::TokioRegistrar), setup, stop).await;
        if let Err(e) = task_ended.ended() {
            tracing::error!("{e}");
            return Ok(1);
        }
        if exit.code == 0 {
            tracing::info!("{}", exit.reason);
        } else {
            tracing::error!("{}", exit.reason);
        }
        Ok(u8::try_from(exit.code).unwrap_or(1))
    })
}

/// node-driver-registrar's health check: the driver's registration socket
/// (`<dir>/<driver>-reg.sock`, the driver named by GetPluginInfo) is there.
fn socket_probe(csi_address: String, dir: PathBuf) -> volplane_tokio::HealthProbe {
    Arc::new(move || {
        let (csi, dir) = (csi_address.clone(), dir.clone());
        Box::pin(async move {
            let connected = volplane_tokio::connect(&csi).await;
            let refused = |answer: String| Unhealthy::Refused {
                endpoint: csi.clone(),
                method: "GetPluginInfo",
                answer,
            };
            let info = volplane_service::registration::get_plugin_info(&csi, connected, None)
                .await
                .map_err(|s| refused(s.message))?;
            let volplane_core::driver::Response::PluginInfo { name, .. } = info else {
                return Err(refused("no plugin info".into()));
            };
            let path = dir.join(format!("{name}-reg.sock"));
            match std::fs::symlink_metadata(&path) {
                Ok(_) => Ok(()),
                Err(source) => Err(Unhealthy::NoRegistrationSocket { path, source }),
            }
        })
    })
}
