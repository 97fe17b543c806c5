//! The object cache a control-plane machine keeps from its watches.

use std::collections::BTreeMap;

use crate::model::{Object, ObjectKey};

/// Objects by key. An update older than the cached one (by numeric
/// resourceVersion) is ignored (A10.2); the same version is applied again.
#[derive(Debug, Clone, Default)]
pub struct Cache {
    objects: BTreeMap<ObjectKey, Object>,
}

fn version(o: &Object) -> Option<u64> {
    o.meta().resource_version.parse().ok()
}

impl Cache {
    /// Stores `o` unless the cache holds a newer version; returns whether it did.
    pub fn apply(&mut self, o: Object) -> bool {
        let key = o.key();
        if let Some(old) = self.objects.get(&key)
            && let (Some(a), Some(b)) = (version(old), version(&o))
            && b < a
        {
            return false;
        }
        self.objects.insert(key, o);
        true
    }

    pub fn remove(&mut self, key: &ObjectKey) -> Option<Object> {
        self.objects.remove(key)
    }

    pub fn get(&self, key: &ObjectKey) -> Option<&Object> {
        self.objects.get(key)
    }

    pub fn values(&self) -> impl Iterator<Item = &Object> {
        self.objects.values()
    }

    /// Objects of one kind, in key order.
    pub fn of_kind(&self, kind: crate::model::Kind) -> impl Iterator<Item = &Object> {
        let start = ObjectKey::new(kind, "", "");
        self.objects
            .range(start..)
            .map(|(_, o)| o)
            .take_while(move |o| o.kind() == kind)
    }

    pub fn len(&self) -> usize {
        self.objects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}
