//! Where each block starts: the in-memory block offset table.
//!
//! Offsets are 32-bit, relative to the data segment (at most 4 GiB, paper
//! §4.1.3) that holds the block, so the table costs 4 bytes per block
//! whatever the file size. Segment boundaries fall between blocks.

use crate::error::{Error, Result};
use crate::util::codec::{Decoder, PutExt};

/// Segments are at most this large so that offsets within them fit in u32.
pub const MAX_SEGMENT_BYTES: u64 = 1 << 32;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BlockIndex {
    /// `(first block, byte offset)` of each segment, by first block.
    segments: Vec<(u64, u64)>,
    /// Start of each block relative to its segment, plus the end of the last
    /// block relative to the last segment.
    relative: Vec<u32>,
}

impl BlockIndex {
    /// Builds from absolute block starts (and the end of the last block),
    /// opening a new segment whenever an offset would not fit.
    pub(crate) fn from_offsets(starts: &[u64], max_segment_bytes: u64) -> BlockIndex {
        let mut segments: Vec<(u64, u64)> = vec![(0, 0)];
        let mut relative = Vec::with_capacity(starts.len());
        for (b, &off) in starts.iter().enumerate() {
            let base = segments.last().expect("one segment").1;
            // A block must start in the segment that holds it; the final
            // sentinel (the end of the data) may sit exactly at the limit.
            let is_end = b + 1 == starts.len();
            if off - base >= max_segment_bytes && !is_end || off - base > u32::MAX as u64 {
                segments.push((b as u64, off));
            }
            relative.push((off - segments.last().expect("one segment").1) as u32);
        }
        BlockIndex { segments, relative }
    }

    pub(crate) fn segment_count(&self) -> usize {
        self.segments.len()
    }

    #[inline]
    fn absolute(&self, i: usize) -> u64 {
        let seg = if self.segments.len() == 1 {
            0
        } else {
            self.segments
                .partition_point(|&(first, _)| first <= i as u64)
                - 1
        };
        self.segments[seg].1 + self.relative[i] as u64
    }

    /// `(offset, length)` of block `b < block_count()`.
    #[inline]
    pub(crate) fn block(&self, b: u64) -> (u64, usize) {
        let start = self.absolute(b as usize);
        let end = self.absolute(b as usize + 1);
        (start, (end - start) as usize)
    }

    /// `(offset, length)` of blocks `first..last` together.
    pub(crate) fn range(&self, first: u64, last: u64) -> (u64, usize) {
        let start = self.absolute(first as usize);
        (start, (self.absolute(last as usize) - start) as usize)
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.segments.len() * 16 + self.relative.len() * 4
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32(self.segments.len() as u32);
        out.put_u64(self.relative.len() as u64);
        for &(first, base) in &self.segments {
            out.put_u64(first);
            out.put_u64(base);
        }
        for &r in &self.relative {
            out.put_u32(r);
        }
    }

    /// Decodes and checks that blocks are contiguous, at least `min_block`
    /// bytes each, and end exactly at `data_bytes`.
    pub(crate) fn decode(
        b: &[u8],
        block_count: u64,
        data_bytes: u64,
        min_block: u64,
    ) -> Result<BlockIndex> {
        let mut d = Decoder::new(b, "block index");
        let seg_count = d.u32()? as usize;
        let offsets = d.u64()?;
        if offsets != block_count + 1
            || seg_count == 0
            || d.remaining() as u64 != seg_count as u64 * 16 + offsets * 4
        {
            return Err(Error::corruption(
                "block index size",
                format!("{} offsets and at least one segment", block_count + 1),
                format!(
                    "{offsets} offsets, {seg_count} segments, {} bytes",
                    d.remaining()
                ),
            ));
        }
        let mut segments = Vec::with_capacity(seg_count);
        for _ in 0..seg_count {
            segments.push((d.u64()?, d.u64()?));
        }
        let mut relative = Vec::with_capacity(offsets as usize);
        for _ in 0..offsets {
            relative.push(d.u32()?);
        }
        d.finish()?;
        if segments[0] != (0, 0)
            || segments
                .windows(2)
                .any(|w| w[1].0 <= w[0].0 || w[1].1 <= w[0].1)
            || segments.last().is_some_and(|s| s.0 > block_count)
        {
            return Err(Error::corruption(
                "block index segments",
                "starting at block 0 byte 0, increasing",
                format!("{segments:?}"),
            ));
        }
        let index = BlockIndex { segments, relative };
        let mut prev = index.absolute(0);
        if prev != 0 {
            return Err(Error::corruption("first block offset", 0, prev));
        }
        for i in 1..=block_count as usize {
            let off = index.absolute(i);
            if off < prev + min_block {
                return Err(Error::corruption(
                    format!("offset of block {i}"),
                    format!("at least {}", prev + min_block),
                    off,
                ));
            }
            prev = off;
        }
        if prev != data_bytes {
            return Err(Error::corruption("end of the last block", data_bytes, prev));
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_open_when_offsets_outgrow_the_limit() {
        let starts: Vec<u64> = (0..=10).map(|i| i * 100).collect();
        let idx = BlockIndex::from_offsets(&starts, 250);
        assert_eq!(idx.segment_count(), 4);
        for b in 0..10 {
            assert_eq!(idx.block(b), (b * 100, 100));
        }
        let mut enc = Vec::new();
        idx.encode(&mut enc);
        assert_eq!(BlockIndex::decode(&enc, 10, 1000, 5).unwrap(), idx);
        assert!(BlockIndex::decode(&enc, 10, 999, 5).is_err());
        assert!(BlockIndex::decode(&enc, 9, 1000, 5).is_err());
        assert!(BlockIndex::decode(&enc, 10, 1000, 101).is_err());
    }
}
