//! Records kept packed in memory: one allocation holding the record's
//! binary encoding (the journal's own, postcard), unpacked when read.
//!
//! A volume record as a struct is a 280-byte box and five or more
//! allocations of its own (its name, id, capabilities, parameters…); at
//! 100,000 volumes that was over half of `volplane serve`'s memory. Packed
//! it is one allocation of about a hundred bytes. A driver reads a record
//! a few times per call, so unpacking costs microseconds where the call
//! costs a journal write.

use std::fmt;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A `V`, packed. Two compare equal exactly when their records do: the
/// encoding is canonical (maps in key order, integers as minimal
/// varints), so equal records have equal bytes.
pub struct Packed<V> {
    bytes: Box<[u8]>,
    record: PhantomData<fn() -> V>,
}

impl<V: Serialize + DeserializeOwned> Packed<V> {
    /// `record`, packed.
    pub fn pack(record: &V) -> Packed<V> {
        let bytes = postcard::to_allocvec(record).expect("driver records serialise");
        Packed {
            bytes: bytes.into_boxed_slice(),
            record: PhantomData,
        }
    }

    /// The record.
    pub fn unpack(&self) -> V {
        postcard::from_bytes(&self.bytes).expect("a packed record unpacks")
    }

    /// Changes the record with `change`, and packs what it became.
    pub fn update<R>(&mut self, change: impl FnOnce(&mut V) -> R) -> R {
        let mut record = self.unpack();
        let out = change(&mut record);
        *self = Packed::pack(&record);
        out
    }

    /// How many bytes the record takes packed.
    pub fn packed_len(&self) -> usize {
        self.bytes.len()
    }
}

impl<V: Serialize + DeserializeOwned> From<V> for Packed<V> {
    fn from(record: V) -> Packed<V> {
        Packed::pack(&record)
    }
}

impl<V> Clone for Packed<V> {
    fn clone(&self) -> Self {
        Packed {
            bytes: self.bytes.clone(),
            record: PhantomData,
        }
    }
}

impl<V> PartialEq for Packed<V> {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
    }
}

impl<V> Eq for Packed<V> {}

impl<V> std::hash::Hash for Packed<V> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.bytes.hash(state);
    }
}

impl<V: Serialize + DeserializeOwned + fmt::Debug> fmt::Debug for Packed<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.unpack().fmt(f)
    }
}

/// Written as the record itself, so a state's JSON and the journal's
/// records read the same as when records were kept unpacked.
impl<V: Serialize + DeserializeOwned> Serialize for Packed<V> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.unpack().serialize(s)
    }
}

impl<'de, V: Serialize + DeserializeOwned> Deserialize<'de> for Packed<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Packed::pack(&V::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::state::VolumeRecord;
    use crate::driver::tracked::{decode, encode};
    use crate::driver::types::*;

    fn record(name: &str) -> VolumeRecord {
        let mut parameters = crate::model::attributes::Attributes::new();
        parameters.insert("kind".into(), "dir".into());
        VolumeRecord {
            name: name.to_string(),
            volume: Volume {
                volume_id: format!("vol-{name}"),
                capacity_bytes: 1 << 30,
                volume_context: parameters.clone(),
                accessible_topology: Vec::new(),
                content_source: None,
            },
            capabilities: vec![Capability::mount(AccessMode::SingleNodeWriter)],
            parameters,
            mutable_parameters: Default::default(),
            accessibility: None,
            capacity: CapacityRange::default(),
            node_expansion_required: false,
            published: Default::default(),
        }
    }

    #[test]
    fn a_record_unpacks_as_it_was_packed_and_compares_by_content() {
        let a = record("pvc-1");
        let packed = Packed::pack(&a);
        assert_eq!(packed.unpack(), a);
        assert_eq!(packed, Packed::pack(&a.clone()));
        assert_ne!(packed, Packed::pack(&record("pvc-2")));
        assert!(
            packed.packed_len() < 100,
            "{} bytes packed",
            packed.packed_len()
        );
        assert_eq!(format!("{packed:?}"), format!("{a:?}"));
    }

    #[test]
    fn an_update_is_packed_and_the_journal_reads_a_packed_record_as_a_plain_one() {
        let mut packed = Packed::pack(&record("pvc-1"));
        packed.update(|r| r.node_expansion_required = true);
        assert!(packed.unpack().node_expansion_required);
        let bytes = encode(&packed);
        assert_eq!(bytes, encode(&packed.unpack()), "written as the record");
        let plain: VolumeRecord = decode(&bytes).unwrap();
        let back: Packed<VolumeRecord> = decode(&encode(&plain)).unwrap();
        assert_eq!(back, packed);
        let json = serde_json::to_string(&packed).unwrap();
        assert_eq!(json, serde_json::to_string(&plain).unwrap());
    }
}
