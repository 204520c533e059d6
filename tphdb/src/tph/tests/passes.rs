//! The passes of a global index build.

use std::collections::BTreeMap;

use super::{key, Harness};

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
        stats.hash_bytes_read <= 2 * 1000 * 16,
        "{} bytes of key hashes read",
        stats.hash_bytes_read
    );
}
