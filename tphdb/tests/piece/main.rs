//! Piece files end to end: write, open with every read path, get, iterate.

mod damage;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;

use proptest::prelude::*;
use tphdb::fs::{mapped_resident_bytes, CountingFs, FileSystem, MemFs, PosixFs, ReadMode};
use tphdb::hash::key_hash;
use tphdb::phf::PhfKind;
use tphdb::piece::{
    write_piece, write_piece_hashed, Compression, Entry, EntryRef, PieceOptions, PieceReader,
};

/// Owned entries: key -> (value or tombstone, seq).
type Model = BTreeMap<Vec<u8>, (Option<Vec<u8>>, u64)>;

fn refs(model: &Model) -> Vec<EntryRef<'_>> {
    model
        .iter()
        .map(|(k, (v, seq))| EntryRef {
            key: k,
            value: v.as_deref(),
            seq: *seq,
        })
        .collect()
}

fn random_model(rng: &mut fastrand::Rng, n: usize, max_key: usize, max_value: usize) -> Model {
    let mut m = Model::new();
    while m.len() < n {
        let key: Vec<u8> = (0..rng.usize(0..=max_key)).map(|_| rng.u8(..)).collect();
        let value = if rng.u8(..10) == 0 {
            None
        } else {
            Some((0..rng.usize(0..=max_value)).map(|_| rng.u8(..)).collect())
        };
        m.insert(key, (value, rng.u64(..1 << 40)));
    }
    m
}

fn tmp_dir() -> tempfile::TempDir {
    // Under the target directory: a real disk file system, where O_DIRECT works.
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

fn assert_entry(got: Option<Entry>, key: &[u8], want: &(Option<Vec<u8>>, u64)) {
    let got = got.unwrap_or_else(|| panic!("key {key:?} missing"));
    assert_eq!(&got.key[..], key);
    assert_eq!(got.value.as_deref(), want.0.as_deref());
    assert_eq!(got.seq, want.1);
}

/// Checks every way of reading `model` back from the piece at `path`.
fn check_piece(fs: &dyn FileSystem, path: &Path, model: &Model, mode: ReadMode) {
    let r = PieceReader::open_with(fs, path, mode, true).unwrap();
    assert_eq!(r.len(), model.len());
    for (k, v) in model {
        assert_entry(r.get(k).unwrap(), k, v);
    }
    let mut rng = fastrand::Rng::with_seed(9);
    for _ in 0..200 {
        let k: Vec<u8> = (0..rng.usize(0..24)).map(|_| rng.u8(..)).collect();
        if !model.contains_key(&k) {
            assert!(r.get(&k).unwrap().is_none());
        }
    }
    // Slot order: every entry exactly once.
    let mut seen = Model::new();
    for e in r.iter() {
        let e = e.unwrap();
        let v = (e.value.map(|v| v.to_vec()), e.seq);
        assert!(seen.insert(e.key.to_vec(), v).is_none());
    }
    assert_eq!(&seen, model);
    // Key order, forwards and backwards.
    let mut c = r.sorted_cursor().unwrap();
    c.seek_to_first().unwrap();
    for (k, v) in model {
        assert_eq!(c.key(), Some(&k[..]));
        assert_eq!(c.is_tombstone(), Some(v.0.is_none()));
        assert_entry(c.load_entry().unwrap(), k, v);
        c.move_next().unwrap();
    }
    assert!(!c.valid());
    c.seek_to_last().unwrap();
    for (k, _) in model.iter().rev() {
        assert_eq!(c.key(), Some(&k[..]));
        c.move_prev().unwrap();
    }
    assert!(!c.valid());
    // Hashes for rebuilding a global index.
    let mut hashes = r.key_hashes().unwrap();
    let mut expect: Vec<u64> = model.keys().map(|k| key_hash(k)).collect();
    hashes.sort_unstable();
    expect.sort_unstable();
    assert_eq!(hashes, expect);
}

#[test]
fn random_entry_sets_round_trip_on_every_read_path() {
    let dir = tmp_dir();
    let mut rng = fastrand::Rng::with_seed(1);
    for (i, n) in [0usize, 1, 2, 3, 100, 5000].into_iter().enumerate() {
        let model = random_model(&mut rng, n, 24, 300);
        for compression in [Compression::None, Compression::Lz4] {
            for phf_kind in [PhfKind::CpHash, PhfKind::PtrHash] {
                for align_blocks in [false, true] {
                    let path = dir.path().join(format!(
                        "{i}-{compression:?}-{phf_kind:?}-{align_blocks}.ph"
                    ));
                    let opts = PieceOptions {
                        compression,
                        phf_kind,
                        align_blocks,
                        ..PieceOptions::default()
                    };
                    write_piece(&PosixFs, &path, &refs(&model), &opts).unwrap();
                    for mode in [ReadMode::Mmap, ReadMode::Pread, ReadMode::Direct] {
                        check_piece(&PosixFs, &path, &model, mode);
                    }
                }
            }
        }
    }
}

#[test]
fn empty_keys_empty_values_binary_keys_and_tombstones() {
    let fs = MemFs::new();
    let mut model = Model::new();
    model.insert(vec![], (Some(vec![]), 1));
    model.insert(vec![0], (Some(b"zero".to_vec()), 2));
    model.insert(vec![0, 0, 0], (None, 3));
    model.insert(vec![0xff; 40], (Some(vec![]), 4));
    model.insert(b"\x00\xffbinary\n\r".to_vec(), (Some(vec![0; 10]), 5));
    let path = PathBuf::from("/p.ph");
    write_piece(&fs, &path, &refs(&model), &PieceOptions::default()).unwrap();
    check_piece(&fs, &path, &model, ReadMode::Pread);
    let props = PieceReader::open(&fs, &path, ReadMode::Pread)
        .unwrap()
        .properties()
        .clone();
    assert_eq!(props.tombstone_count, 1);
}

#[test]
fn values_of_several_mib() {
    let dir = tmp_dir();
    let mut rng = fastrand::Rng::with_seed(2);
    let mut model = random_model(&mut rng, 50, 16, 100);
    for i in 0..4u8 {
        let big: Vec<u8> = (0..(1 << 20) + i as usize * 777_777)
            .map(|_| rng.u8(..))
            .collect();
        model.insert(vec![b'b', i], (Some(big), 100 + i as u64));
    }
    for compression in [Compression::None, Compression::Lz4] {
        let path = dir.path().join(format!("big-{compression:?}.ph"));
        let opts = PieceOptions {
            compression,
            ..PieceOptions::default()
        };
        write_piece(&PosixFs, &path, &refs(&model), &opts).unwrap();
        for mode in [ReadMode::Mmap, ReadMode::Pread, ReadMode::Direct] {
            check_piece(&PosixFs, &path, &model, mode);
        }
    }
}

#[test]
fn a_present_key_get_is_exactly_one_read() {
    let dir = tmp_dir();
    let fs = CountingFs::new(PosixFs);
    let mut rng = fastrand::Rng::with_seed(3);
    let model = random_model(&mut rng, 20_000, 20, 128);
    let path = dir.path().join("count.ph");
    write_piece(&fs, &path, &refs(&model), &PieceOptions::default()).unwrap();
    for mode in [ReadMode::Mmap, ReadMode::Pread, ReadMode::Direct] {
        let r = PieceReader::open(&fs, &path, mode).unwrap();
        let (reads_before, _) = fs.counts().read_totals();
        for (k, v) in &model {
            let before = fs.counts().reads.load(Relaxed);
            assert_entry(r.get(k).unwrap(), k, v);
            assert_eq!(fs.counts().reads.load(Relaxed) - before, 1, "{mode:?}");
        }
        let (reads_after, _) = fs.counts().read_totals();
        assert_eq!(reads_after - reads_before, model.len() as u64);
    }
}

/// Keys that all start alike (db_bench's 16 decimal digits start with
/// eight zeros below 10^8 keys) are stored without what they share, once
/// in the piece: every read path gives the whole keys back, a get of a key
/// without the prefix reads nothing, and the data region is about the
/// prefix's bytes an entry smaller than when one key breaks the prefix.
#[test]
fn a_prefix_every_key_shares_is_stored_once() {
    let fs = CountingFs::new(MemFs::new());
    let mut rng = fastrand::Rng::with_seed(12);
    let prefix = b"user:0000";
    let model: Model = random_model(&mut rng, 2000, 12, 40)
        .into_iter()
        .map(|(k, v)| ([&prefix[..], &k].concat(), v))
        .collect();
    let path = PathBuf::from("/prefixed.ph");
    let prefixed = write_piece(&fs, &path, &refs(&model), &PieceOptions::default()).unwrap();
    for mode in [ReadMode::Mmap, ReadMode::Pread] {
        check_piece(&fs, &path, &model, mode);
    }
    let r = PieceReader::open(&fs, &path, ReadMode::Pread).unwrap();
    assert_eq!(r.key_prefix(), prefix);
    let before = fs.counts().reads.load(Relaxed);
    for other in [&b"user:"[..], b"", b"user:0001abc", b"zzz"] {
        assert!(r.get(other).unwrap().is_none());
    }
    assert_eq!(fs.counts().reads.load(Relaxed), before);

    let mut broken = model.clone();
    broken.insert(b"user:1".to_vec(), (Some(b"v".to_vec()), 1));
    let path = PathBuf::from("/broken.ph");
    let unprefixed = write_piece(&fs, &path, &refs(&broken), &PieceOptions::default()).unwrap();
    check_piece(&fs, &path, &broken, ReadMode::Pread);
    let r = PieceReader::open(&fs, &path, ReadMode::Pread).unwrap();
    assert_eq!(r.key_prefix(), b"user:");
    // 4 bytes an entry more: "0000".
    let grown = unprefixed.data_bytes - prefixed.data_bytes;
    assert!(
        (2000 * 4..2000 * 4 + 400).contains(&grown),
        "{grown} bytes more"
    );
}

/// A piece of puts whose keys are all of one length stores entries
/// without tags, and every piece stores sequence numbers in the bytes its
/// span needs: every read path gives back keys and numbers, and the data
/// region grows by about a byte an entry when one tombstone brings the
/// tags back, and by one more when the span passes 2^16.
#[test]
fn entries_take_no_tag_when_their_keys_are_of_one_length() {
    let fs = MemFs::new();
    let mut rng = fastrand::Rng::with_seed(15);
    let mut model: Model = (0..2000u64)
        .map(|i| {
            let key: Vec<u8> = (0..16).map(|_| rng.u8(..)).collect();
            (
                key,
                (Some(vec![i as u8; 40]), 7_000_000 + rng.u64(..60_000)),
            )
        })
        .collect();
    let data_bytes = |name: &str, model: &Model| {
        let path = PathBuf::from(name);
        let props = write_piece(&fs, &path, &refs(model), &PieceOptions::default()).unwrap();
        for mode in [ReadMode::Mmap, ReadMode::Pread] {
            check_piece(&fs, &path, model, mode);
        }
        props.data_bytes
    };
    let untagged = data_bytes("/untagged.ph", &model);
    let mut tombstone = model.clone();
    tombstone.insert(vec![1; 16], (None, 7_000_000));
    let tagged = data_bytes("/tagged.ph", &tombstone);
    let grown = tagged - untagged;
    assert!((2000..2000 + 300).contains(&grown), "{grown} bytes more");
    model.values_mut().next().unwrap().1 = 7_000_000 + (1 << 17);
    let wider = data_bytes("/wider.ph", &model);
    let grown = wider - untagged;
    assert!((2000..2000 + 300).contains(&grown), "{grown} bytes more");
    // Keys of two lengths keep their tags.
    let mut uneven = model.clone();
    uneven.insert(vec![2; 17], (Some(vec![0; 40]), 7_000_000));
    let grown = data_bytes("/uneven.ph", &uneven) - wider;
    assert!((2000..2000 + 300).contains(&grown), "{grown} bytes more");
}

#[test]
fn keys_sharing_a_64_bit_hash_all_stay_reachable() {
    let fs = MemFs::new();
    let mut rng = fastrand::Rng::with_seed(4);
    let model = random_model(&mut rng, 1000, 16, 32);
    let entries = refs(&model);
    // Force collisions: every tenth key takes the hash of the key before it.
    let mut hashes: Vec<u64> = entries.iter().map(|e| key_hash(e.key)).collect();
    for i in (10..hashes.len()).step_by(10) {
        hashes[i] = hashes[i - 1];
    }
    hashes[500] = hashes[499];
    hashes[501] = hashes[499];
    let path = PathBuf::from("/collide.ph");
    let props =
        write_piece_hashed(&fs, &path, &entries, &hashes, &PieceOptions::default()).unwrap();
    assert_eq!(props.overflow_count, 100);
    let r = PieceReader::open(&fs, &path, ReadMode::Pread).unwrap();
    for (e, &h) in entries.iter().zip(&hashes) {
        let got = r.get_hashed(e.key, h).unwrap().expect("present");
        assert_eq!(&got.key[..], e.key);
        assert_eq!(got.value.as_deref(), e.value);
    }
    assert!(r.get_hashed(b"absent", hashes[10]).unwrap().is_none());
    assert_eq!(r.iter().count(), entries.len());
    // In key order too: the key chunks name the overflow slots, the
    // perfect hash gives the others.
    let mut c = r.sorted_cursor().unwrap();
    c.seek_to_first().unwrap();
    for (k, v) in &model {
        assert_eq!(c.key(), Some(&k[..]));
        assert_entry(c.load_entry().unwrap(), k, v);
        c.move_next().unwrap();
    }
    assert!(!c.valid());
}

#[test]
fn data_larger_than_a_segment_spans_several_segments() {
    let fs = MemFs::new();
    let mut rng = fastrand::Rng::with_seed(5);
    let model = random_model(&mut rng, 3000, 16, 200);
    let path = PathBuf::from("/segments.ph");
    let opts = PieceOptions {
        max_segment_bytes: 20_000,
        ..PieceOptions::default()
    };
    write_piece(&fs, &path, &refs(&model), &opts).unwrap();
    let r = PieceReader::open(&fs, &path, ReadMode::Pread).unwrap();
    assert!(r.segment_count() > 10, "{} segments", r.segment_count());
    check_piece(&fs, &path, &model, ReadMode::Pread);
}

#[test]
fn invalid_inputs_are_rejected() {
    let fs = MemFs::new();
    let path = PathBuf::from("/bad.ph");
    let dup = [
        EntryRef {
            key: b"a",
            value: Some(b"1"),
            seq: 1,
        },
        EntryRef {
            key: b"a",
            value: Some(b"2"),
            seq: 2,
        },
    ];
    assert!(write_piece(&fs, &path, &dup, &PieceOptions::default()).is_err());
    let huge_key = vec![0u8; tphdb::piece::MAX_KEY_BYTES + 1];
    let e = [EntryRef {
        key: &huge_key,
        value: None,
        seq: 1,
    }];
    assert!(write_piece(&fs, &path, &e, &PieceOptions::default()).is_err());
    assert!(PieceReader::open(&fs, Path::new("/missing.ph"), ReadMode::Pread).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// `seek` and `seek_for_prev` agree with a BTreeMap.
    #[test]
    fn seeks_match_a_btreemap(
        keys in prop::collection::btree_set(prop::collection::vec(any::<u8>(), 0..6), 0..400),
        targets in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..6), 20),
    ) {
        let fs = MemFs::new();
        let model: Model = keys.into_iter().enumerate().map(|(i, k)| (k, (Some(vec![i as u8]), i as u64))).collect();
        let path = PathBuf::from("/seek.ph");
        write_piece(&fs, &path, &refs(&model), &PieceOptions { page_size: 128, ..PieceOptions::default() }).unwrap();
        let r = PieceReader::open(&fs, &path, ReadMode::Pread).unwrap();
        let mut c = r.sorted_cursor().unwrap();
        for t in targets {
            c.seek(&t).unwrap();
            let want = model.range(t.clone()..).next().map(|(k, _)| k.clone());
            prop_assert_eq!(c.key().map(|k| k.to_vec()), want);
            c.seek_for_prev(&t).unwrap();
            let want = model.range(..=t.clone()).next_back().map(|(k, _)| k.clone());
            prop_assert_eq!(c.key().map(|k| k.to_vec()), want);
        }
    }
}

/// Opening a mapped piece read and verified its sections through the
/// mapping, and those pages (with the kernel's fault-around, 64 KiB about
/// each) stayed resident for as long as the piece was open: about 400 KiB
/// a piece, 205 MB of a 16M-key fill's peak RSS.
#[test]
fn an_open_mapped_piece_keeps_none_of_its_pages_resident() {
    let dir = tmp_dir();
    let mut rng = fastrand::Rng::with_seed(4);
    let model = random_model(&mut rng, 50_000, 20, 100);
    let path = dir.path().join("resident.ph");
    write_piece(&PosixFs, &path, &refs(&model), &PieceOptions::default()).unwrap();
    let r = PieceReader::open(&PosixFs, &path, ReadMode::Mmap).unwrap();
    // The file was just written: its pages are all in the page cache, so
    // any touched through the mapping would map their neighbours too.
    assert_eq!(mapped_resident_bytes(&path), 0);
    let (k, v) = model.iter().nth(123).unwrap();
    assert_entry(r.get(k).unwrap(), k, v);
    assert!(mapped_resident_bytes(&path) > 0, "a get maps its block");
    // A compaction's pass over every entry lets go of what it read.
    assert_eq!(r.iter().count(), model.len());
    assert_eq!(mapped_resident_bytes(&path), 0);
}

/// Entries of `value_len`-byte values under 20-byte keys, written with
/// `max_block_slots`: the slots per block the piece got, after checking
/// that every entry reads back.
fn slots_per_block_for(value_len: usize, max_block_slots: usize) -> u32 {
    let fs = MemFs::new();
    let mut rng = fastrand::Rng::with_seed(value_len as u64);
    let mut model = Model::new();
    while model.len() < 2000 {
        let key: Vec<u8> = (0..20).map(|_| rng.u8(..)).collect();
        model.insert(key, (Some(vec![7; value_len]), 1));
    }
    let path = PathBuf::from("/slots.ph");
    let opts = PieceOptions {
        max_block_slots,
        ..PieceOptions::default()
    };
    let props = write_piece(&fs, &path, &refs(&model), &opts).unwrap();
    let r = PieceReader::open(&fs, &path, ReadMode::Pread).unwrap();
    for (k, (v, _)) in &model {
        assert_eq!(r.get(k).unwrap().unwrap().value.as_deref(), v.as_deref());
    }
    props.slots_per_block
}

/// A get reads and checksums its entry's whole block: a page of 100-byte
/// values held 32 of them, and blocks of at most 8 make a get from the
/// page cache about a quarter faster (`tphdb bench piece --max-block-slots`).
/// Entries of an eighth of a page or more keep their page-sized blocks.
#[test]
fn small_entries_get_blocks_of_at_most_max_block_slots() {
    let default = PieceOptions::default().max_block_slots;
    assert_eq!(default, 8);
    assert_eq!(slots_per_block_for(100, default), 8);
    assert_eq!(slots_per_block_for(100, 64), 34);
    assert_eq!(slots_per_block_for(100, 16), 16);
    assert_eq!(slots_per_block_for(100, 1), 1);
    assert_eq!(slots_per_block_for(512, default), 7);
    assert_eq!(slots_per_block_for(1024, default), 3);
}
