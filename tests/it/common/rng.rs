//! A small xorshift64 generator for the randomized tests (no dependency): reproducible from its
//! seed, and cheap enough that each task or thread holds its own.

/// A xorshift64 generator; the same seed gives the same stream.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        // Spread the seed so that close seeds give unrelated streams; never zero.
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next number of the stream.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// True with probability `percent` / 100.
    #[allow(
        dead_code,
        reason = "only the soak test, a binary of its own, draws chances"
    )]
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}
