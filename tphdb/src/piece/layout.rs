//! Laying blocks out in a piece's data region: encoding them in parallel,
//! and the padding that moves a block to a page boundary or a quantum.

use rayon::prelude::*;

use super::block::{encode_block, pad_block, MAX_PADDING};
use super::entry::{EntryRef, EntrySource};
use super::entry_layout::EntryLayout;
use super::format::Compression;
use super::writer::{PieceOptions, NONE};
use crate::error::{Error, Result};
use crate::fs::WritableFile;
use crate::util::prefetch;

/// Blocks encoded by one task; each thread of the pool gets this many tasks
/// before their blocks are written, which bounds the encoded blocks held
/// (about 1 MiB per thread at 4 KiB blocks) and keeps every thread busy.
const BLOCKS_PER_BATCH: usize = 64;
const BATCHES_PER_THREAD: usize = 4;

/// Blocks of fewer slots than this start at multiples of a quantum.
const QUANTIZED_BELOW_SLOTS: usize = 8;

/// Block starts are multiples of about this fraction of a block.
const QUANTUM_PER_BLOCK: usize = 128;

/// The power of two every block start is a multiple of. The in-memory
/// block offset table costs about `2 + log2(block bytes / quantum)` bits a
/// block, most of a piece's index when a block holds only a few entries
/// (three at 1 KiB values). A quantum near 1/128 of a block saves
/// `log2(quantum)` bits a block (4 of 13 at 1 KiB values, 0.19 bytes a key)
/// and pads the data by about 1/256 (0.55% measured at 1 KiB values, whose
/// fixed sizes make the padding the same in every block); 1/256 saved one
/// bit less for half the padding, which left the index at 1 KiB values
/// within 0.01 bytes a key of the 2.4 asked of it. Blocks of many small
/// entries cost a fraction of a bit a key and are not padded.
pub(super) fn block_quantum(k: usize, avg_entry: usize, page: usize) -> usize {
    if k >= QUANTIZED_BELOW_SLOTS {
        return 1;
    }
    let target = (k.saturating_mul(avg_entry) / QUANTUM_PER_BLOCK).clamp(1, page.max(1));
    1 << target.ilog2()
}

/// Bytes to append to a block ending at `end` so that the next block,
/// `next_len` bytes, starts where it should: at the next page boundary
/// when `align_blocks` and it fits in a page but would straddle one,
/// otherwise at the next multiple of `quantum`. 0, or at least 3 (the
/// smallest padding a block can carry).
fn padding_after(end: u64, next_len: usize, quantum: usize, options: &PieceOptions) -> usize {
    let page = options.page_size;
    let into_page = (end % page as u64) as usize;
    let (gap, step) = if options.align_blocks && next_len <= page && into_page + next_len > page {
        (page - into_page, page)
    } else {
        let q = quantum as u64;
        (((q - end % q) % q) as usize, quantum)
    };
    let grow = if (1..3).contains(&gap) {
        gap + step
    } else {
        gap
    };
    if grow > MAX_PADDING + 2 {
        0
    } else {
        grow
    }
}

/// Appends a piece's blocks, encoding a window of them in parallel at a
/// time; a run of slots at a time, so that a piece can be written in passes
/// that each hold only the entries of their slots. Each block but the last
/// carries the padding that moves the next one where [`padding_after`]
/// puts it, so that with `align_blocks` reading any block touches as few
/// pages as possible; the last one pads the data to a multiple of
/// `quantum`. A block appended waits for the next, which decides its
/// padding.
pub(super) struct BlockWriter<'a> {
    starts: Vec<u64>,
    max_block_bytes: usize,
    at: u64,
    pending: Option<Vec<u8>>,
    quantum: usize,
    /// How entries are stored: the prefix every key starts with is left
    /// out of them.
    entry_layout: &'a EntryLayout,
    options: &'a PieceOptions,
}

impl<'a> BlockWriter<'a> {
    /// A writer whose first block starts at `at`, for `block_count` blocks.
    pub(super) fn new(
        at: u64,
        block_count: usize,
        quantum: usize,
        entry_layout: &'a EntryLayout,
        options: &'a PieceOptions,
    ) -> BlockWriter<'a> {
        BlockWriter {
            starts: Vec::with_capacity(block_count + 1),
            max_block_bytes: 0,
            at,
            pending: None,
            quantum,
            entry_layout,
            options,
        }
    }

    /// Encodes and appends the blocks of `by_slot` (the next slots of the
    /// piece, starting on a block boundary; `k` a block, the last block
    /// possibly short), whose entries are indices into `entries`.
    pub(super) fn write<S: EntrySource + ?Sized>(
        &mut self,
        file: &mut dyn WritableFile,
        entries: &S,
        by_slot: &[u32],
        k: usize,
    ) -> Result<()> {
        let block_count = by_slot.len().div_ceil(k);
        let window = BLOCKS_PER_BATCH * BATCHES_PER_THREAD * rayon::current_num_threads();
        for first in (0..block_count).step_by(window) {
            let last = (first + window).min(block_count);
            let batches: Vec<Result<(Vec<Vec<u8>>, usize)>> = (first..last)
                .step_by(BLOCKS_PER_BATCH)
                .collect::<Vec<_>>()
                .into_par_iter()
                .map(|batch_first| {
                    let blocks = batch_first..(batch_first + BLOCKS_PER_BATCH).min(last);
                    let compression = self.options.compression;
                    encode_batch(entries, by_slot, k, blocks, self.entry_layout, compression)
                })
                .collect();
            for batch in batches {
                let (blocks, max_raw) = batch?;
                self.max_block_bytes = self.max_block_bytes.max(max_raw);
                for block in blocks {
                    if let Some(prev) = self.pending.take() {
                        self.append(file, prev, block.len())?;
                    }
                    self.pending = Some(block);
                }
            }
        }
        Ok(())
    }

    /// Appends `block`, padded for a next block of `next_len` bytes.
    fn append(
        &mut self,
        file: &mut dyn WritableFile,
        mut block: Vec<u8>,
        next_len: usize,
    ) -> Result<()> {
        let end = self.at + block.len() as u64;
        let grow = padding_after(end, next_len, self.quantum, self.options);
        if grow > 0 {
            pad_block(&mut block, grow);
        }
        self.starts.push(self.at);
        self.at += block.len() as u64;
        file.append(&block)
    }

    /// Appends the last block; returns each block's start plus the end of
    /// the last one, and the largest decompressed block.
    pub(super) fn finish(mut self, file: &mut dyn WritableFile) -> Result<(Vec<u64>, usize)> {
        if let Some(prev) = self.pending.take() {
            // No block follows: only the quantum applies.
            self.append(file, prev, 0)?;
        }
        self.starts.push(self.at);
        Ok((self.starts, self.max_block_bytes))
    }
}

/// Encodes `blocks`, each into its own buffer. Entries are visited in slot
/// order, which is random in memory: each entry's own memory (a memtable
/// node, a merge's entry) is prefetched two blocks ahead, and the key and
/// value it points to one block ahead. Each entry is laid out as `layout`
/// says, its key without the prefix every key starts with.
fn encode_batch<S: EntrySource + ?Sized>(
    entries: &S,
    by_slot: &[u32],
    k: usize,
    blocks: std::ops::Range<usize>,
    layout: &EntryLayout,
    compression: Compression,
) -> Result<(Vec<Vec<u8>>, usize)> {
    let block_slots = |b: usize| &by_slot[b * k..((b + 1) * k).min(by_slot.len())];
    let stored = |i: u32| -> Result<EntryRef<'_>> {
        let e = entries
            .entry(i)
            .ok_or_else(|| Error::Internal(format!("entry {i} of a piece is not at hand")))?;
        let stored = match e.key.strip_prefix(&layout.key_prefix[..]) {
            Some(key) => EntryRef { key, ..e },
            None => {
                return Err(Error::Internal(format!(
                    "entry {i} of a piece does not start with the piece's key prefix"
                )))
            }
        };
        match layout.fits(&stored) {
            true => Ok(stored),
            false => Err(Error::Internal(format!(
                "entry {i} of a piece does not fit the layout its survey gave: {:?}",
                (layout.seq, layout.stored_key_len)
            ))),
        }
    };
    let slots_of = |b: usize| -> Result<Vec<Option<EntryRef<'_>>>> {
        block_slots(b)
            .iter()
            .map(|&i| match i {
                NONE => Ok(None),
                i => stored(i).map(Some),
            })
            .collect()
    };
    let prefetch_entries = |b: usize| {
        if b < blocks.end {
            for &i in block_slots(b).iter().filter(|&&i| i != NONE) {
                entries.prefetch(i);
            }
        }
    };
    let mut out = Vec::with_capacity(blocks.len());
    let (mut lz4_scratch, mut max_raw) = (Vec::new(), 0);
    prefetch_entries(blocks.start + 1);
    let mut next = slots_of(blocks.start)?;
    for b in blocks.clone() {
        let slots = std::mem::take(&mut next);
        prefetch_entries(b + 2);
        if b + 1 < blocks.end {
            next = slots_of(b + 1)?;
            for e in next.iter().flatten() {
                prefetch(e.key.as_ptr());
                if let Some(v) = e.value {
                    prefetch(v.as_ptr());
                }
            }
        }
        let mut block = Vec::with_capacity(slots.len() * 64 + 64);
        max_raw = max_raw.max(encode_block(
            &slots,
            layout,
            compression,
            &mut lz4_scratch,
            &mut block,
        )?);
        out.push(block);
    }
    Ok((out, max_raw))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{MemFs, ReadMode};
    use crate::piece::{write_piece, EntryRef, PieceReader};
    use std::path::Path;

    /// Blocks of three 1 KiB entries: the layout where padding costs most.
    fn kib_entries() -> Vec<(Vec<u8>, Vec<u8>)> {
        (0..600u32)
            .map(|i| (format!("key{i:05}").into_bytes(), vec![i as u8; 1024]))
            .collect()
    }

    /// The data region's blocks as (start, length).
    fn layout(align_blocks: bool) -> Vec<(u64, usize)> {
        let fs = MemFs::new();
        let path = Path::new("/p.ph");
        let data = kib_entries();
        let refs: Vec<EntryRef<'_>> = data
            .iter()
            .map(|(k, v)| EntryRef {
                key: k,
                value: Some(v),
                seq: 1,
            })
            .collect();
        let options = PieceOptions {
            align_blocks,
            ..PieceOptions::default()
        };
        write_piece(&fs, path, &refs, &options).unwrap();
        let r = PieceReader::open(&fs, path, ReadMode::Pread).unwrap();
        for (k, v) in &data {
            assert_eq!(r.get(k).unwrap().unwrap().value.as_deref(), Some(&v[..]));
        }
        (0..r.properties().block_count)
            .map(|b| r.blocks.block(b))
            .collect()
    }

    fn pages_spanned((start, len): (u64, usize)) -> u64 {
        (start + len as u64 - 1) / 4096 - start / 4096 + 1
    }

    #[test]
    fn packed_blocks_leave_no_gaps_and_aligned_ones_one_page_each() {
        let packed = layout(false);
        let aligned = layout(true);
        let end = |blocks: &[(u64, usize)]| blocks.last().map_or(0, |&(s, l)| s + l as u64);
        let (packed_bytes, aligned_bytes) = (end(&packed), end(&aligned));
        assert!(packed.windows(2).all(|w| w[0].0 + w[0].1 as u64 == w[1].0));
        assert!(packed.iter().any(|&b| pages_spanned(b) == 2));
        assert!(packed.iter().all(|&b| pages_spanned(b) <= 2));
        // Every aligned block fits a page, so each is read as one page.
        assert!(aligned.iter().all(|&(_, len)| len <= 4096));
        assert!(aligned.iter().all(|&b| pages_spanned(b) == 1));
        // Blocks of three entries of 1 KiB (a minimal perfect hash: the
        // entries are even) leave about a quarter of each page unused.
        assert!(
            packed_bytes * 5 < aligned_bytes * 4,
            "packed {packed_bytes} bytes, aligned {aligned_bytes}"
        );
    }

    #[test]
    fn blocks_of_few_entries_start_at_multiples_of_a_quantum() {
        assert_eq!(block_quantum(3, 1060, 4096), 16);
        assert_eq!(block_quantum(1, 64 << 10, 4096), 512);
        assert_eq!(block_quantum(1, 1 << 30, 4096), 4096);
        assert_eq!(block_quantum(27, 150, 4096), 1);
        let blocks = layout(false);
        assert!(blocks
            .iter()
            .all(|&(start, len)| start % 16 == 0 && len % 16 == 0));
        // The padding stays small: half a quantum a block on average.
        let data: u64 = blocks.iter().map(|&(_, len)| len as u64).sum();
        let entries: u64 = kib_entries()
            .iter()
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .sum();
        assert!(
            data < entries + entries / 50,
            "{data} bytes of blocks for {entries}"
        );
    }

    #[test]
    fn padding_moves_the_next_block_to_a_page_or_a_quantum() {
        let packed = PieceOptions::default();
        let aligned = PieceOptions {
            align_blocks: true,
            ..PieceOptions::default()
        };
        assert_eq!(padding_after(4096 + 8, 3000, 8, &packed), 0);
        assert_eq!(padding_after(4096 + 3, 3000, 8, &packed), 5);
        // A gap of 1 or 2 cannot hold the padding's length: one more step.
        assert_eq!(padding_after(4096 + 7, 3000, 8, &packed), 9);
        assert_eq!(padding_after(4096 + 6, 3000, 1, &packed), 0);
        assert_eq!(padding_after(4096 + 2000, 3000, 8, &aligned), 2096);
        assert_eq!(padding_after(4096 + 1000, 3000, 8, &aligned), 0);
        assert_eq!(padding_after(4096 + 1001, 3000, 8, &aligned), 7);
        assert_eq!(padding_after(4096 + 1001, 5000, 8, &aligned), 7);
        assert_eq!(padding_after(8190, 3000, 8, &aligned), 4098);
    }
}
