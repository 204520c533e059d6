//! `tphdb bench open`: time to reopen a loaded tphdb database, with and
//! without a WAL to replay. (The other db_bench workloads run through the
//! side-by-side runner, `peer.rs`.)

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use serde_json::json;
use tphdb::{DBStats, Options, DB};

use super::child::{bench_key as key, Values};
use super::report::round;
use super::Report;

#[derive(Args, Clone, Debug)]
pub struct DbArgs {
    /// Keys loaded.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// Key size in bytes (at least 8).
    #[arg(long, default_value_t = 20)]
    pub key_size: usize,
    /// Value size in bytes.
    #[arg(long, default_value_t = 128)]
    pub value_size: usize,
    /// Parent directory of the database (default: the current directory).
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
    /// MiB of unflushed writes left in the WAL for the second measurement.
    #[arg(long, default_value_t = 64)]
    pub wal_mb: u64,
}

fn engine_options(a: &DbArgs) -> Options {
    let d = Options::default();
    Options {
        write_buffer_bytes: a.write_buffer_mb.map_or(d.write_buffer_bytes, |m| m << 20),
        tph_target_bytes: a.tph_target_mb.map_or(d.tph_target_bytes, |m| m << 20),
        ..d
    }
}

/// Loads every key into a new database at `path` in a random order, lets
/// flushes and compactions finish, and closes it.
fn load_settled(
    opts: &Options,
    path: &Path,
    a: &DbArgs,
    values: &Values,
) -> Result<(), Box<dyn std::error::Error>> {
    let db = DB::open(opts, path)?;
    let mut order: Vec<u64> = (0..a.keys).collect();
    fastrand::Rng::with_seed(1).shuffle(&mut order);
    let start = Instant::now();
    for (n, &k) in order.iter().enumerate() {
        db.put(key(k, a.key_size), values.get(k, a.value_size))?;
        if n % 1_000_000 == 999_999 {
            eprintln!(
                "  load: {}/{} keys, {:.0} s",
                n + 1,
                a.keys,
                start.elapsed().as_secs_f64()
            );
        }
    }
    db.flush()?;
    db.wait_for_compactions()?;
    db.close()?;
    Ok(())
}

pub fn run_open(a: DbArgs) -> Result<(), Box<dyn std::error::Error>> {
    let tmp = super::scratch_dir(a.dir.as_deref())?;
    let path = tmp.path().join("db");
    let opts = engine_options(&a);
    let values = Values::new(a.value_size);
    let mut report = Report::new("open");
    report.param("keys", a.keys);
    report.param("key_size", a.key_size);
    report.param("value_size", a.value_size);
    report.param("options", format!("{opts:?}"));
    eprintln!(
        "open: {} keys of {}+{} bytes in {}",
        a.keys,
        a.key_size,
        a.value_size,
        path.display()
    );
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
    let time_open =
        |label: &str, with_wal: bool| -> Result<(f64, DBStats), Box<dyn std::error::Error>> {
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
    report.print_table();
    if let Some(p) = &a.json {
        report.write_json(p)?;
    }
    Ok(())
}
