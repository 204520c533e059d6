//! One engine's run of a side-by-side benchmark, in its own process: load,
//! settle, the measured phase, settle again, and the figures as JSON.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::engines::{self, EngineConfig, Kv};
use super::memory::{peak_rss, sampled};
use super::permutation::Permutation;
use super::phase::{latency_summary, phase, us, Outcome, PhaseResult, ThreadOps};
use super::report::round;
use super::result::EngineResult;
use super::workload::{KeyStyle, Workload};
use super::ycsb::{self, OpKind, OpStream};

type BoxError = Box<dyn std::error::Error>;

/// What one child runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChildSpec {
    pub workload: Workload,
    pub engine: String,
    pub dir: PathBuf,
    pub keys: u64,
    pub ops: u64,
    pub key_size: usize,
    pub value_size: usize,
    pub threads: usize,
    pub seconds: f64,
    pub seed: u64,
    pub scan_length: usize,
    pub config: EngineConfig,
}

/// Pogreb's benchmark data: random bytes of a random length in `len`,
/// drawn from `i`.
fn pogreb_bytes(i: u64, len: std::ops::RangeInclusive<usize>) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(i);
    let n = rng.usize(len);
    (0..n).map(|_| rng.u8(..)).collect()
}

/// db_bench's key `i`: a 16-digit decimal index padded to `size` (8..16
/// bytes: the big-endian index, padded).
pub fn bench_key(i: u64, size: usize) -> Vec<u8> {
    let mut k = if size >= 16 {
        format!("{i:016}").into_bytes()
    } else {
        i.to_be_bytes().to_vec()
    };
    k.resize(size.max(8), b'x');
    k
}

/// The key of record `i` in a workload's style.
#[derive(Clone, Copy)]
struct Keys {
    style: KeyStyle,
    size: usize,
}

impl Keys {
    fn key(&self, i: u64) -> Vec<u8> {
        match self.style {
            KeyStyle::Ycsb => ycsb::record_key(i, self.size),
            KeyStyle::Pogreb => pogreb_bytes(i, 16..=64),
            KeyStyle::Bench => bench_key(i, self.size),
        }
    }
}

/// What the kernel counted of this process's storage I/O
/// (`/proc/self/io`).
#[derive(Clone, Copy, Debug, Default)]
struct ProcIo {
    read_bytes: u64,
    write_bytes: u64,
    /// Dirtied, then truncated or deleted before it was written back.
    cancelled_write_bytes: u64,
}

impl ProcIo {
    fn now() -> ProcIo {
        let s = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
        let field = |name: &str| {
            s.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        ProcIo {
            read_bytes: field("read_bytes:"),
            write_bytes: field("write_bytes:"),
            cancelled_write_bytes: field("cancelled_write_bytes:"),
        }
    }

    /// Bytes written from `from` to `self` that reached the device.
    fn device_written_since(&self, from: &ProcIo) -> u64 {
        (self.write_bytes - from.write_bytes)
            .saturating_sub(self.cancelled_write_bytes - from.cancelled_write_bytes)
    }
}

/// Bytes allocated to the files under `dir`.
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(|e| e.ok())
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            // Allocated blocks: sparse map files count what they hold.
            Ok(m) => std::os::unix::fs::MetadataExt::blocks(&m) * 512,
            Err(_) => 0,
        })
        .sum()
}

/// Values: slices of a random buffer, different per write.
pub struct Values(Vec<u8>);

impl Values {
    pub fn new(size: usize) -> Values {
        let mut rng = fastrand::Rng::with_seed(7);
        Values((0..(1 << 20) + size).map(|_| rng.u8(..)).collect())
    }

    pub fn get(&self, i: u64, size: usize) -> &[u8] {
        let at = (i.wrapping_mul(0x9e37_79b9) as usize) % (self.0.len() - size);
        &self.0[at..at + size]
    }
}

fn get_outcome(db: &dyn Kv, key: &[u8], expect: bool) -> engines::Result<Outcome> {
    let mut o = Outcome::new(OpKind::Read);
    let found = db.get(key)?;
    o.read = found.map_or(0, |n| (key.len() + n) as u64);
    o.unexpected = found.is_some() != expect;
    o.expect_found = expect;
    Ok(o)
}

/// What every phase of a run shares.
struct Run<'a> {
    spec: &'a ChildSpec,
    keys: Keys,
    values: Values,
    /// Bytes of one entry (key and value).
    entry: u64,
}

/// The measured phase, and what ran beside it.
struct Measured {
    phase: PhaseResult,
    /// Bytes the background writer wrote (`readwhilewriting`).
    writer_bytes: u64,
    /// Records in the store at the end (YCSB D and E insert).
    records: u64,
}

/// Runs one engine and returns its figures.
pub fn child(spec: ChildSpec) -> Result<EngineResult, BoxError> {
    let open = || engines::open(&spec.engine, &spec.dir, &spec.config).map_err(|e| e.to_string());
    let mut engine = open()?;
    let run = Run {
        spec: &spec,
        keys: Keys {
            style: spec.workload.key_style(),
            size: spec.key_size,
        },
        values: Values::new(spec.value_size),
        entry: (spec.key_size + spec.value_size) as u64,
    };
    let io_start = ProcIo::now();
    let load_ops_per_sec = if spec.workload.loads() {
        Some(run.load(engine.as_ref())?)
    } else {
        None
    };
    if spec.workload == Workload::Pogreb {
        // Pogreb's benchmark reads after a reopen.
        drop(engine);
        engine = open()?;
    }
    let db: &dyn Kv = engine.as_ref();
    db.mark_run().map_err(|e| e.to_string())?;
    let io_loaded = ProcIo::now();
    let (ran, memory) = sampled(db, || -> Result<_, BoxError> {
        let measured = run.measure(db)?;
        let io_measured = ProcIo::now();
        // Write amplification counts the background work the writes caused.
        let settle_start = Instant::now();
        db.settle().map_err(|e| e.to_string())?;
        Ok((measured, io_measured, settle_start.elapsed().as_secs_f64()))
    });
    let (measured, io_measured, settle_secs) = ran?;
    let io_end = ProcIo::now();
    let io = [io_start, io_loaded, io_measured, io_end];
    let mut r = run.result(db, &measured, load_ops_per_sec, io, settle_secs);
    r.memory_at_peak_mb = memory.at_peak().into_iter().collect();
    r.waited_ms_per_sec = memory.waited_ms_per_sec();
    r.rss_mb_per_sec = memory.rss_mb;
    r.memory_parts_mb_per_sec = memory.parts_mb;
    Ok(r)
}

impl Run<'_> {
    /// Writes every key once, in a random order (YCSB: record order, its
    /// keys are hashed), settles, and returns the load's operations per
    /// second.
    fn load(&self, db: &dyn Kv) -> Result<f64, BoxError> {
        let spec = self.spec;
        let shuffled = Permutation::new(spec.keys, 1);
        let in_order = spec.workload.key_style() == KeyStyle::Ycsb;
        let order = |i: u64| if in_order { i } else { shuffled.get(i) };
        let (order, vs, entry) = (&order, spec.value_size, self.entry);
        let pogreb = spec.workload == Workload::Pogreb;
        let load = phase(
            db,
            &format!("{} load", spec.engine),
            spec.threads,
            spec.keys,
            Duration::MAX,
            &|_| {
                Box::new(move |i| {
                    let k = order(i);
                    if pogreb {
                        let v = pogreb_bytes(k ^ (1 << 63), 128..=512);
                        let k = self.keys.key(k);
                        db.put(&k, &v)?;
                        Outcome::wrote(OpKind::Insert, (k.len() + v.len()) as u64)
                    } else {
                        db.put(&self.keys.key(k), self.values.get(k, vs))?;
                        Outcome::wrote(OpKind::Insert, entry)
                    }
                })
            },
        )?;
        eprintln!("  {} load: settling", spec.engine);
        db.settle().map_err(|e| e.to_string())?;
        Ok(round(load.ops as f64 / load.secs, 0))
    }

    /// The operations one thread of the measured phase runs.
    fn thread_ops<'a>(
        &'a self,
        db: &'a dyn Kv,
        t: usize,
        fill_order: &'a Permutation,
        records: &'a AtomicU64,
    ) -> ThreadOps<'a> {
        let spec = self.spec;
        let (keys, vs, entry) = (spec.keys, spec.value_size, self.entry);
        let key = move |i: u64| self.keys.key(i);
        let values = &self.values;
        let mut rng = fastrand::Rng::with_seed(spec.seed.wrapping_add(t as u64 * 7919));
        match spec.workload {
            Workload::Fillseq => Box::new(move |i| {
                db.put(&key(i), values.get(i, vs))?;
                Outcome::wrote(OpKind::Insert, entry)
            }),
            Workload::Fillrandom => Box::new(move |i| {
                let k = fill_order.get(i);
                db.put(&key(k), values.get(k, vs))?;
                Outcome::wrote(OpKind::Insert, entry)
            }),
            Workload::Overwrite => Box::new(move |i| {
                db.put(&key(rng.u64(..keys)), values.get(i ^ 0x5555, vs))?;
                Outcome::wrote(OpKind::Update, entry)
            }),
            Workload::Pogreb => Box::new(move |i| get_outcome(db, &key(fill_order.get(i)), true)),
            Workload::Readrandom | Workload::Readwhilewriting => {
                Box::new(move |_| get_outcome(db, &key(rng.u64(..keys)), true))
            }
            Workload::Readmissing => {
                Box::new(move |_| get_outcome(db, &key(keys + rng.u64(..keys.max(1))), false))
            }
            // The hot set: 1% of the keys, as db_bench's readhot.
            Workload::Readhot => {
                Box::new(move |_| get_outcome(db, &key(rng.u64(..(keys / 100).max(1))), true))
            }
            Workload::Readseq => Box::new(move |_| {
                let n = db.scan(&key(0), usize::MAX)?;
                Outcome::read(OpKind::Scan, n as u64 * entry)
            }),
            Workload::Seekrandom => Box::new(move |_| {
                let n = db.scan(&key(rng.u64(..keys)), spec.scan_length)?;
                Outcome::read(OpKind::Scan, n as u64 * entry)
            }),
            Workload::Deleterandom => Box::new(move |i| {
                db.delete(&key(fill_order.get(i)))?;
                Outcome::wrote(OpKind::Delete, spec.key_size as u64)
            }),
            Workload::YcsbA
            | Workload::YcsbB
            | Workload::YcsbC
            | Workload::YcsbD
            | Workload::YcsbE
            | Workload::YcsbF => {
                let wl = spec.workload.ycsb().expect("a YCSB workload");
                let mut stream = OpStream::new(wl, keys, spec.seed.wrapping_add(t as u64));
                Box::new(move |i| {
                    stream.records = records.load(Ordering::Relaxed);
                    let op = stream.next_op();
                    let k = key(op.record);
                    let version = ((t as u64) << 40) | i;
                    let mut o = Outcome::new(op.kind);
                    match op.kind {
                        OpKind::Read => return get_outcome(db, &k, true),
                        OpKind::Update => {
                            db.put(&k, values.get(version, vs))?;
                            o.written = entry;
                        }
                        OpKind::Insert => {
                            let n = records.fetch_add(1, Ordering::Relaxed);
                            db.put(&key(n), values.get(n, vs))?;
                            o.written = entry;
                        }
                        OpKind::Scan => o.read = db.scan(&k, op.scan_len)? as u64 * entry,
                        OpKind::ReadModifyWrite => {
                            o.read = db.get(&k)?.map_or(0, |n| (spec.key_size + n) as u64);
                            db.put(&k, values.get(version, vs))?;
                            o.written = entry;
                        }
                        OpKind::Delete => unreachable!("YCSB core workloads do not delete"),
                    }
                    Ok(o)
                })
            }
        }
    }

    /// The measured phase: the workload's operations on `threads` threads,
    /// and for `readwhilewriting` one more thread overwriting beside them.
    fn measure(&self, db: &dyn Kv) -> Result<Measured, BoxError> {
        let spec = self.spec;
        let keys = spec.keys;
        let fill_order = Permutation::new(keys, 2);
        let records = AtomicU64::new(keys);
        let stop_writer = AtomicBool::new(false);
        let writer_bytes = AtomicU64::new(0);
        let ops = spec.workload.measured_ops(keys, spec.ops);
        let label = format!("{} {}", spec.engine, spec.workload.name());
        let limit = Duration::from_secs_f64(spec.seconds);
        let make = |t: usize| self.thread_ops(db, t, &fill_order, &records);
        let result = std::thread::scope(|s| {
            if spec.workload.has_background_writer() {
                let (stop, bytes) = (&stop_writer, &writer_bytes);
                s.spawn(move || -> engines::Result<()> {
                    let mut rng = fastrand::Rng::with_seed(99);
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let k = self.keys.key(rng.u64(..keys));
                        db.put(&k, self.values.get(i, spec.value_size))?;
                        bytes.fetch_add(self.entry, Ordering::Relaxed);
                        i += 1;
                    }
                    Ok(())
                });
            }
            let r = phase(db, &label, spec.threads, ops, limit, &make);
            stop_writer.store(true, Ordering::Relaxed);
            r
        })?;
        Ok(Measured {
            phase: result,
            writer_bytes: writer_bytes.load(Ordering::Relaxed),
            records: records.load(Ordering::Relaxed),
        })
    }

    /// The figures of the run. `io` is the kernel's count at the start, after
    /// the load, after the measured phase and after the final settle.
    fn result(
        &self,
        db: &dyn Kv,
        m: &Measured,
        load_ops_per_sec: Option<f64>,
        io: [ProcIo; 4],
        settle_secs: f64,
    ) -> EngineResult {
        let spec = self.spec;
        let run = &m.phase;
        let [start, loaded, measured, end] = io;
        let all = run.rec.all();
        let load_user = if spec.workload.loads() {
            spec.keys * self.entry
        } else {
            0
        };
        let user_written = (load_user + run.written + m.writer_bytes).max(1) as f64;
        let counters = db.write_counters();
        let mb = |b: u64| round(b as f64 / 1e6, 1);
        let device = end.device_written_since(&start);
        let mut r = EngineResult {
            engine: spec.engine.clone(),
            ops: Some(run.ops),
            ops_per_sec: Some(round(run.ops as f64 / run.secs, 0)),
            keys_per_sec: (spec.workload == Workload::Readseq)
                .then(|| round(run.read as f64 / self.entry as f64 / run.secs, 0)),
            avg_us: Some(round(all.mean() / 1000.0, 2)),
            p50_us: Some(us(all.value_at_quantile(0.5))),
            p99_us: Some(us(all.value_at_quantile(0.99))),
            p999_us: Some(us(all.value_at_quantile(0.999))),
            load_ops_per_sec,
            write_amp: counters.map(|c| round(c.flush_and_compaction as f64 / user_written, 2)),
            wal_amp: counters
                .and_then(|c| c.wal)
                .map(|wal| round(wal as f64 / user_written, 2)),
            device_write_amp: Some(round(device as f64 / user_written, 2)),
            // Without user reads (fills, deletes) there is nothing to
            // amplify.
            read_amp: (run.read > 0).then(|| {
                round(
                    (measured.read_bytes - loaded.read_bytes) as f64 / run.read as f64,
                    2,
                )
            }),
            disk_read_mb: Some(mb(measured.read_bytes - start.read_bytes)),
            load_written_mb: Some(mb(loaded.write_bytes - start.write_bytes)),
            disk_written_mb: Some(mb(end.write_bytes - start.write_bytes)),
            device_written_mb: Some(mb(device)),
            final_settle_seconds: Some(round(settle_secs, 2)),
            space_mb: Some(mb(dir_bytes(&spec.dir))),
            peak_rss_mb: Some(mb(peak_rss())),
            unexpected_reads: Some(run.unexpected),
            throughput_per_sec: run.per_second.clone(),
            latency: run
                .rec
                .hists
                .iter()
                .map(|(k, h)| (k.name().to_string(), latency_summary(h)))
                .collect(),
            ..EngineResult::default()
        };
        for (k, v) in db.extra(m.records, user_written as u64) {
            r.engine_figures.insert(k.to_string(), v);
        }
        r
    }
}
