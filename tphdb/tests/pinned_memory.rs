//! Memory that snapshots and iterators pin past a flush, measured in the
//! process's anonymous memory (this test binary's own, so nothing else runs
//! beside it).

use tphdb::{IteratorMode, Options, DB};

const KEYS: u32 = 20_000;
const ROUNDS: u32 = 24;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:08}").into_bytes()
}

fn value(round: u32, i: u32) -> Vec<u8> {
    let mut v = format!("r{round}-i{i}-").into_bytes();
    v.resize(200, b'.');
    v
}

/// Anonymous memory the process holds (`RssAnon`), in bytes.
fn rss_anon() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("RssAnon:")).unwrap();
    let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

/// Regression: a snapshot or iterator pinned every memtable of its moment in
/// memory until dropped, so a long-lived one held memory growing with every
/// write after it, bounded by nothing. Now flushed memtables past
/// `pinned_memtable_bytes` are moved to files mapped back in place, and
/// every snapshot still reads what it saw.
#[test]
fn snapshots_and_iterators_keep_at_most_pinned_memtable_bytes_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let bound = 8 << 20;
    let opts = Options {
        write_buffer_bytes: 4 << 20,
        pinned_memtable_bytes: bound,
        compaction_memory_bytes: 4 << 20,
        block_cache_bytes: 1 << 20,
        background_threads: 1,
        // Frozen memtables still waiting for their flush when a round's
        // snapshot is taken are pinned too: with two, the snapshots pin
        // far more than the memory may grow by.
        max_immutable_memtables: 2,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let start = rss_anon();
    let mut iter = None;
    let mut snapshots = Vec::new();
    for round in 0..ROUNDS {
        for i in 0..KEYS {
            db.put(key(i), value(round, i)).unwrap();
        }
        snapshots.push((round, db.snapshot()));
        if round == 0 {
            iter = Some(db.iterator(IteratorMode::Start));
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        let s = db.stats();
        assert!(
            s.pinned_memtable_bytes <= bound as u64,
            "round {round}: {} bytes pinned in memory",
            s.pinned_memtable_bytes
        );
    }
    let grown = rss_anon().saturating_sub(start);
    let s = db.stats();
    let pinned = s.pinned_memtable_bytes + s.pinned_memtable_spilled_bytes;
    assert!(s.memtables_spilled > 0 && s.memtable_spill_failures == 0);
    assert!(
        pinned > 80 << 20,
        "the snapshots pin every round's memtable: {pinned}"
    );
    // The active memtable, the bound, caches and compaction buffers: far
    // below the pinned total.
    assert!(
        grown < 48 << 20,
        "anonymous memory grew {grown} bytes with {pinned} pinned"
    );
    for (round, snap) in &snapshots {
        for i in (0..KEYS).step_by(97) {
            assert_eq!(snap.get(key(i)).unwrap(), Some(value(*round, i)));
        }
    }
    let first: Vec<_> = iter.unwrap().map(|r| r.unwrap()).collect();
    assert_eq!(first.len(), KEYS as usize);
    for (i, (k, v)) in first.iter().enumerate() {
        assert_eq!(
            (&k[..], &v[..]),
            (&key(i as u32)[..], &value(0, i as u32)[..])
        );
    }
    drop(snapshots);
    db.close().unwrap();
}

/// A snapshot keeps the TPHs of its moment, and their global indexes, after
/// compactions replace them: `DBStats` counts those indexes
/// (`index_global_held_bytes`) beside the current version's
/// (`index_global_bytes`) until the snapshot goes.
#[test]
fn global_indexes_a_snapshot_holds_after_a_compaction_are_counted_until_it_goes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        write_buffer_bytes: 1 << 20,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let write_round = |round: u32| {
        for i in 0..KEYS {
            db.put(key(i), value(round, i)).unwrap();
        }
        db.compact_range(None, None).unwrap();
        db.wait_for_compactions().unwrap();
    };
    write_round(0);
    let settled = db.stats();
    assert!(settled.index_global_bytes > 0);
    assert_eq!(settled.index_global_held_bytes, settled.index_global_bytes);

    let snapshot = db.snapshot();
    write_round(1);
    let held = db.stats();
    // The snapshot's TPHs were all replaced: their indexes are held on top.
    assert!(
        held.index_global_held_bytes >= held.index_global_bytes + settled.index_global_bytes,
        "{} held, {} current, {} in the snapshot's version",
        held.index_global_held_bytes,
        held.index_global_bytes,
        settled.index_global_bytes
    );
    assert_eq!(snapshot.get(key(7)).unwrap(), Some(value(0, 7)));

    drop(snapshot);
    let after = db.stats();
    assert_eq!(after.index_global_held_bytes, after.index_global_bytes);
}
