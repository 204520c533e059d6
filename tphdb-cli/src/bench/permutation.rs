//! A random order of `0..n` that takes no memory: the bench's fill order
//! used to be a shuffled `Vec<u64>`, 128 MB at 16M keys, which every
//! engine's peak resident set then counted as its own.
//!
//! A balanced Feistel network over the smallest even number of bits that
//! holds `n - 1` is a permutation of that power of two (each round can be
//! undone whatever its round function); cycle walking (applying it again
//! until the value falls below `n`) restricts it to `0..n`. The domain is
//! less than `4n`, so a value takes at most a few walks on average.

/// Rounds of the network: with a good mixing round function, six leave no
/// pattern a key-value store could notice.
const ROUNDS: usize = 6;

/// A permutation of `0..n`, chosen by a seed.
#[derive(Clone, Debug)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    keys: [u64; ROUNDS],
}

impl Permutation {
    pub fn new(n: u64, seed: u64) -> Self {
        let bits = u64::BITS - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let mut rng = fastrand::Rng::with_seed(seed);
        Permutation {
            n,
            half_bits,
            keys: std::array::from_fn(|_| rng.u64(..)),
        }
    }

    /// The `i`th value of the order; `i` must be below `n`.
    pub fn get(&self, i: u64) -> u64 {
        debug_assert!(i < self.n, "{i} not below {}", self.n);
        let mut x = i;
        loop {
            x = self.encrypt(x);
            if x < self.n {
                return x;
            }
        }
    }

    fn encrypt(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut left, mut right) = (x >> self.half_bits, x & mask);
        for key in self.keys {
            let next = left ^ (mix(right ^ key) & mask);
            left = right;
            right = next;
        }
        (left << self.half_bits) | right
    }
}

/// SplitMix64's finalizer: every input bit moves every output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_below_n_comes_once() {
        for n in [1u64, 2, 3, 5, 16, 17, 100, 1000, 4097, 65_536, 100_003] {
            let p = Permutation::new(n, 7);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let v = p.get(i);
                assert!(v < n, "n {n}: {i} -> {v}");
                assert!(!seen[v as usize], "n {n}: {v} twice");
                seen[v as usize] = true;
            }
        }
    }

    #[test]
    fn the_order_is_shuffled_and_set_by_the_seed() {
        let n = 1 << 16;
        let (a, b) = (Permutation::new(n, 1), Permutation::new(n, 2));
        let order = |p: &Permutation| (0..n).map(|i| p.get(i)).collect::<Vec<_>>();
        let (oa, ob) = (order(&a), order(&b));
        assert_eq!(oa, order(&Permutation::new(n, 1)), "same seed, same order");
        let same_place = oa.iter().zip(&ob).filter(|(x, y)| x == y).count();
        assert!(same_place < 16, "{same_place} values in the same place");
        // Neighbours in the order are not neighbours in value: about 2 in n
        // pairs are in a random order.
        let adjacent = oa.windows(2).filter(|w| w[0].abs_diff(w[1]) == 1).count();
        assert!(adjacent < 16, "{adjacent} adjacent pairs");
        // The first half of the order is spread over all of 0..n.
        let low = oa[..n as usize / 2].iter().filter(|&&v| v < n / 2).count();
        let expected = n as usize / 4;
        assert!(low.abs_diff(expected) < expected / 20, "{low} low values");
    }
}
