//! Building a fuse: keys collected a batch of chunks at a time, each
//! chunk sorted by first cell, peeled and assigned.

use std::ops::RangeInclusive;

use bytes::Bytes;
use rayon::prelude::*;

use super::{
    layout, BuiltFuse, Chunk, Chunking, Fuse, TagSource, ValueOf, MAX_ATTEMPTS, MAX_CHUNK_KEYS,
};
use crate::error::{Error, Result};
use crate::util::bits::BitPacker;
use crate::util::reduce::mix64;

impl Fuse {
    /// Builds over distinct `hashes`, storing `value(h, i)` for the hash
    /// `h` at index `i`, below `2^value_bits`.
    pub fn build(
        hashes: &[u64],
        value_bits: u32,
        seed: u64,
        value: &(dyn Fn(u64, u32) -> u64 + Sync),
    ) -> Result<BuiltFuse> {
        if hashes.len() > u32::MAX as usize {
            return Err(Error::InvalidArgument(format!(
                "a fuse over {} hashes",
                hashes.len()
            )));
        }
        Self::build_streamed(
            hashes.len() as u64,
            value_bits,
            seed,
            0..=u64::MAX,
            &mut |_, f: &mut dyn FnMut(u64, u32)| {
                for (i, &h) in hashes.iter().enumerate() {
                    f(h, i as u32);
                }
                Ok(())
            },
            value,
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
        let Batches {
            chunk_count,
            per_chunk,
            per_batch,
        } = Batches::of(n, batch_keys);
        if chunk_count > u32::MAX as u64 {
            return Err(Error::InvalidArgument(format!("a fuse over {n} keys")));
        }
        let chunking = Chunking::over(&hashes, chunk_count.max(1));
        let mut chunks: Vec<Chunk> = Vec::with_capacity(chunk_count as usize);
        // The cells are packed where the serialized function will have
        // them, after its header, in room for every chunk at the keys its
        // lists are allocated for.
        let header_len = Fuse::header_len(&chunking, chunk_count as usize);
        let (log2_segment, segment_count) = layout(Batches::chunk_capacity(per_chunk));
        let most_cells = Chunk {
            offset: 0,
            seed: 0,
            log2_segment,
            segment_count,
        }
        .cells();
        let mut cells =
            BitPacker::after(header_len, chunk_count * most_cells * u64::from(value_bits));
        let mut duplicate_hashes = Vec::new();
        let mut keys = 0u64;
        let mut seen = 0u64;
        let mut first = 0u64;
        while first < chunk_count {
            let end = (first + per_batch).min(chunk_count);
            let capacity = Batches::chunk_capacity(per_chunk) as usize;
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
                b.cells.iter().for_each(|&v| cells.push(v, value_bits));
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
        let mut section = cells.finish();
        let mut fuse = Fuse {
            chunking,
            value_bits,
            keys,
            chunks,
            cells: Bytes::new(),
        };
        let mut header = Vec::with_capacity(header_len);
        fuse.encode_header(&mut header);
        if header.len() != header_len {
            return Err(Error::Internal(format!(
                "a fuse header of {} bytes, {header_len} expected",
                header.len()
            )));
        }
        section[..header_len].copy_from_slice(&header);
        let section = Bytes::from(section);
        fuse.cells = section.slice(header_len..);
        Ok(BuiltFuse {
            fuse,
            duplicate_hashes,
            section,
        })
    }
}

/// How a build of `n` keys within batches of about `batch_keys` is cut.
struct Batches {
    chunk_count: u64,
    /// Keys a chunk gets on average, rounded up.
    per_chunk: u64,
    /// Chunks a batch builds at once.
    per_batch: u64,
}

impl Batches {
    fn of(n: u64, batch_keys: usize) -> Batches {
        let batch_keys = (batch_keys as u64).max(1);
        let chunk_keys = MAX_CHUNK_KEYS.min(batch_keys);
        let chunk_count = if n == 0 { 0 } else { n.div_ceil(chunk_keys) };
        let per_chunk = n / chunk_count.max(1) + 1;
        // Leave room for the chunks that get more than the average.
        let per_batch = (batch_keys / (per_chunk + per_chunk / 8)).max(1);
        Batches {
            chunk_count,
            per_chunk,
            per_batch,
        }
    }

    /// The keys a chunk's lists are allocated for.
    fn chunk_capacity(per_chunk: u64) -> u64 {
        per_chunk + per_chunk / 16
    }
}

/// Keys a build of `n` within batches of about `batch_keys` holds at
/// once: the lists of a batch's whole chunks as allocated (a little over
/// their keys), which its memory is counted by, [`BUILD_BYTES_PER_KEY`]
/// each. A batch larger than one chunk but short of two holds one.
pub(crate) fn keys_held(n: u64, batch_keys: usize) -> u64 {
    let b = Batches::of(n, batch_keys);
    let chunks = b.per_batch.min(b.chunk_count);
    chunks * Batches::chunk_capacity(b.per_chunk)
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
        if let Some(cells) = peel(&keys, &chunk, value_bits, value)? {
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
/// cells; `None` if it does not peel whole. One word a cell does both: a
/// count of the keys left in it (high half) and the xor of their indexes
/// into `keys` (low half) while peeling, then the cell's value. The keys
/// come in the order of their first cell ([`sort_by_first_cell`]), which
/// sweeps the table nearly in order instead of jumping through it.
fn peel(
    keys: &Keys,
    chunk: &Chunk,
    value_bits: u32,
    value: &ValueOf<'_>,
) -> Result<Option<Vec<u64>>> {
    const ONE: u64 = 1 << 32;
    let count = |cell: u64| cell >> 32;
    // Zeroed in one sweep: a zeroed allocation's pages would fault in the
    // table's random order instead: 78-104 against 53-56 ns a key on two
    // threads (`tphdb bench phf --engines fuse --keys 2000000`).
    #[allow(clippy::slow_vector_initialization)]
    let mut cells = Vec::with_capacity(chunk.cells() as usize);
    cells.resize(chunk.cells() as usize, 0u64);
    for (i, &h) in keys.hashes.iter().enumerate() {
        for p in chunk.positions(h) {
            let c = &mut cells[p as usize];
            *c = (*c + ONE) ^ i as u64;
        }
    }
    let mut queue: Vec<u32> = (0..cells.len() as u32)
        .filter(|&c| count(cells[c as usize]) == 1)
        .collect();
    // Cells in peeling order. A cell peeled keeps its key's index: no key
    // left touches it.
    let mut stack: Vec<u32> = Vec::with_capacity(keys.hashes.len());
    while let Some(c) = queue.pop() {
        let c = c as usize;
        if count(cells[c]) != 1 {
            continue;
        }
        let key = cells[c] as u32;
        stack.push(c as u32);
        cells[c] -= ONE;
        for p in chunk.positions(keys.hashes[key as usize]) {
            let p = p as usize;
            if p != c {
                let cell = &mut cells[p];
                *cell = (*cell - ONE) ^ u64::from(key);
                if count(*cell) == 1 {
                    queue.push(p as u32);
                }
            }
        }
    }
    if stack.len() != keys.hashes.len() {
        return Ok(None);
    }
    drop(queue);
    // In reverse peeling order, a key's other cells are final: peeled
    // later (assigned already) or left with no key (0, every key xored out
    // again). The cell it was peeled from takes the xor that makes the
    // four cells give its value.
    let mask = (1u64 << value_bits) - 1;
    for (j, &c) in stack.iter().enumerate().rev() {
        // The cell holds the key's index: ask for it ahead, as the stack
        // lists cells in no order of the table.
        if let Some(&ahead) = j.checked_sub(PEEL_PREFETCH).and_then(|k| stack.get(k)) {
            crate::util::prefetch(&cells[ahead as usize]);
        }
        let key = cells[c as usize] as u32;
        let h = keys.hashes[key as usize];
        let mut v = value(h, keys.tags[key as usize]);
        if v > mask {
            return Err(Error::InvalidArgument(format!(
                "a fuse value {v:#x} wider than {value_bits} bits"
            )));
        }
        for p in chunk.positions(h) {
            if p != u64::from(c) {
                v ^= cells[p as usize];
            }
        }
        cells[c as usize] = v;
    }
    Ok(Some(cells))
}

/// Cells the assignment asks for ahead of the one it assigns.
const PEEL_PREFETCH: usize = 16;

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
