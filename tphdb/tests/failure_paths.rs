//! The paths between a fault and a crash: a disk that fills up and frees
//! again, appends that fail half-written, background jobs that fail and must
//! retry, opens that fail part way. Each test is a regression test for a
//! way these paths lost or refused data; its header says which.

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tphdb::fs::{FaultFs, FileSystem, OpKind};
use tphdb::{Error, Options, SyncPolicy, WriteOptions, DB};

const DIR: &str = "/db";

fn options(fs: &FaultFs) -> Options {
    Options {
        file_system: Some(Arc::new(fs.clone())),
        ..Options::default()
    }
}

fn synced() -> WriteOptions {
    WriteOptions {
        sync: true,
        ..WriteOptions::default()
    }
}

/// Bytes of every file in the database directory.
fn used_bytes(fs: &FaultFs) -> u64 {
    fs.list(Path::new(DIR))
        .unwrap()
        .iter()
        .map(|n| fs.file_size(&Path::new(DIR).join(n)).unwrap())
        .sum()
}

/// The two kinds of crash: the process dies (everything handed to the OS
/// survives) or the machine loses power (unsynced writes may be lost, torn
/// or garbled, each drawn from the seed).
fn crash_images(fs: &FaultFs, seed: u64) -> [(FaultFs, &'static str); 2] {
    [
        (fs.snapshot(), "process crash"),
        (fs.crash(seed), "power loss"),
    ]
}

/// Fails the next piece creation, or every one from now on when
/// `persistent`: flushes run out of space.
fn fail_piece_creates(fs: &FaultFs, persistent: bool) {
    fs.fail_nth_named(
        ".ph",
        &[OpKind::Create],
        0,
        persistent,
        io::ErrorKind::StorageFull,
    );
}

fn immutable_memtables(db: &DB) -> String {
    db.property_value("tphdb.num-immutable-mem-table")
        .unwrap()
        .unwrap()
}

fn key(i: u32) -> String {
    format!("k{i:05}")
}

/// Puts keys from `*next` on until a memtable is frozen.
fn put_until_frozen(db: &DB, next: &mut u32) {
    let start = *next;
    while immutable_memtables(db) == "0" {
        db.put(key(*next), [1u8; 200]).unwrap();
        *next += 1;
        assert!(*next - start < 10_000, "the memtable never filled");
    }
}

/// Regression: after a disk-full episode the WAL was marked broken and the
/// writer moved to a new WAL without syncing or cutting the old one. Replay
/// stops at a torn WAL and skips later ones, so a synced write acknowledged
/// after the episode was lost on power loss, or survived while an earlier
/// write was gone (no prefix of the writes).
#[test]
fn a_synced_write_after_a_disk_full_episode_survives_a_crash() {
    for seed in 0..40 {
        let torn = seed % 2 == 1;
        let failed_puts = 1 + seed / 2 % 2;
        let fs = FaultFs::new();
        fs.set_torn_appends(torn);
        let db = DB::open(&options(&fs), DIR).unwrap();
        db.put(b"a", b"1").unwrap();
        fs.set_capacity(Some(used_bytes(&fs)));
        for i in 0..failed_puts {
            let e = db.put(format!("b{i}"), [7u8; 300]).unwrap_err();
            assert!(e.is_no_space(), "{e}");
        }
        fs.set_capacity(None);
        // Space is back for the WAL, but no flush gets to write `a` out:
        // only the WAL holds it.
        fs.fail_nth_named(
            ".ph",
            &[OpKind::Create],
            0,
            true,
            io::ErrorKind::StorageFull,
        );
        db.put_opt(b"c", b"3", &synced()).unwrap();
        for (image, kind) in crash_images(&fs, seed) {
            let what = format!("seed {seed}, {failed_puts} failed puts, torn {torn}, {kind}");
            let db =
                DB::open(&options(&image), DIR).unwrap_or_else(|e| panic!("{what}: reopen: {e}"));
            assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]), "{what}");
            assert_eq!(db.get(b"c").unwrap().as_deref(), Some(&b"3"[..]), "{what}");
            for i in 0..failed_puts {
                assert_eq!(
                    db.get(format!("b{i}")).unwrap(),
                    None,
                    "{what}: failed write"
                );
            }
        }
        drop(db);
    }
}

/// Regression: an append that wrote part of its record before failing left
/// those bytes in the WAL; later records followed them, and replay stopped
/// at the partial record, dropping every acknowledged write after it. The
/// remains of a failed write must never reach the log or become visible.
#[test]
fn a_half_written_append_is_cut_from_the_wal() {
    let fs = FaultFs::new();
    fs.set_torn_appends(true);
    let db = DB::open(&options(&fs), DIR).unwrap();
    db.put(b"before", b"1").unwrap();
    fs.fail_nth_named(
        ".log",
        &[OpKind::Write],
        0,
        false,
        io::ErrorKind::StorageFull,
    );
    assert!(db.put(b"failed", [9u8; 500]).unwrap_err().is_no_space());
    for i in 0..20u32 {
        db.put(format!("after{i}"), i.to_le_bytes()).unwrap();
    }
    db.put_opt(b"last", b"synced", &synced()).unwrap();
    assert_eq!(db.get(b"failed").unwrap(), None);
    for seed in 0..20 {
        for (image, kind) in crash_images(&fs, seed) {
            let what = format!("seed {seed}, {kind}");
            let db = DB::open(&options(&image), DIR).unwrap();
            assert_eq!(db.stats().wal_dropped_bytes, 0, "{what}: a clean WAL");
            assert_eq!(db.get(b"failed").unwrap(), None, "{what}");
            assert!(db.get(b"before").unwrap().is_some(), "{what}");
            for i in 0..20u32 {
                assert!(
                    db.get(format!("after{i}")).unwrap().is_some(),
                    "{what}: {i}"
                );
            }
            assert!(db.get(b"last").unwrap().is_some(), "{what}");
        }
    }
}

/// Regression: a MANIFEST append that failed for lack of space (tolerated
/// when releasing deferred deletions) still advanced the writer's block
/// offset, so every later edit was framed at the wrong place; reopening
/// dropped them as a torn tail after their WALs had been deleted, losing
/// flushed data.
#[test]
fn a_failed_manifest_append_does_not_lose_later_edits() {
    let fs = FaultFs::new();
    fs.set_torn_appends(true);
    let opts = Options {
        write_buffer_bytes: 64 << 10,
        ..options(&fs)
    };
    let db = DB::open(&opts, DIR).unwrap();
    let mut written = Vec::new();
    for round in 0..6u32 {
        if round == 2 {
            // Fail one MANIFEST append, half-written, for lack of space.
            fs.fail_nth_named(
                "MANIFEST-",
                &[OpKind::Write],
                1,
                false,
                io::ErrorKind::StorageFull,
            );
        }
        for i in 0..200u32 {
            let key = format!("r{round}k{i}");
            db.put(&key, [round as u8; 100]).unwrap();
            written.push(key);
        }
        // A job whose edit failed retries; the database stays writable.
        let start = Instant::now();
        while let Err(e) = db.flush() {
            assert!(e.is_no_space(), "{e}");
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the flush never succeeded"
            );
        }
    }
    db.wait_for_compactions().unwrap();
    db.close().unwrap();
    let report = DB::verify(&opts, DIR).unwrap();
    assert!(report.is_ok(), "{report}");
    assert!(
        !report.notes.iter().any(|n| n.contains("MANIFEST")),
        "no torn MANIFEST tail: {report}"
    );
    let db = DB::open(&opts, DIR).unwrap();
    for key in &written {
        assert!(db.get(key).unwrap().is_some(), "{key} lost");
    }
}

/// Regression: a background job that failed for lack of space set a retry
/// time, but nothing woke the scheduler then: the flush waited for the next
/// write that filled a memtable, and `wait_for_compactions` returned `Ok`
/// while the flush was still due.
#[test]
fn a_failed_flush_is_retried_without_new_writes() {
    let fs = FaultFs::new();
    let opts = Options {
        write_buffer_bytes: 32 << 10,
        ..options(&fs)
    };
    let db = DB::open(&opts, DIR).unwrap();
    // The first piece creation fails: the flush of the first full memtable.
    fail_piece_creates(&fs, false);
    let mut i = 0u32;
    put_until_frozen(&db, &mut i);
    // No further write: the retry must come by itself.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(db.stats().flushes, 1, "the failed flush was retried");
    assert_eq!(immutable_memtables(&db), "0");

    // And a waiter sees a failed flush through.
    fail_piece_creates(&fs, false);
    put_until_frozen(&db, &mut i);
    db.wait_for_compactions().unwrap();
    assert_eq!(
        immutable_memtables(&db),
        "0",
        "wait_for_compactions returned with a flush due"
    );
}

/// Regression: writers stalled as soon as `max_immutable_memtables` frozen
/// memtables waited for their flush, not when the active one filled too:
/// with one, no write went into the active memtable while a flush ran
/// (writers stood still through every flush of a 128-byte fill, a quarter
/// of its time), and here, with the flush failing for lack of space, the
/// first write after the freeze failed. Now writes go on into the active
/// memtable, and only one that finds it full waits (and fails while the
/// flush cannot get space).
#[test]
fn writes_go_on_into_the_active_memtable_while_a_frozen_one_waits() {
    let fs = FaultFs::new();
    let opts = Options {
        write_buffer_bytes: 64 << 10,
        max_immutable_memtables: 1,
        ..options(&fs)
    };
    let db = DB::open(&opts, DIR).unwrap();
    // Every piece creation fails: the frozen memtable cannot flush.
    fail_piece_creates(&fs, true);
    let mut i = 0u32;
    put_until_frozen(&db, &mut i);
    let frozen = i;
    // A third of a write buffer into the active memtable, while the
    // frozen one cannot go.
    for _ in 0..100 {
        db.put(key(i), [2u8; 200]).unwrap();
        i += 1;
    }
    assert_eq!(immutable_memtables(&db), "1");
    // Filling the active memtable too runs into the failed flush.
    let err = loop {
        match db.put(key(i), [3u8; 200]) {
            Ok(()) => i += 1,
            Err(e) => break e,
        }
        assert!(i < frozen * 3, "writes never stopped");
    };
    assert!(err.is_no_space(), "{err}");
    assert!(i > frozen + 150, "stopped after {} writes", i - frozen);

    // Space back: everything written is there.
    fs.clear_faults();
    db.wait_for_compactions().unwrap();
    db.flush().unwrap();
    for j in 0..i {
        assert!(db.get(key(j)).unwrap().is_some(), "{}", key(j));
    }
}

/// Regression: when the recovery flush of an open failed, the interval-sync
/// thread kept the half-opened database (and its LOCK) alive: every later
/// open in the process got `Busy`.
#[test]
fn a_failed_open_releases_the_database() {
    let fs = FaultFs::new();
    let opts = Options {
        sync_policy: SyncPolicy::IntervalMs(5),
        ..options(&fs)
    };
    let db = DB::open(&opts, DIR).unwrap();
    for i in 0..100u32 {
        db.put(format!("k{i}"), [2u8; 100]).unwrap();
    }
    db.close().unwrap();
    // Reopening replays the WAL and writes it to a piece: make that fail.
    fs.fail_nth_named(
        ".ph",
        &[OpKind::Create],
        0,
        true,
        io::ErrorKind::StorageFull,
    );
    assert!(DB::open(&opts, DIR).unwrap_err().is_no_space());
    fs.clear_faults();
    let db = DB::open(&opts, DIR).unwrap_or_else(|e| panic!("second open: {e}"));
    assert_eq!(db.get(b"k7").unwrap().as_deref(), Some(&[2u8; 100][..]));
}

/// Regression: `compact_range` poisoned the database when the disk was full,
/// although a full disk is not fatal anywhere else.
#[test]
fn compact_range_on_a_full_disk_leaves_the_database_writable() {
    let fs = FaultFs::new();
    let opts = Options {
        write_buffer_bytes: 32 << 10,
        ..options(&fs)
    };
    let db = DB::open(&opts, DIR).unwrap();
    for i in 0..2000u32 {
        db.put(format!("k{i}"), [3u8; 100]).unwrap();
    }
    // Nothing left to flush: the compaction itself meets the full disk.
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    fs.fail_nth_named(
        ".ph",
        &[OpKind::Create],
        0,
        true,
        io::ErrorKind::StorageFull,
    );
    assert!(db.compact_range(None, None).unwrap_err().is_no_space());
    fs.clear_faults();
    db.put(b"after", b"full disk").unwrap();
    db.compact_range(None, None).unwrap();
    assert_eq!(db.get(b"k1999").unwrap().as_deref(), Some(&[3u8; 100][..]));
}

/// Regression: `close` returned `Ok` when a background error had poisoned
/// the database; the caller never learned that writes had stopped.
#[test]
fn close_reports_a_background_error() {
    let fs = FaultFs::new();
    let db = DB::open(&options(&fs), DIR).unwrap();
    db.put(b"a", b"1").unwrap();
    fs.fail_nth(&[OpKind::Sync], 0, false, io::ErrorKind::Other);
    assert!(db.put_opt(b"b", b"2", &synced()).is_err());
    let e = db.close().unwrap_err();
    assert!(matches!(e, Error::Poisoned(_)), "{e}");
}

/// Rewrites `name` in `fs`'s database directory with `bytes`, durably.
fn rewrite(fs: &FaultFs, name: &str, bytes: &[u8]) {
    let path = Path::new(DIR).join(name);
    let mut f = fs.create(&path).unwrap();
    f.append(bytes).unwrap();
    f.sync().unwrap();
    fs.sync_dir(Path::new(DIR)).unwrap();
}

fn listing(fs: &FaultFs) -> Vec<(String, u64)> {
    let mut names = fs.list(Path::new(DIR)).unwrap();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let len = fs.file_size(&Path::new(DIR).join(&n)).unwrap();
            (n, len)
        })
        .collect()
}

/// Regression: truncating the MANIFEST of a closed database to any shorter
/// length (whole synced records gone, not a torn last record) opened
/// without an error, with the newest flushes silently missing, and open
/// then deleted their pieces as orphans so that not even `repair` could
/// bring them back. CURRENT now records the MANIFEST's length: open
/// refuses a shorter one, and deletes nothing.
#[test]
fn a_manifest_shorter_than_current_records_is_refused_and_nothing_deleted() {
    let fs = FaultFs::new();
    let opts = Options {
        write_buffer_bytes: 16 << 10,
        ..options(&fs)
    };
    let db = DB::open(&opts, DIR).unwrap();
    for round in 0..6u32 {
        for i in 0..100u32 {
            db.put(format!("r{round}k{i}"), [round as u8; 64]).unwrap();
        }
        db.flush().unwrap();
    }
    db.wait_for_compactions().unwrap();
    db.close().unwrap();
    let manifest = fs
        .list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .find(|n| n.starts_with("MANIFEST-"))
        .unwrap();
    let full = tphdb::fs::read_all(&fs, &Path::new(DIR).join(&manifest))
        .unwrap()
        .to_vec();
    for len in 0..full.len() {
        let img = fs.snapshot();
        rewrite(&img, &manifest, &full[..len]);
        let before = listing(&img);
        let e = DB::open(&options(&img), DIR).expect_err("a shortened MANIFEST opened");
        assert!(e.is_corruption(), "length {len}: {e}");
        assert_eq!(
            listing(&img),
            before,
            "length {len}: a failed open changed files"
        );
    }
    // The whole MANIFEST opens.
    let db = DB::open(&opts, DIR).unwrap();
    assert_eq!(db.get(b"r5k99").unwrap().as_deref(), Some(&[5u8; 64][..]));
}
