//! CreateVolume names to volume ids, one allocation per volume.
//!
//! The index answers "is there a volume of this name" for every
//! CreateVolume, so it holds every volume's name and id: as a
//! `BTreeMap<String, String>` that is two allocations and a 48-byte slot
//! per volume, about 150 bytes of a driver holding 100,000. Here each
//! entry is one boxed string, the name followed by the id.

use std::cmp::Ordering;
use std::collections::BTreeSet;

/// Names to ids, each name once, in name order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct NameIndex {
    entries: BTreeSet<Entry>,
}

/// A name and its id in one allocation: `both[..split]` is the name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Entry {
    both: Box<str>,
    split: usize,
}

impl Entry {
    fn new(name: &str, id: &str) -> Entry {
        Entry {
            both: [name, id].concat().into_boxed_str(),
            split: name.len(),
        }
    }

    fn name(&self) -> &str {
        &self.both[..self.split]
    }

    fn id(&self) -> &str {
        &self.both[self.split..]
    }
}

impl Ord for Entry {
    /// By name, then id: a name's entries are together, and a probe of
    /// the name with an empty id comes first among them.
    fn cmp(&self, other: &Entry) -> Ordering {
        (self.name(), self.id()).cmp(&(other.name(), other.id()))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Entry) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl NameIndex {
    fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries
            .range(Entry::new(name, "")..)
            .next()
            .filter(|e| e.name() == name)
    }

    /// The id of the volume named `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entry(name).map(Entry::id)
    }

    /// Whether a volume is named `name`.
    pub fn contains_key(&self, name: &str) -> bool {
        self.entry(name).is_some()
    }

    /// Names `id` `name` (in place of any volume named so before).
    pub fn insert(&mut self, name: &str, id: &str) {
        self.remove(name);
        self.entries.insert(Entry::new(name, id));
    }

    /// Forgets `name`; the id it named, if any.
    pub fn remove(&mut self, name: &str) -> Option<String> {
        let entry = self.entry(name)?.clone();
        self.entries.remove(&entry);
        Some(entry.id().to_string())
    }

    /// Forgets every name.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Every name and its id, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|e| (e.name(), e.id()))
    }

    /// How many names there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_maps_to_its_one_id_whatever_its_neighbours_are() {
        let mut n = NameIndex::default();
        n.insert("pvc-1", "vol-b");
        n.insert("pvc-10", "vol-a");
        n.insert("pvc", "vol-c");
        n.insert("pvc-1vol", "vol-d");
        assert_eq!(n.get("pvc-1"), Some("vol-b"));
        assert_eq!(n.get("pvc"), Some("vol-c"));
        assert_eq!(n.get("pvc-1vol"), Some("vol-d"));
        assert_eq!(n.get("pvc-"), None, "a prefix of names is not a name");
        assert_eq!(n.get("pvc-1v"), None);
        n.insert("pvc-1", "vol-e");
        assert_eq!(n.get("pvc-1"), Some("vol-e"), "named again");
        assert_eq!(n.len(), 4);
        assert_eq!(n.remove("pvc-1"), Some("vol-e".to_string()));
        assert_eq!(n.remove("pvc-1"), None);
        assert!(!n.contains_key("pvc-1") && n.contains_key("pvc-10"));
        let all: Vec<_> = n.iter().collect();
        assert_eq!(
            all,
            [("pvc", "vol-c"), ("pvc-10", "vol-a"), ("pvc-1vol", "vol-d")]
        );
    }

    #[test]
    fn names_with_any_bytes_stay_apart() {
        let mut n = NameIndex::default();
        n.insert("a\0", "x");
        n.insert("a", "\0x");
        n.insert("", "y");
        assert_eq!(n.get("a\0"), Some("x"));
        assert_eq!(n.get("a"), Some("\0x"));
        assert_eq!(n.get(""), Some("y"));
        assert_eq!(n.len(), 3);
    }
}
