//! The resizer: kubernetes-csi's external-resizer as a sans-IO machine.
//!
//! A bound claim whose request exceeds its status capacity is expanded
//! controller side (ControllerExpandVolume), the PV's capacity follows, and
//! then either the node finishes (the claim gets `FileSystemResizePending`
//! and the kubelet runs NodeExpandVolume, then writes the claim's capacity)
//! or, when the driver needs no node step, the claim's status capacity is
//! written here, last.
//!
//! Guarantees: the claim's status capacity only ever moves to a size the
//! volume really has; a failed expansion is reported (`VolumeResizeFailed`)
//! and retried with backoff, and the claim keeps its previous size.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::control::csi_map::{self, DriverModes};
use crate::control::{
    ApiCall, ApiResult, Backoff, Cache, CsiResult, Effect, Event, Input, Ops, Watch,
};
use crate::driver::{self, Request, Response};
use crate::model::names::reason;
use crate::model::*;
use crate::{OpId, Tick};

/// The claim condition while the controller expands.
pub const RESIZING: &str = "Resizing";
/// The claim condition while the node must grow the filesystem.
pub const FS_RESIZE_PENDING: &str = "FileSystemResizePending";

/// How the resizer runs.
#[derive(Debug, Clone, Hash)]
pub struct ResizeConfig {
    /// The driver whose volumes it resizes.
    pub driver: String,
    /// What the driver supports.
    pub modes: DriverModes,
    /// The first retry delay after a failure.
    pub retry_start: Tick,
    /// The longest retry delay.
    pub retry_max: Tick,
}

impl ResizeConfig {
    /// An external-resizer for `driver`, with the sidecar's defaults.
    pub fn new(driver: &str) -> ResizeConfig {
        ResizeConfig {
            driver: driver.into(),
            modes: DriverModes::default(),
            retry_start: 1_000,
            retry_max: 300_000,
        }
    }
}

#[derive(Debug, Clone, Hash)]
enum Call {
    Expand { claim: ObjectKey, pv: String },
    Api { claim: ObjectKey },
}

/// The external resizer. See the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct Resizer {
    config: ResizeConfig,
    cache: Cache,
    dirty: BTreeSet<ObjectKey>,
    busy: BTreeSet<ObjectKey>,
    calls: BTreeMap<OpId, Call>,
    /// What ControllerExpand answered, by claim: (capacity, node expansion required).
    expanded: BTreeMap<ObjectKey, (u64, bool)>,
    backoff: Backoff<ObjectKey>,
    told: BTreeMap<ObjectKey, String>,
    queue: VecDeque<Effect>,
    ops: Ops,
    now: Tick,
    /// Restarted and waiting for `Input::Synced`.
    unsynced: bool,
}

fn with_condition(c: &PersistentVolumeClaim, type_: &str, reason: &str) -> PersistentVolumeClaim {
    let mut c = c.clone();
    c.status.conditions.retain(|x| x.type_ != type_);
    c.status.conditions.push(PvcCondition {
        type_: type_.into(),
        status: "True".into(),
        reason: reason.into(),
        message: String::new(),
    });
    c
}

impl Resizer {
    /// A resizer with empty memory.
    pub fn new(config: ResizeConfig) -> Resizer {
        let backoff = Backoff::new(config.retry_start, config.retry_max);
        Resizer {
            config,
            cache: Cache::default(),
            dirty: BTreeSet::new(),
            busy: BTreeSet::new(),
            calls: BTreeMap::new(),
            expanded: BTreeMap::new(),
            backoff,
            told: BTreeMap::new(),
            queue: VecDeque::new(),
            ops: Ops::default(),
            now: 0,
            unsynced: false,
        }
    }

    fn on_input(&mut self, now: Tick, input: Input) {
        self.now = self.now.max(now);
        match input {
            Input::Watch(Watch::Applied(o)) => {
                self.mark(&o);
                self.cache.apply(o);
            }
            Input::Watch(Watch::Deleted(o)) => {
                self.cache.delete(&o);
            }
            Input::ApiDone { op, result } => {
                if let Some(Call::Api { claim }) = self.calls.remove(&op) {
                    self.busy.remove(&claim);
                    match result {
                        ApiResult::Ok(Some(o)) => {
                            self.cache.apply(o);
                        }
                        ApiResult::Ok(None) => {}
                        _ => {
                            self.backoff.fail(claim.clone(), self.now);
                        }
                    }
                    self.dirty.insert(claim);
                }
            }
            Input::CsiDone { op, result } => self.expand_done(op, result),
            Input::Synced | Input::Restarted | Input::Resync | Input::Reconstruct(_) => {}
        }
    }

    fn mark(&mut self, o: &Object) {
        match o {
            Object::Pvc(_) => {
                self.dirty.insert(o.key());
            }
            Object::Pv(pv) => {
                if let Some(r) = &pv.spec.claim_ref {
                    self.dirty.insert(ObjectKey::new(
                        Kind::PersistentVolumeClaim,
                        &r.namespace,
                        &r.name,
                    ));
                }
            }
            _ => {}
        }
    }

    fn next_effect(&mut self) -> Option<Effect> {
        while self.queue.is_empty() {
            let key = self.dirty.pop_first()?;
            self.sync(&key);
        }
        self.queue.pop_front()
    }

    fn deadline(&self) -> Option<Tick> {
        self.backoff.next_timer()
    }

    /// One operation per claim at a time.
    fn invariants(&self) -> Result<(), String> {
        let keys = self.calls.values().map(|c| match c {
            Call::Expand { claim, .. } | Call::Api { claim } => claim,
        });
        crate::machine::one_at_a_time("resizer", keys, |k| self.busy.contains(k), self.busy.len())
    }

    fn on_timeout(&mut self, now: Tick) {
        self.now = self.now.max(now);
        for k in self.backoff.fire_due(self.now) {
            self.dirty.insert(k);
        }
    }

    fn api(&mut self, claim: &ObjectKey, call: ApiCall) {
        let op = self.ops.issue();
        self.busy.insert(claim.clone());
        self.calls.insert(
            op,
            Call::Api {
                claim: claim.clone(),
            },
        );
        self.queue.push_back(Effect::Api { op, call });
    }

    fn tell(&mut self, claim: &ObjectKey, e: Event) {
        if self.told.get(claim) == Some(&e.message) {
            return;
        }
        self.told.insert(claim.clone(), e.message.clone());
        self.queue.push_back(Effect::Event(e));
    }

    fn sync(&mut self, key: &ObjectKey) {
        if self.busy.contains(key) || self.backoff.waiting(key, self.now) {
            return;
        }
        let Some(Object::Pvc(claim)) = self.cache.get(key).cloned() else {
            return;
        };
        if claim.phase() != PvcPhase::Bound {
            return;
        }
        let Some(Object::Pv(pv)) = self
            .cache
            .find(Kind::PersistentVolume, "", claim.volume_name())
            .cloned()
        else {
            return;
        };
        let Some(csi) = pv
            .spec
            .csi
            .clone()
            .filter(|c| c.driver == self.config.driver)
        else {
            return;
        };
        let request = claim.request().map_or(0, |q| q.bytes());
        let status = claim.status_capacity().map_or(0, |q| q.bytes());
        if request <= status {
            self.expanded.remove(key);
            return;
        }
        let allowed = match self.cache.find(Kind::StorageClass, "", claim.class()) {
            Some(Object::Class(c)) => c.allow_volume_expansion == Some(true),
            _ => false,
        };
        if !allowed {
            self.tell(
                key,
                Event::warning(
                    key.clone(),
                    reason::VOLUME_RESIZE_FAILED,
                    format!(
                        "storageclass {:?} does not allow volume expansion",
                        claim.class()
                    ),
                ),
            );
            return;
        }
        if claim.condition(FS_RESIZE_PENDING).is_some() {
            return; // the kubelet finishes it
        }
        let pv_bytes = pv.capacity().map_or(0, |q| q.bytes());
        let answered = self
            .expanded
            .get(key)
            .copied()
            .filter(|(cap, _)| *cap >= request);
        let Some((capacity, node_required)) = answered else {
            if claim.condition(RESIZING).is_none() {
                self.api(
                    key,
                    ApiCall::UpdateStatus(Object::Pvc(with_condition(&claim, RESIZING, ""))),
                );
                self.tell(
                    key,
                    Event::normal(
                        key.clone(),
                        reason::RESIZING,
                        format!("External resizer is resizing volume {}", pv.name()),
                    ),
                );
                return;
            }
            let capability = csi_map::pv_capability(&pv, self.config.modes).ok();
            let call = Request::ControllerExpand(driver::ControllerExpand {
                volume_id: csi.volume_handle.clone(),
                capacity: driver::CapacityRange {
                    required_bytes: request,
                    limit_bytes: 0,
                },
                capability,
                secrets: driver::Secrets::default(),
            });
            let op = self.ops.issue();
            self.busy.insert(key.clone());
            self.calls.insert(
                op,
                Call::Expand {
                    claim: key.clone(),
                    pv: pv.name().to_string(),
                },
            );
            self.queue.push_back(Effect::Csi {
                op,
                node: None,
                call,
            });
            return;
        };
        if pv_bytes < capacity {
            let mut v = pv.clone();
            v.spec
                .capacity
                .insert("storage".into(), Quantity::from_bytes(capacity));
            self.api(key, ApiCall::Update(Object::Pv(v)));
            return;
        }
        let mut c = claim.clone();
        c.status.conditions.retain(|x| x.type_ != RESIZING);
        if node_required {
            c = with_condition(&c, FS_RESIZE_PENDING, "");
            self.tell(
                key,
                Event::normal(
                    key.clone(),
                    reason::FILE_SYSTEM_RESIZE_REQUIRED,
                    "Require file system resize of volume on node",
                ),
            );
        } else {
            c.status
                .capacity
                .insert("storage".into(), Quantity::from_bytes(capacity));
            self.tell(
                key,
                Event::normal(
                    key.clone(),
                    reason::VOLUME_RESIZE_SUCCESSFUL,
                    "Resize volume succeeded",
                ),
            );
        }
        self.expanded.remove(key);
        self.api(key, ApiCall::UpdateStatus(Object::Pvc(c)));
    }

    fn expand_done(&mut self, op: OpId, result: CsiResult) {
        let Some(Call::Expand { claim, pv }) = self.calls.remove(&op) else {
            return;
        };
        self.busy.remove(&claim);
        match result {
            Ok(Response::ControllerExpanded {
                capacity_bytes,
                node_expansion_required,
            }) => {
                self.backoff.succeed(&claim);
                self.expanded
                    .insert(claim.clone(), (capacity_bytes, node_expansion_required));
            }
            Ok(other) => {
                self.backoff.fail(claim.clone(), self.now);
                let msg = format!(
                    "resize volume {pv:?} by resizer {:?} failed: unexpected answer {other:?}",
                    self.config.driver
                );
                self.queue.push_back(Effect::Event(Event::warning(
                    claim.clone(),
                    reason::VOLUME_RESIZE_FAILED,
                    msg,
                )));
            }
            Err(e) => {
                self.backoff.fail(claim.clone(), self.now);
                let msg = format!(
                    "resize volume {pv:?} by resizer {:?} failed: {}",
                    self.config.driver,
                    e.go_error()
                );
                self.queue.push_back(Effect::Event(Event::warning(
                    claim.clone(),
                    reason::VOLUME_RESIZE_FAILED,
                    msg,
                )));
            }
        }
        self.dirty.insert(claim);
    }
}

crate::impl_machine!(Resizer);
