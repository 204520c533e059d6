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
    /// Versions 2 to 4 (written since; 3 adds each piece's shadowed
    /// entries, 4 stores the exceptions' second hashes in 32 bits): a fuse
    /// storing each live key's field (section 21), piece fields `i`.
    Fuse,
}

/// A data piece of a TPH, as its head records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MetaPiece {
    pub(crate) number: u64,
    /// Its entries that are the newest version of their key in the TPH.
    pub(crate) live: u64,
    /// Its entries whose key had a version in a level below when it was
    /// written (an estimate: signatures can err); 0 at the bottom and in
    /// heads written before version 3. Of a piece's live entries, the
    /// same share is taken to hide a version below: garbage that a
    /// push-down and a fold below would free.
    pub(crate) shadowed: u64,
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
    /// Data pieces, oldest first.
    pub(crate) pieces: Vec<MetaPiece>,
    /// The exception list stores 64-bit second hashes (meta versions 1 to
    /// 3), whose high halves are the keys' `key_hash2`.
    pub(crate) wide_h2: bool,
}

impl TphMeta {
    pub(crate) fn live_total(&self) -> u64 {
        self.pieces.iter().map(|p| p.live).sum()
    }

    /// The meta section's version.
    fn version(&self) -> u32 {
        match (self.format, self.wide_h2) {
            (IndexFormat::Slots, _) => 1,
            (IndexFormat::Fuse, true) => 3,
            (IndexFormat::Fuse, false) => 4,
        }
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(32 + self.pieces.len() * 24);
        b.put_u32(self.version());
        b.put_u32(self.level);
        b.put_u64(self.partition);
        b.put_u32(self.sig_bits);
        b.put_u32(self.piece_bits);
        b.put_u32(self.pieces.len() as u32);
        for p in &self.pieces {
            b.put_u64(p.number);
            b.put_u64(p.live);
            if self.format == IndexFormat::Fuse {
                b.put_u64(p.shadowed);
            }
        }
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<TphMeta> {
        let mut d = Decoder::new(b, "tph meta");
        let version = d.u32()?;
        let format = match version {
            1 => IndexFormat::Slots,
            2..=4 => IndexFormat::Fuse,
            v => return Err(Error::corruption("tph meta version", "1 to 4", v)),
        };
        let record = if version >= 3 { 24 } else { 16 };
        let level = d.u32()?;
        let partition = d.u64()?;
        let sig_bits = d.u32()?;
        let piece_bits = d.u32()?;
        let count = d.u32()? as usize;
        if count == 0 || count > MAX_PIECES || count > d.remaining() / record {
            return Err(Error::corruption(
                "tph piece count",
                format!("1..={MAX_PIECES}"),
                count,
            ));
        }
        let mut pieces = Vec::with_capacity(count);
        for _ in 0..count {
            pieces.push(MetaPiece {
                number: d.u64()?,
                live: d.u64()?,
                shadowed: if version >= 3 { d.u64()? } else { 0 },
            });
        }
        d.finish()?;
        Ok(TphMeta {
            format,
            level,
            partition,
            sig_bits,
            piece_bits,
            pieces,
            wide_h2: version < 4,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(format: IndexFormat, wide_h2: bool) -> TphMeta {
        TphMeta {
            wide_h2,
            format,
            level: 2,
            partition: 9,
            sig_bits: 10,
            piece_bits: 1,
            pieces: vec![
                MetaPiece {
                    number: 7,
                    live: 100,
                    shadowed: if format == IndexFormat::Fuse { 40 } else { 0 },
                },
                MetaPiece {
                    number: 12,
                    live: 3,
                    shadowed: 0,
                },
            ],
        }
    }

    #[test]
    fn a_meta_round_trips_with_its_shadowed_counts() {
        for (format, wide_h2) in [
            (IndexFormat::Slots, true),
            (IndexFormat::Fuse, true),
            (IndexFormat::Fuse, false),
        ] {
            let m = meta(format, wide_h2);
            assert_eq!(TphMeta::decode(&m.encode()).unwrap(), m);
        }
    }

    #[test]
    fn a_version_2_meta_reads_with_no_shadowed_entries() {
        let mut b = Vec::new();
        for v in [2u32, 2, 9] {
            b.put_u32(v);
        }
        b.put_u32(0); // partition's high half
        b.put_u32(10);
        b.put_u32(0);
        b.put_u32(1);
        b.put_u64(5);
        b.put_u64(77);
        let m = TphMeta::decode(&b).unwrap();
        assert_eq!((m.format, m.wide_h2), (IndexFormat::Fuse, true));
        assert_eq!(
            m.pieces,
            vec![MetaPiece {
                number: 5,
                live: 77,
                shadowed: 0
            }]
        );
    }

    #[test]
    fn a_truncated_or_unknown_meta_is_corruption() {
        let b = meta(IndexFormat::Fuse, false).encode();
        for len in 0..b.len() {
            assert!(TphMeta::decode(&b[..len]).is_err(), "{len} bytes");
        }
        let mut v5 = b.clone();
        v5[0] = 5;
        assert!(TphMeta::decode(&v5).is_err());
    }
}
