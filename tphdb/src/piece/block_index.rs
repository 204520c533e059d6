//! Where each block starts: the block offset table.
//!
//! On disk, offsets are 32-bit, relative to the data segment (at most 4 GiB,
//! paper §4.1.3) that holds the block, so the table costs 4 bytes per block
//! whatever the file size; segment boundaries fall between blocks. In
//! memory the absolute offsets take the smaller of two codes: Elias-Fano,
//! about `2 + log2(average block bytes)` bits per block (14 bits for 4 KiB
//! blocks) instead of 32, or lines through groups of offsets
//! (`offset_lines`), a few bits a block where blocks are of about one size.
//! At 1 KiB values a block holds three entries, so the table is most of a
//! piece's index: Elias-Fano brings it from 1.33 to about 0.44 bytes per
//! key, lines to about 0.2.

use sucds::mii_sequences::{EliasFano, EliasFanoBuilder};
use sucds::Serializable;

use super::offset_lines::OffsetLines;
use crate::error::{Error, Result};
use crate::util::codec::{Decoder, PutExt};

/// Segments are at most this large so that offsets within them fit in u32.
pub const MAX_SEGMENT_BYTES: u64 = 1 << 32;

/// Encodes the block index section from absolute block starts (and the end
/// of the last block), opening a new segment whenever an offset would not
/// fit.
pub(crate) fn encode_offsets(starts: &[u64], max_segment_bytes: u64, out: &mut Vec<u8>) {
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
    out.put_u32(segments.len() as u32);
    out.put_u64(relative.len() as u64);
    for &(first, base) in &segments {
        out.put_u64(first);
        out.put_u64(base);
    }
    for &r in &relative {
        out.put_u32(r);
    }
}

/// The decoded table: absolute block starts plus the end of the data.
#[derive(Debug)]
pub(crate) struct BlockIndex {
    segment_count: usize,
    /// Low bits every offset has zero, dropped from `offsets`.
    shift: u32,
    /// `block_count + 1` absolute offsets, shifted right by `shift`.
    offsets: Offsets,
}

/// The smaller of two codes for the offsets.
#[derive(Debug)]
enum Offsets {
    /// Boxed: `sucds` keeps about 600 bytes of fields inline.
    EliasFano(Box<EliasFano>),
    Lines(OffsetLines),
}

impl BlockIndex {
    pub(crate) fn segment_count(&self) -> usize {
        self.segment_count
    }

    /// `(offset, length)` of block `b < block_count()`.
    #[inline]
    pub(crate) fn block(&self, b: u64) -> (u64, usize) {
        let (start, end) = match &self.offsets {
            Offsets::EliasFano(ef) => {
                let mut it = ef.iter(b as usize);
                let start = it.next().expect("block in range");
                (start, it.next().expect("block in range"))
            }
            Offsets::Lines(lines) => (lines.get(b as usize), lines.get(b as usize + 1)),
        };
        (start << self.shift, ((end - start) << self.shift) as usize)
    }

    /// `(offset, length)` of blocks `first..last` together.
    pub(crate) fn range(&self, first: u64, last: u64) -> (u64, usize) {
        let start = self.offset(first);
        (start, (self.offset(last) - start) as usize)
    }

    fn offset(&self, b: u64) -> u64 {
        let shifted = match &self.offsets {
            Offsets::EliasFano(ef) => ef.select(b as usize).expect("block in range"),
            Offsets::Lines(lines) => lines.get(b as usize),
        };
        shifted << self.shift
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + match &self.offsets {
                Offsets::EliasFano(ef) => ef.size_in_bytes() + std::mem::size_of::<EliasFano>(),
                Offsets::Lines(lines) => lines.memory_bytes(),
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
        let count = usize::try_from(offsets)
            .map_err(|_| Error::corruption("block count", "addressable", offsets))?;
        let table = &b[b.len() - d.remaining()..];
        // Writers may start blocks at multiples of a power of two (see
        // `piece::writer`); the low bits every offset shares are dropped.
        let mut any_bits = data_bytes;
        for_each_offset(table, &segments, |_, off| {
            any_bits |= off;
            Ok(())
        })?;
        let shift = any_bits.trailing_zeros().min(MAX_SHIFT);
        let mut shifted = Vec::with_capacity(count);
        let mut prev = 0u64;
        for_each_offset(table, &segments, |i, off| {
            if i == 0 && off != 0 {
                return Err(Error::corruption("first block offset", 0, off));
            }
            if i > 0 && off < prev.saturating_add(min_block) {
                return Err(Error::corruption(
                    format!("offset of block {i}"),
                    format!("at least {}", prev + min_block),
                    off,
                ));
            }
            if off > data_bytes {
                return Err(Error::corruption(
                    format!("offset of block {i}"),
                    format!("at most {data_bytes}"),
                    off,
                ));
            }
            shifted.push(off >> shift);
            prev = off;
            Ok(())
        })?;
        if prev != data_bytes {
            return Err(Error::corruption("end of the last block", data_bytes, prev));
        }
        let mut ef = EliasFanoBuilder::new((data_bytes >> shift).saturating_add(1), count)
            .map_err(|e| Error::corruption("block index", "an encodable table", e))?;
        ef.extend(shifted.iter().copied())
            .map_err(|e| Error::corruption("block index", "increasing offsets", e))?;
        let ef = ef.build();
        let offsets = match OffsetLines::new(&shifted) {
            Some(lines) if lines.memory_bytes() < ef.size_in_bytes() => Offsets::Lines(lines),
            _ => Offsets::EliasFano(Box::new(ef)),
        };
        Ok(BlockIndex {
            segment_count: seg_count,
            shift,
            offsets,
        })
    }
}

/// The largest alignment the in-memory table exploits.
const MAX_SHIFT: u32 = 32;

/// Calls `f(i, absolute offset)` for each 32-bit offset of `table` (the
/// section after its segment list, whose size was checked).
fn for_each_offset(
    table: &[u8],
    segments: &[(u64, u64)],
    mut f: impl FnMut(usize, u64) -> Result<()>,
) -> Result<()> {
    let mut seg = 0;
    for (i, raw) in table.chunks_exact(4).enumerate() {
        while segments.get(seg + 1).is_some_and(|s| s.0 <= i as u64) {
            seg += 1;
        }
        let relative = u32::from_le_bytes(raw.try_into().expect("4 bytes"));
        f(i, segments[seg].1.saturating_add(relative as u64))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(starts: &[u64], max_segment_bytes: u64) -> Vec<u8> {
        let mut enc = Vec::new();
        encode_offsets(starts, max_segment_bytes, &mut enc);
        enc
    }

    #[test]
    fn segments_open_when_offsets_outgrow_the_limit() {
        let starts: Vec<u64> = (0..=10).map(|i| i * 100).collect();
        let enc = encoded(&starts, 250);
        let idx = BlockIndex::decode(&enc, 10, 1000, 5).unwrap();
        assert_eq!(idx.segment_count(), 4);
        for b in 0..10 {
            assert_eq!(idx.block(b), (b * 100, 100));
        }
        assert_eq!(idx.range(2, 5), (200, 300));
        assert!(BlockIndex::decode(&enc, 10, 999, 5).is_err());
        assert!(BlockIndex::decode(&enc, 9, 1000, 5).is_err());
        assert!(BlockIndex::decode(&enc, 10, 1000, 101).is_err());
    }

    #[test]
    fn offsets_past_4_gib_and_uneven_blocks_round_trip() {
        let mut starts = vec![0u64];
        let mut off = 0;
        for i in 0..2000u64 {
            off += 5 + (i * 7919) % 6000 + if i == 1000 { 5 << 30 } else { 0 };
            starts.push(off);
        }
        let enc = encoded(&starts, MAX_SEGMENT_BYTES);
        let idx = BlockIndex::decode(&enc, 2000, off, 5).unwrap();
        assert_eq!(idx.segment_count(), 2);
        for b in 0..2000 {
            let (start, len) = idx.block(b);
            assert_eq!(start, starts[b as usize]);
            assert_eq!(start + len as u64, starts[b as usize + 1]);
        }
    }

    #[test]
    fn elias_fano_costs_under_two_bytes_per_4_kib_block() {
        let starts: Vec<u64> = (0..=100_000u64).map(|i| i * 4000 + i % 97).collect();
        let idx = BlockIndex::decode(
            &encoded(&starts, MAX_SEGMENT_BYTES),
            100_000,
            *starts.last().unwrap(),
            5,
        )
        .unwrap();
        let per_block = idx.memory_bytes() as f64 / 100_000.0;
        assert!(per_block < 2.0, "{per_block} bytes per block");
    }

    #[test]
    fn blocks_of_about_one_size_are_coded_as_lines_others_as_elias_fano() {
        let decode = |starts: &[u64]| {
            let n = starts.len() as u64 - 1;
            let idx = BlockIndex::decode(
                &encoded(starts, MAX_SEGMENT_BYTES),
                n,
                *starts.last().unwrap(),
                5,
            )
            .unwrap();
            for b in 0..n {
                let (start, len) = idx.block(b);
                assert_eq!(start, starts[b as usize]);
                assert_eq!(start + len as u64, starts[b as usize + 1]);
            }
            assert_eq!(
                idx.range(3, n),
                (starts[3], (starts[n as usize] - starts[3]) as usize)
            );
            let bits = idx.memory_bytes() as f64 * 8.0 / n as f64;
            (matches!(idx.offsets, Offsets::Lines(_)), bits)
        };
        // Three 1 KiB entries a block, in 16-byte quanta.
        let even: Vec<u64> = (0..=30_000u64).map(|i| i * 3120 + i / 7 * 16).collect();
        let (lines, bits) = decode(&even);
        assert!(lines && bits < 5.0, "{bits} bits a block");
        // Blocks of 5 bytes to 64 KiB and a tenth of a MiB more, in no order:
        // lines would cost more.
        let mut uneven = vec![0u64];
        for i in 0..30_000u64 {
            let last = *uneven.last().unwrap();
            let h = i * 2_654_435_761;
            uneven.push(last + 5 + h % 65_536 + if h % 10 == 0 { 1 << 20 } else { 0 });
        }
        let (lines, bits) = decode(&uneven);
        assert!(!lines && bits < 24.0, "{bits} bits a block");
    }

    #[test]
    fn an_offset_past_the_data_is_corruption_not_a_panic() {
        let enc = encoded(&[0, 100, 200], MAX_SEGMENT_BYTES);
        assert!(BlockIndex::decode(&enc, 2, 150, 5).is_err());
        let mut bad = enc.clone();
        let last = bad.len() - 4;
        bad[last..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(BlockIndex::decode(&bad, 2, 200, 5).is_err());
    }

    #[test]
    fn offsets_with_common_low_zero_bits_cost_fewer_bits_and_round_trip() {
        let size = |starts: &[u64]| {
            let n = starts.len() as u64 - 1;
            let enc = encoded(starts, MAX_SEGMENT_BYTES);
            let idx = BlockIndex::decode(&enc, n, *starts.last().unwrap(), 5).unwrap();
            for b in 0..n {
                let (start, len) = idx.block(b);
                assert_eq!(start, starts[b as usize]);
                assert_eq!(start + len as u64, starts[b as usize + 1]);
            }
            idx.memory_bytes()
        };
        let aligned: Vec<u64> = (0..=100_000u64)
            .map(|i| i * 2984 + (i * 7919 % 5) * 8)
            .collect();
        let mut one_odd = aligned.clone();
        one_odd[50_000] += 1;
        let (a, o) = (size(&aligned), size(&one_odd));
        // Three fewer bits a block of about 3 KB: 13 bits instead of 10.
        assert!(
            a * 12 < o * 10,
            "{a} bytes aligned, {o} with one odd offset"
        );
    }
}
