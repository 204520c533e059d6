//! The key hash: every key is hashed once, with xxh3, to the 64-bit value the
//! perfect hashes, signatures and hash ranges are computed from.

/// Seed of the key hash. Part of the on-disk format: changing it makes
/// every stored hash wrong.
pub const KEY_HASH_SEED: u64 = 0x7470_6864_625f_6b68;

/// The 64-bit hash of a key.
#[inline]
pub fn key_hash(key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64_with_seed(key, KEY_HASH_SEED)
}
