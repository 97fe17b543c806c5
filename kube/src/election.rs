//! Leader election on a coordination.k8s.io/v1 Lease: the core's
//! [`Candidate`] decides, this reads and writes the Lease. Writes are merge
//! patches preconditioned on the Lease's resourceVersion (a create when it
//! is missing), so two candidates never both succeed at one version.
//!
//! [`lead`] runs the work only while leading: it starts once the Lease is
//! ours and is dropped — it stops acting — as soon as a renewal has not
//! succeeded within the renew deadline, which is shorter than the time any
//! other candidate waits before taking over.

use std::collections::VecDeque;
use std::future::Future;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::channel::{mpsc, oneshot};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use std::sync::Arc;
use volplane_core::Tick;
use volplane_core::lease::{Candidate, LeaseEffect, LeaseInput, LeaseRecord, LeaseTimings};
use volplane_core::machine::Carry;
use volplane_service::drive::{Runtime, Turn};

use crate::api::FIELD_MANAGER;

/// Which Lease, and who we are.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// `--leader-election-namespace`.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This candidate (the pod's name).
    pub identity: String,
    /// The timings.
    pub timings: LeaseTimings,
    /// Where `leader_election_master_status{name}` is kept.
    pub metrics: Arc<volplane_service::metrics::Metrics>,
}

/// Why leading stopped.
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    /// Renewals failed for the whole renew deadline.
    #[error(
        "leader election lost: lease {0} not renewed within the renew deadline; stopped acting"
    )]
    Lost(String),
    /// The timings cannot keep two leaders apart.
    #[error("leader election: {0}")]
    Timings(#[from] volplane_core::lease::TimingsError),
}

/// The Lease name for a driver's controller: `volplane-<driver>` with the
/// characters a name may not hold replaced (as the sidecars do).
pub fn lease_name(driver: &str) -> String {
    let clean: String = driver
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    format!("volplane-{clean}")
}

/// The Lease as the core reads it.
fn record(lease: &Lease) -> LeaseRecord {
    let spec = lease.spec.clone().unwrap_or_default();
    LeaseRecord {
        holder: spec.holder_identity.unwrap_or_default(),
        duration_seconds: spec.lease_duration_seconds.map_or(0, |d| d.max(0) as u32),
        transitions: spec.lease_transitions.map_or(0, |t| t.max(0) as u32),
        resource_version: lease.metadata.resource_version.clone().unwrap_or_default(),
    }
}

/// Carries out a candidate's reads and writes of the Lease.
#[derive(Clone)]
struct LeaseApi {
    api: Api<Lease>,
    name: String,
}

/// The Lease's spec as `r` says, renewed now.
fn spec(r: &LeaseRecord, acquired: bool) -> LeaseSpec {
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    LeaseSpec {
        holder_identity: Some(r.holder.clone()),
        lease_duration_seconds: Some(i32::try_from(r.duration_seconds).unwrap_or(i32::MAX)),
        lease_transitions: Some(i32::try_from(r.transitions).unwrap_or(i32::MAX)),
        renew_time: Some(now.clone()),
        acquire_time: acquired.then_some(now),
        ..LeaseSpec::default()
    }
}

impl LeaseApi {
    /// Carries out one call the candidate asked for; its answer.
    async fn carry(self, namespace: String, effect: LeaseEffect) -> LeaseInput {
        match effect {
            LeaseEffect::Read { op } => {
                let result = self.api.get_opt(&self.name).await;
                if let Err(e) = &result {
                    tracing::warn!(lease = self.name, "reading the lease: {e}");
                }
                LeaseInput::Read {
                    op,
                    result: result
                        .map(|l| l.as_ref().map(record))
                        .map_err(crate::api::fault),
                }
            }
            LeaseEffect::Write {
                op,
                create,
                record,
                acquired,
            } => {
                let ok = if create {
                    self.create(&namespace, &record).await
                } else {
                    self.update(&record, acquired).await
                };
                LeaseInput::Written { op, ok }
            }
            LeaseEffect::Leading(_) => unreachable!("not a call"),
        }
    }

    async fn create(&self, namespace: &str, r: &LeaseRecord) -> bool {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(namespace.to_string()),
                ..ObjectMeta::default()
            },
            spec: Some(spec(r, true)),
        };
        let params = PostParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PostParams::default()
        };
        self.api.create(&params, &lease).await.is_ok()
    }

    async fn update(&self, r: &LeaseRecord, acquired: bool) -> bool {
        let patch = json!({
            "metadata": {"resourceVersion": r.resource_version},
            "spec": spec(r, acquired),
        });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        match self
            .api
            .patch(&self.name, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(lease = self.name, "lease write refused: {e}");
                false
            }
        }
    }

    /// Gives the Lease up (holder "") so another candidate need not wait.
    async fn release(&self, identity: &str) {
        if let Ok(Some(l)) = self.api.get_opt(&self.name).await {
            let r = record(&l);
            if r.holder == identity {
                let patch = json!({"metadata": {"resourceVersion": r.resource_version},
                                   "spec": {"holderIdentity": ""}});
                let _ = self
                    .api
                    .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await;
            }
        }
    }
}

/// Carries out a candidate's effects: its Lease calls, each on a task of
/// its own with its answer sent back as the candidate's next input, and
/// its word on leading, which starts the work or ends the election.
struct LeaseTurn {
    api: LeaseApi,
    namespace: String,
    /// `namespace/name`, for the log.
    lease: String,
    identity: String,
    rt: Arc<dyn Runtime>,
    /// How long a call may take: the renew deadline.
    limit: Duration,
    answers: mpsc::UnboundedSender<LeaseInput>,
    /// Fired when the candidate first says it leads: the work starts.
    started: Option<oneshot::Sender<()>>,
    /// The candidate said it stopped leading.
    lost: bool,
    /// The lease's name, and where its status is counted.
    name: String,
    metrics: Arc<volplane_service::metrics::Metrics>,
    /// Until when the work may act (0: not at all), as of the last turn.
    acting_until: Arc<AtomicU64>,
    /// The candidate has said it leads: the Lease may be ours.
    acquired: Arc<AtomicBool>,
}

impl Carry<Candidate> for LeaseTurn {
    fn carry(&mut self, _: &Candidate, _: Tick, effect: LeaseEffect, _: &mut VecDeque<LeaseInput>) {
        match effect {
            LeaseEffect::Leading(true) => {
                self.metrics.leading(&self.name, true);
                tracing::info!(
                    lease = self.lease,
                    identity = self.identity,
                    "successfully acquired the lease"
                );
                self.acquired.store(true, Ordering::Release);
                if let Some(started) = self.started.take() {
                    let _ = started.send(());
                }
            }
            LeaseEffect::Leading(false) => {
                self.metrics.leading(&self.name, false);
                tracing::error!(
                    lease = self.lease,
                    "leader election lost: not renewed within the renew deadline"
                );
                self.lost = true;
            }
            call => self.call(call),
        }
    }
}

impl Turn<Candidate> for LeaseTurn {
    fn after(&mut self, candidate: &Candidate) -> ControlFlow<()> {
        let until = candidate
            .acting()
            .then(|| candidate.leading_until())
            .flatten();
        self.acting_until
            .store(until.unwrap_or(0), Ordering::Release);
        if self.lost {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }
}

impl LeaseTurn {
    /// Starts one Lease call. A call gets at most the renew deadline: one
    /// that hangs must not keep a waiting candidate from trying again, as
    /// client-go bounds each attempt.
    fn call(&self, call: LeaseEffect) {
        let carried = self.api.clone().carry(self.namespace.clone(), call.clone());
        let (rt, limit, answers) = (self.rt.clone(), self.limit, self.answers.clone());
        let lease = self.lease.clone();
        self.rt.spawn(Box::pin(async move {
            let input = match volplane_service::drive::within(&*rt, limit, carried).await {
                Some(input) => input,
                None => {
                    let why = format!(
                        "the API server did not answer within the renew deadline ({limit:?}); trying again in the next retry period"
                    );
                    tracing::warn!(lease, "{why}");
                    call.unanswered(&why).expect("a call")
                }
            };
            let _ = answers.unbounded_send(input);
        }));
    }
}

/// Runs `work` while this candidate holds the Lease: the core's
/// [`Candidate`] decides, driven by the one async driver
/// ([`volplane_service::drive`]); its reads and writes are carried out
/// beside the work. `work` starts when the candidate says it leads and is
/// dropped the moment it says it stopped — at the renew deadline of its
/// last stored renewal, however long the API server takes to answer (then
/// [`ElectionError::Lost`]). When `work` finishes, the Lease is released.
///
/// `stop` is the process's shutdown: once it completes before the work has
/// started, the election ends at once (`Ok(None)`), whatever the API server
/// does — a replica waiting for the Lease holds nothing worth waiting for.
/// Once the work has started, the work is expected to see the same shutdown
/// and finish. Releasing the Lease takes at most the renew deadline.
pub async fn lead<F: Future>(
    rt: Arc<dyn Runtime>,
    client: Client,
    config: LeaseConfig,
    work: F,
    stop: impl Future<Output = ()>,
) -> Result<Option<F::Output>, ElectionError> {
    config.timings.check()?;
    let api = LeaseApi {
        api: Api::namespaced(client, &config.namespace),
        name: config.name.clone(),
    };
    let lease = format!("{}/{}", config.namespace, config.name);
    config.metrics.leading(&config.name, false);
    tracing::info!(
        lease,
        identity = config.identity,
        "attempting to acquire the leader lease"
    );
    let (answers, answered) = mpsc::unbounded();
    let (started, starts) = oneshot::channel();
    let acting_until = Arc::new(AtomicU64::new(0));
    let acquired = Arc::new(AtomicBool::new(false));
    let limit = Duration::from_millis(config.timings.renew_deadline);
    let mut turn = LeaseTurn {
        api: api.clone(),
        namespace: config.namespace.clone(),
        lease: lease.clone(),
        identity: config.identity.clone(),
        rt: rt.clone(),
        limit,
        answers,
        started: Some(started),
        lost: false,
        name: config.name.clone(),
        metrics: config.metrics.clone(),
        acting_until: acting_until.clone(),
        acquired: acquired.clone(),
    };
    let mut candidate = Candidate::new(&config.identity, config.timings);
    let clock = volplane_service::Clock::start();
    // The election is polled first: a process resumed after a long pause
    // ends its leadership (its timer is due) before the work can act.
    let electing =
        volplane_service::drive::drive(&mut candidate, &*rt, clock, None, answered, &mut turn);
    // And the work is polled only within the renew deadline, whatever the
    // timers say: past it, the election is about to end the work.
    let begun = AtomicBool::new(false);
    let mut work = std::pin::pin!(work);
    let working = async {
        if starts.await.is_err() {
            std::future::pending::<()>().await;
        }
        begun.store(true, Ordering::Release);
        std::future::poll_fn(|cx| {
            if clock.now() < acting_until.load(Ordering::Acquire) {
                work.as_mut().poll(cx)
            } else {
                std::task::Poll::Pending
            }
        })
        .await
    };
    let (mut electing, mut working, mut stop) = (
        std::pin::pin!(electing.fuse()),
        std::pin::pin!(working.fuse()),
        std::pin::pin!(stop.fuse()),
    );
    let out = loop {
        futures::select_biased! {
            () = electing => return Err(ElectionError::Lost(lease)),
            out = working => break Some(out),
            () = stop => if !begun.load(Ordering::Acquire) {
                tracing::info!(lease, "shutting down before acquiring the lease");
                break None;
            },
        }
    };
    // A candidate stopped between acquiring and starting holds it too.
    let released = api.release(&config.identity);
    if acquired.load(Ordering::Acquire)
        && volplane_service::drive::within(&*rt, limit, released)
            .await
            .is_none()
    {
        tracing::warn!(
            lease,
            "the API server did not answer within the renew deadline ({limit:?}): the lease is left to expire"
        );
    }
    Ok(out)
}
