//! Opaque string maps (parameters, contexts, topology segments) as a
//! sorted vector. A driver holds several per volume, each of a handful of
//! entries; a `BTreeMap`'s first node alone is over 500 bytes, so three of
//! them made up half of a volume's memory. Lookups are binary searches;
//! iteration is in key order, as a `BTreeMap`'s, and the wire form (JSON,
//! records) is a map, the same as before.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// String keys to string values, in key order, each key once.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Attributes(Vec<(String, String)>);

impl Attributes {
    /// No attributes.
    pub const fn new() -> Attributes {
        Attributes(Vec::new())
    }

    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&String> {
        self.find(key).ok().map(|i| &self.0[i].1)
    }

    /// True when `key` has a value.
    pub fn contains_key(&self, key: &str) -> bool {
        self.find(key).is_ok()
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&mut self, key: String, value: String) -> Option<String> {
        match self.find(&key) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, value)),
            Err(i) => {
                // Grown by one: a map of a few entries holds no spare room.
                self.0.reserve_exact(1);
                self.0.insert(i, (key, value));
                None
            }
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &str) -> Option<String> {
        let i = self.find(key).ok()?;
        Some(self.0.remove(i).1)
    }

    /// How many keys have a value.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when no key has a value.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every `(key, value)`, in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.0.iter())
    }

    /// Every key, in order.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|(k, _)| k)
    }

    /// Every value, in key order.
    pub fn values(&self) -> impl Iterator<Item = &String> {
        self.0.iter().map(|(_, v)| v)
    }

    /// Keeps the entries `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&String, &mut String) -> bool) {
        self.0.retain_mut(|(k, v)| keep(k, v));
    }
}

/// Borrowed entries of [`Attributes`], in key order.
#[derive(Debug, Clone)]
pub struct Iter<'a>(std::slice::Iter<'a, (String, String)>);

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a String, &'a String);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k, v))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(k, v)| (k, v))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Attributes {
    type Item = (&'a String, &'a String);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl IntoIterator for Attributes {
    type Item = (String, String);
    type IntoIter = std::vec::IntoIter<(String, String)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<K: Into<String>, V: Into<String>> FromIterator<(K, V)> for Attributes {
    /// As a `BTreeMap` collects: of a key given twice, the last value.
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Attributes {
        let mut v: Vec<(String, String)> = entries
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        // Stable: of equal keys the last stays last, and is kept below.
        v.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(String, String)> = Vec::with_capacity(v.len());
        for (k, val) in v {
            match out.last_mut() {
                Some(last) if last.0 == k => last.1 = val,
                _ => out.push((k, val)),
            }
        }
        out.shrink_to_fit();
        Attributes(out)
    }
}

impl<K: Into<String>, V: Into<String>> Extend<(K, V)> for Attributes {
    fn extend<I: IntoIterator<Item = (K, V)>>(&mut self, entries: I) {
        for (k, v) in entries {
            self.insert(k.into(), v.into());
        }
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
        Attributes(m.into_iter().collect())
    }
}

impl From<Attributes> for BTreeMap<String, String> {
    fn from(a: Attributes) -> BTreeMap<String, String> {
        a.0.into_iter().collect()
    }
}

impl std::ops::Index<&str> for Attributes {
    type Output = String;
    fn index(&self, key: &str) -> &String {
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
                let mut v: Vec<(String, String)> = Vec::with_capacity(map.size_hint().unwrap_or(0));
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
                    _ => a.get(&key) == m.get(&key) && a.contains_key(&key) == m.contains_key(&key),
                };
                if !same || a.len() != m.len() || !a.iter().eq(m.iter()) {
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
            a.iter().eq(m.iter())
                && json == serde_json::to_string(&m).unwrap()
                && binary == postcard::to_allocvec(&m).unwrap()
                && serde_json::from_str::<Attributes>(&json).unwrap() == a
                && postcard::from_bytes::<Attributes>(&binary).unwrap() == a
        }
    }

    #[test]
    fn a_map_read_with_a_key_twice_keeps_the_last_value() {
        let a: Attributes = serde_json::from_str(r#"{"b":"1","a":"2","b":"3"}"#).unwrap();
        assert_eq!(format!("{a:?}"), r#"{"a": "2", "b": "3"}"#);
        assert_eq!(a["b"], "3");
    }
}
