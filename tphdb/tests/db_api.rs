//! The public API end to end on the real file system.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tphdb::{
    Direction, Error, IteratorMode, Options, ReadOptions, SyncPolicy, WriteBatch, WriteOptions, DB,
};

mod common;

use common::{collect, small, spread_key};

#[test]
fn empty_keys_empty_values_and_values_of_several_mib() {
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&small(), dir.path()).unwrap();
    db.put(b"", b"empty key").unwrap();
    db.put(b"empty value", b"").unwrap();
    let big: Vec<u8> = (0..5 << 20).map(|i| (i * 31 % 251) as u8).collect();
    db.put(b"big", &big).unwrap();
    for _ in 0..2 {
        assert_eq!(db.get(b"").unwrap().as_deref(), Some(&b"empty key"[..]));
        assert_eq!(db.get(b"empty value").unwrap().as_deref(), Some(&b""[..]));
        assert!(db.get(b"big").unwrap().as_deref() == Some(&big[..]));
        db.flush().unwrap();
    }
    db.close().unwrap();
    let db = DB::open(&small(), dir.path()).unwrap();
    assert!(db.get(b"big").unwrap().as_deref() == Some(&big[..]));
    assert_eq!(db.get(b"").unwrap().as_deref(), Some(&b"empty key"[..]));
}

#[test]
fn batches_multi_get_and_pinned_reads() {
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&small(), dir.path()).unwrap();
    let mut b = WriteBatch::new();
    b.put(b"a", b"1");
    b.put(b"b", b"2");
    b.delete(b"a");
    b.put(b"c", b"3");
    db.write(b).unwrap();
    assert_eq!(db.get(b"a").unwrap(), None, "later ops in a batch win");
    let got = db.multi_get([&b"a"[..], b"b", b"c", b"d"]);
    let got: Vec<Option<Vec<u8>>> = got.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(
        got,
        vec![None, Some(b"2".to_vec()), Some(b"3".to_vec()), None]
    );
    assert_eq!(&db.get_pinned(b"c").unwrap().unwrap()[..], b"3");
    db.write(WriteBatch::new()).unwrap();
    let too_long = vec![0u8; tphdb::piece::MAX_KEY_BYTES + 1];
    assert!(matches!(
        db.put(&too_long, b"x"),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn iterators_bounds_prefixes_and_raw_cursors() {
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&small(), dir.path()).unwrap();
    let mut model = BTreeMap::new();
    for i in 0..3000u32 {
        let k = format!("{}/{:05}", ["a", "b", "c"][i as usize % 3], i);
        db.put(&k, i.to_le_bytes()).unwrap();
        model.insert(k.into_bytes(), i.to_le_bytes().to_vec());
        if i % 5 == 0 {
            let d = format!("b/{:05}", i);
            db.delete(&d).unwrap();
            model.remove(d.as_bytes());
        }
        if i == 1500 {
            db.flush().unwrap();
        }
    }
    let all: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(collect(db.iterator(IteratorMode::Start)), all);
    let rev: Vec<_> = all.iter().rev().cloned().collect();
    assert_eq!(collect(db.iterator(IteratorMode::End)), rev);
    let b_only: Vec<_> = all
        .iter()
        .filter(|(k, _)| k.starts_with(b"b/"))
        .cloned()
        .collect();
    assert_eq!(collect(db.prefix_iterator(b"b/")), b_only);
    let from: Vec<_> = all
        .iter()
        .filter(|(k, _)| k.as_slice() >= &b"b/01000"[..])
        .cloned()
        .collect();
    assert_eq!(
        collect(db.iterator(IteratorMode::From(b"b/01000", Direction::Forward))),
        from
    );
    let opts = ReadOptions {
        lower_bound: Some(b"a/00100".to_vec()),
        upper_bound: Some(b"a/00200".to_vec()),
        ..ReadOptions::default()
    };
    let bounded: Vec<_> = all
        .iter()
        .filter(|(k, _)| k.as_slice() >= &b"a/00100"[..] && k.as_slice() < &b"a/00200"[..])
        .cloned()
        .collect();
    assert_eq!(collect(db.iterator_opt(IteratorMode::Start, opts)), bounded);

    // "b/" keys are i = 1 (mod 3); those with i = 0 (mod 5) were deleted.
    let mut raw = db.raw_iterator();
    raw.seek(b"b/00010");
    assert_eq!(raw.key(), Some(&b"b/00013"[..]), "b/00010 was deleted");
    raw.prev();
    assert_eq!(raw.key(), Some(&b"b/00007"[..]));
    raw.seek_for_prev(b"b/00010");
    assert_eq!(raw.key(), Some(&b"b/00007"[..]));
    raw.next();
    raw.next();
    assert_eq!(raw.key(), Some(&b"b/00016"[..]));
    raw.seek_to_last();
    assert_eq!(raw.key(), Some(all.last().unwrap().0.as_slice()));
    raw.status().unwrap();
}

#[test]
fn snapshots_see_their_moment_through_flush_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&small(), dir.path()).unwrap();
    for i in 0..2000u32 {
        db.put(format!("k{i:05}"), b"old").unwrap();
    }
    let snap = db.snapshot();
    for i in 0..2000u32 {
        if i % 2 == 0 {
            db.put(format!("k{i:05}"), b"new").unwrap();
        } else {
            db.delete(format!("k{i:05}")).unwrap();
        }
    }
    db.put(b"zzz", b"after").unwrap();
    db.compact_range(None, None).unwrap();
    for i in (0..2000u32).step_by(7) {
        assert_eq!(
            snap.get(format!("k{i:05}")).unwrap().as_deref(),
            Some(&b"old"[..])
        );
    }
    assert_eq!(snap.get(b"zzz").unwrap(), None);
    assert_eq!(snap.iterator(IteratorMode::Start).count(), 2000);
    assert_eq!(db.iterator(IteratorMode::Start).count(), 1001);
    assert_eq!(db.get(b"k00001").unwrap(), None);
}

#[test]
fn one_process_writes_many_read_only_readers_share() {
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&small(), dir.path()).unwrap();
    db.put(b"k", b"v").unwrap();
    assert!(matches!(
        DB::open(&small(), dir.path()),
        Err(Error::Busy(_))
    ));
    assert!(matches!(
        DB::open_for_read_only(&small(), dir.path()),
        Err(Error::Busy(_))
    ));
    db.close().unwrap();
    let r1 = DB::open_for_read_only(&small(), dir.path()).unwrap();
    let r2 = DB::open_for_read_only(&small(), dir.path()).unwrap();
    assert_eq!(
        r1.get(b"k").unwrap().as_deref(),
        Some(&b"v"[..]),
        "read from the WAL"
    );
    assert_eq!(r2.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    assert!(matches!(r1.put(b"x", b"y"), Err(Error::ReadOnly(_))));
    assert!(matches!(r1.flush(), Err(Error::ReadOnly(_))));
    assert!(matches!(
        DB::open(&small(), dir.path()),
        Err(Error::Busy(_))
    ));
    drop(r1);
    drop(r2);
    DB::open(&small(), dir.path()).unwrap();
}

#[test]
fn create_and_exists_flags_and_destroy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let no_create = Options {
        create_if_missing: false,
        ..small()
    };
    assert!(matches!(
        DB::open(&no_create, &path),
        Err(Error::InvalidArgument(_))
    ));
    assert!(DB::open_for_read_only(&small(), &path).is_err());
    DB::open(&small(), &path).unwrap().close().unwrap();
    let must_be_new = Options {
        error_if_exists: true,
        ..small()
    };
    assert!(matches!(
        DB::open(&must_be_new, &path),
        Err(Error::InvalidArgument(_))
    ));
    DB::destroy(&small(), &path).unwrap();
    assert!(!path.exists());
    assert!(DB::open(
        &Options {
            fanout: 1,
            ..small()
        },
        &path
    )
    .is_err());
}

#[test]
fn reopen_after_every_kind_of_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let mut model = BTreeMap::new();
    let mut n = 0u32;
    let mut write = |db: &DB, count: u32, model: &mut BTreeMap<Vec<u8>, Vec<u8>>| {
        for _ in 0..count {
            let k = format!("key{:06}", n * 7 % 9000).into_bytes();
            let v = format!("v{n}").into_bytes();
            db.put(&k, &v).unwrap();
            model.insert(k, v);
            n += 1;
        }
    };
    let verify = |db: &DB, model: &BTreeMap<Vec<u8>, Vec<u8>>| {
        for (k, v) in model {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
        }
        assert_eq!(db.iterator(IteratorMode::Start).count(), model.len());
    };
    for shutdown in 0..6 {
        let db = DB::open(&small(), dir.path()).unwrap();
        verify(&db, &model);
        write(&db, 5000, &mut model);
        match shutdown {
            0 => db.close().unwrap(),
            1 => drop(db),
            2 => {
                db.flush().unwrap();
                drop(db);
            }
            3 => {
                db.compact_range(None, None).unwrap();
                db.close().unwrap();
            }
            4 => {
                // Background work still running when dropped.
                write(&db, 20000, &mut model);
                drop(db);
            }
            _ => {
                db.flush().unwrap();
                std::mem::forget(db);
                // A leaked handle keeps the lock: only a new process could
                // open it now, which the crash tests cover.
                return;
            }
        }
    }
}

#[test]
fn sync_policies_sync() {
    for policy in [
        SyncPolicy::EveryWrite,
        SyncPolicy::IntervalMs(5),
        SyncPolicy::Never,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            sync_policy: policy,
            ..small()
        };
        let db = DB::open(&opts, dir.path()).unwrap();
        for i in 0..50u32 {
            db.put(i.to_le_bytes(), b"v").unwrap();
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        db.put_opt(
            b"synced",
            b"v",
            &WriteOptions {
                sync: true,
                ..WriteOptions::default()
            },
        )
        .unwrap();
        let syncs = db.stats().wal_syncs;
        match policy {
            SyncPolicy::EveryWrite => assert!(syncs >= 51, "{syncs}"),
            SyncPolicy::IntervalMs(_) => assert!(syncs >= 2, "{syncs}"),
            SyncPolicy::Never => assert_eq!(syncs, 1),
            _ => unreachable!("the policies above"),
        }
    }
}

#[test]
fn a_million_keys_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        write_buffer_bytes: 8 << 20,
        tph_target_bytes: 8 << 20,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let mut b = WriteBatch::new();
    for i in 0..1_000_000u64 {
        b.put(spread_key(i), i.to_le_bytes());
        if b.len() == 1000 {
            db.write(std::mem::take(&mut b)).unwrap();
        }
    }
    db.close().unwrap();
    let db = DB::open(&opts, dir.path()).unwrap();
    db.flush().unwrap();
    for i in (0..1_000_000u64).step_by(7) {
        assert_eq!(
            db.get(spread_key(i)).unwrap().as_deref(),
            Some(&i.to_le_bytes()[..])
        );
    }
    assert_eq!(db.iterator(IteratorMode::Start).count(), 1_000_000);
    let st = db.stats();
    assert!(st.reads_per_get <= 1.01, "{}", st.reads_per_get);
    assert!(st.index_bytes_per_key < 4.0, "{}", st.index_bytes_per_key);
}

/// One-level mode keeps flushes out of level 0 and the tree at most two
/// levels deep: level 1, and one level below it once a level-1 TPH nears
/// its target (with level 1 the only level, they grew with the database
/// and each flush rewrote more of them).
#[test]
fn one_level_mode_grows_a_second_level_and_no_third() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        one_level: true,
        write_buffer_bytes: 64 << 10,
        tph_target_bytes: 128 << 10,
        fanout: 2,
        max_levels: 4,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let keys = 40_000u64;
    for i in 0..keys {
        db.put(spread_key(i), [i as u8; 100]).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let st = db.stats();
    let tphs = |level: usize| st.levels.get(level).map_or(0, |l| l.tphs);
    assert_eq!(tphs(0), 0, "flushes go to level 1");
    assert!(tphs(2) > 0, "no second level: {}", st.level_table());
    assert_eq!(tphs(3), 0, "a third level: {}", st.level_table());
    // Level 2 holds far more than its TPHs' target: it is the bottom.
    let bottom = &st.levels[2];
    assert!(bottom.file_bytes > bottom.tphs * 2 * opts.tph_target_bytes);
    db.close().unwrap();
    let db = DB::open(&opts, dir.path()).unwrap();
    for i in (0..keys).step_by(3) {
        assert_eq!(
            db.get(spread_key(i)).unwrap().as_deref(),
            Some(&[i as u8; 100][..])
        );
    }
    assert_eq!(db.iterator(IteratorMode::Start).count(), keys as usize);
}

/// Writers, readers and iterators at once, with flushes and compactions
/// running: every value read is one that was written for that key.
#[test]
fn concurrent_writers_readers_and_iterators() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        write_buffer_bytes: 64 << 10,
        tph_target_bytes: 64 << 10,
        fanout: 2,
        l0_compaction_trigger: 2,
        ..Options::default()
    };
    let db = Arc::new(DB::open(&opts, dir.path()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let keys = 500u32;
    // A value names its key and carries a writer and a counter.
    let check = |k: &[u8], v: &[u8]| {
        let s = std::str::from_utf8(v).unwrap();
        assert!(
            s.starts_with(std::str::from_utf8(k).unwrap()),
            "{s} is not a value of {k:?}"
        );
    };
    let mut handles = Vec::new();
    for w in 0..3u32 {
        let db = db.clone();
        handles.push(std::thread::spawn(move || {
            for n in 0..6000u32 {
                let k = format!("key{:04}", (n * 7 + w * 13) % keys);
                if n % 10 == 9 {
                    db.delete(&k).unwrap();
                } else {
                    let mut b = WriteBatch::new();
                    b.put(&k, format!("{k}/w{w}/n{n}"));
                    let k2 = format!("key{:04}", (n * 11 + w) % keys);
                    b.put(&k2, format!("{k2}/w{w}/n{n}"));
                    db.write(b).unwrap();
                }
            }
        }));
    }
    for _ in 0..2 {
        let (db, stop) = (db.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let k = format!("key{:04}", i % keys);
                if let Some(v) = db.get(&k).unwrap() {
                    check(k.as_bytes(), &v);
                }
                i += 1;
            }
        }));
    }
    {
        let (db, stop) = (db.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut last: Option<Vec<u8>> = None;
                for r in db.iterator(IteratorMode::Start) {
                    let (k, v) = r.unwrap();
                    check(&k, &v);
                    assert!(last.as_deref().is_none_or(|l| l < &k[..]));
                    last = Some(k.to_vec());
                }
            }
        }));
    }
    for h in handles.drain(..3) {
        h.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let st = db.stats();
    assert!(st.flushes > 0 && st.compactions > 0, "{st:?}");
}

/// Manual compactions from several threads at once, with writes going on:
/// each thread's last writes must all be there afterwards. (Two manual
/// compactions once merged the same TPHs, and one's result dropped the
/// other's writes.)
#[test]
fn concurrent_manual_compactions_lose_no_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&small(), dir.path()).unwrap();
    let threads = 3u32;
    std::thread::scope(|s| {
        for t in 0..threads {
            let db = &db;
            s.spawn(move || {
                for round in 0..12u32 {
                    for i in 0..300u32 {
                        let k = format!("t{t}-{i:04}");
                        db.put(&k, format!("{k}-r{round}")).unwrap();
                    }
                    db.compact_range(None, None).unwrap();
                }
            });
        }
    });
    for t in 0..threads {
        for i in 0..300u32 {
            let k = format!("t{t}-{i:04}");
            assert_eq!(
                db.get(&k).unwrap(),
                Some(format!("{k}-r11").into_bytes()),
                "{k}"
            );
        }
    }
}

/// The slowest flush (what writes wait for once the active memtable fills
/// before the frozen one is written) is one of the flushes counted: at
/// most their total time, at least their average.
#[test]
fn stats_count_the_slowest_flush() {
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&small(), dir.path()).unwrap();
    assert_eq!(db.stats().slowest_flush_micros, 0);
    for round in 0..3u64 {
        for i in 0..1000 {
            db.put(spread_key(round * 1000 + i), [7u8; 100]).unwrap();
        }
        db.flush().unwrap();
    }
    let st = db.stats();
    assert!(st.flushes >= 3, "{st:?}");
    assert!(st.slowest_flush_micros > 0, "{st:?}");
    assert!(st.slowest_flush_micros <= st.flush_micros, "{st:?}");
    assert!(
        st.slowest_flush_micros * st.flushes >= st.flush_micros,
        "{st:?}"
    );
}
