//! The object cache a control-plane machine keeps from its watches.

use std::collections::BTreeSet;
use std::hash::Hash;
use std::sync::Arc;

use crate::model::{Kind, Object, ObjectKey, Shared, Variant};

/// Objects by key (kind, namespace, name). They are shared with the watch
/// events that brought them (and with the other machines' caches): storing
/// one never copies it, the set orders them by the key each holds, and
/// finding one by name borrows the names asked for. An update older than
/// the cached one (by numeric
/// resourceVersion) is ignored (A10.2); the same version is applied again.
///
/// An incarnation known to be gone (a write's answer said so) is never
/// brought back by a late watch event about it: its UID is remembered until
/// its own Deleted event, the last its watch delivers.
///
/// Nor is an incarnation whose Deleted event came brought back by the late
/// answer to a write made before it (the answer carries the version that
/// write made, older than the delete): its UID is kept as a tombstone while
/// writes may still be in flight ([`Cache::settled`] forgets them; the
/// latest [`TOMBSTONES`] at most are kept meanwhile).
#[derive(Debug, Clone, Default, Hash)]
pub struct Cache {
    objects: BTreeSet<Entry>,
    gone: BTreeSet<Incarnation>,
    deleted: BTreeSet<Incarnation>,
    deleted_order: std::collections::VecDeque<Incarnation>,
}

/// An incarnation's UID as the cache remembers it once the object is
/// gone: 128 bits of it, held inside the sets' nodes. As strings, thousands
/// of tombstones were two small allocations each, made during a mass delete
/// among short-lived ones and kept after it, where they can keep pages of
/// the heap resident once everything else is freed. Two UIDs share a digest
/// with a chance of one in 2^128.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Incarnation(u128);

impl Incarnation {
    fn of(uid: &str) -> Incarnation {
        use std::hash::{Hash, Hasher};
        let half = |salt: u8| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (salt, uid).hash(&mut h);
            u128::from(h.finish())
        };
        Incarnation(half(1) << 64 | half(2))
    }
}

/// A cached object, ordered by the key the object itself holds (kind,
/// namespace, name): the set keeps one pointer per object, not a copy of
/// its key beside it — every role caches the claims and volumes it
/// watches, so that copy was made a dozen times per claim.
#[derive(Debug, Clone)]
struct Entry(Arc<Object>);

/// An object's key as borrowed parts: what entries are ordered and found by.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Parts<'a>(Kind, &'a str, &'a str);

impl<'a> Parts<'a> {
    fn of(key: &'a ObjectKey) -> Parts<'a> {
        Parts(key.kind, &key.namespace, &key.name)
    }
}

/// What has a key: an entry, or the parts looked up.
trait Keyed {
    fn parts(&self) -> Parts<'_>;
}

impl Keyed for Entry {
    fn parts(&self) -> Parts<'_> {
        let meta = self.0.meta();
        Parts(self.0.kind(), &meta.namespace, &meta.name)
    }
}

impl Keyed for Parts<'_> {
    fn parts(&self) -> Parts<'_> {
        Parts(self.0, self.1, self.2)
    }
}

impl PartialEq for dyn Keyed + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn Keyed + '_ {}

impl PartialOrd for dyn Keyed + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// As [`ObjectKey`]'s order: kind, then namespace, then name, bytewise.
impl Ord for dyn Keyed + '_ {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&other.parts())
    }
}

impl<'a> std::borrow::Borrow<dyn Keyed + 'a> for Entry {
    fn borrow(&self) -> &(dyn Keyed + 'a) {
        self
    }
}

/// Entries are one per key: equal, and ordered, by key alone.
impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.parts().cmp(&other.parts())
    }
}

/// The object, whole (its key is part of it): two caches hash alike when
/// they hold the same objects.
impl Hash for Entry {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.hash(h);
    }
}

/// The entry `parts` names, as the set looks it up.
fn at<'a>(parts: &'a Parts<'a>) -> &'a (dyn Keyed + 'a) {
    parts
}

/// How many tombstones of deleted incarnations a cache keeps at most.
pub const TOMBSTONES: usize = 4096;

fn version(o: &Object) -> Option<u64> {
    o.meta().resource_version.parse().ok()
}

/// How `o`'s version compares with `cached`'s (by numeric
/// resourceVersion); `None` when either is not a number.
fn against(o: &Object, cached: &Object) -> Option<std::cmp::Ordering> {
    Some(version(o)?.cmp(&version(cached)?))
}

impl Cache {
    /// Stores `o` unless the cache holds a newer version; returns whether it did.
    pub fn apply(&mut self, o: impl Into<Arc<Object>>) -> bool {
        let o: Arc<Object> = o.into();
        if self.known_gone(&o) {
            return false;
        }
        let entry = Entry(o);
        if let Some(cached) = self.objects.get(at(&entry.parts()))
            && against(&entry.0, &cached.0) == Some(std::cmp::Ordering::Less)
        {
            return false;
        }
        self.objects.replace(entry);
        true
    }

    /// Takes `o` in place of the cached object when they are equal — the
    /// same version, read twice (a write's answer and its watch event) —
    /// so that one copy is kept, the one the other readers share. True
    /// when it did.
    pub fn adopt(&mut self, o: Arc<Object>) -> bool {
        let entry = Entry(o);
        match self.objects.get(at(&entry.parts())) {
            Some(cached) if !Arc::ptr_eq(&cached.0, &entry.0) && *cached.0 == *entry.0 => {
                self.objects.replace(entry);
                true
            }
            _ => false,
        }
    }

    /// Stores `o` as [`Cache::apply`] does, and answers the copy to hand
    /// on: the one already cached when `o` is the same version read again
    /// (equal to it) — a write's answer and its watch event, whichever came
    /// first — so that the process keeps one copy of it, not two.
    pub fn intern(&mut self, o: Arc<Object>) -> Arc<Object> {
        if let Some(kept) = self.get_shared(&o.key())
            && (Arc::ptr_eq(&kept, &o) || *kept == *o)
        {
            return kept;
        }
        self.apply(o.clone());
        o
    }

    /// True when `o` is a version the cache has not seen: not an
    /// incarnation known to be gone, and newer than what is cached (by
    /// numeric resourceVersion; an unnumbered version is always news).
    pub fn is_news(&self, o: &Object) -> bool {
        let meta = o.meta();
        !self.known_gone(o)
            && self
                .find(o.kind(), &meta.namespace, &meta.name)
                .is_none_or(|cached| {
                    against(o, cached).is_none_or(|c| c == std::cmp::Ordering::Greater)
                })
    }

    /// True when the cache holds a version of the object `key` names newer
    /// than `rv` (by numeric resourceVersion): after a write made against
    /// `rv` failed, news about the object has already arrived, so a retry
    /// may go at once (it will not be the same call).
    pub fn newer_than(&self, key: &ObjectKey, rv: &str) -> bool {
        let (Some(cached), Ok(rv)) = (self.get(key), rv.parse::<u64>()) else {
            return false;
        };
        version(cached).is_some_and(|v| v > rv)
    }

    /// True when `o` is an incarnation a write's answer said is gone, or
    /// one whose Deleted event came.
    fn known_gone(&self, o: &Object) -> bool {
        let uid = &o.meta().uid;
        if uid.is_empty() || (self.gone.is_empty() && self.deleted.is_empty()) {
            return false;
        }
        let uid = Incarnation::of(uid);
        self.gone.contains(&uid) || self.deleted.contains(&uid)
    }

    /// No write is in flight any more: no late answer can come, so the
    /// tombstones of deleted incarnations are forgotten.
    pub fn settled(&mut self) {
        if !self.deleted.is_empty() {
            self.deleted.clear();
            // Its room goes too: a mass delete leaves thousands of slots.
            self.deleted_order = std::collections::VecDeque::new();
        }
    }

    fn tombstone(&mut self, uid: &str) {
        if uid.is_empty() {
            return;
        }
        let uid = Incarnation::of(uid);
        if !self.deleted.insert(uid) {
            return;
        }
        self.deleted_order.push_back(uid);
        if self.deleted_order.len() > TOMBSTONES
            && let Some(oldest) = self.deleted_order.pop_front()
        {
            self.deleted.remove(&oldest);
        }
    }

    /// Forgets the object `key` names; returns it.
    pub fn remove(&mut self, key: &ObjectKey) -> Option<Object> {
        self.objects
            .take(at(&Parts::of(key)))
            .map(|e| Arc::unwrap_or_clone(e.0))
    }

    /// A watch said `o` was deleted: forget it, unless what is cached is a
    /// newer incarnation (created again after that delete, and already
    /// known from a write's answer). Returns what was forgotten.
    pub fn delete(&mut self, o: &Object) -> Option<Object> {
        let meta = o.meta();
        if !meta.uid.is_empty() {
            self.gone.remove(&Incarnation::of(&meta.uid));
        }
        self.tombstone(&meta.uid);
        if let Some(cached) = self.find(o.kind(), &meta.namespace, &meta.name)
            && against(o, cached) == Some(std::cmp::Ordering::Less)
        {
            return None;
        }
        self.remove(&o.key())
    }

    /// A write's answer says the incarnation `uid` of the object `key`
    /// names is gone: forget it, and ignore any late event about it. When
    /// the cache holds another incarnation (created again, its watch event
    /// already here while the answer was late) that one stays. An empty
    /// `uid` (a delete by name) means whatever incarnation is cached.
    pub fn gone(&mut self, key: &ObjectKey, uid: &str) -> Option<Object> {
        let cached = self.get(key)?;
        if !uid.is_empty() && cached.meta().uid != uid {
            return None;
        }
        let o = self.remove(key)?;
        if !o.meta().uid.is_empty() {
            self.gone.insert(Incarnation::of(&o.meta().uid));
        }
        Some(o)
    }

    /// The object `key` names.
    pub fn get(&self, key: &ObjectKey) -> Option<&Object> {
        self.find(key.kind, &key.namespace, &key.name)
    }

    /// The object `key` names, shared with the cache (no copy): a pass can
    /// hold it while it changes the machine.
    pub fn get_shared(&self, key: &ObjectKey) -> Option<Arc<Object>> {
        self.objects.get(at(&Parts::of(key))).map(|e| e.0.clone())
    }

    /// The object of `kind` named `name` in `namespace` ("" when
    /// cluster-scoped), found without allocating.
    pub fn find(&self, kind: Kind, namespace: &str, name: &str) -> Option<&Object> {
        self.objects
            .get(at(&Parts(kind, namespace, name)))
            .map(|e| &*e.0)
    }

    /// The `T` named `name` in `namespace`, shared with the cache (no copy).
    pub fn shared<T: Variant>(&self, namespace: &str, name: &str) -> Option<Shared<T>> {
        let e = self.objects.get(at(&Parts(T::KIND, namespace, name)))?;
        Shared::new(e.0.clone())
    }

    /// Every object, in key order.
    pub fn values(&self) -> impl Iterator<Item = &Object> {
        self.objects.iter().map(|e| &*e.0)
    }

    /// The shared objects of one kind, in key order.
    fn kind(&self, kind: Kind) -> impl Iterator<Item = &Arc<Object>> {
        use std::ops::Bound;
        let first = Parts(kind, "", "");
        self.objects
            .range::<dyn Keyed, _>((Bound::Included(at(&first)), Bound::Unbounded))
            .take_while(move |e| e.0.kind() == kind)
            .map(|e| &e.0)
    }

    /// Objects of one kind, in key order.
    pub fn of_kind(&self, kind: Kind) -> impl Iterator<Item = &Object> {
        self.kind(kind).map(|o| &**o)
    }

    /// Every `T`, in key order, shared with the cache (no copy).
    pub fn shared_all<T: Variant>(&self) -> impl Iterator<Item = Shared<T>> + '_ {
        self.kind(T::KIND).filter_map(|o| Shared::new(o.clone()))
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Node, PersistentVolume};

    #[test]
    fn a_late_answer_about_an_old_incarnation_leaves_the_new_one() {
        let mut c = Cache::default();
        let mut new = PersistentVolume::new("v");
        new.metadata.uid = "uid-2".into();
        new.metadata.resource_version = "7".into();
        c.apply(Object::Pv(new.clone()));
        let key = Object::Pv(new.clone()).key();
        assert!(c.gone(&key, "uid-1").is_none(), "the new incarnation went");
        assert!(c.get(&key).is_some());
        assert!(c.gone(&key, "uid-2").is_some());
        assert!(
            !c.apply(Object::Pv(new)),
            "a late event about a gone incarnation came back"
        );
    }

    #[test]
    fn a_late_answer_about_a_deleted_incarnation_does_not_bring_it_back() {
        let mut c = Cache::default();
        let at = |rv: &str| {
            let mut v = PersistentVolume::new("v");
            v.metadata.uid = "uid-1".into();
            v.metadata.resource_version = rv.into();
            Object::Pv(v)
        };
        c.apply(at("5"));
        c.delete(&at("9"));
        assert!(
            !c.apply(at("7")),
            "the answer of a write made before the delete"
        );
        assert!(c.get(&at("7").key()).is_none());
        let mut again = PersistentVolume::new("v");
        again.metadata.uid = "uid-2".into();
        again.metadata.resource_version = "11".into();
        assert!(c.apply(Object::Pv(again)), "a new incarnation is welcome");
        c.settled();
        assert!(
            c.is_news(&at("12")),
            "no write in flight: the tombstone is gone"
        );
        assert_eq!(c.deleted_order.capacity(), 0, "and its room with it");
    }

    #[test]
    fn a_version_read_twice_is_one_copy_whichever_came_first() {
        let mut c = Cache::default();
        let mut v = PersistentVolume::new("v");
        v.metadata.resource_version = "5".into();
        let answer = Arc::new(Object::Pv(v.clone()));
        assert!(Arc::ptr_eq(&c.intern(answer.clone()), &answer));
        // Its watch event, read apart: the answer's copy is handed on.
        let echo = Arc::new(Object::Pv(v.clone()));
        assert!(Arc::ptr_eq(&c.intern(echo), &answer));
        // A newer version is news: its own copy, kept.
        v.metadata.resource_version = "6".into();
        let newer = Arc::new(Object::Pv(v));
        assert!(Arc::ptr_eq(&c.intern(newer.clone()), &newer));
        assert!(Arc::ptr_eq(&c.get_shared(&newer.key()).unwrap(), &newer));
    }

    #[test]
    fn the_echo_of_a_write_is_adopted_only_when_it_is_the_same() {
        let mut c = Cache::default();
        let mut v = PersistentVolume::new("v");
        v.metadata.resource_version = "5".into();
        c.apply(Object::Pv(v.clone()));
        let echo = Arc::new(Object::Pv(v.clone()));
        assert!(c.adopt(echo.clone()), "the same version read twice");
        assert!(Arc::ptr_eq(&c.get_shared(&echo.key()).unwrap(), &echo));
        assert!(!c.adopt(echo.clone()), "already the one kept");
        let mut other = v.clone();
        other.metadata.annotations.insert("a".into(), "b".into());
        assert!(!c.adopt(Arc::new(Object::Pv(other))), "not the same object");
        assert!(Arc::ptr_eq(&c.get_shared(&echo.key()).unwrap(), &echo));
        assert!(!c.adopt(Arc::new(Object::Pv(PersistentVolume::new("w")))));
        assert!(
            c.get(&Object::Pv(PersistentVolume::new("w")).key())
                .is_none()
        );
    }

    #[test]
    fn keeps_key_order_ignores_older_versions_and_counts() {
        let mut c = Cache::default();
        let mut b = PersistentVolume::new("b");
        b.metadata.resource_version = "5".into();
        assert!(c.apply(Object::Pv(b.clone())));
        let mut older = b.clone();
        older.metadata.resource_version = "4".into();
        assert!(!c.apply(Object::Pv(older)), "an older version is ignored");
        c.apply(Object::Pv(PersistentVolume::new("a")));
        c.apply(Object::Node(Node::new("n")));
        let names: Vec<String> = c
            .of_kind(Kind::PersistentVolume)
            .map(|o| o.meta().name.clone())
            .collect();
        assert_eq!(names, vec!["a", "b"]);
        assert_eq!(c.len(), 3);
        assert!(c.find(Kind::PersistentVolume, "", "b").is_some());
        assert!(
            c.remove(&ObjectKey::new(Kind::PersistentVolume, "", "b"))
                .is_some()
        );
        assert_eq!(c.len(), 2);
        assert_eq!(c.values().count(), 2);
    }

    /// Only a newer version is news: the same version again (the echo of
    /// a write whose answer came) or an older one is not, nor is an
    /// incarnation known to be gone; an unnumbered version always is.
    #[test]
    fn only_a_newer_version_is_news() {
        let mut c = Cache::default();
        let at = |rv: &str| {
            let mut v = PersistentVolume::new("v");
            v.metadata.uid = "uid-1".into();
            v.metadata.resource_version = rv.into();
            Object::Pv(v)
        };
        assert!(c.is_news(&at("5")), "unknown: news");
        c.apply(at("5"));
        assert!(!c.is_news(&at("5")), "the same version");
        assert!(!c.is_news(&at("4")), "an older version");
        assert!(c.is_news(&at("6")));
        assert!(c.is_news(&at("")), "unnumbered");
        c.gone(&at("5").key(), "uid-1");
        assert!(!c.is_news(&at("9")), "a gone incarnation");
    }

    #[test]
    fn newer_than_compares_the_cached_version() {
        let mut c = Cache::default();
        let mut v = PersistentVolume::new("v");
        v.metadata.resource_version = "7".into();
        let key = Object::Pv(v.clone()).key();
        assert!(!c.newer_than(&key, "6"), "nothing cached");
        c.apply(Object::Pv(v));
        assert!(c.newer_than(&key, "6"));
        assert!(!c.newer_than(&key, "7"));
        assert!(!c.newer_than(&key, "8"));
        assert!(!c.newer_than(&key, ""), "an unnumbered version");
    }

    #[test]
    fn objects_are_kept_and_found_in_key_order_whatever_their_names() {
        use crate::model::{PersistentVolumeClaim, StorageClass};
        let mut c = Cache::default();
        let names = [
            "b",
            "a",
            "",
            "a-long-name-kept-beyond-the-inline-bytes",
            "é",
            "a\u{0}",
        ];
        let mut keys = Vec::new();
        for (i, name) in names.iter().enumerate() {
            for o in [
                Object::Pv(PersistentVolume::new(name)),
                Object::Pvc(PersistentVolumeClaim::new(["ns", "", "z"][i % 3], name)),
                Object::Class(StorageClass::new(name, "d")),
                Object::Node(Node::new(name)),
            ] {
                keys.push(o.key());
                assert!(c.apply(o));
            }
        }
        keys.sort();
        let held: Vec<ObjectKey> = c.values().map(Object::key).collect();
        assert_eq!(held, keys, "in ObjectKey's order");
        for k in &keys {
            assert_eq!(c.get(k).map(Object::key).as_ref(), Some(k));
            assert_eq!(
                c.find(k.kind, &k.namespace, &k.name)
                    .map(Object::key)
                    .as_ref(),
                Some(k)
            );
        }
        let pvcs: Vec<ObjectKey> = c
            .of_kind(Kind::PersistentVolumeClaim)
            .map(Object::key)
            .collect();
        assert_eq!(pvcs.len(), names.len());
        assert!(pvcs.iter().all(|k| k.kind == Kind::PersistentVolumeClaim));
        for k in &keys {
            assert!(c.remove(k).is_some(), "{k:?}");
        }
        assert!(c.is_empty());
    }
}
