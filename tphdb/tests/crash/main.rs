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

mod damage;

type State = BTreeMap<Vec<u8>, Vec<u8>>;

const DIR: &str = "/db";

fn options(fs: &FaultFs) -> Options {
    Options {
        file_system: Some(Arc::new(fs.clone())),
        write_buffer_bytes: 3 << 10,
        max_immutable_memtables: 2,
        // Below the workload's live data: level-1 TPHs are pushed down
        // while level 0 merges into them, on the other thread. At 1 KiB,
        // piece format 6's smaller entries left a sweep of about 700
        // crashes with 0 to 14 such push-downs; at 768 bytes, 1,700-2,600.
        tph_target_bytes: 768,
        fanout: 2,
        max_levels: 3,
        l0_compaction_trigger: 2,
        max_pieces: 3,
        manifest_max_bytes: 2 << 10,
        background_threads: 2,
        page_size_bytes: 512,
        // 1.5 KiB of input a job: larger folds write their piece in passes
        // and larger level-0 merges run over ranges of partitions.
        compaction_memory_bytes: 6 << 10,
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
    /// Children written from their share's key hashes (`tph/share.rs`).
    shares_written: u64,
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
        shares_written: 0,
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
    r.shares_written = db.stats().shares_written;
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
    // A writer sees only the failures of its own appends (the WAL's, a
    // flush it waits for); background jobs retry theirs unseen. The
    // workload overwrites 40 keys in turn, so most of what it stores hides
    // older versions below, and GC push-downs and folds take about a third
    // of its appends (1,567 in all before they did, 2,468 since): about 40%
    // of the runs then see a failure and write on, against more than half
    // before. Merges writing their index as a file of its own took the
    // appends to 3,286, and the runs that write on to 702 (21%).
    let runs = appends.div_ceil(step as u64) as usize;
    assert!(
        went_on * 6 > runs,
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
    let (mut overlapped, mut shares) = (0, 0);
    for n in 0..syncs {
        let fs = FaultFs::new();
        fs.crash_at_sync(n, n);
        let r = run(&fs, &ops, 0, n);
        overlapped += r.push_downs_overlapped;
        shares += r.shares_written;
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
    // So are the syncs of children written from their share's key hashes
    // as a push-down opens a level.
    assert!(
        shares > 0,
        "no push-down wrote a child from its share's hashes"
    );
}
