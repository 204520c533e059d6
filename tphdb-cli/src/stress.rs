//! `tphdb stress`: many threads mix gets, puts, deletes, batches,
//! multi-gets, iterators and snapshots against an expected-state model
//! while flushes and compactions run, and the database is closed, checked
//! in full and reopened at intervals (in the manner of RocksDB's
//! db_stress).
//!
//! The model holds one lock per key with the generation of the key's
//! current value (`None`: absent). An operation locks the keys it touches,
//! in key order, so what it reads or writes is exactly what the model
//! says; every value names its key and generation, so a value from another
//! key or write never matches.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

use clap::Args;
use tphdb::{Direction, IteratorMode, Options, ReadOptions, Snapshot, WriteBatch, DB};

type BoxError = Box<dyn std::error::Error>;

#[derive(Args)]
pub struct StressArgs {
    /// How long to run.
    #[arg(long, default_value_t = 180)]
    seconds: u64,
    /// Worker threads.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// Distinct keys.
    #[arg(long, default_value_t = 20_000)]
    keys: u32,
    /// Mean value size in bytes (values are 0 to twice this).
    #[arg(long, default_value_t = 100)]
    value_size: u32,
    /// Close, check everything and reopen this often (0: never).
    #[arg(long, default_value_t = 30)]
    reopen_seconds: u64,
    /// Memtable size in KiB: small, so that flushes and compactions run.
    #[arg(long, default_value_t = 256)]
    write_buffer_kb: usize,
    /// Database directory (default: a temporary directory, removed after).
    #[arg(long)]
    db: Option<PathBuf>,
    /// Seed of the workers' choices (default: random).
    #[arg(long)]
    seed: Option<u64>,
}

/// Kinds of operations, in the order of the report.
const KINDS: [&str; 8] = [
    "get",
    "put",
    "delete",
    "batch",
    "multi_get",
    "scan",
    "snapshot",
    "flush",
];

struct Model {
    keys: Vec<Mutex<Option<u64>>>,
    generation: AtomicU64,
    value_size: u32,
}

impl Model {
    fn lock(&self, k: u32) -> MutexGuard<'_, Option<u64>> {
        self.keys[k as usize]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Locks keys `from..to` in order.
    fn lock_range(&self, from: u32, to: u32) -> Vec<MutexGuard<'_, Option<u64>>> {
        (from..to).map(|k| self.lock(k)).collect()
    }

    fn next_generation(&self) -> u64 {
        self.generation.fetch_add(1, Ordering::Relaxed)
    }

    fn value(&self, k: u32, generation: u64) -> Vec<u8> {
        let mut v = format!("k{k}.g{generation}|").into_bytes();
        let mut x = generation.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(k);
        let len = (x % (2 * u64::from(self.value_size) + 1)) as usize;
        while v.len() < len {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            v.push((x >> 56) as u8);
        }
        v
    }

    fn expected(&self, k: u32, generation: Option<u64>) -> Option<Vec<u8>> {
        generation.map(|g| self.value(k, g))
    }
}

fn key(k: u32) -> Vec<u8> {
    format!("key{k:08}").into_bytes()
}

/// A value as a failure shows it: its first bytes.
fn shown(v: Option<&[u8]>) -> Option<String> {
    v.map(|v| String::from_utf8_lossy(&v[..v.len().min(24)]).into_owned())
}

fn key_index(key: &[u8]) -> Option<u32> {
    std::str::from_utf8(key)
        .ok()?
        .strip_prefix("key")?
        .parse()
        .ok()
}

#[derive(Default)]
struct Counters {
    ops: [AtomicU64; KINDS.len()],
    /// Values and absences compared against the model.
    checked: AtomicU64,
    failures: AtomicU64,
}

struct Stress<'a> {
    args: &'a StressArgs,
    model: Model,
    counters: Counters,
    db: RwLock<Option<DB>>,
    stop: AtomicBool,
    messages: Mutex<Vec<String>>,
}

impl Stress<'_> {
    fn fail(&self, what: String) {
        self.counters.failures.fetch_add(1, Ordering::Relaxed);
        let mut m = self.messages.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() < 20 {
            eprintln!("FAILURE: {what}");
            m.push(what);
        }
    }

    /// Checks a value read against the model's; false (and counted as a
    /// failure) if they differ.
    fn check(&self, what: &str, k: u32, got: Option<&[u8]>, want: Option<&[u8]>) -> bool {
        self.counters.checked.fetch_add(1, Ordering::Relaxed);
        if got == want {
            return true;
        }
        self.fail(format!(
            "{what} of key {k}: got {:?}, expected {:?}",
            shown(got),
            shown(want)
        ));
        false
    }

    /// Prints what a read of key `k` through `snapshot` returns now, and
    /// where the snapshot holds it, after a failure about it.
    fn explain(&self, k: u32, snapshot: &Snapshot<'_>, when: &str) {
        let again = snapshot.get(key(k)).map(|v| shown(v.as_deref()));
        let lines = snapshot.explain(key(k));
        eprintln!(
            "  key {k} {when}: read again {again:?}\n    {}",
            lines.join("\n    ")
        );
    }

    fn worker(&self, seed: u64) {
        let mut rng = fastrand::Rng::with_seed(seed);
        while !self.stop.load(Ordering::Relaxed) {
            let guard = self.db.read().unwrap_or_else(|e| e.into_inner());
            // Gone only if the coordinator gave up (see `StopOnDrop`).
            let Some(db) = guard.as_ref() else { break };
            let kind = match rng.u32(..1000) {
                0..=399 => 0,
                400..=599 => 1,
                600..=679 => 2,
                680..=779 => 3,
                780..=849 => 4,
                850..=929 => 5,
                930..=996 => 6,
                _ => 7,
            };
            if let Err(e) = self.op(db, kind, &mut rng) {
                self.fail(format!("{}: error {e}", KINDS[kind]));
            }
            self.counters.ops[kind].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn op(&self, db: &DB, kind: usize, rng: &mut fastrand::Rng) -> tphdb::Result<()> {
        let m = &self.model;
        let n = self.args.keys;
        match kind {
            0 => {
                let k = rng.u32(..n);
                let g = m.lock(k);
                let got = db.get(key(k))?;
                if !self.check("get", k, got.as_deref(), m.expected(k, *g).as_deref()) {
                    self.explain(k, &db.snapshot(), "after the get");
                }
            }
            1 | 2 => {
                let k = rng.u32(..n);
                let mut g = m.lock(k);
                if kind == 1 {
                    let generation = m.next_generation();
                    db.put(key(k), m.value(k, generation))?;
                    *g = Some(generation);
                } else {
                    db.delete(key(k))?;
                    *g = None;
                }
            }
            3 => {
                // Distinct keys, locked in order.
                let mut ks: Vec<u32> = (0..rng.u32(2..8)).map(|_| rng.u32(..n)).collect();
                ks.sort_unstable();
                ks.dedup();
                let mut guards: Vec<_> = ks.iter().map(|&k| m.lock(k)).collect();
                let mut batch = WriteBatch::default();
                let mut after = Vec::new();
                for &k in &ks {
                    if rng.u32(..4) == 0 {
                        batch.delete(key(k));
                        after.push(None);
                    } else {
                        let generation = m.next_generation();
                        batch.put(key(k), m.value(k, generation));
                        after.push(Some(generation));
                    }
                }
                db.write(batch)?;
                for (g, a) in guards.iter_mut().zip(after) {
                    **g = a;
                }
            }
            4 => {
                let from = rng.u32(..n);
                let to = (from + rng.u32(1..16)).min(n);
                let guards = m.lock_range(from, to);
                let got = db.multi_get((from..to).map(key));
                for ((k, g), r) in (from..to).zip(&guards).zip(got) {
                    let want = m.expected(k, **g);
                    if !self.check("multi_get", k, r?.as_deref(), want.as_deref()) {
                        self.explain(k, &db.snapshot(), "after the multi_get");
                    }
                }
            }
            5 => {
                let from = rng.u32(..n);
                let to = (from + rng.u32(1..64)).min(n);
                let guards = m.lock_range(from, to);
                let opts = ReadOptions {
                    lower_bound: Some(key(from)),
                    upper_bound: Some(key(to)),
                    ..ReadOptions::default()
                };
                self.check_scan(db, opts, rng.bool(), from, &guards)?;
            }
            6 => {
                // Take a snapshot of a locked range, change the range, then
                // read the snapshot: it must still show the old state.
                let from = rng.u32(..n);
                let to = (from + rng.u32(1..32)).min(n);
                let mut guards = m.lock_range(from, to);
                let before: Vec<Option<u64>> = guards.iter().map(|g| **g).collect();
                let snapshot = db.snapshot();
                for (i, g) in guards.iter_mut().enumerate() {
                    if rng.bool() {
                        let k = from + i as u32;
                        let generation = m.next_generation();
                        db.put(key(k), m.value(k, generation))?;
                        **g = Some(generation);
                    }
                }
                if rng.u32(..8) == 0 {
                    db.flush()?;
                }
                for (i, &b) in before.iter().enumerate() {
                    let k = from + i as u32;
                    let got = snapshot.get(key(k))?;
                    let want = m.expected(k, b);
                    if !self.check("snapshot get", k, got.as_deref(), want.as_deref()) {
                        self.explain(k, &snapshot, "in the snapshot");
                    }
                }
                let opts = ReadOptions {
                    snapshot: Some(&snapshot),
                    lower_bound: Some(key(from)),
                    upper_bound: Some(key(to)),
                };
                let old: Vec<Option<u64>> = before;
                self.check_scan_against(db, opts, rng.bool(), from, &old)?;
            }
            _ => {
                if rng.bool() {
                    db.flush()?;
                } else {
                    db.compact_range(None, None)?;
                }
            }
        }
        Ok(())
    }

    fn check_scan(
        &self,
        db: &DB,
        opts: ReadOptions<'_>,
        reverse: bool,
        from: u32,
        guards: &[MutexGuard<'_, Option<u64>>],
    ) -> tphdb::Result<()> {
        let state: Vec<Option<u64>> = guards.iter().map(|g| **g).collect();
        self.check_scan_against(db, opts, reverse, from, &state)
    }

    /// Scans `[from, from + state.len())` with `opts` (bounds set) and
    /// compares the keys and values with the model's `state` of the range.
    fn check_scan_against(
        &self,
        db: &DB,
        opts: ReadOptions<'_>,
        reverse: bool,
        from: u32,
        state: &[Option<u64>],
    ) -> tphdb::Result<()> {
        let m = &self.model;
        let snapshot = opts.snapshot;
        let mode = if reverse {
            IteratorMode::End
        } else {
            IteratorMode::Start
        };
        let mut got = Vec::new();
        for item in db.iterator_opt(mode, opts) {
            let (k, v) = item?;
            got.push((k.to_vec(), v.to_vec()));
        }
        if reverse {
            got.reverse();
        }
        let want: Vec<(u32, Vec<u8>)> = state
            .iter()
            .enumerate()
            .filter_map(|(i, g)| g.map(|g| (from + i as u32, m.value(from + i as u32, g))))
            .collect();
        self.counters
            .checked
            .fetch_add(state.len() as u64, Ordering::Relaxed);
        let same = got.len() == want.len()
            && got
                .iter()
                .zip(&want)
                .all(|((gk, gv), (wk, wv))| key_index(gk) == Some(*wk) && gv == wv);
        if !same {
            let first_bad = got
                .iter()
                .zip(&want)
                .position(|((gk, gv), (wk, wv))| key_index(gk) != Some(*wk) || gv != wv);
            let detail = first_bad.map(|i| {
                let k = want[i].0;
                let (gk, gv) = &got[i];
                format!(
                    ": key {:?} {:?}, expected key {k} {:?}",
                    key_index(gk),
                    shown(Some(gv)),
                    shown(Some(&want[i].1))
                )
            });
            self.fail(format!(
                "{} scan of keys {from}..{}: {} entries, expected {} (first difference at entry {first_bad:?}{})",
                if reverse { "reverse" } else { "forward" },
                from + state.len() as u32,
                got.len(),
                want.len(),
                detail.unwrap_or_default()
            ));
            if let Some(i) = first_bad {
                let fresh;
                let snapshot = match snapshot {
                    Some(s) => s,
                    None => {
                        fresh = db.snapshot();
                        &fresh
                    }
                };
                self.explain(want[i].0, snapshot, "where the scan read it");
            }
        }
        Ok(())
    }

    /// Compares the whole database with the model (no worker runs).
    fn check_all(&self, db: &DB) -> tphdb::Result<()> {
        let m = &self.model;
        let mut want = (0..self.args.keys).filter_map(|k| m.lock(k).map(|g| (k, g)));
        let mut extra = 0;
        for item in db.iterator(IteratorMode::From(b"key", Direction::Forward)) {
            let (k, v) = item?;
            let Some(ki) = key_index(&k) else {
                extra += 1;
                continue;
            };
            match want.next() {
                Some((wk, g)) if wk == ki => {
                    self.check("full scan", ki, Some(&v), Some(&m.value(ki, g)));
                }
                Some((wk, _)) => self.fail(format!("full scan: key {ki} where {wk} was expected")),
                None => self.fail(format!("full scan: key {ki} after the last expected key")),
            }
        }
        if let Some((wk, _)) = want.next() {
            self.fail(format!("full scan: key {wk} and later missing"));
        }
        if extra > 0 {
            self.fail(format!("full scan: {extra} keys the workload never wrote"));
        }
        Ok(())
    }
}

/// Sets the flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

fn options(a: &StressArgs) -> Options {
    Options {
        write_buffer_bytes: a.write_buffer_kb << 10,
        // Move every memtable that snapshots and scans pin past its flush to
        // a file, while other threads read it.
        pinned_memtable_bytes: 0,
        tph_target_bytes: (4 * a.write_buffer_kb as u64) << 10,
        ..Options::default()
    }
}

pub fn run(a: StressArgs) -> Result<(), BoxError> {
    let tmp = tempfile::tempdir()?;
    let dir = a.db.clone().unwrap_or_else(|| tmp.path().join("db"));
    if dir.exists() {
        return Err(format!("{} exists: stress needs a new database", dir.display()).into());
    }
    let seed = a.seed.unwrap_or_else(|| fastrand::u64(..));
    println!(
        "stress: {} threads, {} keys, {} s, reopen every {} s, seed {seed}, db {}",
        a.threads,
        a.keys,
        a.seconds,
        a.reopen_seconds,
        dir.display()
    );
    let s = Stress {
        args: &a,
        model: Model {
            keys: (0..a.keys).map(|_| Mutex::new(None)).collect(),
            generation: AtomicU64::new(0),
            value_size: a.value_size,
        },
        counters: Counters::default(),
        db: RwLock::new(Some(DB::open(&options(&a), &dir)?)),
        stop: AtomicBool::new(false),
        messages: Mutex::new(Vec::new()),
    };
    let started = Instant::now();
    let deadline = started + Duration::from_secs(a.seconds);
    let mut reopens = 0u32;
    std::thread::scope(|scope| -> Result<(), BoxError> {
        for t in 0..a.threads {
            let s = &s;
            scope.spawn(move || s.worker(seed.wrapping_add(t as u64)));
        }
        // However this thread ends (an error, a panic), the workers stop:
        // the scope waits for them.
        let _stop = StopOnDrop(&s.stop);
        let mut next_reopen = started + Duration::from_secs(a.reopen_seconds);
        let mut next_report = started + Duration::from_secs(5);
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            let now = Instant::now();
            if now >= next_report {
                next_report = now + Duration::from_secs(5);
                let ops: u64 = s
                    .counters
                    .ops
                    .iter()
                    .map(|o| o.load(Ordering::Relaxed))
                    .sum();
                println!(
                    "  {:.0} s: {ops} operations, {} values checked, {} failures, {reopens} reopens",
                    started.elapsed().as_secs_f64(),
                    s.counters.checked.load(Ordering::Relaxed),
                    s.counters.failures.load(Ordering::Relaxed)
                );
            }
            if a.reopen_seconds > 0 && now >= next_reopen && now < deadline {
                let mut guard = s.db.write().unwrap_or_else(|e| e.into_inner());
                let db = guard.take().expect("open");
                db.close()?;
                let db = DB::open(&options(&a), &dir)?;
                s.check_all(&db)?;
                *guard = Some(db);
                reopens += 1;
                next_reopen = Instant::now() + Duration::from_secs(a.reopen_seconds);
            }
        }
        Ok(())
    })?;
    let db =
        s.db.write()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .expect("open");
    let stats = db.stats();
    db.close()?;
    let db = DB::open(&options(&a), &dir)?;
    s.check_all(&db)?;
    db.close()?;
    let elapsed = started.elapsed().as_secs_f64();
    let ops: Vec<u64> = s
        .counters
        .ops
        .iter()
        .map(|o| o.load(Ordering::Relaxed))
        .collect();
    let total: u64 = ops.iter().sum();
    println!("{:<10} {:>12}", "operation", "count");
    for (k, n) in KINDS.iter().zip(&ops) {
        println!("{k:<10} {n:>12}");
    }
    let failures = s.counters.failures.load(Ordering::Relaxed);
    println!(
        "{total} operations in {elapsed:.0} s ({:.0}/s), {} values checked, {reopens} reopens with a full check, {} flushes, {} compactions, {} pinned memtables moved to files (since the last reopen): {failures} failures",
        total as f64 / elapsed,
        s.counters.checked.load(Ordering::Relaxed),
        stats.flushes,
        stats.compactions,
        stats.memtables_spilled
    );
    if failures > 0 {
        return Err(format!("{failures} failures (seed {seed})").into());
    }
    Ok(())
}
