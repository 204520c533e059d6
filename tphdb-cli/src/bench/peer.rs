//! Workloads run on several engines side by side (`--engines`): db_bench's
//! and YCSB A–F.
//!
//! Each engine runs in its own child process (`tphdb bench-child`, or
//! `tphdb-peers bench-child` for a peer: see [`engines`]) and its own
//! fresh directory, one after another, on the same operation stream (the
//! streams are seeded identically). A child process per engine makes peak
//! RSS and the bytes read and written at the OS level (`/proc/self/io`)
//! the engine's own.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Args;
use serde_json::{json, Value};

use super::child::ChildSpec;
use super::disk::{fio_randread, raw_direct_reads};
use super::engines::{self, CompactionPriorityArg, EngineConfig, TphdbSettings};
use super::report::round;
use super::result::EngineResult;
use super::workload::Workload;
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
    /// Leave each engine's database in a directory under `--dir` (named in
    /// the output) for `tphdb stats` or `tphdb inspect`, instead of
    /// removing it once measured.
    #[arg(long)]
    pub keep: bool,
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
    /// tphdb gets half of it as `memory_budget_bytes`; the peers keep
    /// their defaults.
    #[arg(long)]
    pub memory_mb: Option<u64>,
    /// Keys read after each seek (seekrandom).
    #[arg(long, default_value_t = 100)]
    pub scan_length: usize,
    /// Seconds of fio beside `readrandom --direct-io` (0 or no fio: none).
    #[arg(long, default_value_t = 5)]
    pub fio_seconds: u32,
    /// tphdb and RocksDB: memtables each may hold, the one being written
    /// included (RocksDB's `max_write_buffer_number`, tphdb's
    /// `max_immutable_memtables` + 1), for a comparison at equal memtable
    /// budgets; none: each engine's default (2 for both).
    #[arg(long)]
    pub memtables: Option<usize>,
    /// tphdb: memtable size in MiB.
    #[arg(long)]
    pub write_buffer_mb: Option<usize>,
    /// tphdb: frozen memtables that may wait for their flush while writes
    /// go on into the active one (`Options::max_immutable_memtables`).
    #[arg(long)]
    pub max_immutable_memtables: Option<usize>,
    /// tphdb: memory of flushes' and compactions' inputs and outputs in MiB
    /// (`Options::compaction_memory_bytes`).
    #[arg(long)]
    pub compaction_memory_mb: Option<usize>,
    /// tphdb: threads of flushes' and compactions' pool
    /// (`Options::background_threads`).
    #[arg(long)]
    pub background_threads: Option<usize>,
    /// tphdb: the compactions' CPU priority (`Options::compaction_priority`;
    /// none: the default, the caller's).
    #[arg(long, value_enum)]
    pub compaction_priority: Option<CompactionPriorityArg>,
    /// tphdb: TPH target size in MiB.
    #[arg(long)]
    pub tph_target_mb: Option<u64>,
    /// tphdb: TPHs per parent in the next level.
    #[arg(long)]
    pub fanout: Option<u32>,
    /// tphdb: signature bits of the global index above the deepest level.
    #[arg(long)]
    pub signature_bits: Option<u32>,
    /// tphdb: signature bits of the deepest level's global indexes.
    #[arg(long)]
    pub bottom_signature_bits: Option<u32>,
    /// tphdb: bits of a deepest-level global index field, signature and
    /// piece number, at most (0: no bound).
    #[arg(long)]
    pub bottom_field_bits: Option<u32>,
    /// tphdb: one-level mode.
    #[arg(long)]
    pub one_level: bool,
    /// tphdb: single-tier mode.
    #[arg(long)]
    pub single_tier: bool,
    /// tphdb: garbage share past which a TPH is folded
    /// (`Options::gc_dead_ratio`).
    #[arg(long)]
    pub gc_dead_ratio: Option<f64>,
    /// tphdb: share of the database's bytes that may be garbage
    /// (`Options::max_garbage_ratio`).
    #[arg(long)]
    pub max_garbage_ratio: Option<f64>,
    /// tphdb: page-aligned blocks (`Options::align_blocks`).
    #[arg(long)]
    pub align_blocks: bool,
}

/// Runs a workload on each engine in turn and reports them side by side.
pub fn run(workload: Workload, a: PeerArgs) -> Result<(), BoxError> {
    let ops = a.ops.unwrap_or(a.keys);
    // Regression: without the feature a peer's run failed in its child and
    // the table showed it as an error row, where the command should refuse.
    let mut exes = std::collections::HashMap::new();
    for e in &a.engines {
        engines::check_available(e).map_err(|err| err.to_string())?;
        exes.insert(
            e.clone(),
            engines::child_exe(e).map_err(|err| err.to_string())?,
        );
    }
    let mut order = a.engines.clone();
    order.sort_by_key(|e| e != "tphdb");
    let tmp = super::scratch_dir(a.dir.as_deref())?;
    let (root, _removed_when_done) = match a.keep {
        true => (tmp.keep(), None),
        false => (tmp.path().to_path_buf(), Some(tmp)),
    };
    let done_with_engine_dir = |dir: &Path| {
        if a.keep {
            eprintln!("  kept {}", dir.display());
        } else {
            remove_engine_dir(dir)
        }
    };
    let mut report = Report::new(workload.name());
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
        ("memtables", json!(a.memtables)),
    ] {
        report.param(k, v);
    }
    let mut tuned_cache = 0;
    let mut rows: Vec<EngineResult> = Vec::new();
    let mut disk = Vec::new();
    for engine in &order {
        eprintln!(
            "{}: {engine}, {} keys, {ops} operations",
            workload.name(),
            a.keys
        );
        let spec = ChildSpec {
            workload,
            engine: engine.clone(),
            dir: root.join(engine),
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
                memtables: a.memtables,
                tphdb: TphdbSettings {
                    write_buffer_mb: a.write_buffer_mb,
                    max_immutable_memtables: a.max_immutable_memtables,
                    compaction_memory_mb: a.compaction_memory_mb,
                    background_threads: a.background_threads,
                    compaction_priority: a.compaction_priority,
                    tph_target_mb: a.tph_target_mb,
                    fanout: a.fanout,
                    signature_bits: a.signature_bits,
                    bottom_signature_bits: a.bottom_signature_bits,
                    bottom_field_bits: a.bottom_field_bits,
                    one_level: a.one_level,
                    single_tier: a.single_tier,
                    align_blocks: a.align_blocks,
                    gc_dead_ratio: a.gc_dead_ratio,
                    max_garbage_ratio: a.max_garbage_ratio,
                },
            },
        };
        if engine == "pogreb" {
            if let Some(why) = workload.pogreb_unsupported(a.threads) {
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
            let child = crate::orphan::die_with_parent(cmd)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()?;
            if let Some(b) = &budget {
                b.enter(child.id())?;
            }
            Ok(child.wait_with_output()?)
        };
        let mut out = run(Command::new(&exes[engine])
            .arg("bench-child")
            .arg(serde_json::to_string(&spec)?))?;
        if out.status.success() && engine == "pogreb" {
            // The child recorded the operations; the Go driver replays them.
            let data = root.join("pogreb-data");
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
            done_with_engine_dir(&root.join(engine));
            rows.push(EngineResult::failed(engine, why));
            continue;
        }
        let row: EngineResult = serde_json::from_slice(&out.stdout)
            .map_err(|e| format!("{engine}: no result ({e})"))?;
        if engine == "tphdb" {
            // rocksdb-tuned gets tphdb's read memory (index and block
            // cache) as its block cache, besides its pinned index and filters.
            tuned_cache = ["index_bytes", "block_cache_capacity"]
                .iter()
                .filter_map(|k| row.engine_figures.get(*k).and_then(Value::as_u64))
                .sum();
            // What the disk gives one thread, measured on tphdb's largest
            // file right after its run.
            if workload == Workload::Readrandom && a.direct_io {
                let ops = row.ops_per_sec.unwrap_or(0.0);
                disk_rows(&mut disk, &root.join(engine), a.fio_seconds, ops);
            }
        }
        done_with_engine_dir(&root.join(engine));
        rows.push(row);
    }
    rows.extend(disk);
    compare(&mut rows, workload);
    for row in &rows {
        report.push(row.to_json());
    }
    println!("{}: {} keys, {ops} operations", workload.name(), a.keys);
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
        "wal_amp",
        "device_write_amp",
        "x_rocksdb_device_write_amp",
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
    for r in report.rows() {
        if let Some(Value::Object(parts)) = r.get("memory_at_peak_mb") {
            let shown: Vec<String> = parts
                .iter()
                .filter_map(|(k, v)| Some(format!("{k} {:.1}", v.as_f64()?)))
                .collect();
            if !shown.is_empty() {
                let engine = r["engine"].as_str().unwrap_or("");
                println!(
                    "{engine} memory at its sampled peak, MB: {}",
                    shown.join(", ")
                );
            }
        }
    }
    if let Some(p) = &a.json {
        report.write_json(p)?;
    }
    if let Some(dir) = &a.plot {
        super::plot::report_plots(dir, workload.name(), &report)?;
    }
    Ok(())
}

/// Adds the comparisons: each engine's throughput, p99 and write
/// amplifications over RocksDB's, its throughput over `rocksdb-tuned`'s,
/// its slowest second over its median, and Pogreb's own figures.
fn compare(rows: &mut [EngineResult], workload: Workload) {
    let find = |name: &str| rows.iter().find(|r| r.engine == name).cloned();
    let (base, tuned) = (find("rocksdb"), find("rocksdb-tuned"));
    let ratio = |v: Option<f64>, b: Option<f64>| match (v, b) {
        (Some(v), Some(b)) if b > 0.0 => Some(round(v / b, 2)),
        _ => None,
    };
    for row in rows.iter_mut() {
        if let Some(b) = &base {
            row.x_rocksdb_ops = ratio(row.ops_per_sec, b.ops_per_sec);
            row.x_rocksdb_p99 = ratio(row.p99_us, b.p99_us);
            row.x_rocksdb_write_amp = ratio(row.write_amp, b.write_amp);
            row.x_rocksdb_device_write_amp = ratio(row.device_write_amp, b.device_write_amp);
        }
        if let Some(t) = &tuned {
            row.x_tuned_ops = ratio(row.ops_per_sec, t.ops_per_sec);
        }
        row.worst_second_x_median = worst_second(&row.throughput_per_sec).map(|w| round(w, 2));
        if let Some(i) = slowest_second(&row.throughput_per_sec) {
            let waited = row.waited_ms_per_sec.iter();
            let at = waited.filter_map(|(name, v)| Some((name.clone(), *v.get(i)?)));
            row.worst_second_waited_ms = at.collect();
        }
        if workload == Workload::Pogreb {
            // The figures Pogreb's own benchmark reports.
            row.write_ops_per_sec = row.load_ops_per_sec;
            row.read_ops_per_sec = row.ops_per_sec;
        }
    }
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

/// Removes an engine's directory once its run is over, and waits for the
/// file system to settle it: a run started right after 17 GB of the run
/// before were deleted wrote almost nothing for its first 20 seconds, as
/// the file system was still freeing them.
fn remove_engine_dir(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    // SAFETY: a plain system call; it takes no arguments.
    unsafe { libc::sync() };
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
    rows: &mut Vec<EngineResult>,
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
        rows.push(EngineResult {
            engine: engine.to_string(),
            ops_per_sec: Some(round(ops, 0)),
            avg_us: Some(round(avg, 2)),
            p99_us: Some(round(p99, 2)),
            tphdb_ratio: Some(round(tphdb_ops / ops.max(1e-9), 3)),
            ..EngineResult::default()
        });
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

/// The slowest whole second of a run over its median second (write stalls
/// show up as a low ratio); `None` for runs under three seconds.
/// The index of the slowest second, of at least three.
fn slowest_second(per_second: &[u64]) -> Option<usize> {
    if per_second.len() < 3 {
        return None;
    }
    let seconds = per_second.iter().enumerate();
    seconds.min_by_key(|&(_, &n)| n).map(|(i, _)| i)
}

/// The slowest second ([`slowest_second`]) over the median second.
fn worst_second(per_second: &[u64]) -> Option<f64> {
    let slowest = per_second[slowest_second(per_second)?] as f64;
    let mut v = per_second.to_vec();
    v.sort_unstable();
    let median = v[v.len() / 2] as f64;
    (median > 0.0).then(|| slowest / median)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_second_is_the_slowest_over_the_median() {
        assert_eq!(worst_second(&[100, 20, 90, 110, 100]), Some(0.2));
        assert_eq!(worst_second(&[100, 100]), None);
        assert_eq!(worst_second(&[0, 0, 0]), None);
        assert_eq!(slowest_second(&[100, 20, 90, 110, 100]), Some(1));
        assert_eq!(slowest_second(&[100, 100]), None);
    }
}
