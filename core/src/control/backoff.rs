//! Per-key exponential backoff as data: the machines' only timers.

use std::collections::BTreeMap;

use crate::Tick;

/// Per-key exponential backoff (1 s doubling to 5 min by default, as the
/// sidecars' rate limiters do).
#[derive(Debug, Clone)]
pub struct Backoff<K: Ord> {
    start: Tick,
    max: Tick,
    entries: BTreeMap<K, (u32, Tick)>,
}

impl<K: Ord + Clone> Backoff<K> {
    pub fn new(start: Tick, max: Tick) -> Backoff<K> {
        Backoff {
            start,
            max,
            entries: BTreeMap::new(),
        }
    }

    /// Records a failure of `key` at `now`; returns when to retry.
    pub fn fail(&mut self, key: K, now: Tick) -> Tick {
        let (n, _) = self.entries.get(&key).copied().unwrap_or((0, 0));
        let delay = self.start.saturating_mul(1u64 << n.min(30)).min(self.max);
        let at = now + delay;
        self.entries.insert(key, (n + 1, at));
        at
    }

    /// Forgets `key` after a success.
    pub fn succeed(&mut self, key: &K) {
        self.entries.remove(key);
    }

    /// True when `key` must still wait at `now`.
    pub fn waiting(&self, key: &K, now: Tick) -> bool {
        self.entries.get(key).is_some_and(|(_, at)| *at > now)
    }

    /// Failures recorded for `key` since its last success.
    pub fn failures(&self, key: &K) -> u32 {
        self.entries.get(key).map_or(0, |(n, _)| *n)
    }

    /// The earliest retry time still in the future of `now`.
    pub fn next_after(&self, now: Tick) -> Option<Tick> {
        self.entries
            .values()
            .map(|(_, at)| *at)
            .filter(|at| *at > now)
            .min()
    }

    /// Keys whose wait ended at or before `now` (and are still recorded).
    pub fn due(&self, now: Tick) -> Vec<K> {
        self.entries
            .iter()
            .filter(|(_, (_, at))| *at <= now)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_cap() {
        let mut b = Backoff::new(1000, 300_000);
        assert_eq!(b.fail("a", 0), 1000);
        assert_eq!(b.fail("a", 1000), 3000);
        assert_eq!(b.fail("a", 3000), 7000);
        for _ in 0..20 {
            b.fail("a", 0);
        }
        assert_eq!(b.fail("a", 0), 300_000);
        assert!(b.waiting(&"a", 10));
        b.succeed(&"a");
        assert!(!b.waiting(&"a", 10));
    }
}
