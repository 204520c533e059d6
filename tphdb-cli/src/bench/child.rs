//! One engine's run of a side-by-side benchmark, in its own process: load,
//! settle, the measured phase, settle again, and the figures as JSON.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::engines::{self, EngineConfig, Kv};
use super::latency::histogram;
use super::report::round;
use super::ycsb::{self, OpKind, OpStream};

type BoxError = Box<dyn std::error::Error>;

/// What one child runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChildSpec {
    pub workload: String,
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

/// Every workload the side-by-side runner knows.
pub const WORKLOADS: [&str; 17] = [
    "fillseq",
    "fillrandom",
    "overwrite",
    "readrandom",
    "readmissing",
    "readhot",
    "readseq",
    "seekrandom",
    "readwhilewriting",
    "deleterandom",
    "ycsb-a",
    "ycsb-b",
    "ycsb-c",
    "ycsb-d",
    "ycsb-e",
    "ycsb-f",
    "pogreb",
];

/// Whether the workload starts from a loaded store.
fn loads(workload: &str) -> bool {
    !matches!(workload, "fillseq" | "fillrandom")
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

/// Bytes the process read from and wrote to storage (`/proc/self/io`).
fn proc_io() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("read_bytes:"), field("write_bytes:"))
}

/// Peak resident set size in bytes (`VmHWM`).
fn peak_rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb << 10)
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

/// What one operation did.
struct Outcome {
    kind: OpKind,
    read: u64,
    written: u64,
    /// A read found nothing where a value was expected, or the reverse.
    unexpected: bool,
    /// Whether the operation's reads should find their keys.
    expect_found: bool,
}

impl Outcome {
    /// An operation that wrote `bytes` of keys and values.
    fn wrote(kind: OpKind, bytes: u64) -> engines::Result<Self> {
        let mut o = Outcome::new(kind);
        o.written = bytes;
        Ok(o)
    }

    /// An operation that read `bytes` of keys and values.
    fn read(kind: OpKind, bytes: u64) -> engines::Result<Self> {
        let mut o = Outcome::new(kind);
        o.read = bytes;
        Ok(o)
    }

    fn new(kind: OpKind) -> Self {
        Outcome {
            kind,
            read: 0,
            written: 0,
            unexpected: false,
            expect_found: true,
        }
    }
}

#[derive(Default)]
struct Recorder {
    hists: BTreeMap<OpKind, Histogram<u64>>,
}

impl Recorder {
    fn record(&mut self, kind: OpKind, ns: u64) {
        self.hists
            .entry(kind)
            .or_insert_with(histogram)
            .saturating_record(ns);
    }

    fn merge(&mut self, other: &Recorder) {
        for (k, h) in &other.hists {
            self.hists
                .entry(*k)
                .or_insert_with(histogram)
                .add(h)
                .expect("same bounds");
        }
    }

    fn all(&self) -> Histogram<u64> {
        let mut all = histogram();
        for h in self.hists.values() {
            all.add(h).expect("same bounds");
        }
        all
    }
}

fn us(ns: u64) -> f64 {
    round(ns as f64 / 1000.0, 2)
}

fn latency_json(h: &Histogram<u64>) -> Value {
    // A CDF for plots: quantiles spaced evenly in log(1 - q).
    let cdf: Vec<Value> = (0..=40)
        .map(|i| 1.0 - 10f64.powf(-(i as f64) / 10.0))
        .map(|q| json!([round(q, 5), us(h.value_at_quantile(q))]))
        .collect();
    json!({
        "count": h.len(),
        "avg_us": round(h.mean() / 1000.0, 2),
        "p50_us": us(h.value_at_quantile(0.5)),
        "p99_us": us(h.value_at_quantile(0.99)),
        "p999_us": us(h.value_at_quantile(0.999)),
        "max_us": us(h.max()),
        "cdf": cdf,
    })
}

/// A thread's operations: called with the index of each operation.
type ThreadOps<'a> = Box<dyn FnMut(u64) -> engines::Result<Outcome> + Send + 'a>;

struct PhaseResult {
    ops: u64,
    secs: f64,
    rec: Recorder,
    per_second: Vec<u64>,
    read: u64,
    written: u64,
    unexpected: u64,
}

/// Runs `ops` operations split over `threads` threads (each made by
/// `make(thread)`) until done or `limit`, with a progress bar on a terminal
/// and a line every 5 seconds otherwise.
fn phase<'a>(
    db: &dyn Kv,
    label: &str,
    threads: usize,
    ops: u64,
    limit: Duration,
    make: &(dyn Fn(usize) -> ThreadOps<'a> + Sync),
) -> Result<PhaseResult, BoxError> {
    let threads = threads.max(1);
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (read, written, unexpected) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let total = Mutex::new(Recorder::default());
    let start = Instant::now();
    let mut per_second = Vec::new();
    std::thread::scope(|s| -> Result<(), BoxError> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (done, stop, total) = (&done, &stop, &total);
                let (read, written, unexpected) = (&read, &written, &unexpected);
                s.spawn(move || -> engines::Result<()> {
                    let mut op = make(t);
                    let mut rec = Recorder::default();
                    let (from, to) = (
                        ops * t as u64 / threads as u64,
                        ops * (t as u64 + 1) / threads as u64,
                    );
                    for i in from..to {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let t0 = Instant::now();
                        let o = op(i)?;
                        db.end_op(o.kind as u8, o.expect_found);
                        rec.record(o.kind, t0.elapsed().as_nanos() as u64);
                        read.fetch_add(o.read, Ordering::Relaxed);
                        written.fetch_add(o.written, Ordering::Relaxed);
                        unexpected.fetch_add(u64::from(o.unexpected), Ordering::Relaxed);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    total.lock().expect("recorder").merge(&rec);
                    Ok(())
                })
            })
            .collect();
        let bar = std::io::stderr().is_terminal().then(|| {
            indicatif::ProgressBar::new(ops)
                .with_style(
                    indicatif::ProgressStyle::with_template(
                        "  {prefix} [{bar:40}] {pos}/{len} ops, {msg}",
                    )
                    .expect("template")
                    .progress_chars("=> "),
                )
                .with_prefix(label.to_string())
        });
        let (mut last, mut tick) = (0, start);
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
            if tick.elapsed() >= Duration::from_secs(1) {
                tick += Duration::from_secs(1);
                let now = done.load(Ordering::Relaxed);
                per_second.push(now - last);
                last = now;
                let rate = format!(
                    "{} ops/s in the last second",
                    per_second.last().copied().unwrap_or(0)
                );
                match &bar {
                    Some(b) => {
                        b.set_position(now);
                        b.set_message(rate);
                    }
                    None if per_second.len() % 5 == 0 => {
                        eprintln!("  {label}: {now}/{ops} ops, {rate}")
                    }
                    None => {}
                }
            }
            if start.elapsed() > limit {
                stop.store(true, Ordering::Relaxed);
            }
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        for h in handles {
            h.join().expect("bench thread").map_err(|e| e.to_string())?;
        }
        Ok(())
    })?;
    Ok(PhaseResult {
        ops: done.load(Ordering::Relaxed),
        secs: start.elapsed().as_secs_f64(),
        rec: total.into_inner().expect("recorder"),
        per_second,
        read: read.load(Ordering::Relaxed),
        written: written.load(Ordering::Relaxed),
        unexpected: unexpected.load(Ordering::Relaxed),
    })
}

/// A permutation of `0..n`, shuffled by `seed`.
fn permutation(n: u64, seed: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (0..n).collect();
    fastrand::Rng::with_seed(seed).shuffle(&mut v);
    v
}

fn get_outcome(db: &dyn Kv, key: &[u8], expect: bool) -> engines::Result<Outcome> {
    let mut o = Outcome::new(OpKind::Read);
    let found = db.get(key)?;
    o.read = found.map_or(0, |n| (key.len() + n) as u64);
    o.unexpected = found.is_some() != expect;
    o.expect_found = expect;
    Ok(o)
}

/// Runs one engine and returns its result row.
pub fn child(spec: ChildSpec) -> Result<Value, BoxError> {
    let mut engine =
        engines::open(&spec.engine, &spec.dir, &spec.config).map_err(|e| e.to_string())?;
    let pogreb = spec.workload == "pogreb";
    let values = Values::new(spec.value_size);
    let (ks, vs) = (spec.key_size, spec.value_size);
    let entry = (ks + vs) as u64;
    let ycsb = spec.workload.starts_with("ycsb-");
    let key = |i: u64| {
        if ycsb {
            ycsb::record_key(i, ks)
        } else if pogreb {
            pogreb_bytes(i, 16..=64)
        } else {
            bench_key(i, ks)
        }
    };
    let (r0, w0) = proc_io();
    let label = format!("{} {}", spec.engine, spec.workload);

    // Load: every key once, in a random order (YCSB: record order, its keys
    // are hashed).
    let mut load_ops_per_sec = None;
    if loads(&spec.workload) {
        let db: &dyn Kv = engine.as_ref();
        let order = if ycsb {
            (0..spec.keys).collect()
        } else {
            permutation(spec.keys, 1)
        };
        let order = &order;
        let load = phase(
            db,
            &format!("{} load", spec.engine),
            spec.threads,
            spec.keys,
            Duration::MAX,
            &|_| {
                Box::new(|i| {
                    let k = order[i as usize];
                    if pogreb {
                        let (k, v) = (key(k), pogreb_bytes(k ^ (1 << 63), 128..=512));
                        db.put(&k, &v)?;
                        Outcome::wrote(OpKind::Insert, (k.len() + v.len()) as u64)
                    } else {
                        db.put(&key(k), values.get(k, vs))?;
                        Outcome::wrote(OpKind::Insert, entry)
                    }
                })
            },
        )?;
        load_ops_per_sec = Some(round(load.ops as f64 / load.secs, 0));
        eprintln!("  {} load: settling", spec.engine);
        db.settle().map_err(|e| e.to_string())?;
    }
    if pogreb {
        // Pogreb's benchmark reads after a reopen.
        drop(engine);
        engine = engines::open(&spec.engine, &spec.dir, &spec.config).map_err(|e| e.to_string())?;
    }
    let db: &dyn Kv = engine.as_ref();
    db.mark_run().map_err(|e| e.to_string())?;
    let (r1, w1) = proc_io();

    // The measured phase.
    let limit = Duration::from_secs_f64(spec.seconds);
    let keys = spec.keys;
    let inserted = AtomicU64::new(keys);
    let stop_writer = AtomicBool::new(false);
    let writer_bytes = AtomicU64::new(0);
    let fill_order = match spec.workload.as_str() {
        "fillrandom" | "deleterandom" | "pogreb" => permutation(keys, 2),
        _ => Vec::new(),
    };
    let fill_order = &fill_order;
    let ops = match spec.workload.as_str() {
        "fillseq" | "fillrandom" | "deleterandom" | "pogreb" => keys,
        "readseq" => 1,
        _ => spec.ops,
    };
    let wl = ycsb::spec(&spec.workload);
    let (inserted, seed, scan_length) = (&inserted, spec.seed, spec.scan_length);
    let workload = spec.workload.as_str();
    let (values, key) = (&values, &key);
    let make = |t: usize| -> ThreadOps<'_> {
        let mut rng = fastrand::Rng::with_seed(seed.wrapping_add(t as u64 * 7919));
        match workload {
            "fillseq" | "fillrandom" => Box::new(move |i| {
                let k = if workload == "fillseq" {
                    i
                } else {
                    fill_order[i as usize]
                };
                db.put(&key(k), values.get(k, vs))?;
                Outcome::wrote(OpKind::Insert, entry)
            }),
            "overwrite" => Box::new(move |i| {
                db.put(&key(rng.u64(..keys)), values.get(i ^ 0x5555, vs))?;
                Outcome::wrote(OpKind::Update, entry)
            }),
            "pogreb" => Box::new(move |i| get_outcome(db, &key(fill_order[i as usize]), true)),
            "readrandom" | "readwhilewriting" => {
                Box::new(move |_| get_outcome(db, &key(rng.u64(..keys)), true))
            }
            "readmissing" => {
                Box::new(move |_| get_outcome(db, &key(keys + rng.u64(..keys.max(1))), false))
            }
            // The hot set: 1% of the keys, as db_bench's readhot.
            "readhot" => {
                Box::new(move |_| get_outcome(db, &key(rng.u64(..(keys / 100).max(1))), true))
            }
            "readseq" => Box::new(move |_| {
                let n = db.scan(&key(0), usize::MAX)?;
                Outcome::read(OpKind::Scan, n as u64 * entry)
            }),
            "seekrandom" => Box::new(move |_| {
                let n = db.scan(&key(rng.u64(..keys)), scan_length)?;
                Outcome::read(OpKind::Scan, n as u64 * entry)
            }),
            "deleterandom" => Box::new(move |i| {
                db.delete(&key(fill_order[i as usize]))?;
                Outcome::wrote(OpKind::Delete, ks as u64)
            }),
            _ => {
                let mut stream = OpStream::new(
                    wl.expect("a YCSB workload"),
                    keys,
                    seed.wrapping_add(t as u64),
                );
                Box::new(move |i| {
                    stream.records = inserted.load(Ordering::Relaxed);
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
                            let n = inserted.fetch_add(1, Ordering::Relaxed);
                            db.put(&key(n), values.get(n, vs))?;
                            o.written = entry;
                        }
                        OpKind::Scan => o.read = db.scan(&k, op.scan_len)? as u64 * entry,
                        OpKind::ReadModifyWrite => {
                            o.read = db.get(&k)?.map_or(0, |n| (ks + n) as u64);
                            db.put(&k, values.get(version, vs))?;
                            o.written = entry;
                        }
                        OpKind::Delete => unreachable!("YCSB core workloads do not delete"),
                    }
                    Ok(o)
                })
            }
        }
    };
    let run = std::thread::scope(|s| {
        if workload == "readwhilewriting" {
            // One writer overwrites at full speed beside the readers.
            let (stop, bytes) = (&stop_writer, &writer_bytes);
            s.spawn(move || -> engines::Result<()> {
                let mut rng = fastrand::Rng::with_seed(99);
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    db.put(&key(rng.u64(..keys)), values.get(i, vs))?;
                    bytes.fetch_add(entry, Ordering::Relaxed);
                    i += 1;
                }
                Ok(())
            });
        }
        let r = phase(db, &label, spec.threads, ops, limit, &make);
        stop_writer.store(true, Ordering::Relaxed);
        r
    })?;
    let (r2, _) = proc_io();
    // Write amplification counts the background work the writes caused.
    let settle_start = Instant::now();
    db.settle().map_err(|e| e.to_string())?;
    let settle_secs = settle_start.elapsed().as_secs_f64();
    let (_, w3) = proc_io();

    let all = run.rec.all();
    let load_user = if loads(workload) { keys * entry } else { 0 };
    let user_written = load_user + run.written + writer_bytes.load(Ordering::Relaxed);
    let mut row = Map::new();
    let mut put = |k: &str, v: Value| {
        row.insert(k.to_string(), v);
    };
    put("engine", json!(spec.engine));
    put("ops_per_sec", json!(round(run.ops as f64 / run.secs, 0)));
    if workload == "readseq" {
        put(
            "keys_per_sec",
            json!(round(run.read as f64 / entry as f64 / run.secs, 0)),
        );
    }
    put("avg_us", json!(round(all.mean() / 1000.0, 2)));
    put("p50_us", json!(us(all.value_at_quantile(0.5))));
    put("p99_us", json!(us(all.value_at_quantile(0.99))));
    put("p999_us", json!(us(all.value_at_quantile(0.999))));
    put("load_ops_per_sec", json!(load_ops_per_sec));
    put(
        "write_amp",
        json!(round((w3 - w0) as f64 / user_written.max(1) as f64, 2)),
    );
    // Without user reads (fills, deletes) there is nothing to amplify.
    put(
        "read_amp",
        json!((run.read > 0).then(|| round((r2 - r1) as f64 / run.read as f64, 2))),
    );
    put("disk_read_mb", json!(round((r2 - r0) as f64 / 1e6, 1)));
    put("load_written_mb", json!(round((w1 - w0) as f64 / 1e6, 1)));
    put("disk_written_mb", json!(round((w3 - w0) as f64 / 1e6, 1)));
    put("final_settle_seconds", json!(round(settle_secs, 2)));
    put(
        "space_mb",
        json!(round(dir_bytes(&spec.dir) as f64 / 1e6, 1)),
    );
    put("peak_rss_mb", json!(round(peak_rss() as f64 / 1e6, 1)));
    put("unexpected_reads", json!(run.unexpected));
    put("ops", json!(run.ops));
    for (k, v) in db.extra(inserted.load(Ordering::Relaxed)) {
        put(k, v);
    }
    put(
        "latency",
        Value::Object(
            run.rec
                .hists
                .iter()
                .map(|(k, h)| (k.name().to_string(), latency_json(h)))
                .collect(),
        ),
    );
    put("throughput_per_sec", json!(run.per_second));
    Ok(Value::Object(row))
}
