//! A seeded pseudo-random source for the randomized suites (tests/soak.rs,
//! tests/explore.rs): splitmix64 (Steele, Lea, Flood, "Fast splittable pseudorandom
//! number generators", OOPSLA 2014; constants as in Vigna's reference `splitmix64.c`).
//! The same seed gives the same stream on every machine, which is what makes a reported
//! seed a reproduction; changing this code changes what every recorded seed means.

/// splitmix64 state. `Rng(s)` starts from state `s`; [`Rng::new`] from a seed.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The explorer's start from `seed` (mixed, so that seeds 0, 1, 2… differ at once).
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5eed_1b5e_0c0f_fee5)
    }
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    /// True with probability `p` per mille.
    pub fn pm(&mut self, p: u64) -> bool {
        self.below(1000) < p
    }
    /// True with probability `percent` per cent.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    /// One element of `v`, `None` when it is empty.
    pub fn pick<'a, T>(&mut self, v: &'a [T]) -> Option<&'a T> {
        if v.is_empty() {
            None
        } else {
            Some(&v[self.below(v.len() as u64) as usize])
        }
    }
}
