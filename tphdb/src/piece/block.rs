//! Blocks: `k` consecutive slots of a piece, the unit of every read.
//!
//! ```text
//! block   := payload [zeros(z) z:u16] flags:u8 crc32c:u32
//!                            (padding when flags bit 2; crc over all before it)
//! payload := raw | raw_len:u32 lz4_block(raw)               (flags bit 0)
//! raw     := offsets[count + 1] entries      (u16 or u32 offsets: bit 1)
//! ```
//! Slot `i` of the block holds `entries[offsets[i]..offsets[i + 1]]`; an empty
//! range is an empty slot.

use bytes::Bytes;

use super::entry::{decode_entry, decode_entry_ref, Entry, EntryRef};
use super::format::Compression;
use crate::error::{Error, Result};
use crate::util::checksum_matches;

pub(crate) const TRAILER_BYTES: usize = 5;
const FLAG_LZ4: u8 = 1;
const FLAG_WIDE: u8 = 2;
/// Zero bytes and their count (u16) precede the flags: the padding that
/// moves the next block to a page boundary.
const FLAG_PADDED: u8 = 4;
/// Largest padding a block can carry.
pub(crate) const MAX_PADDING: usize = u16::MAX as usize;

/// Appends the encoded block of `slots` to `out`; returns the raw
/// (decompressed) size. `lz4_scratch` is reused between calls.
pub(crate) fn encode_block<'a>(
    slots: &[Option<EntryRef<'a>>],
    compression: Compression,
    lz4_scratch: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Result<usize> {
    let count = slots.len();
    let entries_len: usize = slots.iter().flatten().map(|e| e.encoded_len()).sum();
    let wide = entries_len > u16::MAX as usize;
    let raw_len = (count + 1) * if wide { 4 } else { 2 } + entries_len;
    if raw_len > u32::MAX as usize - 64 {
        return Err(Error::InvalidArgument(format!(
            "a block of {raw_len} bytes exceeds 4 GiB; values this large need fewer per block"
        )));
    }
    let start = out.len();
    out.reserve(raw_len + TRAILER_BYTES);
    let mut at = 0usize;
    let put_offset = |out: &mut Vec<u8>, o: usize| {
        if wide {
            out.extend_from_slice(&(o as u32).to_le_bytes());
        } else {
            out.extend_from_slice(&(o as u16).to_le_bytes());
        }
    };
    put_offset(out, 0);
    for e in slots {
        at += e.map_or(0, |e| e.encoded_len());
        put_offset(out, at);
    }
    for e in slots.iter().flatten() {
        e.encode(out);
    }
    debug_assert_eq!(out.len() - start, raw_len);

    let mut flags = if wide { FLAG_WIDE } else { 0 };
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
    wide: bool,
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
        if flags & !(FLAG_LZ4 | FLAG_WIDE | FLAG_PADDED) != 0 {
            return Err(Error::corruption(
                "block flags",
                "bits 0 to 2 only",
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
        let wide = flags & FLAG_WIDE != 0;
        let block = Block { raw, count, wide };
        block.check_offsets()?;
        Ok(block)
    }

    fn width(&self) -> usize {
        if self.wide {
            4
        } else {
            2
        }
    }

    fn entries_start(&self) -> usize {
        (self.count + 1) * self.width()
    }

    /// Offset `i` of the table; the table was checked to be in bounds.
    #[inline]
    fn offset(&self, i: usize) -> usize {
        let at = i * self.width();
        let r = &self.raw[at..at + self.width()];
        if self.wide {
            u32::from_le_bytes([r[0], r[1], r[2], r[3]]) as usize
        } else {
            u16::from_le_bytes([r[0], r[1]]) as usize
        }
    }

    /// The table fits, starts at 0, never decreases and ends at the end.
    fn check_offsets(&self) -> Result<()> {
        let start = self.entries_start();
        if self.raw.len() < start {
            return Err(Error::corruption(
                "block offset table",
                format!("{} offsets of {} bytes", self.count + 1, self.width()),
                format!("{} bytes", self.raw.len()),
            ));
        }
        let mut prev = 0;
        if self.offset(0) != 0 {
            return Err(Error::corruption("first block offset", 0, self.offset(0)));
        }
        for i in 1..=self.count {
            let o = self.offset(i);
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
        let base = self.entries_start();
        let (s, e) = (self.offset(i), self.offset(i + 1));
        (s != e).then_some((base + s, base + e))
    }

    /// The entry in slot `i` (`i < slot_count()`), or `None` if empty.
    pub(crate) fn entry(&self, i: usize) -> Result<Option<Entry>> {
        debug_assert!(i < self.count);
        self.range(i)
            .map(|(s, e)| decode_entry(&self.raw, s, e))
            .transpose()
    }

    /// [`Block::entry`], borrowed from the block.
    pub(crate) fn entry_ref(&self, i: usize) -> Result<Option<EntryRef<'_>>> {
        debug_assert!(i < self.count);
        self.range(i)
            .map(|(s, e)| decode_entry_ref(&self.raw, s, e))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots() -> Vec<Option<EntryRef<'static>>> {
        vec![
            Some(EntryRef {
                key: b"a",
                value: Some(b"1"),
                seq: 1,
            }),
            None,
            Some(EntryRef {
                key: b"b",
                value: None,
                seq: 2,
            }),
            Some(EntryRef {
                key: b"c",
                value: Some(&[7; 100]),
                seq: 3,
            }),
        ]
    }

    #[test]
    fn round_trip_with_and_without_compression() {
        for c in [Compression::None, Compression::Lz4] {
            let mut out = Vec::new();
            let raw = encode_block(&slots(), c, &mut Vec::new(), &mut out).unwrap();
            for pad in [0, 3, 1000] {
                let mut block = out.clone();
                if pad > 0 {
                    pad_block(&mut block, pad);
                    assert_eq!(block.len(), out.len() + pad);
                }
                let b = Block::decode(Bytes::from(block), 4, raw).unwrap();
                for (i, s) in slots().iter().enumerate() {
                    let got = b.entry(i).unwrap();
                    assert_eq!(got.as_ref().map(|e| &e.key[..]), s.map(|e| e.key));
                    assert_eq!(
                        got.as_ref().and_then(|e| e.value.as_deref()),
                        s.and_then(|e| e.value)
                    );
                }
            }
        }
    }

    #[test]
    fn every_corruption_and_truncation_is_an_error() {
        for c in [Compression::None, Compression::Lz4] {
            let mut out = Vec::new();
            let raw = encode_block(&slots(), c, &mut Vec::new(), &mut out).unwrap();
            pad_block(&mut out, 40);
            for i in 0..out.len() {
                let mut b = out.clone();
                b[i] ^= 0x20;
                assert!(Block::decode(Bytes::from(b), 4, raw).is_err());
                assert!(Block::decode(Bytes::copy_from_slice(&out[..i]), 4, raw).is_err());
            }
        }
    }
}
