//! Serving on the chosen runtime: the CSI socket, and `/metrics` with
//! `/healthz` when asked, until SIGTERM or SIGINT.

use volplane_core::driver::DriverConfig;
use volplane_host::Host;
use volplane_service::metrics::health_probe;
use volplane_service::{Backend, PumpConfig};

use crate::{Error, Runtime};

/// Serves `backend` on `runtime` until terminated.
pub(crate) fn serve<B: Backend>(
    runtime: Runtime,
    endpoint: &str,
    http: Option<&str>,
    config: DriverConfig,
    backend: B,
    host: Host,
    pump: PumpConfig,
) -> Result<(), Error> {
    match runtime {
        #[cfg(feature = "tokio")]
        Runtime::Tokio => on_tokio(endpoint, http, config, backend, host, pump),
        #[cfg(feature = "smol")]
        Runtime::Smol => on_smol(endpoint, http, config, backend, host, pump),
    }
}

#[cfg(feature = "tokio")]
fn on_tokio<B: Backend>(
    endpoint: &str,
    http: Option<&str>,
    config: DriverConfig,
    backend: B,
    host: Host,
    pump: PumpConfig,
) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(volplane_service::BLOCKING_THREADS)
        .thread_keep_alive(volplane_service::BLOCKING_IDLE)
        .build()
        .map_err(|e| Error::Setup(format!("cannot start the tokio runtime: {e}")))?;
    let mut http_ended = None;
    if let (Some(address), Some(metrics)) = (http, &pump.metrics) {
        let listener = rt
            .block_on(volplane_tokio::bind_http(address))
            .map_err(|e| Error::Setup(e.to_string()))?;
        let connect = |e: String| async move { volplane_tokio::connect(&e).await };
        let probe = health_probe(endpoint, connect, None);
        let (serving, ended) = volplane_service::watched(
            "the /healthz and /metrics server",
            volplane_tokio::serve_http(listener, metrics.clone(), probe, std::future::pending()),
        );
        rt.spawn(serving);
        http_ended = Some(ended);
    }
    rt.block_on(async {
        let stop = volplane_tokio::termination()?;
        let (stop, task_ended) = volplane_service::watch_beside(stop, http_ended);
        volplane_tokio::serve(endpoint, config, backend, host, pump, stop).await?;
        task_ended.ended()
    })?;
    Ok(())
}

#[cfg(feature = "smol")]
fn on_smol<B: Backend>(
    endpoint: &str,
    http: Option<&str>,
    config: DriverConfig,
    backend: B,
    host: Host,
    pump: PumpConfig,
) -> Result<(), Error> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let rt = volplane_smol::Runtime::new(threads)
        .map_err(|e| Error::Setup(format!("cannot start the smol runtime: {e}")))?;
    let stop = volplane_smol::termination()?;
    let mut http_ended = None;
    if let (Some(address), Some(metrics)) = (http, &pump.metrics) {
        let listener = rt
            .block_on(volplane_smol::bind_http(address))
            .map_err(|e| Error::Setup(e.to_string()))?;
        let connect = |e: String| async move { volplane_smol::connect(&e).await };
        let origin = http::Uri::from_static("http://localhost");
        let probe = health_probe(endpoint, connect, Some(origin));
        let (serving, ended) = volplane_service::watched(
            "the /healthz and /metrics server",
            volplane_smol::serve_http(
                rt.clone(),
                listener,
                metrics.clone(),
                probe,
                std::future::pending(),
            ),
        );
        rt.spawn(serving).detach();
        http_ended = Some(ended);
    }
    let (stop, task_ended) = volplane_service::watch_beside(stop, http_ended);
    rt.block_on(volplane_smol::serve(
        &rt, endpoint, config, backend, host, pump, stop,
    ))?;
    task_ended.ended()?;
    Ok(())
}
