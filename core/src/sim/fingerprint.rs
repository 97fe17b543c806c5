//! The explorer's hash of a state, part by part: each machine's part is
//! kept until the machine next changes, the store's until its version
//! moves, the storage's and the drivers' until the next call that could
//! change them — so hashing a state costs what changed since the last
//! hash, not the size of the world.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::hasher::{Part, canonical_parts};

use super::Sim;

/// Each actor's queue (of deliveries, or of answers), knowing which have
/// changed since their parts were last hashed: every way to change a
/// queue goes through `IndexMut`, which marks it.
#[derive(Debug, Clone)]
pub(super) struct Queues<T> {
    queues: Vec<VecDeque<T>>,
    changed: Vec<bool>,
}

impl<T> Queues<T> {
    pub(super) fn new(count: usize) -> Queues<T> {
        Queues {
            queues: (0..count).map(|_| VecDeque::new()).collect(),
            changed: vec![true; count],
        }
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, VecDeque<T>> {
        self.queues.iter()
    }

    /// The parts of the queues, walking again those changed since `kept`.
    fn parts(&mut self, kept: &mut Vec<Option<Arc<Part>>>)
    where
        T: std::hash::Hash,
    {
        kept.resize(self.queues.len(), None);
        for ((q, changed), slot) in self.queues.iter().zip(&mut self.changed).zip(kept) {
            if std::mem::take(changed) || slot.is_none() {
                *slot = Some(Arc::new(Part::of(q)));
            }
        }
    }
}

impl<T> std::ops::Index<usize> for Queues<T> {
    type Output = VecDeque<T>;
    fn index(&self, a: usize) -> &VecDeque<T> {
        &self.queues[a]
    }
}

impl<T> std::ops::IndexMut<usize> for Queues<T> {
    fn index_mut(&mut self, a: usize) -> &mut VecDeque<T> {
        self.changed[a] = true;
        &mut self.queues[a]
    }
}

/// The parts of the last hash, with what each was walked at. Not part of
/// the state: two equal states may keep different parts.
#[derive(Debug, Clone, Default)]
pub(super) struct Fingerprints {
    actors: Vec<Option<Arc<Part>>>,
    inbox: Vec<Option<Arc<Part>>>,
    answers: Vec<Option<Arc<Part>>>,
    store: Option<((u64, bool), Arc<Part>)>,
    world: Option<(u64, Arc<Part>)>,
}

/// What really exists and what the drivers remember.
struct World<'a>(&'a Sim);

impl std::hash::Hash for World<'_> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        let s = self.0;
        s.storage.hash(h);
        s.controller.machine.state().hash(h);
        for d in s.nodes.values() {
            d.machine.state().hash(h);
        }
    }
}

impl Sim {
    /// A hash of everything that decides the future (for exhaustive search):
    /// the objects, every machine, what waits in their inboxes, what
    /// storage holds and the drivers' states, hashed up to renumbered
    /// resourceVersions and ops and with times relative to now
    /// (`hasher::canonical_parts`), so one situation reached by two paths
    /// is one state. Parts that did not change since the last hash are
    /// not walked again.
    pub fn state_hash(&mut self) -> u64 {
        let mut f = std::mem::take(&mut self.fingerprints);
        f.actors.resize(self.actors.len(), None);
        for (a, slot) in f.actors.iter_mut().enumerate() {
            if std::mem::take(&mut self.changed[a]) || slot.is_none() {
                *slot = Some(Arc::new(Part::of(&self.actors[a])));
            }
        }
        self.inbox.parts(&mut f.inbox);
        self.answers.parts(&mut f.answers);
        let store_at = (self.store.version(), self.store.admission);
        if f.store.as_ref().is_none_or(|(at, _)| *at != store_at) {
            f.store = Some((store_at, Arc::new(Part::of(&self.store))));
        }
        if f.world
            .as_ref()
            .is_none_or(|(at, _)| *at != self.storage_writes)
        {
            f.world = Some((self.storage_writes, Arc::new(Part::of(&World(self)))));
        }
        let hash = self.hash_with(&f);
        self.fingerprints = f;
        hash
    }

    fn hash_with(&self, f: &Fingerprints) -> u64 {
        let mut parts: Vec<&Part> = Vec::with_capacity(3 * f.actors.len() + 2);
        parts.extend(f.store.as_ref().map(|(_, p)| &**p));
        for kept in [&f.actors, &f.inbox, &f.answers] {
            parts.extend(kept.iter().flatten().map(|p| &**p));
        }
        parts.extend(f.world.as_ref().map(|(_, p)| &**p));
        canonical_parts(&parts, self.now)
    }

    /// [`Sim::state_hash`] with every part walked afresh.
    #[cfg(test)]
    pub(super) fn state_hash_afresh(&self) -> u64 {
        let all = |parts: Vec<Part>| parts.into_iter().map(|p| Some(Arc::new(p))).collect();
        let fresh = Fingerprints {
            actors: all(self.actors.iter().map(Part::of).collect()),
            inbox: all(self.inbox.iter().map(Part::of).collect()),
            answers: all(self.answers.iter().map(Part::of).collect()),
            store: Some(((0, false), Arc::new(Part::of(&self.store)))),
            world: Some((0, Arc::new(Part::of(&World(self))))),
        };
        self.hash_with(&fresh)
    }
}
