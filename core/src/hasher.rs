//! The state hasher of the explorer and the hot-loop guard: folded
//! 64×64→128-bit multiplies (the mix wyhash and foldhash use), several
//! times faster than SipHash on the
//! short integers and strings a state is made of. Fixed keys: the same
//! state hashes the same in every run. Not for untrusted input (no keys
//! to resist chosen collisions); a search only hashes its own states.

use std::hash::Hasher;

const K0: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0x1319_8a2e_0370_7344;

fn folded(a: u64, b: u64) -> u64 {
    let m = u128::from(a) * u128::from(b);
    (m as u64) ^ ((m >> 64) as u64)
}

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct StateHasher {
    state: u64,
}

impl Default for StateHasher {
    fn default() -> StateHasher {
        StateHasher { state: K0 }
    }
}

impl StateHasher {
    fn mix(&mut self, word: u64) {
        self.state = folded(self.state ^ word, K1);
    }
}

impl Hasher for StateHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.mix(u64::from_le_bytes(c.try_into().expect("eight bytes")));
        }
        let rest = chunks.remainder();
        let mut tail = [0u8; 8];
        tail[..rest.len()].copy_from_slice(rest);
        // The length keeps "ab" + "" apart from "a" + "b".
        self.mix(u64::from_le_bytes(tail) ^ ((bytes.len() as u64) << 56));
    }

    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }

    fn write_u16(&mut self, i: u16) {
        self.mix(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.mix(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.mix(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }

    fn finish(&self) -> u64 {
        folded(self.state, K0 ^ K1)
    }
}

/// Values whose meaning is only their order (resourceVersions, op ids) or
/// their distance from now (times) hash through these functions. An
/// ordinary hasher hashes the value itself; [`canonical`] renames it, so
/// that two states equal but for such numbering hash the same.
pub mod canon {
    use std::hash::Hasher;

    use crate::Tick;

    // The tag travels in the high word of a u128, which nothing else in a
    // state writes.
    pub(super) const RV: u64 = 0x7256_ca11_0000_0001;
    pub(super) const OP: u64 = 0x0f1d_ca11_0000_0002;
    pub(super) const TIME: u64 = 0x71ce_ca11_0000_0003;

    fn tagged<H: Hasher>(h: &mut H, tag: u64, v: u64) {
        h.write_u128((u128::from(tag) << 64) | u128::from(v));
    }

    /// A resourceVersion: a number the store counts up (any other string is
    /// hashed as it is).
    pub fn rv<H: Hasher>(h: &mut H, rv: &str) {
        match rv.parse::<u64>() {
            Ok(v) => tagged(h, RV, v),
            Err(_) => h.write(rv.as_bytes()),
        }
    }

    /// The store's resourceVersion counter.
    pub fn version<H: Hasher>(h: &mut H, v: u64) {
        tagged(h, RV, v);
    }

    /// An op id, or the counter that issues them.
    pub fn op<H: Hasher>(h: &mut H, v: u64) {
        tagged(h, OP, v);
    }

    /// A time: a deadline, or the latest time a machine was told.
    pub fn time<H: Hasher>(h: &mut H, t: Tick) {
        tagged(h, TIME, t);
    }
}

/// The one pass of [`canonical`] over a state: the words a
/// [`StateHasher`] would mix, with where each tagged value sits, so that
/// renumbering and mixing run over a flat list instead of a second walk
/// of the state.
#[derive(Default)]
struct Words {
    words: Vec<u64>,
    /// (index in `words`, tag) of each tagged value.
    tagged: Vec<(usize, u64)>,
}

impl Words {
    fn bytes(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.words
                .push(u64::from_le_bytes(c.try_into().expect("eight bytes")));
        }
        let rest = chunks.remainder();
        let mut tail = [0u8; 8];
        tail[..rest.len()].copy_from_slice(rest);
        // The length keeps "ab" + "" apart from "a" + "b".
        self.words
            .push(u64::from_le_bytes(tail) ^ ((bytes.len() as u64) << 56));
    }
}

impl Hasher for Words {
    fn write(&mut self, bytes: &[u8]) {
        self.bytes(bytes);
    }
    fn write_u8(&mut self, i: u8) {
        self.words.push(u64::from(i));
    }
    fn write_u16(&mut self, i: u16) {
        self.words.push(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.words.push(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.words.push(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.words.push(i as u64);
    }
    fn write_u128(&mut self, i: u128) {
        let (tag, v) = ((i >> 64) as u64, i as u64);
        match tag {
            canon::RV | canon::OP | canon::TIME => {
                self.words.push(tag);
                self.tagged.push((self.words.len(), tag));
                self.words.push(v);
            }
            _ => self.bytes(&i.to_le_bytes()),
        }
    }
    fn finish(&self) -> u64 {
        0
    }
}

fn rank(sorted: &[u64], v: u64) -> u64 {
    sorted.binary_search(&v).unwrap_or_else(|i| i) as u64
}

/// One part of a state walked once: the hash of what it writes, with each
/// renumbered value (versions, ops, times) left out, and those values in
/// order. A part that has not changed is not walked again: the explorer
/// keeps each machine's part until the machine next changes, and
/// [`canonical_parts`] renumbers over the parts' values alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    shape: u64,
    /// The part's resourceVersions and op ids, each sorted without repeats.
    rvs: Vec<u64>,
    ops: Vec<u64>,
    /// Each renumbered value in order: a version or op by its place in
    /// `rvs` or `ops`, a time as it is.
    numbered: Vec<Numbered>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Numbered {
    Rv(usize),
    Op(usize),
    Time(u64),
}

impl Part {
    /// Walks `value`.
    pub fn of<T: std::hash::Hash + ?Sized>(value: &T) -> Part {
        let mut w = Words::default();
        value.hash(&mut w);
        let mut h = StateHasher::default();
        let mut values = Vec::with_capacity(w.tagged.len());
        let mut tagged = w.tagged.iter().peekable();
        for (at, &word) in w.words.iter().enumerate() {
            // The tag itself (the word before) is mixed: where a value
            // sits is the part's shape; the value is renumbered later.
            match tagged.next_if(|(t, _)| *t == at) {
                Some(&(_, tag)) => values.push((tag, word)),
                None => h.mix(word),
            }
        }
        let distinct = |tag: u64| {
            let mut v: Vec<u64> = values
                .iter()
                .filter(|(t, _)| *t == tag)
                .map(|&(_, v)| v)
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let (rvs, ops) = (distinct(canon::RV), distinct(canon::OP));
        let place = |list: &[u64], v: u64| list.binary_search(&v).unwrap_or_default();
        let numbered = values
            .iter()
            .map(|&(tag, v)| match tag {
                canon::RV => Numbered::Rv(place(&rvs, v)),
                canon::OP => Numbered::Op(place(&ops, v)),
                _ => Numbered::Time(v),
            })
            .collect();
        Part {
            shape: h.finish(),
            rvs,
            ops,
            numbered,
        }
    }
}

/// Each part's list of numbers, as ranks among all the parts' numbers.
fn ranks<'p>(parts: &[&'p Part], list: impl Fn(&'p Part) -> &'p [u64]) -> Vec<Vec<u64>> {
    let mut all: Vec<u64> = parts.iter().flat_map(|p| list(p)).copied().collect();
    all.sort_unstable();
    all.dedup();
    parts
        .iter()
        .map(|p| list(p).iter().map(|&v| rank(&all, v)).collect())
        .collect()
}

/// The hash of a state made of `parts` up to renumbering:
/// resourceVersions and op ids by their rank among all the parts' (order
/// kept: caches compare resourceVersions), times by their distance from
/// `now`. Two states reached by different paths that differ only in how
/// many versions the store counted, how many ops were issued, or when the
/// same wait started hash the same — the explorer's notion of one
/// situation. Sound because the machines only compare such values with
/// each other, never with constants. Most parts hold the same few
/// versions (every cache holds the same objects), so the ranks are worked
/// out over each part's distinct numbers, not over every value.
pub fn canonical_parts(parts: &[&Part], now: crate::Tick) -> u64 {
    let rvs = ranks(parts, |p| &p.rvs);
    let ops = ranks(parts, |p| &p.ops);
    let mut h = StateHasher::default();
    for (i, p) in parts.iter().enumerate() {
        h.mix(p.shape);
        h.mix(p.numbered.len() as u64);
        for n in &p.numbered {
            h.mix(match *n {
                Numbered::Rv(at) => rvs[i][at],
                Numbered::Op(at) => ops[i][at],
                Numbered::Time(t) => t.wrapping_sub(now),
            });
        }
    }
    h.finish()
}

/// The hash of `state` up to renumbering, walked as one part (see
/// [`canonical_parts`]).
#[cfg(test)]
pub fn canonical<T: std::hash::Hash + ?Sized>(state: &T, now: crate::Tick) -> u64 {
    canonical_parts(&[&Part::of(state)], now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::hash::Hash;

    fn hash<T: Hash>(t: &T) -> u64 {
        let mut h = StateHasher::default();
        t.hash(&mut h);
        h.finish()
    }

    #[test]
    fn equal_values_hash_equal_and_near_ones_apart() {
        assert_eq!(hash(&("pv-1", 3u64)), hash(&("pv-1", 3u64)));
        // Splits of the same bytes, neighbouring integers and names that
        // differ in one character all hash apart.
        let mut seen = HashSet::new();
        for v in [
            hash(&("ab", "")),
            hash(&("a", "b")),
            hash(&("", "ab")),
            hash(&0u64),
            hash(&1u64),
            hash(&(0u64, 0u64)),
        ] {
            assert!(seen.insert(v), "a collision among near values");
        }
        let names: HashSet<u64> = (0..100_000).map(|i| hash(&format!("pvc-{i}"))).collect();
        assert_eq!(names.len(), 100_000, "names collided");
    }

    /// A state of versions, ops and times, hashed through `canon`.
    #[derive(Hash)]
    struct Numbered(Vec<Tagged>);

    enum Tagged {
        Rv(&'static str),
        Op(u64),
        At(u64),
        Plain(u64),
    }

    impl Hash for Tagged {
        fn hash<H: Hasher>(&self, h: &mut H) {
            match self {
                Tagged::Rv(v) => canon::rv(h, v),
                Tagged::Op(v) => canon::op(h, *v),
                Tagged::At(t) => canon::time(h, *t),
                Tagged::Plain(v) => h.write_u64(*v),
            }
        }
    }

    #[test]
    fn canonical_hashes_renumberings_alike_and_orders_apart() {
        use Tagged::*;
        let a = Numbered(vec![Rv("7"), Rv("3"), Op(10), At(1_500), Plain(4)]);
        // Versions and ops shifted with their order kept, times moved with now.
        let b = Numbered(vec![Rv("70"), Rv("12"), Op(99), At(11_500), Plain(4)]);
        assert_eq!(canonical(&a, 1_000), canonical(&b, 11_000));
        // The order of two versions is part of the state.
        let swapped = Numbered(vec![Rv("3"), Rv("7"), Op(10), At(1_500), Plain(4)]);
        assert_ne!(canonical(&a, 1_000), canonical(&swapped, 1_000));
        // So is equality, the distance to a deadline, and a plain number.
        let merged = Numbered(vec![Rv("7"), Rv("7"), Op(10), At(1_500), Plain(4)]);
        assert_ne!(canonical(&a, 1_000), canonical(&merged, 1_000));
        assert_ne!(canonical(&a, 1_000), canonical(&a, 1_001));
        let plain = Numbered(vec![Rv("7"), Rv("3"), Op(10), At(1_500), Plain(5)]);
        assert_ne!(canonical(&a, 1_000), canonical(&plain, 1_000));
        // A plain hash still tells the numberings apart.
        assert_ne!(hash(&a), hash(&b));
        // Parts are renumbered together: versions keep their order across
        // parts, and moving a value to another part is another state.
        let parts = |x: Vec<Tagged>, y: Vec<Tagged>| {
            let (x, y) = (Part::of(&Numbered(x)), Part::of(&Numbered(y)));
            canonical_parts(&[&x, &y], 1_000)
        };
        assert_eq!(
            parts(vec![Rv("7")], vec![Rv("3")]),
            parts(vec![Rv("70")], vec![Rv("12")])
        );
        assert_ne!(
            parts(vec![Rv("7")], vec![Rv("3")]),
            parts(vec![Rv("3")], vec![Rv("7")])
        );
        assert_ne!(
            parts(vec![Rv("7"), Rv("3")], vec![]),
            parts(vec![Rv("7")], vec![Rv("3")])
        );
    }
}
