//! The checker against a driver in this process, its calls going straight
//! to the driver's pump (no socket): what a driver's fuzz target runs, its
//! steps chosen by the fuzzer's bytes (`fuzz/fuzz_targets/check.rs` in
//! volplane's repository is the template).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use volplane_core::check::report;
use volplane_service::{Backend, CsiService, NodeHost, Pump, PumpConfig};

use super::{Caller, Check, Driver};

/// A driver running in this process, to check again and again.
#[derive(Debug)]
pub struct InProcess {
    runtime: tokio::runtime::Runtime,
    client: volplane_proto::client::CsiClient<tonic::service::Routes>,
    kubelet_dir: PathBuf,
    runs: std::sync::atomic::AtomicU64,
}

impl InProcess {
    /// Starts `driver`'s pump (its state in memory) on a runtime of its own.
    pub fn new<B: Backend>(driver: crate::Driver<B>) -> Result<InProcess, super::Error> {
        InProcess::start(driver).map_err(super::Error::Setup)
    }

    fn start<B: Backend>(driver: crate::Driver<B>) -> Result<InProcess, String> {
        let (config, backend, host, kubelet_dir) =
            driver.in_process().map_err(|e| e.to_string())?;
        std::fs::create_dir_all(&kubelet_dir)
            .map_err(|e| format!("create {}: {e}", kubelet_dir.display()))?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a runtime: {e}"))?;
        let (controller, node) = (config.controller, config.node);
        let pump = runtime.block_on(async {
            let node = NodeHost::new(Arc::new(host), Arc::new(volplane_tokio::TokioBlocking));
            let (pump, handle) = Pump::new(config, Arc::new(backend), node, PumpConfig::default())
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(pump.run(Arc::new(volplane_tokio::Tokio)));
            Ok::<_, String>(handle)
        })?;
        // The driver's own gRPC services, called without a transport: the
        // requests meet the same validation as on its socket.
        let limits = volplane_proto::limits::Limits::DEFAULT;
        let routes = volplane_service::csi_routes(CsiService::new(pump), controller, node, &limits);
        let client = volplane_proto::client::CsiClient::new(routes, None);
        Ok(InProcess {
            runtime,
            client,
            kubelet_dir,
            runs: 0.into(),
        })
    }

    /// One run whose steps `bytes` choose, put away at its end; panics
    /// with the trace when a MUST-rule breaks (a fuzzer's crash).
    pub fn fuzz(&self, bytes: &[u8]) {
        let n = self.runs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut check = Check::new("in-process", &self.kubelet_dir);
        check.watch_outside = false;
        check.steps = u32::MAX;
        check.call_timeout = Duration::from_secs(60);
        let names = check.names(format!("fuzz-{}-{n}", std::process::id()));
        let mut config = check.config(names, 0, None);
        config.choices = Some(bytes.to_vec());
        let driver = Driver {
            client: Caller::InProcess(self.client.clone()),
            restarter: None,
        };
        let outcome = self
            .runtime
            .block_on(check.once(&driver, config))
            .unwrap_or_else(|e| panic!("the check could not run: {e}"));
        if outcome.violation.is_some() {
            panic!("{}", report::trace(&outcome));
        }
    }
}
