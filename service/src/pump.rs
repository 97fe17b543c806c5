//! The pump: one task that owns the driver machine (through
//! `volplane_sync::core::PumpCore`), feeds it requests and completions,
//! persists its state when it asks, and carries out its plans concurrently
//! through the backend. Its mailbox and reply slots come from
//! `volplane-sync`, where loom checks them.

use std::pin::Pin;
use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use futures::{Future, FutureExt};
use volplane_core::driver::state::Change;
use volplane_core::driver::{Driver, DriverState, Input, Outcome, Request, Response};
use volplane_core::machine::Machine;
use volplane_core::{Code, OpId, Status};
use volplane_host::records::RecordStore;
use volplane_host::state_file::StateFile;
use volplane_sync::core::{Answer, PumpCore, Work};
use volplane_sync::mailbox;
use volplane_sync::reply::{self, ReplySender};

use crate::{Backend, NodeHost, execute};

type Reply = ReplySender<Answer>;
type Running = Pin<Box<dyn Future<Output = (OpId, Result<Outcome, Status>)> + Send>>;

/// Why the pump stopped.
#[derive(Debug, thiserror::Error)]
pub enum PumpError {
    #[error(
        "driver state in {path} is unreadable: {reason}; move it aside only if you know no volume is in use"
    )]
    /// The persisted state at `path` could not be read back.
    Restore {
        /// The state store.
        path: String,
        /// What was wrong with it.
        reason: String,
    },
    #[error("{0}")]
    /// The pump stopped (its run ended, or it panicked); why.
    Stopped(String),
}

/// How the pump runs.
#[derive(Debug, Clone, Default)]
pub struct PumpConfig {
    /// Where the driver state lives (a record store); `None` keeps it in
    /// memory only.
    pub state_store: Option<std::path::PathBuf>,
    /// A whole-state JSON file an earlier volplane wrote: imported into the
    /// store once (when the store is empty), then renamed `*.imported`.
    legacy_state_file: Option<StateFile>,
    /// Where served calls are counted (`--http-endpoint`), if anywhere.
    pub metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
}

impl PumpConfig {
    /// State kept in `dir` as `<name>.redb` (and a `<name>.json` an
    /// earlier volplane left there imported once), calls counted in
    /// `metrics`.
    pub fn in_dir(
        dir: &std::path::Path,
        name: &str,
        metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
    ) -> PumpConfig {
        PumpConfig {
            state_store: Some(dir.join(format!("{name}.redb"))),
            legacy_state_file: Some(StateFile::new(dir.join(format!("{name}.json")))),
            metrics,
        }
    }
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
    /// Where persists are written (`None`: memory only).
    store: Option<Arc<RecordStore>>,
    rx: mailbox::Receiver<(Request, Reply)>,
    running: FuturesUnordered<Running>,
    closed: bool,
    clock: crate::Clock,
}

impl<B> std::fmt::Debug for Pump<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pump")
            .field("waiting", &self.core.waiting())
            .finish()
    }
}

/// Loads persisted driver state (empty when there is none), from the
/// record store, importing a legacy state file into it first if the store
/// is empty.
pub fn load_state(
    config: &PumpConfig,
) -> Result<(DriverState, Option<Arc<RecordStore>>), PumpError> {
    let Some(path) = &config.state_store else {
        return Ok((DriverState::default(), None));
    };
    let restore = |path: &std::path::Path, reason: String| PumpError::Restore {
        path: path.display().to_string(),
        reason,
    };
    let store = RecordStore::open(path).map_err(|e| restore(path, e.to_string()))?;
    let mut state = DriverState::default();
    let mut records = 0usize;
    store
        .read(&mut |t, k, v| {
            records += 1;
            state.load_record(t, k, v)
        })
        .map_err(|e| restore(path, e.to_string()))?;
    if records == 0
        && let Some(file) = &config.legacy_state_file
        && let Some(bytes) = file
            .load()
            .map_err(|e| restore(file.path(), e.to_string()))?
    {
        let mut state: DriverState =
            serde_json::from_slice(&bytes).map_err(|e| restore(file.path(), e.to_string()))?;
        state.reindex();
        state.touch_all();
        store
            .commit(&state.take_changes())
            .map_err(|e| restore(path, e.to_string()))?;
        let imported = file.path().with_extension("json.imported");
        std::fs::rename(file.path(), &imported)
            .map_err(|e| restore(file.path(), format!("imported, but cannot rename it: {e}")))?;
        tracing::info!(
            from = %file.path().display(),
            into = %path.display(),
            kept_as = %imported.display(),
            "imported the driver state of an earlier volplane"
        );
        return Ok((state, Some(Arc::new(store))));
    }
    Ok((state, Some(Arc::new(store))))
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
        let (state, store) = load_state(&config)?;
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
                store,
                rx,
                running: FuturesUnordered::new(),
                closed: false,
                clock: crate::Clock::start(),
            },
            PumpHandle { tx },
        ))
    }

    fn now(&self) -> u64 {
        self.clock.now()
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
                    Work::Persist { op, changes } => {
                        let result = self.persist(changes).await;
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
    ///
    /// On the pump's own thread: the pump waits for the write either way
    /// (nothing is answered or carried out before its record is durable),
    /// and a commit takes a fraction of a millisecond, so handing it to the
    /// blocking pool only added two thread switches to every request.
    /// Other tasks (requests arriving, plans in flight) keep running on the
    /// runtime's other threads meanwhile.
    async fn persist(&mut self, changes: Vec<Change>) -> Result<(), String> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        store
            .commit(&changes)
            .map_err(|e| format!("cannot write {}: {e}", store.path().display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_file_of_an_earlier_volplane_is_imported_once_then_kept_aside() {
        let dir = tempfile::tempdir().unwrap();
        let legacy = dir.path().join("state.json");
        let mut old = DriverState::default();
        let volume = r#"{"name":"pvc-1","volume":{"volume_id":"vol-1","capacity_bytes":1,"volume_context":{},"accessible_topology":[]},"capabilities":[],"parameters":{}}"#;
        old.volumes.insert(
            "vol-1".into(),
            serde_json::from_str(volume).expect("a volume record"),
        );
        old.next_op = 42;
        std::fs::write(&legacy, serde_json::to_vec_pretty(&old).unwrap()).unwrap();
        let config = PumpConfig {
            state_store: Some(dir.path().join("state.redb")),
            legacy_state_file: Some(StateFile::new(&legacy)),
            metrics: None,
        };
        let (state, store) = load_state(&config).unwrap();
        assert_eq!(state.names.get("pvc-1").map(String::as_str), Some("vol-1"));
        assert_eq!(state.next_op, 42);
        assert!(store.is_some());
        assert!(!legacy.exists(), "moved aside");
        assert!(dir.path().join("state.json.imported").exists());
        drop(store);
        // Next start: from the store alone.
        let (again, _) = load_state(&config).unwrap();
        assert_eq!(
            serde_json::to_value(&again).unwrap(),
            serde_json::to_value(&state).unwrap()
        );
        // A damaged store stops the driver with a message, before anything.
        std::fs::write(dir.path().join("state.redb"), b"not a store").unwrap();
        let Err(e) = load_state(&config) else {
            panic!("a damaged store must not load")
        };
        assert!(e.to_string().contains("state.redb"), "{e}");
    }
}
