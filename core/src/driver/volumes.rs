//! The controller's volumes: one shared allocation per volume, found by
//! id and by CreateVolume name.
//!
//! A driver holding 100,000 volumes keeps each one's record, its id as the
//! table's key and its name in the name index. Kept apart, that was five
//! allocations (the id, the record, the name index's entry…) and two tree
//! slots of 24 and 40 bytes, about 340 bytes a volume. Here a volume is
//! one reference-counted block — its name, its id, then the rest of its
//! record in the journal's encoding (postcard) — and both indexes hold a
//! 16-byte pointer to it: about 210 bytes.
//!
//! Every way to change the table marks the ids it touched, so a persist
//! writes only those records (as [`Tracked`](super::tracked::Tracked)
//! does for the other tables); reads hand out records unpacked.

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Bound;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::tracked::{RecordError, decode, encode};
use super::types::*;

/// A volume the controller created.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Hash)]
pub struct VolumeRecord {
    /// The name CreateVolume was asked with.
    pub name: String,
    /// The volume as created.
    pub volume: Volume,
    /// The capabilities it was created for.
    pub capabilities: Vec<Capability>,
    /// The parameters it was created with.
    pub parameters: Attributes,
    /// Its mutable parameters now.
    #[serde(default)]
    pub mutable_parameters: Attributes,
    /// The topology requirement it was created for.
    #[serde(default)]
    pub accessibility: Option<TopologyRequirement>,
    /// The size range it was created (or last expanded) for.
    #[serde(default)]
    pub capacity: CapacityRange,
    /// The last expansion still needs the node to grow the filesystem.
    #[serde(default)]
    pub node_expansion_required: bool,
    /// Nodes the volume is published to (ControllerPublish).
    #[serde(default)]
    pub published: BTreeMap<String, Publication>,
}

/// A ControllerPublish to one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct Publication {
    /// How the node uses it.
    pub capability: Capability,
    /// Published read-only.
    pub readonly: bool,
    /// What the publish answered.
    pub publish_context: Attributes,
    /// False while the publish is in flight or after it failed: the effect may
    /// or may not have happened, so an unpublish must still be carried out.
    pub certain: bool,
}

/// One volume: `name_len` and `id_len` (4 bytes each, little-endian), the
/// name, the id, then the record with both emptied, as postcard writes it.
/// The encoding is canonical, so two blocks are equal exactly when their
/// records are.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Block(Arc<[u8]>);

const HEAD: usize = 8;

impl Block {
    fn pack(record: &VolumeRecord) -> Block {
        let (name, id) = (record.name.as_bytes(), record.volume.volume_id.as_bytes());
        let mut stripped = record.clone();
        stripped.name = String::new();
        stripped.volume.volume_id = String::new();
        let rest = postcard::to_allocvec(&stripped).expect("driver records serialise");
        let mut bytes = Vec::with_capacity(HEAD + name.len() + id.len() + rest.len());
        bytes.extend_from_slice(&len32(name.len()).to_le_bytes());
        bytes.extend_from_slice(&len32(id.len()).to_le_bytes());
        bytes.extend_from_slice(name);
        bytes.extend_from_slice(id);
        bytes.extend_from_slice(&rest);
        Block(bytes.into())
    }

    /// A block that sorts first among those named `name` (no record).
    fn probe(name: &str) -> Block {
        let mut bytes = Vec::with_capacity(HEAD + name.len());
        bytes.extend_from_slice(&len32(name.len()).to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(name.as_bytes());
        Block(bytes.into())
    }

    fn lens(&self) -> (usize, usize) {
        let word = |at: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&self.0[at..at + 4]);
            u32::from_le_bytes(w) as usize
        };
        (word(0), word(4))
    }

    fn name_bytes(&self) -> &[u8] {
        let (name, _) = self.lens();
        &self.0[HEAD..HEAD + name]
    }

    fn id_bytes(&self) -> &[u8] {
        let (name, id) = self.lens();
        &self.0[HEAD + name..HEAD + name + id]
    }

    fn name(&self) -> &str {
        std::str::from_utf8(self.name_bytes()).expect("a packed name is the string it was")
    }

    fn id(&self) -> &str {
        std::str::from_utf8(self.id_bytes()).expect("a packed id is the string it was")
    }

    fn unpack(&self) -> VolumeRecord {
        let (name, id) = self.lens();
        let mut record: VolumeRecord =
            postcard::from_bytes(&self.0[HEAD + name + id..]).expect("a packed record unpacks");
        record.name = self.name().to_string();
        record.volume.volume_id = self.id().to_string();
        record
    }
}

fn len32(n: usize) -> u32 {
    u32::try_from(n).expect("a name or id under 4 GiB (CSI allows 128 bytes)")
}

/// A block in the id index: ordered, found and compared by id (the
/// table compares records through the blocks themselves).
#[derive(Clone)]
struct ById(Block);

impl PartialEq for ById {
    fn eq(&self, other: &ById) -> bool {
        self.0.id_bytes() == other.0.id_bytes()
    }
}

impl Eq for ById {}

impl Ord for ById {
    fn cmp(&self, other: &ById) -> Ordering {
        self.0.id_bytes().cmp(other.0.id_bytes())
    }
}

impl PartialOrd for ById {
    fn partial_cmp(&self, other: &ById) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Found by an id's bytes: byte order is `str` order.
impl Borrow<[u8]> for ById {
    fn borrow(&self) -> &[u8] {
        self.0.id_bytes()
    }
}

/// A block in the name index: ordered and compared by name, then id.
#[derive(Clone)]
struct ByName(Block);

impl PartialEq for ByName {
    fn eq(&self, other: &ByName) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for ByName {}

impl Ord for ByName {
    fn cmp(&self, other: &ByName) -> Ordering {
        (self.0.name_bytes(), self.0.id_bytes()).cmp(&(other.0.name_bytes(), other.0.id_bytes()))
    }
}

impl PartialOrd for ByName {
    fn partial_cmp(&self, other: &ByName) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The volumes by id, and by name for those that have one.
#[derive(Clone, Default)]
pub struct Volumes {
    by_id: BTreeSet<ById>,
    by_name: BTreeSet<ByName>,
    /// How many volumes are published to each node (ControllerPublish),
    /// so that a publish checks a node's limit without reading every
    /// record.
    on_node: BTreeMap<String, usize>,
    dirty: BTreeSet<String>,
}

impl Volumes {
    fn block(&self, id: &str) -> Option<&Block> {
        self.by_id.get(id.as_bytes()).map(|b| &b.0)
    }

    /// The record of volume `id`.
    pub fn unpacked(&self, id: &str) -> Option<VolumeRecord> {
        self.block(id).map(Block::unpack)
    }

    /// Whether volume `id` is recorded.
    pub fn contains_key(&self, id: &str) -> bool {
        self.by_id.contains(id.as_bytes())
    }

    /// The id of the volume named `name` (the first by id, were two named
    /// alike: the driver state's invariants say so).
    pub fn named(&self, name: &str) -> Option<&str> {
        let probe = ByName(Block::probe(name));
        self.by_name
            .range(probe..)
            .next()
            .filter(|b| b.0.name_bytes() == name.as_bytes())
            .map(|b| b.0.id())
    }

    /// How many volumes there are.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Every id, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.by_id.iter().map(|b| b.0.id())
    }

    /// The records from id `start` on (all of them without one), unpacked
    /// as the iterator reaches them, in id order.
    pub fn records_from<'a>(
        &'a self,
        start: Option<&str>,
    ) -> impl Iterator<Item = (&'a str, VolumeRecord)> + 'a {
        let from = start.map_or(Bound::Unbounded, |s| Bound::Included(s.as_bytes()));
        self.by_id
            .range::<[u8], _>((from, Bound::Unbounded))
            .map(|b| (b.0.id(), b.0.unpack()))
    }

    /// Every record, unpacked, in id order.
    pub fn iter_unpacked(&self) -> impl Iterator<Item = (&str, VolumeRecord)> {
        self.by_id.iter().map(|b| (b.0.id(), b.0.unpack()))
    }

    /// Every named volume's name and id, in name order.
    pub fn names(&self) -> impl Iterator<Item = (&str, &str)> {
        self.by_name.iter().map(|b| (b.0.name(), b.0.id()))
    }

    /// Records `record` under its id (marked changed), in place of what
    /// was recorded there; that record, if any.
    pub fn insert(&mut self, record: &VolumeRecord) -> Option<VolumeRecord> {
        let old = self.take(&record.volume.volume_id);
        self.put(record);
        old
    }

    fn put(&mut self, record: &VolumeRecord) {
        let block = Block::pack(record);
        for node in record.published.keys() {
            *self.on_node.entry(node.clone()).or_default() += 1;
        }
        self.dirty.insert(block.id().to_string());
        if !block.name_bytes().is_empty() {
            self.by_name.insert(ByName(block.clone()));
        }
        self.by_id.insert(ById(block));
    }

    fn take(&mut self, id: &str) -> Option<VolumeRecord> {
        let ById(block) = self.by_id.take(id.as_bytes())?;
        self.dirty.insert(id.to_string());
        self.by_name.remove(&ByName(block.clone()));
        let record = block.unpack();
        for node in record.published.keys() {
            if let Some(n) = self.on_node.get_mut(node) {
                *n -= 1;
                if *n == 0 {
                    self.on_node.remove(node);
                }
            }
        }
        Some(record)
    }

    /// Whether the indexes agree with the records: every named volume in
    /// the name index, nothing else there, and each node's count of
    /// publications what the records say.
    pub fn check_indexes(&self) -> Result<(), String> {
        let mut on_node = BTreeMap::<String, usize>::new();
        let mut named = 0;
        for ById(block) in &self.by_id {
            for node in block.unpack().published.into_keys() {
                *on_node.entry(node).or_default() += 1;
            }
            if !block.name_bytes().is_empty() {
                named += 1;
                if !self.by_name.contains(&ByName(block.clone())) {
                    return Err(format!(
                        "volume {} is missing from the name index",
                        block.id()
                    ));
                }
            }
        }
        if named != self.by_name.len() {
            return Err(format!(
                "the name index holds {} volumes, {named} are named",
                self.by_name.len()
            ));
        }
        if self.on_node != on_node {
            return Err(format!(
                "publications counted per node {:?}, the records say {on_node:?}",
                self.on_node
            ));
        }
        Ok(())
    }

    /// How many volumes are published to `node`.
    pub fn published_to(&self, node: &str) -> usize {
        self.on_node.get(node).copied().unwrap_or(0)
    }

    /// Removes volume `id` (marked changed when it was there).
    pub fn remove(&mut self, id: &str) -> Option<VolumeRecord> {
        self.take(id)
    }

    /// Changes the record of `id` with `change` (marked changed), and says
    /// what `change` returned; `None` when there is no such volume. The
    /// record's id stays what it was.
    pub fn update<R>(
        &mut self,
        id: &str,
        change: impl FnOnce(&mut VolumeRecord) -> R,
    ) -> Option<R> {
        let mut record = self.take(id)?;
        let out = change(&mut record);
        record.volume.volume_id = id.to_string();
        self.put(&record);
        Some(out)
    }

    /// Changes every record with `change` (all marked changed).
    pub fn update_all(&mut self, mut change: impl FnMut(&mut VolumeRecord)) {
        let ids: Vec<String> = self.keys().map(str::to_string).collect();
        for id in ids {
            self.update(&id, &mut change);
        }
    }

    /// Removes every volume (all marked).
    pub fn clear(&mut self) {
        let ids: Vec<String> = self.keys().map(str::to_string).collect();
        self.dirty.extend(ids);
        self.by_id.clear();
        self.by_name.clear();
        self.on_node.clear();
    }

    /// Marks every volume changed (a state written whole, e.g. imported).
    pub fn touch_all(&mut self) {
        let ids: Vec<String> = self.keys().map(str::to_string).collect();
        self.dirty.extend(ids);
    }

    /// The ids changed since the last call, forgotten here.
    pub fn take_dirty(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.dirty)
    }

    /// Marks `ids` changed again (their write failed).
    pub fn retouch(&mut self, ids: impl IntoIterator<Item = String>) {
        self.dirty.extend(ids);
    }

    /// Each changed id's record now, in the journal's encoding
    /// ([`encode`]), or `None` when removed.
    pub fn changes(&mut self) -> Vec<(String, Option<Vec<u8>>)> {
        self.take_dirty()
            .into_iter()
            .map(|id| {
                let value = self.block(&id).map(|b| encode(&b.unpack()));
                (id, value)
            })
            .collect()
    }

    /// Loads one stored record, kept under `key`: the id it must carry.
    pub fn load(&mut self, key: &str, bytes: &[u8]) -> Result<(), RecordError> {
        let record: VolumeRecord = decode(bytes)?;
        if record.volume.volume_id != key {
            return Err(RecordError::KeyMismatch(record.volume.volume_id));
        }
        self.take(key);
        self.put(&record);
        self.dirty.remove(key);
        Ok(())
    }
}

impl PartialEq for Volumes {
    /// Equal when the records are: what is still to be written is not state.
    fn eq(&self, other: &Volumes) -> bool {
        self.by_id.len() == other.by_id.len()
            && self.by_id.iter().zip(&other.by_id).all(|(a, b)| a.0 == b.0)
    }
}

impl Hash for Volumes {
    /// Hashes what equality compares.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.by_id.len().hash(state);
        for b in &self.by_id {
            b.0.hash(state);
        }
    }
}

impl fmt::Debug for Volumes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter_unpacked()).finish()
    }
}

/// Written as a map of id to record, as the table always was.
impl Serialize for Volumes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter_unpacked())
    }
}

impl<'de> Deserialize<'de> for Volumes {
    /// A record is kept under the id it carries; one whose key names
    /// another id is refused.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, VolumeRecord>::deserialize(d)?;
        let mut out = Volumes::default();
        for (key, record) in map {
            if record.volume.volume_id != key {
                return Err(serde::de::Error::custom(
                    RecordError::KeyMismatch(record.volume.volume_id).at("volumes", &key),
                ));
            }
            out.put(&record);
        }
        out.dirty.clear();
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
