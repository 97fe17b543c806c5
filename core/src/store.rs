//! An API server's object store, pure: resourceVersion on every write,
//! optimistic-concurrency conflicts, status writes apart from spec writes,
//! finalizer-aware deletion, and the watch events each write produces. Used
//! by the tests, the simulator and the lab (a real cluster has the real API
//! server).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::Tick;
use crate::api::{ApiCall, ApiInput, ApiResult, Watch};
use crate::model::{Object, ObjectKey};

/// Objects by key, with a global resourceVersion counter.
#[derive(Debug, Clone, Default)]
pub struct Store {
    /// Shared with the watch events that announced them.
    objects: BTreeMap<ObjectKey, Arc<Object>>,
    version: u64,
    uids: u64,
    /// The StorageObjectInUseProtection admission plugin (on by default in
    /// Kubernetes): every created claim gets `kubernetes.io/pvc-protection`
    /// and every created volume `kubernetes.io/pv-protection`, so that they
    /// cannot go while in use even before the protection controllers saw
    /// them. Off unless set: a store without the protection controllers
    /// would never remove such objects.
    pub admission: bool,
}

/// The version counter through `canon::version`: the explorer counts states
/// equal up to renumbered versions as one.
impl std::hash::Hash for Store {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let Store {
            objects,
            version,
            uids,
            admission,
        } = self;
        (objects, uids, admission).hash(h);
        crate::hasher::canon::version(h, *version);
    }
}

/// A tick as an RFC 3339 timestamp (ticks are milliseconds since 1970).
pub fn timestamp(now: Tick) -> String {
    let secs = now / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// StorageObjectInUseProtection: the protection finalizer of a new claim
/// or volume.
fn admit(o: &mut Object) {
    use crate::model::names::{FINALIZER_PV_PROTECTION, FINALIZER_PVC_PROTECTION};
    match o {
        Object::Pvc(c) => {
            c.metadata.add_finalizer(FINALIZER_PVC_PROTECTION);
        }
        Object::Pv(pv) => {
            pv.metadata.add_finalizer(FINALIZER_PV_PROTECTION);
        }
        _ => {}
    }
}

/// Runs `$body` with `$a` and `$b` bound to two objects of the same kind
/// that have a status (nothing for other pairs).
macro_rules! with_statuses {
    ($x:expr, $y:expr, |$a:ident, $b:ident| $body:expr) => {
        match ($x, $y) {
            (Object::Pv($a), Object::Pv($b)) => $body,
            (Object::Pvc($a), Object::Pvc($b)) => $body,
            (Object::Va($a), Object::Va($b)) => $body,
            (Object::Node($a), Object::Node($b)) => $body,
            (Object::Pod($a), Object::Pod($b)) => $body,
            (Object::Snapshot($a), Object::Snapshot($b)) => $body,
            (Object::Content($a), Object::Content($b)) => $body,
            (Object::GroupSnapshot($a), Object::GroupSnapshot($b)) => $body,
            (Object::GroupContent($a), Object::GroupContent($b)) => $body,
            _ => {}
        }
    };
}

/// A spec write: the written object with the stored status. The written
/// object is taken, not copied; only the kept status is.
fn keep_status(mut written: Object, stored: &Object) -> Object {
    with_statuses!(&mut written, stored, |a, b| a.status = b.status.clone());
    written
}

/// A status write: the stored object with the written status. A claim's
/// status write also carries its annotations, as the API server's
/// PersistentVolumeClaim status strategy resets only the spec (the resizer
/// writes `volume.kubernetes.io/node-expansion-not-required` so).
fn take_status(stored: &Object, mut written: Object) -> Object {
    let mut out = stored.clone();
    if let (Object::Pvc(out), Object::Pvc(written)) = (&mut out, &mut written) {
        out.metadata.annotations = std::mem::take(&mut written.metadata.annotations);
    }
    with_statuses!(&mut out, &mut written, |a, b| a.status =
        std::mem::take(&mut b.status));
    out
}

impl Store {
    /// An empty store.
    pub fn new() -> Store {
        Store::default()
    }

    /// A store with StorageObjectInUseProtection admission, as a cluster's
    /// API server (see [`Store::admission`]).
    pub fn with_admission() -> Store {
        Store {
            admission: true,
            ..Store::default()
        }
    }

    /// The object `key` names.
    pub fn get(&self, key: &ObjectKey) -> Option<&Object> {
        self.objects.get(key).map(|o| &**o)
    }

    /// Every object, in key order.
    pub fn objects(&self) -> impl Iterator<Item = &Object> {
        self.objects.values().map(|o| &**o)
    }

    /// Every object, in key order, shared (as a relist delivers them).
    pub fn shared(&self) -> impl Iterator<Item = &Arc<Object>> {
        self.objects.values()
    }

    /// The store's resourceVersion now.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Gives `o` the next resourceVersion of the counter `version`.
    fn stamp(version: &mut u64, o: &mut Object) {
        *version += 1;
        o.meta_mut().resource_version = version.to_string();
    }

    /// Carries out one API call at `now`; returns the answer and the watch
    /// events it produced, in order. See [`Store::write`], which takes the
    /// call and so does not copy the object it writes.
    pub fn apply(&mut self, now: Tick, call: &ApiCall) -> (ApiResult, Vec<Watch>) {
        self.write(now, call.clone())
    }

    /// Carries out the API call a machine polled as `op`: its answer, then
    /// the watch events the call produced, go into `done` in the order the
    /// machine must be told them. Returns the watch events too, for the
    /// other machines that watch.
    pub fn serve<I: ApiInput>(
        &mut self,
        now: Tick,
        op: crate::OpId,
        call: ApiCall,
        done: &mut std::collections::VecDeque<I>,
    ) -> Vec<Watch> {
        let (result, watches) = self.write(now, call);
        done.push_back(I::answer(op, result));
        done.extend(watches.iter().cloned().map(I::watch));
        watches
    }

    /// Carries out one API call at `now`, taking it; returns the answer and
    /// the watch events it produced, in order.
    pub fn write(&mut self, now: Tick, call: ApiCall) -> (ApiResult, Vec<Watch>) {
        match call {
            ApiCall::List { kind, namespace } => (
                ApiResult::Listed(
                    self.objects
                        .values()
                        .filter(|o| o.kind() == kind && o.meta().namespace == namespace)
                        .map(|o| (**o).clone())
                        .collect(),
                ),
                vec![],
            ),
            ApiCall::Get(key) => match self.objects.get(&key) {
                Some(o) => (ApiResult::Ok(Some(o.clone())), vec![]),
                None => (ApiResult::NotFound, vec![]),
            },
            ApiCall::Create(mut o) => {
                let key = o.key();
                if self.objects.contains_key(&key) {
                    return (ApiResult::AlreadyExists, vec![]);
                }
                if self.admission {
                    admit(&mut o);
                }
                let meta = o.meta_mut();
                if meta.uid.is_empty() {
                    self.uids += 1;
                    meta.uid = format!("uid-{}", self.uids);
                }
                meta.creation_timestamp
                    .get_or_insert_with(|| timestamp(now));
                meta.deletion_timestamp = None;
                Self::stamp(&mut self.version, &mut o);
                let shared = Arc::new(o);
                self.objects.insert(key, shared.clone());
                (
                    ApiResult::Ok(Some(shared.clone())),
                    vec![Watch::Applied(shared)],
                )
            }
            ApiCall::Update(o) => self.update(o, true),
            ApiCall::RemoveFinalizer {
                key,
                uid,
                finalizer,
            } => {
                let Some(current) = self.objects.get(&key) else {
                    return (ApiResult::NotFound, vec![]);
                };
                if !uid.is_empty() && current.meta().uid != uid {
                    return (ApiResult::NotFound, vec![]);
                }
                // A spec write against the current version: it cannot
                // conflict, and nothing else changes.
                let mut next = (**current).clone();
                next.meta_mut().remove_finalizer(&finalizer);
                self.update(next, true)
            }
            ApiCall::UpdateStatus(o) => self.update(o, false),
            ApiCall::Delete(key) => self.delete(now, key),
        }
    }

    /// A spec write (`spec`) or a status write of `o`.
    fn update(&mut self, o: Object, spec: bool) -> (ApiResult, Vec<Watch>) {
        let key = o.key();
        // The object's slot, looked up once: the new version replaces the
        // old in place.
        let Some(slot) = self.objects.get_mut(&key) else {
            return (ApiResult::NotFound, vec![]);
        };
        let current = &**slot;
        let rv = &o.meta().resource_version;
        if !rv.is_empty() && *rv != current.meta().resource_version {
            return (ApiResult::Conflict, vec![]);
        }
        let mut next = if spec {
            let mut n = keep_status(o, current);
            // Spec writes cannot clear what only the server sets.
            let (meta, was) = (n.meta_mut(), current.meta());
            meta.uid.clone_from(&was.uid);
            meta.creation_timestamp.clone_from(&was.creation_timestamp);
            meta.deletion_timestamp.clone_from(&was.deletion_timestamp);
            n
        } else {
            take_status(current, o)
        };
        if next == *current {
            return (ApiResult::Ok(Some(slot.clone())), vec![]);
        }
        Self::stamp(&mut self.version, &mut next);
        if next.meta().deleting() && next.meta().finalizers.is_empty() {
            self.objects.remove(&key);
            return (ApiResult::Ok(None), vec![Watch::Deleted(Arc::new(next))]);
        }
        let shared = Arc::new(next);
        *slot = shared.clone();
        (
            ApiResult::Ok(Some(shared.clone())),
            vec![Watch::Applied(shared)],
        )
    }

    /// A delete of `key`: at once without finalizers, else marked.
    fn delete(&mut self, now: Tick, key: ObjectKey) -> (ApiResult, Vec<Watch>) {
        let Some(current) = self.objects.get(&key) else {
            return (ApiResult::NotFound, vec![]);
        };
        if current.meta().deleting() && !current.meta().finalizers.is_empty() {
            return (ApiResult::Ok(Some(current.clone())), vec![]);
        }
        let mut o = (**current).clone();
        if o.meta().finalizers.is_empty() {
            self.objects.remove(&key);
            Self::stamp(&mut self.version, &mut o);
            return (ApiResult::Ok(None), vec![Watch::Deleted(Arc::new(o))]);
        }
        o.meta_mut().deletion_timestamp = Some(timestamp(now));
        Self::stamp(&mut self.version, &mut o);
        let shared = Arc::new(o);
        self.objects.insert(key, shared.clone());
        (
            ApiResult::Ok(Some(shared.clone())),
            vec![Watch::Applied(shared)],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::*;

    #[test]
    fn writes_conflict_on_a_stale_version_and_status_is_separate() {
        let mut s = Store::new();
        let (r, w) = s.apply(0, &ApiCall::Create(Object::Pv(PersistentVolume::new("pv"))));
        let Some(Object::Pv(created)) = r.into_object() else {
            panic!()
        };
        assert_eq!(w.len(), 1);
        assert!(!created.metadata.uid.is_empty());
        let mut a = created.clone();
        a.status.phase = Some(PvPhase::Available);
        a.spec.mount_options = vec!["ignored-by-status-write".into()];
        let (r, _) = s.apply(1, &ApiCall::UpdateStatus(Object::Pv(a.clone())));
        let Some(Object::Pv(after)) = r.into_object() else {
            panic!()
        };
        assert_eq!(after.phase(), PvPhase::Available);
        assert!(
            after.spec.mount_options.is_empty(),
            "a status write leaves the spec alone"
        );
        let (r, w) = s.apply(2, &ApiCall::UpdateStatus(Object::Pv(a)));
        assert_eq!(r, ApiResult::Conflict);
        assert!(w.is_empty());
    }

    #[test]
    fn delete_waits_for_finalizers() {
        let mut s = Store::new();
        let mut pv = PersistentVolume::new("pv");
        pv.metadata.finalizers.push("f".into());
        s.apply(0, &ApiCall::Create(Object::Pv(pv)));
        let key = ObjectKey::new(Kind::PersistentVolume, "", "pv");
        let (r, _) = s.apply(5000, &ApiCall::Delete(key.clone()));
        let Some(Object::Pv(marked)) = r.into_object() else {
            panic!()
        };
        assert_eq!(
            marked.metadata.deletion_timestamp.as_deref(),
            Some("1970-01-01T00:00:05Z")
        );
        let mut cleared = marked.clone();
        cleared.metadata.finalizers.clear();
        let (r, w) = s.apply(6000, &ApiCall::Update(Object::Pv(cleared)));
        assert_eq!(r, ApiResult::Ok(None));
        assert!(matches!(&w[..], [Watch::Deleted(_)]));
        assert!(s.get(&key).is_none());
    }

    #[test]
    fn a_finalizer_comes_off_a_changed_object_of_its_incarnation_alone() {
        let mut s = Store::new();
        let mut pv = PersistentVolume::new("pv");
        pv.metadata.finalizers = vec!["a".into(), "b".into()];
        let (r, _) = s.apply(0, &ApiCall::Create(Object::Pv(pv)));
        let created = r.into_object().unwrap();
        let key = created.key();
        // Someone else writes it: the version the finalizer's remover saw
        // is stale, and that does not matter.
        let mut theirs = created.clone();
        theirs.meta_mut().labels.insert("x".into(), "y".into());
        s.apply(1, &ApiCall::Update(theirs));
        let remove = |uid: &str, f: &str| ApiCall::RemoveFinalizer {
            key: key.clone(),
            uid: uid.into(),
            finalizer: f.into(),
        };
        let (r, w) = s.apply(2, &remove("uid-of-another", "a"));
        assert_eq!((r, w.len()), (ApiResult::NotFound, 0));
        let (r, w) = s.apply(3, &remove(&created.meta().uid, "a"));
        let after = r.into_object().unwrap();
        assert_eq!(after.meta().finalizers, ["b"]);
        assert_eq!(after.meta().labels.get("x"), Some("y"));
        assert_eq!(w.len(), 1);
        let (_, w) = s.apply(4, &remove(&created.meta().uid, "a"));
        assert!(
            w.is_empty(),
            "taking off an absent finalizer changes nothing"
        );
        s.apply(5, &ApiCall::Delete(key.clone()));
        let (r, w) = s.apply(6, &remove(&created.meta().uid, "b"));
        assert_eq!(r, ApiResult::Ok(None));
        assert!(matches!(&w[..], [Watch::Deleted(_)]));
    }

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00Z");
        assert_eq!(timestamp(1_763_683_200_000), "2025-11-21T00:00:00Z");
    }
}
