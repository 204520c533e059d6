//! Inputs the fuzz targets once crashed on, replayed the way the targets
//! run them. Each must now give an error or a clean result, never a panic.

use std::path::Path;
use std::sync::Arc;

use tphdb::fs::MemFs;
use tphdb::{Options, DB};

/// A MANIFEST whose layout has a fanout so large that fanout^depth
/// overflowed the partition arithmetic on the first get.
#[test]
fn db_open_manifest_with_a_huge_fanout() {
    tphdb::fuzzing::db_open(include_bytes!("fuzz_artifacts/db_open-huge-fanout"));
}

/// A WAL batch whose first sequence number is u64::MAX: replay overflowed
/// adding the op index.
#[test]
fn db_open_wal_batch_at_the_last_sequence_number() {
    tphdb::fuzzing::db_open(include_bytes!("fuzz_artifacts/db_open-wal-seq-overflow"));
}

/// The same batch with valid checksums: the WAL is corrupt, not replayed.
#[test]
fn a_wal_batch_whose_sequence_numbers_overflow_is_corruption() {
    let put = vec![(b"key".to_vec(), Some(b"value".to_vec()))];
    for seq in [u64::MAX, u64::MAX - 1, (1 << 56) + 1] {
        let wal = tphdb::fuzzing::write_log(&[tphdb::fuzzing::encode_batch(seq, &put)]).unwrap();
        let e = tphdb::fuzzing::replay_wal(&wal).unwrap_err();
        assert!(e.is_corruption(), "seq {seq}: {e}");
    }
    // An empty batch at sequence 0 replays (nothing to apply).
    let wal = tphdb::fuzzing::write_log(&[tphdb::fuzzing::encode_batch(0, &[])]).unwrap();
    assert_eq!(tphdb::fuzzing::replay_wal(&wal).unwrap(), []);
}

/// The same MANIFEST with valid checksums, as a normal build reads it: the
/// edit sets fanout 2 and depth 42, 2^42 hash ranges. Open must refuse it.
#[test]
fn a_manifest_whose_levels_overflow_the_hash_ranges_is_corruption() {
    for (fanout, depth) in [(2u8, 42u8), (100, 16), (2, 120)] {
        let fs = MemFs::new();
        let dir = Path::new("/db");
        // layout(fanout, two-level) log_number 0, next_file 3, last_seq 0, depth.
        let edit = vec![9, fanout, 0, 1, 0, 2, 3, 3, 0, 4, depth];
        let manifest = tphdb::fuzzing::write_log(&[edit]).unwrap();
        fs.write_file(&dir.join("MANIFEST-000002"), manifest);
        let name = "MANIFEST-000002";
        let current = format!("{name}\ncrc32c={:08x}\n", crc32c::crc32c(name.as_bytes()));
        fs.write_file(&dir.join("CURRENT"), current.into_bytes());
        let opts = Options {
            file_system: Some(Arc::new(fs.clone())),
            ..Options::default()
        };
        let e = DB::open_for_read_only(&opts, dir).unwrap_err();
        assert!(e.is_corruption(), "fanout {fanout} depth {depth}: {e}");
    }
}

/// Options that would let the levels outgrow the hash ranges are refused.
#[test]
fn options_whose_levels_overflow_the_hash_ranges_are_refused() {
    let opts = Options {
        file_system: Some(Arc::new(MemFs::new())),
        fanout: 100,
        max_levels: 16,
        ..Options::default()
    };
    let e = DB::open(&opts, "/db").unwrap_err();
    assert!(matches!(e, tphdb::Error::InvalidArgument(_)), "{e}");
}

/// A MANIFEST record whose format field (a newer version) came after other
/// fields: decoding took it, re-encoding put it first, and the re-encoded
/// edit was refused as unsupported. A newer format version is refused
/// wherever the field stands.
#[test]
fn manifest_replay_a_format_field_after_other_fields() {
    let data = include_bytes!("fuzz_artifacts/manifest_replay-format-not-first");
    let _ = tphdb::fuzzing::replay_manifest(data);
    let log = tphdb::fuzzing::read_log(data).unwrap();
    for rec in &log.records {
        assert_ne!(tphdb::fuzzing::version_edit_roundtrip(rec), Some(false));
    }
    // The same as a normal build reads it (the artifact's checksums only
    // pass in fuzz builds): next_file 3, then a format version newer than
    // this tphdb's (the artifact's 2, once unknown, is known now).
    assert_eq!(tphdb::fuzzing::version_edit_roundtrip(&[2, 3, 10, 9]), None);
    for known in [1, 2, 3, 4, 5, 6, 7, 8] {
        assert_eq!(
            tphdb::fuzzing::version_edit_roundtrip(&[2, 3, 10, known]),
            Some(true)
        );
    }
}
