//! A TPH's global index: which piece holds the newest version of each key.
//!
//! A perfect hash over the key hashes of every live key of the TPH maps a
//! key to a slot; the slot holds a signature of the key hash and the piece
//! (both bit-packed, `sig_bits + piece_bits` bits per slot). A signature
//! mismatch proves the key absent without a read. When several live keys
//! share a 64-bit hash, all of them are listed as exceptions, told apart by
//! a second hash, and the exception list alone decides where they live.

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::hash::{key_hash2, signature};
use crate::phf::Phf;
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

#[derive(Debug)]
pub(crate) struct GlobalIndex {
    pub(crate) phf: Phf,
    pub(crate) sig_bits: u32,
    pub(crate) piece_bits: u32,
    /// Packed `sig << piece_bits | piece_field` per slot, 8 bytes of padding
    /// at the end so that every field is read with one unaligned u64 load.
    slots: Bytes,
    pub(crate) exceptions: Vec<Exception>,
}

/// The slot section being filled: `sig << piece_bits | piece_field` per
/// slot, bit-packed, every slot empty until set. Takes the section's size
/// and no more, so building an index holds no per-key list of fields.
pub(crate) struct SlotTable {
    out: Vec<u8>,
    width: usize,
    piece_bits: u32,
}

/// Bytes before the packed slots: their count.
const SLOTS_HEADER_BYTES: usize = 8;

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

/// Bits needed to store values `0..=max`.
pub(crate) fn bits_for(max: u64) -> u32 {
    64 - max.leading_zeros()
}

impl GlobalIndex {
    fn width(&self) -> u32 {
        self.sig_bits + self.piece_bits
    }

    /// `(signature, piece field)` of `slot`.
    #[inline]
    pub(crate) fn field(&self, slot: usize) -> (u64, u32) {
        let bit = slot * self.width() as usize;
        let at = bit / 8;
        let word = u64::from_le_bytes(self.slots[at..at + 8].try_into().expect("8 bytes"));
        let v = (word >> (bit % 8)) & ((1u64 << self.width()) - 1);
        (
            v >> self.piece_bits,
            (v & ((1 << self.piece_bits) - 1)) as u32,
        )
    }

    pub(crate) fn table_size(&self) -> usize {
        self.phf.table_size()
    }

    /// The piece index holding the newest version of `key` (hash `h`) if the
    /// key may be live in the TPH; `None` proves it is not.
    #[inline]
    pub(crate) fn route(&self, key: &[u8], h: u64) -> Option<usize> {
        if self.phf.is_empty() {
            return None;
        }
        let (sig, field) = self.field(self.phf.slot(h));
        if field == EMPTY || sig != signature(h, self.sig_bits) {
            return None;
        }
        match self.exceptions_for(h) {
            None => Some(field as usize - 1),
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

    /// Bytes of memory: perfect hash, packed slots, exceptions.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.phf.memory_bytes() + self.slots.len() + self.exceptions.len() * 24
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

    pub(crate) fn encode_exceptions(exceptions: &[Exception]) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + exceptions.len() * 20);
        out.put_u64(exceptions.len() as u64);
        for e in exceptions {
            out.put_u64(e.h);
            out.put_u64(e.h2);
            out.put_u32(e.field);
        }
        out
    }

    /// Assembles and validates an index read from disk: every slot's piece
    /// field must be below `piece_count + 1`, so that routing never indexes
    /// past the TPH's pieces.
    pub(crate) fn decode(
        phf: Phf,
        sig_bits: u32,
        piece_bits: u32,
        slots_section: Bytes,
        exceptions_section: &[u8],
        piece_count: usize,
    ) -> Result<GlobalIndex> {
        if !(1..=32).contains(&sig_bits)
            || piece_bits > 24
            || bits_for(piece_count as u64) > piece_bits
        {
            return Err(Error::corruption(
                "tph index widths",
                format!("1..=32 signature bits and room for {piece_count} pieces"),
                format!("{sig_bits} signature bits, {piece_bits} piece bits"),
            ));
        }
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
        let mut d = Decoder::new(exceptions_section, "tph exceptions");
        let count = d.u64()?;
        if count > (d.remaining() / 20) as u64 {
            return Err(Error::corruption(
                "tph exception count",
                d.remaining() / 20,
                count,
            ));
        }
        let mut exceptions = Vec::with_capacity(count as usize);
        for _ in 0..count {
            exceptions.push(Exception {
                h: d.u64()?,
                h2: d.u64()?,
                field: d.u32()?,
            });
        }
        d.finish()?;
        let index = GlobalIndex {
            phf,
            sig_bits,
            piece_bits,
            slots: slots_section.slice(8..),
            exceptions,
        };
        let bad_slot = (0..index.table_size()).find(|&s| index.field(s).1 as usize > piece_count);
        let bad_exception = index
            .exceptions
            .iter()
            .any(|e| e.field == EMPTY || e.field as usize > piece_count);
        if bad_slot.is_some() || bad_exception || !index.exceptions.windows(2).all(|w| w[0] < w[1])
        {
            return Err(Error::corruption(
                "tph piece fields",
                format!("pieces 1..={piece_count}, sorted exceptions"),
                format!("slot {bad_slot:?}, bad exception: {bad_exception}"),
            ));
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phf::{PhfConfig, PhfKind};

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
            let idx = GlobalIndex::decode(
                phf,
                sig_bits,
                piece_bits,
                Bytes::from(slots),
                &GlobalIndex::encode_exceptions(&[]),
                pieces as usize,
            )
            .unwrap();
            for (i, &f) in fields.iter().enumerate() {
                assert_eq!(idx.field(i), f);
            }
        }
    }
}
