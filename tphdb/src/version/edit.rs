//! Version edits: the records of the MANIFEST.
//!
//! ```text
//! edit := field*
//! field := tag:varint payload
//!   1 log_number:varint        WALs below this number are flushed
//!   2 next_file:varint
//!   3 last_seq:varint
//!   4 depth:varint             the bottom level
//!   5 add_l0 head:varint       a new newest L0 TPH
//!   6 remove_l0 head:varint
//!   7 set level:varint partition:varint head:varint
//!   8 remove level:varint partition:varint
//!   9 layout fanout:varint one_level:varint (0 or 1)
//!  10 format version:varint    absent: 1 (see `FORMAT_VERSION`)
//! ```

use crate::error::{Error, Result};
use crate::util::codec::{Decoder, PutExt};

/// How the levels are laid out; fixed when the database is created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) fanout: u64,
    pub(crate) one_level: bool,
}

/// A change to the database's structure, applied atomically.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct VersionEdit {
    pub(crate) log_number: Option<u64>,
    pub(crate) next_file: Option<u64>,
    pub(crate) last_seq: Option<u64>,
    pub(crate) depth: Option<u32>,
    pub(crate) layout: Option<Layout>,
    /// The format version, when a record states it (`None`: 1).
    pub(crate) format: Option<u64>,
    pub(crate) add_l0: Vec<u64>,
    pub(crate) remove_l0: Vec<u64>,
    /// `(level, partition, head)`.
    pub(crate) set: Vec<(u32, u64, u64)>,
    /// `(level, partition)`.
    pub(crate) remove: Vec<(u32, u64)>,
}

const LOG_NUMBER: u64 = 1;
const NEXT_FILE: u64 = 2;
const LAST_SEQ: u64 = 3;
const DEPTH: u64 = 4;
const ADD_L0: u64 = 5;
const REMOVE_L0: u64 = 6;
const SET: u64 = 7;
const REMOVE: u64 = 8;
const LAYOUT: u64 = 9;
const FORMAT: u64 = 10;

/// The format version of the database: of its MANIFEST and of every file it
/// names or replays (pieces, WALs, write batches). Version 1 is written
/// without a format field; a later version writes one in the first record
/// of every MANIFEST, so that a reader that does not know it refuses the
/// whole database before it reads anything else. Version 2: TPH heads
/// carry a fuse global index (meta version 2). Version 3: heads record
/// each piece's shadowed entries (meta version 3). Version 4: pieces of
/// piece format 2 (`piece::format`), which a reader of version 3 would
/// take for corrupt. Version 5: pieces of piece format 3 (32-bit second
/// key hashes, entries' tags holding the key's length) and heads of meta
/// version 4. Version 6: pieces of piece format 4 (blocks with length
/// tables, key-hash sections of steps). Version 7: pieces of piece format
/// 5 (entries without the key prefix a piece's keys share), which a reader
/// of version 6 would read with their keys cut short. Version 8: pieces of
/// piece format 6 (fixed-width sequence numbers, entries without tags).
/// Older heads and pieces are still read, and the first open that writes
/// makes an older database version 8 (every open starts a MANIFEST).
pub(crate) const FORMAT_VERSION: u64 = 8;

impl VersionEdit {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        let mut put = |tag: u64, vals: &[u64]| {
            b.put_varint(tag);
            for &v in vals {
                b.put_varint(v);
            }
        };
        if let Some(f) = self.format {
            put(FORMAT, &[f]);
        }
        if let Some(l) = self.layout {
            put(LAYOUT, &[l.fanout, l.one_level as u64]);
        }
        if let Some(v) = self.log_number {
            put(LOG_NUMBER, &[v]);
        }
        if let Some(v) = self.next_file {
            put(NEXT_FILE, &[v]);
        }
        if let Some(v) = self.last_seq {
            put(LAST_SEQ, &[v]);
        }
        if let Some(v) = self.depth {
            put(DEPTH, &[v as u64]);
        }
        for &h in &self.remove_l0 {
            put(REMOVE_L0, &[h]);
        }
        for &h in &self.add_l0 {
            put(ADD_L0, &[h]);
        }
        for &(l, p) in &self.remove {
            put(REMOVE, &[l as u64, p]);
        }
        for &(l, p, h) in &self.set {
            put(SET, &[l as u64, p, h]);
        }
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<VersionEdit> {
        let mut d = Decoder::new(b, "version edit");
        let mut e = VersionEdit::default();
        let level = |v: u64| {
            u32::try_from(v).map_err(|_| Error::corruption("version edit level", "a u32", v))
        };
        while d.remaining() > 0 {
            match d.varint()? {
                LOG_NUMBER => e.log_number = Some(d.varint()?),
                NEXT_FILE => e.next_file = Some(d.varint()?),
                LAST_SEQ => e.last_seq = Some(d.varint()?),
                DEPTH => e.depth = Some(level(d.varint()?)?),
                ADD_L0 => e.add_l0.push(d.varint()?),
                REMOVE_L0 => e.remove_l0.push(d.varint()?),
                SET => e.set.push((level(d.varint()?)?, d.varint()?, d.varint()?)),
                REMOVE => e.remove.push((level(d.varint()?)?, d.varint()?)),
                LAYOUT => {
                    let fanout = d.varint()?;
                    let one_level = match d.varint()? {
                        0 => false,
                        1 => true,
                        v => return Err(Error::corruption("layout one_level flag", "0 or 1", v)),
                    };
                    e.layout = Some(Layout { fanout, one_level });
                }
                // Written first by every version that writes it: a newer
                // one is refused before any field whose meaning changed.
                FORMAT => match d.varint()? {
                    v @ 1..=FORMAT_VERSION => e.format = Some(v),
                    0 => return Err(Error::corruption("format version", "1 or more", 0)),
                    v => {
                        return Err(Error::Unsupported(format!(
                            "database format version {v}; this tphdb reads up to {FORMAT_VERSION}"
                        )))
                    }
                },
                t => return Err(Error::corruption("version edit tag", "1..=10", t)),
            }
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let e = VersionEdit {
            log_number: Some(5),
            next_file: Some(99),
            last_seq: Some(1 << 40),
            depth: Some(3),
            layout: Some(Layout {
                fanout: 8,
                one_level: false,
            }),
            add_l0: vec![10, 11],
            remove_l0: vec![3],
            set: vec![(1, 2, 12), (2, 17, 13)],
            remove: vec![(1, 0)],
            format: None,
        };
        let b = e.encode();
        assert_eq!(VersionEdit::decode(&b).unwrap(), e);
        for len in 1..b.len() {
            // A cut may land on a field boundary and decode to a prefix;
            // it must never decode to something else or panic.
            if let Ok(p) = VersionEdit::decode(&b[..len]) {
                assert_ne!(p, e);
            }
        }
        assert!(VersionEdit::decode(&[42]).is_err());
    }

    /// A record of a newer format version is refused as such, not read
    /// as whatever its bytes would mean today.
    #[test]
    fn a_newer_format_version_is_unsupported() {
        let mut e = VersionEdit {
            format: Some(FORMAT_VERSION),
            next_file: Some(3),
            ..VersionEdit::default()
        };
        assert_eq!(VersionEdit::decode(&e.encode()).unwrap(), e);
        e.format = Some(FORMAT_VERSION + 1);
        let mut b = e.encode();
        // Whatever follows the format field.
        b.extend_from_slice(&[99, 1, 2, 3]);
        let err = VersionEdit::decode(&b).unwrap_err();
        assert!(matches!(err, Error::Unsupported(_)), "{err}");
    }
}
