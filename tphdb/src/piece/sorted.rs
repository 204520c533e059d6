//! The key-order (reverse) index of a piece and a cursor over it (§3.3 Scan).
//!
//! The index lists the slot of every entry in bytewise key order, and keeps
//! the key at every `SAMPLE_INTERVAL`-th position, so a seek is a binary
//! search over the samples in memory followed by one over at most 64
//! entries read from disk.

use std::ops::Deref;
use std::sync::Arc;

use bytes::Bytes;

use super::block::Block;
use super::entry::Entry;
use super::format::PieceProperties;
use super::reader::PieceReader;
use super::writer::SAMPLE_INTERVAL;
use crate::error::{Error, Result};
use crate::util::codec::{u32_at, Decoder};

#[derive(Debug)]
pub(crate) struct SortedIndex {
    /// Slot of the entry at each key-order position.
    order: Vec<u32>,
    /// Concatenated sample keys and where each starts (plus the end).
    sample_keys: Bytes,
    sample_offsets: Vec<u32>,
}

impl SortedIndex {
    pub(crate) fn decode(
        order: &[u8],
        samples: &Bytes,
        props: &PieceProperties,
    ) -> Result<SortedIndex> {
        let n = props.entry_count as usize;
        if order.len() != n * 4 {
            return Err(Error::corruption("key order length", n * 4, order.len()));
        }
        let total = props.total_slots();
        let slots: Vec<u32> = (0..n).map(|i| u32_at(order, i)).collect();
        // Sorting a copy, not a bitmap of `total` slots: memory stays
        // proportional to the bytes read, whatever the properties claim.
        let mut sorted = slots.clone();
        sorted.sort_unstable();
        let repeated = sorted.windows(2).find(|w| w[0] == w[1]).map(|w| w[0]);
        if let Some(s) = repeated.or(sorted.last().copied().filter(|&s| s as u64 >= total)) {
            return Err(Error::corruption(
                "key order",
                format!("distinct slots below {total}"),
                format!("slot {s} repeated or out of range"),
            ));
        }
        let mut d = Decoder::new(samples, "key samples");
        let count = d.u32()? as usize;
        if count != n.div_ceil(SAMPLE_INTERVAL) {
            return Err(Error::corruption(
                "sample count",
                n.div_ceil(SAMPLE_INTERVAL),
                count,
            ));
        }
        let mut offsets = Vec::with_capacity(count + 1);
        for _ in 0..=count {
            offsets.push(d.u32()?);
        }
        let keys_at = d.position();
        let keys_len = d.remaining();
        if offsets[0] != 0
            || offsets.windows(2).any(|w| w[0] > w[1])
            || offsets[count] as usize != keys_len
        {
            return Err(Error::corruption(
                "sample offsets",
                format!("increasing from 0 to {keys_len}"),
                "other values",
            ));
        }
        Ok(SortedIndex {
            order: slots,
            sample_keys: samples.slice(keys_at..),
            sample_offsets: offsets,
        })
    }

    fn len(&self) -> usize {
        self.order.len()
    }

    fn sample(&self, i: usize) -> &[u8] {
        &self.sample_keys[self.sample_offsets[i] as usize..self.sample_offsets[i + 1] as usize]
    }

    fn sample_count(&self) -> usize {
        self.sample_offsets.len() - 1
    }
}

/// A position in a piece's key order. Reads the block of each entry it
/// visits, reusing the last block read. `R` is how the reader is held
/// (`&PieceReader`, or a shared handle).
pub struct SortedCursor<R> {
    reader: R,
    index: Arc<SortedIndex>,
    /// Position in key order; `index.len()` when not valid.
    pos: usize,
    current: Option<Entry>,
    block: Option<(u64, Block)>,
}

impl<R: Deref<Target = PieceReader>> SortedCursor<R> {
    /// A cursor over `reader`'s entries in key order, not yet positioned.
    pub fn new(reader: R) -> Result<Self> {
        let index = reader.sorted_index()?;
        let pos = index.len();
        Ok(SortedCursor {
            reader,
            index,
            pos,
            current: None,
            block: None,
        })
    }

    /// True when positioned on an entry.
    pub fn valid(&self) -> bool {
        self.current.is_some()
    }

    /// The entry at the current position.
    pub fn entry(&self) -> Option<&Entry> {
        self.current.as_ref()
    }

    /// The current position in key order (the entry count when not valid).
    pub fn position(&self) -> usize {
        self.pos
    }

    fn entry_at_position(&mut self, pos: usize) -> Result<Entry> {
        let slot = self.index.order[pos] as u64;
        let k = self.reader.slots_per_block();
        let b = slot / k;
        if self.block.as_ref().is_none_or(|(cached, _)| *cached != b) {
            self.block = Some((b, self.reader.read_block(b)?));
        }
        let (_, block) = self.block.as_ref().expect("loaded above");
        block.entry((slot % k) as usize)?.ok_or_else(|| {
            Error::corruption(
                format!("key order position {pos}"),
                "an occupied slot",
                format!("empty slot {slot}"),
            )
            .at(self.reader.name())
        })
    }

    fn go(&mut self, pos: usize) -> Result<()> {
        self.pos = pos.min(self.index.len());
        self.current = None;
        if self.pos < self.index.len() {
            self.current = Some(self.entry_at_position(self.pos)?);
        }
        Ok(())
    }

    /// Moves to the smallest key.
    pub fn seek_to_first(&mut self) -> Result<()> {
        self.go(0)
    }

    /// Moves to the largest key.
    pub fn seek_to_last(&mut self) -> Result<()> {
        match self.index.len() {
            0 => self.go(0),
            n => self.go(n - 1),
        }
    }

    /// Moves to the first key at or after `target`.
    pub fn seek(&mut self, target: &[u8]) -> Result<()> {
        let pos = self.lower_bound(target)?;
        self.go(pos)
    }

    /// Moves to the last key at or before `target`.
    pub fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        let pos = self.lower_bound(target)?;
        self.go(pos)?;
        if self.current.as_ref().is_some_and(|e| &e.key[..] == target) {
            return Ok(());
        }
        match pos {
            0 => self.go(self.index.len()),
            p => self.go(p - 1),
        }
    }

    /// Moves to the next key; invalid past the last.
    pub fn move_next(&mut self) -> Result<()> {
        if self.pos < self.index.len() {
            self.go(self.pos + 1)
        } else {
            Ok(())
        }
    }

    /// Moves to the previous key; invalid before the first.
    pub fn move_prev(&mut self) -> Result<()> {
        match self.pos {
            p if p == 0 || p >= self.index.len() => self.go(self.index.len()),
            p => self.go(p - 1),
        }
    }

    /// First position whose key is `>= target`.
    fn lower_bound(&mut self, target: &[u8]) -> Result<usize> {
        let n = self.index.len();
        // Samples are keys at positions 0, 64, 128, ...: the answer lies
        // after the last sample below `target`, up to the next sample.
        let j = {
            let idx = &self.index;
            let (mut lo, mut hi) = (0, idx.sample_count());
            while lo < hi {
                let mid = (lo + hi) / 2;
                if idx.sample(mid) < target {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        if j == 0 {
            return Ok(0);
        }
        let (mut lo, mut hi) = ((j - 1) * SAMPLE_INTERVAL + 1, (j * SAMPLE_INTERVAL).min(n));
        while lo < hi {
            let mid = (lo + hi) / 2;
            if &self.entry_at_position(mid)?.key[..] < target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }
}
