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
