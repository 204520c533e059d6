//! Space comes back after deletes once the background settles, without
//! new writes reaching the TPHs that hold the garbage.

mod common;

use common::small as options;
use tphdb::{DBStats, Options, DB};

const KEYS: u32 = 20_000;

fn key(i: u32) -> String {
    format!("key{i:06}")
}

fn value(i: u32) -> Vec<u8> {
    let mut v = format!("value of {i} ").into_bytes();
    v.resize(200, b'.');
    v
}

/// An overwrite of key `i`, as large as `value(i)`.
fn newer(i: u32) -> Vec<u8> {
    let mut v = format!("newer {i} ").into_bytes();
    v.resize(200, b'.');
    v
}

/// Bytes of the files the current version reads.
fn file_bytes(db: &DB) -> u64 {
    db.stats().levels.iter().map(|l| l.file_bytes).sum()
}

/// Loads every key and settles: the data sits in levels below level 0.
fn loaded(dir: &std::path::Path) -> (DB, u64) {
    loaded_with(dir, &options())
}

fn loaded_with(dir: &std::path::Path, opts: &Options) -> (DB, u64) {
    let db = DB::open(opts, dir).unwrap();
    for i in 0..KEYS {
        db.put(key(i), value(i)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let stats = db.stats();
    assert!(stats.levels.len() >= 3, "{:?}", stats.levels);
    let bytes = file_bytes(&db);
    (db, bytes)
}

/// Deletes the keys `deleted` picks, settles, and checks that at most
/// `1 / at_most_one_in` of the loaded bytes are left.
fn delete_and_settle(
    db: &DB,
    loaded_bytes: u64,
    deleted: impl Fn(u32) -> bool,
    at_most_one_in: u64,
) -> DBStats {
    for i in (0..KEYS).filter(|&i| deleted(i)) {
        db.delete(key(i)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let left = file_bytes(db);
    let stats = db.stats();
    assert!(
        left * at_most_one_in < loaded_bytes,
        "{left} of {loaded_bytes} bytes left: {:#?}",
        stats.levels
    );
    stats
}

#[test]
fn deleting_every_key_gives_the_space_back() {
    let dir = tempfile::tempdir().unwrap();
    let (db, loaded_bytes) = loaded(dir.path());
    let stats = delete_and_settle(&db, loaded_bytes, |_| true, 50);
    assert!(stats.writes_by_cause.gc_fold > 0 || stats.pieces_dropped > 0);
    assert_eq!(db.iterator(tphdb::IteratorMode::Start).count(), 0);
    for i in (0..KEYS).step_by(97) {
        assert_eq!(db.get(key(i)).unwrap(), None);
    }
}

#[test]
fn deleting_most_keys_folds_what_is_left() {
    let dir = tempfile::tempdir().unwrap();
    let (db, loaded_bytes) = loaded(dir.path());
    // Three keys in five go: every bottom piece keeps two in five live,
    // past `gc_dead_ratio`; the bound on the whole database is not needed.
    drop(db);
    let opts = Options {
        max_garbage_ratio: 1.0,
        ..options()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let deleted = |i: u32| i % 5 < 3;
    let stats = delete_and_settle(&db, loaded_bytes, deleted, 2);
    assert!(stats.writes_by_cause.gc_fold > 0, "{stats:#?}");
    let live: u64 = stats.levels.iter().map(|l| l.live_entries).sum();
    let stored: u64 = stats.levels.iter().map(|l| l.stored_entries).sum();
    assert_eq!(live, stored, "{:#?}", stats.levels);
    for i in 0..KEYS {
        let want = (!deleted(i)).then(|| value(i));
        assert_eq!(db.get(key(i)).unwrap().map(|v| v.to_vec()), want, "key {i}");
    }
    drop(db);
    let db = DB::open(&options(), dir.path()).unwrap();
    assert_eq!(
        db.iterator(tphdb::IteratorMode::Start).count() as u32,
        KEYS / 5 * 2
    );
}

#[test]
fn a_ratio_of_one_collects_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (db, loaded_bytes) = loaded(dir.path());
    drop(db);
    let opts = Options {
        gc_dead_ratio: 1.0,
        max_garbage_ratio: 1.0,
        ..options()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    for i in (0..KEYS).filter(|i| i % 5 < 3) {
        db.delete(key(i)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    assert_eq!(db.stats().writes_by_cause.gc_fold, 0);
    assert!(file_bytes(&db) * 2 > loaded_bytes);
}

/// Overwrites one key in three, spread over every TPH, and settles; returns
/// the garbage share of the stored bytes.
fn overwrite_a_third(max_garbage_ratio: f64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    // The bottom may not deepen, during the load either: a new level would
    // rewrite every entry, and a load that had reached level 3 by its
    // timing left the overwrites in level 2, shadowing bottom entries the
    // garbage estimate does not count (1 run in 5 found no garbage).
    let opts = Options {
        max_garbage_ratio,
        max_levels: 2,
        ..options()
    };
    let (db, _) = loaded_with(dir.path(), &opts);
    // As large as the old values: level 1 overflows into the bottom.
    for i in (0..KEYS).filter(|i| i % 3 == 0) {
        db.put(key(i), newer(i)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    for i in 0..KEYS {
        let want = if i % 3 == 0 { newer(i) } else { value(i) };
        assert_eq!(db.get(key(i)).unwrap().unwrap().to_vec(), want, "key {i}");
    }
    let stats = db.stats();
    let garbage: u64 = stats.levels.iter().map(|l| l.garbage_bytes).sum();
    garbage as f64 / file_bytes(&db) as f64
}

#[test]
fn overwrites_spread_over_every_tph_are_collected_past_max_garbage_ratio() {
    // Every bottom TPH gets a share of the garbage, each below
    // `gc_dead_ratio` (0.5).
    let unbounded = overwrite_a_third(1.0);
    assert!(unbounded > 0.1, "{unbounded}");
    let bounded = overwrite_a_third(0.05);
    assert!(bounded <= 0.05, "{bounded}");
}

/// Overwrites that stay above the bottom hide the older versions below
/// them, which no fold of the TPHs that hold them can see as garbage: the
/// TPHs above are pushed down once those versions pass
/// `max_garbage_ratio`, and the folds below then free them.
#[test]
fn versions_hidden_below_overwrites_are_collected_past_max_garbage_ratio() {
    let dir = tempfile::tempdir().unwrap();
    let (db, loaded_bytes) = loaded(dir.path());
    drop(db);
    // Level 1's TPHs now reach their push-down thresholds only past the
    // size of the whole database: the overwrites stay there.
    let opts = Options {
        max_garbage_ratio: 0.05,
        tph_target_bytes: 16 << 20,
        l0_compaction_trigger: 1,
        ..options()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    // An eighth of the keys: less than level 1 holds before a push-down.
    let overwritten = |i: u32| i % 8 == 0;
    for i in (0..KEYS).filter(|&i| overwritten(i)) {
        db.put(key(i), newer(i)).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    for i in 0..KEYS {
        let want = if overwritten(i) { newer(i) } else { value(i) };
        assert_eq!(db.get(key(i)).unwrap().unwrap().to_vec(), want, "key {i}");
    }
    let stats = db.stats();
    let left = file_bytes(&db);
    let garbage: u64 = stats
        .levels
        .iter()
        .map(|l| l.garbage_bytes + l.shadowed_bytes)
        .sum();
    assert!(
        left * 10 < loaded_bytes * 11,
        "{left} bytes left of {loaded_bytes} loaded: {:#?}",
        stats.levels
    );
    assert!(
        garbage as f64 <= 0.05 * left as f64,
        "{garbage} of {left}: {:#?}",
        stats.levels
    );
}
