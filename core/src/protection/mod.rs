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

use std::collections::BTreeSet;

use crate::control::{ApiCall, ApiResult, Controller, Cx, Engine, Watch};
use crate::model::names::{FINALIZER_PV_PROTECTION, FINALIZER_PVC_PROTECTION};
use crate::model::*;

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

/// What a protection controller has in flight.
#[derive(Debug, Clone, Hash)]
pub enum Call {
    /// A write: the object, the incarnation (UID) written and the version
    /// written against.
    Write(ObjectKey, String, String),
    /// A live list of pods, with the claims it answers for.
    List(BTreeSet<ObjectKey>),
}

/// A protection controller. See the module documentation.
pub type Protection = Engine<ProtectionReconciler>;

/// What a protection controller keeps of its own: what it guards.
#[derive(Debug, Clone, Hash)]
pub struct ProtectionReconciler {
    guarded: Guarded,
}

impl Protection {
    /// A protection controller for `guarded`, with empty memory.
    pub fn new(guarded: Guarded) -> Protection {
        Engine::driving(ProtectionReconciler { guarded }, 1_000, 300_000)
    }

    /// The pvc-protection controller.
    pub fn claims() -> Protection {
        Protection::new(Guarded::Claims)
    }

    /// The pv-protection controller.
    pub fn volumes() -> Protection {
        Protection::new(Guarded::Volumes)
    }

    /// The pods (names, sorted) that keep claim `c` from going.
    pub fn users(&self, c: &PersistentVolumeClaim) -> Vec<String> {
        ProtectionReconciler::users(self.context(), c)
    }
}

impl ProtectionReconciler {
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

    /// Marks what an object's change may unblock: the object itself, or the
    /// claims a pod uses.
    fn mark(&mut self, cx: &mut Cx<Self>, o: &Object) {
        match o {
            Object::Pod(p) if self.guarded == Guarded::Claims => {
                for c in p.claims() {
                    cx.mark(ObjectKey::new(
                        Kind::PersistentVolumeClaim,
                        &p.metadata.namespace,
                        c,
                    ));
                }
            }
            o if o.kind() == self.guarded.kind() => {
                cx.mark(o.key());
            }
            _ => {}
        }
    }

    fn sync(&mut self, cx: &mut Cx<Self>, key: &ObjectKey) {
        if !cx.idle(key) {
            return;
        }
        let Some(shared) = cx.cache().get_shared(key) else {
            return;
        };
        let o = &*shared;
        let finalizer = self.guarded.finalizer();
        let meta = o.meta();
        let has = meta.has_finalizer(finalizer);
        if !meta.deleting() && !has {
            let mut next = o.clone();
            next.meta_mut().add_finalizer(finalizer);
            self.write(cx, key, next);
        } else if meta.deleting() && has && !Self::in_use(cx, o) {
            match o {
                // Ask the API server, not only the cache, before letting go.
                Object::Pvc(c) => self.list_pods(cx, &c.metadata.namespace),
                o => {
                    let mut next = o.clone();
                    next.meta_mut().remove_finalizer(finalizer);
                    self.write(cx, key, next);
                }
            }
        }
    }

    /// A claim being deleted that the cache says is free: its
    /// namespace's pods are listed live, once for every such claim there.
    fn list_pods(&mut self, cx: &mut Cx<Self>, namespace: &str) {
        let claims: BTreeSet<ObjectKey> = cx
            .cache()
            .of_kind(Kind::PersistentVolumeClaim)
            .filter_map(Object::as_pvc)
            .filter(|c| c.metadata.namespace == namespace && Self::may_let_go(cx, c))
            .map(|c| ObjectKey::new(Kind::PersistentVolumeClaim, namespace, &c.metadata.name))
            .filter(|k| cx.idle(k))
            .collect();
        let call = ApiCall::List {
            kind: Kind::Pod,
            namespace: namespace.to_string(),
        };
        cx.api_holding(claims.clone(), call, Call::List(claims));
    }

    /// Being deleted, still held by the finalizer, and free by the cache.
    fn may_let_go(cx: &Cx<Self>, c: &PersistentVolumeClaim) -> bool {
        c.metadata.deleting()
            && c.metadata.has_finalizer(FINALIZER_PVC_PROTECTION)
            && Self::users(cx, c).is_empty()
    }

    fn write(&mut self, cx: &mut Cx<Self>, key: &ObjectKey, next: Object) {
        let meta = next.meta();
        let (uid, rv) = (meta.uid.clone(), meta.resource_version.clone());
        cx.api_holding(
            [key.clone()],
            ApiCall::Update(next),
            Call::Write(key.clone(), uid, rv),
        );
    }

    /// The live list of a namespace's pods came back: each claim it
    /// answers for goes only if neither the cache nor the list shows a pod
    /// using it. The listed pods are not stored (see the module docs).
    fn listed(&mut self, cx: &mut Cx<Self>, claims: BTreeSet<ObjectKey>, result: ApiResult) {
        let ApiResult::Listed(pods) = result else {
            for key in claims {
                cx.fail(key.clone());
                cx.mark(key);
            }
            return;
        };
        for key in claims {
            let Some(Object::Pvc(c)) = cx.cache().get(&key) else {
                continue;
            };
            let (ns, name) = (&c.metadata.namespace, &c.metadata.name);
            let listed_user = pods.iter().any(|p| match p {
                Object::Pod(p) => p.uses_claim(ns, name),
                _ => false,
            });
            if Self::may_let_go(cx, c) && !listed_user {
                let mut next = c.clone();
                next.metadata.remove_finalizer(FINALIZER_PVC_PROTECTION);
                self.write(cx, &key, Object::Pvc(next));
            }
        }
    }

    /// A claim a pod that has not terminated uses (upstream's podUsesPVC),
    /// or a volume that is Bound (upstream's isBeingUsed).
    fn in_use(cx: &Cx<Self>, o: &Object) -> bool {
        match o {
            Object::Pvc(c) => !Self::users(cx, c).is_empty(),
            Object::Pv(pv) => pv.phase() == PvPhase::Bound,
            _ => false,
        }
    }

    /// The pods (names, sorted) that keep claim `c` from going.
    fn users(cx: &Cx<Self>, c: &PersistentVolumeClaim) -> Vec<String> {
        cx.cache()
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

impl Controller for ProtectionReconciler {
    type Key = ObjectKey;
    type Call = Call;
    type Retry = ObjectKey;

    fn retry(&mut self, cx: &mut Cx<Self>, key: ObjectKey) {
        cx.mark(key);
    }

    fn watches(&self, kind: Kind) -> bool {
        ProtectionReconciler::watches(self, kind)
    }

    fn observe(&mut self, cx: &mut Cx<Self>, watch: Watch) {
        let o = match &watch {
            Watch::Applied(o) => {
                if cx.cache().is_news(o) {
                    cx.news(&o.key());
                }
                o.clone()
            }
            Watch::Deleted(o) => o.clone(),
        };
        self.mark(cx, &o);
        cx.apply(watch);
    }

    fn reconcile(&mut self, cx: &mut Cx<Self>, key: ObjectKey) {
        self.sync(cx, &key);
    }

    fn api_done(&mut self, cx: &mut Cx<Self>, call: Call, result: ApiResult) {
        let (key, uid, rv) = match call {
            Call::List(claims) => return self.listed(cx, claims, result),
            Call::Write(key, uid, rv) => (key, uid, rv),
        };
        match result {
            ApiResult::Ok(Some(o)) => {
                cx.succeed(&key);
                cx.cache_mut().apply(o);
            }
            ApiResult::Ok(None) | ApiResult::NotFound => {
                cx.succeed(&key);
                cx.cache_mut().gone(&key, &uid);
            }
            // Changed meanwhile, and the change is already here.
            _ if cx.cache().newer_than(&key, &rv) => {}
            _ => {
                cx.fail(key.clone());
            }
        }
        cx.mark(key);
    }

    /// One write per object at a time.
    fn invariants(&self, cx: &Cx<Self>) -> Result<(), crate::machine::Broken> {
        let writing = cx.in_flight().filter_map(|c| match c {
            Call::Write(k, _, _) => Some(k),
            Call::List(_) => None,
        });
        let n = writing.clone().count();
        crate::machine::one_at_a_time("protection", writing, |_| true, n)
    }
}
