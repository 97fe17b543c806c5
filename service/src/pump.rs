//! The pump: one task that owns the driver machine (through
//! `volplane_sync::core::PumpCore`), feeds it requests and completions,
//! persists its state when it asks, and carries out its plans concurrently
//! through the backend. Its mailbox and reply slots come from
//! `volplane-sync`, where loom checks them.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures::stream::{FuturesUnordered, StreamExt};
use futures::{Future, FutureExt};
use volplane_core::driver::{Driver, DriverState, Input, Outcome, Request, Response};
use volplane_core::machine::Machine;
use volplane_core::{Code, OpId, Status};
use volplane_host::state_file::StateFile;
use volplane_sync::core::{Answer, PumpCore, Work};
use volplane_sync::mailbox;
use volplane_sync::reply::{self, ReplySender};

use crate::{Backend, NodeHost, execute, unblock};

type Reply = ReplySender<Answer>;
type Running = Pin<Box<dyn Future<Output = (OpId, Result<Outcome, Status>)> + Send>>;

/// Why the pump stopped.
#[derive(Debug, thiserror::Error)]
pub enum PumpError {
    #[error(
        "driver state in {path} is unreadable: {reason}; move it aside only if you know no volume is in use"
    )]
    Restore { path: String, reason: String },
    #[error("{0}")]
    Stopped(String),
}

/// How the pump runs.
#[derive(Debug, Clone, Default)]
pub struct PumpConfig {
    /// Where the driver state lives; `None` keeps it in memory only.
    pub state_file: Option<StateFile>,
    /// Where served calls are counted (`--http-endpoint`), if anywhere.
    pub metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
}

/// A handle request handlers use to reach the pump.
#[derive(Debug, Clone)]
pub struct PumpHandle {
    tx: mailbox::Sender<(Request, Reply)>,
}

impl PumpHandle {
    /// Sends a request to the driver machine and waits for its answer.
    pub async fn call(&self, request: Request) -> Result<Response, Status> {
        let (tx, rx) = reply::slot();
        self.tx
            .send((request, tx))
            .map_err(|_| Status::new(Code::Unavailable, "the driver is shutting down"))?;
        rx.await
            .ok_or_else(|| Status::new(Code::Unavailable, "the driver stopped before answering"))?
    }
}

/// Owns the machine; run it with [`Pump::run`] on any executor.
pub struct Pump<B> {
    core: PumpCore,
    backend: Arc<B>,
    host: NodeHost,
    config: PumpConfig,
    rx: mailbox::Receiver<(Request, Reply)>,
    running: FuturesUnordered<Running>,
    closed: bool,
    epoch: Instant,
}

impl<B> std::fmt::Debug for Pump<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pump")
            .field("waiting", &self.core.waiting())
            .finish()
    }
}

/// Loads persisted driver state (empty when there is none).
pub fn load_state(file: Option<&StateFile>) -> Result<DriverState, PumpError> {
    let Some(file) = file else {
        return Ok(DriverState::default());
    };
    let restore = |reason: String| PumpError::Restore {
        path: file.path().display().to_string(),
        reason,
    };
    match file.load().map_err(|e| restore(e.to_string()))? {
        None => Ok(DriverState::default()),
        Some(bytes) => serde_json::from_slice(&bytes).map_err(|e| restore(e.to_string())),
    }
}

enum Event {
    Request((Request, Reply)),
    Done((OpId, Result<Outcome, Status>)),
    Closed,
}

impl<B: Backend> Pump<B> {
    /// A pump over the state persisted in `config.state_file` (if any). The
    /// node's current mounts are reported to the machine first, so records of
    /// mounts lost in a reboot are dropped.
    pub async fn new(
        machine_config: volplane_core::driver::DriverConfig,
        backend: Arc<B>,
        host: NodeHost,
        config: PumpConfig,
    ) -> Result<(Pump<B>, PumpHandle), PumpError> {
        let state = load_state(config.state_file.as_ref())?;
        let recovering = state.in_flight.len();
        let mut driver = Driver::new(machine_config, state);
        if recovering > 0 {
            tracing::info!(
                operations = recovering,
                "finishing operations that were in flight at the last stop"
            );
        }
        if let Ok(mounts) = host.run(|h| h.mounts_as_configured()).await {
            driver.handle(0, Input::Mounts(mounts));
        }
        let (tx, rx) = mailbox::channel();
        Ok((
            Pump {
                core: PumpCore::new(driver),
                backend,
                host,
                config,
                rx,
                running: FuturesUnordered::new(),
                closed: false,
                epoch: Instant::now(),
            },
            PumpHandle { tx },
        ))
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Runs until every [`PumpHandle`] is dropped and nothing is in flight.
    pub async fn run(mut self) -> Result<(), PumpError> {
        loop {
            self.drain().await?;
            let event = if self.closed {
                match self.running.next().await {
                    Some(done) => Event::Done(done),
                    None => return Ok(()),
                }
            } else if self.running.is_empty() {
                match self.rx.recv().await {
                    Some(req) => Event::Request(req),
                    None => return Ok(()),
                }
            } else {
                futures::select_biased! {
                    done = self.running.select_next_some() => Event::Done(done),
                    req = self.rx.recv().fuse() => match req {
                        Some(req) => Event::Request(req),
                        None => Event::Closed,
                    },
                }
            };
            self.feed(event);
            // Take everything else that is ready before persisting once.
            while let Some(req) = self.rx.try_recv() {
                self.feed(Event::Request(req));
            }
            while let Some(Some(done)) = self.running.next().now_or_never() {
                self.feed(Event::Done(done));
            }
        }
    }

    fn feed(&mut self, event: Event) {
        let now = self.now();
        match event {
            Event::Request((request, reply)) => self.core.accept(now, request, reply),
            Event::Done((op, result)) => self.core.complete(now, op, result),
            Event::Closed => self.closed = true,
        }
    }

    async fn drain(&mut self) -> Result<(), PumpError> {
        loop {
            let now = self.now();
            let work = self.core.work(now);
            if work.is_empty() {
                return Ok(());
            }
            for w in work {
                match w {
                    Work::Persist { op } => {
                        let result = self.persist().await;
                        if let Err(e) = &result {
                            tracing::error!(error = %e, "requests fail until the driver state can be written");
                        }
                        let now = self.now();
                        self.core.persisted(now, op, result);
                    }
                    Work::Execute { op, plan } => {
                        let backend = self.backend.clone();
                        let host = self.host.clone();
                        self.running.push(Box::pin(async move {
                            (op, execute(&*backend, &host, &plan).await)
                        }));
                    }
                }
            }
        }
    }

    /// Writes the state; the error says where and why, for the log and the
    /// requests that fail because of it.
    async fn persist(&mut self) -> Result<(), String> {
        let Some(file) = self.config.state_file.clone() else {
            return Ok(());
        };
        let bytes = serde_json::to_vec_pretty(self.core.driver().state())
            .map_err(|e| format!("cannot encode the driver state: {e}"))?;
        let path = file.path().display().to_string();
        match unblock(&**self.host.pool(), move || file.store(&bytes)).await {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(format!("cannot write {path}: {e}")),
            None => Err(format!("cannot write {path}: the driver is shutting down")),
        }
    }
}
