//! What compactions read when they work in passes: each pass reads the
//! blocks holding entries of its range, and those must be a range of each
//! input's blocks, not nearly all of them again.

mod common;

use tphdb::{Options, DB};

fn key(i: u32) -> [u8; 4] {
    i.wrapping_mul(0x9E37_79B9).to_be_bytes()
}

fn value(i: u32) -> Vec<u8> {
    vec![i as u8; 100]
}

/// Regression: a level-0 compaction merged in eight passes (one of level
/// 1's partitions each) read its inputs 6.4 times over with 100-byte
/// values: the perfect hashes' segments followed the mixed hash, so each
/// partition's entries were spread over every block (27 to a block). With
/// segments in hash order a pass reads its eighth of each input and the
/// segments straddling its ends: 1.92 times with two segments a level-0
/// TPH, 0.81 since a piece has at least 8 (the passes read only the
/// blocks that hold one of their entries).
#[test]
fn a_level0_compaction_in_passes_reads_its_inputs_about_once() {
    let dir = tempfile::tempdir().unwrap();
    let opts = |l0_compaction_trigger| Options {
        fanout: 8,
        write_buffer_bytes: 4 << 20,
        // 1 MiB per job, half of it for input: one partition a pass.
        compaction_memory_bytes: 2 << 20,
        background_threads: 2,
        l0_compaction_trigger,
        l0_slowdown_trigger: 64,
        l0_stop_trigger: 64,
        ..Options::default()
    };
    let (tphs, per_tph) = (3u32, 20_000u32);
    common::write_level0(dir.path(), &opts(64), (tphs, per_tph), key, value);
    let db = DB::open(&opts(1), dir.path()).unwrap();
    let input = db.stats().levels[0].file_bytes;
    db.wait_for_compactions().unwrap();
    let stats = db.stats();
    assert_eq!(stats.levels[0].tphs, 0);
    let read = stats.compaction_reads.l0_merge;
    let times = read as f64 / input as f64;
    eprintln!("read {read} bytes of level 0's {input}: {times:.2} times");
    assert!(times < 1.2, "level 0 read {times:.2} times over");
    for i in (0..tphs * per_tph).step_by(97) {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)));
    }
}
