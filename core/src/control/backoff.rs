//! Per-key exponential backoff as data: the machines' only timers.

use std::collections::BTreeMap;

use crate::Tick;
use crate::machine::TimerTable;

#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    retry_at: Tick,
}

impl std::hash::Hash for Entry {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.failures.hash(h);
        crate::hasher::canon::time(h, self.retry_at);
    }
}

/// Per-key exponential backoff (1 s doubling to 5 min by default, as the
/// sidecars' rate limiters do): failure counts, with the retry deadlines in
/// a [`TimerTable`].
///
/// The contract with a machine's timers: `poll_timeout` returns
/// [`Backoff::next_timer`] — possibly already past, in which case the adapter
/// calls `handle_timeout` at once — and `handle_timeout` takes
/// [`Backoff::fire_due`], so a deadline is reported until it has fired, and
/// fires exactly once.
#[derive(Debug, Clone, Hash)]
pub struct Backoff<K: Ord> {
    start: Tick,
    max: Tick,
    entries: BTreeMap<K, Entry>,
    timers: TimerTable<K>,
}

/// The sidecars' defaults: 1 s doubling to 5 min.
impl<K: Ord + Clone> Default for Backoff<K> {
    fn default() -> Backoff<K> {
        Backoff::new(1_000, 300_000)
    }
}

impl<K: Ord + Clone> Backoff<K> {
    /// Delays start at `start` and double up to `max`.
    pub fn new(start: Tick, max: Tick) -> Backoff<K> {
        Backoff {
            start,
            max,
            entries: BTreeMap::new(),
            timers: TimerTable::default(),
        }
    }

    /// Records a failure of `key` at `now`; returns when to retry.
    pub fn fail(&mut self, key: K, now: Tick) -> Tick {
        self.fail_at_least(key, now, 0)
    }

    /// Records a failure of `key` at `now` whose retry waits its backoff,
    /// and at least `at_least`; returns when it is retried.
    pub fn fail_at_least(&mut self, key: K, now: Tick, at_least: Tick) -> Tick {
        let n = self.entries.get(&key).map_or(0, |e| e.failures);
        let delay = self
            .start
            .saturating_mul(1u64 << n.min(30))
            .min(self.max)
            .max(at_least);
        let at = now + delay;
        self.timers.set(key.clone(), at);
        self.entries.insert(
            key,
            Entry {
                failures: n + 1,
                retry_at: at,
            },
        );
        at
    }

    /// Records a failure of `key` whose retry waits until `until`, however
    /// many failures came before (a slow retry, such as after an
    /// infeasible modify).
    pub fn hold(&mut self, key: K, until: Tick) {
        let n = self.entries.get(&key).map_or(0, |e| e.failures);
        self.timers.set(key.clone(), until);
        self.entries.insert(
            key,
            Entry {
                failures: n + 1,
                retry_at: until,
            },
        );
    }

    /// Forgets `key` after a success.
    pub fn succeed(&mut self, key: &K) {
        self.entries.remove(key);
        self.timers.stop(key);
    }

    /// News about `key` arrived (a newer version of its object): its wait
    /// ends now, as an informer's event re-queues a key at once whatever
    /// its rate limiter says. Its failure count stays, so the next failure
    /// waits longer.
    pub fn news<Q>(&mut self, key: &Q)
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        if let Some(e) = self.entries.get_mut(key) {
            e.retry_at = 0;
        }
    }

    /// True when `key` must still wait at `now`.
    pub fn waiting<Q>(&self, key: &Q, now: Tick) -> bool
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.get(key).is_some_and(|e| e.retry_at > now)
    }

    /// Failures recorded for `key` since its last success.
    pub fn failures<Q>(&self, key: &Q) -> u32
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.entries.get(key).map_or(0, |e| e.failures)
    }

    /// The earliest retry time that has not fired yet (it may be past).
    pub fn next_timer(&self) -> Option<Tick> {
        self.timers.next()
    }

    /// Keys whose retry time has come by `now` and had not fired.
    pub fn fire_due(&mut self, now: Tick) -> Vec<K> {
        self.timers.expire(now)
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

    #[test]
    fn news_ends_the_wait_but_not_the_count() {
        let mut b = Backoff::new(1000, 300_000);
        b.fail("a", 0);
        assert!(b.waiting(&"a", 10));
        b.news(&"a");
        assert!(!b.waiting(&"a", 10), "news: retried at once");
        assert_eq!(b.failures(&"a"), 1);
        assert_eq!(b.fail("a", 10), 2010, "the next failure waits longer");
    }

    #[test]
    fn an_overdue_timer_is_reported_until_it_fires_once() {
        let mut b = Backoff::new(1000, 300_000);
        b.fail("a", 0);
        assert_eq!(b.next_timer(), Some(1000));
        assert_eq!(
            b.fire_due(5000),
            vec!["a"],
            "overdue: fires when the machine is next told the time"
        );
        assert_eq!(b.next_timer(), None);
        assert!(b.fire_due(6000).is_empty(), "fires once");
    }
}
