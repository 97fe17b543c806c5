//! The pump: one task that owns the driver machine (through
//! `volplane_sync::core::PumpCore`) and drives it on the one async driver
//! ([`crate::drive`]): requests and plan completions are its inputs; it
//! persists the machine's state when asked, before anything that depends
//! on it, and carries out plans concurrently through the backend, each on
//! a task of its own. Its mailbox and reply slots come from
//! `volplane-sync`, where loom checks them.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::Arc;

use futures::FutureExt;
use futures::channel::mpsc;
use futures::stream::{self, StreamExt};
use volplane_core::driver::state::Change;
use volplane_core::driver::{Driver, DriverState, Input, Outcome, Request, Response};
use volplane_core::machine::{Carry, EffectFailed, Machine};
use volplane_core::{Code, OpId, Status, Tick};
use volplane_host::records::RecordStore;
use volplane_host::state_file::StateFile;
use volplane_sync::core::{Answer, PumpCore, PumpInput, Work};
use volplane_sync::mailbox;
use volplane_sync::reply::{self, ReplySender};

use crate::drive::{self, Runtime, Turn};
use crate::{Backend, NodeHost, execute};

type Reply = ReplySender<Answer>;
/// A plan's completion, or the panic its backend call raised.
type Completion = std::thread::Result<(OpId, Result<Outcome, Status>)>;

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
        let (mut state, store) = load_state(&config)?;
        let boot = state.start_boot(&volplane_host::boot_id());
        let host = match &store {
            Some(store) => {
                let (incarnation, record) = state.next_incarnation();
                let records: Vec<_> = std::iter::once(record).chain(boot).collect();
                store.commit(&records).map_err(|e| PumpError::Restore {
                    path: store.path().display().to_string(),
                    reason: format!("cannot record this process's incarnation: {e}"),
                })?;
                host.for_incarnation(incarnation)
            }
            None => host,
        };
        let in_flight = state.in_flight.len();
        let mut driver = Driver::new(machine_config, state);
        for operation in driver.forgotten_after_reboot() {
            tracing::info!(
                %operation,
                "in flight at the last stop, before the node rebooted: not carried out again (its mounts are gone; the kubelet stages and publishes again what it still needs)"
            );
        }
        let waiting = driver.waiting_for_credentials();
        if in_flight > waiting.len() {
            tracing::info!(
                operations = in_flight - waiting.len(),
                "finishing operations that were in flight at the last stop"
            );
        }
        for operation in &waiting {
            tracing::warn!(
                %operation,
                "in flight at the last stop with credentials, which are never stored: it waits for the CO's retry of that call, which carries them"
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
                clock: crate::Clock::start(),
            },
            PumpHandle { tx },
        ))
    }

    /// Runs on `rt` until every [`PumpHandle`] is dropped and nothing is
    /// in flight. A backend call that panics ends the run with that panic,
    /// as if it had happened here (see [`crate::supervised`]).
    pub async fn run(self, rt: Arc<dyn Runtime>) -> Result<(), PumpError> {
        let Pump {
            mut core,
            backend,
            host,
            store,
            rx,
            clock,
        } = self;
        let (done_tx, done_rx) = mpsc::unbounded::<Completion>();
        let requests = stream::unfold(rx, |rx| async move {
            let req = rx.recv().await?;
            Some((PumpInput::Request(req.0, req.1), rx))
        })
        .chain(stream::once(async { PumpInput::Closed }));
        let done = done_rx.map(|completion| match completion {
            Ok((op, result)) => PumpInput::Done(op, result),
            Err(panic) => std::panic::resume_unwind(panic),
        });
        let mut turn = PumpTurn {
            backend,
            host,
            store,
            rt: rt.clone(),
            done: done_tx,
            running: 0,
        };
        let inputs = std::pin::pin!(stream::select(requests, done));
        drive::drive(&mut core, &*rt, clock, None, inputs, &mut turn).await;
        Ok(())
    }
}

/// What the pump does around its machine: persists, starts plans, and
/// counts them until they complete.
struct PumpTurn<B> {
    backend: Arc<B>,
    host: NodeHost,
    /// Where persists are written (`None`: memory only).
    store: Option<Arc<RecordStore>>,
    rt: Arc<dyn Runtime>,
    done: mpsc::UnboundedSender<Completion>,
    /// Plans started and not yet completed.
    running: usize,
}

impl<B: Backend> Carry<PumpCore> for PumpTurn<B> {
    fn carry(&mut self, _: &PumpCore, _: Tick, work: Work, done: &mut VecDeque<PumpInput>) {
        match work {
            Work::Persist { op, changes } => {
                let result = self.persist(&changes);
                if let Err(e) = &result {
                    tracing::error!(error = %e, "requests fail until the driver state can be written");
                }
                done.push_back(PumpInput::Persisted(op, result));
            }
            Work::Execute { op, plan } => {
                self.running += 1;
                let (backend, host, tx) =
                    (self.backend.clone(), self.host.clone(), self.done.clone());
                self.rt.spawn(Box::pin(async move {
                    let run = async { (op, execute(&*backend, &host, &plan).await) };
                    let completion = std::panic::AssertUnwindSafe(run).catch_unwind().await;
                    let _ = tx.unbounded_send(completion);
                }));
            }
        }
    }
}

impl<B: Backend> Turn<PumpCore> for PumpTurn<B> {
    fn before(&mut self, _: &PumpCore, _: Tick, input: Option<&PumpInput>) {
        if let Some(PumpInput::Done(..)) = input {
            self.running -= 1;
        }
    }

    fn after(&mut self, core: &PumpCore) -> ControlFlow<()> {
        if core.closed() && self.running == 0 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

impl<B> PumpTurn<B> {
    /// Writes the state; the error says where and why, for the log and the
    /// requests that fail because of it.
    ///
    /// On the pump's own thread: the pump waits for the write either way
    /// (nothing is answered or carried out before its record is durable),
    /// and a commit takes a fraction of a millisecond, so handing it to the
    /// blocking pool only added two thread switches to every request.
    /// Other tasks (requests arriving, plans in flight) keep running on the
    /// runtime's other threads meanwhile.
    fn persist(&self, changes: &[Change]) -> Result<(), EffectFailed> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        store
            .commit(changes)
            .map_err(|e| EffectFailed(format!("cannot write {}: {e}", store.path().display())))
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
        old.volumes
            .insert(&serde_json::from_str(volume).expect("a volume record"));
        old.next_op = 42;
        std::fs::write(&legacy, serde_json::to_vec_pretty(&old).unwrap()).unwrap();
        let config = PumpConfig {
            state_store: Some(dir.path().join("state.redb")),
            legacy_state_file: Some(StateFile::new(&legacy)),
            metrics: None,
        };
        let (state, store) = load_state(&config).unwrap();
        assert_eq!(state.volumes.named("pvc-1"), Some("vol-1"));
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
