//! `volplane livenessprobe`: upstream's livenessprobe for any CSI driver —
//! `/healthz` answers 200 while the driver's Probe says it is ready, 500
//! with the reason otherwise — with its flags.

use std::time::Duration;

use clap::Args;

/// `volplane livenessprobe`'s flags (livenessprobe's).
#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The driver's socket.
    #[arg(long, default_value = "/run/csi/socket")]
    pub csi_address: String,
    /// How long the driver's Probe may take.
    #[arg(long, default_value = "1s", value_parser = crate::controller::duration)]
    pub probe_timeout: Duration,
    /// Serve /healthz on `0.0.0.0:<port>` (unless --http-endpoint says where).
    #[arg(long, default_value_t = 9808)]
    pub health_port: u16,
    /// --http-endpoint (instead of --health-port), --metrics-address,
    /// --metrics-path.
    #[command(flatten)]
    pub http: crate::upstream::HttpFlags,
    /// Log verbosity (klog's -v).
    #[arg(short = 'v', long = "v", default_value_t = 0)]
    pub verbosity: u8,
}

/// Serves `/healthz` until SIGTERM.
pub fn run(args: ProbeArgs) -> Result<(), String> {
    let address = args
        .http
        .address()
        .cloned()
        .unwrap_or_else(|| format!("0.0.0.0:{}", args.health_port));
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async move {
        let stop = volplane_tokio::termination().map_err(|e| e.to_string())?;
        let listener = volplane_tokio::bind_http(&address)
            .await
            .map_err(|e| e.to_string())?;
        tracing::info!(
            "serving /healthz on {address}: the Probe of {} within {:?}",
            args.csi_address,
            args.probe_timeout
        );
        let probe = crate::controller::health_probe(&args.csi_address, args.probe_timeout);
        let metrics = args.http.metrics();
        volplane_tokio::serve_http(listener, metrics, probe, stop).await;
        Ok(())
    })
}
