//! The bounds the database keeps on what it holds: cached blocks, open
//! files, memtables pinned by snapshots, the memory budget, and writes paced
//! rather than stopped when compactions fall behind.

use std::io;
use std::sync::Arc;

use tphdb::fs::{FaultFs, OpKind};
use tphdb::{IteratorMode, Options, DB};

mod common;

use common::{collect, small};

#[test]
fn the_block_cache_answers_repeated_reads_and_survives_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        read_mode: tphdb::fs::ReadMode::Pread,
        block_cache_bytes: 1 << 20,
        ..small()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let value = |i: u32, round: u32| format!("value {i} round {round}").into_bytes();
    for round in 0..3 {
        for i in 0..20_000u32 {
            if i % 3 == round % 3 || round == 0 {
                db.put(i.to_be_bytes(), value(i, round)).unwrap();
            }
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        // Each key twice: the second read of a block comes from the cache,
        // and returns what is current, never a replaced piece's value.
        for _ in 0..2 {
            for i in (0..20_000u32).step_by(97) {
                let newest = (0..=round)
                    .rev()
                    .find(|&r| r == 0 || i % 3 == r % 3)
                    .unwrap();
                assert_eq!(db.get(i.to_be_bytes()).unwrap(), Some(value(i, newest)));
            }
        }
    }
    let st = db.stats();
    assert!(st.block_cache_hits > 0, "{st:?}");
    assert!(st.block_cache_misses > 0, "{st:?}");
    assert!(st.block_cache_bytes > 0 && st.block_cache_bytes <= 1 << 20);
    // Cache hits are not disk reads.
    assert!(st.get_block_reads < st.gets, "{st:?}");

    // Without a cache, every lookup of a flushed key reads its block (and
    // now and then one more, on a signature false positive).
    drop(db);
    let db = DB::open(
        &Options {
            block_cache_bytes: 0,
            ..opts
        },
        dir.path(),
    )
    .unwrap();
    for i in (0..20_000u32).step_by(97) {
        db.get(i.to_be_bytes()).unwrap().unwrap();
    }
    let st = db.stats();
    assert_eq!(st.block_cache_hits + st.block_cache_misses, 0);
    assert!(st.get_block_reads >= st.gets && st.get_block_reads <= st.gets * 21 / 20);
}

/// Piece files open in this process under `dir`.
fn open_pieces(dir: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|p| p.starts_with(dir) && p.extension().is_some_and(|e| e == "ph"))
        .count()
}

/// Regression: every piece read with pread or O_DIRECT kept a descriptor
/// open for as long as it existed, with no bound: a large database ran out
/// of descriptors. `max_open_files` bounds them.
#[test]
fn open_piece_files_stay_within_max_open_files() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        read_mode: tphdb::fs::ReadMode::Pread,
        max_open_files: 4,
        l0_compaction_trigger: 100,
        l0_slowdown_trigger: 100,
        l0_stop_trigger: 100,
        ..small()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    for round in 0..12u32 {
        for i in 0..50u32 {
            db.put(format!("r{round}k{i}"), round.to_le_bytes())
                .unwrap();
        }
        db.flush().unwrap();
    }
    assert!(db.stats().levels[0].pieces >= 12);
    for round in 0..12u32 {
        for i in 0..50u32 {
            let v = db.get(format!("r{round}k{i}")).unwrap();
            assert_eq!(v.as_deref(), Some(&round.to_le_bytes()[..]));
        }
        let open = open_pieces(dir.path());
        assert!(open <= 4, "{open} piece files open");
    }
    assert_eq!(collect(db.iterator(IteratorMode::Start)).len(), 600);
    assert!(open_pieces(dir.path()) <= 4);
}

/// A snapshot holds the memtables of its moment after they are flushed;
/// the memory is reported, and goes with the snapshot.
#[test]
fn memtables_a_snapshot_holds_are_reported_until_it_goes() {
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&small(), dir.path()).unwrap();
    for i in 0..1000u32 {
        db.put(format!("k{i}"), [1u8; 100]).unwrap();
    }
    let snapshot = db.snapshot();
    db.flush().unwrap();
    let pinned = db.stats().pinned_memtable_bytes;
    assert!(pinned > 100_000, "{pinned} bytes pinned");
    let all: u64 = db
        .property_value("tphdb.size-all-mem-tables")
        .unwrap()
        .unwrap()
        .parse()
        .unwrap();
    assert!(all >= pinned);
    assert_eq!(
        snapshot.get(b"k5").unwrap().as_deref(),
        Some(&[1u8; 100][..])
    );
    drop(snapshot);
    // The flush job lets go of it a moment after `flush` returns.
    let start = std::time::Instant::now();
    while db.stats().pinned_memtable_bytes > 0 {
        assert!(
            start.elapsed().as_secs() < 5,
            "still pinned after the snapshot went"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Writes past `l0_slowdown_trigger` are paced at the delayed write rate
/// (here 0.8 of the option, nothing having been measured yet) and go on;
/// before, each write group slept a millisecond whatever its size.
#[test]
fn writes_past_the_slowdown_trigger_are_paced_at_the_delayed_rate() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        l0_compaction_trigger: 100,
        l0_slowdown_trigger: 2,
        l0_stop_trigger: 100,
        delayed_write_rate_bytes: 1 << 20,
        ..small()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    for round in 0..2u32 {
        db.put(format!("r{round}"), b"v").unwrap();
        db.flush().unwrap();
    }
    assert_eq!(db.stats().levels[0].tphs, 2);
    let before = db.stats().stall_micros;
    let value = vec![7u8; 4000];
    let started = std::time::Instant::now();
    for i in 0..64u32 {
        db.put(i.to_be_bytes(), &value).unwrap();
    }
    let st = db.stats();
    let paced_micros = st.stall_micros - before;
    // 256 KB at 0.8 MiB/s: about 0.3 s (sleeps only overshoot), where a
    // millisecond per write was 64 ms.
    assert!(paced_micros >= 250_000, "{paced_micros} us paced");
    // No level-0 compaction runs: level 0's steps paced them all.
    assert_eq!(st.paced_level0_micros, st.stall_micros, "{st:?}");
    let others = st.paced_level0_compaction_micros + st.paced_memtable_micros;
    assert_eq!(others + st.paced_one_level_micros, 0, "{st:?}");
    assert!(started.elapsed().as_secs_f64() < 5.0);
    assert_eq!(
        db.get(63u32.to_be_bytes()).unwrap().as_deref(),
        Some(&value[..])
    );
}

/// Regression: while a flush held the only frozen memtable slot, writes
/// ran at full speed into the active memtable and stopped dead when it
/// filled (at 16M keys of 1 KiB, for most of a second twice a run, 0.09 of
/// the median rate). Its last quarter is now written at a falling rate,
/// which gives a slow flush time to end. Here the flush never ends (out of
/// space, retried after a backoff) and none has ended before, so nothing
/// says when it will (`db/job_eta.rs`): writes are paced from three
/// quarters on, and none stops before the memtable is full.
#[test]
fn the_last_quarter_of_a_memtable_is_paced_while_its_flush_runs() {
    let fs = FaultFs::new();
    let buffer = 1usize << 20;
    let opts = Options {
        file_system: Some(Arc::new(fs.clone())),
        write_buffer_bytes: buffer,
        max_immutable_memtables: 1,
        delayed_write_rate_bytes: 1 << 20,
        // No key filter: the memtables' bytes are their entries'.
        memtable_filter_ratio: 0.0,
        ..Options::default()
    };
    let db = DB::open(&opts, "/db").unwrap();
    fs.fail_nth_named(
        ".ph",
        &[OpKind::Create],
        0,
        true,
        io::ErrorKind::StorageFull,
    );
    let frozen = |db: &DB| db.stats().immutable_memtables;
    let value = [3u8; 1000];
    let mut i = 0u32;
    while frozen(&db) == 0 {
        db.put(i.to_be_bytes(), value).unwrap();
        i += 1;
    }
    let frozen_bytes = db.stats().memtable_bytes;
    let active = |db: &DB| (db.stats().memtable_bytes - frozen_bytes) as usize;
    let stalled = |db: &DB| db.stats().stall_micros;

    while active(&db) < buffer * 3 / 4 - 2 * value.len() {
        db.put(i.to_be_bytes(), value).unwrap();
        i += 1;
    }
    assert_eq!(stalled(&db), 0, "paced below three quarters");
    let paced_from = std::time::Instant::now();
    while active(&db) < buffer * 15 / 16 - 2 * value.len() {
        db.put(i.to_be_bytes(), value).unwrap();
        i += 1;
    }
    let s = db.stats();
    assert_eq!(s.immutable_memtables, 1, "the flush has not ended");
    assert_eq!((s.memtable_stall_micros, s.level0_stall_micros), (0, 0));
    // Three sixteenths at 0.8, 0.64 and 0.51 MiB/s (nothing measured, so
    // 0.8 of the option first): 0.3 s, of which writers sleep the part
    // their writes do not take (on a busy machine, less than 250 ms).
    let took = paced_from.elapsed();
    assert!(took.as_millis() >= 250, "{took:?} for three sixteenths");
    assert!(s.stall_micros > 0, "paced");
    assert_eq!(s.paced_memtable_micros, s.stall_micros, "for the flush");
    assert_eq!(
        db.get(0u32.to_be_bytes()).unwrap().as_deref(),
        Some(&value[..])
    );
}

/// With `memory_budget_bytes`, the memtables stay within half of it
/// however fast writes come (frozen ones included), and the block cache
/// gets its quarter.
#[test]
fn memtables_stay_within_half_the_memory_budget() {
    let dir = tempfile::tempdir().unwrap();
    let budget = 3 << 20;
    let opts = Options {
        memory_budget_bytes: Some(budget),
        read_mode: tphdb::fs::ReadMode::Pread,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let value = vec![5u8; 1000];
    let mut peak = 0;
    for i in 0..8192u32 {
        db.put(i.to_be_bytes(), &value).unwrap();
        peak = peak.max(db.stats().memtable_bytes);
    }
    assert!(
        peak <= (budget / 2) as u64 + 2048,
        "{peak} bytes of memtables"
    );
    assert!(db.stats().flushes >= 10, "a 512 KiB write buffer");
    db.get(7u32.to_be_bytes()).unwrap();
    let cache = db.stats().block_cache_capacity;
    assert_eq!(cache, (budget / 4) as u64);
}
