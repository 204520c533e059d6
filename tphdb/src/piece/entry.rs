//! Entries: what a piece stores for each key.

use bytes::Bytes;

use crate::error::{Error, Result};
use crate::util::codec::{varint_len, Decoder, PutExt};

/// Longest key a piece accepts.
pub const MAX_KEY_BYTES: usize = 1 << 20;
/// Longest value a piece accepts.
pub const MAX_VALUE_BYTES: usize = 1 << 30;

// An entry starts with a varint tag. Tags 0 to 2 are the kinds of format
// versions 1 and 2, each followed by the sequence number and the key's
// length; tags from `TAG_KEYED` on are version 3's.

/// A put with its value's length (format version 1).
const KIND_PUT_WITH_LENGTH: u64 = 0;
/// A tombstone (format versions 1 and 2).
const KIND_DELETE: u64 = 1;
/// A put whose value runs to the end of its slot: the slot's offsets
/// already say where an entry ends, so its value's length is not stored
/// (format version 2; 2 bytes an entry at 128-byte to 16 KiB values).
const KIND_PUT: u64 = 2;
/// Tags from this one on (format version 3) hold the key's length and
/// whether the entry is a tombstone, `TAG_KEYED + (key_len << 1 |
/// tombstone)`, and the sequence number follows: one byte an entry less
/// than a kind and a length for keys of up to 61 bytes (62 for puts), and
/// never more.
const TAG_KEYED: u64 = 3;

/// An entry to be written: a key with a value, or a tombstone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryRef<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value, or `None` for a tombstone (a delete).
    pub value: Option<&'a [u8]>,
    /// Sequence number of the write.
    pub seq: u64,
}

/// An entry read from a piece. Key and value share the block's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: Bytes,
    /// The value, or `None` for a tombstone.
    pub value: Option<Bytes>,
    /// Sequence number of the write.
    pub seq: u64,
}

/// What a piece is written from: anything that shows as an entry, so that
/// callers need not build a list of [`EntryRef`] beside their own.
pub(crate) trait AsEntry: Sync {
    fn as_entry(&self) -> EntryRef<'_>;

    /// Asks the CPU for the memory [`AsEntry::as_entry`] reads first (an
    /// entry written from lies anywhere in memory: a piece's slot order is
    /// random).
    fn prefetch(&self) {}
}

/// What planning a piece needs of an entry: all but the value's bytes. A
/// piece written in passes is planned from these, and each pass loads the
/// entries of its blocks whole (see `write_piece_in_passes`).
pub(crate) trait EntryShape: Sync {
    fn key(&self) -> &[u8];
    fn seq(&self) -> u64;
    /// The value's length; `None` for a tombstone.
    fn value_len(&self) -> Option<usize>;

    /// Asks the CPU for the memory [`EntryShape::key`] reads first; passes
    /// over entries in their order call it some entries ahead.
    fn prefetch_shape(&self) {}

    /// Bytes of the encoded entry.
    fn encoded_len(&self) -> usize {
        encoded_len(self.key().len(), self.seq(), self.value_len())
    }
}

impl<T: AsEntry> EntryShape for T {
    fn key(&self) -> &[u8] {
        self.as_entry().key
    }

    fn seq(&self) -> u64 {
        self.as_entry().seq
    }

    fn value_len(&self) -> Option<usize> {
        self.as_entry().value.map(<[u8]>::len)
    }

    #[inline]
    fn prefetch_shape(&self) {
        AsEntry::prefetch(self)
    }
}

/// How many entries ahead passes in entry order prefetch: a flush's
/// entries lie wherever the memtable's arena put them, so each pass over
/// them in key order missed the cache at every entry.
pub(crate) const PREFETCH_AHEAD: usize = 8;

/// Prefetches the entry [`PREFETCH_AHEAD`] after `i` in `entries`, if any:
/// called by a pass over `entries` in their order as it reaches `i`.
#[inline]
pub(crate) fn prefetch_ahead<E: EntryShape>(entries: &[E], i: usize) {
    if let Some(e) = entries.get(i + PREFETCH_AHEAD) {
        e.prefetch_shape();
    }
}

/// Where a piece's blocks get their entries whole: entry `i` of the piece,
/// or `None` if it is not at hand.
pub(crate) trait EntrySource: Sync {
    fn entry(&self, i: u32) -> Option<EntryRef<'_>>;

    /// Asks the CPU for the memory [`EntrySource::entry`] of `i` reads
    /// first, ahead of it.
    fn prefetch(&self, _i: u32) {}
}

impl<S: EntrySource + ?Sized> EntrySource for &S {
    fn entry(&self, i: u32) -> Option<EntryRef<'_>> {
        (**self).entry(i)
    }

    fn prefetch(&self, i: u32) {
        (**self).prefetch(i)
    }
}

impl<E: AsEntry> EntrySource for [E] {
    fn entry(&self, i: u32) -> Option<EntryRef<'_>> {
        self.get(i as usize).map(AsEntry::as_entry)
    }

    #[inline]
    fn prefetch(&self, i: u32) {
        if let Some(e) = self.get(i as usize) {
            e.prefetch();
        }
    }
}

impl AsEntry for Entry {
    fn as_entry(&self) -> EntryRef<'_> {
        EntryRef {
            key: &self.key,
            value: self.value.as_deref(),
            seq: self.seq,
        }
    }
}

impl AsEntry for EntryRef<'_> {
    fn as_entry(&self) -> EntryRef<'_> {
        *self
    }
}

impl EntryRef<'_> {
    /// Bytes of the encoded entry.
    pub(crate) fn encoded_len(&self) -> usize {
        encoded_len(self.key.len(), self.seq, self.value.map(<[u8]>::len))
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_varint(entry_tag(self.key.len(), self.value.is_none()));
        out.put_varint(self.seq);
        out.extend_from_slice(self.key);
        if let Some(v) = self.value {
            out.extend_from_slice(v);
        }
    }
}

/// Bytes of an entry of a key of `key` bytes, `seq` and a value of
/// `value` bytes (`None`: a tombstone), as [`EntryRef::encode`] writes it.
fn encoded_len(key: usize, seq: u64, value: Option<usize>) -> usize {
    varint_len(entry_tag(key, value.is_none())) + varint_len(seq) + key + value.unwrap_or(0)
}

/// The tag of an entry of a key of `key` bytes ([`TAG_KEYED`]).
fn entry_tag(key: usize, tombstone: bool) -> u64 {
    TAG_KEYED + ((key as u64) << 1 | u64::from(tombstone))
}

/// Refuses a key or value over the limits ([`MAX_KEY_BYTES`],
/// [`MAX_VALUE_BYTES`]), before anything is written.
pub(crate) fn check_limits(key: &[u8], value: Option<&[u8]>) -> Result<()> {
    check_lengths(key.len(), value.map(<[u8]>::len))
}

/// [`check_limits`] of a key and a value of these lengths.
pub(crate) fn check_lengths(key: usize, value: Option<usize>) -> Result<()> {
    if key > MAX_KEY_BYTES {
        return Err(Error::InvalidArgument(format!(
            "key of {key} bytes exceeds the limit of {MAX_KEY_BYTES}"
        )));
    }
    if let Some(v) = value.filter(|&v| v > MAX_VALUE_BYTES) {
        return Err(Error::InvalidArgument(format!(
            "value of {v} bytes exceeds the limit of {MAX_VALUE_BYTES}"
        )));
    }
    Ok(())
}

/// Decodes the entry that spans exactly `block[start..end]`.
pub(crate) fn decode_entry(block: &Bytes, start: usize, end: usize) -> Result<Entry> {
    let e = decode_entry_ref(block, start, end)?;
    Ok(Entry {
        key: block.slice_ref(e.key),
        value: e.value.map(|v| block.slice_ref(v)),
        seq: e.seq,
    })
}

/// [`decode_entry`], borrowing key and value from the block: no count of
/// the block's references to raise and drop again, for a merge that copies
/// what it keeps.
pub(crate) fn decode_entry_ref(block: &[u8], start: usize, end: usize) -> Result<EntryRef<'_>> {
    let s = &block[start..end];
    let mut d = Decoder::new(s, "entry");
    let tag = d.varint()?;
    let (seq, key_len, put) = match tag {
        KIND_PUT_WITH_LENGTH | KIND_PUT => (d.varint()?, d.varint()?, true),
        KIND_DELETE => (d.varint()?, d.varint()?, false),
        _ => {
            let seq = d.varint()?;
            (seq, (tag - TAG_KEYED) >> 1, (tag - TAG_KEYED) & 1 == 0)
        }
    };
    let value_len = match tag {
        KIND_PUT_WITH_LENGTH => Some(d.varint()?),
        _ if put => Some((d.remaining() as u64).saturating_sub(key_len)),
        _ => None,
    };
    let header = d.position();
    let body = key_len.checked_add(value_len.unwrap_or(0));
    if body != Some(d.remaining() as u64) {
        return Err(Error::corruption(
            "entry length",
            format!("{} bytes of key and value", d.remaining()),
            format!("key {key_len} + value {}", value_len.unwrap_or(0)),
        ));
    }
    let key_start = start + header;
    let key_end = key_start + key_len as usize;
    Ok(EntryRef {
        key: &block[key_start..key_end],
        value: value_len.map(|_| &block[key_end..end]),
        seq,
    })
}

/// Entries of `keys`, each with `value` and sequence number 1.
#[cfg(test)]
pub(crate) fn entries_of<'a>(keys: &'a [Vec<u8>], value: &'a [u8]) -> Vec<EntryRef<'a>> {
    keys.iter()
        .map(|k| EntryRef {
            key: k,
            value: Some(value),
            seq: 1,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for e in [
            EntryRef {
                key: b"k",
                value: Some(b"v"),
                seq: 7,
            },
            EntryRef {
                key: b"",
                value: Some(b""),
                seq: 0,
            },
            EntryRef {
                key: b"gone",
                value: None,
                seq: u64::MAX,
            },
        ] {
            let mut b = vec![9u8; 3];
            e.encode(&mut b);
            assert_eq!(b.len() - 3, e.encoded_len());
            let bytes = Bytes::from(b);
            let d = decode_entry(&bytes, 3, bytes.len()).unwrap();
            assert_eq!(&d.key[..], e.key);
            assert_eq!(d.value.as_deref(), e.value);
            assert_eq!(d.seq, e.seq);
        }
    }

    #[test]
    fn truncations_short_of_the_value_are_errors() {
        let mut b = Vec::new();
        EntryRef {
            key: b"key",
            value: Some(b"value"),
            seq: 300,
        }
        .encode(&mut b);
        let bytes = Bytes::from(b);
        // The tag, a 2-byte sequence number, the key.
        let value_at = 1 + 2 + 3;
        for end in 0..value_at {
            assert!(decode_entry(&bytes, 0, end).is_err(), "cut at {end}");
        }
        // A put's value runs to its slot's end: the block's offsets, under
        // its checksum, say where that is.
        for end in value_at..=bytes.len() {
            let e = decode_entry(&bytes, 0, end).unwrap();
            assert_eq!(e.value.as_deref(), Some(&b"value"[..end - value_at]));
        }
    }

    /// Pieces of format version 1 store a put's value length: still read,
    /// and a span that does not match it is an error.
    #[test]
    fn a_version_1_put_is_read_and_checked_against_its_length() {
        let mut b = vec![KIND_PUT_WITH_LENGTH as u8];
        b.put_varint(300);
        b.put_varint(3);
        b.put_varint(5);
        b.extend_from_slice(b"keyvalue");
        let bytes = Bytes::from(b);
        let e = decode_entry(&bytes, 0, bytes.len()).unwrap();
        assert_eq!(
            (&e.key[..], e.value.as_deref(), e.seq),
            (&b"key"[..], Some(&b"value"[..]), 300)
        );
        for end in 0..bytes.len() {
            assert!(decode_entry(&bytes, 0, end).is_err(), "cut at {end}");
        }
    }

    /// Pieces of format version 2 store a kind byte, then the sequence
    /// number and the key's length: still read.
    #[test]
    fn version_2_puts_and_tombstones_are_read() {
        for (kind, value) in [(KIND_PUT, Some(&b"value"[..])), (KIND_DELETE, None)] {
            let mut b = vec![kind as u8];
            b.put_varint(300);
            b.put_varint(3);
            b.extend_from_slice(b"key");
            b.extend_from_slice(value.unwrap_or_default());
            let bytes = Bytes::from(b);
            let e = decode_entry(&bytes, 0, bytes.len()).unwrap();
            assert_eq!(
                (&e.key[..], e.value.as_deref(), e.seq),
                (&b"key"[..], value, 300)
            );
        }
        // A tombstone with bytes after its key.
        let mut b = vec![KIND_DELETE as u8, 1, 3];
        b.extend_from_slice(b"keyextra");
        let bytes = Bytes::from(b);
        assert!(decode_entry(&bytes, 0, bytes.len()).is_err());
    }

    /// The tag carries the key's length and the tombstone: a key of up to
    /// 61 bytes (62 for a put) takes one byte of header beside its
    /// sequence number, and tags that promise more key than the slot holds
    /// are errors.
    #[test]
    fn a_version_3_tag_holds_the_key_length_and_the_tombstone() {
        let cases = [
            (0, false, 1),
            (61, true, 1),
            (62, false, 1),
            (62, true, 2),
            (63, false, 2),
        ];
        for (len, tombstone, tag_bytes) in cases {
            let key = vec![b'k'; len];
            let e = EntryRef {
                key: &key,
                value: (!tombstone).then_some(&b"v"[..]),
                seq: 5,
            };
            let mut b = Vec::new();
            e.encode(&mut b);
            assert_eq!(b.len(), tag_bytes + 1 + len + usize::from(!tombstone));
            let bytes = Bytes::from(b);
            let d = decode_entry(&bytes, 0, bytes.len()).unwrap();
            assert_eq!((&d.key[..], d.value.as_deref()), (e.key, e.value));
        }
        let mut long = Vec::new();
        long.put_varint(TAG_KEYED + (10 << 1));
        long.put_varint(1);
        long.extend_from_slice(b"short");
        let bytes = Bytes::from(long);
        assert!(decode_entry(&bytes, 0, bytes.len()).is_err());
    }
}
