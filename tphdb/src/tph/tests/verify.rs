//! What `Tph::verify` accepts.

use super::*;

/// Regression: a job cut short after installing some of its TPHs (a full
/// disk, a crash, or a checkpoint taken meanwhile and opened) merges the
/// same entries again, and a TPH then holds one write twice, with one
/// sequence number. `Tph::verify` took the older copy for a dead version
/// not hidden by a newer one and reported corruption.
#[test]
fn a_write_merged_twice_verifies() {
    let mut h = Harness::new(false, 16);
    let batch: BTreeMap<_, _> = (0..500).map(|i| (key(i), Some(vec![1u8; 50]))).collect();
    let start = h.seq;
    h.merge(&batch);
    // The first half again, with the sequence numbers it had.
    let half: BTreeMap<_, _> = batch.into_iter().take(250).collect();
    h.seq = start;
    h.merge(&half);
    let tph = h.tph.clone().unwrap();
    assert_eq!(tph.piece_count(), 2);
    assert_eq!(tph.verify(1).unwrap(), (500, 250));
    h.check();
}
