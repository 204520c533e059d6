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
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::util::codec::{Decoder, PutExt};
use crate::util::reduce::{mix64, mul_high};

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
/// fuse`). Chunks also build in parallel.
pub const MAX_CHUNK_KEYS: u64 = 1 << 18;
/// Memory a build holds per key of the chunks it is building, at most: the
/// hash and its tag (12 bytes), and while a chunk is built, a count and an
/// xor per cell (8 bytes, 1.1 to 1.2 cells a key) and the peeling queue,
/// then the cells (8 bytes each), and the peeling stack (8).
pub const BUILD_BYTES_PER_KEY: usize = 32;
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

    #[inline(always)]
    fn chunk(self, h: u64, count: u64) -> u64 {
        match self {
            Chunking::Interval { lo, scale } => {
                mul_high(h.saturating_sub(lo), scale).min(count - 1)
            }
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

    #[inline(always)]
    fn cell(&self, i: u64) -> u64 {
        let bit = i * self.value_bits as u64;
        let at = (bit / 8) as usize;
        let word = u64::from_le_bytes(self.cells[at..at + 8].try_into().expect("8 bytes"));
        (word >> (bit % 8)) & ((1u64 << self.value_bits) - 1)
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

    /// Builds over `pairs` (hash, value), values below `2^value_bits`.
    pub fn build(pairs: &[(u64, u64)], value_bits: u32, seed: u64) -> Result<BuiltFuse> {
        let mask = (1u64 << value_bits.min(63)) - 1;
        if pairs.len() > u32::MAX as usize || pairs.iter().any(|p| p.1 > mask) {
            return Err(Error::InvalidArgument(format!(
                "a fuse over {} pairs with values above {value_bits} bits",
                pairs.len()
            )));
        }
        Self::build_streamed(
            pairs.len() as u64,
            value_bits,
            seed,
            0..=u64::MAX,
            &mut |_, f: &mut dyn FnMut(u64, u32)| {
                for (i, &(h, _)) in pairs.iter().enumerate() {
                    f(h, i as u32);
                }
                Ok(())
            },
            &|_, i| pairs[i as usize].1,
            usize::MAX,
        )
    }

    /// Builds over distinct `hashes`, storing `value(h)` for each.
    pub fn build_with(
        hashes: &[u64],
        value_bits: u32,
        seed: u64,
        value: &(dyn Fn(u64) -> u64 + Sync),
    ) -> Result<BuiltFuse> {
        Self::build_streamed(
            hashes.len() as u64,
            value_bits,
            seed,
            0..=u64::MAX,
            &mut |_, f: &mut dyn FnMut(u64, u32)| {
                hashes.iter().for_each(|&h| f(h, 0));
                Ok(())
            },
            &|h, _| value(h),
            usize::MAX,
        )
    }

    /// Builds over the `n` pairs `source` yields, storing `value(h, tag)`
    /// for each (below `2^value_bits`), holding the chunks of about
    /// `batch_keys` keys at a time: `source` is called once per batch.
    /// The keys' hashes should spread evenly over `hashes`, which the
    /// chunks divide in equal intervals (any hash is accepted; uneven ones
    /// make uneven chunks). Deterministic given the seed and the batch
    /// size.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn build_streamed(
        n: u64,
        value_bits: u32,
        seed: u64,
        hashes: RangeInclusive<u64>,
        source: &mut TagSource<'_>,
        value: &ValueOf<'_>,
        batch_keys: usize,
    ) -> Result<BuiltFuse> {
        if !(1..=56).contains(&value_bits) {
            return Err(Error::InvalidArgument(format!(
                "fuse values of {value_bits} bits (1 to 56)"
            )));
        }
        let batch_keys = (batch_keys as u64).max(1);
        let chunk_keys = MAX_CHUNK_KEYS.min(batch_keys);
        let chunk_count = if n == 0 { 0 } else { n.div_ceil(chunk_keys) };
        if chunk_count > u32::MAX as u64 {
            return Err(Error::InvalidArgument(format!("a fuse over {n} keys")));
        }
        // Chunks get n / chunk_count keys on average; leave room for the
        // ones that get more.
        let per_chunk = n / chunk_count.max(1) + 1;
        let per_batch = (batch_keys / (per_chunk + per_chunk / 8)).max(1);
        let chunking = Chunking::over(&hashes, chunk_count.max(1));
        let mut chunks: Vec<Chunk> = Vec::with_capacity(chunk_count as usize);
        let mut cells = Packed::new(value_bits);
        let mut duplicate_hashes = Vec::new();
        let mut keys = 0u64;
        let mut seen = 0u64;
        let mut first = 0u64;
        while first < chunk_count {
            let end = (first + per_batch).min(chunk_count);
            let capacity = (per_chunk + per_chunk / 16) as usize;
            let mut batch: Vec<Keys> = (first..end)
                .map(|_| Keys {
                    hashes: Vec::with_capacity(capacity),
                    tags: Vec::with_capacity(capacity),
                })
                .collect();
            let interval = chunking.first_hash(first, chunk_count)..=match end {
                e if e == chunk_count => u64::MAX,
                e => chunking.first_hash(e, chunk_count) - 1,
            };
            source(interval, &mut |h, tag| {
                let c = chunking.chunk(h, chunk_count);
                if (first..end).contains(&c) {
                    seen += 1;
                    let keys = &mut batch[(c - first) as usize];
                    keys.hashes.push(h);
                    keys.tags.push(tag);
                }
            })?;
            let built: Vec<Result<BuiltChunk>> = batch
                .into_par_iter()
                .enumerate()
                .map(|(i, keys)| {
                    build_chunk(keys, value_bits, value, mix64(seed, first + i as u64 + 1))
                })
                .collect();
            for b in built {
                let mut b = b?;
                b.chunk.offset = chunks.last().map_or(0, |c| c.offset + c.cells());
                b.cells.iter().for_each(|&v| cells.push(v));
                chunks.push(b.chunk);
                duplicate_hashes.extend(b.duplicates);
                keys += b.keys;
            }
            first = end;
        }
        if seen != n {
            return Err(Error::InvalidArgument(format!(
                "a fuse build expected {n} pairs, its source gave {seen}"
            )));
        }
        duplicate_hashes.sort_unstable();
        Ok(BuiltFuse {
            fuse: Fuse {
                chunking,
                value_bits,
                keys,
                chunks,
                cells: Bytes::from(cells.finish()),
            },
            duplicate_hashes,
        })
    }

    /// Appends the serialized form: see `docs/format.md`.
    pub fn encode(&self, out: &mut Vec<u8>) {
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
        out.extend_from_slice(&self.cells);
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

/// Cells appended bit-packed, as the section stores them.
struct Packed {
    bytes: Vec<u8>,
    bits: u64,
    width: u32,
}

impl Packed {
    fn new(width: u32) -> Packed {
        Packed {
            bytes: Vec::new(),
            bits: 0,
            width,
        }
    }

    fn push(&mut self, v: u64) {
        let at = (self.bits / 8) as usize;
        if self.bytes.len() < at + 8 {
            self.bytes.resize((at + 8).max(self.bytes.len() * 2), 0);
        }
        let word = u64::from_le_bytes(self.bytes[at..at + 8].try_into().expect("8 bytes"));
        let word = word | (v << (self.bits % 8));
        self.bytes[at..at + 8].copy_from_slice(&word.to_le_bytes());
        self.bits += self.width as u64;
    }

    /// The cells and 8 bytes of padding.
    fn finish(mut self) -> Vec<u8> {
        self.bytes.resize(self.bits.div_ceil(8) as usize + 8, 0);
        self.bytes.shrink_to_fit();
        self.bytes
    }
}

/// The keys of a chunk: hashes and their tags.
struct Keys {
    hashes: Vec<u64>,
    tags: Vec<u32>,
}

/// A chunk built.
struct BuiltChunk {
    /// Its header, offset left 0.
    chunk: Chunk,
    cells: Vec<u64>,
    /// Hashes it was given more than once.
    duplicates: Vec<u64>,
    /// Distinct hashes.
    keys: u64,
}

/// Builds one chunk over `keys`, trying seeds until its hypergraph peels.
fn build_chunk(
    mut keys: Keys,
    value_bits: u32,
    value: &ValueOf<'_>,
    base_seed: u64,
) -> Result<BuiltChunk> {
    let mut duplicates = Vec::new();
    let mut deduplicated = false;
    for attempt in 0..MAX_ATTEMPTS {
        let (log2_segment, segment_count) = layout(keys.hashes.len() as u64);
        let chunk = Chunk {
            offset: 0,
            seed: mix64(base_seed, attempt),
            log2_segment,
            segment_count,
        };
        sort_by_first_cell(&mut keys, &chunk);
        if let Some(cells) = peel(&keys, &chunk, value_bits, value) {
            return Ok(BuiltChunk {
                chunk,
                cells,
                duplicates,
                keys: keys.hashes.len() as u64,
            });
        }
        // Equal hashes share their four cells and never peel: take them out
        // once, then retry with other seeds.
        if !deduplicated {
            deduplicated = true;
            duplicates = deduplicate(&mut keys);
        }
    }
    Err(Error::Internal(format!(
        "no fuse over {} keys after {MAX_ATTEMPTS} seeds",
        keys.hashes.len()
    )))
}

/// Keeps the first key of each hash; returns the hashes that had more.
fn deduplicate(keys: &mut Keys) -> Vec<u64> {
    let mut order: Vec<u32> = (0..keys.hashes.len() as u32).collect();
    order.sort_unstable_by_key(|&i| keys.hashes[i as usize]);
    let mut duplicates = Vec::new();
    let mut kept = Keys {
        hashes: Vec::with_capacity(keys.hashes.len()),
        tags: Vec::with_capacity(keys.hashes.len()),
    };
    for (j, &i) in order.iter().enumerate() {
        let h = keys.hashes[i as usize];
        if j > 0 && keys.hashes[order[j - 1] as usize] == h {
            if duplicates.last() != Some(&h) {
                duplicates.push(h);
            }
            continue;
        }
        kept.hashes.push(h);
        kept.tags.push(keys.tags[i as usize]);
    }
    *keys = kept;
    duplicates
}

/// Peels the 4-hypergraph of `keys` under `chunk`'s seed and assigns the
/// cells; `None` if it does not peel whole. Peeling keeps 8 bytes a cell,
/// the keys left in it and the xor of their indexes into `keys`, so that
/// the table stays near the CPU's cache; the keys come in the order of
/// their first cell ([`sort_by_first_cell`]), which sweeps the table
/// nearly in order instead of jumping through it.
fn peel(keys: &Keys, chunk: &Chunk, value_bits: u32, value: &ValueOf<'_>) -> Option<Vec<u64>> {
    let cells = chunk.cells() as usize;
    let mut count = vec![(0u32, 0u32); cells];
    for (i, &h) in keys.hashes.iter().enumerate() {
        for p in chunk.positions(h) {
            let c = &mut count[p as usize];
            c.0 += 1;
            c.1 ^= i as u32;
        }
    }
    let mut queue: Vec<u32> = (0..cells as u32)
        .filter(|&c| count[c as usize].0 == 1)
        .collect();
    // (cell, key) in peeling order.
    let mut stack: Vec<(u32, u32)> = Vec::with_capacity(keys.hashes.len());
    while let Some(c) = queue.pop() {
        let c = c as usize;
        if count[c].0 != 1 {
            continue;
        }
        let key = count[c].1;
        stack.push((c as u32, key));
        count[c].0 = 0;
        for p in chunk.positions(keys.hashes[key as usize]) {
            let p = p as usize;
            if p != c {
                let cell = &mut count[p];
                cell.0 -= 1;
                cell.1 ^= key;
                if cell.0 == 1 {
                    queue.push(p as u32);
                }
            }
        }
    }
    if stack.len() != keys.hashes.len() {
        return None;
    }
    drop((queue, count));
    // In reverse peeling order, a key's other cells are final: either
    // peeled later (assigned already) or left with no key (0). The cell it
    // was peeled from takes the xor that makes the four cells give its
    // value.
    let mut out = vec![0u64; cells];
    let mask = (1u64 << value_bits) - 1;
    for &(c, key) in stack.iter().rev() {
        let h = keys.hashes[key as usize];
        let mut v = value(h, keys.tags[key as usize]);
        debug_assert!(v <= mask, "a fuse value wider than {value_bits} bits");
        for p in chunk.positions(h) {
            if p != c as u64 {
                v ^= out[p as usize];
            }
        }
        out[c as usize] = v & mask;
    }
    Some(out)
}

/// Sorts `keys` in place by the segment of their first cell (American flag
/// sort: a count per segment, then cycles of swaps).
fn sort_by_first_cell(keys: &mut Keys, chunk: &Chunk) {
    let segment = |h: u64| (chunk.positions(h)[0] >> chunk.log2_segment) as usize;
    let segments = chunk.segment_count as usize;
    let mut next = vec![0usize; segments + 1];
    for &h in &keys.hashes {
        next[segment(h) + 1] += 1;
    }
    for i in 1..next.len() {
        next[i] += next[i - 1];
    }
    let ends: Vec<usize> = next[1..].to_vec();
    for s in 0..segments {
        while next[s] < ends[s] {
            let i = next[s];
            let t = segment(keys.hashes[i]);
            if t == s {
                next[s] += 1;
            } else {
                let j = next[t];
                keys.hashes.swap(i, j);
                keys.tags.swap(i, j);
                next[t] += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests;
