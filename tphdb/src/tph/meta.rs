//! The TPH metadata section of a head piece.

use crate::error::{Error, Result};
use crate::util::codec::{Decoder, PutExt};

pub(crate) const SECTION_META: u32 = 16;
pub(crate) const SECTION_PHF: u32 = 17;
pub(crate) const SECTION_SLOTS: u32 = 18;
pub(crate) const SECTION_EXCEPTIONS: u32 = 20;
pub(crate) const SECTION_FUSE: u32 = 21;

/// The global index a head carries, by its meta section's version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IndexFormat {
    /// Version 1: a perfect hash (section 17) and a slot per table entry
    /// (section 18), piece fields `i + 1`, 0 empty.
    Slots,
    /// Version 2, written since: a fuse storing each live key's field
    /// (section 21), piece fields `i`.
    Fuse,
}

impl IndexFormat {
    fn version(self) -> u32 {
        match self {
            IndexFormat::Slots => 1,
            IndexFormat::Fuse => 2,
        }
    }
}
/// The paper allows up to 1024 pieces per TPH.
pub(crate) const MAX_PIECES: usize = 1024;

/// What a head piece says about its TPH.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TphMeta {
    pub(crate) format: IndexFormat,
    pub(crate) level: u32,
    pub(crate) partition: u64,
    pub(crate) sig_bits: u32,
    pub(crate) piece_bits: u32,
    /// Data pieces, oldest first: file number and live entries in it.
    pub(crate) pieces: Vec<(u64, u64)>,
}

impl TphMeta {
    pub(crate) fn live_total(&self) -> u64 {
        self.pieces.iter().map(|p| p.1).sum()
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(32 + self.pieces.len() * 16);
        b.put_u32(self.format.version());
        b.put_u32(self.level);
        b.put_u64(self.partition);
        b.put_u32(self.sig_bits);
        b.put_u32(self.piece_bits);
        b.put_u32(self.pieces.len() as u32);
        for &(number, live) in &self.pieces {
            b.put_u64(number);
            b.put_u64(live);
        }
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<TphMeta> {
        let mut d = Decoder::new(b, "tph meta");
        let format = match d.u32()? {
            1 => IndexFormat::Slots,
            2 => IndexFormat::Fuse,
            v => return Err(Error::corruption("tph meta version", "1 or 2", v)),
        };
        let level = d.u32()?;
        let partition = d.u64()?;
        let sig_bits = d.u32()?;
        let piece_bits = d.u32()?;
        let count = d.u32()? as usize;
        if count == 0 || count > MAX_PIECES || count > d.remaining() / 16 {
            return Err(Error::corruption(
                "tph piece count",
                format!("1..={MAX_PIECES}"),
                count,
            ));
        }
        let mut pieces = Vec::with_capacity(count);
        for _ in 0..count {
            pieces.push((d.u64()?, d.u64()?));
        }
        d.finish()?;
        Ok(TphMeta {
            format,
            level,
            partition,
            sig_bits,
            piece_bits,
            pieces,
        })
    }
}
