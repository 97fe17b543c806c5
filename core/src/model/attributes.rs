//! Opaque string maps (parameters, contexts, topology segments), packed:
//! one allocation holding every entry, each key and value after its
//! length. A driver holds several per volume, each of a handful of
//! entries, mostly the same few short strings; a `BTreeMap`'s first node
//! alone is over 500 bytes, and a vector of `String` pairs still three
//! allocations per entry. Lookups walk the entries (a map holds a few);
//! iteration is in key order, as a `BTreeMap`'s, and the wire form (JSON,
//! records) is a map, the same as before.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::map::Map;

/// String keys to string values, in key order, each key once.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Attributes {
    /// Entries in key order: key length, key, value length, value; each
    /// length a LEB128 varint. Only ever built from `&str`s.
    packed: Box<[u8]>,
}

fn put(out: &mut Vec<u8>, s: &str) {
    let mut n = s.len();
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    out.extend_from_slice(s.as_bytes());
}

/// The string at `*at`, and `*at` moved past it.
fn take<'a>(packed: &'a [u8], at: &mut usize) -> &'a str {
    let (mut n, mut shift) = (0usize, 0);
    loop {
        let b = packed[*at];
        *at += 1;
        n |= usize::from(b & 0x7f) << shift;
        if b < 0x80 {
            break;
        }
        shift += 7;
    }
    let s = &packed[*at..*at + n];
    *at += n;
    std::str::from_utf8(s).expect("packed from strings")
}

/// Labels by key, as a selector or a node affinity reads them: an
/// object's labels, or a topology segment.
pub trait LabelLookup {
    /// The value of `key`.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelLookup for Attributes {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key)
    }
}

impl LabelLookup for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl Attributes {
    /// No attributes.
    pub fn new() -> Attributes {
        Attributes {
            packed: Box::new([]),
        }
    }

    /// Packs sorted entries with distinct keys.
    fn pack<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Attributes {
        let mut out = Vec::new();
        for (k, v) in entries {
            put(&mut out, k);
            put(&mut out, v);
        }
        Attributes {
            packed: out.into_boxed_slice(),
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// True when `key` has a value.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        let old = self.get(&key).map(str::to_string);
        let mut entries: Vec<(&str, &str)> = self.iter().filter(|(k, _)| *k != key).collect();
        let at = entries.partition_point(|(k, _)| *k < key.as_str());
        entries.insert(at, (&key, &value));
        *self = Attributes::pack(entries);
        old
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let old = self.get(key)?.to_string();
        *self = Attributes::pack(self.iter().filter(|(k, _)| *k != key).collect::<Vec<_>>());
        Some(old)
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        *self = Attributes::new();
    }

    /// How many keys have a value.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// True when no key has a value.
    pub fn is_empty(&self) -> bool {
        self.packed.is_empty()
    }

    /// Every `(key, value)`, in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            packed: &self.packed,
            at: 0,
        }
    }

    /// Every key, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.iter().map(|(k, _)| k)
    }

    /// Every value, in key order.
    pub fn values(&self) -> impl Iterator<Item = &str> {
        self.iter().map(|(_, v)| v)
    }

    /// Keeps the entries `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &str) -> bool) {
        *self = Attributes::pack(self.iter().filter(|(k, v)| keep(k, v)).collect::<Vec<_>>());
    }
}

/// Borrowed entries of [`Attributes`], in key order.
#[derive(Debug, Clone)]
pub struct Iter<'a> {
    packed: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);
    fn next(&mut self) -> Option<Self::Item> {
        if self.at == self.packed.len() {
            return None;
        }
        let k = take(self.packed, &mut self.at);
        let v = take(self.packed, &mut self.at);
        Some((k, v))
    }
}

impl<'a> IntoIterator for &'a Attributes {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for Attributes {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Vec<_>>()
            .into_iter()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Attributes {
    /// As a `BTreeMap` collects: of a key given twice, the last value.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Attributes {
        let sorted: Map<String, String> = entries
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        Attributes::pack(sorted.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

impl<K: Into<String>, V: Into<String>> Extend<(K, V)> for Attributes {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, entries: I) {
        let all: Attributes = std::mem::take(self)
            .into_iter()
            .chain(entries.into_iter().map(|(k, v)| (k.into(), v.into())))
            .collect();
        *self = all;
    }
}

impl<const N: usize> From<[(String, String); N]> for Attributes {
    fn from(entries: [(String, String); N]) -> Attributes {
        entries.into_iter().collect()
    }
}

impl From<BTreeMap<String, String>> for Attributes {
    /// A Kubernetes object's string map (already in key order).
    fn from(m: BTreeMap<String, String>) -> Attributes {
        Attributes::pack(m.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

impl From<Attributes> for BTreeMap<String, String> {
    fn from(a: Attributes) -> BTreeMap<String, String> {
        a.into_iter().collect()
    }
}

impl std::ops::Index<&str> for Attributes {
    type Output = str;
    fn index(&self, key: &str) -> &str {
        self.get(key)
            .unwrap_or_else(|| panic!("no attribute {key:?}"))
    }
}

impl fmt::Debug for Attributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Attributes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.len()))?;
        for (k, v) in self {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Attributes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Attributes, D::Error> {
        struct Entries;
        impl<'de> Visitor<'de> for Entries {
            type Value = Attributes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of strings to strings")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Attributes, A::Error> {
                let mut v: Vec<(String, String)> =
                    Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
                while let Some(entry) = map.next_entry()? {
                    v.push(entry);
                }
                Ok(v.into_iter().collect())
            }
        }
        d.deserialize_map(Entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::quickcheck;

    quickcheck! {
        /// Every operation answers as a BTreeMap's does, and iterates in
        /// the same order.
        fn acts_as_a_btreemap(ops: Vec<(u8, u8, String)>) -> bool {
            let (mut a, mut m) = (Attributes::new(), BTreeMap::new());
            for (op, key, value) in ops {
                let key = format!("k{}", key % 16);
                let same = match op % 3 {
                    0 => a.insert(key.clone(), value.clone()) == m.insert(key, value),
                    1 => a.remove(&key) == m.remove(&key),
                    _ => a.get(&key) == m.get(&key).map(String::as_str)
                        && a.contains_key(&key) == m.contains_key(&key),
                };
                if !same || a.len() != m.len() || !a.iter().eq(m.iter().map(|(k, v)| (k.as_str(), v.as_str()))) {
                    return false;
                }
            }
            let collected: Attributes = m.clone().into_iter().collect();
            collected == a && a.clone().into_iter().eq(m.into_iter())
        }

        /// Collecting keeps, of a key given twice, the last value (as a
        /// BTreeMap does), and the wire form is a map's.
        fn collects_and_serialises_as_a_btreemap(entries: Vec<(u8, String)>) -> bool {
            let entries: Vec<(String, String)> =
                entries.into_iter().map(|(k, v)| (format!("k{}", k % 8), v)).collect();
            let a: Attributes = entries.iter().cloned().collect();
            let m: BTreeMap<String, String> = entries.into_iter().collect();
            let json = serde_json::to_string(&a).unwrap();
            let binary = postcard::to_allocvec(&a).unwrap();
            a.iter().eq(m.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                && json == serde_json::to_string(&m).unwrap()
                && binary == postcard::to_allocvec(&m).unwrap()
                && serde_json::from_str::<Attributes>(&json).unwrap() == a
                && postcard::from_bytes::<Attributes>(&binary).unwrap() == a
        }
    }

    #[test]
    fn long_and_empty_strings_keep_their_length() {
        let long = "é".repeat(10_000);
        let mut a = Attributes::new();
        assert!(a.is_empty() && a.get("").is_none());
        a.insert(String::new(), long.clone());
        a.insert(long.clone(), String::new());
        a.insert("k".into(), "v".into());
        assert_eq!(a.len(), 3);
        assert_eq!(a.get(""), Some(long.as_str()));
        assert_eq!(a.get(&long), Some(""));
        assert_eq!(a.remove(""), Some(long.clone()));
        // Bytewise: "k" before "é".
        assert!(a.keys().eq(["k", long.as_str()]));
    }

    #[test]
    fn a_map_read_with_a_key_twice_keeps_the_last_value() {
        let a: Attributes = serde_json::from_str(r#"{"b":"1","a":"2","b":"3"}"#).unwrap();
        assert_eq!(format!("{a:?}"), r#"{"a": "2", "b": "3"}"#);
        assert_eq!(&a["b"], "3");
    }
}
