//! How a piece lays its entries out around each key and value: the tag,
//! the sequence number, the key prefix the piece leaves out; encoding and
//! decoding of every format's entries.

use bytes::Bytes;

use super::entry::{Entry, EntryRef};
use crate::error::{Error, Result};
use crate::util::codec::{varint_len, Decoder, PutExt};

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

/// The tag of an entry of a key of `key` bytes ([`TAG_KEYED`]).
pub(super) fn entry_tag(key: usize, tombstone: bool) -> u64 {
    TAG_KEYED + ((key as u64) << 1 | u64::from(tombstone))
}

/// How a piece's entries store their sequence numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SeqCoding {
    /// A varint (formats 1 to 5).
    Varint,
    /// `base` plus `bytes` little-endian bytes (format 6): `base` and
    /// `max` are the piece's smallest and largest numbers, and `bytes`
    /// the fewest that hold their difference (0 when they are equal).
    Fixed { base: u64, max: u64, bytes: u8 },
}

impl SeqCoding {
    /// The fixed coding of numbers from `min` to `max` (`min <= max`).
    pub(crate) fn fixed(min: u64, max: u64) -> SeqCoding {
        let span = max.saturating_sub(min);
        SeqCoding::Fixed {
            base: min,
            max,
            bytes: (u64::BITS - span.leading_zeros()).div_ceil(8) as u8,
        }
    }

    fn len(self, seq: u64) -> usize {
        match self {
            SeqCoding::Varint => varint_len(seq),
            SeqCoding::Fixed { bytes, .. } => bytes as usize,
        }
    }

    /// Bytes of every fixed number; 0 for varints.
    pub(crate) fn bytes(self) -> usize {
        match self {
            SeqCoding::Varint => 0,
            SeqCoding::Fixed { bytes, .. } => bytes as usize,
        }
    }
}

/// How a piece lays out its entries around each key and value: what the
/// key starts with, how sequence numbers are coded, and whether entries
/// carry a tag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EntryLayout {
    /// What every key starts with, left out of the entries (format 5).
    pub(crate) key_prefix: Bytes,
    pub(crate) seq: SeqCoding,
    /// `Some(n)` when every entry is a put whose key is `n` bytes as
    /// stored (without the prefix): entries then have no tag (format 6).
    pub(crate) stored_key_len: Option<u32>,
}

impl EntryLayout {
    /// Entries as pieces before format 5 store them: a tag, a varint
    /// sequence number, the whole key.
    pub(crate) const PLAIN: EntryLayout = EntryLayout {
        key_prefix: Bytes::new(),
        seq: SeqCoding::Varint,
        stored_key_len: None,
    };

    /// Bytes the entry `e` (its key as stored) takes.
    pub(crate) fn encoded_len(&self, e: &EntryRef<'_>) -> usize {
        self.len_of(e.key.len(), e.seq, e.value.map(<[u8]>::len))
    }

    /// Bytes an entry of a key of `key` bytes (as stored), `seq` and a
    /// value of `value` bytes (`None`: a tombstone) takes.
    pub(crate) fn len_of(&self, key: usize, seq: u64, value: Option<usize>) -> usize {
        let tag = match self.stored_key_len {
            Some(_) => 0,
            None => varint_len(entry_tag(key, value.is_none())),
        };
        tag + self.seq.len(seq) + key + value.unwrap_or(0)
    }

    /// Whether `e` (its key as stored) can be laid out so: its sequence
    /// number in the piece's range, and with no tag, a put whose key is of
    /// the piece's length.
    pub(crate) fn fits(&self, e: &EntryRef<'_>) -> bool {
        let seq_fits = match self.seq {
            SeqCoding::Varint => true,
            SeqCoding::Fixed { base, max, .. } => (base..=max).contains(&e.seq),
        };
        seq_fits
            && self
                .stored_key_len
                .is_none_or(|n| n as usize == e.key.len() && e.value.is_some())
    }

    /// Appends `e` (its key as stored, without the prefix) to `out`; `e`
    /// [fits](EntryLayout::fits).
    pub(crate) fn encode(&self, e: &EntryRef<'_>, out: &mut Vec<u8>) {
        debug_assert!(self.fits(e));
        if self.stored_key_len.is_none() {
            out.put_varint(entry_tag(e.key.len(), e.value.is_none()));
        }
        match self.seq {
            SeqCoding::Varint => out.put_varint(e.seq),
            SeqCoding::Fixed { base, bytes, .. } => {
                let n = e.seq - base;
                out.extend_from_slice(&n.to_le_bytes()[..bytes as usize]);
            }
        }
        out.extend_from_slice(e.key);
        if let Some(v) = e.value {
            out.extend_from_slice(v);
        }
    }

    /// Decodes the entry that spans exactly `block[start..end]`, its key
    /// as stored (without the prefix).
    pub(crate) fn decode_ref<'b>(
        &self,
        block: &'b [u8],
        start: usize,
        end: usize,
    ) -> Result<EntryRef<'b>> {
        let s = &block[start..end];
        let mut d = Decoder::new(s, "entry");
        let tag = match self.stored_key_len {
            Some(_) => None,
            None => Some(d.varint()?),
        };
        let seq = |d: &mut Decoder<'_>| match self.seq {
            SeqCoding::Varint => d.varint(),
            SeqCoding::Fixed { base, max, bytes } => {
                let mut n = [0; 8];
                n[..bytes as usize].copy_from_slice(d.bytes(bytes as usize)?);
                match base.checked_add(u64::from_le_bytes(n)) {
                    Some(seq) if seq <= max => Ok(seq),
                    _ => Err(Error::corruption(
                        "entry sequence number",
                        format!("{base} to {max}"),
                        format!("{base} + {}", u64::from_le_bytes(n)),
                    )),
                }
            }
        };
        let (seq, key_len, put) = match tag {
            None => (seq(&mut d)?, self.stored_key_len.unwrap_or(0) as u64, true),
            Some(KIND_PUT_WITH_LENGTH | KIND_PUT) => (seq(&mut d)?, d.varint()?, true),
            Some(KIND_DELETE) => (seq(&mut d)?, d.varint()?, false),
            Some(tag) => (
                seq(&mut d)?,
                (tag - TAG_KEYED) >> 1,
                (tag - TAG_KEYED) & 1 == 0,
            ),
        };
        let value_len = match tag {
            Some(KIND_PUT_WITH_LENGTH) => Some(d.varint()?),
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
}

/// Decodes the entry that spans exactly `block[start..end]` in a piece of
/// `layout`, its key as stored (without the prefix).
pub(crate) fn decode_entry(
    layout: &EntryLayout,
    block: &Bytes,
    start: usize,
    end: usize,
) -> Result<Entry> {
    let e = layout.decode_ref(block, start, end)?;
    Ok(Entry {
        key: block.slice_ref(e.key),
        value: e.value.map(|v| block.slice_ref(v)),
        seq: e.seq,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::piece::entry::EntryShape;

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
            EntryLayout::PLAIN.encode(&e, &mut b);
            assert_eq!(b.len() - 3, e.encoded_len());
            let bytes = Bytes::from(b);
            let d = decode_entry(&EntryLayout::PLAIN, &bytes, 3, bytes.len()).unwrap();
            assert_eq!(&d.key[..], e.key);
            assert_eq!(d.value.as_deref(), e.value);
            assert_eq!(d.seq, e.seq);
        }
    }

    #[test]
    fn truncations_short_of_the_value_are_errors() {
        let mut b = Vec::new();
        let e = EntryRef {
            key: b"key",
            value: Some(b"value"),
            seq: 300,
        };
        EntryLayout::PLAIN.encode(&e, &mut b);
        let bytes = Bytes::from(b);
        // The tag, a 2-byte sequence number, the key.
        let value_at = 1 + 2 + 3;
        for end in 0..value_at {
            assert!(
                decode_entry(&EntryLayout::PLAIN, &bytes, 0, end).is_err(),
                "cut at {end}"
            );
        }
        // A put's value runs to its slot's end: the block's offsets, under
        // its checksum, say where that is.
        for end in value_at..=bytes.len() {
            let e = decode_entry(&EntryLayout::PLAIN, &bytes, 0, end).unwrap();
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
        let e = decode_entry(&EntryLayout::PLAIN, &bytes, 0, bytes.len()).unwrap();
        assert_eq!(
            (&e.key[..], e.value.as_deref(), e.seq),
            (&b"key"[..], Some(&b"value"[..]), 300)
        );
        for end in 0..bytes.len() {
            assert!(
                decode_entry(&EntryLayout::PLAIN, &bytes, 0, end).is_err(),
                "cut at {end}"
            );
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
            let e = decode_entry(&EntryLayout::PLAIN, &bytes, 0, bytes.len()).unwrap();
            assert_eq!(
                (&e.key[..], e.value.as_deref(), e.seq),
                (&b"key"[..], value, 300)
            );
        }
        // A tombstone with bytes after its key.
        let mut b = vec![KIND_DELETE as u8, 1, 3];
        b.extend_from_slice(b"keyextra");
        let bytes = Bytes::from(b);
        assert!(decode_entry(&EntryLayout::PLAIN, &bytes, 0, bytes.len()).is_err());
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
            EntryLayout::PLAIN.encode(&e, &mut b);
            assert_eq!(b.len(), tag_bytes + 1 + len + usize::from(!tombstone));
            let bytes = Bytes::from(b);
            let d = decode_entry(&EntryLayout::PLAIN, &bytes, 0, bytes.len()).unwrap();
            assert_eq!((&d.key[..], d.value.as_deref()), (e.key, e.value));
        }
        let mut long = Vec::new();
        long.put_varint(TAG_KEYED + (10 << 1));
        long.put_varint(1);
        long.extend_from_slice(b"short");
        let bytes = Bytes::from(long);
        assert!(decode_entry(&EntryLayout::PLAIN, &bytes, 0, bytes.len()).is_err());
    }

    fn fixed(min: u64, max: u64, stored_key_len: Option<u32>) -> EntryLayout {
        EntryLayout {
            seq: SeqCoding::fixed(min, max),
            stored_key_len,
            ..EntryLayout::PLAIN
        }
    }

    /// Format 6 stores a sequence number as its distance from the piece's
    /// smallest, in the fewest bytes that hold the piece's span: none when
    /// all are equal, three for a span of 2^24 - 1 where a varint of a
    /// number past 2^21 takes four.
    #[test]
    fn fixed_sequence_numbers_take_the_bytes_their_span_needs() {
        let width = |min, max| match SeqCoding::fixed(min, max) {
            SeqCoding::Fixed { bytes, .. } => bytes,
            SeqCoding::Varint => unreachable!(),
        };
        assert_eq!(width(5, 5), 0);
        assert_eq!(width(0, 255), 1);
        assert_eq!(width(0, 256), 2);
        assert_eq!(width(1 << 40, (1 << 40) + (1 << 24) - 1), 3);
        assert_eq!(width(0, u64::MAX), 8);
        for (min, max) in [
            (7, 7),
            (0, 255),
            (1 << 40, (1 << 40) + (1 << 24) - 1),
            (0, u64::MAX),
        ] {
            for tombstone in [false, true] {
                let layout = fixed(min, max, None);
                for seq in [min, max, min + (max - min) / 3] {
                    let e = EntryRef {
                        key: b"key",
                        value: (!tombstone).then_some(&b"value"[..]),
                        seq,
                    };
                    let mut b = Vec::new();
                    layout.encode(&e, &mut b);
                    assert_eq!(b.len(), layout.encoded_len(&e));
                    assert_eq!(
                        b.len(),
                        1 + width(min, max) as usize + 3 + if tombstone { 0 } else { 5 }
                    );
                    let bytes = Bytes::from(b);
                    let d = decode_entry(&layout, &bytes, 0, bytes.len()).unwrap();
                    assert_eq!(
                        (&d.key[..], d.value.as_deref(), d.seq),
                        (e.key, e.value, seq)
                    );
                }
            }
        }
        // A number past the piece's largest, under a valid checksum, is an
        // error, not a number.
        let mut b = Vec::new();
        fixed(10, 300, None).encode(
            &EntryRef {
                key: b"k",
                value: None,
                seq: 300,
            },
            &mut b,
        );
        let bytes = Bytes::from(b);
        let err = decode_entry(&fixed(10, 299, None), &bytes, 0, bytes.len()).unwrap_err();
        assert!(err.is_corruption(), "{err}");
        let near_max = fixed(u64::MAX - 1, u64::MAX, None);
        let bytes = Bytes::from(vec![3 + (1 << 1) + 1, 0xff, b'k']);
        assert!(decode_entry(&near_max, &bytes, 0, bytes.len()).is_err());
    }

    /// A piece of puts whose keys are all of one length stores no tag: an
    /// entry is its sequence number, key and value, and one that ends
    /// within its key is an error.
    #[test]
    fn an_entry_without_a_tag_is_its_sequence_number_key_and_value() {
        for (min, max, seq_bytes) in [(9, 9, 0), (9, 9 + 70_000, 3)] {
            let layout = fixed(min, max, Some(3));
            let e = EntryRef {
                key: b"key",
                value: Some(b"value"),
                seq: max,
            };
            let mut b = Vec::new();
            layout.encode(&e, &mut b);
            assert_eq!(b.len(), seq_bytes + 8);
            assert_eq!(b.len(), layout.encoded_len(&e));
            assert!(b.ends_with(b"keyvalue"));
            let bytes = Bytes::from(b);
            for end in 0..seq_bytes + 3 {
                assert!(
                    decode_entry(&layout, &bytes, 0, end).is_err(),
                    "cut at {end}"
                );
            }
            for end in seq_bytes + 3..=bytes.len() {
                let d = decode_entry(&layout, &bytes, 0, end).unwrap();
                assert_eq!((&d.key[..], d.seq), (&b"key"[..], max));
                assert_eq!(d.value.as_deref(), Some(&b"value"[..end - seq_bytes - 3]));
            }
        }
    }
}
