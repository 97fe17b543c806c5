//! Seeded randomness for the simulator and the fault properties: the
//! same seed gives the same sequence on every machine.

/// A deterministic pseudo-random sequence (xorshift64*), seeded.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A sequence from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// A number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
    /// True with probability `per_mille` / 1000.
    pub fn chance(&mut self, per_mille: u32) -> bool {
        (self.next_u64() % 1000) < u64::from(per_mille)
    }
}
