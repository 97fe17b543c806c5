//! Leader election on a coordination.k8s.io/v1 Lease: the core's
//! [`Elector`] decides, this reads and writes the Lease. Writes are merge
//! patches preconditioned on the Lease's resourceVersion (a create when it
//! is missing), so two candidates never both succeed at one version.
//!
//! [`lead`] runs the work only while leading: it starts once the Lease is
//! ours and is dropped — it stops acting — as soon as a renewal has not
//! succeeded within the renew deadline, which is shorter than the time any
//! other candidate waits before taking over.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use volplane_core::Tick;
use volplane_core::lease::{Decision, Elector, LeaseRecord, LeaseTimings};

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
    Timings(String),
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

/// One candidate talking to the API server.
struct Candidate {
    api: Api<Lease>,
    config: LeaseConfig,
    elector: Elector,
    clock: volplane_service::Clock,
}

impl Candidate {
    fn now(&self) -> Tick {
        self.clock.now()
    }

    /// One read-decide-write round; whether the Lease is ours after it.
    async fn try_once(&mut self) -> bool {
        let decided = self.now();
        let current = match self.api.get_opt(&self.config.name).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(lease = self.config.name, "reading the lease: {e}");
                return false;
            }
        };
        let previous = current.as_ref().map(record);
        let ok = match self.elector.decide(decided, previous.clone()) {
            Decision::Wait => false,
            Decision::Create(r) => self.create(&r).await,
            Decision::Update(r) => {
                let acquired = previous.is_none_or(|p| p.holder != r.holder);
                self.update(&r, acquired).await
            }
        };
        self.elector.wrote(decided, ok);
        ok
    }

    fn spec(&self, r: &LeaseRecord, acquired: bool) -> LeaseSpec {
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

    async fn create(&self, r: &LeaseRecord) -> bool {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(self.spec(r, true)),
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
            "spec": self.spec(r, acquired),
        });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..PatchParams::default()
        };
        match self
            .api
            .patch(&self.config.name, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(lease = self.config.name, "lease write refused: {e}");
                false
            }
        }
    }

    /// Gives the Lease up (holder "") so another candidate need not wait.
    async fn release(&mut self) {
        if let Ok(Some(l)) = self.api.get_opt(&self.config.name).await {
            let r = record(&l);
            if r.holder == self.config.identity {
                let patch = json!({"metadata": {"resourceVersion": r.resource_version},
                                   "spec": {"holderIdentity": ""}});
                let _ = self
                    .api
                    .patch(
                        &self.config.name,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await;
            }
        }
    }
}

/// Runs `work` while this candidate holds the Lease: waits to acquire it,
/// renews it every retry period, and drops `work` the moment leadership
/// lapses (then returns [`ElectionError::Lost`]). When `work` finishes, the
/// Lease is released.
pub async fn lead<F: Future>(
    client: Client,
    config: LeaseConfig,
    work: F,
) -> Result<F::Output, ElectionError> {
    config.timings.check().map_err(ElectionError::Timings)?;
    let retry = Duration::from_millis(config.timings.retry_period);
    let mut c = Candidate {
        api: Api::namespaced(client, &config.namespace),
        elector: Elector::new(&config.identity, config.timings),
        config,
        clock: volplane_service::Clock::start(),
    };
    let lease = format!("{}/{}", c.config.namespace, c.config.name);
    tracing::info!(
        lease,
        identity = c.config.identity,
        "attempting to acquire the leader lease"
    );
    while !c.try_once().await {
        tokio::time::sleep(retry).await;
    }
    tracing::info!(
        lease,
        identity = c.config.identity,
        "successfully acquired the lease"
    );
    let mut work = std::pin::pin!(work);
    loop {
        tokio::select! {
            out = &mut work => {
                c.release().await;
                return Ok(out);
            }
            _ = tokio::time::sleep(retry) => {}
        }
        // Renew; the work goes on meanwhile, but not past the moment
        // leadership lapses, however long the API server takes to answer.
        let until = c.elector.leading_until().unwrap_or(0);
        let left = Duration::from_millis(until.saturating_sub(c.now()));
        let renewed = tokio::select! {
            out = &mut work => {
                c.release().await;
                return Ok(out);
            }
            r = tokio::time::timeout(left, c.try_once()) => r.unwrap_or(false),
        };
        if !renewed && !c.elector.leading(c.now()) {
            tracing::error!(
                lease,
                "leader election lost: not renewed within the renew deadline"
            );
            return Err(ElectionError::Lost(lease));
        }
    }
}
