//! Fast range reduction without division (Lemire, "fastrange" and "fastmod").

/// Maps a uniformly random 64-bit `x` to `[0, d)` using its high bits.
#[inline(always)]
pub(crate) fn mul_high(x: u64, d: u64) -> u64 {
    ((x as u128 * d as u128) >> 64) as u64
}

/// Which of `count` equal shares of an interval starting at `lo` holds
/// `h`: `min(mulhi(h -sat lo, scale), count - 1)`, monotone in `h`. Both
/// the fuse's chunks and CPHash's segments are chosen so, each with the
/// `lo` and `scale` it records; `count` must be at least 1.
#[inline(always)]
pub(crate) fn interval_index(h: u64, lo: u64, scale: u64, count: u64) -> u64 {
    mul_high(h.saturating_sub(lo), scale).min(count - 1)
}

/// Lemire's fastmod for a fixed divisor: `reduce(x)` equals `x % d` for
/// `x < 2^32` and is a well-mixed value in `[0, d)` for larger `x`, which is
/// all a perfect hash needs. Two multiplications, no division.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FastMod {
    d: u64,
    m: u64,
}

impl FastMod {
    /// `d` must be at least 1.
    pub(crate) fn new(d: u64) -> Self {
        debug_assert!(d >= 1);
        FastMod {
            d,
            m: (u64::MAX / d).wrapping_add(1),
        }
    }

    pub(crate) fn divisor(self) -> u64 {
        self.d
    }

    #[inline(always)]
    pub(crate) fn reduce(self, x: u64) -> u64 {
        mul_high(self.m.wrapping_mul(x), self.d)
    }
}

/// The 64-bit mixing constant used by tphdb's internal hashes (odd).
pub(crate) const MIX: u64 = 0x517c_c1b7_2722_0a95;

/// Re-randomizes an already uniform 64-bit hash under `seed`.
///
/// A bijection for a fixed seed (xor, multiplication by an odd constant and an
/// xor-shift are each invertible), so distinct inputs stay distinct: a
/// collision after mixing is always a collision of the inputs.
#[inline(always)]
pub(crate) fn mix64(x: u64, seed: u64) -> u64 {
    let y = (x ^ seed).wrapping_mul(MIX);
    y ^ (y >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fastmod_is_exact_below_2_pow_32() {
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..1000 {
            let d = rng.u64(1..1 << 32);
            let f = FastMod::new(d);
            for _ in 0..100 {
                let x = rng.u64(0..1 << 32);
                assert_eq!(f.reduce(x), x % d);
            }
            assert!(f.reduce(rng.u64(..)) < d);
        }
    }

    #[test]
    fn mix64_is_injective_on_a_sample() {
        let mut seen = std::collections::HashSet::new();
        for x in 0..100_000u64 {
            assert!(seen.insert(mix64(x, 42)));
        }
    }

    #[test]
    fn mul_high_stays_in_range() {
        for d in [1u64, 2, 3, 1000, u64::MAX] {
            assert!(mul_high(u64::MAX, d) < d);
            assert_eq!(mul_high(0, d), 0);
        }
    }
}
