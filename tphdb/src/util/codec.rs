//! Little-endian encoding with bounds-checked decoding.
//!
//! Every decoder in tphdb reads through [`Decoder`], which turns running past
//! the end of the input into a corruption error instead of a panic.

use crate::error::{Error, Result};

/// Appends fixed-width little-endian integers and LEB128 varints.
pub(crate) trait PutExt {
    fn put_u16(&mut self, v: u16);
    fn put_u32(&mut self, v: u32);
    fn put_u64(&mut self, v: u64);
    fn put_varint(&mut self, v: u64);
}

impl PutExt for Vec<u8> {
    #[inline]
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    fn put_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.push(v as u8);
    }
}

/// Number of bytes [`PutExt::put_varint`] writes for `v`.
pub(crate) fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// A cursor over untrusted bytes. Every read is bounds-checked.
pub(crate) struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Decoder<'a> {
    /// `what` names the structure being decoded, for error messages.
    pub(crate) fn new(buf: &'a [u8], what: &'static str) -> Self {
        Decoder { buf, pos: 0, what }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn truncated(&self, need: usize) -> Error {
        Error::corruption(
            format!("{} truncated at byte {}", self.what, self.pos),
            format!("{need} more bytes"),
            format!("{} bytes", self.remaining()),
        )
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.remaining() < n {
            return Err(self.truncated(n));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let s = self.bytes(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }
    pub(crate) fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// Reads a u32 that must equal `magic`.
    pub(crate) fn magic_u32(&mut self, magic: u32) -> Result<()> {
        let found = self.u32()?;
        if found != magic {
            return Err(Error::corruption(
                format!("{} magic", self.what),
                format!("{magic:#x}"),
                format!("{found:#x}"),
            ));
        }
        Ok(())
    }

    pub(crate) fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.u8()?;
            if i == 9 && b > 1 {
                break;
            }
            v |= ((b & 0x7f) as u64) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Error::corruption(
            format!("{}: varint at byte {}", self.what, self.pos),
            "at most 10 bytes encoding a u64",
            "an overlong varint",
        ))
    }

    /// Fails unless every byte was consumed.
    pub(crate) fn finish(&self) -> Result<()> {
        if self.remaining() != 0 {
            return Err(Error::corruption(
                format!("{}: trailing bytes", self.what),
                "end of structure",
                format!("{} extra bytes", self.remaining()),
            ));
        }
        Ok(())
    }
}

/// Reads a little-endian u32 at `i * 4` of `b`; the caller guarantees bounds.
#[inline(always)]
pub(crate) fn u32_at(b: &[u8], i: usize) -> u32 {
    let s = &b[i * 4..i * 4 + 4];
    u32::from_le_bytes([s[0], s[1], s[2], s[3]])
}

/// Reads a little-endian u64 at `i * 8` of `b`; the caller guarantees bounds.
#[inline(always)]
pub(crate) fn u64_at(b: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i * 8..i * 8 + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip_and_length() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            b.put_varint(v);
            assert_eq!(b.len(), varint_len(v));
            let mut d = Decoder::new(&b, "t");
            assert_eq!(d.varint().unwrap(), v);
            d.finish().unwrap();
        }
    }

    #[test]
    fn truncated_and_overlong_inputs_are_errors() {
        assert!(Decoder::new(&[0x80], "t").varint().is_err());
        assert!(Decoder::new(&[0xff; 11], "t").varint().is_err());
        assert!(Decoder::new(&[1, 2, 3], "t").u32().is_err());
        assert!(Decoder::new(&[], "t").u8().is_err());
    }
}
