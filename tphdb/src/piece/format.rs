//! Fixed parts of the piece file format: footer, section directory and
//! properties. The byte layout is specified in `docs/format.md`.

use crate::error::{Error, Result};
use crate::util::checksum_matches;
use crate::util::codec::{Decoder, PutExt};

/// Last 8 bytes of every piece file.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"TPHPIECE");
/// Version of the piece format this code writes. Version 2 dropped the
/// value's length from entries (a put's value runs to its slot's end) and
/// the slot from key-chunk items (the perfect hash gives it). Version 3
/// stores the second key hash in 32 bits in the key-hash section, and an
/// entry's kind and key length in one varint. Version 4 gives blocks of
/// up to 64 slots a table of lengths instead of offsets, codes the
/// key-hash section's first hashes as steps, and leaves out a key-chunk
/// item's length when its key is as long as the one before. Version 5
/// leaves the prefix every key of the piece shares out of its entries,
/// stored once in a key-prefix section. Version 6 stores an entry's
/// sequence number as its distance from the piece's smallest, in the
/// fewest bytes that hold the piece's span, and no tag in a piece of puts
/// whose keys are of one length (given in a key-length section).
pub(crate) const FORMAT_VERSION: u32 = 6;
/// The first piece format that may have a key-prefix section.
pub(crate) const KEY_PREFIX_VERSION: u32 = 5;
/// The first piece format whose entries have fixed-width sequence numbers
/// and may have no tag.
pub(crate) const ENTRY_LAYOUT_VERSION: u32 = 6;
/// The longest key prefix a piece leaves out of its entries: past it, a
/// byte an entry is a small share of the key.
pub(crate) const MAX_KEY_PREFIX: usize = 64;
/// The oldest piece format this code reads.
pub(crate) const OLDEST_FORMAT_VERSION: u32 = 1;
pub(crate) const FOOTER_BYTES: usize = 32;

/// Sections of a piece file, by id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub(crate) enum SectionId {
    Properties = 1,
    Phf = 2,
    BlockIndex = 3,
    Overflow = 4,
    Hashes = 5,
    KeyChunks = 6,
    ChunkIndex = 7,
    /// Optional (format 5): the prefix every key shares, left out of the
    /// entries.
    KeyPrefix = 8,
    /// Optional (format 6): the length of every key of a piece of puts
    /// whose keys are of one length; its entries have no tag.
    KeyLength = 9,
}

impl SectionId {
    /// The sections a piece may have of its own, required or not.
    pub(crate) const ALL: [SectionId; 9] = [
        SectionId::Properties,
        SectionId::Phf,
        SectionId::BlockIndex,
        SectionId::Overflow,
        SectionId::Hashes,
        SectionId::KeyChunks,
        SectionId::ChunkIndex,
        SectionId::KeyPrefix,
        SectionId::KeyLength,
    ];

    /// The sections every piece has: all but the key prefix and length.
    pub(crate) const REQUIRED: &'static [SectionId] = SectionId::ALL.split_at(7).0;

    pub(crate) fn name(self) -> &'static str {
        match self {
            SectionId::Properties => "properties",
            SectionId::Phf => "perfect hash",
            SectionId::BlockIndex => "block index",
            SectionId::Overflow => "overflow",
            SectionId::Hashes => "key hashes",
            SectionId::KeyChunks => "key chunks",
            SectionId::ChunkIndex => "key chunk index",
            SectionId::KeyPrefix => "key prefix",
            SectionId::KeyLength => "key length",
        }
    }
}

/// Where a section lives and its checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Section {
    pub(crate) id: u32,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) crc: u32,
}

/// The footer: locates the section directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Footer {
    /// The piece format version (see [`FORMAT_VERSION`]).
    pub(crate) version: u32,
    pub(crate) dir_offset: u64,
    pub(crate) dir_len: u32,
    pub(crate) dir_crc: u32,
}

impl Footer {
    pub(crate) fn encode(&self) -> [u8; FOOTER_BYTES] {
        let mut b = Vec::with_capacity(FOOTER_BYTES);
        b.put_u64(self.dir_offset);
        b.put_u32(self.dir_len);
        b.put_u32(self.dir_crc);
        b.put_u32(self.version);
        let crc = crc32c::crc32c_append(crc32c::crc32c(&b), &MAGIC.to_le_bytes());
        b.put_u32(crc);
        b.put_u64(MAGIC);
        b.try_into().expect("footer size")
    }

    pub(crate) fn decode(b: &[u8]) -> Result<Footer> {
        let mut d = Decoder::new(b, "footer");
        let dir_offset = d.u64()?;
        let dir_len = d.u32()?;
        let dir_crc = d.u32()?;
        let version = d.u32()?;
        let stored_crc = d.u32()?;
        let magic = d.u64()?;
        d.finish()?;
        if magic != MAGIC {
            return Err(Error::corruption(
                "footer magic",
                format!("{MAGIC:#018x} (\"TPHPIECE\")"),
                format!("{magic:#018x}"),
            ));
        }
        let crc = crc32c::crc32c_append(crc32c::crc32c(&b[..20]), &b[24..32]);
        if !checksum_matches(stored_crc, crc) {
            return Err(Error::corruption(
                "footer checksum",
                format!("{stored_crc:#010x}"),
                format!("{crc:#010x}"),
            ));
        }
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(Error::corruption(
                "piece format version",
                format!("{OLDEST_FORMAT_VERSION} to {FORMAT_VERSION}"),
                version,
            ));
        }
        Ok(Footer {
            version,
            dir_offset,
            dir_len,
            dir_crc,
        })
    }
}

pub(crate) fn encode_directory(sections: &[Section]) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + sections.len() * 24);
    b.put_u32(sections.len() as u32);
    for s in sections {
        b.put_u32(s.id);
        b.put_u64(s.offset);
        b.put_u64(s.len);
        b.put_u32(s.crc);
    }
    b
}

/// Decodes the directory and checks that every section lies in
/// `[0, limit)` without overlapping the others or repeating an id.
pub(crate) fn decode_directory(b: &[u8], limit: u64) -> Result<Vec<Section>> {
    let mut d = Decoder::new(b, "section directory");
    let count = d.u32()? as usize;
    if count > d.remaining() / 24 {
        return Err(Error::corruption(
            "section count",
            format!("at most {}", d.remaining() / 24),
            count,
        ));
    }
    let mut sections = Vec::with_capacity(count);
    for _ in 0..count {
        sections.push(Section {
            id: d.u32()?,
            offset: d.u64()?,
            len: d.u64()?,
            crc: d.u32()?,
        });
    }
    d.finish()?;
    let mut sorted = sections.clone();
    sorted.sort_by_key(|s| s.offset);
    let mut end = 0u64;
    for s in &sorted {
        let s_end = s.offset.checked_add(s.len).filter(|&e| e <= limit);
        match s_end {
            Some(e) if s.offset >= end => end = e,
            _ => {
                return Err(Error::corruption(
                    format!("section {} bounds", s.id),
                    format!("a range after byte {end} and within the first {limit} bytes"),
                    format!("{} bytes at {}", s.len, s.offset),
                ))
            }
        }
    }
    let mut ids: Vec<u32> = sections.iter().map(|s| s.id).collect();
    ids.sort_unstable();
    if ids.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::corruption(
            "section ids",
            "each id once",
            format!("{ids:?}"),
        ));
    }
    for &id in SectionId::REQUIRED {
        if !ids.contains(&(id as u32)) {
            return Err(Error::corruption(
                "section directory",
                format!("a {} section", id.name()),
                "none",
            ));
        }
    }
    Ok(sections)
}

/// Block compression.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Compression {
    /// Blocks are stored as they are.
    #[default]
    None,
    /// Each block is compressed with LZ4 when that makes it smaller.
    Lz4,
}

/// Summary numbers of a piece, stored in its properties section.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PieceProperties {
    /// Entries, tombstones included.
    pub entry_count: u64,
    /// Entries that are tombstones.
    pub tombstone_count: u64,
    /// Slots of the perfect hash.
    pub table_size: u64,
    /// Entries whose key hash repeats another key's hash, kept in extra slots
    /// past the table.
    pub overflow_count: u64,
    /// Slots per block (`k`).
    pub slots_per_block: u32,
    /// The page size `k` was chosen for.
    pub page_size: u32,
    /// Number of blocks.
    pub block_count: u64,
    /// Bytes of the data region (all blocks).
    pub data_bytes: u64,
    /// Smallest sequence number of an entry (0 when empty).
    pub min_seq: u64,
    /// Largest sequence number of an entry (0 when empty).
    pub max_seq: u64,
    /// Sum of key lengths.
    pub key_bytes: u64,
    /// Sum of value lengths.
    pub value_bytes: u64,
    /// Largest decompressed block, in bytes.
    pub max_block_bytes: u64,
    /// Compression the writer asked for.
    pub compression: Compression,
    /// Seed of the key hash the stored hashes were computed with.
    pub key_hash_seed: u64,
}

impl PieceProperties {
    /// Total slots: the table plus the overflow slots.
    pub fn total_slots(&self) -> u64 {
        self.table_size + self.overflow_count
    }

    /// Data bytes of `live` of the entries, estimated pro rata. Computed
    /// in 128 bits: data bytes times entries passes 2^64 for pieces near
    /// 100 GB.
    pub(crate) fn data_bytes_of(&self, live: u64) -> u64 {
        let scaled = self.data_bytes as u128 * live as u128 / self.entry_count.max(1) as u128;
        scaled.min(u64::MAX as u128) as u64
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(120);
        b.put_u64(self.entry_count);
        b.put_u64(self.tombstone_count);
        b.put_u64(self.table_size);
        b.put_u64(self.overflow_count);
        b.put_u32(self.slots_per_block);
        b.put_u32(self.page_size);
        b.put_u64(self.block_count);
        b.put_u64(self.data_bytes);
        b.put_u64(self.min_seq);
        b.put_u64(self.max_seq);
        b.put_u64(self.key_bytes);
        b.put_u64(self.value_bytes);
        b.put_u64(self.max_block_bytes);
        b.put_u32(match self.compression {
            Compression::None => 0,
            Compression::Lz4 => 1,
        });
        b.put_u64(self.key_hash_seed);
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<PieceProperties> {
        let mut d = Decoder::new(b, "properties");
        let p = PieceProperties {
            entry_count: d.u64()?,
            tombstone_count: d.u64()?,
            table_size: d.u64()?,
            overflow_count: d.u64()?,
            slots_per_block: d.u32()?,
            page_size: d.u32()?,
            block_count: d.u64()?,
            data_bytes: d.u64()?,
            min_seq: d.u64()?,
            max_seq: d.u64()?,
            key_bytes: d.u64()?,
            value_bytes: d.u64()?,
            max_block_bytes: d.u64()?,
            compression: match d.u32()? {
                0 => Compression::None,
                1 => Compression::Lz4,
                c => return Err(Error::corruption("compression", "0 (none) or 1 (lz4)", c)),
            },
            key_hash_seed: d.u64()?,
        };
        d.finish()?;
        let bad = |what: &str, expected: String, found: String| {
            Err(Error::corruption(what, expected, found))
        };
        if p.slots_per_block == 0 {
            return bad("slots per block", "at least 1".into(), "0".into());
        }
        if p.entry_count > u32::MAX as u64
            || p.tombstone_count > p.entry_count
            || p.overflow_count > p.entry_count
            || p.entry_count - p.overflow_count > p.table_size
        {
            return bad(
                "entry counts",
                "entries < 2^32, tombstones and overflow <= entries, table entries <= table size"
                    .into(),
                format!(
                    "{} entries, {} tombstones, {} overflow, table size {}",
                    p.entry_count, p.tombstone_count, p.overflow_count, p.table_size
                ),
            );
        }
        if p.block_count != p.total_slots().div_ceil(p.slots_per_block as u64) {
            return bad(
                "block count",
                format!("ceil({} slots / {})", p.total_slots(), p.slots_per_block),
                p.block_count.to_string(),
            );
        }
        if p.max_block_bytes > u32::MAX as u64 {
            return bad(
                "largest block",
                "below 4 GiB".into(),
                p.max_block_bytes.to_string(),
            );
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: live data bytes were `data_bytes * live / entries` in 64
    /// bits, which overflows for pieces near 100 GB (a panic in debug
    /// builds, a wrong size that steers compaction in release).
    #[test]
    fn live_data_bytes_of_a_100_gb_piece_do_not_overflow() {
        let p = PieceProperties {
            entry_count: 400_000_000,
            data_bytes: 100 << 30,
            ..PieceProperties::default()
        };
        assert_eq!(p.data_bytes_of(400_000_000), 100 << 30);
        assert_eq!(p.data_bytes_of(200_000_000), 50 << 30);
        assert_eq!(p.data_bytes_of(0), 0);
    }

    #[test]
    fn footers_of_versions_1_to_6_are_read_and_others_refused() {
        for version in 0..8 {
            let footer = Footer {
                version,
                dir_offset: 1234,
                dir_len: 56,
                dir_crc: 7,
            };
            let decoded = Footer::decode(&footer.encode());
            match version {
                1..=6 => assert_eq!(decoded.unwrap(), footer),
                _ => assert!(
                    matches!(decoded, Err(Error::Corruption { .. })),
                    "version {version}: {decoded:?}"
                ),
            }
        }
    }
}
