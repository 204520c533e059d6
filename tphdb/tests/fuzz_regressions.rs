//! Inputs the fuzz targets once crashed on, replayed the way the targets
//! run them. Each must now give an error or a clean result, never a panic.

use std::path::Path;
use std::sync::Arc;

use tphdb::fs::MemFs;
use tphdb::{IteratorMode, Options, DB};

/// The `db_open` target: framed files (`kind:u8 number:u32 len:u32
/// bytes`; 0 MANIFEST, 1 WAL, 2 piece), a read-only open, reads, scans.
fn db_open(data: &[u8]) {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let mut d = data;
    let mut manifest = None;
    while d.len() >= 9 {
        let kind = d[0] % 3;
        let number = u32::from_le_bytes(d[1..5].try_into().unwrap()) % 1000;
        let len = (u32::from_le_bytes(d[5..9].try_into().unwrap()) as usize).min(d.len() - 9);
        let bytes = d[9..9 + len].to_vec();
        d = &d[9 + len..];
        let name = match kind {
            0 => {
                manifest.get_or_insert(number);
                format!("MANIFEST-{number:06}")
            }
            1 => format!("{number:06}.log"),
            _ => format!("{number:06}.ph"),
        };
        fs.write_file(&dir.join(name), bytes);
    }
    let Some(m) = manifest else { return };
    let name = format!("MANIFEST-{m:06}");
    let current = format!("{name}\ncrc32c={:08x}\n", crc32c::crc32c(name.as_bytes()));
    fs.write_file(&dir.join("CURRENT"), current.into_bytes());
    let opts = Options {
        file_system: Some(Arc::new(fs.clone())),
        background_threads: 1,
        ..Options::default()
    };
    if let Ok(db) = DB::open_for_read_only(&opts, dir) {
        for k in [&b"key00001"[..], b"", b"zz"] {
            let _ = db.get(k);
        }
        for item in db.iterator(IteratorMode::Start).take(200) {
            if item.is_err() {
                break;
            }
        }
    }
}

/// A MANIFEST whose layout has a fanout so large that fanout^depth
/// overflowed the partition arithmetic on the first get.
#[test]
fn db_open_manifest_with_a_huge_fanout() {
    db_open(&[
        0, 2, 0, 0, 147, 18, 0, 0, 0, 148, 215, 222, 138, 11, 0, 1, 9, 2, 0, 1, 0, 2, 3, 3, 0, 4,
        42, 248, 1, 118,
    ]);
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
