//! Perfect hashing over 64-bit key hashes.
//!
//! A perfect hash maps each of a fixed set of `n` distinct 64-bit hashes to a
//! distinct slot in `[0, table_size)`. tphdb uses one for every piece (the
//! local index) and one per TPH (the global index). Everything else reaches
//! the perfect hash through [`PerfectHash`], so the default, [`CpHash`]
//! (the CompassDB paper's CPHash), and the stand-in, [`PtrHashPhf`] (the
//! `ptr_hash` crate), are interchangeable and selected by [`PhfKind`].
//!
//! Hashes that occur more than once in the input cannot be told apart by any
//! hash function of the hash. Builders drop the repeats, build over the
//! distinct values, and report each repeated value in
//! [`Built::duplicate_hashes`]; the caller keeps the keys behind those hashes
//! somewhere else (see `docs/format.md`).

mod cphash;
pub mod fuse;
mod ptrhash;

use bytes::Bytes;

use crate::error::{Error, Result};

pub use cphash::CpHash;
pub use ptrhash::PtrHashPhf;

/// The operations tphdb needs from a perfect hash function.
pub trait PerfectHash: Sized + Send + Sync + 'static {
    /// Builds over `hashes` in the current rayon thread pool (wrap the call in
    /// `ThreadPool::install` to bound the threads).
    fn build(hashes: &[u64], config: &PhfConfig) -> Result<Built<Self>>;

    /// The slot of a hash that was in the build set: distinct for distinct
    /// members and below [`PerfectHash::table_size`]. A non-member maps to an
    /// arbitrary slot below the table size (or 0 when the table is empty).
    fn slot(&self, hash: u64) -> usize;

    /// Number of slots; every member maps below it.
    fn table_size(&self) -> usize;

    /// Number of distinct hashes the function was built over.
    fn len(&self) -> usize;

    /// True when built over no hashes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the serialized form to `out`.
    fn encode(&self, out: &mut Vec<u8>);

    /// Loads a serialized function. Large arrays are used in place, not
    /// copied, where the implementation allows. Hostile input yields an error.
    fn decode(bytes: Bytes) -> Result<Self>;

    /// Bytes of memory the loaded function keeps.
    fn memory_bytes(&self) -> usize;
}

/// The result of a build.
#[derive(Debug)]
pub struct Built<P> {
    /// The perfect hash over the distinct input hashes.
    pub phf: P,
    /// Values that occurred more than once in the input, each listed once.
    /// They map to a slot like every member, but that slot can hold only one
    /// of the keys that share the hash.
    pub duplicate_hashes: Vec<u64>,
}

/// Construction parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct PhfConfig {
    /// Table size over key count, `c` in the paper (≥ 1.0). 1.0 builds a
    /// minimal perfect hash. Default 1.1, the paper's load factor of 90%.
    pub table_factor: f64,
    /// Average keys per bucket (`λ`, 1.0 to 6.0); larger is smaller and
    /// slower to build. `None` picks a value suited to `table_factor`.
    pub keys_per_bucket: Option<f64>,
    /// Target keys per segment (4096); segments are built independently, in
    /// parallel, and sized to stay in the CPU cache while being searched.
    /// With `ordered_segments` they are also the grain at which a range of
    /// hashes finds its slots together.
    pub segment_keys: usize,
    /// Seed of the construction; builds are deterministic given the seed.
    pub seed: u64,
    /// CPHash: segments by where the hash lies in the keys' interval of
    /// hashes (format version 3), so that slots follow the hash order a
    /// segment at a time (true). False builds version 1, which chose them
    /// by the mixed hash.
    pub ordered_segments: bool,
    /// CPHash with `ordered_segments`: the interval the keys' hashes come
    /// from (a level's partition), which the segments divide evenly, so
    /// that a partition of the level below begins on a segment boundary
    /// when the segment count is a multiple of the fanout. `None`: the
    /// interval from the least to the greatest hash built over.
    pub hash_range: Option<(u64, u64)>,
}

impl Default for PhfConfig {
    fn default() -> Self {
        PhfConfig {
            table_factor: 1.1,
            keys_per_bucket: None,
            segment_keys: 1 << 12,
            seed: 0x7470_6864_6221_0001,
            ordered_segments: true,
            hash_range: None,
        }
    }
}

impl PhfConfig {
    pub(crate) fn validate(&self) -> Result<()> {
        if !(self.table_factor >= 1.0 && self.table_factor <= 16.0) {
            return Err(Error::InvalidArgument(format!(
                "perfect hash table_factor must be in [1.0, 16.0], got {}",
                self.table_factor
            )));
        }
        if let Some(l) = self.keys_per_bucket {
            if !(1.0..=6.0).contains(&l) {
                return Err(Error::InvalidArgument(format!(
                    "perfect hash keys_per_bucket must be in [1.0, 6.0], got {l}"
                )));
            }
        }
        if self.segment_keys == 0 || self.segment_keys > 1 << 26 {
            return Err(Error::InvalidArgument(format!(
                "perfect hash segment_keys must be in [1, 2^26], got {}",
                self.segment_keys
            )));
        }
        if let Some((lo, hi)) = self.hash_range {
            if lo > hi {
                return Err(Error::InvalidArgument(format!(
                    "perfect hash hash_range must not be empty, got {lo:#x}..={hi:#x}"
                )));
            }
        }
        Ok(())
    }
}

/// Sorted distinct values of `hashes`, and the values that occur more than
/// once (each listed once).
pub(crate) fn split_repeats(hashes: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let mut v = hashes.to_vec();
    v.sort_unstable();
    let mut repeats: Vec<u64> = v
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| w[0])
        .collect();
    repeats.dedup();
    v.dedup();
    (v, repeats)
}

/// Appends the XXH3-64 of `out[start..]`: the trailer of a serialized
/// perfect hash.
pub(crate) fn seal(out: &mut Vec<u8>, start: usize) {
    let checksum = xxhash_rust::xxh3::xxh3_64(&out[start..]);
    out.extend_from_slice(&checksum.to_le_bytes());
}

/// Checks the XXH3-64 trailer of a serialized perfect hash of at least
/// `min_len` bytes and returns the body before it. `strict` keeps the check
/// even in fuzz builds.
pub(crate) fn unseal(bytes: &[u8], min_len: usize, strict: bool) -> Result<&[u8]> {
    if bytes.len() < min_len.max(8) {
        return Err(Error::corruption(
            "length",
            format!("at least {min_len} bytes"),
            bytes.len(),
        ));
    }
    let (body, trailer) = bytes.split_at(bytes.len() - 8);
    let stored = u64::from_le_bytes(trailer.try_into().expect("8 bytes"));
    let actual = xxhash_rust::xxh3::xxh3_64(body);
    let ok = if strict {
        stored == actual
    } else {
        crate::util::checksum_matches(stored, actual)
    };
    if !ok {
        return Err(Error::corruption(
            "checksum",
            format!("{stored:#018x}"),
            format!("{actual:#018x}"),
        ));
    }
    Ok(body)
}

/// Which perfect hash implementation a table uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PhfKind {
    /// CPHash, tphdb's own (the default).
    #[default]
    CpHash,
    /// PtrHash from the `ptr_hash` crate, loaded through epserde.
    PtrHash,
}

impl PhfKind {
    fn tag(self) -> u8 {
        match self {
            PhfKind::CpHash => 1,
            PhfKind::PtrHash => 2,
        }
    }

    /// Name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            PhfKind::CpHash => "cphash",
            PhfKind::PtrHash => "ptr_hash",
        }
    }
}

/// A perfect hash of either kind, tagged with its kind when serialized.
#[derive(Debug)]
pub enum Phf {
    /// CPHash.
    CpHash(CpHash),
    /// PtrHash.
    PtrHash(PtrHashPhf),
}

impl Phf {
    /// Builds a perfect hash of the given kind.
    pub fn build(kind: PhfKind, hashes: &[u64], config: &PhfConfig) -> Result<Built<Phf>> {
        match kind {
            PhfKind::CpHash => {
                let b = CpHash::build(hashes, config)?;
                Ok(Built {
                    phf: Phf::CpHash(b.phf),
                    duplicate_hashes: b.duplicate_hashes,
                })
            }
            PhfKind::PtrHash => {
                let b = PtrHashPhf::build(hashes, config)?;
                Ok(Built {
                    phf: Phf::PtrHash(b.phf),
                    duplicate_hashes: b.duplicate_hashes,
                })
            }
        }
    }

    /// The kind of this function.
    pub fn kind(&self) -> PhfKind {
        match self {
            Phf::CpHash(_) => PhfKind::CpHash,
            Phf::PtrHash(_) => PhfKind::PtrHash,
        }
    }

    /// See [`PerfectHash::slot`].
    #[inline]
    pub fn slot(&self, hash: u64) -> usize {
        match self {
            Phf::CpHash(p) => p.slot(hash),
            Phf::PtrHash(p) => p.slot(hash),
        }
    }

    /// Asks the CPU for the memory [`Phf::slot`] of `hash` reads past the
    /// function's small per-segment table (CPHash: the bucket's pilot).
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        if let Phf::CpHash(p) = self {
            p.prefetch(hash);
        }
    }

    /// See [`PerfectHash::table_size`].
    pub fn table_size(&self) -> usize {
        match self {
            Phf::CpHash(p) => p.table_size(),
            Phf::PtrHash(p) => p.table_size(),
        }
    }

    /// See [`PerfectHash::len`].
    pub fn len(&self) -> usize {
        match self {
            Phf::CpHash(p) => p.len(),
            Phf::PtrHash(p) => p.len(),
        }
    }

    /// True when built over no hashes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// See [`PerfectHash::memory_bytes`].
    pub fn memory_bytes(&self) -> usize {
        match self {
            Phf::CpHash(p) => p.memory_bytes(),
            Phf::PtrHash(p) => p.memory_bytes(),
        }
    }

    /// Appends a kind tag and the serialized function.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.kind().tag());
        match self {
            Phf::CpHash(p) => p.encode(out),
            Phf::PtrHash(p) => p.encode(out),
        }
    }

    /// Loads what [`Phf::encode`] wrote, if it is a CPHash: a PtrHash is
    /// refused, its loader does not validate what it loads (see
    /// [`Phf::decode_with`]).
    pub fn decode(bytes: Bytes) -> Result<Phf> {
        Phf::decode_with(bytes, false)
    }

    /// Loads what [`Phf::encode`] wrote; a PtrHash only with
    /// `allow_ptrhash`. CPHash validates every field it loads. The PtrHash
    /// loader (epserde) does not: a crafted file with a valid checksum can
    /// make it misbehave, so it is read only when the caller chose PtrHash.
    pub fn decode_with(bytes: Bytes, allow_ptrhash: bool) -> Result<Phf> {
        let Some(&tag) = bytes.first() else {
            return Err(Error::corruption(
                "perfect hash kind tag",
                "1 byte",
                "empty input",
            ));
        };
        let rest = bytes.slice(1..);
        match tag {
            1 => Ok(Phf::CpHash(CpHash::decode(rest)?)),
            2 if allow_ptrhash => Ok(Phf::PtrHash(PtrHashPhf::decode(rest)?)),
            2 => Err(Error::Unsupported(
                "a PtrHash perfect hash, read only when PtrHash is chosen \
                 (phf_kind): its loader does not validate what it loads"
                    .into(),
            )),
            t => Err(Error::corruption(
                "perfect hash kind tag",
                "1 (cphash) or 2 (ptr_hash)",
                t,
            )),
        }
    }
}
