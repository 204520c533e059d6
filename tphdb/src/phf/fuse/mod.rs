//! A static function over 64-bit key hashes: a 4-wise binary fuse
//! retrieval structure (Graf and Lemire, "Binary Fuse Filters: Fast and
//! Smaller Than Xor Filters", 2022), storing a `w`-bit value per key.
//!
//! A TPH's global index stores a signature and a piece number per key. With
//! a perfect hash that costs the function (about 2.2 bits a key) plus a
//! `w`-bit slot per table entry, empty ones included (1.07 per key): about
//! `1.07 w + 2.2` bits. A fuse stores only cells: a key's value is the xor
//! of four of them, chosen by its hash in four consecutive segments, so it
//! costs `1.075 w` bits a key for a million keys (1.1 w at 250,000) and
//! nothing else. Asked for a key it was not built over, it returns an
//! arbitrary value, which the signature in it rejects as a slot's would.
//!
//! Keys are split into chunks, each an independent fuse, by where their
//! hash lies in the range the keys come from (a TPH's partition): a build
//! holds the chunks of one batch at a time (about [`BUILD_BYTES_PER_KEY`]
//! a key), and a batch's keys are one interval of hashes, which a source
//! whose keys are sorted by hash (a piece's key-hash section) finds as one
//! run instead of sifting every key.

use std::ops::RangeInclusive;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::util::bits::field;
use crate::util::codec::{Decoder, PutExt};
use crate::util::reduce::{interval_index, mix64, mul_high};

/// Four cells per key, in four consecutive segments.
const ARITY: u64 = 4;
/// Largest segment: `2^18` cells.
const MAX_LOG2_SEGMENT: u32 = 18;
/// Seeds tried per chunk before the build gives up. A try succeeds with
/// probability well above a half at the sizes below.
const MAX_ATTEMPTS: u64 = 64;
/// Keys per chunk at most. A larger chunk takes fewer cells a key (1.075
/// from 600,000 keys on, 1.1 at this size) but builds slower once its
/// peeling table leaves the CPU's cache: at a million keys, 131 ns a key
/// against 82 here, for 0.3 bits a key less (`tphdb bench phf --engines
/// fuse`). The chunks of a batch build in parallel (a TPH's index takes
/// one chunk a batch, to hold one peeling table at a time).
pub const MAX_CHUNK_KEYS: u64 = 1 << 18;
/// Memory a build holds per key of the chunks it is building, at most: the
/// hash and its tag (12 bytes, with room for a sixteenth more keys than
/// the average chunk's), and while a chunk is built, a word per cell for
/// its count and xor and then its value (8 bytes, 1.1 to 1.2 cells a key),
/// the peeling stack (4) and queue (about 0.5).
pub const BUILD_BYTES_PER_KEY: usize = 28;
/// Written: chunks by hash interval. Version 1 (still read) chose them by
/// a mixed hash.
const SECTION_VERSION: u32 = 2;
/// Bytes of a chunk's header on disk: seed, segment count, log2 segment.
const CHUNK_BYTES: usize = 16;

/// `(hash, tag)` pairs to build over, yielded to the callback: a source is
/// called once per batch with the batch's interval of hashes and must
/// yield every pair whose hash lies in it (others are ignored), the same
/// ones each time it is asked for that interval. A key's value is computed
/// from its pair only in its own batch.
pub(crate) type TagSource<'a> =
    dyn FnMut(RangeInclusive<u64>, &mut dyn FnMut(u64, u32)) -> Result<()> + 'a;

/// A key's value from its hash and tag.
pub(crate) type ValueOf<'a> = dyn Fn(u64, u32) -> u64 + Sync + 'a;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Chunk {
    /// First cell of the chunk.
    offset: u64,
    seed: u64,
    log2_segment: u32,
    segment_count: u32,
}

impl Chunk {
    fn cells(&self) -> u64 {
        (self.segment_count as u64 + ARITY - 1) << self.log2_segment
    }

    /// The four cells of `h` (relative to the chunk).
    #[inline(always)]
    fn positions(&self, h: u64) -> [u64; 4] {
        let k = mix64(h, self.seed);
        let len = 1u64 << self.log2_segment;
        let mask = len - 1;
        let first = mul_high(k, (self.segment_count as u64) << self.log2_segment);
        let k2 = mix64(k, POSITION_SEED);
        [
            first,
            (first + len) ^ (k2 & mask),
            (first + 2 * len) ^ ((k2 >> 21) & mask),
            (first + 3 * len) ^ ((k2 >> 42) & mask),
        ]
    }
}

const POSITION_SEED: u64 = 0x6675_7365_706f_7331;

/// Segment length and count for `n` keys: the binary fuse paper's rules
/// for arity 4.
fn layout(n: u64) -> (u32, u32) {
    let size = n.max(2) as f64;
    let log2_segment =
        ((size.ln() / 2.91f64.ln() - 0.5).floor().max(0.0) as u32).min(MAX_LOG2_SEGMENT);
    let factor = (0.77 + 0.305 * 600_000f64.ln() / size.ln()).max(1.075);
    let len = 1u64 << log2_segment;
    let capacity = if n <= 1 {
        0
    } else {
        (size * factor).round() as u64
    };
    let segments = capacity.div_ceil(len).saturating_sub(ARITY - 1).max(1);
    (log2_segment, segments.min(u32::MAX as u64) as u32)
}

/// Which chunk a hash belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunking {
    /// Version 2: `min(mul_high(h -sat lo, scale), chunks - 1)`, monotone
    /// in the hash.
    Interval { lo: u64, scale: u64 },
    /// Version 1: `mul_high(mix64(h, seed), chunks)`.
    Mixed { seed: u64 },
}

impl Chunking {
    /// Chunks of equal shares of `hashes` (`count` of them).
    fn over(hashes: &RangeInclusive<u64>, count: u64) -> Chunking {
        let span = (*hashes.end() as u128) - (*hashes.start() as u128) + 1;
        let scale = ((count as u128) << 64).div_ceil(span).min(u64::MAX as u128) as u64;
        Chunking::Interval {
            lo: *hashes.start(),
            scale,
        }
    }

    /// The hashes `count` chunks divide, as [`Chunking::over`] was given
    /// them; `None` for mixed chunks. The end is exact where the span
    /// divides `count << 64` (partitions of a power-of-two fanout), and
    /// otherwise short of it by less than a `scale`th of the span, the
    /// rounding `over` gave `scale`: near enough to size a list by.
    fn hashes(self, count: u64) -> Option<RangeInclusive<u64>> {
        match self {
            Chunking::Interval { lo, scale } if scale > 0 => {
                let span = (u128::from(count) << 64) / u128::from(scale);
                let end = (u128::from(lo) + span.max(1) - 1).min(u128::from(u64::MAX));
                Some(lo..=end as u64)
            }
            _ => None,
        }
    }

    #[inline(always)]
    fn chunk(self, h: u64, count: u64) -> u64 {
        match self {
            Chunking::Interval { lo, scale } => interval_index(h, lo, scale, count),
            Chunking::Mixed { seed } => mul_high(mix64(h, seed), count),
        }
    }

    /// The least hash of chunk `c` or a later one (monotone chunking).
    fn first_hash(self, c: u64, count: u64) -> u64 {
        let (mut lo, mut hi) = (0u64, u64::MAX);
        if self.chunk(hi, count) < c {
            return u64::MAX;
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.chunk(mid, count) >= c {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }
}

/// A built function: `get(h)` is the value `h` was built with.
#[derive(Debug)]
pub struct Fuse {
    chunking: Chunking,
    value_bits: u32,
    keys: u64,
    chunks: Vec<Chunk>,
    /// Packed `value_bits`-bit cells, 8 bytes of padding at the end so that
    /// every cell is read with one unaligned u64 load.
    cells: Bytes,
}

/// A build's result.
#[derive(Debug)]
pub struct BuiltFuse {
    /// The function over the distinct hashes.
    pub fuse: Fuse,
    /// Hashes given more than once, each listed once; the function returns
    /// the value of one of their pairs.
    pub duplicate_hashes: Vec<u64>,
    /// `fuse` serialized, sharing its cells.
    section: Bytes,
}

impl BuiltFuse {
    /// The function serialized ([`Fuse::encode`]'s bytes): the memory the
    /// cells were built in, not a copy, which held a level's index twice
    /// for a moment.
    pub fn section(&self) -> Bytes {
        self.section.clone()
    }
}

impl Fuse {
    /// The value stored for `h`; arbitrary for a hash not built over.
    #[inline]
    pub fn get(&self, h: u64) -> u64 {
        if self.chunks.is_empty() {
            return 0;
        }
        let c = &self.chunks[self.chunking.chunk(h, self.chunks.len() as u64) as usize];
        let p = c.positions(h);
        self.cell(c.offset + p[0])
            ^ self.cell(c.offset + p[1])
            ^ self.cell(c.offset + p[2])
            ^ self.cell(c.offset + p[3])
    }

    /// Asks the CPU for the cells [`Fuse::get`] of `h` reads.
    #[inline]
    pub fn prefetch(&self, h: u64) {
        if self.chunks.is_empty() {
            return;
        }
        let c = &self.chunks[self.chunking.chunk(h, self.chunks.len() as u64) as usize];
        for p in c.positions(h) {
            let at = ((c.offset + p) * self.value_bits as u64 / 8) as usize;
            if let Some(b) = self.cells.get(at) {
                crate::util::prefetch(b);
            }
        }
    }

    #[inline(always)]
    fn cell(&self, i: u64) -> u64 {
        field(&self.cells, i * self.value_bits as u64, self.value_bits)
    }

    /// The section version this fuse encodes as: 2 with chunks by hash
    /// interval, 1 by mixed hash.
    pub fn section_version(&self) -> u32 {
        match self.chunking {
            Chunking::Interval { .. } => SECTION_VERSION,
            Chunking::Mixed { .. } => 1,
        }
    }

    /// Bits of each value.
    pub fn value_bits(&self) -> u32 {
        self.value_bits
    }

    /// Distinct hashes built over.
    pub fn len(&self) -> u64 {
        self.keys
    }

    /// True when built over nothing.
    pub fn is_empty(&self) -> bool {
        self.keys == 0
    }

    /// Bytes of memory the loaded function keeps.
    pub fn memory_bytes(&self) -> usize {
        self.cells.len() + self.chunks.len() * std::mem::size_of::<Chunk>()
    }

    /// Appends the serialized form: see `docs/format.md`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.encode_header(out);
        out.extend_from_slice(&self.cells);
    }

    /// The hashes its chunks divide, when they are intervals of them
    /// (format version 2): a TPH's partition.
    pub fn hashes(&self) -> Option<RangeInclusive<u64>> {
        match self.chunks.len() as u64 {
            0 => None,
            count => self.chunking.hashes(count),
        }
    }

    /// The bytes of the serialized form before the cells.
    fn header_len(chunking: &Chunking, chunks: usize) -> usize {
        let chunking = match chunking {
            Chunking::Interval { .. } => 24,
            Chunking::Mixed { .. } => 16,
        };
        chunking + 12 + 16 * chunks
    }

    fn encode_header(&self, out: &mut Vec<u8>) {
        match self.chunking {
            Chunking::Interval { lo, scale } => {
                out.put_u32(SECTION_VERSION);
                out.put_u32(self.value_bits);
                out.put_u64(lo);
                out.put_u64(scale);
            }
            Chunking::Mixed { seed } => {
                out.put_u32(1);
                out.put_u32(self.value_bits);
                out.put_u64(seed);
            }
        }
        out.put_u64(self.keys);
        out.put_u32(self.chunks.len() as u32);
        for c in &self.chunks {
            out.put_u64(c.seed);
            out.put_u32(c.segment_count);
            out.put_u32(c.log2_segment);
        }
    }

    /// Loads a serialized function; the cells are used in place. Hostile
    /// input yields an error: every chunk's cells must lie in the section.
    pub fn decode(bytes: Bytes) -> Result<Fuse> {
        let mut d = Decoder::new(&bytes, "fuse");
        let version = d.u32()?;
        let value_bits = d.u32()?;
        let chunking = match version {
            1 => Chunking::Mixed { seed: d.u64()? },
            2 => Chunking::Interval {
                lo: d.u64()?,
                scale: d.u64()?,
            },
            v => return Err(Error::corruption("fuse version", "1 or 2", v)),
        };
        let keys = d.u64()?;
        let count = d.u32()? as usize;
        if !(1..=56).contains(&value_bits) || count > d.remaining() / CHUNK_BYTES {
            return Err(Error::corruption(
                "fuse header",
                "1 to 56 value bits and the chunk headers it counts",
                format!("{value_bits} bits, {count} chunks"),
            ));
        }
        let mut chunks = Vec::with_capacity(count);
        let mut offset = 0u64;
        for _ in 0..count {
            let c = Chunk {
                offset,
                seed: d.u64()?,
                segment_count: d.u32()?,
                log2_segment: d.u32()?,
            };
            if c.log2_segment > MAX_LOG2_SEGMENT || c.segment_count == 0 {
                return Err(Error::corruption(
                    "fuse chunk",
                    format!("1 or more segments of at most 2^{MAX_LOG2_SEGMENT} cells"),
                    format!("{} segments of 2^{}", c.segment_count, c.log2_segment),
                ));
            }
            offset = offset
                .checked_add(c.cells())
                .ok_or_else(|| Error::corruption("fuse cells", "fewer than 2^64", "more"))?;
            chunks.push(c);
        }
        if (keys == 0) != chunks.is_empty() {
            return Err(Error::corruption("fuse chunks", "some iff keys", count));
        }
        let at = bytes.len() - d.remaining();
        let expected = offset
            .checked_mul(value_bits as u64)
            .map(|b| b.div_ceil(8) + 8);
        if expected != Some(d.remaining() as u64) {
            return Err(Error::corruption(
                "fuse cells",
                format!("{offset} cells of {value_bits} bits"),
                format!("{} bytes", d.remaining()),
            ));
        }
        Ok(Fuse {
            chunking,
            value_bits,
            keys,
            chunks,
            cells: bytes.slice(at..),
        })
    }
}

mod build;
pub(crate) use build::keys_held;

#[cfg(test)]
mod tests;
