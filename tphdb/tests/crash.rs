//! Crash safety and failing I/O, on the fault-injecting file system.
//!
//! The promise under test: a write acknowledged with `sync` survives any
//! crash; a crash loses at most the unsynced tail; the database always
//! reopens to the state after some prefix of the writes it was asked to do.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

use tphdb::fs::{FaultFs, FileSystem, OpKind};
use tphdb::{IteratorMode, Options, WriteBatch, WriteOptions, DB};

type State = BTreeMap<Vec<u8>, Vec<u8>>;

const DIR: &str = "/db";

fn options(fs: &FaultFs) -> Options {
    Options {
        file_system: Some(Arc::new(fs.clone())),
        write_buffer_bytes: 3 << 10,
        max_immutable_memtables: 2,
        // Below the workload's live data: level-1 TPHs are pushed down
        // while level 0 merges into them.
        tph_target_bytes: 1 << 10,
        fanout: 2,
        max_levels: 3,
        l0_compaction_trigger: 2,
        max_pieces: 3,
        manifest_max_bytes: 2 << 10,
        background_threads: 1,
        page_size_bytes: 512,
        ..Options::default()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Put(u32, u32),
    Delete(u32),
    Batch(Vec<(u32, Option<u32>)>),
    Flush,
    /// A bulk load: durable once acknowledged, with every write before it.
    /// Small enough to be one chunk, which is atomic (a longer load is
    /// durable chunk by chunk).
    Ingest(Vec<(u32, u32)>),
}

fn key(k: u32) -> Vec<u8> {
    format!("key{k:03}").into_bytes()
}

fn value(k: u32, v: u32) -> Vec<u8> {
    let mut s = format!("v{k}.{v}.").into_bytes();
    s.resize(20 + (v as usize * 13) % 60, b'x');
    s
}

/// A few hundred writes over 40 keys, some synced: enough to rotate WALs,
/// flush, compact into several levels and roll the MANIFEST over.
fn workload(seed: u64) -> Vec<(Op, bool)> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..300u32)
        .map(|i| {
            let op = match rng.u8(..100) {
                0..=64 => Op::Put(rng.u32(..40), i),
                65..=79 => Op::Delete(rng.u32(..40)),
                80..=94 => Op::Batch(
                    (0..rng.u32(1..6))
                        .map(|j| (rng.u32(..40), (rng.u8(..4) > 0).then_some(i * 10 + j)))
                        .collect(),
                ),
                95..=97 => Op::Ingest(
                    (0..rng.u32(1..16))
                        .map(|j| (rng.u32(..40), i * 100 + j))
                        .collect(),
                ),
                _ => Op::Flush,
            };
            (op, rng.u8(..100) < 15)
        })
        .collect()
}

fn apply(state: &mut State, op: &Op) {
    match op {
        Op::Put(k, v) => {
            state.insert(key(*k), value(*k, *v));
        }
        Op::Delete(k) => {
            state.remove(&key(*k));
        }
        Op::Batch(ops) => {
            for (k, v) in ops {
                match v {
                    Some(v) => state.insert(key(*k), value(*k, *v)),
                    None => state.remove(&key(*k)),
                };
            }
        }
        Op::Flush => {}
        Op::Ingest(entries) => {
            for (k, v) in entries {
                state.insert(key(*k), value(*k, *v));
            }
        }
    }
}

/// What a run did. `done` lists the operations the database acknowledged,
/// in order, followed by at most one whose outcome is unknown: it failed,
/// and writes stopped after it. A recovered state must be the state after
/// a prefix of `done`: at least `must_survive_crash` long after a power
/// loss, at least `acknowledged` long after a process crash or a reopen.
struct Run {
    done: Vec<Op>,
    acknowledged: usize,
    must_survive_crash: usize,
    /// Writes acknowledged after one failed for lack of space.
    written_after_no_space: usize,
    /// Push-downs into whose TPH other jobs merged while they ran.
    push_downs_overlapped: u64,
    /// Images taken while the database was still open.
    power_loss: Option<FaultFs>,
    process_crash: Option<FaultFs>,
}

/// Runs `ops`. A write that fails for lack of space must leave nothing
/// behind (unless writes stopped after it, which the next operation
/// shows), and the run goes on: after `space_back_after` such failures the
/// faults are cleared, as if space were freed. Any other failure ends the
/// run. At the end the file system is imaged as a power loss (with `seed`)
/// and as a process crash would leave it.
fn run(fs: &FaultFs, ops: &[(Op, bool)], space_back_after: usize, seed: u64) -> Run {
    let mut r = Run {
        done: Vec::new(),
        acknowledged: 0,
        must_survive_crash: 0,
        written_after_no_space: 0,
        push_downs_overlapped: 0,
        power_loss: None,
        process_crash: None,
    };
    let Ok(db) = DB::open(&options(fs), DIR) else {
        r.power_loss = Some(fs.crash(seed));
        r.process_crash = Some(fs.snapshot());
        return r;
    };
    let mut unknown: Option<Op> = None;
    let mut no_space_failures = 0;
    for (op, sync) in ops {
        let wo = WriteOptions {
            sync: *sync,
            ..WriteOptions::default()
        };
        let result = match op {
            Op::Put(k, v) => db.put_opt(key(*k), value(*k, *v), &wo),
            Op::Delete(k) => db.delete_opt(key(*k), &wo),
            Op::Batch(ops) => {
                let mut b = WriteBatch::new();
                for (k, v) in ops {
                    match v {
                        Some(v) => b.put(key(*k), value(*k, *v)),
                        None => b.delete(key(*k)),
                    }
                }
                db.write_opt(b, &wo)
            }
            Op::Flush => db.flush(),
            Op::Ingest(entries) => db
                .ingest(entries.iter().map(|&(k, v)| (key(k), value(k, v))))
                .map(|report| assert_eq!(report.chunks, 1, "one atomic chunk")),
        };
        let is_write = !matches!(op, Op::Flush);
        let durable = *sync || matches!(op, Op::Flush | Op::Ingest(_));
        match result {
            Ok(()) => {
                // An operation ran after the failed one: writes did not stop
                // there, so it left nothing.
                unknown = None;
                if no_space_failures > 0 && is_write {
                    r.written_after_no_space += 1;
                }
                r.done.push(op.clone());
                r.acknowledged = r.done.len();
                // A synced write also makes every earlier write durable.
                if durable {
                    r.must_survive_crash = r.done.len();
                }
            }
            Err(e) if e.is_no_space() => {
                unknown = is_write.then(|| op.clone());
                no_space_failures += 1;
                if no_space_failures == space_back_after {
                    fs.clear_faults();
                }
            }
            // Writes stopped earlier: this one was not even tried.
            Err(tphdb::Error::Poisoned(_)) => break,
            Err(_) => {
                unknown = is_write.then(|| op.clone());
                break;
            }
        }
    }
    r.done.extend(unknown);
    r.push_downs_overlapped = db.stats().push_downs_overlapped;
    r.power_loss = Some(fs.crash(seed));
    r.process_crash = Some(fs.snapshot());
    drop(db);
    r
}

fn read_all(db: &DB) -> tphdb::Result<State> {
    db.iterator(IteratorMode::Start)
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect()
}

/// Reopens `fs` and checks that the state is the one after some prefix of
/// `ops` at least `min` long. Returns that length.
fn verify(fs: &FaultFs, ops: &[Op], min: usize, what: &str) -> usize {
    let db = DB::open(&options(fs), DIR).unwrap_or_else(|e| panic!("{what}: reopen failed: {e}"));
    let got = read_all(&db).unwrap_or_else(|e| panic!("{what}: scan failed: {e}"));
    let mut model = State::new();
    for op in &ops[..min] {
        apply(&mut model, op);
    }
    let mut p = min;
    loop {
        if model == got {
            break;
        }
        assert!(
            p < ops.len(),
            "{what}: state is no prefix of {min}..={} operations ({} keys)",
            ops.len(),
            got.len()
        );
        apply(&mut model, &ops[p]);
        p += 1;
    }
    // Point reads agree with the scan, and the database accepts writes.
    for (k, v) in got.iter().take(10) {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v), "{what}");
    }
    db.put(b"after", b"recovery")
        .unwrap_or_else(|e| panic!("{what}: write after recovery: {e}"));
    p
}

/// Checks both crash images of a run, then a clean reopen of `fs`.
fn verify_run(fs: &FaultFs, r: Run, what: &str) {
    let power_loss = r.power_loss.expect("imaged");
    verify(
        &power_loss,
        &r.done,
        r.must_survive_crash,
        &format!("{what}, then power loss"),
    );
    let process_crash = r.process_crash.expect("imaged");
    verify(
        &process_crash,
        &r.done,
        r.acknowledged,
        &format!("{what}, then process crash"),
    );
    fs.clear_faults();
    verify(fs, &r.done, r.acknowledged, &format!("{what}, then reopen"));
}

const ALL: [OpKind; 8] = [
    OpKind::Write,
    OpKind::Sync,
    OpKind::Rename,
    OpKind::Read,
    OpKind::Open,
    OpKind::Create,
    OpKind::Remove,
    OpKind::Truncate,
];

/// Fails operation N for every N of a run: once or from then on, as an I/O
/// error or as a full disk, with failing appends writing nothing or half
/// their bytes. A full disk frees up again (at once, or after a few failed
/// operations) and the run writes on. Then both kinds of crash, and a
/// clean reopen.
#[test]
fn sweep_failing_each_operation_in_turn() {
    let ops = workload(1);
    let total = {
        let fs = FaultFs::new();
        let r = run(&fs, &ops, 0, 0);
        assert_eq!(r.acknowledged, ops.len());
        fs.op_count()
    };
    assert!(
        total > 500,
        "the workload should do real I/O: {total} operations"
    );
    let step = std::env::var("TPHDB_SWEEP_STEP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for n in (0..total).step_by(step) {
        let fs = FaultFs::new();
        let kind = if n % 3 == 0 {
            io::ErrorKind::StorageFull
        } else {
            io::ErrorKind::Other
        };
        let persistent = n % 2 == 0;
        fs.fail_nth(&ALL, n, persistent, kind);
        fs.set_torn_appends(n % 5 < 2);
        // A full disk that stays full frees up after a few failures.
        let space_back_after = if persistent {
            1 + (n / 6 % 3) as usize
        } else {
            1
        };
        let r = run(&fs, &ops, space_back_after, n);
        verify_run(
            &fs,
            r,
            &format!("fail op {n} ({kind:?}, persistent {persistent})"),
        );
    }
}

/// A disk that fills up at the N-th append of a run, for every N: one to
/// three appends (the WAL's, a flush's, the MANIFEST's: whoever comes) fail
/// for lack of space, writing nothing or half their bytes, then space is
/// freed and the run writes on. Then both kinds of crash, and a clean
/// reopen.
#[test]
fn sweep_filling_the_disk_at_each_append() {
    let ops = workload(3);
    let appends = {
        let fs = FaultFs::new();
        fs.fail_nth(&[OpKind::Write], u64::MAX, false, io::ErrorKind::Other);
        run(&fs, &ops, 0, 0);
        fs.matched_count()
    };
    assert!(appends > 300, "{appends} appends");
    eprintln!("{appends} appends");
    let step = std::env::var("TPHDB_SWEEP_STEP")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut went_on = 0;
    for n in (0..appends).step_by(step) {
        let fs = FaultFs::new();
        fs.fail_n_from(
            &[OpKind::Write],
            n,
            1 + n / 2 % 3,
            io::ErrorKind::StorageFull,
        );
        fs.set_torn_appends(n % 2 == 0);
        let r = run(&fs, &ops, usize::MAX, n);
        went_on += (r.written_after_no_space > 0) as usize;
        verify_run(&fs, r, &format!("disk full at append {n}"));
    }
    let runs = appends.div_ceil(step as u64) as usize;
    assert!(
        went_on * 2 > runs,
        "only {went_on} of {runs} runs wrote on after running out of space"
    );
}

/// Crashes at each sync of a run in turn, with random fates for the writes
/// not yet synced.
#[test]
fn sweep_crashing_at_each_sync() {
    let ops = workload(2);
    let syncs = {
        let fs = FaultFs::new();
        run(&fs, &ops, 0, 0);
        fs.sync_count()
    };
    assert!(syncs > 50, "{syncs} syncs");
    let mut overlapped = 0;
    for n in 0..syncs {
        let fs = FaultFs::new();
        fs.crash_at_sync(n, n);
        let r = run(&fs, &ops, 0, n);
        overlapped += r.push_downs_overlapped;
        let Some(image) = fs.crash_image() else {
            // Background timing moved the sync past the end of the run.
            continue;
        };
        verify(
            &image,
            &r.done,
            r.must_survive_crash,
            &format!("crash at sync {n}"),
        );
    }
    // The edit that ends a push-down others merged into meanwhile (see
    // `db/push_down.rs`) is among those crashed at.
    assert!(overlapped > 0, "no push-down overlapped a merge");
}

/// A small database: 30 keys flushed into pieces, 10 more writes only in the
/// WAL. Returns the final state and the state once the flushed writes are
/// in (the least a WAL truncation may leave).
fn small_db(fs: &FaultFs) -> (State, State) {
    let opts = Options {
        write_buffer_bytes: 1 << 20,
        ..options(fs)
    };
    let db = DB::open(&opts, DIR).unwrap();
    let mut state = State::new();
    for i in 0..30u32 {
        db.put(key(i), value(i, i)).unwrap();
        state.insert(key(i), value(i, i));
    }
    db.flush().unwrap();
    let flushed = state.clone();
    for i in 25..35u32 {
        db.put(key(i), value(i, i + 100)).unwrap();
        state.insert(key(i), value(i, i + 100));
    }
    db.delete(key(3)).unwrap();
    state.remove(&key(3));
    db.close().unwrap();
    (state, flushed)
}

/// Every bit of every file: opening and reading yield an error, or the right
/// data (for the WAL: the data up to a clean cut of its tail).
#[test]
fn flipping_any_bit_of_any_file_never_yields_a_wrong_value() {
    let fs = FaultFs::new();
    let (state, flushed) = small_db(&fs);
    let files = fs.list(Path::new(DIR)).unwrap();
    let mut checked = 0;
    for name in files.iter().filter(|n| *n != "LOCK") {
        let path = Path::new(DIR).join(name);
        let f = fs.open_read(&path, tphdb::fs::ReadMode::Pread).unwrap();
        let good = f.read_at(0, f.len() as usize).unwrap().to_vec();
        for bit in 0..good.len() * 8 {
            let img = fs.snapshot();
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            rewrite(&img, &path, &bad);
            let opts = Options {
                write_buffer_bytes: 1 << 20,
                ..options(&img)
            };
            let Ok(db) = DB::open_for_read_only(&opts, DIR) else {
                continue;
            };
            checked += 1;
            let Ok(got) = read_all(&db) else { continue };
            let ok = if name.ends_with(".log") {
                // A clean cut of the WAL: some prefix of its writes.
                got == state
                    || (got.len() >= flushed.len() - 5
                        && got
                            .iter()
                            .all(|(k, v)| state.get(k) == Some(v) || flushed.get(k) == Some(v)))
            } else {
                got == state
            };
            assert!(ok, "bit {bit} of {name}: wrong data ({} keys)", got.len());
            for (k, v) in &state {
                if let Ok(Some(g)) = db.get(k) {
                    assert!(
                        &g == v || flushed.get(k) == Some(&g) && name.ends_with(".log"),
                        "bit {bit} of {name}: wrong value"
                    );
                }
            }
        }
    }
    assert!(checked > 100, "{checked} flips opened at all");
}

fn rewrite(fs: &FaultFs, path: &Path, data: &[u8]) {
    let mut f = fs.create(path).unwrap();
    f.append(data).unwrap();
    f.sync().unwrap();
    fs.sync_dir(Path::new(DIR)).unwrap();
}

/// A full disk: writes fail with a clear error, reads go on, and once space
/// is back writing resumes, without a reopen, with nothing lost.
#[test]
fn a_full_disk_fails_writes_keeps_reads_and_recovers() {
    let fs = FaultFs::new();
    let db = DB::open(&options(&fs), DIR).unwrap();
    let mut state = State::new();
    for i in 0..100u32 {
        db.put(key(i), value(i, 0)).unwrap();
        state.insert(key(i), value(i, 0));
    }
    let used: u64 = fs
        .list(Path::new(DIR))
        .unwrap()
        .iter()
        .map(|n| fs.file_size(&Path::new(DIR).join(n)).unwrap())
        .sum();
    fs.set_capacity(Some(used + 20_000));
    let mut failed = None;
    for i in 0..5000u32 {
        let k = i % 150;
        match db.put(key(k), value(k, i)) {
            Ok(()) => {
                state.insert(key(k), value(k, i));
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let e = failed.expect("the disk filled up");
    assert!(e.is_no_space(), "{e}");
    for (k, v) in &state {
        assert_eq!(
            db.get(k).unwrap().as_ref(),
            Some(v),
            "reads go on while the disk is full"
        );
    }
    fs.set_capacity(None);
    // Background work retries a moment after it last failed.
    let resumed = std::time::Instant::now();
    while db.put(b"probe", b"x").is_err() {
        assert!(resumed.elapsed().as_secs() < 5, "writes did not resume");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    state.insert(b"probe".to_vec(), b"x".to_vec());
    for i in 0..300u32 {
        let k = i % 150;
        db.put(key(k), value(k, 10_000 + i))
            .expect("writing resumes once space is back");
        state.insert(key(k), value(k, 10_000 + i));
    }
    db.flush().unwrap();
    assert_eq!(read_all(&db).unwrap(), state);
    drop(db);
    let db = DB::open(&options(&fs), DIR).unwrap();
    assert_eq!(read_all(&db).unwrap(), state);
}

/// After a failed sync the database refuses writes until it is reopened:
/// the page cache may have dropped what the sync was to make durable.
#[test]
fn a_failed_sync_makes_the_database_read_only_until_reopened() {
    let fs = FaultFs::new();
    let db = DB::open(&options(&fs), DIR).unwrap();
    db.put(b"a", b"1").unwrap();
    fs.fail_nth(&[OpKind::Sync], 0, false, io::ErrorKind::Other);
    let sync = WriteOptions {
        sync: true,
        ..WriteOptions::default()
    };
    assert!(db.put_opt(b"b", b"2", &sync).is_err());
    let e = db.put(b"c", b"3").unwrap_err();
    assert!(matches!(e, tphdb::Error::Poisoned(_)), "{e}");
    assert_eq!(
        db.get(b"a").unwrap().as_deref(),
        Some(&b"1"[..]),
        "reads still work"
    );
    drop(db);
    let db = DB::open(&options(&fs), DIR).unwrap();
    db.put(b"c", b"3").unwrap();
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
}

/// Recovery is point in time: a WAL torn in its middle stops replay, and
/// the later WALs, whose writes are newer than the lost one, are skipped.
#[test]
fn wals_after_a_torn_one_are_not_replayed() {
    let fs = FaultFs::new();
    let opts = Options {
        write_buffer_bytes: 1 << 20,
        ..options(&fs)
    };
    let db = DB::open(&opts, DIR).unwrap();
    let sync = WriteOptions {
        sync: true,
        ..WriteOptions::default()
    };
    for i in 0..20u32 {
        db.put_opt(key(i), value(i, 1), &sync).unwrap();
    }
    // Keep the first WAL unflushed: every piece creation fails.
    fs.fail_nth(&[OpKind::Create], 1, true, io::ErrorKind::StorageFull);
    assert!(db.flush().unwrap_err().is_no_space());
    db.put_opt(b"later", b"write", &sync).unwrap();
    let image = fs.crash(0);
    drop(db);
    let mut wals: Vec<String> = image
        .list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".log"))
        .collect();
    wals.sort();
    assert_eq!(wals.len(), 2, "{wals:?}");
    // Damage the tail of the first WAL's data.
    let first = Path::new(DIR).join(&wals[0]);
    let f = image.open_read(&first, tphdb::fs::ReadMode::Pread).unwrap();
    let mut bytes = f.read_at(0, f.len() as usize).unwrap().to_vec();
    let at = bytes.len() - 10;
    bytes[at] ^= 0xff;
    rewrite(&image, &first, &bytes);
    let db = DB::open(&options(&image), DIR).unwrap();
    let stats = db.stats();
    assert_eq!(stats.wal_files_skipped, 1);
    assert!(stats.wal_dropped_bytes > 0);
    assert_eq!(
        db.get(b"later").unwrap(),
        None,
        "a write newer than a lost one"
    );
    for i in 0..19u32 {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 1)));
    }
}

/// Earlier WALs are not synced when the writer moves to a new one: a power
/// loss can cut any of them anywhere, even the first one whole, and the
/// database must still reopen to a prefix of the writes, one that holds
/// every write up to the last synced one (a sync syncs the earlier WALs).
#[test]
fn power_loss_cutting_unsynced_wals_anywhere_leaves_a_prefix() {
    let ops: Vec<Op> = (0..120u32).map(|i| Op::Put(i % 40, i)).collect();
    for synced_through in [0, 30, 70, 100] {
        let fs = FaultFs::new();
        let opts = Options {
            max_immutable_memtables: 10,
            ..options(&fs)
        };
        let db = DB::open(&opts, DIR).unwrap();
        // Keep every WAL unflushed: piece creation fails.
        fs.fail_nth_named(
            ".ph",
            &[OpKind::Create],
            0,
            true,
            io::ErrorKind::StorageFull,
        );
        for (i, op) in ops.iter().enumerate() {
            let Op::Put(k, v) = op else { unreachable!() };
            let sync = WriteOptions {
                sync: i + 1 == synced_through,
                ..WriteOptions::default()
            };
            db.put_opt(key(*k), value(*k, *v), &sync).unwrap();
        }
        let wals = fs
            .list(Path::new(DIR))
            .unwrap()
            .into_iter()
            .filter(|n| n.ends_with(".log"))
            .count();
        assert!(wals >= 3, "{wals} WALs");
        let mut lengths = std::collections::BTreeSet::new();
        for seed in 0..100 {
            let image = fs.crash(seed);
            let what = format!("synced through {synced_through}, seed {seed}");
            lengths.insert(verify(&image, &ops, synced_through, &what));
        }
        // The cuts fell in several places.
        assert!(lengths.len() > 3, "{lengths:?}");
    }
}
