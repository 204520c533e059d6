//! Folds too large for the job's memory, written in passes.

use super::*;

/// Merges that fold pieces, each run twice: with the folded entries held,
/// and with a fold memory so small that every block is a pass of its own.
/// Both write the same files, byte for byte; the passes read again the
/// blocks of the folded pieces that hold their entries.
#[test]
fn a_fold_written_in_passes_writes_the_piece_a_held_fold_writes() {
    let mut held = Harness::new(true, 2);
    let mut passes = Harness::new(true, 2);
    passes.fold_memory_bytes = 1;
    let mut rng = fastrand::Rng::with_seed(11);
    let (mut read_held, mut read_passes) = (0, 0);
    for round in 0..8u8 {
        let mut ops = BTreeMap::new();
        for _ in 0..rng.usize(20..120) {
            let len = rng.usize(0..300);
            ops.insert(
                key(rng.u32(0..400)),
                (rng.u8(..6) != 0).then(|| vec![round; len]),
            );
        }
        let a = held.merge(&ops);
        let b = passes.merge(&ops);
        assert_eq!(a.pieces_folded, b.pieces_folded);
        assert_eq!(a.fold_bytes_written, b.fold_bytes_written);
        read_held += a.fold_bytes_read;
        read_passes += b.fold_bytes_read;
        for h in [&held, &passes] {
            h.check();
            h.check_files();
        }
        for name in held.mem.list(&held.dir).unwrap() {
            let path = held.dir.join(&name);
            let same = held.mem.read_file(&path).unwrap() == passes.mem.read_file(&path).unwrap();
            assert!(same, "{name} differs after round {round}");
        }
    }
    eprintln!("fold bytes read: {read_held} held, {read_passes} in passes");
    assert!(read_held > 0, "the merges must fold");
    assert!(
        read_passes > read_held,
        "{read_passes} bytes read in passes, {read_held} held"
    );
}

/// Regression: at a bottom that could still get a level below it, a TPH at
/// `max_pieces` folded every piece of like size (size tiers) however near
/// it was to the size at which the new level takes its entries: a 16M x
/// 128 B fill's level-1 TPHs folded all 16 pieces two merges before their
/// push-downs. Then, folding only what the piece count needed, they still
/// folded a piece at each of their last merges. A TPH that reaches that
/// size within `PUSH_DUE_PIECES_FACTOR` times `max_pieces` pieces now
/// folds nothing until it holds that many, and then one piece a merge;
/// far from it, and where the tree cannot deepen, pieces fold in tiers.
#[test]
fn a_bottom_tph_near_its_push_down_folds_nothing_until_the_new_level_comes() {
    let batch = |round: u32| -> Model {
        (round * 100..round * 100 + 100)
            .map(|i| (key(i), Some(vec![1u8; 100])))
            .collect()
    };
    let batch_bytes = 100 * 113;
    for (pushed_near, tiers) in [
        (Some(6 * batch_bytes), false),
        (Some(100 * batch_bytes), true),
        (None, true),
    ] {
        let mut h = Harness::new(true, 4);
        h.bottom_pushed_near = pushed_near;
        for round in 0..4 {
            assert_eq!(h.merge(&batch(round)).pieces_folded, 0);
        }
        if tiers {
            assert_eq!(h.merge(&batch(4)).pieces_folded, 4, "{pushed_near:?}");
            h.check();
            continue;
        }
        // Up to four times max_pieces, then one fold a merge: never
        // falling back to max_pieces all at once.
        for round in 4..16 {
            assert_eq!(h.merge(&batch(round)).pieces_folded, 0, "round {round}");
        }
        for round in 16..20 {
            assert_eq!(h.merge(&batch(round)).pieces_folded, 1, "round {round}");
        }
        h.check();
    }
}

/// A pass reads at most `PASS_VALUES_BYTES` again, however large the fold
/// memory: in runs of the fold memory (16 MiB at the defaults), two
/// push-downs' passes held 22 MB of values at the peak of a 16M-key fill.
#[test]
fn a_pass_reads_at_most_its_run_of_values_again_whatever_the_fold_memory() {
    use crate::piece::EntryRef;
    use crate::tph::copies::Copies;
    use crate::tph::fold::{passes_for, Origin, PASS_VALUES_BYTES};
    let mut copies = Copies::default();
    let value = vec![0u8; 1000];
    let shapes: Vec<Written> = (0..20_000u32)
        .map(|i| {
            let key = i.to_be_bytes();
            let e = EntryRef {
                key: &key,
                value: Some(&value),
                seq: 1,
            };
            let origin = Origin::input(0).unwrap().at(0);
            Written::shape_of(e, crate::hash::key_hash(&key), origin, &mut copies)
        })
        .collect();
    // About 22 MB to read again: six runs, whatever the fold memory.
    let expected = passes_for(&shapes, PASS_VALUES_BYTES);
    assert!((5..=7).contains(&expected), "{expected} passes");
    assert_eq!(passes_for(&shapes, 1 << 30), expected);
    assert!(passes_for(&shapes, 1 << 20) > expected);
    let held: Vec<Written> = Written::held(vec![DeltaEntry::copy_of(b"k", Some(b"v"), 1)]);
    assert_eq!(passes_for(&held, 1), 1);
}
