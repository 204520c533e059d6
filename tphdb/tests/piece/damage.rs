//! Pieces that are damaged or hostile: every corruption is found or
//! harmless, truncated files never open, checksummed nonsense fails
//! cleanly.

use super::*;

/// A key-prefix section is refused in a piece of a format before 5 (whose
/// readers would cut its keys short), and a prefix the keys do not have
/// is corruption that a whole-piece check finds.
#[test]
fn a_key_prefix_section_is_checked() {
    let fs = MemFs::new();
    let mut rng = fastrand::Rng::with_seed(13);
    let model: Model = random_model(&mut rng, 300, 12, 40)
        .into_iter()
        .map(|(k, v)| ([&b"prefix/"[..], &k].concat(), v))
        .collect();
    let path = PathBuf::from("/p.ph");
    write_piece(&fs, &path, &refs(&model), &PieceOptions::default()).unwrap();
    let good = fs.read_file(&path).unwrap();
    let n = good.len();
    let mut old = good.clone();
    // The footer's version, at 16 bytes into it; no section 99 to edit,
    // only checksums to recompute.
    old[n - 16..n - 12].copy_from_slice(&4u32.to_le_bytes());
    reseal_section(&mut old, 99, |_| {});
    fs.write_file(&path, old);
    let err = PieceReader::open(&fs, &path, ReadMode::Pread).unwrap_err();
    assert!(err.is_corruption(), "{err}");
    assert!(err.to_string().contains("key prefix"), "{err}");

    let mut other = good.clone();
    reseal_section(&mut other, 8, |s| s[0] = b'q');
    fs.write_file(&path, other);
    let r = PieceReader::open(&fs, &path, ReadMode::Pread).unwrap();
    assert_eq!(r.key_prefix(), b"qrefix/");
    for k in model.keys() {
        assert!(r.get(k).unwrap().is_none());
    }
    let err = r.verify().unwrap_err();
    assert!(err.is_corruption(), "{err}");
}

/// A key-length section (entries without tags) is refused in a piece of a
/// format before 6 and where it does not fit the properties; sequence
/// numbers whose range the properties give wrong are corruption that an
/// entry's read or a whole-piece check finds, never another entry.
#[test]
fn a_key_length_section_and_the_sequence_range_are_checked() {
    let fs = MemFs::new();
    let mut rng = fastrand::Rng::with_seed(14);
    let model: Model = (0..300)
        .map(|i| {
            let key: Vec<u8> = (0..16).map(|_| rng.u8(..)).collect();
            (key, (Some(vec![i as u8; 40]), 1_000 + i * 250))
        })
        .collect();
    let path = PathBuf::from("/p.ph");
    write_piece(&fs, &path, &refs(&model), &PieceOptions::default()).unwrap();
    let good = fs.read_file(&path).unwrap();
    let open = |bytes: Vec<u8>| {
        fs.write_file(&path, bytes);
        PieceReader::open(&fs, &path, ReadMode::Pread)
    };
    let n = good.len();
    let mut old = good.clone();
    old[n - 16..n - 12].copy_from_slice(&5u32.to_le_bytes());
    reseal_section(&mut old, 99, |_| {});
    let err = open(old).unwrap_err();
    assert!(err.to_string().contains("key length"), "{err}");
    for len in [15u32, 17, 0, u32::MAX] {
        let mut bad = good.clone();
        reseal_section(&mut bad, 9, |s| s.copy_from_slice(&len.to_le_bytes()));
        let err = open(bad).unwrap_err();
        assert!(
            err.is_corruption() && err.to_string().contains("key length"),
            "{err}"
        );
    }
    // Properties: min_seq at byte 56, max_seq at 64.
    let mut inverted = good.clone();
    reseal_section(&mut inverted, 1, |s| {
        s[64..72].copy_from_slice(&999u64.to_le_bytes())
    });
    let err = open(inverted).unwrap_err();
    assert!(err.to_string().contains("sequence numbers"), "{err}");
    // A largest number below the entries' (of the same width, three
    // bytes, then of one): the entries past it are errors, or all misses
    // once the width is wrong, and the whole-piece check finds the damage.
    for max in [70_000, 1_200] {
        let mut lowered = good.clone();
        reseal_section(&mut lowered, 1, |s| {
            s[64..72].copy_from_slice(&(max as u64).to_le_bytes())
        });
        let r = open(lowered).unwrap();
        for (k, (v, seq)) in &model {
            match r.get(k) {
                Ok(Some(e)) => assert_eq!((e.value.as_deref(), e.seq), (v.as_deref(), *seq)),
                Ok(None) | Err(_) => assert!(*seq > max as u64 || max == 1_200),
            }
        }
        assert!(r.verify().unwrap_err().is_corruption());
    }
}

/// Every single-byte corruption of a small piece: opening fails, or every
/// lookup and scan gives an error or the right answer — never a wrong one.
#[test]
fn every_single_byte_corruption_is_detected() {
    let fs = MemFs::new();
    let mut rng = fastrand::Rng::with_seed(6);
    let model = random_model(&mut rng, 40, 12, 40);
    let path = PathBuf::from("/small.ph");
    for (compression, align_blocks) in [
        (Compression::None, false),
        (Compression::None, true),
        (Compression::Lz4, false),
    ] {
        let opts = PieceOptions {
            compression,
            page_size: 256,
            align_blocks,
            ..PieceOptions::default()
        };
        write_piece(&fs, &path, &refs(&model), &opts).unwrap();
        let good = fs.read_file(&path).unwrap();
        let mut opened = 0;
        for i in 0..good.len() {
            for mask in [0x01u8, 0x80, 0xff] {
                let mut bad = good.clone();
                bad[i] ^= mask;
                fs.write_file(&path, bad);
                let Ok(r) = PieceReader::open(&fs, &path, ReadMode::Pread) else {
                    continue;
                };
                opened += 1;
                for (k, v) in &model {
                    if let Ok(got) = r.get(k) {
                        assert_entry(got, k, v);
                    }
                }
                assert!(!matches!(r.get(b"no such key"), Ok(Some(_))));
                for e in r.iter().flatten() {
                    let want = &model[&e.key[..]];
                    assert_eq!((e.value.as_deref(), e.seq), (want.0.as_deref(), want.1));
                }
                if let Ok(mut c) = r.sorted_cursor() {
                    if c.seek_to_first().is_ok() {
                        while let Some(k) = c.key() {
                            assert!(model.contains_key(k), "a key that was never written");
                            if let Ok(Some(e)) = c.load_entry() {
                                assert_eq!(model[&e.key[..]].1, e.seq);
                            }
                            if c.move_next().is_err() {
                                break;
                            }
                        }
                    }
                }
            }
        }
        // Data-block corruption leaves the piece openable: those cases ran.
        assert!(opened > 0);
    }
}

/// Truncated files never open.
#[test]
fn every_truncation_fails_to_open() {
    let fs = MemFs::new();
    let mut rng = fastrand::Rng::with_seed(7);
    let model = random_model(&mut rng, 30, 12, 40);
    let path = PathBuf::from("/t.ph");
    write_piece(&fs, &path, &refs(&model), &PieceOptions::default()).unwrap();
    let good = fs.read_file(&path).unwrap();
    for len in 0..good.len() {
        fs.write_file(&path, good[..len].to_vec());
        assert!(
            PieceReader::open(&fs, &path, ReadMode::Pread).is_err(),
            "length {len}"
        );
    }
}

/// Rewrites section `id` of a piece with `edit` and recomputes every checksum
/// that covers it, so that the corruption reaches the structural checks.
fn reseal_section(file: &mut [u8], id: u32, edit: impl Fn(&mut [u8])) {
    let n = file.len();
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let dir_offset = u64_at(file, n - 32) as usize;
    let dir_len = u32_at(file, n - 24) as usize;
    let count = u32_at(file, dir_offset) as usize;
    for e in 0..count {
        let at = dir_offset + 4 + e * 24;
        if u32_at(file, at) == id {
            let (off, len) = (
                u64_at(file, at + 4) as usize,
                u64_at(file, at + 12) as usize,
            );
            edit(&mut file[off..off + len]);
            let crc = crc32c::crc32c(&file[off..off + len]);
            file[at + 20..at + 24].copy_from_slice(&crc.to_le_bytes());
        }
    }
    let dir_crc = crc32c::crc32c(&file[dir_offset..dir_offset + dir_len]);
    file[n - 20..n - 16].copy_from_slice(&dir_crc.to_le_bytes());
    let footer_crc = crc32c::crc32c_append(crc32c::crc32c(&file[n - 32..n - 12]), &file[n - 8..]);
    file[n - 12..n - 8].copy_from_slice(&footer_crc.to_le_bytes());
}

/// Regression: properties are trusted for sizes only after cross-checks, so a
/// file with valid checksums but absurd counts fails cleanly instead of
/// allocating gigabytes.
#[test]
fn checksummed_but_absurd_properties_fail_cleanly() {
    let fs = MemFs::new();
    let mut rng = fastrand::Rng::with_seed(8);
    let model = random_model(&mut rng, 500, 12, 40);
    let path = PathBuf::from("/absurd.ph");
    write_piece(&fs, &path, &refs(&model), &PieceOptions::default()).unwrap();
    let good = fs.read_file(&path).unwrap();
    // slots_per_block at byte 32, block_count at 40, table_size at 16.
    let edits: [(usize, Vec<u8>); 4] = [
        (32, u32::MAX.to_le_bytes().to_vec()),
        (40, 1u64.to_le_bytes().to_vec()),
        (16, u64::MAX.to_le_bytes().to_vec()),
        (96, u64::MAX.to_le_bytes().to_vec()),
    ];
    for (at, bytes) in &edits {
        let mut bad = good.clone();
        reseal_section(&mut bad, 1, |s| {
            s[*at..*at + bytes.len()].copy_from_slice(bytes)
        });
        fs.write_file(&path, bad);
        assert!(
            PieceReader::open(&fs, &path, ReadMode::Pread).is_err(),
            "edit at {at}"
        );
    }
    let mut both = good.clone();
    reseal_section(&mut both, 1, |s| {
        s[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
        s[40..48].copy_from_slice(&1u64.to_le_bytes());
    });
    fs.write_file(&path, both);
    assert!(PieceReader::open(&fs, &path, ReadMode::Pread).is_err());
    // The resealing helper itself is sound: an identity edit still opens.
    let mut same = good.clone();
    reseal_section(&mut same, 1, |_| {});
    fs.write_file(&path, same);
    check_piece(&fs, &path, &model, ReadMode::Pread);
}

/// Regression: a crafted PtrHash piece with a valid checksum could make the
/// epserde loader misbehave, and every reader loaded PtrHash pieces. They
/// are now read only when the caller asks for PtrHash.
#[test]
fn ptrhash_pieces_are_read_only_when_asked_for() {
    let fs = MemFs::new();
    let path = Path::new("/p.ph");
    let model = random_model(&mut fastrand::Rng::with_seed(3), 100, 20, 30);
    let opts = PieceOptions {
        phf_kind: PhfKind::PtrHash,
        ..PieceOptions::default()
    };
    write_piece(&fs, path, &refs(&model), &opts).unwrap();
    let e = PieceReader::open(&fs, path, ReadMode::Pread).unwrap_err();
    assert!(matches!(e, tphdb::Error::Unsupported(_)), "{e}");
    check_piece(&fs, path, &model, ReadMode::Pread);
}
