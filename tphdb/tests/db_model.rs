//! The engine against a `BTreeMap` model: random operation sequences in
//! every mode, with memtables small enough that every path runs (flushes,
//! level-0 merges, push-downs, GC folds, reopen from MANIFEST and WAL).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use proptest::prelude::*;
use tphdb::fs::{MemFs, ReadMode};
use tphdb::{CompactionPriority, Direction, IteratorMode, Options, ReadOptions, WriteBatch, DB};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Compactions that start 1 ms after the last write seen run at low
    /// priority, on threads of their own, beside normal ones.
    Leveled,
    OneLevel,
    SingleTier,
    /// Leveled, reading with pread: iterators seek and load in parallel.
    ParallelReads,
    /// Leveled with a level 0 that is paced from its second TPH on, at a
    /// slow rate, and stops at its fourth: writes wait and go on while
    /// compactions run.
    Paced,
    /// Leveled, collecting garbage at a low share: level 0 and TPHs with a
    /// few tombstones go down early, and TPHs with a little garbage are
    /// folded whole whenever the background is free.
    Collected,
}

fn options(mode: Mode, fs: &MemFs) -> Options {
    Options {
        write_buffer_bytes: 4 << 10,
        max_immutable_memtables: 2,
        tph_target_bytes: 2 << 10,
        fanout: 2,
        max_levels: 3,
        l0_compaction_trigger: 2,
        l0_slowdown_trigger: if matches!(mode, Mode::Paced) { 2 } else { 12 },
        l0_stop_trigger: if matches!(mode, Mode::Paced) { 4 } else { 20 },
        delayed_write_rate_bytes: 256 << 10,
        max_pieces: 3,
        one_level: matches!(mode, Mode::OneLevel),
        single_tier: matches!(mode, Mode::SingleTier),
        gc_dead_ratio: if matches!(mode, Mode::Collected) {
            0.05
        } else {
            Options::default().gc_dead_ratio
        },
        max_garbage_ratio: if matches!(mode, Mode::Collected) {
            0.02
        } else {
            Options::default().max_garbage_ratio
        },
        background_threads: 2,
        page_size_bytes: 512,
        read_mode: if matches!(mode, Mode::ParallelReads) {
            ReadMode::Pread
        } else {
            ReadMode::Mmap
        },
        scan_io_threads: 4,
        // Pread mode caches blocks: small enough to evict while tests run.
        block_cache_bytes: 8 << 10,
        // Leveled and collected modes merge level 0 and push-downs in
        // several passes over partition ranges, and write folds (GC folds
        // too) in passes over slot ranges; the others in one.
        compaction_memory_bytes: if matches!(mode, Mode::Leveled | Mode::Collected) {
            1 << 10
        } else {
            Options::default().compaction_memory_bytes
        },
        compaction_priority: if matches!(mode, Mode::Leveled) {
            CompactionPriority::LowWithoutWrites
        } else {
            CompactionPriority::Normal
        },
        compaction_idle_millis: 1,
        file_system: Some(Arc::new(fs.clone())),
        ..Options::default()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Put(u16, u16),
    Delete(u16),
    Batch(Vec<(u16, Option<u16>)>),
    Get(u16),
    /// A batched get (`multi_get_pinned`), repeats included.
    MultiGet(Vec<u16>),
    Scan(Option<u16>, bool),
    Raw(Vec<Move>, Option<(u16, u16)>),
    Snapshot,
    Flush,
    Compact,
    Reopen,
    /// A bulk load (duplicates included: the last one wins).
    Ingest(Vec<(u16, u16)>),
    /// A checkpoint, opened and checked against the model, then dropped.
    Checkpoint,
}

fn key(k: u16) -> Vec<u8> {
    format!("k{:04}", k % 600).into_bytes()
}

fn value(k: u16, v: u16) -> Vec<u8> {
    // Values of varied length, some empty, that name their key.
    let mut s = format!("{k}:{v}:").into_bytes();
    s.resize((v as usize * 7) % 200, b'x');
    s
}

#[derive(Clone, Debug)]
enum Move {
    First,
    Last,
    Seek(u16),
    SeekForPrev(u16),
    Next,
    Prev,
}

fn moves() -> impl Strategy<Value = Vec<Move>> {
    let m = prop_oneof![
        1 => Just(Move::First),
        1 => Just(Move::Last),
        2 => any::<u16>().prop_map(Move::Seek),
        2 => any::<u16>().prop_map(Move::SeekForPrev),
        6 => Just(Move::Next),
        4 => Just(Move::Prev),
    ];
    prop::collection::vec(m, 1..60)
}

/// Random raw-iterator moves, with optional bounds, against the model.
fn check_raw(db: &DB, model: &Model, moves: &[Move], bounds: Option<(u16, u16)>) {
    let (lo, hi) = match bounds {
        Some((a, b)) => {
            let (a, b) = (key(a.min(b)), key(a.max(b)));
            (Some(a), Some(b))
        }
        None => (None, None),
    };
    let opts = ReadOptions {
        lower_bound: lo.clone(),
        upper_bound: hi.clone(),
        ..ReadOptions::default()
    };
    let keys: Vec<&Vec<u8>> = model
        .keys()
        .filter(|k| lo.as_ref().is_none_or(|l| *k >= l) && hi.as_ref().is_none_or(|h| *k < h))
        .collect();
    let mut it = db.raw_iterator_opt(opts);
    let mut pos: Option<usize> = None;
    for m in moves {
        match m {
            Move::First => {
                it.seek_to_first();
                pos = (!keys.is_empty()).then_some(0);
            }
            Move::Last => {
                it.seek_to_last();
                pos = keys.len().checked_sub(1);
            }
            Move::Seek(k) => {
                let t = key(*k);
                it.seek(&t);
                let i = keys.partition_point(|x| **x < t);
                pos = (i < keys.len()).then_some(i);
            }
            Move::SeekForPrev(k) => {
                let t = key(*k);
                it.seek_for_prev(&t);
                pos = keys.partition_point(|x| **x <= t).checked_sub(1);
            }
            Move::Next => {
                if pos.is_none() {
                    continue;
                }
                it.next();
                pos = pos.map(|p| p + 1).filter(|&p| p < keys.len());
            }
            Move::Prev => {
                if pos.is_none() {
                    continue;
                }
                it.prev();
                pos = pos.and_then(|p| p.checked_sub(1));
            }
        }
        it.status().unwrap();
        assert_eq!(it.valid(), pos.is_some(), "after {m:?}");
        if let Some(p) = pos {
            assert_eq!(it.key(), Some(keys[p].as_slice()), "after {m:?}");
            assert_eq!(it.value(), Some(model[keys[p]].as_slice()));
        }
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        30 => (any::<u16>(), any::<u16>()).prop_map(|(k, v)| Op::Put(k, v)),
        8 => any::<u16>().prop_map(Op::Delete),
        6 => prop::collection::vec((any::<u16>(), prop::option::weighted(0.8, any::<u16>())), 1..20).prop_map(Op::Batch),
        10 => any::<u16>().prop_map(Op::Get),
        4 => prop::collection::vec(any::<u16>(), 1..40).prop_map(Op::MultiGet),
        3 => (prop::option::of(any::<u16>()), any::<bool>()).prop_map(|(s, r)| Op::Scan(s, r)),
        2 => (moves(), prop::option::weighted(0.3, (any::<u16>(), any::<u16>()))).prop_map(|(m, b)| Op::Raw(m, b)),
        2 => Just(Op::Snapshot),
        2 => Just(Op::Flush),
        1 => Just(Op::Compact),
        2 => Just(Op::Reopen),
        2 => prop::collection::vec((any::<u16>(), any::<u16>()), 1..120).prop_map(Op::Ingest),
        1 => Just(Op::Checkpoint),
    ]
}

fn check_scan(db: &DB, model: &Model, start: Option<u16>, reverse: bool) {
    let start_key = start.map(key);
    let mode = match (&start_key, reverse) {
        (None, false) => IteratorMode::Start,
        (None, true) => IteratorMode::End,
        (Some(k), false) => IteratorMode::From(k, Direction::Forward),
        (Some(k), true) => IteratorMode::From(k, Direction::Reverse),
    };
    let got: Vec<(Vec<u8>, Vec<u8>)> = db
        .iterator(mode)
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = match (&start_key, reverse) {
        (None, false) => model.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        (None, true) => model
            .iter()
            .rev()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        (Some(s), false) => model
            .range(s.clone()..)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        (Some(s), true) => model
            .range(..=s.clone())
            .rev()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    };
    assert_eq!(
        got.len(),
        want.len(),
        "scan from {start_key:?} reverse {reverse}"
    );
    assert!(got == want, "scan from {start_key:?} reverse {reverse}");
}

fn run(mode: Mode, ops: Vec<Op>) {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let mut db = Some(DB::open(&options(mode, &fs), dir).unwrap());
    let mut model = Model::new();
    // A snapshot is checked at the end against the model of its time.
    let mut snap_models: Vec<Model> = Vec::new();
    let mut checkpoints = 0;
    for op in ops {
        let d = db.as_ref().unwrap();
        match op {
            Op::Put(k, v) => {
                d.put(key(k), value(k, v)).unwrap();
                model.insert(key(k), value(k, v));
            }
            Op::Delete(k) => {
                d.delete(key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::Batch(ops) => {
                let mut b = WriteBatch::new();
                for (k, v) in ops {
                    match v {
                        Some(v) => {
                            b.put(key(k), value(k, v));
                            model.insert(key(k), value(k, v));
                        }
                        None => {
                            b.delete(key(k));
                            model.remove(&key(k));
                        }
                    }
                }
                d.write(b).unwrap();
            }
            Op::Get(k) => assert_eq!(
                d.get(key(k)).unwrap(),
                model.get(&key(k)).cloned(),
                "get {k}"
            ),
            Op::MultiGet(ks) => {
                let keys: Vec<Vec<u8>> = ks.iter().map(|&k| key(k)).collect();
                let got = d.multi_get_pinned(&keys);
                assert_eq!(got.len(), keys.len());
                for (k, g) in keys.iter().zip(got) {
                    assert_eq!(
                        g.unwrap().map(|v| v.to_vec()),
                        model.get(k).cloned(),
                        "multi_get {k:?}"
                    );
                }
            }
            Op::Scan(start, reverse) => check_scan(d, &model, start, reverse),
            Op::Raw(moves, bounds) => check_raw(d, &model, &moves, bounds),
            Op::Snapshot => {
                // Take a snapshot, write on, and check it still sees its time.
                let snap = d.snapshot();
                let frozen = model.clone();
                for i in 0..40u16 {
                    d.put(key(i * 13), b"after-snapshot").unwrap();
                    model.insert(key(i * 13), b"after-snapshot".to_vec());
                }
                d.flush().unwrap();
                for (k, v) in frozen.iter().take(50) {
                    assert_eq!(snap.get(k).unwrap().as_ref(), Some(v));
                }
                let got: Vec<Vec<u8>> = d
                    .iterator_opt(
                        IteratorMode::Start,
                        ReadOptions {
                            snapshot: Some(&snap),
                            ..ReadOptions::default()
                        },
                    )
                    .map(|r| r.unwrap().0.to_vec())
                    .collect();
                assert_eq!(got, frozen.keys().cloned().collect::<Vec<_>>());
                snap_models.push(frozen);
            }
            Op::Flush => d.flush().unwrap(),
            Op::Compact => d.compact_range(None, None).unwrap(),
            Op::Ingest(entries) => {
                let report = d
                    .ingest(entries.iter().map(|&(k, v)| (key(k), value(k, v))))
                    .unwrap();
                assert_eq!(report.entries, entries.len() as u64);
                for (k, v) in entries {
                    model.insert(key(k), value(k, v));
                }
            }
            Op::Checkpoint => {
                checkpoints += 1;
                let to = Path::new("/checkpoints").join(checkpoints.to_string());
                d.checkpoint(&to).unwrap();
                // Later writes to the original stay out of the copy.
                d.put(key(0), b"after-checkpoint").unwrap();
                let copy = DB::open(&options(mode, &fs), &to).unwrap();
                check_scan(&copy, &model, None, false);
                copy.close().unwrap();
                model.insert(key(0), b"after-checkpoint".to_vec());
            }
            Op::Reopen => {
                db.take().unwrap().close().unwrap();
                db = Some(DB::open(&options(mode, &fs), dir).unwrap());
            }
        }
    }
    let d = db.take().unwrap();
    for (k, v) in &model {
        assert_eq!(d.get(k).unwrap().as_ref(), Some(v));
    }
    check_scan(&d, &model, None, false);
    // Dropping without close, then reopening, loses nothing either.
    drop(d);
    let d = DB::open(&options(mode, &fs), dir).unwrap();
    check_scan(&d, &model, None, true);
    let _ = snap_models;
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("TPHDB_MODEL_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(400),
        ..ProptestConfig::default()
    })]

    #[test]
    fn leveled_matches_a_model(ops in prop::collection::vec(op(), 1..400)) {
        run(Mode::Leveled, ops);
    }

    #[test]
    fn one_level_matches_a_model(ops in prop::collection::vec(op(), 1..400)) {
        run(Mode::OneLevel, ops);
    }

    #[test]
    fn parallel_reads_match_a_model(ops in prop::collection::vec(op(), 1..400)) {
        run(Mode::ParallelReads, ops);
    }

    #[test]
    fn single_tier_matches_a_model(ops in prop::collection::vec(op(), 1..400)) {
        run(Mode::SingleTier, ops);
    }

    #[test]
    fn paced_writes_match_a_model(ops in prop::collection::vec(op(), 1..400)) {
        run(Mode::Paced, ops);
    }

    #[test]
    fn garbage_collection_matches_a_model(ops in prop::collection::vec(op(), 1..400)) {
        run(Mode::Collected, ops);
    }
}
