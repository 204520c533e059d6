//! Blocks: `k` consecutive slots of a piece, the unit of every read.
//!
//! ```text
//! block   := payload [zeros(z) z:u16] flags:u8 crc32c:u32
//!                            (padding when flags bit 2; crc over all before it)
//! payload := raw | raw_len:u32 lz4_block(raw)               (flags bit 0)
//! raw     := offsets[count + 1] entries      (u16 or u32 offsets: bit 1)
//!          | lengths entries                 (flags bit 3, format 4)
//! lengths := base:varint width:u8 residuals[count]   (width bits each)
//! ```
//! Slot `i` of the block holds `entries[offsets[i]..offsets[i + 1]]`, or
//! the bytes after the slots before it, as long as its length says; an
//! empty range is an empty slot.

use bytes::Bytes;

use super::entry::{Entry, EntryRef};
use super::entry_layout::{decode_entry, EntryLayout};
use super::format::Compression;
use crate::error::{Error, Result};
use crate::util::bits::{bits_for, field_unpadded, BitPacker};
use crate::util::checksum_matches;
use crate::util::codec::{Decoder, PutExt};

pub(crate) const TRAILER_BYTES: usize = 5;
const FLAG_LZ4: u8 = 1;
const FLAG_WIDE: u8 = 2;
/// Zero bytes and their count (u16) precede the flags: the padding that
/// moves the next block to a page boundary.
const FLAG_PADDED: u8 = 4;
/// The raw block starts with a length table, not an offset table.
const FLAG_LENGTHS: u8 = 8;
/// Largest padding a block can carry.
pub(crate) const MAX_PADDING: usize = u16::MAX as usize;
/// Blocks of more slots keep the offset table: a slot's start is the sum
/// of the lengths before it, a loop a get runs.
const LENGTHS_MAX_SLOTS: usize = 64;
/// In a length table's width byte: a residual of 0 is an empty slot, and
/// the others are one more than the length above the base.
const LENGTHS_EMPTY: u8 = 0x80;
/// In a length table's width byte: the residuals' width in bits.
const LENGTHS_WIDTH_MASK: u8 = 0x3f;

/// The length table of `lengths` (0 for an empty slot): each slot's
/// length above the smallest entry's, in as few bits as the largest
/// needs. Entries of one size (fixed-size values) take no bits at all,
/// where an offset table takes 2 or 4 bytes a slot.
fn encode_lengths(lengths: &[usize], out: &mut Vec<u8>) {
    let empty = lengths.contains(&0);
    let base = lengths
        .iter()
        .filter(|&&l| l > 0)
        .min()
        .copied()
        .unwrap_or(0);
    let residual = |l: usize| match (empty, l) {
        (true, 0) => 0,
        (true, l) => (l - base + 1) as u64,
        (false, l) => (l - base) as u64,
    };
    let width = bits_for(lengths.iter().map(|&l| residual(l)).max().unwrap_or(0));
    out.put_varint(base as u64);
    out.push(width as u8 | if empty { LENGTHS_EMPTY } else { 0 });
    let mut packer = BitPacker::after(0, lengths.len() as u64 * u64::from(width));
    for &l in lengths {
        packer.push(residual(l), width);
    }
    let bytes = packer.bits().div_ceil(8) as usize;
    out.extend_from_slice(&packer.finish()[..bytes]);
}

/// Bytes of the length table of `count` slots whose entries take at most
/// `largest` bytes: what [`encode_lengths`] writes, or more.
fn lengths_bound(count: usize, largest: usize) -> usize {
    let width = bits_for(largest as u64 + 1) as usize;
    10 + 1 + (count * width).div_ceil(8)
}

/// Appends the encoded block of `slots` (their keys as stored) to `out`,
/// each entry laid out as `layout` says; returns the raw (decompressed)
/// size. `lz4_scratch` is reused between calls.
pub(crate) fn encode_block<'a>(
    slots: &[Option<EntryRef<'a>>],
    layout: &EntryLayout,
    compression: Compression,
    lz4_scratch: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<usize> {
    let count = slots.len();
    let lengths: Vec<usize> = slots
        .iter()
        .map(|e| e.map_or(0, |e| layout.encoded_len(&e)))
        .collect();
    let entries_len: usize = lengths.iter().sum();
    let wide = entries_len > u16::MAX as usize;
    let by_lengths = count <= LENGTHS_MAX_SLOTS;
    let table_len = if by_lengths {
        lengths_bound(count, lengths.iter().copied().max().unwrap_or(0))
    } else {
        (count + 1) * if wide { 4 } else { 2 }
    };
    if table_len + entries_len > u32::MAX as usize - 64 {
        return Err(Error::InvalidArgument(format!(
            "a block of {} bytes exceeds 4 GiB; values this large need fewer per block",
            table_len + entries_len
        )));
    }
    let start = out.len();
    out.reserve(table_len + entries_len + TRAILER_BYTES);
    let mut flags = 0;
    if by_lengths {
        encode_lengths(&lengths, out);
        flags |= FLAG_LENGTHS;
    } else {
        let put_offset = |out: &mut Vec<u8>, o: usize| {
            if wide {
                out.extend_from_slice(&(o as u32).to_le_bytes());
            } else {
                out.extend_from_slice(&(o as u16).to_le_bytes());
            }
        };
        let mut at = 0usize;
        put_offset(out, 0);
        for l in &lengths {
            at += l;
            put_offset(out, at);
        }
        if wide {
            flags |= FLAG_WIDE;
        }
    }
    for e in slots.iter().flatten() {
        layout.encode(e, out);
    }
    let raw_len = out.len() - start;

    if compression == Compression::Lz4 {
        lz4_scratch.clear();
        lz4_scratch.extend_from_slice(&(raw_len as u32).to_le_bytes());
        lz4_scratch.resize(4 + lz4_flex::block::get_maximum_output_size(raw_len), 0);
        let n = lz4_flex::block::compress_into(&out[start..], &mut lz4_scratch[4..])
            .map_err(|e| Error::InvalidArgument(format!("lz4: {e}")))?;
        if 4 + n < raw_len {
            out.truncate(start);
            out.extend_from_slice(&lz4_scratch[..4 + n]);
            flags |= FLAG_LZ4;
        }
    }
    out.push(flags);
    let crc = crc32c::crc32c(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(raw_len)
}

/// Grows the encoded block at the end of `block` by `grow` bytes
/// (`3 <= grow <= MAX_PADDING + 2`) of checksummed padding.
pub(crate) fn pad_block(block: &mut Vec<u8>, grow: usize) {
    debug_assert!((3..=MAX_PADDING + 2).contains(&grow));
    let body = block.len() - TRAILER_BYTES;
    let flags = block[body] | FLAG_PADDED;
    block.truncate(body);
    let zeros = grow - 2;
    block.resize(body + zeros, 0);
    block.extend_from_slice(&(zeros as u16).to_le_bytes());
    block.push(flags);
    let crc = crc32c::crc32c(block);
    block.extend_from_slice(&crc.to_le_bytes());
}

/// A verified, decompressed block.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    raw: Bytes,
    count: usize,
    table: SlotTable,
    /// Where the entries start in `raw`, after the table.
    entries_start: usize,
}

/// How a block says where its slots are.
#[derive(Clone, Copy, Debug)]
enum SlotTable {
    /// `count + 1` offsets of 2 or 4 bytes.
    Offsets { wide: bool },
    /// Lengths: `base` plus residuals of `width` bits from byte `at`.
    Lengths {
        base: u64,
        width: u32,
        /// A residual of 0 is an empty slot, the others one too many.
        empty: bool,
        at: usize,
    },
}

impl Block {
    /// Verifies and decodes a block of `count` slots read from disk.
    /// `max_raw` bounds the decompressed size (from the piece properties).
    pub(crate) fn decode(bytes: Bytes, count: usize, max_raw: usize) -> Result<Block> {
        if bytes.len() < TRAILER_BYTES {
            return Err(Error::corruption(
                "block length",
                format!("at least {TRAILER_BYTES}"),
                bytes.len(),
            ));
        }
        let body = bytes.len() - TRAILER_BYTES;
        let stored = u32::from_le_bytes(bytes[body + 1..].try_into().expect("4 bytes"));
        let actual = crc32c::crc32c(&bytes[..=body]);
        if !checksum_matches(stored, actual) {
            return Err(Error::corruption(
                "block checksum",
                format!("{stored:#010x}"),
                format!("{actual:#010x}"),
            ));
        }
        let flags = bytes[body];
        if flags & !(FLAG_LZ4 | FLAG_WIDE | FLAG_PADDED | FLAG_LENGTHS) != 0
            || flags & (FLAG_WIDE | FLAG_LENGTHS) == FLAG_WIDE | FLAG_LENGTHS
        {
            return Err(Error::corruption(
                "block flags",
                "bits 0 to 3 only, not both 1 and 3",
                format!("{flags:#04x}"),
            ));
        }
        let mut body = body;
        if flags & FLAG_PADDED != 0 {
            let zeros = match body.checked_sub(2) {
                Some(at) => u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize,
                None => usize::MAX,
            };
            let Some(start) = body.checked_sub(2).and_then(|b| b.checked_sub(zeros)) else {
                return Err(Error::corruption(
                    "block padding",
                    format!("at most {body} bytes"),
                    zeros,
                ));
            };
            // An OR over all bytes vectorizes; an early-exit search does not.
            if bytes[start..body - 2].iter().fold(0u8, |acc, &b| acc | b) != 0 {
                return Err(Error::corruption(
                    "block padding",
                    "zero bytes",
                    "non-zero bytes",
                ));
            }
            body = start;
        }
        let raw = if flags & FLAG_LZ4 != 0 {
            let payload = &bytes[..body];
            let claimed = payload
                .get(..4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
                .unwrap_or(usize::MAX);
            // LZ4 expands at most 255:1, which bounds what a block can claim
            // whatever the properties say.
            if claimed > max_raw || claimed > payload.len().saturating_mul(255) + 64 {
                return Err(Error::corruption(
                    "compressed block size",
                    format!("at most {max_raw} bytes"),
                    claimed,
                ));
            }
            Bytes::from(
                lz4_flex::decompress_size_prepended(payload)
                    .map_err(|e| Error::corruption("lz4 block", "valid lz4 data", e))?,
            )
        } else {
            bytes.slice(..body)
        };
        if flags & FLAG_LENGTHS != 0 {
            Block::with_lengths(raw, count)
        } else {
            let wide = flags & FLAG_WIDE != 0;
            let entries_start = (count + 1) * if wide { 4 } else { 2 };
            let block = Block {
                raw,
                count,
                table: SlotTable::Offsets { wide },
                entries_start,
            };
            block.check_offsets()?;
            Ok(block)
        }
    }

    /// A block of `raw` with a length table: the table fits and its
    /// lengths add up to the entries.
    fn with_lengths(raw: Bytes, count: usize) -> Result<Block> {
        if count > LENGTHS_MAX_SLOTS {
            return Err(Error::corruption(
                "block length table",
                format!("at most {LENGTHS_MAX_SLOTS} slots"),
                count,
            ));
        }
        let mut d = Decoder::new(&raw, "block length table");
        let base = d.varint()?;
        let width_byte = d.u8()?;
        let width = u32::from(width_byte & LENGTHS_WIDTH_MASK);
        if width > 32
            || width_byte & !(LENGTHS_WIDTH_MASK | LENGTHS_EMPTY) != 0
            || base > u32::MAX.into()
        {
            return Err(Error::corruption(
                "block length table",
                "a base below 2^32 and residuals of at most 32 bits",
                format!("base {base}, width byte {width_byte:#04x}"),
            ));
        }
        let at = d.position();
        d.bytes((count * width as usize).div_ceil(8))?;
        let block = Block {
            count,
            table: SlotTable::Lengths {
                base,
                width,
                empty: width_byte & LENGTHS_EMPTY != 0,
                at,
            },
            entries_start: d.position(),
            raw,
        };
        let total: u64 = (0..count).map(|i| block.slot_len(i)).sum();
        if total != (block.raw.len() - block.entries_start) as u64 {
            return Err(Error::corruption(
                "block entries length",
                block.raw.len() - block.entries_start,
                total,
            ));
        }
        Ok(block)
    }

    /// Offset `i` of an offset table; the table was checked to be in
    /// bounds.
    #[inline]
    fn offset(&self, i: usize, wide: bool) -> usize {
        if wide {
            let r = &self.raw[i * 4..i * 4 + 4];
            u32::from_le_bytes([r[0], r[1], r[2], r[3]]) as usize
        } else {
            u16::from_le_bytes([self.raw[i * 2], self.raw[i * 2 + 1]]) as usize
        }
    }

    /// The length of slot `i` in a length table (0 for an offset table).
    #[inline]
    fn slot_len(&self, i: usize) -> u64 {
        let SlotTable::Lengths {
            base,
            width,
            empty,
            at,
        } = self.table
        else {
            return 0;
        };
        // The entries follow the table: what the read takes past it is
        // masked off.
        let residual = field_unpadded(&self.raw[at..], (i * width as usize) as u64, width);
        match (empty, residual) {
            (true, 0) => 0,
            (true, r) => base + r - 1,
            (false, r) => base + r,
        }
    }

    /// The offset table fits, starts at 0, never decreases and ends at
    /// the end.
    fn check_offsets(&self) -> Result<()> {
        let SlotTable::Offsets { wide } = self.table else {
            return Ok(());
        };
        let start = self.entries_start;
        if self.raw.len() < start {
            return Err(Error::corruption(
                "block offset table",
                format!(
                    "{} offsets of {} bytes",
                    self.count + 1,
                    if wide { 4 } else { 2 }
                ),
                format!("{} bytes", self.raw.len()),
            ));
        }
        let mut prev = 0;
        if self.offset(0, wide) != 0 {
            return Err(Error::corruption(
                "first block offset",
                0,
                self.offset(0, wide),
            ));
        }
        for i in 1..=self.count {
            let o = self.offset(i, wide);
            if o < prev {
                return Err(Error::corruption(
                    format!("block offset {i}"),
                    format!(">= {prev}"),
                    o,
                ));
            }
            prev = o;
        }
        if start + prev != self.raw.len() {
            return Err(Error::corruption(
                "block entries length",
                self.raw.len() - start,
                prev,
            ));
        }
        Ok(())
    }

    /// Bytes the decoded block holds.
    pub(crate) fn raw_len(&self) -> usize {
        self.raw.len()
    }

    /// Number of slots.
    pub(crate) fn slot_count(&self) -> usize {
        self.count
    }

    fn range(&self, i: usize) -> Option<(usize, usize)> {
        let (s, e) = match self.table {
            SlotTable::Offsets { wide } => (self.offset(i, wide), self.offset(i + 1, wide)),
            SlotTable::Lengths {
                base,
                width: 0,
                empty: false,
                ..
            } => (i * base as usize, (i + 1) * base as usize),
            SlotTable::Lengths { .. } => {
                let s = (0..i).map(|j| self.slot_len(j) as usize).sum::<usize>();
                (s, s + self.slot_len(i) as usize)
            }
        };
        (s != e).then_some((self.entries_start + s, self.entries_start + e))
    }

    /// The entry in slot `i` (`i < slot_count()`), or `None` if empty,
    /// of a piece whose entries are laid out as `layout` says. The key
    /// shares the block's memory unless the layout has a key prefix.
    pub(crate) fn entry(&self, i: usize, layout: &EntryLayout) -> Result<Option<Entry>> {
        debug_assert!(i < self.count);
        let Some((s, e)) = self.range(i) else {
            return Ok(None);
        };
        let mut entry = decode_entry(layout, &self.raw, s, e)?;
        if !layout.key_prefix.is_empty() {
            entry.key = Bytes::from([&layout.key_prefix[..], &entry.key[..]].concat());
        }
        Ok(Some(entry))
    }

    /// [`Block::entry`] if its key is `key`: a get's, which compares the
    /// key without putting it together first.
    pub(crate) fn entry_of(
        &self,
        i: usize,
        layout: &EntryLayout,
        key: &[u8],
    ) -> Result<Option<Entry>> {
        debug_assert!(i < self.count);
        let Some((s, e)) = self.range(i) else {
            return Ok(None);
        };
        let entry = layout.decode_ref(&self.raw, s, e)?;
        if key.strip_prefix(&layout.key_prefix[..]) != Some(entry.key) {
            return Ok(None);
        }
        Ok(Some(Entry {
            key: match layout.key_prefix.is_empty() {
                true => self.raw.slice_ref(entry.key),
                false => Bytes::copy_from_slice(key),
            },
            value: entry.value.map(|v| self.raw.slice_ref(v)),
            seq: entry.seq,
        }))
    }

    /// [`Block::entry`], borrowed from the block, or from `key` for the
    /// key of a piece with a key prefix.
    pub(crate) fn entry_ref<'a>(
        &'a self,
        i: usize,
        layout: &EntryLayout,
        key: &'a mut Vec<u8>,
    ) -> Result<Option<EntryRef<'a>>> {
        debug_assert!(i < self.count);
        let Some((s, e)) = self.range(i) else {
            return Ok(None);
        };
        let mut entry = layout.decode_ref(&self.raw, s, e)?;
        if !layout.key_prefix.is_empty() {
            key.clear();
            key.extend_from_slice(&layout.key_prefix);
            key.extend_from_slice(entry.key);
            let key: &'a Vec<u8> = key;
            entry.key = key;
        }
        Ok(Some(entry))
    }
}

#[cfg(test)]
mod tests;
