//! Where a run's choices come from: a seed (the command line, a driver's
//! tests), or the bytes a fuzzer hands in (a fuzz target: the fuzzer then
//! steers the steps by what its coverage finds).

use crate::rng::Rng;

/// The source of a run's choices.
#[derive(Debug, Clone)]
pub enum Chooser {
    /// Pseudo-random from a seed.
    Seeded(Rng),
    /// Byte by byte; when they run out, the run ends.
    Bytes {
        /// The bytes.
        bytes: Vec<u8>,
        /// The next one.
        at: usize,
    },
}

impl Chooser {
    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        match self {
            Chooser::Seeded(rng) => rng.below(n),
            Chooser::Bytes { .. } if n <= 1 => 0,
            Chooser::Bytes { bytes, at } => {
                // Two bytes when one cannot reach every choice.
                let wide = n > 256;
                let mut x = 0usize;
                for _ in 0..if wide { 2 } else { 1 } {
                    x = (x << 8) | usize::from(bytes.get(*at).copied().unwrap_or(0));
                    *at += 1;
                }
                x % n
            }
        }
    }

    /// True with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        match self {
            Chooser::Seeded(rng) => rng.chance(per_mille),
            Chooser::Bytes { .. } => {
                let b = self.below(256) as u32;
                b * 1000 < per_mille * 256
            }
        }
    }

    /// True when a fuzzer's bytes are all used.
    pub fn exhausted(&self) -> bool {
        match self {
            Chooser::Seeded(_) => false,
            Chooser::Bytes { bytes, at } => *at >= bytes.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_choose_in_range_and_run_out() {
        let mut c = Chooser::Bytes {
            bytes: vec![7, 255, 3],
            at: 0,
        };
        assert_eq!(c.below(5), 2);
        assert!(!c.chance(500));
        assert!(!c.exhausted());
        assert_eq!(c.below(1000), (3 << 8));
        assert!(c.exhausted());
        assert_eq!(c.below(9), 0);
    }
}
