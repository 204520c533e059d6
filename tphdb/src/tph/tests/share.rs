//! A push-down's share of an empty child at the bottom, written from its
//! key hashes alone.

use std::sync::Arc;

use super::{key, Harness};
use crate::fs::FileSystem;
use crate::hash::hashes_of_partitions;
use crate::tph::{piece_file_name, write_share, MergeOutcome, MergeStats, Tph};

/// A TPH of several pieces, with overwritten and deleted keys, above the
/// bottom (its tombstones stay).
fn source() -> Arc<Tph> {
    let mut source = Harness::new(false, 16);
    for round in 0..3u32 {
        let ops = (round * 700..round * 700 + 1000)
            .map(|i| {
                let len = 40 + (i % 90) as usize;
                (key(i), (i % 11 != 0).then(|| vec![round as u8; len]))
            })
            .collect();
        source.merge(&ops);
    }
    let tph = source.tph.unwrap();
    assert!(tph.pieces.len() >= 2, "{} pieces", tph.pieces.len());
    tph
}

/// An empty target at the bottom for partition `p` of `partitions`.
fn target(p: u64, partitions: u64) -> Harness {
    let mut t = Harness::new(true, 16);
    t.next_number = 100;
    t.hashes = hashes_of_partitions(p..p + 1, partitions);
    // Written in several passes, each reading a run's values again.
    t.fold_memory_bytes = 8 << 10;
    t
}

fn head(t: &Harness) -> Vec<u8> {
    let number = t.tph.as_ref().unwrap().head_number();
    t.mem
        .read_file(&t.dir.join(piece_file_name(number)))
        .unwrap()
}

/// The share written whole is the very TPH a merge of the share held by
/// shape writes: the same head piece, byte for byte, its tombstones
/// dropped, and every live entry of the share found once.
#[test]
fn a_share_written_from_its_hashes_is_the_head_a_merge_of_its_shapes_writes() {
    let pushed = source();
    for (p, partitions) in [(0, 1), (3, 8), (7, 8)] {
        let (mut merged, mut written) = (target(p, partitions), target(p, partitions));
        let mut stats = MergeStats::default();
        let held = pushed
            .live_entries_in(merged.hashes.clone(), None, &mut stats)
            .unwrap();
        for t in [&mut merged, &mut written] {
            for e in &held {
                t.model
                    .insert(e.key().to_vec(), e.value().map(<[u8]>::to_vec));
            }
        }
        let shapes = pushed
            .live_shapes_in(0, merged.hashes.clone(), None, &mut stats)
            .unwrap();
        let inputs = std::slice::from_ref(&pushed);
        let by_merge = merged.merge_written(shapes, inputs, false);

        let ctx = written.context(inputs);
        let (outcome, found) = write_share(&ctx, &pushed, None).unwrap();
        written.next_number += 1;
        assert_eq!(found, held.len() as u64);
        let by_share = written.take(outcome, false);
        merged.check();
        written.check();
        assert!(
            head(&merged) == head(&written),
            "partition {p} of {partitions}"
        );

        let tombstones = held.iter().filter(|e| e.value().is_none()).count() as u64;
        assert!(tombstones > 0);
        assert_eq!(by_share.tombstones_dropped, tombstones);
        assert_eq!(by_share.entries_written, by_merge.entries_written);
        assert_eq!(
            by_share.delta_bytes_written + by_share.index_bytes_written,
            by_merge.delta_bytes_written + by_merge.index_bytes_written
        );
        assert!(by_share.values_again_read > 0);
    }
}

/// A share of nothing leaves the child as it was; one of tombstones alone
/// leaves it empty.
#[test]
fn a_share_of_tombstones_alone_leaves_the_child_empty() {
    let mut source = Harness::new(false, 16);
    source.merge(&(0..300).map(|i| (key(i), None)).collect());
    let pushed = source.tph.unwrap();
    let t = target(0, 1);
    let ctx = t.context(std::slice::from_ref(&pushed));
    let (outcome, found) = write_share(&ctx, &pushed, None).unwrap();
    assert_eq!(found, 300);
    assert!(
        matches!(outcome, MergeOutcome::Emptied { ref stats, .. } if stats.tombstones_dropped == 300)
    );
    assert!(t.mem.list(&t.dir).unwrap_or_default().is_empty());

    let mut above = target(0, 1);
    above.bottom = false;
    let ctx = above.context(std::slice::from_ref(&pushed));
    assert!(write_share(&ctx, &pushed, None).is_err());
}

/// Regression: a list of a TPH's live entries in a child's hashes was
/// sized for the child's share of all hashes, not of the TPH's partition:
/// from level 1 down a `fanout`th of what it came to hold, so that it grew
/// by doubling, each time the old list beside one twice its size.
#[test]
fn a_childs_share_is_sized_for_its_part_of_the_tphs_partition() {
    use crate::hash::key_hash;
    let (p, partitions) = (3u64, 8u64);
    let mut source = Harness::new(false, 16);
    source.hashes = hashes_of_partitions(p..p + 1, partitions);
    let keys: Vec<Vec<u8>> = (0..60_000)
        .map(key)
        .filter(|k| source.hashes.contains(&key_hash(k)))
        .collect();
    assert!(keys.len() > 6000, "{} keys", keys.len());
    source.merge(
        &keys
            .iter()
            .map(|k| (k.clone(), Some(vec![1u8; 20])))
            .collect(),
    );
    let tph = source.tph.unwrap();
    for child in p * 8..p * 8 + 8 {
        let hashes = hashes_of_partitions(child..child + 1, partitions * 8);
        let live = keys
            .iter()
            .filter(|k| hashes.contains(&key_hash(k)))
            .count();
        let expected = tph.expected_live_in(&hashes);
        assert!(
            expected >= live && expected <= live + live / 4 + 64,
            "child {child}: {expected} expected for {live}"
        );
    }
    let elsewhere = hashes_of_partitions(0..1, partitions * 8);
    assert!(tph.expected_live_in(&elsewhere) <= 64);
}
