//! Blocks: round trips, length tables of every shape, and hostile bytes.

use super::*;

fn slots() -> Vec<Option<EntryRef<'static>>> {
    vec![
        Some(EntryRef {
            key: b"a",
            value: Some(b"1"),
            seq: 1,
        }),
        None,
        Some(EntryRef {
            key: b"b",
            value: None,
            seq: 2,
        }),
        Some(EntryRef {
            key: b"c",
            value: Some(&[7; 100]),
            seq: 3,
        }),
    ]
}

/// A block of a piece with a key prefix stores its keys without it: each
/// way of reading an entry puts it back, and a get's compares the whole
/// key without putting it together.
#[test]
fn entries_of_a_prefixed_piece_read_back_with_their_prefix() {
    let (out, raw) = encoded(&slots());
    let b = Block::decode(Bytes::from(out), 4, raw).unwrap();
    let prefix = b"user:";
    let layout = EntryLayout {
        key_prefix: Bytes::from_static(prefix),
        ..EntryLayout::PLAIN
    };
    let mut key = Vec::new();
    for (i, s) in slots().iter().enumerate() {
        let whole = s.map(|e| [&prefix[..], e.key].concat());
        let got = b.entry(i, &layout).unwrap();
        assert_eq!(got.as_ref().map(|e| e.key.to_vec()), whole);
        let got = b.entry_ref(i, &layout, &mut key).unwrap();
        assert_eq!(got.map(|e| e.key.to_vec()), whole);
        if let Some(whole) = &whole {
            let got = b.entry_of(i, &layout, whole).unwrap().unwrap();
            assert_eq!((&got.key[..], got.seq), (&whole[..], s.unwrap().seq));
            assert_eq!(got.value.as_deref(), s.unwrap().value);
            // The suffix alone, the prefix alone, another prefix.
            for other in [&whole[prefix.len()..], prefix, b"usex:a"] {
                assert!(b.entry_of(i, &layout, other).unwrap().is_none());
            }
        }
    }
}

#[test]
fn round_trip_with_and_without_compression() {
    for c in [Compression::None, Compression::Lz4] {
        let mut out = Vec::new();
        let raw =
            encode_block(&slots(), &EntryLayout::PLAIN, c, &mut Vec::new(), &mut out).unwrap();
        for pad in [0, 3, 1000] {
            let mut block = out.clone();
            if pad > 0 {
                pad_block(&mut block, pad);
                assert_eq!(block.len(), out.len() + pad);
            }
            let b = Block::decode(Bytes::from(block), 4, raw).unwrap();
            for (i, s) in slots().iter().enumerate() {
                let got = b.entry(i, &EntryLayout::PLAIN).unwrap();
                assert_eq!(got.as_ref().map(|e| &e.key[..]), s.map(|e| e.key));
                assert_eq!(
                    got.as_ref().and_then(|e| e.value.as_deref()),
                    s.and_then(|e| e.value)
                );
            }
        }
    }
}

/// Slots of `n` puts of `value_len`-byte values, every `gap`th empty.
fn sized(
    n: usize,
    value_len: impl Fn(usize) -> usize,
    gap: usize,
) -> Vec<Option<EntryRef<'static>>> {
    static VALUE: [u8; 70_000] = [9; 70_000];
    (0..n)
        .map(|i| {
            (gap == 0 || i % gap != gap - 1).then(|| EntryRef {
                key: b"key",
                value: Some(&VALUE[..value_len(i)]),
                seq: 5,
            })
        })
        .collect()
}

/// The encoded block of `slots` and its raw size.
fn encoded(slots: &[Option<EntryRef<'_>>]) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let raw = encode_block(
        slots,
        &EntryLayout::PLAIN,
        Compression::None,
        &mut Vec::new(),
        &mut out,
    )
    .unwrap();
    (out, raw)
}

fn assert_reads_back(slots: &[Option<EntryRef<'_>>]) -> Block {
    let (out, raw) = encoded(slots);
    let b = Block::decode(Bytes::from(out), slots.len(), raw).unwrap();
    for (i, s) in slots.iter().enumerate() {
        let mut key = Vec::new();
        let got = b.entry_ref(i, &EntryLayout::PLAIN, &mut key).unwrap();
        assert_eq!(
            got.map(|e| (e.key, e.value)),
            s.map(|e| (e.key, e.value)),
            "slot {i}"
        );
    }
    b
}

#[test]
fn a_block_of_one_entry_size_has_a_three_byte_length_table() {
    let b = assert_reads_back(&sized(8, |_| 128, 0));
    // A one-byte width and a base of two varint bytes (132 bytes an
    // entry), against nine 2-byte offsets.
    assert_eq!(b.entries_start, 3);
    assert!(matches!(
        b.table,
        SlotTable::Lengths {
            width: 0,
            empty: false,
            ..
        }
    ));
}

#[test]
fn length_tables_of_every_shape_read_back() {
    for gap in [0, 1, 2, 3, 8] {
        for n in [1, 2, 7, 8, 9, 33, 64] {
            assert_reads_back(&sized(n, |i| 100 + i % 3, gap));
            assert_reads_back(&sized(n, |i| i * 7, gap));
            assert_reads_back(&sized(n, |i| 1000 * (i % 2), gap));
        }
    }
    // Residuals of 16 bits and more, and an entry past 64 KiB.
    let b = assert_reads_back(&sized(5, |i| [0, 65_000, 3, 69_000, 10][i], 0));
    assert!(matches!(b.table, SlotTable::Lengths { width: 17, .. }));
}

#[test]
fn a_block_of_more_than_64_slots_keeps_its_offsets() {
    let b = assert_reads_back(&sized(65, |i| 10 + i % 4, 5));
    assert!(matches!(b.table, SlotTable::Offsets { wide: false }));
    let b = assert_reads_back(&sized(70, |i| if i == 3 { 66_000 } else { 10 }, 0));
    assert!(matches!(b.table, SlotTable::Offsets { wide: true }));
}

/// `raw` as an uncompressed block with its flags and checksum.
fn sealed(raw: &[u8], flags: u8) -> Bytes {
    let mut b = raw.to_vec();
    b.push(flags);
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    Bytes::from(b)
}

#[test]
fn a_checksummed_length_table_that_does_not_fit_is_an_error() {
    let entry = |out: &mut Vec<u8>| {
        let e = EntryRef {
            key: b"k",
            value: Some(b"v"),
            seq: 1,
        };
        EntryLayout::PLAIN.encode(&e, out)
    };
    let mut one = Vec::new();
    entry(&mut one);
    let len = one.len() as u8;
    // Two slots of `len` bytes, then the same with each way to be wrong:
    // lengths that add up to more or less, a width past 32, an unknown
    // width bit, more slots than a length table may have, both tables.
    let mut good = vec![len, 0];
    entry(&mut good);
    entry(&mut good);
    assert!(Block::decode(sealed(&good, FLAG_LENGTHS), 2, 100).is_ok());
    let mut bad = vec![
        (vec![len + 1, 0], FLAG_LENGTHS, 2),
        (vec![len - 1, 0], FLAG_LENGTHS, 2),
        (vec![len, 33, 0, 0, 0, 0, 0, 0, 0, 0], FLAG_LENGTHS, 2),
        (vec![len, 0x40], FLAG_LENGTHS, 2),
        (vec![len, 0], FLAG_LENGTHS, 65),
        (vec![len, 0], FLAG_LENGTHS | FLAG_WIDE, 2),
        (vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0], FLAG_LENGTHS, 2),
    ];
    for (table, flags, count) in &mut bad {
        entry(table);
        entry(table);
        let got = Block::decode(sealed(table, *flags), *count, 100);
        assert!(
            matches!(got, Err(Error::Corruption { .. })),
            "{table:?}: {got:?}"
        );
    }
}

#[test]
fn every_corruption_and_truncation_is_an_error() {
    for c in [Compression::None, Compression::Lz4] {
        let mut out = Vec::new();
        let raw =
            encode_block(&slots(), &EntryLayout::PLAIN, c, &mut Vec::new(), &mut out).unwrap();
        pad_block(&mut out, 40);
        for i in 0..out.len() {
            let mut b = out.clone();
            b[i] ^= 0x20;
            assert!(Block::decode(Bytes::from(b), 4, raw).is_err());
            assert!(Block::decode(Bytes::copy_from_slice(&out[..i]), 4, raw).is_err());
        }
    }
}
