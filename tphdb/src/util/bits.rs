//! Bit-packed fields, least significant bit first, as the fuse cells,
//! format-1 global index slots and the in-memory block offset lines store
//! them: a field of up to 56 bits is read with one unaligned 8-byte load,
//! so a packed run ends with 8 bytes of padding.

/// Widest field [`field`] reads.
pub(crate) const MAX_FIELD_BITS: u32 = 56;

/// Bits needed to store values `0..=max`.
pub(crate) fn bits_for(max: u64) -> u32 {
    64 - max.leading_zeros()
}

/// The `width`-bit field at bit `bit` of `packed` (`width <=`
/// [`MAX_FIELD_BITS`]; the 8 bytes from its first byte must exist).
#[inline(always)]
pub(crate) fn field(packed: &[u8], bit: u64, width: u32) -> u64 {
    let at = (bit / 8) as usize;
    let word = u64::from_le_bytes(packed[at..at + 8].try_into().expect("8 bytes"));
    (word >> (bit % 8)) & ((1u64 << width) - 1)
}

/// [`field`] in packed bytes without the padding (a block's length
/// table, on disk as it is): only the bytes from the field's first to the
/// end of `packed`, at most 8, are read. `width <= 56`.
#[inline]
pub(crate) fn field_unpadded(packed: &[u8], bit: u64, width: u32) -> u64 {
    let at = (bit / 8) as usize;
    let end = (at + 8).min(packed.len());
    let mut word = [0u8; 8];
    word[..end - at].copy_from_slice(&packed[at..end]);
    (u64::from_le_bytes(word) >> (bit % 8)) & ((1u64 << width) - 1)
}

/// Fields appended one after another, each of its own width.
#[derive(Default)]
pub(crate) struct BitPacker {
    bytes: Vec<u8>,
    /// Bytes before the first field.
    prefix: usize,
    bits: u64,
}

impl BitPacker {
    /// A packer whose fields follow `prefix` zero bytes (room for a header
    /// written in place later), with room for about `bits` of fields, so
    /// that a large table is not grown by doubling: each growth held the
    /// table three times over for a moment.
    pub(crate) fn after(prefix: usize, bits: u64) -> BitPacker {
        let mut bytes = Vec::with_capacity(prefix + bits.div_ceil(8) as usize + 8);
        bytes.resize(prefix, 0);
        BitPacker {
            bytes,
            prefix,
            bits: 0,
        }
    }

    /// Bits appended so far.
    pub(crate) fn bits(&self) -> u64 {
        self.bits
    }

    /// Appends `v`, below `2^width` (`width <=` [`MAX_FIELD_BITS`]).
    pub(crate) fn push(&mut self, v: u64, width: u32) {
        debug_assert!(width <= MAX_FIELD_BITS && v >> width == 0);
        let at = self.prefix + (self.bits / 8) as usize;
        if self.bytes.len() < at + 8 {
            // Doubling within the room reserved; past it, a quarter more
            // (not Vec's doubling, which held the old table beside one
            // twice its size).
            if at + 8 > self.bytes.capacity() {
                let len = self.bytes.len();
                self.bytes.reserve_exact((at + 8 - len).max(len / 4));
            }
            let doubled = (self.bytes.len() * 2).min(self.bytes.capacity());
            self.bytes.resize((at + 8).max(doubled), 0);
        }
        let word = u64::from_le_bytes(self.bytes[at..at + 8].try_into().expect("8 bytes"));
        let word = word | (v << (self.bits % 8));
        self.bytes[at..at + 8].copy_from_slice(&word.to_le_bytes());
        self.bits += u64::from(width);
    }

    /// The prefix, the packed fields and 8 bytes of padding.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.bytes
            .resize(self.prefix + self.bits.div_ceil(8) as usize + 8, 0);
        self.bytes.shrink_to_fit();
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_of_mixed_widths_read_back() {
        let fields: Vec<(u64, u32)> = (0..500u64)
            .map(|i| {
                let width = (i % 57) as u32;
                (
                    i.wrapping_mul(0x9e37_79b9_7f4a_7c15) & ((1u64 << width) - 1),
                    width,
                )
            })
            .collect();
        let mut p = BitPacker::default();
        for &(v, w) in &fields {
            p.push(v, w);
        }
        let total = p.bits();
        let packed = p.finish();
        assert_eq!(packed.len() as u64, total.div_ceil(8) + 8);
        let mut bit = 0;
        let unpadded = &packed[..total.div_ceil(8) as usize];
        for &(v, w) in &fields {
            assert_eq!(field(&packed, bit, w), v);
            assert_eq!(field_unpadded(unpadded, bit, w), v);
            bit += u64::from(w);
        }
    }

    #[test]
    fn fields_after_a_prefix_fill_the_room_reserved_without_growing_it() {
        let mut p = BitPacker::after(20, 13 * 1000);
        let room = p.bytes.capacity();
        for i in 0..1000u64 {
            p.push(i * 7 % 8192, 13);
        }
        assert_eq!(p.bytes.capacity(), room);
        let packed = p.finish();
        assert_eq!(packed.len(), 20 + 1625 + 8);
        assert!(packed[..20].iter().all(|&b| b == 0));
        for i in 0..1000u64 {
            assert_eq!(field(&packed[20..], i * 13, 13), i * 7 % 8192);
        }
    }
}
