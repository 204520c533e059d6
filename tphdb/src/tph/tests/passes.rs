//! Passes over a TPH: a global index build's, and a merge's over ranges
//! of partitions.

use std::collections::BTreeMap;

use super::{key, Harness};
use crate::error::Error;
use crate::fs::FileSystem;
use crate::hash::partition_of;
use crate::tph::{piece_file_name, DeltaEntry, MergeStats, RangePasses, Tph, Written};

/// An index built in passes reads each piece's key hashes once, not once
/// a pass (each pass read them whole before: nine times here).
#[test]
fn an_index_built_in_passes_reads_each_piece_key_hashes_once() {
    let mut h = Harness::new(true, 16);
    let first: BTreeMap<_, _> = (0..1000).map(|i| (key(i), Some(vec![1u8; 20]))).collect();
    h.merge(&first);
    let second: BTreeMap<_, _> = (1000..1100)
        .map(|i| (key(i), Some(vec![2u8; 20])))
        .collect();
    let stats = h.merge(&second);
    h.check();
    // 1100 keys, 128 a pass. Besides the index passes, the delta's keys
    // that the old index routes to the first piece by a chance signature
    // match read its key hashes once more.
    assert!(
        stats.hash_bytes_read <= 2 * 1000 * 12,
        "{} bytes of key hashes read",
        stats.hash_bytes_read
    );
}

/// A merge pass over one partition of eight reads the blocks holding its
/// entries, not the whole TPH: with an entry per block, about an eighth.
/// (Each pass read every input whole before: eight times per merge.)
#[test]
fn a_pass_over_a_few_partitions_reads_only_their_blocks() {
    let mut h = Harness::new(true, 16);
    let ops = (0..2000).map(|i| (key(i), Some(vec![7u8; 300]))).collect();
    h.merge(&ops);
    let tph = h.tph.as_ref().unwrap();
    let mut whole = MergeStats::default();
    tph.live_entries_in(0..=u64::MAX, None, &mut whole).unwrap();
    let hashes = crate::hash::hashes_of_partitions(2..3, 8);
    let mut pass = MergeStats::default();
    let mut passes = RangePasses::default();
    let part = tph
        .live_entries_in(hashes, Some(&mut passes), &mut pass)
        .unwrap();
    assert!((150..350).contains(&part.len()), "{} entries", part.len());
    let (read, of) = (pass.input_bytes_read, whole.input_bytes_read);
    assert!(read * 5 < of, "{read} bytes read of {of}");
    // Finding them took the key hashes up to the range's end: those of
    // partitions 0 to 2, about 3/8 of them.
    let section: u64 = tph.pieces.iter().map(|p| p.key_hash_bytes()).sum();
    assert!(
        (section / 4..section / 2).contains(&pass.hash_bytes_read),
        "{} bytes of key hashes of {section}",
        pass.hash_bytes_read
    );
    // The rest are read, and the section's checksum checked, at the end.
    passes.finish(tph, &mut pass).unwrap();
    assert_eq!(pass.hash_bytes_read, section);
}

/// Regression: each pass of a merge too large for memory (a few target
/// partitions at a time) read every input piece's key hashes whole to
/// find the entries in its range: eight passes read them eight times.
/// Passes now read on where the one before stopped.
#[test]
fn passes_over_ascending_ranges_read_each_piece_key_hashes_once() {
    let mut h = Harness::new(true, 16);
    for round in 0..3u32 {
        let ops = (round * 1000..round * 1000 + 1500)
            .map(|i| (key(i), Some(vec![round as u8; 50])))
            .collect();
        h.merge(&ops);
    }
    let tph = h.tph.as_ref().unwrap();
    assert!(tph.pieces.len() >= 2, "{} pieces", tph.pieces.len());
    let stored: u64 = tph.pieces.iter().map(|p| p.properties().entry_count).sum();
    let mut stats = MergeStats::default();
    let mut passes = RangePasses::default();
    let mut found = 0;
    for p in 0..8 {
        let hashes = crate::hash::hashes_of_partitions(p..p + 1, 8);
        found += tph
            .live_entries_in(hashes, Some(&mut passes), &mut stats)
            .unwrap()
            .len() as u64;
    }
    passes.finish(tph, &mut stats).unwrap();
    assert_eq!(found, tph.live_count());
    let section: u64 = tph.pieces.iter().map(|p| p.key_hash_bytes()).sum();
    assert!(section < stored * 12, "{section} bytes for {stored} pairs");
    assert_eq!(stats.hash_bytes_read, section);
}

/// The live entries of the partitions of a level, read one partition at a
/// time from the blocks that hold them, are those a whole read gives, each
/// once (what a merge too large for memory does, a pass per range).
pub(super) fn check_hash_ranges(tph: &Tph) {
    let owned = |l: Vec<DeltaEntry>| -> Vec<_> {
        l.into_iter()
            .map(|e| {
                (
                    e.key().to_vec(),
                    e.value().map(<[u8]>::to_vec),
                    e.seq,
                    e.h,
                    e.h2(),
                )
            })
            .collect()
    };
    let mut stats = MergeStats::default();
    let all = tph.live_entries_in(0..=u64::MAX, None, &mut stats).unwrap();
    let all = owned(all);
    assert_eq!(all.len() as u64, tph.live_count());
    for partitions in [1, 3, 8] {
        let mut got = Vec::new();
        let mut passes = RangePasses::default();
        for p in 0..partitions {
            let hashes = crate::hash::hashes_of_partitions(p..p + 1, partitions);
            let l = tph
                .live_entries_in(hashes, Some(&mut passes), &mut stats)
                .unwrap();
            assert!(l.iter().all(|e| partition_of(e.h, partitions) == p));
            got.extend(owned(l));
        }
        passes.finish(tph, &mut stats).unwrap();
        got.sort();
        assert_eq!(got, all, "{partitions} partitions");
    }
}

/// A delta read from a TPH by shape (a push-down's pass past its memory)
/// writes, in passes that read its values again from that TPH's pieces,
/// the very piece that the delta held whole writes.
#[test]
fn a_delta_held_by_shape_writes_the_piece_a_held_delta_writes() {
    // Three rounds of overwrites and deletes; `longer` values.
    let source = |longer: usize| {
        let mut source = Harness::new(false, 16);
        for round in 0..3u32 {
            let ops = (round * 700..round * 700 + 1000)
                .map(|i| {
                    let len = 40 + (i % 90) as usize + longer;
                    (key(i), (i % 11 != 0).then(|| vec![round as u8; len]))
                })
                .collect();
            source.merge(&ops);
        }
        source.tph.unwrap()
    };
    let pushed = source(0);
    assert!(pushed.pieces.len() >= 2, "{} pieces", pushed.pieces.len());
    let mut stats = MergeStats::default();
    let held = pushed
        .live_entries_in(0..=u64::MAX, None, &mut stats)
        .unwrap();
    let shapes = pushed
        .live_shapes_in(0, 0..=u64::MAX, None, &mut stats)
        .unwrap();
    assert!(shapes.iter().all(|e| e.origin().is_some()));

    // Two targets alike, holding some of the keys already.
    let target = || {
        let mut t = Harness::new(true, 16);
        t.seq = 10_000;
        t.next_number = 100;
        let ops = (1500..2500)
            .map(|i| (key(i), Some(vec![9u8; 30])))
            .collect();
        t.merge(&ops);
        t.fold_memory_bytes = 8 << 10;
        t
    };
    let (mut a, mut b) = (target(), target());
    let model: Vec<(Vec<u8>, Option<Vec<u8>>)> = held
        .iter()
        .map(|e: &DeltaEntry| (e.key().to_vec(), e.value().map(<[u8]>::to_vec)))
        .collect();
    for t in [&mut a, &mut b] {
        for (k, v) in &model {
            t.model.insert(k.clone(), v.clone());
        }
    }
    let read_once = a.merge_written(Written::held(held), &[], false);
    let read_again = b.merge_written(shapes, std::slice::from_ref(&pushed), false);
    // The values were read again from the input, not for a fold (they
    // were counted as a fold's reads: a 16M x 128 B fill showed 6.6 bytes
    // of fold reads per user byte and no fold).
    assert_eq!(read_once.values_again_read, 0);
    assert!(read_again.values_again_read > 0);
    a.check();
    b.check();
    let head = |t: &Harness| -> Vec<u8> {
        let number = t.tph.as_ref().unwrap().head_number();
        t.mem
            .read_file(&t.dir.join(piece_file_name(number)))
            .unwrap()
    };
    assert!(head(&a) == head(&b), "the pieces differ");

    // Read again from a TPH whose entries are not those shapes (their
    // values are longer), the merge fails as corrupt and leaves no file.
    let mut c = target();
    let shapes = pushed
        .live_shapes_in(0, 0..=u64::MAX, None, &mut stats)
        .unwrap();
    let files = c.mem.list(&c.dir).unwrap();
    let other = source(1);
    let err = c
        .try_merge(shapes, &[other])
        .err()
        .expect("a corrupt merge");
    assert!(matches!(err, Error::Corruption { .. }), "{err}");
    assert_eq!(c.mem.list(&c.dir).unwrap(), files);
}
