//! Key hashes. Every key is hashed once, with xxh3, to the 64-bit value the
//! perfect hashes, signatures and hash ranges are computed from.

use std::ops::{Range, RangeInclusive};

use crate::util::reduce::mix64;

/// Seed of the key hash. Part of the on-disk format: changing it makes
/// every stored hash wrong.
pub const KEY_HASH_SEED: u64 = 0x7470_6864_625f_6b68;
/// Seed of the second, independent key hash that tells apart keys whose
/// first hashes collide (TPH exception lists, compaction).
const KEY_HASH2_SEED: u64 = 0x7470_6864_625f_6b32;
/// Seed deriving a TPH slot's signature from the key hash.
const SIGNATURE_SEED: u64 = 0x7369_676e_6174_7572;

/// The 64-bit hash of a key.
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    let h = xxhash_rust::xxh3::xxh3_64_with_seed(key, KEY_HASH_SEED);
    #[cfg(test)]
    let h = test_support::narrow(h);
    h
}

/// The second hash of a key, 32 bits wide (the high half of a second
/// xxh3); `(key_hash, key_hash2)` identifies a key up to a 2^-96 chance.
/// Pieces of format 1 and 2 and heads of meta version 1 to 3 stored the
/// whole 64-bit hash: their readers take its high half
/// ([`narrow_hash2`]), so that stored and computed hashes compare.
#[inline]
pub(crate) fn key_hash2(key: &[u8]) -> u64 {
    narrow_hash2(xxhash_rust::xxh3::xxh3_64_with_seed(key, KEY_HASH2_SEED))
}

/// The 64-bit second hash older formats stored, whose high half is
/// [`key_hash2`].
#[cfg(test)]
pub(crate) fn wide_key_hash2(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key, KEY_HASH2_SEED)
}

/// The 32-bit second hash of a key whose 64-bit second hash (as older
/// formats stored it) is `wide`. Its high half: sorted pairs of wide
/// hashes stay sorted.
#[inline]
pub(crate) fn narrow_hash2(wide: u64) -> u64 {
    wide >> 32
}

/// The `bits`-bit signature stored in a TPH slot, independent of the slot.
#[inline]
pub(crate) fn signature(h: u64, bits: u32) -> u64 {
    debug_assert!((1..=32).contains(&bits));
    mix64(h, SIGNATURE_SEED) >> (64 - bits)
}

/// The 32-bit search key of the hash-range levels (paper §3.4).
#[inline]
pub(crate) fn search_key(h: u64) -> u32 {
    (h >> 32) as u32
}

/// The partition of `h` in a level of `partitions` equal hash ranges.
#[inline]
pub(crate) fn partition_of(h: u64, partitions: u64) -> u64 {
    (search_key(h) as u64 * partitions) >> 32
}

/// The key hashes of partitions `parts` of a level of `partitions`: one
/// interval, as [`partition_of`] is monotone in the hash.
pub(crate) fn hashes_of_partitions(parts: Range<u64>, partitions: u64) -> RangeInclusive<u64> {
    debug_assert!(parts.start < parts.end && parts.end <= partitions);
    // The first hash of partition p: the least search key s with
    // s * partitions >= p << 32.
    let first = |p: u64| ((u128::from(p) << 32).div_ceil(u128::from(partitions))) << 32;
    let end = first(parts.end) - 1;
    first(parts.start) as u64..=end as u64
}

/// Unit tests force 64-bit hash collisions by keeping only a few bits of
/// the key hash, per thread (set it on rayon's workers too).
#[cfg(test)]
pub(crate) mod test_support {
    use std::cell::Cell;

    thread_local! {
        static HASH_BITS: Cell<u32> = const { Cell::new(64) };
    }

    fn set_hash_bits(bits: u32) {
        HASH_BITS.set(bits);
    }

    /// Runs `f` on a pool of one thread with key hashes narrowed to
    /// `bits` there and here, so that keys share hashes.
    pub(crate) fn with_hash_bits<R: Send>(bits: u32, f: impl FnOnce() -> R + Send) -> R {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .expect("a pool of one thread");
        pool.broadcast(|_| set_hash_bits(bits));
        set_hash_bits(bits);
        let r = pool.install(f);
        pool.broadcast(|_| set_hash_bits(64));
        set_hash_bits(64);
        r
    }

    pub(crate) fn narrow(h: u64) -> u64 {
        match HASH_BITS.get() {
            64 => h,
            // Keep the top bits: they choose segments and hash ranges.
            bits => h & !(u64::MAX >> bits),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hashes_of_partitions_are_exactly_theirs() {
        for partitions in [1u64, 2, 3, 7, 8, 64, 100, 512, 4096, 1 << 20] {
            for parts in [
                0..1,
                0..partitions,
                partitions - 1..partitions,
                partitions / 3..partitions / 2 + 1,
            ] {
                let r = hashes_of_partitions(parts.clone(), partitions);
                assert_eq!(partition_of(*r.start(), partitions), parts.start);
                assert_eq!(partition_of(*r.end(), partitions), parts.end - 1);
                if *r.start() > 0 {
                    assert_eq!(partition_of(r.start() - 1, partitions), parts.start - 1);
                }
                if *r.end() < u64::MAX {
                    assert_eq!(partition_of(r.end() + 1, partitions), parts.end);
                }
            }
        }
    }
}
