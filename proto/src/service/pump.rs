//! The pump: one task that owns the driver machine, feeds it requests and
//! completions, persists its state when it asks, and carries out its plans
//! concurrently through the backend.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures::channel::oneshot;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::{Future, FutureExt};
use volplane_core::driver::{
    Driver, DriverState, Effect, Input, Outcome, Request, Response, RpcId,
};
use volplane_core::{OpId, Status};
use volplane_host::state_file::StateFile;

use super::{Backend, NodeHost, execute, unblock};

type Reply = oneshot::Sender<Result<Response, Status>>;
type Running = Pin<Box<dyn Future<Output = (OpId, Result<Outcome, Status>)> + Send>>;

/// Why the pump stopped.
#[derive(Debug, thiserror::Error)]
pub enum PumpError {
    #[error(
        "cannot persist driver state to {path}: {reason}; stopping rather than act without a durable record"
    )]
    Persist { path: String, reason: String },
    #[error(
        "driver state in {path} is unreadable: {reason}; move it aside only if you know no volume is in use"
    )]
    Restore { path: String, reason: String },
}

/// How the pump runs.
#[derive(Debug, Clone, Default)]
pub struct PumpConfig {
    /// Where the driver state lives; `None` keeps it in memory only.
    pub state_file: Option<StateFile>,
    /// Testing only: abort the process right after carrying out a plan of
    /// this kind, before its completion is recorded (see `Plan::kind`).
    pub crash_after: Option<String>,
}

/// A handle request handlers use to reach the pump.
#[derive(Debug, Clone)]
pub struct PumpHandle {
    tx: async_channel::Sender<(Request, Reply)>,
}

impl PumpHandle {
    /// Sends a request to the driver machine and waits for its answer.
    pub async fn call(&self, request: Request) -> Result<Response, Status> {
        let (tx, rx) = oneshot::channel();
        self.tx.send((request, tx)).await.map_err(|_| {
            Status::new(
                volplane_core::Code::Unavailable,
                "the driver is shutting down",
            )
        })?;
        rx.await.map_err(|_| {
            Status::new(
                volplane_core::Code::Unavailable,
                "the driver stopped before answering",
            )
        })?
    }
}

/// Owns the machine; run it with [`Pump::run`] on any executor.
pub struct Pump<B> {
    driver: Driver,
    backend: Arc<B>,
    host: NodeHost,
    config: PumpConfig,
    rx: async_channel::Receiver<(Request, Reply)>,
    waiting: BTreeMap<RpcId, Reply>,
    next_rpc: RpcId,
    running: FuturesUnordered<Running>,
    closed: bool,
    epoch: Instant,
}

impl<B> std::fmt::Debug for Pump<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pump")
            .field("waiting", &self.waiting.len())
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
        if let Ok(mounts) = host.run(|h| h.mountinfo()).await {
            driver.handle(0, Input::Mounts(mounts));
        }
        let (tx, rx) = async_channel::bounded(1024);
        Ok((
            Pump {
                driver,
                backend,
                host,
                config,
                rx,
                waiting: BTreeMap::new(),
                next_rpc: 0,
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
                    Ok(req) => Event::Request(req),
                    Err(_) => return Ok(()),
                }
            } else {
                futures::select_biased! {
                    done = self.running.select_next_some() => Event::Done(done),
                    req = self.rx.recv().fuse() => match req {
                        Ok(req) => Event::Request(req),
                        Err(_) => Event::Closed,
                    },
                }
            };
            self.feed(event);
            // Take everything else that is ready before persisting once.
            while let Ok(req) = self.rx.try_recv() {
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
            Event::Request((request, reply)) => {
                let rpc = self.next_rpc;
                self.next_rpc += 1;
                self.waiting.insert(rpc, reply);
                self.driver.handle(now, Input::Request { rpc, request });
            }
            Event::Done((op, result)) => self.driver.handle(now, Input::Done { op, result }),
            Event::Closed => self.closed = true,
        }
    }

    async fn drain(&mut self) -> Result<(), PumpError> {
        while let Some(effect) = self.driver.poll() {
            match effect {
                Effect::Persist => self.persist().await?,
                Effect::Reply { rpc, result } => {
                    if let Some(tx) = self.waiting.remove(&rpc) {
                        let _ = tx.send(result);
                    }
                }
                Effect::Execute { op, plan } => {
                    let backend = self.backend.clone();
                    let host = self.host.clone();
                    let crash = self.config.crash_after.as_deref() == Some(plan.kind());
                    self.running.push(Box::pin(async move {
                        let result = execute(&*backend, &host, &plan).await;
                        if crash {
                            eprintln!("volplane: crashing on purpose after {} ({op}), as VOLPLANE_CRASH_AFTER asked", plan.kind());
                            std::process::abort();
                        }
                        (op, result)
                    }));
                }
            }
        }
        Ok(())
    }

    async fn persist(&mut self) -> Result<(), PumpError> {
        let Some(file) = self.config.state_file.clone() else {
            return Ok(());
        };
        let bytes =
            serde_json::to_vec_pretty(self.driver.state()).expect("driver state serialises");
        let path = file.path().display().to_string();
        unblock(&**self.host.pool(), move || file.store(&bytes))
            .await
            .map_err(|e| PumpError::Persist {
                path,
                reason: e.to_string(),
            })
    }
}

enum Event {
    Request((Request, Reply)),
    Done((OpId, Result<Outcome, Status>)),
    Closed,
}
