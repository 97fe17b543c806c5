//! The driver state's tables: maps that remember which keys changed since
//! the adapter last took them, so that a persist writes only those records
//! (one record per volume, snapshot, operation…), not the whole state.
//!
//! Reads go through `Deref` to the `BTreeMap`; every way to change the map
//! is an inherent method here that marks what it touched, and there is no
//! `DerefMut`, so no change can escape the journal.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::OpId;

/// A key of a table, as the record store names it.
pub trait RecordKey: Ord + Clone {
    /// The record's key in the store.
    fn encode(&self) -> String;
    /// The key a stored record names; `None` when it is not one.
    fn decode(s: &str) -> Option<Self>;
}

impl RecordKey for String {
    fn encode(&self) -> String {
        self.clone()
    }
    fn decode(s: &str) -> Option<Self> {
        Some(s.to_string())
    }
}

impl RecordKey for OpId {
    fn encode(&self) -> String {
        self.0.to_string()
    }
    fn decode(s: &str) -> Option<Self> {
        s.parse().ok().map(OpId)
    }
}

/// A map that records which keys changed.
#[derive(Debug, Clone)]
pub struct Tracked<K: Ord, V> {
    map: BTreeMap<K, V>,
    dirty: BTreeSet<K>,
}

impl<K: Ord, V> Default for Tracked<K, V> {
    fn default() -> Self {
        Tracked {
            map: BTreeMap::new(),
            dirty: BTreeSet::new(),
        }
    }
}

impl<K: Ord, V: PartialEq> PartialEq for Tracked<K, V> {
    /// Equal when the maps are: what is still to be written is not state.
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl<K: Ord, V> Deref for Tracked<K, V> {
    type Target = BTreeMap<K, V>;
    fn deref(&self) -> &BTreeMap<K, V> {
        &self.map
    }
}

impl<'a, K: Ord, V> IntoIterator for &'a Tracked<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = std::collections::btree_map::Iter<'a, K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}

impl<K: Ord + Clone, V> Tracked<K, V> {
    /// Sets `k` to `v` (marked changed).
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        self.dirty.insert(k.clone());
        self.map.insert(k, v)
    }

    /// Removes `k` (marked changed when it was there).
    pub fn remove<Q>(&mut self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Ord + ToOwned<Owned = K> + ?Sized,
    {
        let old = self.map.remove(k);
        if old.is_some() {
            self.dirty.insert(k.to_owned());
        }
        old
    }

    /// The value at `k` to change in place (marked changed).
    pub fn get_mut<Q>(&mut self, k: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Ord + ToOwned<Owned = K> + ?Sized,
    {
        let v = self.map.get_mut(k)?;
        self.dirty.insert(k.to_owned());
        Some(v)
    }

    /// The value at `k`, made default when missing, to change in place
    /// (marked changed).
    pub fn entry_or_default(&mut self, k: K) -> &mut V
    where
        V: Default,
    {
        self.dirty.insert(k.clone());
        self.map.entry(k).or_default()
    }

    /// Every value to change in place (all marked changed).
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.dirty.extend(self.map.keys().cloned());
        self.map.values_mut()
    }

    /// Keeps what `keep` accepts; the rest is removed (and marked).
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) {
        let dirty = &mut self.dirty;
        self.map.retain(|k, v| {
            let kept = keep(k, v);
            if !kept {
                dirty.insert(k.clone());
            }
            kept
        });
    }

    /// Removes everything (all marked).
    pub fn clear(&mut self) {
        self.dirty.extend(self.map.keys().cloned());
        self.map.clear();
    }

    /// Marks every entry changed (a state written whole, e.g. imported).
    pub fn touch_all(&mut self) {
        self.dirty.extend(self.map.keys().cloned());
    }

    /// The keys changed since the last call, forgotten here.
    pub fn take_dirty(&mut self) -> BTreeSet<K> {
        std::mem::take(&mut self.dirty)
    }

    /// Marks `keys` changed again (their write failed).
    pub fn retouch(&mut self, keys: impl IntoIterator<Item = K>) {
        self.dirty.extend(keys);
    }
}

impl<K: RecordKey, V: Serialize + DeserializeOwned> Tracked<K, V> {
    /// Each changed key's record now: its JSON, or `None` when removed.
    pub fn changes(&mut self) -> Vec<(String, Option<Vec<u8>>)> {
        let dirty = self.take_dirty();
        dirty
            .into_iter()
            .map(|k| {
                let value = self
                    .map
                    .get(&k)
                    .map(|v| serde_json::to_vec(v).expect("driver records serialise"));
                (k.encode(), value)
            })
            .collect()
    }

    /// Loads one stored record.
    pub fn load(&mut self, key: &str, bytes: &[u8]) -> Result<(), String> {
        let k = K::decode(key).ok_or_else(|| format!("record key {key:?} is not one"))?;
        let v = serde_json::from_slice(bytes).map_err(|e| format!("record {key:?}: {e}"))?;
        self.map.insert(k, v);
        Ok(())
    }
}

impl<K: Ord + Serialize, V: Serialize> Serialize for Tracked<K, V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.map.serialize(s)
    }
}

impl<'de, K: Ord + Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for Tracked<K, V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Tracked {
            map: BTreeMap::deserialize(d)?,
            dirty: BTreeSet::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_change_is_marked_and_taken_once() {
        let mut t: Tracked<String, u32> = Tracked::default();
        t.insert("a".into(), 1);
        t.insert("b".into(), 2);
        t.insert("c".into(), 3);
        assert_eq!(t.changes().len(), 3);
        assert!(t.changes().is_empty(), "taken once");
        *t.get_mut(&"a".to_string()).unwrap() = 10;
        t.remove(&"b".to_string());
        t.remove(&"missing".to_string());
        t.retain(|k, _| k != "c");
        let changes = t.changes();
        assert_eq!(
            changes,
            vec![
                ("a".to_string(), Some(b"10".to_vec())),
                ("b".to_string(), None),
                ("c".to_string(), None),
            ]
        );
        let mut back: Tracked<String, u32> = Tracked::default();
        assert_ne!(back, t, "an empty table is not one with a record");
        back.load("a", b"10").unwrap();
        assert_eq!(back, t, "equal by content, whatever is still to be written");
        assert!(back.changes().is_empty(), "a loaded record is not a change");
        assert!(back.load("x", b"{").is_err());
        let mut ops: Tracked<OpId, u32> = Tracked::default();
        assert!(ops.load("op", b"1").is_err(), "an op key is a number");
    }
}
