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
}
