//! A TPH's global index: which piece holds the newest version of each key.
//!
//! Every live key of the TPH has a field: a signature of its key hash and
//! its piece, `sig_bits + piece_bits` bits. A fuse over the key hashes
//! stores the fields (format 2); heads written before it hold a perfect
//! hash mapping each key to a slot that holds the field (format 1), still
//! read. A signature mismatch proves the key absent without a read. When
//! several live keys share a 64-bit hash, all of them are listed as
//! exceptions, told apart by a second hash, and the exception list alone
//! decides where they live.

use std::ops::RangeInclusive;

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::hash::{key_hash2, narrow_hash2, signature};
use crate::phf::fuse::Fuse;
use crate::phf::Phf;
use crate::util::bits::field;
use crate::util::codec::{Decoder, PutExt};

/// Piece field of a slot no live key maps to.
pub(crate) const EMPTY: u32 = 0;

/// A live key whose hash is shared by another live key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Exception {
    pub(crate) h: u64,
    pub(crate) h2: u64,
    /// Piece index + 1.
    pub(crate) field: u32,
}

/// Seed of the fuses of global indexes: part of the format.
pub(crate) const FUSE_SEED: u64 = 0x7470_6864_6675_7365;

#[derive(Debug)]
enum Lookup {
    Slots {
        phf: Phf,
        /// Packed `sig << piece_bits | piece_field` per slot, 8 bytes of
        /// padding at the end so that every field is read with one
        /// unaligned u64 load.
        slots: Bytes,
    },
    Fuse(Fuse),
}

#[derive(Debug)]
pub(crate) struct GlobalIndex {
    lookup: Lookup,
    pub(crate) sig_bits: u32,
    pub(crate) piece_bits: u32,
    piece_count: usize,
    pub(crate) exceptions: Vec<Exception>,
}

/// The slot section being filled: `sig << piece_bits | piece_field` per
/// slot, bit-packed, every slot empty until set. Takes the section's size
/// and no more, so building an index holds no per-key list of fields.
#[cfg(test)]
pub(crate) struct SlotTable {
    out: Vec<u8>,
    width: usize,
    piece_bits: u32,
}

/// Bytes before the packed slots: their count.
#[cfg(test)]
const SLOTS_HEADER_BYTES: usize = 8;

#[cfg(test)]
impl SlotTable {
    pub(crate) fn new(slots: usize, sig_bits: u32, piece_bits: u32) -> SlotTable {
        let width = (sig_bits + piece_bits) as usize;
        let mut out = Vec::with_capacity(SLOTS_HEADER_BYTES + (slots * width).div_ceil(8) + 8);
        out.put_u64(slots as u64);
        out.resize(SLOTS_HEADER_BYTES + (slots * width).div_ceil(8) + 8, 0);
        SlotTable {
            out,
            width,
            piece_bits,
        }
    }

    /// Sets `slot` (replacing what it held).
    pub(crate) fn set(&mut self, slot: usize, sig: u64, piece: u32) {
        let v = (sig << self.piece_bits) | piece as u64;
        debug_assert!(v < 1 << self.width);
        let bit = slot * self.width;
        let at = SLOTS_HEADER_BYTES + bit / 8;
        let mask = ((1u64 << self.width) - 1) << (bit % 8);
        let word = u64::from_le_bytes(self.out[at..at + 8].try_into().expect("8 bytes"));
        let word = (word & !mask) | (v << (bit % 8));
        self.out[at..at + 8].copy_from_slice(&word.to_le_bytes());
    }

    /// The section.
    pub(crate) fn finish(self) -> Vec<u8> {
        self.out
    }
}

pub(crate) use crate::util::bits::bits_for;

impl GlobalIndex {
    /// `(signature, piece field)` of slot `slot` of a format-1 table.
    #[inline]
    fn slot_field(&self, slots: &[u8], slot: usize) -> (u64, u32) {
        let width = self.sig_bits + self.piece_bits;
        let v = field(slots, slot as u64 * u64::from(width), width);
        (
            v >> self.piece_bits,
            (v & ((1 << self.piece_bits) - 1)) as u32,
        )
    }

    /// The piece index the index gives `h` if its signature matches: for a
    /// live key its piece (unless its hash is shared), for any other key
    /// `None` or, with probability about `2^-sig_bits`, some piece.
    #[inline]
    pub(crate) fn candidate(&self, h: u64) -> Option<usize> {
        let (sig, piece) = match &self.lookup {
            Lookup::Slots { phf, slots } => {
                if phf.is_empty() {
                    return None;
                }
                let (sig, field) = self.slot_field(slots, phf.slot(h));
                if field == EMPTY {
                    return None;
                }
                (sig, field as usize - 1)
            }
            Lookup::Fuse(fuse) => {
                if fuse.is_empty() {
                    return None;
                }
                let v = fuse.get(h);
                (
                    v >> self.piece_bits,
                    (v & ((1 << self.piece_bits) - 1)) as usize,
                )
            }
        };
        (piece < self.piece_count && sig == signature(h, self.sig_bits)).then_some(piece)
    }

    /// Asks the CPU for the memory [`GlobalIndex::candidate`] of `h` reads
    /// (a fuse's cells; nothing for the older slot tables).
    #[inline]
    pub(crate) fn prefetch(&self, h: u64) {
        if let Lookup::Fuse(fuse) = &self.lookup {
            fuse.prefetch(h);
        }
    }

    /// The piece index holding the newest version of `key` (hash `h`) if the
    /// key may be live in the TPH; `None` proves it is not.
    #[inline]
    pub(crate) fn route(&self, key: &[u8], h: u64) -> Option<usize> {
        let piece = self.candidate(h)?;
        match self.exceptions_for(h) {
            None => Some(piece),
            Some(from) => {
                let h2 = key_hash2(key);
                self.exceptions[from..]
                    .iter()
                    .take_while(|e| e.h == h)
                    .find(|e| e.h2 == h2)
                    .map(|e| e.field as usize - 1)
            }
        }
    }

    /// Index of the first exception with hash `h`, if `h` is shared.
    pub(crate) fn exceptions_for(&self, h: u64) -> Option<usize> {
        if self.exceptions.is_empty() {
            return None;
        }
        let from = self.exceptions.partition_point(|e| e.h < h);
        self.exceptions
            .get(from)
            .is_some_and(|e| e.h == h)
            .then_some(from)
    }

    /// The hashes of the TPH's keys (its partition), if the index says.
    pub(crate) fn hashes(&self) -> Option<RangeInclusive<u64>> {
        match &self.lookup {
            Lookup::Fuse(fuse) => fuse.hashes(),
            Lookup::Slots { .. } => None,
        }
    }

    /// Bytes of memory: perfect hash and packed slots or the fuse, and the
    /// exceptions.
    pub(crate) fn memory_bytes(&self) -> usize {
        let lookup = match &self.lookup {
            Lookup::Slots { phf, slots } => phf.memory_bytes() + slots.len(),
            Lookup::Fuse(fuse) => fuse.memory_bytes(),
        };
        lookup + self.exceptions.len() * 24
    }

    /// Whether the index is a fuse (format 2).
    #[cfg(test)]
    pub(crate) fn is_fuse(&self) -> bool {
        matches!(self.lookup, Lookup::Fuse(_))
    }

    /// Packs `fields` (one per slot) into the slot section.
    #[cfg(test)]
    pub(crate) fn encode_slots(fields: &[(u64, u32)], sig_bits: u32, piece_bits: u32) -> Vec<u8> {
        let mut t = SlotTable::new(fields.len(), sig_bits, piece_bits);
        for (i, &(sig, piece)) in fields.iter().enumerate() {
            t.set(i, sig, piece);
        }
        t.finish()
    }

    /// The exception section of meta version 4: second hashes in 32 bits.
    pub(crate) fn encode_exceptions(exceptions: &[Exception]) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + exceptions.len() * 16);
        out.put_u64(exceptions.len() as u64);
        for e in exceptions {
            debug_assert!(e.h2 <= u64::from(u32::MAX), "a second hash of 32 bits");
            out.put_u64(e.h);
            out.put_u32(e.h2 as u32);
            out.put_u32(e.field);
        }
        out
    }

    /// Assembles and validates a format-1 index read from disk: every
    /// slot's piece field must be below `piece_count + 1`, so that routing
    /// never indexes past the TPH's pieces.
    pub(crate) fn decode_slots(
        phf: Phf,
        sig_bits: u32,
        piece_bits: u32,
        slots_section: Bytes,
        exceptions_section: &[u8],
        piece_count: usize,
        wide_h2: bool,
    ) -> Result<GlobalIndex> {
        check_widths(sig_bits, piece_bits, piece_count as u64)?;
        let mut d = Decoder::new(&slots_section, "tph slots");
        let n = d.u64()?;
        let width = (sig_bits + piece_bits) as u64;
        let body = n.checked_mul(width).map(|b| b.div_ceil(8) + 8);
        if n != phf.table_size() as u64 || body != Some(d.remaining() as u64) {
            return Err(Error::corruption(
                "tph slots",
                format!("{} slots of {width} bits", phf.table_size()),
                format!("{n} slots in {} bytes", d.remaining()),
            ));
        }
        let table = phf.table_size();
        let index = GlobalIndex {
            lookup: Lookup::Slots {
                phf,
                slots: slots_section.slice(8..),
            },
            sig_bits,
            piece_bits,
            piece_count,
            exceptions: decode_exceptions(exceptions_section, piece_count, wide_h2)?,
        };
        let Lookup::Slots { slots, .. } = &index.lookup else {
            unreachable!("built above")
        };
        let bad_slot = (0..table).find(|&s| index.slot_field(slots, s).1 as usize > piece_count);
        if let Some(slot) = bad_slot {
            return Err(Error::corruption(
                "tph piece fields",
                format!("pieces 1..={piece_count}"),
                format!("slot {slot}"),
            ));
        }
        Ok(index)
    }

    /// Assembles and validates a format-2 index read from disk: the fuse's
    /// values must be `sig_bits + piece_bits` wide, with room for every
    /// piece. A field past the last piece routes nowhere.
    pub(crate) fn decode_fuse(
        fuse_section: Bytes,
        sig_bits: u32,
        piece_bits: u32,
        exceptions_section: &[u8],
        piece_count: usize,
        wide_h2: bool,
    ) -> Result<GlobalIndex> {
        check_widths(sig_bits, piece_bits, piece_count.saturating_sub(1) as u64)?;
        let fuse = Fuse::decode(fuse_section)?;
        if fuse.value_bits() != sig_bits + piece_bits {
            return Err(Error::corruption(
                "tph fuse value bits",
                sig_bits + piece_bits,
                fuse.value_bits(),
            ));
        }
        Ok(GlobalIndex {
            lookup: Lookup::Fuse(fuse),
            sig_bits,
            piece_bits,
            piece_count,
            exceptions: decode_exceptions(exceptions_section, piece_count, wide_h2)?,
        })
    }
}

/// Signature bits 1 to 32, piece bits up to 24 and enough for `max_field`.
fn check_widths(sig_bits: u32, piece_bits: u32, max_field: u64) -> Result<()> {
    if !(1..=32).contains(&sig_bits) || piece_bits > 24 || bits_for(max_field) > piece_bits {
        return Err(Error::corruption(
            "tph index widths",
            format!("1..=32 signature bits and room for field {max_field}"),
            format!("{sig_bits} signature bits, {piece_bits} piece bits"),
        ));
    }
    Ok(())
}

/// The exception list: sorted, each naming one of the `piece_count`
/// pieces (`field` is the piece index + 1). `wide_h2`: it stores 64-bit
/// second hashes (meta versions 1 to 3), taken to their high halves.
fn decode_exceptions(section: &[u8], piece_count: usize, wide_h2: bool) -> Result<Vec<Exception>> {
    let mut d = Decoder::new(section, "tph exceptions");
    let count = d.u64()?;
    let record = if wide_h2 { 20 } else { 16 };
    if count > (d.remaining() / record) as u64 {
        return Err(Error::corruption(
            "tph exception count",
            d.remaining() / record,
            count,
        ));
    }
    let mut exceptions = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let h = d.u64()?;
        let h2 = if wide_h2 {
            narrow_hash2(d.u64()?)
        } else {
            u64::from(d.u32()?)
        };
        exceptions.push(Exception {
            h,
            h2,
            field: d.u32()?,
        });
    }
    d.finish()?;
    let bad = exceptions
        .iter()
        .any(|e| e.field == EMPTY || e.field as usize > piece_count);
    if bad || !exceptions.windows(2).all(|w| w[0] < w[1]) {
        return Err(Error::corruption(
            "tph exceptions",
            format!("pieces 1..={piece_count}, sorted"),
            "another piece or order",
        ));
    }
    Ok(exceptions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phf::{PhfConfig, PhfKind};

    /// Heads of meta versions 1 to 3 stored exceptions with 64-bit second
    /// hashes: read as their high halves, the keys' `key_hash2` now, so
    /// that a lookup of such a key finds its piece. Version 4 stores them
    /// in 32 bits; a record cut short is an error.
    #[test]
    fn exceptions_of_both_widths_read_as_32_bit_second_hashes() {
        let keys: [&[u8]; 2] = [b"one", b"two"];
        let mut want: Vec<Exception> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| Exception {
                h: 77,
                h2: key_hash2(k),
                field: i as u32 + 1,
            })
            .collect();
        want.sort_unstable();
        let mut wide = Vec::new();
        wide.put_u64(2);
        for e in &want {
            let k = keys[e.field as usize - 1];
            assert_eq!(narrow_hash2(crate::hash::wide_key_hash2(k)), e.h2);
            wide.put_u64(e.h);
            wide.put_u64(crate::hash::wide_key_hash2(k));
            wide.put_u32(e.field);
        }
        assert_eq!(decode_exceptions(&wide, 2, true).unwrap(), want);
        let narrow = GlobalIndex::encode_exceptions(&want);
        assert_eq!(narrow.len(), 8 + 2 * 16);
        assert_eq!(decode_exceptions(&narrow, 2, false).unwrap(), want);
        for len in 0..narrow.len() {
            assert!(
                decode_exceptions(&narrow[..len], 2, false).is_err(),
                "{len}"
            );
        }
        assert!(decode_exceptions(&wide, 2, false).is_err());
    }

    #[test]
    fn packed_fields_round_trip() {
        for (sig_bits, piece_bits) in [(8, 1), (8, 5), (12, 11), (16, 4), (32, 24)] {
            let n = 1000;
            let hashes: Vec<u64> = (0..n as u64)
                .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .collect();
            let phf = Phf::build(PhfKind::CpHash, &hashes, &PhfConfig::default())
                .unwrap()
                .phf;
            let pieces = (1u64 << piece_bits) - 1;
            let fields: Vec<(u64, u32)> = (0..phf.table_size() as u64)
                .map(|i| (i % (1u64 << sig_bits.min(20)), (i % (pieces + 1)) as u32))
                .collect();
            let slots = GlobalIndex::encode_slots(&fields, sig_bits, piece_bits);
            let idx = GlobalIndex::decode_slots(
                phf,
                sig_bits,
                piece_bits,
                Bytes::from(slots),
                &GlobalIndex::encode_exceptions(&[]),
                pieces as usize,
                false,
            )
            .unwrap();
            let Lookup::Slots { slots, .. } = &idx.lookup else {
                unreachable!()
            };
            for (i, &f) in fields.iter().enumerate() {
                assert_eq!(idx.slot_field(slots, i), f);
            }
        }
    }
}
