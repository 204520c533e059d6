//! db_bench-style workloads on a tphdb database in a temporary directory.
//!
//! Keys are `--key-size` bytes (a 16-digit index, padded), values
//! `--value-size` random bytes. Fills write every key exactly once, in
//! random or sequential order (db_bench's fillrandom draws with replacement;
//! writing each key once makes "reads per present-key get" exact). Read
//! workloads load first, flush, wait for compactions and reopen, so that
//! reads go to the TPHs.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tphdb::fs::ReadMode;
use tphdb::{DbStats, Options, DB};

use super::disk::{fio_randread, raw_direct_reads};
use super::latency::histogram;
use super::report::round;
use super::Report;

#[derive(Args, Clone, Debug)]
pub struct DbArgs {
    /// Keys loaded (and written, for fills).
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Operations of the measured phase (default: --keys).
    #[arg(long)]
    pub ops: Option<u64>,
    /// Key size in bytes (at least 8).
    #[arg(long, default_value_t = 20)]
    pub key_size: usize,
    /// Value size in bytes.
    #[arg(long, default_value_t = 128)]
    pub value_size: usize,
    /// Threads of the measured phase (readers, for readwhilewriting).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Time limit of the measured phase.
    #[arg(long, default_value_t = 30.0)]
    pub seconds: f64,
    /// Read piece files with O_DIRECT.
    #[arg(long)]
    pub direct_io: bool,
    /// Parent directory of the database (default: the current directory;
    /// O_DIRECT needs a real disk, not tmpfs).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Write results as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Memtable size in MiB (default: the engine's).
    #[arg(long)]
    pub write_buffer_mb: Option<usize>,
    /// TPH target size in MiB (default: the engine's).
    #[arg(long)]
    pub tph_target_mb: Option<u64>,
    /// TPHs per parent in the next level.
    #[arg(long)]
    pub fanout: Option<u32>,
    /// Signature bits of the global index.
    #[arg(long)]
    pub signature_bits: Option<u32>,
    /// One-level mode.
    #[arg(long)]
    pub one_level: bool,
    /// Single-tier mode.
    #[arg(long)]
    pub single_tier: bool,
    /// Seconds of fio (0 or missing fio: skipped).
    #[arg(long, default_value_t = 5)]
    pub fio_seconds: u32,
    /// Keys read after each seek (seekrandom).
    #[arg(long, default_value_t = 100)]
    pub scan_length: usize,
    /// MiB of unflushed writes left in the WAL for the `open` workload.
    #[arg(long, default_value_t = 64)]
    pub wal_mb: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DbWorkload {
    FillRandom,
    FillSeq,
    ReadRandom,
    ReadMissing,
    ReadWhileWriting,
    SeekRandom,
    Open,
}

impl DbWorkload {
    fn name(self) -> &'static str {
        match self {
            DbWorkload::FillRandom => "fillrandom",
            DbWorkload::FillSeq => "fillseq",
            DbWorkload::ReadRandom => "readrandom",
            DbWorkload::ReadMissing => "readmissing",
            DbWorkload::ReadWhileWriting => "readwhilewriting",
            DbWorkload::SeekRandom => "seekrandom",
            DbWorkload::Open => "open",
        }
    }
}

/// Key `i`: a 16-digit decimal index padded to `size` (8..16 bytes: the
/// big-endian index, padded).
pub fn key(i: u64, size: usize) -> Vec<u8> {
    let mut k = if size >= 16 {
        format!("{i:016}").into_bytes()
    } else {
        i.to_be_bytes().to_vec()
    };
    k.resize(size.max(8), b'x');
    k
}

/// Random bytes from which values are sliced.
struct Values(Vec<u8>);

impl Values {
    fn new(size: usize) -> Values {
        let mut rng = fastrand::Rng::with_seed(7);
        Values((0..(1 << 20) + size).map(|_| rng.u8(..)).collect())
    }

    fn get(&self, i: u64, size: usize) -> &[u8] {
        let at = (i.wrapping_mul(0x9e37_79b9) as usize) % (self.0.len() - size);
        &self.0[at..at + size]
    }
}

/// What a measured phase produced.
pub struct Phase {
    pub ops: u64,
    pub elapsed: Duration,
    pub hist: Histogram<u64>,
    /// Operations completed in each second of the phase.
    pub per_second: Vec<u64>,
}

impl Phase {
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Runs `op(thread, i)` on `threads` threads, `total` operations split
/// between them, until done or `limit`; prints a line per second.
pub fn run_phase(
    label: &str,
    threads: usize,
    total: u64,
    limit: Duration,
    op: &(dyn Fn(usize, u64) + Sync),
) -> Phase {
    let threads = threads.max(1);
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let mut per_second = Vec::new();
    let hists: Vec<Histogram<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (done, stop) = (&done, &stop);
                s.spawn(move || {
                    let mut h = histogram();
                    let (from, to) = (
                        total * t as u64 / threads as u64,
                        total * (t as u64 + 1) / threads as u64,
                    );
                    for i in from..to {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let t0 = Instant::now();
                        op(t, i);
                        h.saturating_record(t0.elapsed().as_nanos() as u64);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    h
                })
            })
            .collect();
        let mut last = 0;
        let mut tick = start;
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            if tick.elapsed() >= Duration::from_secs(1) {
                tick += Duration::from_secs(1);
                let now = done.load(Ordering::Relaxed);
                per_second.push(now - last);
                last = now;
                eprintln!(
                    "  {label}: {now}/{total} ops, {} ops/s in the last second",
                    per_second.last().copied().unwrap_or(0)
                );
            }
            if start.elapsed() > limit {
                stop.store(true, Ordering::Relaxed);
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    let elapsed = start.elapsed();
    let mut hist = histogram();
    for h in &hists {
        hist.add(h).expect("same bounds");
    }
    Phase {
        ops: done.load(Ordering::Relaxed),
        elapsed,
        hist,
        per_second,
    }
}

pub fn engine_options(a: &DbArgs) -> Options {
    let d = Options::default();
    Options {
        write_buffer_size: a.write_buffer_mb.map_or(d.write_buffer_size, |m| m << 20),
        tph_target_bytes: a.tph_target_mb.map_or(d.tph_target_bytes, |m| m << 20),
        fanout: a.fanout.unwrap_or(d.fanout),
        signature_bits: a.signature_bits.unwrap_or(d.signature_bits),
        one_level: a.one_level,
        single_tier: a.single_tier,
        read_mode: if a.direct_io {
            ReadMode::Direct
        } else {
            ReadMode::Mmap
        },
        ..d
    }
}

/// A shuffled permutation of `0..n`.
fn permutation(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    fastrand::Rng::with_seed(seed).shuffle(&mut v);
    v
}

/// Writes every key once (in `order`) and waits for background work.
fn load(db: &DB, a: &DbArgs, order: &[u64], values: &Values, threads: usize, label: &str) -> Phase {
    let limit = Duration::from_secs(u64::MAX / 4);
    run_phase(label, threads, order.len() as u64, limit, &|_, i| {
        let k = order[i as usize];
        db.put(key(k, a.key_size), values.get(k, a.value_size))
            .expect("put");
    })
}

/// Loads every key into a new database at `path`, lets flushes and
/// compactions finish, and closes it.
fn load_settled(
    opts: &Options,
    path: &Path,
    a: &DbArgs,
    values: &Values,
) -> Result<(), Box<dyn std::error::Error>> {
    let db = DB::open(opts, path)?;
    load(&db, a, &permutation(a.keys, 1), values, 1, "load");
    db.flush()?;
    db.wait_for_compactions()?;
    db.close()?;
    Ok(())
}

fn largest_piece(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "ph"))
        .max_by_key(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .map(|e| e.path())
}

fn tphdb_row(
    phase: &Phase,
    before: &DbStats,
    after: &DbStats,
    keys: u64,
) -> Vec<(&'static str, Value)> {
    let d = |f: fn(&DbStats) -> u64| f(after).saturating_sub(f(before));
    let gets = d(|s| s.gets);
    let user = d(|s| s.user_bytes_written);
    vec![
        ("ops_per_sec", json!(round(phase.ops_per_sec(), 0))),
        ("avg_us", json!(round(phase.hist.mean() / 1000.0, 2))),
        (
            "p50_us",
            json!(round(phase.hist.value_at_quantile(0.5) as f64 / 1000.0, 2)),
        ),
        (
            "p99_us",
            json!(round(phase.hist.value_at_quantile(0.99) as f64 / 1000.0, 2)),
        ),
        (
            "p999_us",
            json!(round(
                phase.hist.value_at_quantile(0.999) as f64 / 1000.0,
                2
            )),
        ),
        ("ops", json!(phase.ops)),
        (
            "write_amp",
            json!(if user == 0 {
                Value::Null
            } else {
                json!(round(d(|s| s.disk_bytes_written) as f64 / user as f64, 3))
            }),
        ),
        ("read_amp", json!(round(after.read_amplification, 2))),
        (
            "reads_per_get",
            json!(if gets == 0 {
                Value::Null
            } else {
                json!(round(d(|s| s.get_block_reads) as f64 / gets as f64, 4))
            }),
        ),
        (
            "index_bytes_per_key",
            json!(round(
                after.index_memory_bytes as f64 / keys.max(1) as f64,
                3
            )),
        ),
        ("stall_ms", json!(d(|s| s.stall_micros) / 1000)),
        ("throughput_per_sec", json!(phase.per_second)),
    ]
}

fn disk_rows(report: &mut Report, dir: &Path, a: &DbArgs, tphdb_ops: f64) {
    let Some(file) = largest_piece(dir) else {
        return;
    };
    eprintln!("  disk: random 4 KiB O_DIRECT reads of {}", file.display());
    if let Ok(raw) = raw_direct_reads(&file, 200_000, Duration::from_secs(5)) {
        report.result(
            "disk-4k-direct",
            vec![
                ("ops_per_sec", json!(round(raw.ops_per_sec(), 0))),
                ("avg_us", json!(round(raw.avg_us(), 2))),
                ("p99_us", json!(round(raw.quantile_us(0.99), 2))),
                (
                    "tphdb_ratio",
                    json!(round(tphdb_ops / raw.ops_per_sec(), 3)),
                ),
            ],
        );
    }
    if a.fio_seconds > 0 {
        if let Some(f) = fio_randread(&file, a.fio_seconds) {
            report.result(
                "fio-4k-direct-qd1",
                vec![
                    ("ops_per_sec", json!(round(f.iops, 0))),
                    ("avg_us", json!(round(f.mean_us, 2))),
                    ("p99_us", json!(round(f.p99_us, 2))),
                    ("tphdb_ratio", json!(round(tphdb_ops / f.iops, 3))),
                ],
            );
        }
    }
}

pub fn run(w: DbWorkload, a: DbArgs) -> Result<(), Box<dyn std::error::Error>> {
    let parent = a.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    let tmp = tempfile::tempdir_in(&parent)?;
    let path = tmp.path().join("db");
    let opts = engine_options(&a);
    let values = Values::new(a.value_size);
    let ops = a.ops.unwrap_or(a.keys);
    let limit = Duration::from_secs_f64(a.seconds);
    let mut report = Report::new(w.name());
    report.param("keys", a.keys);
    report.param("ops", ops);
    report.param("key_size", a.key_size);
    report.param("value_size", a.value_size);
    report.param("threads", a.threads);
    report.param("direct_io", a.direct_io);
    report.param("options", format!("{opts:?}"));
    eprintln!(
        "{}: {} keys of {}+{} bytes in {}",
        w.name(),
        a.keys,
        a.key_size,
        a.value_size,
        path.display()
    );

    match w {
        DbWorkload::FillRandom | DbWorkload::FillSeq => {
            let db = DB::open(&opts, &path)?;
            let order = if w == DbWorkload::FillSeq {
                (0..a.keys).collect()
            } else {
                permutation(a.keys, 1)
            };
            let before = db.stats();
            let phase = load(&db, &a, &order, &values, a.threads, w.name());
            eprintln!("  waiting for compactions to finish");
            let settle = Instant::now();
            db.flush()?;
            db.wait_for_compactions()?;
            let after = db.stats();
            let mut row = tphdb_row(&phase, &before, &after, a.keys);
            row.push((
                "settle_seconds",
                json!(round(settle.elapsed().as_secs_f64(), 2)),
            ));
            row.push(("levels", json!(after.levels.len())));
            row.push(("structure", json!(after.level_table())));
            eprint!("{}", after.level_table());
            report.result("tphdb", row);
            eprintln!("{}", after.report());
        }
        DbWorkload::ReadRandom | DbWorkload::ReadMissing | DbWorkload::ReadWhileWriting => {
            load_settled(&opts, &path, &a, &values)?;
            let db = DB::open(&opts, &path)?;
            let before = db.stats();
            let mut rngs: Vec<fastrand::Rng> = (0..a.threads.max(1))
                .map(|t| fastrand::Rng::with_seed(100 + t as u64))
                .collect();
            let rngs: Vec<std::sync::Mutex<fastrand::Rng>> =
                rngs.drain(..).map(std::sync::Mutex::new).collect();
            let keys = a.keys;
            let stop_writer = AtomicBool::new(false);
            let phase = std::thread::scope(|s| {
                if w == DbWorkload::ReadWhileWriting {
                    let (db, values, stop, a) = (&db, &values, &stop_writer, &a);
                    s.spawn(move || {
                        let mut rng = fastrand::Rng::with_seed(99);
                        while !stop.load(Ordering::Relaxed) {
                            let k = rng.u64(..keys);
                            db.put(key(k, a.key_size), values.get(k ^ 1, a.value_size))
                                .expect("put");
                        }
                    });
                }
                let phase = run_phase(w.name(), a.threads, ops, limit, &|t, _| {
                    let k = rngs[t].lock().expect("rng").u64(..keys);
                    let k = if w == DbWorkload::ReadMissing {
                        k + keys
                    } else {
                        k
                    };
                    let v = db.get_pinned(key(k, a.key_size)).expect("get");
                    assert_eq!(v.is_some(), w != DbWorkload::ReadMissing, "key {k}");
                    black_box(v);
                });
                stop_writer.store(true, Ordering::Relaxed);
                phase
            });
            let after = db.stats();
            let ops_per_sec = phase.ops_per_sec();
            report.result("tphdb", tphdb_row(&phase, &before, &after, a.keys));
            eprintln!("{}", after.report());
            db.close()?;
            if a.direct_io && w == DbWorkload::ReadRandom {
                disk_rows(&mut report, &path, &a, ops_per_sec);
            }
        }
        DbWorkload::SeekRandom => {
            load_settled(&opts, &path, &a, &values)?;
            let db = DB::open(&opts, &path)?;
            let rngs: Vec<std::sync::Mutex<fastrand::Rng>> = (0..a.threads.max(1))
                .map(|t| std::sync::Mutex::new(fastrand::Rng::with_seed(200 + t as u64)))
                .collect();
            let keys_read = AtomicU64::new(0);
            let scans = ops.min(a.keys);
            let phase = run_phase(w.name(), a.threads, scans, limit, &|t, _| {
                let k = rngs[t].lock().expect("rng").u64(..a.keys);
                let mut it = db.raw_iterator();
                it.seek(key(k, a.key_size));
                let mut n = 0;
                while it.valid() && n < a.scan_length {
                    black_box(it.value());
                    it.next();
                    n += 1;
                }
                it.status().expect("scan");
                keys_read.fetch_add(n as u64, Ordering::Relaxed);
            });
            let st = db.stats();
            let keys_per_sec =
                keys_read.load(Ordering::Relaxed) as f64 / phase.elapsed.as_secs_f64();
            report.param("scan_length", a.scan_length);
            report.result(
                "tphdb",
                vec![
                    ("ops_per_sec", json!(round(phase.ops_per_sec(), 0))),
                    ("keys_per_sec", json!(round(keys_per_sec, 0))),
                    ("avg_us", json!(round(phase.hist.mean() / 1000.0, 1))),
                    (
                        "p50_us",
                        json!(round(phase.hist.value_at_quantile(0.5) as f64 / 1000.0, 1)),
                    ),
                    (
                        "p99_us",
                        json!(round(phase.hist.value_at_quantile(0.99) as f64 / 1000.0, 1)),
                    ),
                    ("ops", json!(phase.ops)),
                    (
                        "disk_bytes_per_scan",
                        json!(st.disk_bytes_read / phase.ops.max(1)),
                    ),
                    (
                        "index_bytes_per_key",
                        json!(round(
                            st.index_memory_bytes as f64 / a.keys.max(1) as f64,
                            3
                        )),
                    ),
                    ("throughput_per_sec", json!(phase.per_second)),
                ],
            );
        }
        DbWorkload::Open => {
            load_settled(&opts, &path, &a, &values)?;
            // Each trial first leaves `wal_mb` of unflushed writes when
            // `with_wal`; the reopen replays them (and later flushes them).
            let fill_wal = || -> Result<(), Box<dyn std::error::Error>> {
                let db = DB::open(&opts, &path)?;
                db.wait_for_compactions()?;
                let n = (a.wal_mb << 20) / (a.key_size + a.value_size) as u64;
                let mut rng = fastrand::Rng::with_seed(5);
                for _ in 0..n {
                    let k = rng.u64(..a.keys);
                    db.put(key(k, a.key_size), values.get(k ^ 3, a.value_size))?;
                }
                drop(db);
                Ok(())
            };
            let time_open = |label: &str,
                             with_wal: bool|
             -> Result<(f64, DbStats), Box<dyn std::error::Error>> {
                let mut times = Vec::new();
                let mut stats = None;
                for _ in 0..3 {
                    if with_wal {
                        fill_wal()?;
                    }
                    let t = Instant::now();
                    let db = DB::open(&opts, &path)?;
                    times.push(t.elapsed().as_secs_f64() * 1000.0);
                    stats = Some(db.stats());
                    db.wait_for_compactions()?;
                    db.close()?;
                }
                times.sort_by(f64::total_cmp);
                eprintln!("  {label}: open {:.1} ms (median of 3)", times[1]);
                Ok((times[1], stats.expect("opened")))
            };
            let (empty_ms, _) = time_open("empty WAL", false)?;
            let (wal_ms, st) = time_open("with WAL", true)?;
            let db_bytes: u64 = std::fs::read_dir(&path)?
                .filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum();
            report.result(
                "tphdb",
                vec![
                    ("open_ms_empty_wal", json!(round(empty_ms, 1))),
                    ("open_ms_with_wal", json!(round(wal_ms, 1))),
                    ("wal_batches_replayed", json!(st.wal_replayed_batches)),
                    ("wal_mb", json!(a.wal_mb)),
                    ("db_bytes", json!(db_bytes)),
                    (
                        "index_bytes_per_key",
                        json!(round(
                            st.index_memory_bytes as f64 / a.keys.max(1) as f64,
                            3
                        )),
                    ),
                ],
            );
        }
    }
    report.print_table();
    if let Some(p) = &a.json {
        report.write_json(p)?;
    }
    Ok(())
}
