//! The driver state's tables: maps that remember which keys changed since
//! the adapter last took them, so that a persist writes only those records
//! (one record per volume, snapshot, operation…), not the whole state.
//!
//! Reads go through `Deref` to the `BTreeMap`; every way to change the map
//! is an inherent method here that marks what it touched, and there is no
//! `DerefMut`, so no change can escape the journal.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
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

impl<K: Ord + Hash, V: Hash> Hash for Tracked<K, V> {
    /// Hashes what equality compares: the map.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.map.hash(state);
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

/// The first byte of a record in the binary encoding (postcard: fields in
/// order, no names, integers as varints). A record an earlier volplane
/// wrote is JSON, and starts with `{`.
const BINARY_V1: u8 = 1;

/// A record's bytes: the `BINARY_V1` tag, then the value.
pub fn encode<V: Serialize>(v: &V) -> Vec<u8> {
    let mut out = vec![BINARY_V1];
    out.extend(postcard::to_allocvec(v).expect("driver records serialise"));
    out
}

/// Why a stored record cannot be read back (the driver then refuses to
/// start on a state it cannot read whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Bytes left over after the record.
    #[error("{0} bytes left over after the record")]
    LeftOver(usize),
    /// Not a record of this layout, in the binary encoding or JSON.
    #[error("not a record this volplane reads: {0}")]
    Undecodable(String),
    /// An encoding byte this volplane does not know.
    #[error("unknown record encoding {0:#04x}")]
    UnknownEncoding(u8),
    /// No bytes at all.
    #[error("empty record")]
    Empty,
    /// A key that names no record of its table.
    #[error("its key is not one of this table's")]
    Key,
    /// A record kept under one id that carries another.
    #[error("it is the record of {0:?}")]
    KeyMismatch(String),
    /// A meta record that is not the number it must be.
    #[error("{0:?} is not a number")]
    NotANumber(String),
    /// A meta record this volplane does not know.
    #[error("no such meta record")]
    UnknownMeta,
    /// A table this volplane does not know.
    #[error("no such table")]
    UnknownTable,
    /// Where: the table and key of the record that could not be read.
    #[error("table {table}: record {key:?}: {fault}")]
    In {
        /// The table.
        table: String,
        /// The record's key.
        key: String,
        /// What is wrong with it.
        fault: Box<RecordError>,
    },
}

impl RecordError {
    /// This fault, in record `key` of `table`.
    pub fn at(self, table: &str, key: &str) -> RecordError {
        RecordError::In {
            table: table.to_string(),
            key: key.to_string(),
            fault: Box::new(self),
        }
    }
}

/// A record's value, from the binary encoding or from JSON (an earlier
/// volplane's).
pub fn decode<V: DeserializeOwned>(bytes: &[u8]) -> Result<V, RecordError> {
    match bytes.first() {
        Some(&BINARY_V1) => match postcard::take_from_bytes(&bytes[1..]) {
            Ok((v, [])) => Ok(v),
            Ok((_, rest)) => Err(RecordError::LeftOver(rest.len())),
            Err(e) => Err(RecordError::Undecodable(e.to_string())),
        },
        Some(b'{') => {
            serde_json::from_slice(bytes).map_err(|e| RecordError::Undecodable(e.to_string()))
        }
        Some(&b) => Err(RecordError::UnknownEncoding(b)),
        None => Err(RecordError::Empty),
    }
}

impl<K: RecordKey, V: Serialize + DeserializeOwned> Tracked<K, V> {
    /// Each changed key's record now: its bytes ([`encode`]), or `None`
    /// when removed.
    pub fn changes(&mut self) -> Vec<(String, Option<Vec<u8>>)> {
        let dirty = self.take_dirty();
        dirty
            .into_iter()
            .map(|k| {
                let value = self.map.get(&k).map(encode);
                (k.encode(), value)
            })
            .collect()
    }

    /// Loads one stored record.
    pub fn load(&mut self, key: &str, bytes: &[u8]) -> Result<(), RecordError> {
        self.load_with(key, bytes, decode)
    }

    /// Loads one stored record read by `read` (a record whose layout
    /// changed reads the earlier layouts too).
    pub fn load_with(
        &mut self,
        key: &str,
        bytes: &[u8],
        read: impl FnOnce(&[u8]) -> Result<V, RecordError>,
    ) -> Result<(), RecordError> {
        let k = K::decode(key).ok_or(RecordError::Key)?;
        let v = read(bytes)?;
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
                ("a".to_string(), Some(encode(&10u32))),
                ("b".to_string(), None),
                ("c".to_string(), None),
            ]
        );
        let mut back: Tracked<String, u32> = Tracked::default();
        assert_ne!(back, t, "an empty table is not one with a record");
        back.load("a", &encode(&10u32)).unwrap();
        assert_eq!(back, t, "equal by content, whatever is still to be written");
        assert!(back.changes().is_empty(), "a loaded record is not a change");
        assert!(back.load("x", b"{").is_err());
        let mut ops: Tracked<OpId, u32> = Tracked::default();
        assert!(
            ops.load("op", &encode(&1u32)).is_err(),
            "an op key is a number"
        );
    }

    /// A volume record as an earlier volplane wrote it (JSON) loads, and
    /// is written back in the binary encoding, under half its size.
    #[test]
    fn an_earlier_json_record_loads_and_is_rewritten_binary() {
        use crate::driver::state::VolumeRecord;
        let json = br#"{"name":"volplane-bench-20055-fill-1","volume":{"volume_id":"vol-2cdba2a51abdc28fe936","capacity_bytes":1073741824,"volume_context":{"kind":"dir"},"accessible_topology":[{"topology.volplane.io/zone":"local"}]},"capabilities":[{"access_type":{"Mount":{}},"access_mode":"MultiNodeMultiWriter"}],"parameters":{"kind":"dir"}}"#;
        let mut t: Tracked<String, VolumeRecord> = Tracked::default();
        t.load("vol-2cdba2a51abdc28fe936", json).unwrap();
        let r = &t["vol-2cdba2a51abdc28fe936"];
        assert_eq!(r.name, "volplane-bench-20055-fill-1");
        assert_eq!(r.volume.capacity_bytes, 1 << 30);
        t.touch_all();
        let changes = t.changes();
        let bytes = changes[0].1.as_ref().unwrap();
        assert_eq!(bytes[0], BINARY_V1);
        assert!(
            bytes.len() * 2 < json.len(),
            "{} bytes binary, {} JSON",
            bytes.len(),
            json.len()
        );
        let mut back: Tracked<String, VolumeRecord> = Tracked::default();
        back.load("vol-2cdba2a51abdc28fe936", bytes).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn a_damaged_record_is_refused_with_what_is_wrong() {
        let mut t: Tracked<String, (u32, String)> = Tracked::default();
        let good = encode(&(7u32, "seven".to_string()));
        let cases: [(&[u8], &str); 5] = [
            (&[], "empty record"),
            (&[0x7f, 1, 2], "unknown record encoding 0x7f"),
            (&good[..good.len() - 1], "not a record this volplane reads"),
            (&[good.as_slice(), &[0]].concat(), "1 bytes left over"),
            (b"{\"a\":", "at line 1"),
        ];
        for (bytes, why) in cases {
            let e = t
                .load("k", bytes)
                .unwrap_err()
                .at("volumes", "k")
                .to_string();
            assert!(
                e.contains(why) && e.contains("table volumes: record \"k\""),
                "{e}"
            );
        }
        assert_eq!(t.load("k", &[]), Err(RecordError::Empty));
        t.load("k", &good).unwrap();
        assert_eq!(t["k"], (7, "seven".to_string()));
    }
}
