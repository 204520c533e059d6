//! Reading how a piece lays out its entries: the key-prefix and
//! key-length sections, checked against the format and the properties.

use std::ops::RangeInclusive;

use bytes::Bytes;

use super::read_section;
use crate::error::{Error, Result};
use crate::fs::RandomAccessFile;
use crate::piece::entry::MAX_KEY_BYTES;
use crate::piece::entry_layout::{EntryLayout, SeqCoding};
use crate::piece::format::{
    PieceProperties, Section, SectionId, ENTRY_LAYOUT_VERSION, KEY_PREFIX_VERSION, MAX_KEY_PREFIX,
};
use crate::util::codec::Decoder;

/// Section `id`, which a piece may leave out, verified: absent, or of
/// `lengths` bytes in a piece of format `since` or later (older readers
/// ignore sections they do not know, and would misread the piece).
fn optional_section(
    file: &dyn RandomAccessFile,
    sections: &[Section],
    id: SectionId,
    version: u32,
    since: u32,
    lengths: RangeInclusive<u64>,
) -> Result<Option<Bytes>> {
    let Some(s) = sections.iter().find(|s| s.id == id as u32) else {
        return Ok(None);
    };
    if version < since || !lengths.contains(&s.len) {
        return Err(Error::corruption(
            format!("{} section", id.name()),
            format!(
                "{} to {} bytes, in a piece of format {since} or later",
                lengths.start(),
                lengths.end()
            ),
            format!("{} bytes in a piece of format {version}", s.len),
        ));
    }
    read_section(file, sections, id).map(Some)
}

/// The key-prefix section, verified: none before format 5, and at most
/// [`MAX_KEY_PREFIX`] bytes.
fn read_key_prefix(
    file: &dyn RandomAccessFile,
    sections: &[Section],
    version: u32,
) -> Result<Bytes> {
    let lengths = 1..=MAX_KEY_PREFIX as u64;
    let prefix = optional_section(
        file,
        sections,
        SectionId::KeyPrefix,
        version,
        KEY_PREFIX_VERSION,
        lengths,
    )?;
    Ok(prefix.unwrap_or_default())
}

/// How a piece of format `version` with these sections and properties
/// stores its entries, verified: a key prefix (format 5), sequence
/// numbers from the properties' smallest to largest (format 6), and a key
/// length (format 6) only where every entry can be a put of that length.
pub(super) fn read_entry_layout(
    file: &dyn RandomAccessFile,
    sections: &[Section],
    version: u32,
    props: &PieceProperties,
) -> Result<EntryLayout> {
    let key_prefix = read_key_prefix(file, sections, version)?;
    let seq = match version >= ENTRY_LAYOUT_VERSION {
        false => SeqCoding::Varint,
        true if props.min_seq <= props.max_seq => SeqCoding::fixed(props.min_seq, props.max_seq),
        true => {
            return Err(Error::corruption(
                "sequence numbers",
                "smallest <= largest",
                format!("{} > {}", props.min_seq, props.max_seq),
            ))
        }
    };
    let key_length = optional_section(
        file,
        sections,
        SectionId::KeyLength,
        version,
        ENTRY_LAYOUT_VERSION,
        4..=4,
    )?;
    let Some(bytes) = key_length else {
        return Ok(EntryLayout {
            key_prefix,
            seq,
            stored_key_len: None,
        });
    };
    let key_len = u64::from(Decoder::new(&bytes, "key length").u32()?);
    // An entry of no bytes (no key past the prefix, no sequence number
    // bytes, an empty value) would be an empty slot.
    let least = key_prefix.len() as u64 + u64::from(seq.bytes() == 0);
    let fits = (least..=MAX_KEY_BYTES as u64).contains(&key_len)
        && props.tombstone_count == 0
        && props.key_bytes == props.entry_count.saturating_mul(key_len);
    if !fits {
        return Err(Error::corruption(
            "key length section",
            format!("a length from {least} to {MAX_KEY_BYTES} bytes of every key, no tombstones"),
            format!(
                "{key_len} bytes a key, {} key bytes of {} entries, {} tombstones",
                props.key_bytes, props.entry_count, props.tombstone_count
            ),
        ));
    }
    Ok(EntryLayout {
        stored_key_len: Some((key_len - key_prefix.len() as u64) as u32),
        key_prefix,
        seq,
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::fs::{FileSystem, MemFs, ReadMode};

    /// A key-prefix section of 1 to 64 bytes is read from a piece of
    /// format 5 on; any other length, or one in an older piece, is
    /// corruption, and so is a prefix that fails its checksum.
    #[test]
    fn a_key_prefix_section_is_read_only_as_the_format_allows() {
        let fs = MemFs::new();
        let path = Path::new("/prefix");
        fs.write_file(path, vec![b'k'; 100]);
        let file = fs.open_read(path, ReadMode::Pread).unwrap();
        let read = |len: u64, version: u32, crc: Option<u32>| {
            let bytes = vec![b'k'; len as usize];
            let section = Section {
                id: SectionId::KeyPrefix as u32,
                offset: 0,
                len,
                crc: crc.unwrap_or_else(|| crc32c::crc32c(&bytes)),
            };
            read_key_prefix(file.as_ref(), &[section], version)
        };
        for (len, version) in [(1, 5), (64, 5), (9, 6)] {
            assert_eq!(read(len, version, None).unwrap().len(), len as usize);
        }
        for (len, version, crc) in [(0, 5, None), (65, 5, None), (9, 4, None), (9, 5, Some(7))] {
            let err = read(len, version, crc).unwrap_err();
            assert!(err.is_corruption(), "{len} bytes, format {version}: {err}");
        }
        assert!(read_key_prefix(file.as_ref(), &[], 5).unwrap().is_empty());
    }
}
