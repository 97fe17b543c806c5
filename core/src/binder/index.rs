//! The binder's matching index (A3.1): candidate volumes grouped by their
//! access-mode set, then by class, ordered by capacity — so a claim is matched
//! by a few ordered range lookups, never by scanning every volume.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{
    AccessMode, Name, PersistentVolume, PersistentVolumeClaim, PvPhase, VolumeMode,
};

/// A volume's access modes, sorted and deduplicated.
pub type ModeSet = BTreeSet<AccessMode>;

#[derive(Debug, Clone, PartialEq, Hash)]
struct Entry {
    modes: ModeSet,
    class: Name,
    capacity: u64,
    volume_mode: VolumeMode,
    /// volumeAttributesClassName, unset as "".
    attributes_class: Name,
    labels: crate::model::Labels,
}

/// Candidate volumes and volumes with a claimRef, by claim.
#[derive(Debug, Clone, Default, Hash)]
pub struct MatchIndex {
    /// mode set → class → (capacity, name) of Available, unclaimed volumes.
    /// Names are [`Name`]s: built and compared without an allocation.
    groups: BTreeMap<ModeSet, BTreeMap<Name, BTreeSet<(u64, Name)>>>,
    entries: BTreeMap<Name, Entry>,
    /// (namespace, name) of a claimRef → volumes naming that claim.
    by_claim: BTreeMap<(Name, Name), BTreeSet<Name>>,
    claim_of: BTreeMap<Name, (Name, Name)>,
}

/// True when the volume can be matched to a claim that did not name it (A3.6).
fn candidate(pv: &PersistentVolume) -> bool {
    pv.spec.claim_ref.is_none()
        && pv.phase() == PvPhase::Available
        && !pv.metadata.deleting()
        && pv.capacity().is_some()
}

impl MatchIndex {
    /// Records the current version of `pv`.
    pub fn update(&mut self, pv: &PersistentVolume) {
        self.remove(pv.name());
        let name = Name::new(pv.name());
        if let Some(r) = &pv.spec.claim_ref {
            let k = (Name::new(&r.namespace), Name::new(&r.name));
            self.by_claim
                .entry(k.clone())
                .or_default()
                .insert(name.clone());
            self.claim_of.insert(name.clone(), k);
        }
        if candidate(pv) {
            let entry = Entry {
                modes: pv.spec.access_modes.iter().cloned().collect(),
                class: Name::new(pv.class()),
                capacity: pv.capacity().map_or(0, |q| q.bytes()),
                volume_mode: pv.volume_mode(),
                attributes_class: Name::new(pv.attributes_class()),
                labels: pv.metadata.labels.clone(),
            };
            self.groups
                .entry(entry.modes.clone())
                .or_default()
                .entry(entry.class.clone())
                .or_default()
                .insert((entry.capacity, name.clone()));
            self.entries.insert(name, entry);
        }
    }

    /// Forgets volume `name`.
    pub fn remove(&mut self, name: &str) {
        self.take(name);
        if let Some(k) = self.claim_of.remove(name)
            && let Some(set) = self.by_claim.get_mut(&k)
        {
            set.remove(name);
            if set.is_empty() {
                self.by_claim.remove(&k);
            }
        }
    }

    /// Volume `name` is no candidate any more (a claim is taking it), until
    /// its next [`MatchIndex::update`].
    pub fn take(&mut self, name: &str) {
        if let Some(e) = self.entries.remove(name)
            && let Some(classes) = self.groups.get_mut(&e.modes)
        {
            if let Some(set) = classes.get_mut(&e.class) {
                set.remove(&(e.capacity, Name::new(name)));
                if set.is_empty() {
                    classes.remove(&e.class);
                }
            }
            if classes.is_empty() {
                self.groups.remove(&e.modes);
            }
        }
    }

    /// Volumes whose claimRef names `namespace/name`.
    pub fn claimed_by(&self, namespace: &str, name: &str) -> impl Iterator<Item = &Name> {
        self.by_claim
            .get(&(Name::new(namespace), Name::new(name)))
            .into_iter()
            .flatten()
    }

    /// Number of candidate volumes.
    pub fn candidates(&self) -> usize {
        self.entries.len()
    }

    /// The best unclaimed volume for `claim` (A3.1–A3.8): groups whose mode
    /// set covers the claim's modes, fewest modes first; inside the first
    /// group that has one, the smallest volume of the claim's class that is
    /// big enough, has the claim's volume mode and volumeAttributesClassName
    /// (unset = "") and matches its selector.
    pub fn best_unclaimed(&self, claim: &PersistentVolumeClaim) -> Option<String> {
        let want: ModeSet = claim.spec.access_modes.iter().cloned().collect();
        let request = claim.request().map_or(0, |q| q.bytes());
        let class = claim.class();
        let mode = claim.volume_mode();
        let mut groups: Vec<&ModeSet> = self.groups.keys().filter(|m| want.is_subset(m)).collect();
        groups.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
        for g in groups {
            let Some(set) = self.groups[g].get(class) else {
                continue;
            };
            for (_, name) in set.range((request, Name::new(""))..) {
                let e = &self.entries[name];
                if e.volume_mode != mode || *e.attributes_class != *claim.attributes_class() {
                    continue;
                }
                if let Some(sel) = &claim.spec.selector
                    && !sel.matches(&e.labels)
                {
                    continue;
                }
                return Some(name.to_string());
            }
        }
        None
    }
}
