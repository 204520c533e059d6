//! Workloads run on several engines side by side (`--engines`): YCSB A–F.
//!
//! Each engine runs in its own child process (`tphdb bench-child`) and its
//! own fresh directory, one after another, on the same operation stream
//! (the streams are seeded identically). A child process per engine makes
//! peak RSS and the bytes read and written at the OS level
//! (`/proc/self/io`) the engine's own.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::engines::{self, EngineConfig};
use super::latency::histogram;
use super::report::round;
use super::ycsb::{self, OpKind, OpStream};
use super::Report;

type BoxError = Box<dyn std::error::Error>;

#[derive(Args, Clone, Debug)]
pub struct PeerArgs {
    /// Engines to run, in order (tphdb first when present:
    /// `rocksdb-tuned` sizes its cache from tphdb's index).
    #[arg(long, default_value = "tphdb", value_delimiter = ',')]
    pub engines: Vec<String>,
    /// Records loaded before the run phase.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Operations of the run phase.
    #[arg(long, default_value_t = 1_000_000)]
    pub ops: u64,
    /// Key size in bytes.
    #[arg(long, default_value_t = 20)]
    pub key_size: usize,
    /// Value size in bytes.
    #[arg(long, default_value_t = 128)]
    pub value_size: usize,
    /// Client threads of the run phase.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Time limit of each engine's run phase.
    #[arg(long, default_value_t = 60.0)]
    pub seconds: f64,
    /// tphdb and RocksDB read with O_DIRECT (RocksDB then with a 32 MiB
    /// block cache, as in the paper).
    #[arg(long)]
    pub direct_io: bool,
    /// Parent directory of the databases (default: the current directory;
    /// O_DIRECT needs a real disk, not tmpfs).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Write results as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write plots (SVG) to this directory: throughput over time and a
    /// latency CDF per operation type.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Seed of the operation streams.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
}

/// What one child runs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChildSpec {
    pub workload: String,
    pub engine: String,
    pub dir: PathBuf,
    pub records: u64,
    pub ops: u64,
    pub key_size: usize,
    pub value_size: usize,
    pub threads: usize,
    pub seconds: f64,
    pub seed: u64,
    pub config: EngineConfig,
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

fn dir_bytes(dir: &std::path::Path) -> u64 {
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

struct Recorder {
    hists: BTreeMap<OpKind, Histogram<u64>>,
    all: Histogram<u64>,
}

impl Recorder {
    fn new() -> Self {
        Recorder {
            hists: BTreeMap::new(),
            all: histogram(),
        }
    }

    fn record(&mut self, kind: OpKind, ns: u64) {
        self.hists
            .entry(kind)
            .or_insert_with(histogram)
            .saturating_record(ns);
        self.all.saturating_record(ns);
    }

    fn merge(&mut self, other: &Recorder) {
        for (k, h) in &other.hists {
            self.hists
                .entry(*k)
                .or_insert_with(histogram)
                .add(h)
                .expect("same bounds");
        }
        self.all.add(&other.all).expect("same bounds");
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

/// Runs one engine (in the child process) and returns its result row.
pub fn child(spec: ChildSpec) -> Result<Value, BoxError> {
    let wl = ycsb::spec(&spec.workload).ok_or("unknown workload")?;
    let db = engines::open(&spec.engine, &spec.dir, &spec.config).map_err(|e| e.to_string())?;
    let values = Values::new(spec.value_size);
    let (r0, w0) = proc_io();

    // Load: every record once, in record order (keys are hashed).
    let load_start = Instant::now();
    let next = AtomicU64::new(0);
    let threads = spec.threads.max(1);
    let mut last_report = Instant::now();
    std::thread::scope(|s| -> Result<(), BoxError> {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (db, next, values, spec) = (&db, &next, &values, &spec);
                s.spawn(move || -> engines::Result<()> {
                    loop {
                        let n = next.fetch_add(1, Ordering::Relaxed);
                        if n >= spec.records {
                            return Ok(());
                        }
                        db.put(
                            &ycsb::record_key(n, spec.key_size),
                            values.get(n, spec.value_size),
                        )?;
                    }
                })
            })
            .collect();
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(50));
            if last_report.elapsed() >= Duration::from_secs(2) {
                last_report = Instant::now();
                let done = next.load(Ordering::Relaxed).min(spec.records);
                eprintln!("  {} load: {done}/{} records", spec.engine, spec.records);
            }
        }
        for h in handles {
            h.join().expect("load thread").map_err(|e| e.to_string())?;
        }
        Ok(())
    })?;
    let load_secs = load_start.elapsed().as_secs_f64();
    eprintln!("  {} load: settling", spec.engine);
    db.settle().map_err(|e| e.to_string())?;
    let settle_secs = load_start.elapsed().as_secs_f64() - load_secs;
    let (r1, w1) = proc_io();

    // Run.
    let inserted = AtomicU64::new(spec.records);
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let user_read = AtomicU64::new(0);
    let user_written = AtomicU64::new(0);
    let misses = AtomicU64::new(0);
    let total = Mutex::new(Recorder::new());
    let limit = Duration::from_secs_f64(spec.seconds);
    let run_start = Instant::now();
    let mut per_second = Vec::new();
    std::thread::scope(|s| -> Result<(), BoxError> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (db, values, spec) = (&db, &values, &spec);
                let (inserted, done, stop, total) = (&inserted, &done, &stop, &total);
                let (user_read, user_written, misses) = (&user_read, &user_written, &misses);
                s.spawn(move || -> engines::Result<()> {
                    let mut stream =
                        OpStream::new(wl, spec.records, spec.seed.wrapping_add(t as u64));
                    let mut rec = Recorder::new();
                    let per_thread = spec.ops / threads as u64
                        + u64::from((t as u64) < spec.ops % threads as u64);
                    let kv = spec.key_size as u64;
                    for i in 0..per_thread {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        stream.records = inserted.load(Ordering::Relaxed);
                        let op = stream.next_op();
                        let key = ycsb::record_key(op.record, spec.key_size);
                        let version = (t as u64) << 40 | i;
                        let t0 = Instant::now();
                        match op.kind {
                            OpKind::Read => match db.get(&key)? {
                                Some(n) => {
                                    user_read.fetch_add(kv + n as u64, Ordering::Relaxed);
                                }
                                None => {
                                    misses.fetch_add(1, Ordering::Relaxed);
                                }
                            },
                            OpKind::Update => {
                                db.put(&key, values.get(version, spec.value_size))?;
                                user_written
                                    .fetch_add(kv + spec.value_size as u64, Ordering::Relaxed);
                            }
                            OpKind::Insert => {
                                let n = inserted.fetch_add(1, Ordering::Relaxed);
                                db.put(
                                    &ycsb::record_key(n, spec.key_size),
                                    values.get(n, spec.value_size),
                                )?;
                                user_written
                                    .fetch_add(kv + spec.value_size as u64, Ordering::Relaxed);
                            }
                            OpKind::Scan => {
                                let n = db.scan(&key, op.scan_len)?;
                                user_read.fetch_add(
                                    n as u64 * (kv + spec.value_size as u64),
                                    Ordering::Relaxed,
                                );
                            }
                            OpKind::ReadModifyWrite => {
                                if let Some(n) = db.get(&key)? {
                                    user_read.fetch_add(kv + n as u64, Ordering::Relaxed);
                                }
                                db.put(&key, values.get(version, spec.value_size))?;
                                user_written
                                    .fetch_add(kv + spec.value_size as u64, Ordering::Relaxed);
                            }
                        }
                        rec.record(op.kind, t0.elapsed().as_nanos() as u64);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    total.lock().expect("recorder").merge(&rec);
                    Ok(())
                })
            })
            .collect();
        let mut last = 0;
        let mut tick = run_start;
        // A bar on a terminal; a line every 5 seconds in a log.
        let bar = std::io::stderr()
            .is_terminal()
            .then(|| {
                indicatif::ProgressBar::new(spec.ops).with_style(
                    indicatif::ProgressStyle::with_template(
                        "  {prefix} [{bar:40}] {pos}/{len} ops, {msg}",
                    )
                    .expect("template")
                    .progress_chars("=> "),
                )
            })
            .map(|b| b.with_prefix(format!("{} {}", spec.engine, spec.workload)));
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
                        eprintln!(
                            "  {} {}: {now}/{} ops, {rate}",
                            spec.engine, spec.workload, spec.ops
                        )
                    }
                    None => {}
                }
            }
            if run_start.elapsed() > limit {
                stop.store(true, Ordering::Relaxed);
            }
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        for h in handles {
            h.join().expect("run thread").map_err(|e| e.to_string())?;
        }
        Ok(())
    })?;
    let run_secs = run_start.elapsed().as_secs_f64();
    let (r2, w2) = proc_io();
    let rec = total.into_inner().expect("recorder");
    let ops = done.load(Ordering::Relaxed);
    let load_user = spec.records * (spec.key_size + spec.value_size) as u64;
    let written = user_written.load(Ordering::Relaxed);
    let mut row = Map::new();
    row.insert("engine".into(), json!(spec.engine));
    row.insert("ops_per_sec".into(), json!(round(ops as f64 / run_secs, 0)));
    row.insert("avg_us".into(), json!(round(rec.all.mean() / 1000.0, 2)));
    row.insert("p50_us".into(), json!(us(rec.all.value_at_quantile(0.5))));
    row.insert("p99_us".into(), json!(us(rec.all.value_at_quantile(0.99))));
    row.insert(
        "p999_us".into(),
        json!(us(rec.all.value_at_quantile(0.999))),
    );
    for (k, h) in &rec.hists {
        row.insert(
            format!("{}_p99_us", k.name()),
            json!(us(h.value_at_quantile(0.99))),
        );
    }
    row.insert(
        "load_ops_per_sec".into(),
        json!(round(spec.records as f64 / load_secs, 0)),
    );
    row.insert("settle_seconds".into(), json!(round(settle_secs, 2)));
    row.insert(
        "write_amp".into(),
        json!(round(
            (w2 - w0) as f64 / (load_user + written).max(1) as f64,
            2
        )),
    );
    row.insert(
        "read_amp".into(),
        json!(round(
            (r2 - r1) as f64 / user_read.load(Ordering::Relaxed).max(1) as f64,
            2
        )),
    );
    row.insert(
        "disk_read_mb".into(),
        json!(round((r2 - r0) as f64 / 1e6, 1)),
    );
    row.insert(
        "load_written_mb".into(),
        json!(round((w1 - w0) as f64 / 1e6, 1)),
    );
    row.insert(
        "disk_written_mb".into(),
        json!(round((w2 - w0) as f64 / 1e6, 1)),
    );
    row.insert(
        "space_mb".into(),
        json!(round(dir_bytes(&spec.dir) as f64 / 1e6, 1)),
    );
    row.insert(
        "peak_rss_mb".into(),
        json!(round(peak_rss() as f64 / 1e6, 1)),
    );
    row.insert("read_misses".into(), json!(misses.load(Ordering::Relaxed)));
    row.insert("ops".into(), json!(ops));
    for (k, v) in db.extra(inserted.load(Ordering::Relaxed)) {
        row.insert(k.into(), v);
    }
    row.insert(
        "latency".into(),
        Value::Object(
            rec.hists
                .iter()
                .map(|(k, h)| (k.name().to_string(), latency_json(h)))
                .collect(),
        ),
    );
    row.insert("throughput_per_sec".into(), json!(per_second));
    drop(db);
    Ok(Value::Object(row))
}

/// Runs a workload on each engine in turn and reports them side by side.
pub fn run(workload: &str, a: PeerArgs) -> Result<(), BoxError> {
    ycsb::spec(workload).ok_or("unknown workload")?;
    for e in &a.engines {
        if !engines::ALL.contains(&e.as_str()) {
            return Err(format!("unknown engine {e}; known: {}", engines::ALL.join(", ")).into());
        }
    }
    let mut order = a.engines.clone();
    order.sort_by_key(|e| e != "tphdb");
    let parent = a.dir.clone().unwrap_or_else(|| PathBuf::from("."));
    let tmp = tempfile::tempdir_in(&parent)?;
    let exe = std::env::current_exe()?;
    let mut report = Report::new(workload);
    for (k, v) in [
        ("keys", json!(a.keys)),
        ("ops", json!(a.ops)),
        ("key_size", json!(a.key_size)),
        ("value_size", json!(a.value_size)),
        ("threads", json!(a.threads)),
        ("direct_io", json!(a.direct_io)),
        ("seed", json!(a.seed)),
    ] {
        report.param(k, v);
    }
    let mut tuned_cache = 0;
    let mut rows: Vec<Map<String, Value>> = Vec::new();
    for engine in &order {
        eprintln!(
            "{workload}: {engine}, {} records, {} operations",
            a.keys, a.ops
        );
        let spec = ChildSpec {
            workload: workload.to_string(),
            engine: engine.clone(),
            dir: tmp.path().join(engine),
            records: a.keys,
            ops: a.ops,
            key_size: a.key_size,
            value_size: a.value_size,
            threads: a.threads,
            seconds: a.seconds,
            seed: a.seed,
            config: EngineConfig {
                direct_io: a.direct_io,
                tuned_cache_bytes: tuned_cache,
                data_bytes: a.keys * (a.key_size + a.value_size) as u64 * 2,
            },
        };
        let out = Command::new(&exe)
            .arg("bench-child")
            .arg(serde_json::to_string(&spec)?)
            .stderr(Stdio::inherit())
            .output()?;
        if !out.status.success() {
            return Err(format!("{engine} failed ({})", out.status).into());
        }
        let row: Value = serde_json::from_slice(&out.stdout)?;
        let Value::Object(row) = row else {
            return Err(format!("{engine}: no result").into());
        };
        if engine == "tphdb" {
            tuned_cache = row.get("index_bytes").and_then(Value::as_u64).unwrap_or(0);
        }
        let _ = std::fs::remove_dir_all(tmp.path().join(engine));
        rows.push(row);
    }
    let base = rows.iter().find(|r| r["engine"] == "rocksdb").map(|r| {
        (
            r["ops_per_sec"].as_f64().unwrap_or(0.0),
            r["p99_us"].as_f64().unwrap_or(0.0),
            r["write_amp"].as_f64().unwrap_or(0.0),
        )
    });
    for mut row in rows {
        if let Some((ops, p99, wa)) = base {
            let ratio = |v: Option<&Value>, b: f64| {
                v.and_then(Value::as_f64)
                    .filter(|_| b > 0.0)
                    .map(|v| round(v / b, 2))
            };
            row.insert(
                "x_rocksdb_ops".into(),
                json!(ratio(row.get("ops_per_sec"), ops)),
            );
            row.insert("x_rocksdb_p99".into(), json!(ratio(row.get("p99_us"), p99)));
            row.insert(
                "x_rocksdb_write_amp".into(),
                json!(ratio(row.get("write_amp"), wa)),
            );
        }
        let engine = row["engine"].as_str().unwrap_or_default().to_string();
        report.result(
            &engine,
            row.iter()
                .filter(|(k, _)| *k != "engine")
                .map(|(k, v)| (k.as_str(), v.clone()))
                .collect(),
        );
    }
    println!("{workload}: {} records, {} operations", a.keys, a.ops);
    report.print_columns(&[
        "engine",
        "ops_per_sec",
        "x_rocksdb_ops",
        "avg_us",
        "p99_us",
        "x_rocksdb_p99",
        "p999_us",
        "load_ops_per_sec",
        "write_amp",
        "x_rocksdb_write_amp",
        "read_amp",
        "space_mb",
        "peak_rss_mb",
        "reads_per_get",
        "index_bytes_per_key",
    ]);
    for r in report.rows() {
        if let Some(Value::String(s)) = r.get("structure") {
            let engine = r["engine"].as_str().unwrap_or("");
            println!("{engine} structure after the run:\n{s}");
        }
    }
    if let Some(p) = &a.json {
        report.write_json(p)?;
    }
    if let Some(dir) = &a.plot {
        plots(dir, workload, &report)?;
    }
    Ok(())
}

fn plots(dir: &std::path::Path, workload: &str, report: &Report) -> Result<(), BoxError> {
    std::fs::create_dir_all(dir)?;
    let name = |r: &Map<String, Value>| r["engine"].as_str().unwrap_or("").to_string();
    let throughput: Vec<(String, Vec<u64>)> = report
        .rows()
        .iter()
        .map(|r| {
            let per_sec = r["throughput_per_sec"]
                .as_array()
                .map_or(Vec::new(), |a| a.iter().filter_map(Value::as_u64).collect());
            (name(r), per_sec)
        })
        .collect();
    let path = dir.join(format!("{workload}-throughput.svg"));
    super::plot::throughput(&path, &format!("{workload}: throughput"), &throughput)?;
    eprintln!("wrote {}", path.display());
    for kind in ["read", "update", "insert", "scan", "rmw"] {
        let series: Vec<(String, Vec<(f64, f64)>)> = report
            .rows()
            .iter()
            .filter_map(|r| {
                let cdf = r["latency"].get(kind)?.get("cdf")?.as_array()?;
                let points = cdf
                    .iter()
                    .filter_map(|p| Some((p.get(0)?.as_f64()?, p.get(1)?.as_f64()?)))
                    .collect();
                Some((name(r), points))
            })
            .collect();
        if series.is_empty() {
            continue;
        }
        let path = dir.join(format!("{workload}-latency-{kind}.svg"));
        super::plot::latency_cdf(&path, &format!("{workload}: {kind} latency"), &series)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
