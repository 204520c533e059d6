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

/// A push-down into a level the tree has just grown, whose share of each
/// child passes the job's input memory, writes each child from the
/// share's key hashes without holding its keys: the children hold every
/// live entry and no tombstone, and gets and a scan read what a model
/// holds, before and after a reopen.
#[test]
fn a_push_down_into_a_new_level_writes_each_child_from_its_shares_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        fanout: 2,
        max_levels: 3,
        write_buffer_bytes: 64 << 20,
        tph_target_bytes: 4 << 20,
        // 2 MiB per job, 1 MiB of it for input: a child's share is more.
        compaction_memory_bytes: 4 << 20,
        background_threads: 2,
        l0_compaction_trigger: 1,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let value = |i: u32, round: u8| vec![i as u8 ^ round; 2000 + (i % 300) as usize];
    let mut model = std::collections::BTreeMap::new();
    let keys = 9000u32;
    // Overwrites and deletes land in the memtable: level 0 gets the newest
    // versions, the deletes as tombstones, and pushes them down.
    let write = |model: &mut std::collections::BTreeMap<_, _>, round: u8, step, deletes| {
        for i in (0..keys).step_by(step) {
            db.put(key(i), value(i, round)).unwrap();
            model.insert(key(i).to_vec(), value(i, round));
        }
        for i in (0..keys).step_by(deletes) {
            db.delete(key(i)).unwrap();
            model.remove(&key(i).to_vec());
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
    };
    write(&mut model, 0, 1, 13);
    let st = db.stats();
    assert!(st.shares_written > 0, "{}", st.level_table());
    // The tombstones went at the bottom, which nothing lies below.
    let bottom = st.levels.last().unwrap();
    assert_eq!(bottom.live_tombstones, 0, "{}", st.level_table());
    assert_eq!(
        bottom.live_entries,
        model.len() as u64,
        "{}",
        st.level_table()
    );
    // Then merges into the children the shares wrote.
    write(&mut model, 1, 5, 17);
    let check = |db: &DB| {
        for i in 0..keys {
            let want = model.get(&key(i)[..]).cloned();
            assert_eq!(db.get(key(i)).unwrap(), want, "key {i}");
        }
        let scanned: Vec<(Vec<u8>, Vec<u8>)> = db
            .iterator(tphdb::IteratorMode::Start)
            .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
            .collect();
        assert!(scanned == model.clone().into_iter().collect::<Vec<_>>());
    };
    check(&db);
    drop(db);
    let db = DB::open(&opts, dir.path()).unwrap();
    check(&db);
}
