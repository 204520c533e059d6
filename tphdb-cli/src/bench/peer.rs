//! Workloads run on several engines side by side (`--engines`): db_bench's
//! and YCSB A–F.
//!
//! Each engine runs in its own child process (`tphdb bench-child`) and its
//! own fresh directory, one after another, on the same operation stream
//! (the streams are seeded identically). A child process per engine makes
//! peak RSS and the bytes read and written at the OS level
//! (`/proc/self/io`) the engine's own.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Args;
use serde_json::{json, Map, Value};

use super::child::{ChildSpec, WORKLOADS};
use super::disk::{fio_randread, raw_direct_reads};
use super::engines::{self, EngineConfig, TphdbSettings};
use super::report::round;
use super::Report;

type BoxError = Box<dyn std::error::Error>;

#[derive(Args, Clone, Debug)]
pub struct PeerArgs {
    /// Engines to run, in order (tphdb first when present:
    /// `rocksdb-tuned` sizes its cache from tphdb's index and block cache).
    #[arg(long, default_value = "tphdb", value_delimiter = ',')]
    pub engines: Vec<String>,
    /// Keys loaded before the measured phase (written by fills).
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Operations of the measured phase (default: --keys).
    #[arg(long)]
    pub ops: Option<u64>,
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
    /// Memory budget in MiB of each engine's process, page cache included
    /// (a cgroup v1 memory limit; needs root). Makes a data set larger
    /// than the budget read from the disk, as it would in production.
    /// tphdb gives a quarter of it to memtables and an eighth to
    /// compactions; the peers keep their defaults.
    #[arg(long)]
    pub memory_mb: Option<u64>,
    /// Keys read after each seek (seekrandom).
    #[arg(long, default_value_t = 100)]
    pub scan_length: usize,
    /// Seconds of fio beside `readrandom --direct-io` (0 or no fio: none).
    #[arg(long, default_value_t = 5)]
    pub fio_seconds: u32,
    /// tphdb: memtable size in MiB.
    #[arg(long)]
    pub write_buffer_mb: Option<usize>,
    /// tphdb: TPH target size in MiB.
    #[arg(long)]
    pub tph_target_mb: Option<u64>,
    /// tphdb: TPHs per parent in the next level.
    #[arg(long)]
    pub fanout: Option<u32>,
    /// tphdb: signature bits of the global index.
    #[arg(long)]
    pub signature_bits: Option<u32>,
    /// tphdb: one-level mode.
    #[arg(long)]
    pub one_level: bool,
    /// tphdb: single-tier mode.
    #[arg(long)]
    pub single_tier: bool,
}

/// Runs a workload on each engine in turn and reports them side by side.
pub fn run(workload: &str, a: PeerArgs) -> Result<(), BoxError> {
    if !WORKLOADS.contains(&workload) {
        return Err(format!("unknown workload {workload}").into());
    }
    let ops = a.ops.unwrap_or(a.keys);
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
        ("ops", json!(ops)),
        ("seconds", json!(a.seconds)),
        ("scan_length", json!(a.scan_length)),
        ("key_size", json!(a.key_size)),
        ("value_size", json!(a.value_size)),
        ("threads", json!(a.threads)),
        ("direct_io", json!(a.direct_io)),
        ("seed", json!(a.seed)),
        ("memory_mb", json!(a.memory_mb)),
    ] {
        report.param(k, v);
    }
    let mut tuned_cache = 0;
    let mut rows: Vec<Map<String, Value>> = Vec::new();
    let mut disk = Vec::new();
    for engine in &order {
        eprintln!("{workload}: {engine}, {} keys, {ops} operations", a.keys);
        let spec = ChildSpec {
            workload: workload.to_string(),
            engine: engine.clone(),
            dir: tmp.path().join(engine),
            keys: a.keys,
            ops,
            key_size: a.key_size,
            value_size: a.value_size,
            threads: a.threads,
            seconds: a.seconds,
            seed: a.seed,
            scan_length: a.scan_length,
            config: EngineConfig {
                direct_io: a.direct_io,
                tuned_cache_bytes: tuned_cache,
                data_bytes: a.keys * (a.key_size + a.value_size) as u64 * 2,
                memory_mb: a.memory_mb,
                tphdb: TphdbSettings {
                    write_buffer_mb: a.write_buffer_mb,
                    tph_target_mb: a.tph_target_mb,
                    fanout: a.fanout,
                    signature_bits: a.signature_bits,
                    one_level: a.one_level,
                    single_tier: a.single_tier,
                },
            },
        };
        if engine == "pogreb" {
            if let Some(why) = pogreb_unsupported(workload, a.threads) {
                eprintln!("  pogreb: skipped ({why})");
                report.param("pogreb_skipped", why);
                continue;
            }
        }
        let budget = a
            .memory_mb
            .map(|mb| MemoryBudget::new(engine, mb))
            .transpose()?;
        let run = |cmd: &mut Command| -> Result<std::process::Output, BoxError> {
            let child = cmd
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()?;
            if let Some(b) = &budget {
                b.enter(child.id())?;
            }
            Ok(child.wait_with_output()?)
        };
        let mut out = run(Command::new(&exe)
            .arg("bench-child")
            .arg(serde_json::to_string(&spec)?))?;
        if out.status.success() && engine == "pogreb" {
            // The child recorded the operations; the Go driver replays them.
            let data = tmp.path().join("pogreb-data");
            out = run(Command::new(pogreb_driver()?)
                .arg(spec.dir.join("ops.bin"))
                .arg(&data))?;
            let _ = std::fs::remove_dir_all(&data);
        }
        drop(budget);
        if !out.status.success() {
            // One engine failing (say, killed by its memory budget) leaves
            // the others' results standing; the row says what happened.
            let why = format!("failed ({})", out.status);
            eprintln!("  {engine}: {why}");
            let _ = std::fs::remove_dir_all(tmp.path().join(engine));
            let mut row = Map::new();
            row.insert("engine".into(), json!(engine));
            row.insert("error".into(), json!(why));
            rows.push(row);
            continue;
        }
        let row: Value = serde_json::from_slice(&out.stdout)?;
        let Value::Object(row) = row else {
            return Err(format!("{engine}: no result").into());
        };
        if engine == "tphdb" {
            // rocksdb-tuned gets tphdb's read memory (index and block
            // cache) as its block cache, besides its pinned index and filters.
            tuned_cache = ["index_bytes", "block_cache_capacity"]
                .iter()
                .filter_map(|k| row.get(*k).and_then(Value::as_u64))
                .sum();
            // What the disk gives one thread, measured on tphdb's largest
            // file right after its run.
            if workload == "readrandom" && a.direct_io {
                let ops = row["ops_per_sec"].as_f64().unwrap_or(0.0);
                disk_rows(&mut disk, &tmp.path().join(engine), a.fio_seconds, ops);
            }
        }
        let _ = std::fs::remove_dir_all(tmp.path().join(engine));
        rows.push(row);
    }
    rows.extend(disk);
    if workload == "pogreb" {
        // The figures Pogreb's own benchmark reports.
        for r in &mut rows {
            let (w, rd) = (
                r.get("load_ops_per_sec").cloned(),
                r.get("ops_per_sec").cloned(),
            );
            r.insert("write_ops_per_sec".into(), w.unwrap_or(Value::Null));
            r.insert("read_ops_per_sec".into(), rd.unwrap_or(Value::Null));
        }
    }
    let tuned_ops = rows
        .iter()
        .find(|r| r["engine"] == "rocksdb-tuned")
        .and_then(|r| r["ops_per_sec"].as_f64());
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
        if let Some(t) = tuned_ops.filter(|&t| t > 0.0) {
            let ops = row.get("ops_per_sec").and_then(Value::as_f64);
            row.insert("x_tuned_ops".into(), json!(ops.map(|o| round(o / t, 2))));
        }
        if let Some(w) = row.get("throughput_per_sec").and_then(worst_second) {
            row.insert("worst_second_x_median".into(), json!(round(w, 2)));
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
    println!("{workload}: {} keys, {ops} operations", a.keys);
    report.print_columns(&[
        "engine",
        "write_ops_per_sec",
        "read_ops_per_sec",
        "ops_per_sec",
        "x_rocksdb_ops",
        "x_tuned_ops",
        "avg_us",
        "p99_us",
        "x_rocksdb_p99",
        "p999_us",
        "load_ops_per_sec",
        "worst_second_x_median",
        "write_amp",
        "x_rocksdb_write_amp",
        "read_amp",
        "space_mb",
        "peak_rss_mb",
        "reads_per_get",
        "index_bytes_per_key",
        "tphdb_ratio",
        "error",
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

/// A cgroup v1 memory limit for one engine's processes: their resident
/// memory and the page cache they fill count against it.
struct MemoryBudget(PathBuf);

impl MemoryBudget {
    fn new(engine: &str, mb: u64) -> Result<MemoryBudget, BoxError> {
        let root = PathBuf::from("/sys/fs/cgroup/memory");
        let dir = root.join(format!("tphdb-bench-{}-{engine}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .and_then(|()| {
                std::fs::write(dir.join("memory.limit_in_bytes"), (mb << 20).to_string())
            })
            .map_err(|e| {
                format!(
                    "--memory-mb needs a writable cgroup v1 memory controller ({}): {e}",
                    root.display()
                )
            })?;
        Ok(MemoryBudget(dir))
    }

    fn enter(&self, pid: u32) -> std::io::Result<()> {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string())
    }
}

impl Drop for MemoryBudget {
    fn drop(&mut self) {
        // Drop the cache charged to the group, so the next engine starts
        // cold, then remove it.
        let _ = std::fs::write(self.0.join("memory.force_empty"), "0");
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Why Pogreb cannot run a workload, if it cannot: it has no ordered
/// iteration, and its driver replays one recorded stream in one thread.
fn pogreb_unsupported(workload: &str, threads: usize) -> Option<&'static str> {
    match workload {
        "ycsb-e" | "seekrandom" | "readseq" => Some("no ordered scans"),
        "readwhilewriting" => Some("needs a concurrent writer"),
        _ if threads > 1 => Some("the driver replays one thread"),
        _ => None,
    }
}

/// The Pogreb driver, built by scripts/setup-peers.sh next to the release
/// binaries' target directory, or where `TPHDB_POGREB_DRIVER` says.
fn pogreb_driver() -> Result<PathBuf, BoxError> {
    if let Some(p) = std::env::var_os("TPHDB_POGREB_DRIVER") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let target = exe
        .parent()
        .and_then(|p| p.parent())
        .ok_or("no target directory")?;
    let driver = target.join("pogreb-driver");
    if driver.exists() {
        Ok(driver)
    } else {
        Err(format!(
            "{} is missing: run scripts/setup-peers.sh (it builds tools/pogreb-driver with Go)",
            driver.display()
        )
        .into())
    }
}

/// Rows for the disk itself beside tphdb's `readrandom --direct-io`: random
/// 4 KiB O_DIRECT reads of tphdb's largest file, timed in-process and by
/// fio at queue depth 1, with tphdb's throughput as a ratio of each.
fn disk_rows(
    rows: &mut Vec<Map<String, Value>>,
    dir: &std::path::Path,
    fio_seconds: u32,
    tphdb_ops: f64,
) {
    let largest = std::fs::read_dir(dir).ok().and_then(|rd| {
        rd.filter_map(|e| e.ok())
            .filter(|e| e.path().extension().is_some_and(|x| x == "ph"))
            .max_by_key(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
            .map(|e| e.path())
    });
    let Some(file) = largest else { return };
    let mut row = |engine: &str, ops: f64, avg: f64, p99: f64| {
        let mut r = Map::new();
        r.insert("engine".into(), json!(engine));
        r.insert("ops_per_sec".into(), json!(round(ops, 0)));
        r.insert("avg_us".into(), json!(round(avg, 2)));
        r.insert("p99_us".into(), json!(round(p99, 2)));
        r.insert(
            "tphdb_ratio".into(),
            json!(round(tphdb_ops / ops.max(1e-9), 3)),
        );
        rows.push(r);
    };
    eprintln!("  disk: random 4 KiB O_DIRECT reads of {}", file.display());
    if let Ok(raw) = raw_direct_reads(&file, 200_000, Duration::from_secs(5)) {
        row(
            "disk-4k-direct",
            raw.ops_per_sec(),
            raw.avg_us(),
            raw.quantile_us(0.99),
        );
    }
    if fio_seconds > 0 {
        if let Some(f) = fio_randread(&file, fio_seconds) {
            row("fio-4k-direct-qd1", f.iops, f.mean_us, f.p99_us);
        }
    }
}

fn plots(dir: &std::path::Path, workload: &str, report: &Report) -> Result<(), BoxError> {
    std::fs::create_dir_all(dir)?;
    let name = |r: &Map<String, Value>| r["engine"].as_str().unwrap_or("").to_string();
    let throughput: Vec<(String, Vec<u64>)> = report
        .rows()
        .iter()
        .filter_map(|r| {
            // Rows of the disk itself have no timeline.
            let per_sec = r.get("throughput_per_sec")?.as_array()?;
            Some((name(r), per_sec.iter().filter_map(Value::as_u64).collect()))
        })
        .collect();
    let path = dir.join(format!("{workload}-throughput.svg"));
    super::plot::throughput(&path, &format!("{workload}: throughput"), &throughput)?;
    eprintln!("wrote {}", path.display());
    for kind in ["read", "update", "insert", "scan", "rmw", "delete"] {
        let series: Vec<(String, Vec<(f64, f64)>)> = report
            .rows()
            .iter()
            .filter_map(|r| {
                let cdf = r.get("latency")?.get(kind)?.get("cdf")?.as_array()?;
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

/// The slowest whole second of a run over its median second (write stalls
/// show up as a low ratio); `None` for runs under three seconds.
fn worst_second(per_second: &Value) -> Option<f64> {
    let mut v: Vec<f64> = per_second
        .as_array()?
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    if v.len() < 3 {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let median = v[v.len() / 2];
    (median > 0.0).then(|| v[0] / median)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_second_is_the_slowest_over_the_median() {
        assert_eq!(worst_second(&json!([100, 20, 90, 110, 100])), Some(0.2));
        assert_eq!(worst_second(&json!([100, 100])), None);
        assert_eq!(worst_second(&json!([0, 0, 0])), None);
    }
}
