//! The key chunks of a piece (its key-order index, §3.3 Scan): written
//! with the chunk index, and a chunk read back and checked. The chunk
//! index is read by `sorted::SortedIndex`; the layout of both is in
//! `docs/format.md`.

use super::writer::{KeySections, Sink, SAMPLE_INTERVAL};
use crate::error::{Error, Result};
use crate::util::checksum_matches;
use crate::util::codec::{Decoder, PutExt};

const FLAG_TOMBSTONE: u8 = 1;
/// In the tag of an item of version 2 or later: the entry is in an
/// overflow slot, which follows the key.
const FLAG_OVERFLOW: u64 = 2;
/// Bits of such a tag below the shared prefix's length.
const TAG_FLAG_BITS: u32 = 2;
/// In the tag of an item of version 4 or later: the key is as long as the
/// one before it, and its unshared length is not written (fixed-size keys
/// save a byte an entry).
const FLAG_SAME_LENGTH: u64 = 4;
/// Bits of a version-4 tag below the shared prefix's length.
const TAG_FLAG_BITS_4: u32 = 3;

/// Encodes the key chunks (handed to `chunks_sink` one at a time) and the
/// chunk index of the entries `keys` lists in key order, where
/// `slot_of[i]` is the slot of entry `i` and slots from `table_size` on
/// are overflow slots. Refuses a listing that is not of every entry once
/// in ascending order: the index would not match the piece.
pub(super) fn encode_key_index(
    keys: &mut dyn KeySections,
    slot_of: &[u32],
    table_size: u64,
    chunks_sink: Sink<'_>,
    index: &mut Vec<u8>,
) -> Result<()> {
    let count = slot_of.len().div_ceil(SAMPLE_INTERVAL);
    let mut offsets = Vec::with_capacity(count + 1);
    // The first key of each chunk, end to end, and where each ends.
    let (mut first_keys, mut first_key_ends) = (Vec::new(), Vec::with_capacity(count));
    let (mut chunks, mut written, mut listed) = (Vec::new(), 0u64, 0usize);
    let mut prev: Vec<u8> = Vec::new();
    let mut end_chunk = |chunks: &mut Vec<u8>, written: &mut u64| -> Result<()> {
        let crc = crc32c::crc32c(chunks);
        chunks.put_u32(crc);
        chunks_sink(chunks)?;
        *written += chunks.len() as u64;
        chunks.clear();
        Ok(())
    };
    keys.for_each_in_key_order(&mut |key, tombstone, i| {
        let slot = *slot_of
            .get(i as usize)
            .ok_or_else(|| Error::Internal(format!("entry {i} of a piece of {}", slot_of.len())))?;
        if listed > 0 && key <= &prev[..] {
            return Err(Error::InvalidArgument(format!(
                "key {:?} out of order or twice in one piece",
                String::from_utf8_lossy(key)
            )));
        }
        if listed % SAMPLE_INTERVAL == 0 {
            if listed > 0 {
                end_chunk(&mut chunks, &mut written)?;
            }
            offsets.push(written);
            first_keys.extend_from_slice(key);
            first_key_ends.push(first_keys.len());
            prev.clear();
        }
        let shared = prev.iter().zip(key).take_while(|(a, b)| a == b).count();
        let overflow = u64::from(slot) >= table_size;
        let same_length = key.len() == prev.len();
        let flags = u64::from(tombstone)
            | if overflow { FLAG_OVERFLOW } else { 0 }
            | if same_length { FLAG_SAME_LENGTH } else { 0 };
        chunks.put_varint(((shared as u64) << TAG_FLAG_BITS_4) | flags);
        if !same_length {
            chunks.put_varint((key.len() - shared) as u64);
        }
        chunks.extend_from_slice(&key[shared..]);
        if overflow {
            chunks.put_u32(slot);
        }
        prev.clear();
        prev.extend_from_slice(key);
        listed += 1;
        Ok(())
    })?;
    if listed != slot_of.len() {
        return Err(Error::Internal(format!(
            "{listed} keys listed in order for a piece of {}",
            slot_of.len()
        )));
    }
    if listed > 0 {
        end_chunk(&mut chunks, &mut written)?;
    }
    offsets.push(written);
    index.put_u32(count as u32);
    for &o in &offsets {
        index.put_u64(o);
    }
    index.put_u32(0);
    for &end in &first_key_ends {
        let at = u32::try_from(end)
            .map_err(|_| Error::InvalidArgument("sampled keys of one piece exceed 4 GiB".into()))?;
        index.put_u32(at);
    }
    index.extend_from_slice(&first_keys);
    Ok(())
}

/// One decoded chunk: keys, slots and tombstone flags, in key order.
#[derive(Debug)]
pub(super) struct Chunk {
    keys: Vec<u8>,
    /// `(end of key in keys, slot, tombstone)`; the slot is `None` where it
    /// is the key's in the perfect hash.
    pub(super) items: Vec<(u32, Option<u64>, bool)>,
}

/// What a chunk's items are: how many, and in which format version.
#[derive(Clone, Copy, Debug)]
pub(super) struct ChunkItems {
    pub(super) count: usize,
    pub(super) version: u32,
}

/// A piece's slots: the perfect hash's below `table_size`, overflow slots
/// from there to `total`.
#[derive(Clone, Copy, Debug)]
pub(super) struct SlotRange {
    pub(super) table_size: u64,
    pub(super) total: u64,
}

impl Chunk {
    /// Decodes and checks a chunk's bytes `raw`: `items`, the first of
    /// them `first_key` (the chunk index's sample), in a piece of `slots`.
    pub(super) fn decode(
        raw: &[u8],
        items: ChunkItems,
        first_key: &[u8],
        slots: SlotRange,
    ) -> Result<Chunk> {
        let body = raw
            .len()
            .checked_sub(4)
            .ok_or_else(|| Error::corruption("key chunk", "4 bytes or more", raw.len()))?;
        let stored = u32::from_le_bytes(raw[body..].try_into().expect("4 bytes"));
        let crc = crc32c::crc32c(&raw[..body]);
        if !checksum_matches(stored, crc) {
            return Err(Error::corruption(
                "key chunk checksum",
                format!("{stored:#010x}"),
                format!("{crc:#010x}"),
            ));
        }
        let mut d = Decoder::new(&raw[..body], "key chunk");
        let mut chunk = Chunk {
            keys: Vec::with_capacity(body),
            items: Vec::with_capacity(items.count),
        };
        // Version 1 names every slot; later versions only overflow ones.
        let first_slot = match items.version {
            1 => 0,
            _ => slots.table_size,
        };
        let mut prev = 0usize..0usize;
        for i in 0..items.count {
            let (shared, tombstone, overflow, same_length) = match items.version {
                1 => {
                    let flags = d.u8()?;
                    if flags & !FLAG_TOMBSTONE != 0 {
                        return Err(Error::corruption(
                            format!("key chunk entry {i}"),
                            "a valid flag",
                            format!("flags {flags}"),
                        ));
                    }
                    (d.varint()?, flags & FLAG_TOMBSTONE != 0, true, false)
                }
                version => {
                    let tag = d.varint()?;
                    let tombstone = tag & u64::from(FLAG_TOMBSTONE) != 0;
                    let overflow = tag & FLAG_OVERFLOW != 0;
                    if version < 4 {
                        (tag >> TAG_FLAG_BITS, tombstone, overflow, false)
                    } else {
                        let same_length = tag & FLAG_SAME_LENGTH != 0;
                        (tag >> TAG_FLAG_BITS_4, tombstone, overflow, same_length)
                    }
                }
            };
            if shared > prev.len() as u64 {
                return Err(Error::corruption(
                    format!("key chunk entry {i}"),
                    format!("a prefix of at most {} bytes", prev.len()),
                    format!("shared {shared}"),
                ));
            }
            let unshared = if same_length {
                prev.len() - shared as usize
            } else {
                d.varint()? as usize
            };
            let start = chunk.keys.len();
            chunk
                .keys
                .extend_from_within(prev.start..prev.start + shared as usize);
            chunk.keys.extend_from_slice(d.bytes(unshared)?);
            let slot = overflow.then(|| d.u32()).transpose()?.map(u64::from);
            let key = &chunk.keys[start..];
            let in_order = i == 0 && key == first_key || i > 0 && chunk.keys[prev.clone()] < *key;
            if slot.is_some_and(|s| s < first_slot || s >= slots.total) || !in_order {
                return Err(Error::corruption(
                    format!("key chunk entry {i}"),
                    format!(
                        "ascending keys from the sampled one, slots from {first_slot} below {}",
                        slots.total
                    ),
                    format!("slot {slot:?}"),
                ));
            }
            prev = start..chunk.keys.len();
            chunk.items.push((chunk.keys.len() as u32, slot, tombstone));
        }
        d.finish()?;
        Ok(chunk)
    }

    /// Key `i` of the chunk.
    pub(super) fn key(&self, i: usize) -> &[u8] {
        let start = if i == 0 {
            0
        } else {
            self.items[i - 1].0 as usize
        };
        &self.keys[start..self.items[i].0 as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk's bytes: `items` and their CRC.
    fn chunk_of(items: &[u8]) -> Vec<u8> {
        let mut raw = items.to_vec();
        raw.put_u32(crc32c::crc32c(items));
        raw
    }

    #[test]
    fn a_version_2_chunk_names_only_overflow_slots_and_checks_them() {
        let slots = SlotRange {
            table_size: 10,
            total: 12,
        };
        let two = ChunkItems {
            count: 2,
            version: 2,
        };
        // "ab" in the perfect hash's slot, then the tombstone of "ac" (one
        // byte shared) in overflow slot `s`.
        let items = |s: u32| {
            let mut b = Vec::new();
            b.put_varint(0);
            b.put_varint(2);
            b.extend_from_slice(b"ab");
            b.put_varint((1 << TAG_FLAG_BITS) | FLAG_OVERFLOW | 1);
            b.put_varint(1);
            b.extend_from_slice(b"c");
            b.put_u32(s);
            b
        };
        let c = Chunk::decode(&chunk_of(&items(11)), two, b"ab", slots).unwrap();
        assert_eq!((c.key(0), c.key(1)), (&b"ab"[..], &b"ac"[..]));
        assert_eq!(c.items, [(2, None, false), (4, Some(11), true)]);
        // An overflow slot in the perfect hash's table or past the last.
        for s in [9, 12] {
            let bad = Chunk::decode(&chunk_of(&items(s)), two, b"ab", slots);
            assert!(matches!(bad, Err(Error::Corruption { .. })), "slot {s}");
        }
        // A prefix longer than the previous key.
        let mut long = Vec::new();
        long.put_varint(0);
        long.put_varint(1);
        long.extend_from_slice(b"a");
        long.put_varint(2 << TAG_FLAG_BITS);
        long.put_varint(0);
        let bad = Chunk::decode(&chunk_of(&long), two, b"a", slots);
        assert!(matches!(bad, Err(Error::Corruption { .. })), "{bad:?}");
    }
    #[test]
    fn a_version_4_item_leaves_out_the_length_of_a_key_as_long_as_the_last() {
        let slots = SlotRange {
            table_size: 10,
            total: 10,
        };
        let three = ChunkItems {
            count: 3,
            version: 4,
        };
        // "ab"; "ac" (one byte shared, as long as "ab"); "acd" (two shared,
        // one more: its length is written).
        let mut items = Vec::new();
        items.put_varint(0);
        items.put_varint(2);
        items.extend_from_slice(b"ab");
        items.put_varint((1 << TAG_FLAG_BITS_4) | FLAG_SAME_LENGTH);
        items.extend_from_slice(b"c");
        items.put_varint(2 << TAG_FLAG_BITS_4);
        items.put_varint(1);
        items.extend_from_slice(b"d");
        let c = Chunk::decode(&chunk_of(&items), three, b"ab", slots).unwrap();
        assert_eq!(
            (c.key(0), c.key(1), c.key(2)),
            (&b"ab"[..], &b"ac"[..], &b"acd"[..])
        );
        // The same bytes read as version 3 are not these keys.
        let as_three = ChunkItems {
            version: 3,
            ..three
        };
        let other = Chunk::decode(&chunk_of(&items), as_three, b"ab", slots);
        assert!(other.is_err(), "{other:?}");
        // A key as long as the last but sharing more than it has.
        let mut long = Vec::new();
        long.put_varint(0);
        long.put_varint(1);
        long.extend_from_slice(b"a");
        long.put_varint((2 << TAG_FLAG_BITS_4) | FLAG_SAME_LENGTH);
        let two = ChunkItems { count: 2, ..three };
        let bad = Chunk::decode(&chunk_of(&long), two, b"a", slots);
        assert!(matches!(bad, Err(Error::Corruption { .. })), "{bad:?}");
    }
}
