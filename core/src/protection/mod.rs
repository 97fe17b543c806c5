//! pvc-protection and pv-protection: kube-controller-manager's
//! PVCProtectionController and PVProtectionController as one sans-IO machine
//! that guards either claims or volumes.
//!
//! * Claims: the `kubernetes.io/pvc-protection` finalizer is on every claim;
//!   it is removed only once the claim is being deleted and no pod of its
//!   namespace that has not terminated uses it (pods not yet scheduled
//!   count: the scheduler may still place them).
//! * Volumes: the `kubernetes.io/pv-protection` finalizer is on every volume;
//!   it is removed only once the volume is being deleted and is not Bound.
//!
//! Guarantees: a claim in use, or a bound volume, is never removed by the
//! API server while this machine runs (the finalizer holds it Terminating).
//! The StorageObjectInUseProtection admission plugin adds the finalizers at
//! creation ([`crate::store::Store::admission`]); this machine adds them to
//! objects that predate it. One write per object at a time; a failed write
//! is retried with backoff.
//!
//! As upstream, a claim whose pods the cache says are gone is let go only
//! after a live list of its namespace's pods (the watch may be behind a pod
//! just created) finds none either. A pod created after that list is not
//! seen: the kubelet refuses to start a pod whose claim is being deleted.
//! One list answers for every claim of its namespace that was already
//! being deleted, and free by the cache, when it was asked for (a mass
//! delete lists each namespace once, not once per claim).
//!
//! A write that fails is retried at once only when a newer version of its
//! object is already here; otherwise after its backoff, or sooner when the
//! watch brings news of the object. A live list's pods decide, and are
//! never stored: an answer older than the watch must not bring back a pod
//! the watch saw go.

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::control::{ApiCall, ApiResult, Backoff, Cache, Effect, Input, Ops, Watch};
use crate::model::names::{FINALIZER_PV_PROTECTION, FINALIZER_PVC_PROTECTION};
use crate::model::*;
use crate::{OpId, Tick};

/// What a protection controller guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Guarded {
    /// PersistentVolumeClaims in use by pods (PVCProtectionController).
    Claims,
    /// Bound PersistentVolumes (PVProtectionController).
    Volumes,
}

impl Guarded {
    fn kind(self) -> Kind {
        match self {
            Guarded::Claims => Kind::PersistentVolumeClaim,
            Guarded::Volumes => Kind::PersistentVolume,
        }
    }

    fn finalizer(self) -> &'static str {
        match self {
            Guarded::Claims => FINALIZER_PVC_PROTECTION,
            Guarded::Volumes => FINALIZER_PV_PROTECTION,
        }
    }
}

/// A protection controller. See the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct Protection {
    guarded: Guarded,
    cache: Cache,
    dirty: BTreeSet<ObjectKey>,
    /// Writes in flight: the object, the incarnation (UID) written and the
    /// version written against.
    writing: BTreeMap<OpId, (ObjectKey, String, String)>,
    /// Lists of pods in flight, with the claims each answers for.
    listing: BTreeMap<OpId, BTreeSet<ObjectKey>>,
    backoff: Backoff<ObjectKey>,
    queue: VecDeque<Effect>,
    ops: Ops,
    now: Tick,
    /// Restarted and waiting for `Input::Synced`.
    unsynced: bool,
}

impl Protection {
    /// A protection controller for `guarded`, with empty memory.
    pub fn new(guarded: Guarded) -> Protection {
        Protection {
            guarded,
            cache: Cache::default(),
            dirty: BTreeSet::new(),
            writing: BTreeMap::new(),
            listing: BTreeMap::new(),
            backoff: Backoff::new(1_000, 300_000),
            queue: VecDeque::new(),
            ops: Ops::default(),
            now: 0,
            unsynced: false,
        }
    }

    /// The pvc-protection controller.
    pub fn claims() -> Protection {
        Protection::new(Guarded::Claims)
    }

    /// The pv-protection controller.
    pub fn volumes() -> Protection {
        Protection::new(Guarded::Volumes)
    }

    /// What it protects.
    pub fn guarded(&self) -> Guarded {
        self.guarded
    }

    /// The kinds this controller's informers watch: claims and pods, or
    /// volumes.
    pub fn watches(&self, kind: Kind) -> bool {
        match self.guarded {
            Guarded::Claims => matches!(kind, Kind::PersistentVolumeClaim | Kind::Pod),
            Guarded::Volumes => kind == Kind::PersistentVolume,
        }
    }

    fn on_input(&mut self, now: Tick, input: Input) {
        self.now = self.now.max(now);
        match input {
            Input::Watch(Watch::Applied(o)) => {
                if self.cache.is_news(&o) {
                    self.backoff.news(&o.key());
                }
                self.mark(&o);
                self.cache.apply(o);
            }
            Input::Watch(Watch::Deleted(o)) => {
                self.mark(&o);
                self.cache.delete(&o);
            }
            Input::ApiDone { op, result } => {
                if let Some(claims) = self.listing.remove(&op) {
                    return self.listed(claims, result);
                }
                let Some((key, uid, rv)) = self.writing.remove(&op) else {
                    return;
                };
                match result {
                    ApiResult::Ok(Some(o)) => {
                        self.backoff.succeed(&key);
                        self.cache.apply(o);
                    }
                    ApiResult::Ok(None) | ApiResult::NotFound => {
                        self.backoff.succeed(&key);
                        self.cache.gone(&key, &uid);
                    }
                    // Changed meanwhile, and the change is already here.
                    _ if self.cache.newer_than(&key, &rv) => {}
                    _ => {
                        self.backoff.fail(key.clone(), self.now);
                    }
                }
                self.dirty.insert(key);
            }
            Input::CsiDone { .. } => {}
            Input::Synced | Input::Restarted | Input::Resync | Input::Reconstruct(_) => {}
        }
    }

    /// Marks what an object's change may unblock: the object itself, or the
    /// claims a pod uses.
    fn mark(&mut self, o: &Object) {
        match o {
            Object::Pod(p) if self.guarded == Guarded::Claims => {
                for c in p.claims() {
                    self.dirty.insert(ObjectKey::new(
                        Kind::PersistentVolumeClaim,
                        &p.metadata.namespace,
                        c,
                    ));
                }
            }
            o if o.kind() == self.guarded.kind() => {
                self.dirty.insert(o.key());
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

    /// One write per object at a time.
    fn invariants(&self) -> Result<(), String> {
        let writing = self.writing.values().map(|(k, _, _)| k);
        crate::machine::one_at_a_time("protection", writing.clone(), |_| true, writing.len())
    }

    fn on_timeout(&mut self, now: Tick) {
        self.now = self.now.max(now);
        for k in self.backoff.fire_due(self.now) {
            self.dirty.insert(k);
        }
    }

    fn busy(&self, key: &ObjectKey) -> bool {
        self.writing.values().any(|(k, _, _)| k == key)
            || self.listing.values().any(|claims| claims.contains(key))
    }

    fn sync(&mut self, key: &ObjectKey) {
        if self.busy(key) || self.backoff.waiting(key, self.now) {
            return;
        }
        let Some(o) = self.cache.get(key).cloned() else {
            return;
        };
        let finalizer = self.guarded.finalizer();
        let meta = o.meta();
        let has = meta.has_finalizer(finalizer);
        if !meta.deleting() && !has {
            let mut next = o.clone();
            next.meta_mut().add_finalizer(finalizer);
            self.write(key, next);
        } else if meta.deleting() && has && !self.in_use(&o) {
            match o {
                // Ask the API server, not only the cache, before letting go.
                Object::Pvc(c) => self.list_pods(&c.metadata.namespace),
                mut next => {
                    next.meta_mut().remove_finalizer(finalizer);
                    self.write(key, next);
                }
            }
        }
    }

    /// A claim being deleted that the cache says is free: its
    /// namespace's pods are listed live, once for every such claim there.
    fn list_pods(&mut self, namespace: &str) {
        let claims: BTreeSet<ObjectKey> = self
            .cache
            .of_kind(Kind::PersistentVolumeClaim)
            .filter_map(Object::as_pvc)
            .filter(|c| c.metadata.namespace == namespace && self.may_let_go(c))
            .map(|c| ObjectKey::new(Kind::PersistentVolumeClaim, namespace, &c.metadata.name))
            .filter(|k| !self.busy(k) && !self.backoff.waiting(k, self.now))
            .collect();
        let op = self.ops.issue();
        self.listing.insert(op, claims);
        self.queue.push_back(Effect::Api {
            op,
            call: ApiCall::List {
                kind: Kind::Pod,
                namespace: namespace.to_string(),
            },
        });
    }

    /// Being deleted, still held by the finalizer, and free by the cache.
    fn may_let_go(&self, c: &PersistentVolumeClaim) -> bool {
        c.metadata.deleting()
            && c.metadata.has_finalizer(FINALIZER_PVC_PROTECTION)
            && self.users(c).is_empty()
    }

    fn write(&mut self, key: &ObjectKey, next: Object) {
        let op = self.ops.issue();
        let meta = next.meta();
        let (uid, rv) = (meta.uid.clone(), meta.resource_version.clone());
        self.writing.insert(op, (key.clone(), uid, rv));
        self.queue.push_back(Effect::Api {
            op,
            call: ApiCall::Update(next),
        });
    }

    /// The live list of a namespace's pods came back: each claim it
    /// answers for goes only if neither the cache nor the list shows a pod
    /// using it. The listed pods are not stored (see the module docs).
    fn listed(&mut self, claims: BTreeSet<ObjectKey>, result: ApiResult) {
        let ApiResult::Listed(pods) = result else {
            for key in claims {
                self.backoff.fail(key.clone(), self.now);
                self.dirty.insert(key);
            }
            return;
        };
        for key in claims {
            let Some(Object::Pvc(c)) = self.cache.get(&key) else {
                continue;
            };
            let (ns, name) = (&c.metadata.namespace, &c.metadata.name);
            let listed_user = pods.iter().any(|p| match p {
                Object::Pod(p) => p.uses_claim(ns, name),
                _ => false,
            });
            if self.may_let_go(c) && !listed_user {
                let mut next = c.clone();
                next.metadata.remove_finalizer(FINALIZER_PVC_PROTECTION);
                self.write(&key, Object::Pvc(next));
            }
        }
    }

    /// A claim a pod that has not terminated uses (upstream's podUsesPVC),
    /// or a volume that is Bound (upstream's isBeingUsed).
    fn in_use(&self, o: &Object) -> bool {
        match o {
            Object::Pvc(c) => !self.users(c).is_empty(),
            Object::Pv(pv) => pv.phase() == PvPhase::Bound,
            _ => false,
        }
    }

    /// The pods (names, sorted) that keep claim `c` from going.
    pub fn users(&self, c: &PersistentVolumeClaim) -> Vec<String> {
        self.cache
            .of_kind(Kind::Pod)
            .filter_map(|o| match o {
                Object::Pod(p) if p.uses_claim(&c.metadata.namespace, &c.metadata.name) => {
                    Some(p.metadata.name.clone())
                }
                _ => None,
            })
            .collect()
    }
}

crate::impl_machine!(Protection);
