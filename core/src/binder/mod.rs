//! The binder: Kubernetes' PersistentVolume controller as a sans-IO machine
//! (SEMANTICS.md A). It binds claims to volumes, moves PV and PVC phases,
//! hands claims to an external provisioner by annotation, and reclaims
//! released volumes.
//!
//! Guarantees:
//! * Binding is the four writes of A7.1, in order, one at a time; each is
//!   skipped when already done, so a crash (or a lost write) between any two
//!   is repaired by the next sync.
//! * A PV is bound to at most one claim and a claim to at most one PV:
//!   every write carries the cached resourceVersion, and a claim only takes
//!   a volume whose claimRef is empty or already names it.
//! * Events are emitted when their reason or message changes, not on every
//!   sync; an event that announces a phase (ClaimLost, ClaimMisbound,
//!   VolumeFailedDelete, VolumeFailedRecycle, VolumeUnknownReclaimPolicy) only
//!   after the write that changed the phase succeeded, as upstream's
//!   update…WithEvent.
//!
//! Read path by path against upstream's pv_controller.go and
//! pv_controller_base.go (tests named by rule in `tests/`, the audit's in
//! `tests/audit.rs`). Where volplane differs on purpose:
//! * No in-tree volume plugins: migration annotations (A6.8, A10.4) and the
//!   in-tree provisioning, deleting and recycling paths have nothing to act
//!   on; an in-tree volume fails as upstream's does when its plugin is missing.
//! * A claim or volume event syncs both sides of a binding at once (upstream
//!   syncs only the object, and the other at its next resync): the decisions
//!   are the same, they come sooner.
//! * A pod counts as terminated by its phase only (upstream also counts a
//!   deleted pod whose containers all stopped), and only
//!   `persistentVolumeClaim` volumes name claims (the model has no generic
//!   ephemeral volumes).

mod index;
mod matching;
mod reclaim;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

pub use index::MatchIndex;
pub use matching::{check_one_to_one, prebind_mismatch, volume_mismatch};

use crate::control::{ApiCall, ApiResult, Controller, Cx, Engine, Event, Watch};
use crate::model::names::{self, reason};
use crate::model::*;

/// What the binder is waiting for from one write.
#[derive(Debug, Clone, Hash)]
pub struct Pending {
    /// The object written.
    key: ObjectKey,
    /// The incarnation written ("" for a read).
    uid: String,
    /// The version written against ("" for a create, delete or read).
    rv: String,
    /// Objects to sync again when the write completes.
    requeue: Vec<ObjectKey>,
    /// For a read of a volume's claim: the volume.
    verifying: Option<String>,
    /// The event the write announces once it succeeded (upstream's
    /// updateClaimStatusWithEvent and updateVolumePhaseWithEvent).
    announce: Option<Event>,
    /// Set for the claim's provisioner annotation: a failed write is a
    /// ProvisioningFailed "Error saving claim" (provisionClaimOperationExternal).
    saving_claim: bool,
}

/// The PV controller. See the module documentation. Objects whose write
/// failed with nothing newer known wait out their backoff (or news) in the
/// engine.
pub type Binder = Engine<BinderReconciler>;

/// What the PV controller keeps of its own; the engine keeps the rest.
#[derive(Debug, Clone, Default, Hash)]
pub struct BinderReconciler {
    index: MatchIndex,
    /// Objects whose sync wanted to write an object already being written:
    /// they sync again when that write completes (one write per object at
    /// a time, whatever order completions and watch events arrive in).
    deferred: BTreeMap<ObjectKey, BTreeSet<ObjectKey>>,
    /// The object being synced now.
    syncing: Option<ObjectKey>,
    /// PV name → claim UID that a direct read found missing (A6.2).
    missing_claim: BTreeMap<String, String>,
    /// The last event's reason and message for each object (a hash of
    /// them): the same event is not posted twice in a row. Forgotten with
    /// the object.
    last_event: BTreeMap<ObjectKey, u64>,
    /// Unbound claims that found no volume, to look again when one appears.
    waiting: BTreeSet<ObjectKey>,
    /// Claims whose volume's claimRef write is in flight, and that volume:
    /// such a claim chooses nothing more until the write completes.
    reserving: BTreeMap<ObjectKey, String>,
    plant: crate::plant::Planted,
}

fn pv_key(name: &str) -> ObjectKey {
    ObjectKey::new(Kind::PersistentVolume, "", name)
}

fn pvc_key(namespace: &str, name: &str) -> ObjectKey {
    ObjectKey::new(Kind::PersistentVolumeClaim, namespace, name)
}

/// True when `pv`'s claimRef names `claim` with an empty or equal UID (A3.4).
pub fn bound_to_claim(pv: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    pv.spec.claim_ref.as_ref().is_some_and(|r| {
        r.name == claim.metadata.name
            && r.namespace == claim.metadata.namespace
            && (r.uid.is_empty() || r.uid == claim.metadata.uid)
    })
}

impl Binder {
    /// A binder with empty memory.
    pub fn new() -> Binder {
        Binder::default()
    }

    /// Simulation only: a binder with a planted mistake.
    pub fn with_plant(plant: crate::plant::Planted) -> Binder {
        let reconciler = BinderReconciler {
            plant,
            ..BinderReconciler::default()
        };
        Engine::driving(reconciler, 1_000, 300_000)
    }

    /// The best volume for `claim`: a volume pre-bound to it wins at once
    /// (A3.4; still subject to capacity, volumeMode,
    /// volumeAttributesClassName and deletion, as upstream's
    /// FindMatchingVolume); otherwise, unless binding is delayed, the
    /// index's best match.
    pub fn find_match(&self, claim: &PersistentVolumeClaim, delay: bool) -> Option<String> {
        self.controller().find_match(self.context(), claim, delay)
    }
}

impl BinderReconciler {
    /// The index of volumes that claims can match.
    pub fn index(&self) -> &MatchIndex {
        &self.index
    }

    /// Marks every claim and volume for another sync (A10.3).
    fn resync_all(&mut self, cx: &mut Cx<Self>) {
        let keys: Vec<ObjectKey> = cx
            .cache()
            .values()
            .filter(|o| matches!(o, Object::Pv(_) | Object::Pvc(_)))
            .map(Object::key)
            .collect();
        cx.mark_all(keys);
    }

    /// A watch event: news (a version the cache has not seen) syncs what
    /// it touches; the echo of a write whose answer already came, or a
    /// stale event, changes nothing and syncs nothing.
    fn applied(&mut self, cx: &mut Cx<Self>, o: std::sync::Arc<Object>) {
        if !cx.cache().is_news(&o) {
            // The echo of a write: the watch's copy, shared with every
            // other role, takes the place of the one the write answered.
            cx.cache_mut().adopt(o);
            return;
        }
        if !self.dirty_around(cx, &o) {
            return;
        }
        // News of an object whose write failed ends its backoff's wait.
        cx.news(&o.key());
        if cx.cache_mut().apply(o.clone())
            && let Object::Pv(pv) = &*o
        {
            self.update_index(cx, pv);
        }
    }

    /// Marks for a sync what a new version of `o` can change: the object
    /// and the other side of its binding (a pod: its claims; a class: the
    /// pending claims). False for a kind the binder does not keep.
    fn dirty_around(&mut self, cx: &mut Cx<Self>, o: &Object) -> bool {
        match o {
            Object::Pv(pv) => {
                if let Some(r) = &pv.spec.claim_ref {
                    cx.mark(pvc_key(&r.namespace, &r.name));
                }
                cx.mark(pv_key(pv.name()));
            }
            Object::Pvc(pvc) => {
                if let Some(v) = pvc.spec.volume_name.as_deref().filter(|v| !v.is_empty()) {
                    cx.mark(pv_key(v));
                }
                let claimed: Vec<ObjectKey> = self
                    .index
                    .claimed_by(&pvc.metadata.namespace, &pvc.metadata.name)
                    .map(|v| pv_key(v))
                    .collect();
                cx.mark_all(claimed);
                cx.mark(claim_key(pvc));
            }
            Object::Class(_) => self.dirty_pending_claims(cx),
            Object::Pod(pod) => {
                for c in pod.claims() {
                    cx.mark(pvc_key(&pod.metadata.namespace, c));
                }
            }
            _ => return false,
        }
        true
    }

    fn update_index(&mut self, cx: &mut Cx<Self>, pv: &PersistentVolume) {
        let was = self.index.candidates();
        self.index.update(pv);
        if self.index.candidates() > was {
            // A new candidate volume: claims still waiting for one look again.
            let waiting = std::mem::take(&mut self.waiting);
            cx.mark_all(waiting);
        }
    }

    fn forget(&mut self, cx: &mut Cx<Self>, o: &Object) {
        if cx.cache_mut().delete(o).is_none()
            && cx
                .cache()
                .find(o.kind(), &o.meta().namespace, &o.meta().name)
                .is_some()
        {
            // A late delete of an object since created again: stale.
            return;
        }
        self.last_event.remove(&o.key());
        match o {
            Object::Pv(pv) => {
                self.index.remove(pv.name());
                if let Some(r) = &pv.spec.claim_ref {
                    cx.mark(pvc_key(&r.namespace, &r.name));
                }
            }
            Object::Pvc(pvc) => {
                // A8.1: the volume learns at once that its claim is gone.
                let volumes: Vec<Name> = self
                    .index
                    .claimed_by(&pvc.metadata.namespace, &pvc.metadata.name)
                    .cloned()
                    .collect();
                cx.mark_all(volumes.iter().map(|v| pv_key(v)));
            }
            Object::Class(_) => self.dirty_pending_claims(cx),
            _ => {}
        }
    }

    fn dirty_pending_claims(&mut self, cx: &mut Cx<Self>) {
        let keys: Vec<ObjectKey> = cx
            .cache()
            .of_kind(Kind::PersistentVolumeClaim)
            .filter(|o| matches!(o, Object::Pvc(c) if c.phase() == PvcPhase::Pending))
            .map(Object::key)
            .collect();
        cx.mark_all(keys);
    }

    fn completed(&mut self, cx: &mut Cx<Self>, p: Pending, result: ApiResult) {
        for claim in &p.requeue {
            if self.reserving.get(claim).map(String::as_str) == Some(&*p.key.name) {
                self.reserving.remove(claim);
            }
        }
        let deferred = self.deferred.remove(&p.key).unwrap_or_default();
        self.announce(cx, &p, &result);
        let failed = matches!(
            result,
            ApiResult::Conflict
                | ApiResult::AlreadyExists
                | ApiResult::Failed(_)
                | ApiResult::Listed(_)
        );
        if failed {
            // A volume taken for a claim whose write failed is offered again.
            if let Some(Object::Pv(pv)) = cx.cache().get(&p.key).cloned() {
                self.update_index(cx, &pv);
            }
            // Nothing newer known: the same write would fail the same way.
            // It waits for its backoff, or for news of what it touches.
            if !cx.cache().newer_than(&p.key, &p.rv) {
                cx.fail(p.key.clone());
                cx.requeue(p.key, p.requeue.into_iter().chain(deferred));
                return;
            }
        } else {
            // What waited on an earlier failed write of this object syncs
            // again (below), not let go with its backoff.
            let waiting = cx.take_requeue(&p.key);
            cx.succeed(&p.key);
            cx.mark_all(waiting);
        }
        // What waited on this write, or on an earlier failed write of this
        // object, syncs again.
        cx.mark_all(deferred);
        let waiting = cx.take_requeue(&p.key);
        cx.mark_all(waiting);
        match result {
            ApiResult::Ok(Some(o)) => {
                // The answer is the news its watch event will echo.
                self.dirty_around(cx, &o);
                if let Object::Pv(pv) = &*o {
                    self.update_index(cx, pv);
                }
                cx.cache_mut().apply(o);
            }
            ApiResult::Ok(None) | ApiResult::NotFound => {
                match cx.cache_mut().gone(&p.key, &p.uid) {
                    Some(Object::Pv(pv)) => self.index.remove(pv.name()),
                    // A8.1: its volumes learn at once that the claim is gone.
                    Some(Object::Pvc(c)) => {
                        let volumes: Vec<ObjectKey> = self
                            .index
                            .claimed_by(&c.metadata.namespace, &c.metadata.name)
                            .map(|v| pv_key(v))
                            .collect();
                        cx.mark_all(volumes);
                    }
                    _ => {}
                }
            }
            ApiResult::Conflict
            | ApiResult::AlreadyExists
            | ApiResult::Failed(_)
            | ApiResult::Listed(_) => {}
        }
        // A direct read of a volume's claim (A6.2): remember when it is really gone.
        if let Some(pv_name) = &p.verifying {
            let found = match cx.cache().get(&p.key) {
                Some(Object::Pvc(c)) => Some(c.metadata.uid.clone()),
                _ => None,
            };
            if let Some(pv) = self.volume(cx, pv_name)
                && let Some(r) = &pv.spec.claim_ref
                && found.as_deref() != Some(r.uid.as_str())
            {
                self.missing_claim.insert(pv_name.clone(), r.uid.clone());
            }
        }
        cx.mark(p.key);
        cx.mark_all(p.requeue);
    }

    /// After a write: its announced event when it succeeded, the
    /// provisioner annotation's ProvisioningFailed when that failed.
    fn announce(&mut self, cx: &mut Cx<Self>, p: &Pending, result: &ApiResult) {
        if let ApiResult::Ok(_) = result {
            if let Some(e) = p.announce.clone() {
                self.event(cx, e);
            }
            return;
        }
        if !p.saving_claim {
            return;
        }
        // The claim's save failed: the API server's words, as upstream's event quotes them.
        let failure = match result {
            ApiResult::Conflict => format!(
                "Operation cannot be fulfilled on persistentvolumeclaims {:?}: the object has been modified; please apply your changes to the latest version and try again",
                p.key.name
            ),
            ApiResult::NotFound => format!("persistentvolumeclaims {:?} not found", p.key.name),
            ApiResult::Failed(why) => why.message().to_string(),
            ApiResult::Ok(_) | ApiResult::AlreadyExists | ApiResult::Listed(_) => return,
        };
        self.event(
            cx,
            Event::warning(
                p.key.clone(),
                reason::PROVISIONING_FAILED,
                format!("Error saving claim: {failure}"),
            ),
        );
    }

    fn call(&mut self, cx: &mut Cx<Self>, call: ApiCall, requeue: Vec<ObjectKey>) {
        self.write(cx, call, requeue, None, false);
    }

    /// Issues `call` unless its object is being written (then the sync
    /// waits for that write); `announce` is emitted when it succeeds.
    fn write(
        &mut self,
        cx: &mut Cx<Self>,
        call: ApiCall,
        requeue: Vec<ObjectKey>,
        announce: Option<Event>,
        saving_claim: bool,
    ) {
        let key = call.key();
        if cx.busy(&key) {
            let waiting = self.deferred.entry(key).or_default();
            waiting.extend(requeue);
            waiting.extend(self.syncing.clone());
            return;
        }
        let (mut uid, rv) = (call.uid().to_string(), call.version().to_string());
        let verifying = match (&call, requeue.first()) {
            (ApiCall::Get(_), Some(pv)) => Some(pv.name.to_string()),
            _ => None,
        };
        // A read of a volume's claim is about the incarnation the volume
        // names: its NotFound must not make a claim made again since (under
        // the same name, while the read was in flight) count as gone.
        if let Some(pv) = verifying.as_deref().and_then(|v| self.volume(cx, v))
            && let Some(r) = &pv.spec.claim_ref
        {
            uid = r.uid.clone();
        }
        let pending = Pending {
            key: key.clone(),
            uid,
            rv,
            requeue,
            verifying,
            announce,
            saving_claim,
        };
        cx.api_holding([key], call, pending);
    }

    fn event(&mut self, cx: &mut Cx<Self>, e: Event) {
        // SipHash with fixed keys: the same digest in every run.
        let last = std::hash::BuildHasher::hash_one(
            &std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default(),
            (&e.reason, &e.message),
        );
        if self.last_event.insert(e.object.clone(), last) == Some(last) {
            return;
        }
        cx.event(e);
    }

    fn claim(
        &self,
        cx: &Cx<Self>,
        namespace: &str,
        name: &str,
    ) -> Option<Shared<PersistentVolumeClaim>> {
        cx.cache().shared(namespace, name)
    }

    fn volume(&self, cx: &Cx<Self>, name: &str) -> Option<Shared<PersistentVolume>> {
        cx.cache().shared("", name)
    }

    fn class(&self, cx: &Cx<Self>, name: &str) -> Option<Shared<StorageClass>> {
        cx.cache().shared("", name)
    }

    /// A3.9: delayed binding when the claim's class exists and says WaitForFirstConsumer.
    fn delay_binding(&self, cx: &Cx<Self>, claim: &PersistentVolumeClaim) -> bool {
        let class = claim.class();
        !class.is_empty()
            && self
                .class(cx, class)
                .is_some_and(|c| c.binding_mode() == BindingMode::WaitForFirstConsumer)
    }

    /// The default StorageClass: the newest one marked default (ties by name).
    fn default_class(&self, cx: &Cx<Self>) -> Option<StorageClass> {
        cx.cache()
            .of_kind(Kind::StorageClass)
            .filter_map(|o| match o {
                Object::Class(c) if c.is_default() => Some(c.clone()),
                _ => None,
            })
            .max_by(|a, b| {
                a.metadata
                    .creation_timestamp
                    .cmp(&b.metadata.creation_timestamp)
                    .then_with(|| b.metadata.name.cmp(&a.metadata.name))
            })
    }

    // ---- syncClaim (A4, A5) ----

    fn sync_claim(&mut self, cx: &mut Cx<Self>, key: &ObjectKey) {
        if self.reserving.contains_key(key) {
            // Its volume's write will sync it again.
            return;
        }
        let Some(claim) = self.claim(cx, &key.namespace, &key.name) else {
            return;
        };
        if claim.metadata.has_annotation(names::ANN_BIND_COMPLETED) {
            self.sync_bound_claim(cx, &claim);
        } else {
            self.sync_unbound_claim(cx, &claim);
        }
    }

    /// A claim that binds only once a pod using it is scheduled
    /// (WaitForFirstConsumer): says which pods it waits for, and stays
    /// Pending.
    fn wait_for_consumer(&mut self, cx: &mut Cx<Self>, claim: &PersistentVolumeClaim) {
        let waiting: Vec<String> = cx
            .cache()
            .of_kind(Kind::Pod)
            .filter_map(|o| match o {
                Object::Pod(p)
                    if p.metadata.namespace == claim.metadata.namespace
                        && p.node().is_none()
                        && !p.terminated()
                        && p.claims().any(|c| c == claim.metadata.name) =>
                {
                    Some(p.metadata.name.clone())
                }
                _ => None,
            })
            .collect();
        let e = match waiting.len() {
            0 => Event::normal(
                claim_key(claim),
                reason::WAIT_FOR_FIRST_CONSUMER,
                "waiting for first consumer to be created before binding",
            ),
            1 => Event::normal(
                claim_key(claim),
                reason::WAIT_FOR_POD_SCHEDULED,
                format!("waiting for pod {} to be scheduled", waiting[0]),
            ),
            _ => Event::normal(
                claim_key(claim),
                reason::WAIT_FOR_POD_SCHEDULED,
                format!("waiting for pods {} to be scheduled", waiting.join(",")),
            ),
        };
        self.event(cx, e);
        self.set_claim_phase(cx, claim, PvcPhase::Pending, None);
    }

    fn sync_unbound_claim(&mut self, cx: &mut Cx<Self>, claim: &PersistentVolumeClaim) {
        let volume_name = claim.volume_name();
        if volume_name.is_empty() {
            let delay = self.delay_binding(cx, claim);
            if let Some(pv) = self.find_match(cx, claim, delay) {
                let pv = self.volume(cx, &pv).expect("indexed volumes are cached");
                self.bind(cx, claim, &pv);
                return;
            }
            self.waiting.insert(claim_key(claim));
            if claim.has_no_class()
                && let Some(default) = self.default_class(cx)
            {
                let mut c = claim.clone();
                c.spec.storage_class_name = Some(default.metadata.name.clone());
                self.call(cx, ApiCall::Update(Object::Pvc(c)), vec![]);
                return;
            }
            if delay && !claim.metadata.has_annotation(names::ANN_SELECTED_NODE) {
                self.wait_for_consumer(cx, claim);
                return;
            }
            if !claim.class().is_empty() {
                self.provision_claim(cx, claim);
                return;
            }
            self.event(
                cx,
                Event::normal(
                    claim_key(claim),
                    reason::FAILED_BINDING,
                    "no persistent volumes available for this claim and no storage class is set",
                ),
            );
            self.set_claim_phase(cx, claim, PvcPhase::Pending, None);
            return;
        }
        match self.volume(cx, volume_name) {
            None => self.set_claim_phase(cx, claim, PvcPhase::Pending, None),
            Some(pv) if pv.spec.claim_ref.is_none() || bound_to_claim(&pv, claim) => {
                let mismatch = if pv.spec.claim_ref.is_none() {
                    volume_mismatch(&pv, claim)
                } else {
                    prebind_mismatch(&pv, claim)
                };
                match mismatch {
                    Some(why) => {
                        self.event(
                            cx,
                            Event::warning(
                                claim_key(claim),
                                reason::VOLUME_MISMATCH,
                                format!("Cannot bind to requested volume {volume_name:?}: {why}"),
                            ),
                        );
                        self.set_claim_phase(cx, claim, PvcPhase::Pending, None);
                    }
                    None => self.bind(cx, claim, &pv),
                }
            }
            Some(_) => {
                self.event(
                    cx,
                    Event::warning(
                        claim_key(claim),
                        reason::FAILED_BINDING,
                        format!("volume {volume_name:?} already bound to a different claim."),
                    ),
                );
                // A4.9: a claim the controller bound is left as it is and
                // retried at the next resync (upstream returns an error and
                // writes nothing); a user's request goes back to Pending.
                if !claim
                    .metadata
                    .has_annotation(names::ANN_BOUND_BY_CONTROLLER)
                {
                    self.set_claim_phase(cx, claim, PvcPhase::Pending, None);
                }
            }
        }
    }

    fn sync_bound_claim(&mut self, cx: &mut Cx<Self>, claim: &PersistentVolumeClaim) {
        let volume_name = claim.volume_name();
        if volume_name.is_empty() {
            self.lose_claim(cx,
                claim,
                Event::warning(
                    claim_key(claim),
                    reason::CLAIM_LOST,
                    "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
                ),
            );
            return;
        }
        let Some(pv) = self.volume(cx, volume_name) else {
            self.lose_claim(
                cx,
                claim,
                Event::warning(
                    claim_key(claim),
                    reason::CLAIM_LOST,
                    "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
                ),
            );
            return;
        };
        match &pv.spec.claim_ref {
            None => self.bind(cx, claim, &pv),
            Some(r) if r.uid == claim.metadata.uid && r.name == claim.metadata.name => {
                self.bind(cx, claim, &pv)
            }
            Some(_) => self.lose_claim(
                cx,
                claim,
                Event::warning(
                    claim_key(claim),
                    reason::CLAIM_MISBOUND,
                    "Two claims are bound to the same volume, this one is bound incorrectly",
                ),
            ),
        }
    }

    /// A5.1, A5.2, A5.5: Lost, with the event only when the phase changes
    /// (updateClaimStatusWithEvent).
    fn lose_claim(&mut self, cx: &mut Cx<Self>, claim: &PersistentVolumeClaim, e: Event) {
        if claim.phase() == PvcPhase::Lost {
            return;
        }
        let mut c = claim.clone();
        c.status = Self::claim_status(claim, PvcPhase::Lost, None);
        self.write(
            cx,
            ApiCall::UpdateStatus(Object::Pvc(c)),
            vec![],
            Some(e),
            false,
        );
    }

    /// A9.3: hand the claim to its class's provisioner by annotation.
    fn provision_claim(&mut self, cx: &mut Cx<Self>, claim: &PersistentVolumeClaim) {
        let ckey = claim_key(claim);
        let Some(class) = self.class(cx, claim.class()) else {
            self.event(
                cx,
                Event::warning(
                    ckey,
                    reason::PROVISIONING_FAILED,
                    format!("storageclass.storage.k8s.io {:?} not found", claim.class()),
                ),
            );
            return;
        };
        let provisioner = class.provisioner.clone();
        if provisioner == names::NO_PROVISIONER || provisioner.starts_with("kubernetes.io/") {
            self.event(
                cx,
                Event::warning(
                    ckey,
                    reason::PROVISIONING_FAILED,
                    format!("no volume plugin matched name: {provisioner}"),
                ),
            );
            return;
        }
        let waiting = Event::normal(
            ckey,
            reason::EXTERNAL_PROVISIONING,
            format!(
                "Waiting for a volume to be created either by the external provisioner '{provisioner}' or manually by the system administrator. If volume creation is delayed, please verify that the provisioner is running and correctly registered."
            ),
        );
        // setClaimProvisioner: the GA annotation decides; both are written.
        if claim.metadata.annotation(names::ANN_STORAGE_PROVISIONER) == Some(&provisioner) {
            self.event(cx, waiting);
            return;
        }
        let mut c = claim.clone();
        c.metadata
            .annotations
            .insert(names::ANN_STORAGE_PROVISIONER.into(), provisioner.clone());
        c.metadata
            .annotations
            .insert(names::ANN_BETA_STORAGE_PROVISIONER.into(), provisioner);
        self.write(
            cx,
            ApiCall::Update(Object::Pvc(c)),
            vec![],
            Some(waiting),
            true,
        );
    }

    /// The next of the four bind writes (A7.1) that is not done yet.
    fn bind(&mut self, cx: &mut Cx<Self>, claim: &PersistentVolumeClaim, pv: &PersistentVolume) {
        let requeue = vec![claim_key(claim), pv_key(pv.name())];
        let full = pv.spec.claim_ref.as_ref().is_some_and(|r| {
            r.name == claim.metadata.name
                && r.namespace == claim.metadata.namespace
                && r.uid == claim.metadata.uid
        });
        if !full {
            let mut v = pv.clone();
            if v.spec.claim_ref.is_none() {
                v.metadata
                    .annotations
                    .insert(names::ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
            }
            v.spec.claim_ref = Some(ObjectReference {
                kind: "PersistentVolumeClaim".into(),
                api_version: "v1".into(),
                namespace: claim.metadata.namespace.clone(),
                name: claim.metadata.name.clone(),
                uid: claim.metadata.uid.clone(),
                resource_version: claim.metadata.resource_version.clone(),
            });
            // Taken: no other claim is offered it while the write is in
            // flight (upstream binds one claim at a time and sees its own
            // write before the next claim's sync).
            if !cx.busy(&pv_key(pv.name())) {
                self.index.take(pv.name());
                self.reserving
                    .insert(claim_key(claim), pv.name().to_string());
            }
            self.call(cx, ApiCall::Update(Object::Pv(v)), requeue);
            return;
        }
        if pv.phase() != PvPhase::Bound {
            let mut v = pv.clone();
            v.status.phase = Some(PvPhase::Bound);
            v.status.message.clear();
            self.call(cx, ApiCall::UpdateStatus(Object::Pv(v)), requeue);
            return;
        }
        if claim.volume_name() != pv.name()
            || !claim.metadata.has_annotation(names::ANN_BIND_COMPLETED)
        {
            let mut c = claim.clone();
            if c.volume_name() != pv.name() {
                c.spec.volume_name = Some(pv.name().to_string());
                c.metadata
                    .annotations
                    .insert(names::ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
            }
            c.metadata
                .annotations
                .insert(names::ANN_BIND_COMPLETED.into(), "yes".into());
            self.call(cx, ApiCall::Update(Object::Pvc(c)), requeue);
            return;
        }
        self.set_claim_phase(cx, claim, PvcPhase::Bound, Some(pv));
    }

    /// Sets a claim's phase (upstream's updateClaimStatus, A7.2): with a
    /// volume the claim takes its access modes, and on the way into Bound
    /// its capacity (or the pre-resize capacity) and, from Pending, its
    /// volumeAttributesClassName; without one they are cleared.
    fn set_claim_phase(
        &mut self,
        cx: &mut Cx<Self>,
        claim: &PersistentVolumeClaim,
        phase: PvcPhase,
        pv: Option<&PersistentVolume>,
    ) {
        // The claim is copied only when its status changes.
        let status = Self::claim_status(claim, phase, pv);
        if status != claim.status {
            let mut c = claim.clone();
            c.status = status;
            self.call(cx, ApiCall::UpdateStatus(Object::Pvc(c)), vec![]);
        }
    }

    /// The status `claim` has in `phase`, with `pv` or without a volume.
    fn claim_status(
        claim: &PersistentVolumeClaim,
        phase: PvcPhase,
        pv: Option<&PersistentVolume>,
    ) -> PvcStatus {
        let mut status = claim.status.clone();
        status.phase = Some(phase.clone());
        let Some(pv) = pv else {
            status.access_modes.clear();
            status.capacity.clear();
            status.current_volume_attributes_class_name = None;
            return status;
        };
        status.access_modes = pv.spec.access_modes.clone();
        if claim.phase() != phase {
            let capacity = pv
                .metadata
                .annotation(names::ANN_PRE_RESIZE_CAPACITY)
                .and_then(|q| Quantity::parse(q).ok())
                .or_else(|| pv.capacity());
            if let Some(q) = capacity {
                status.capacity.insert("storage".into(), q);
            }
        }
        if claim.phase() == PvcPhase::Pending && phase == PvcPhase::Bound {
            status.current_volume_attributes_class_name =
                pv.spec.volume_attributes_class_name.clone();
        }
        status
    }

    /// Sets a volume's phase and message unless the phase is already set
    /// (upstream's updateVolumePhase: the message alone is never rewritten).
    fn set_volume_phase(
        &mut self,
        cx: &mut Cx<Self>,
        pv: &PersistentVolume,
        phase: PvPhase,
        message: &str,
    ) {
        self.set_volume_phase_with_event(cx, pv, phase, message, None);
    }

    /// As [`Binder::set_volume_phase`], announcing `e` once the phase changed
    /// (updateVolumePhaseWithEvent).
    fn set_volume_phase_with_event(
        &mut self,
        cx: &mut Cx<Self>,
        pv: &PersistentVolume,
        phase: PvPhase,
        message: &str,
        e: Option<Event>,
    ) {
        if pv.phase() == phase {
            return;
        }
        let mut v = pv.clone();
        v.status.phase = Some(phase);
        v.status.message = message.to_string();
        self.write(cx, ApiCall::UpdateStatus(Object::Pv(v)), vec![], e, false);
    }
}

fn claim_key(c: &PersistentVolumeClaim) -> ObjectKey {
    pvc_key(&c.metadata.namespace, &c.metadata.name)
}

impl Controller for BinderReconciler {
    type Key = ObjectKey;
    type Call = Pending;
    type Retry = ObjectKey;

    /// A failed write's backoff ran out: the object, and what waited on
    /// it, sync again.
    fn retry(&mut self, cx: &mut Cx<Self>, key: ObjectKey) {
        cx.mark(key);
    }

    /// The PV controller's informers: volumes, claims, classes, pods.
    fn watches(&self, kind: Kind) -> bool {
        matches!(
            kind,
            Kind::PersistentVolume | Kind::PersistentVolumeClaim | Kind::StorageClass | Kind::Pod
        )
    }

    fn observe(&mut self, cx: &mut Cx<Self>, watch: Watch) {
        match watch {
            Watch::Applied(o) => self.applied(cx, o),
            Watch::Deleted(o) => self.forget(cx, &o),
        }
    }

    fn reconcile(&mut self, cx: &mut Cx<Self>, key: ObjectKey) {
        if cx.busy(&key) {
            // Its write's completion marks it again (`completed`).
            return;
        }
        if cx.waiting(&key) {
            // Its last write failed with nothing newer known: it syncs
            // again when its backoff runs out (`retry`) or news of it
            // comes (`applied`), not because another object's pass or
            // failed write marked it.
            return;
        }
        self.syncing = Some(key.clone());
        match key.kind {
            Kind::PersistentVolumeClaim => self.sync_claim(cx, &key),
            Kind::PersistentVolume => self.sync_volume(cx, &key),
            _ => {}
        }
        self.syncing = None;
    }

    fn api_done(&mut self, cx: &mut Cx<Self>, pending: Pending, result: ApiResult) {
        self.completed(cx, pending, result);
    }

    /// Kubernetes' periodic resync ([`Input::Resync`](crate::control::Input::Resync)).
    fn resync(&mut self, cx: &mut Cx<Self>) {
        self.resync_all(cx);
    }

    /// One write per object at a time, and a deferred sync waits on a write
    /// that is really in flight.
    fn invariants(&self, cx: &Cx<Self>) -> Result<(), crate::machine::Broken> {
        crate::machine::one_at_a_time(
            "binder",
            cx.in_flight().map(|p| &p.key),
            |k| cx.busy(k),
            cx.held_count(),
        )?;
        match self.deferred.keys().find(|k| !cx.busy(*k)) {
            Some(k) => Err(format!("binder: syncs wait on {k} with no write in flight").into()),
            None => Ok(()),
        }
    }
}
