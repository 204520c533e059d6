//! Bulk loads (`DB::ingest`, `DB::bulk_loader`) and checkpoints on the real
//! file system.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tphdb::{Error, IteratorMode, Options, DB};

mod common;

use common::small;

fn key(i: u64) -> Vec<u8> {
    format!("key{:08}", i.wrapping_mul(0x9e37_79b9) % 1_000_000).into_bytes()
}

fn read_all(db: &DB) -> BTreeMap<Vec<u8>, Vec<u8>> {
    db.iterator(IteratorMode::Start)
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .collect()
}

#[test]
fn a_load_into_an_empty_database_skips_the_wal_and_level_zero() {
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&small(), dir.path()).unwrap();
    let mut model = BTreeMap::new();
    let mut loader = db.bulk_loader();
    // Unsorted, with repeats across and within chunks: the last one wins.
    for i in 0..60_000u64 {
        let k = key(i % 45_000);
        let v = format!("value {i}").into_bytes();
        loader.put(&k, &v).unwrap();
        model.insert(k, v);
    }
    let report = loader.finish().unwrap();
    assert_eq!(report.entries, 60_000);
    assert!(report.chunks > 2, "{report:?}");
    let stats = db.stats();
    // The one WAL header of the memtable the load froze (it was empty).
    assert!(stats.writes_by_cause.wal < 100, "a load writes no WAL");
    assert_eq!(stats.writes_by_cause.l0_merge, 0, "nor merges level 0");
    assert_eq!(read_all(&db), model);
    db.close().unwrap();

    let db = DB::open(&small(), dir.path()).unwrap();
    assert_eq!(read_all(&db), model);
    for (k, v) in model.iter().step_by(97) {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    db.close().unwrap();
    assert!(DB::verify(&small(), dir.path()).unwrap().is_ok());
}

#[test]
fn a_load_is_newer_than_earlier_writes_and_older_than_later_ones() {
    for one_level in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            one_level,
            ..small()
        };
        let db = DB::open(&opts, dir.path()).unwrap();
        // Older versions everywhere: pieces, level 0 and the memtable.
        for i in 0..5_000 {
            db.put(key(i), b"old").unwrap();
        }
        db.flush().unwrap();
        for i in 0..2_500 {
            db.put(key(i), b"older in the memtable").unwrap();
        }
        db.ingest((0..5_000).map(|i| (key(i), b"loaded".to_vec())))
            .unwrap();
        for i in 0..1_000 {
            db.put(key(i), b"newest").unwrap();
        }
        for round in 0..2 {
            for i in (0..5_000).step_by(7) {
                let want: &[u8] = if i < 1_000 { b"newest" } else { b"loaded" };
                assert_eq!(
                    db.get(key(i)).unwrap().as_deref(),
                    Some(want),
                    "key {i}, one_level {one_level}, round {round}"
                );
            }
            db.compact_range(None, None).unwrap();
        }
        db.close().unwrap();
    }
}

#[test]
fn writers_keep_going_while_a_load_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(DB::open(&small(), dir.path()).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, stop) = (db.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                db.put(format!("w{n:08}"), n.to_le_bytes()).unwrap();
                n += 1;
            }
            n
        })
    };
    db.ingest((0..100_000u64).map(|i| (format!("l{i:08}"), i.to_le_bytes())))
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    let all = read_all(&db);
    assert_eq!(all.len() as u64, 100_000 + written);
    for i in (0..written).step_by(13) {
        assert_eq!(
            db.get(format!("w{i:08}")).unwrap(),
            Some(i.to_le_bytes().to_vec())
        );
    }
}

#[test]
fn a_load_rejects_oversized_keys_and_read_only_databases() {
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&small(), dir.path()).unwrap();
    let huge = vec![0u8; (1 << 20) + 1];
    let mut loader = db.bulk_loader();
    assert!(matches!(
        loader.put(&huge, b"v"),
        Err(Error::InvalidArgument(_))
    ));
    drop(loader);
    db.put(b"k", b"v").unwrap();
    db.close().unwrap();
    let ro = DB::open_for_read_only(&small(), dir.path()).unwrap();
    assert!(matches!(ro.ingest([(b"a", b"b")]), Err(Error::ReadOnly(_))));
}

#[test]
fn a_checkpoint_taken_under_writes_holds_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let copies = tempfile::tempdir().unwrap();
    let db = Arc::new(DB::open(&small(), dir.path()).unwrap());
    let acknowledged = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, acked, stop) = (db.clone(), acknowledged.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                db.put(format!("k{n:08}"), vec![n as u8; 100]).unwrap();
                n += 1;
                acked.store(n, Ordering::Release);
            }
        })
    };
    while acknowledged.load(Ordering::Acquire) < 20_000 {
        std::thread::yield_now();
    }
    let mut checkpoints = Vec::new();
    for c in 0..3 {
        let before = acknowledged.load(Ordering::Acquire);
        let to = copies.path().join(format!("copy{c}"));
        db.checkpoint(&to).unwrap();
        checkpoints.push((to, before));
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    // The original moves on: its compactions delete pieces the copies
    // still name.
    db.compact_range(None, None).unwrap();
    let total = acknowledged.load(Ordering::Acquire);
    for (to, before) in checkpoints {
        let copy = DB::open(&small(), &to).unwrap();
        let keys: Vec<Vec<u8>> = read_all(&copy).into_keys().collect();
        // A prefix of the writes, holding every one acknowledged before.
        assert!(keys.len() as u64 >= before && keys.len() as u64 <= total);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(k, format!("k{i:08}").as_bytes());
        }
        copy.put(b"the copy", b"is writable").unwrap();
        copy.close().unwrap();
        let report = DB::verify(&small(), &to).unwrap();
        assert!(report.is_ok(), "{report:?}");
    }
    assert_eq!(db.get(b"the copy").unwrap(), None);
    // The target must be new.
    let existing = copies.path().join("copy0");
    assert!(matches!(
        db.checkpoint(&existing),
        Err(Error::InvalidArgument(_))
    ));
}
