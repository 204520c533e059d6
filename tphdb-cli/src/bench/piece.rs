//! `tphdb bench piece`: one piece file, its index memory and get() latency
//! through each read path, beside raw 4 KiB O_DIRECT reads of the same file.

use std::fs::OpenOptions;
use std::hint::black_box;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use serde_json::json;
use tphdb::fs::{CountingFs, PosixFs, ReadMode};
use tphdb::phf::PhfKind;
use tphdb::piece::{write_piece, Compression, EntryRef, PieceOptions, PieceReader};

use super::report::round;
use super::Report;

#[derive(Args)]
pub struct PieceArgs {
    /// Number of entries in the piece.
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    /// Key size in bytes.
    #[arg(long, default_value_t = 20)]
    key_size: usize,
    /// Value size in bytes.
    #[arg(long, default_value_t = 128)]
    value_size: usize,
    /// Gets per read path (direct I/O runs at most `--direct-seconds`).
    #[arg(long, default_value_t = 300_000)]
    ops: usize,
    /// Time limit of each direct I/O measurement.
    #[arg(long, default_value_t = 5.0)]
    direct_seconds: f64,
    /// Perfect hashes to compare, comma separated: cphash, ptr_hash.
    #[arg(long, default_value = "cphash,ptr_hash", value_delimiter = ',')]
    phf: Vec<String>,
    /// Times the piece is written; the fastest write is reported.
    #[arg(long, default_value_t = 3)]
    write_rounds: usize,
    /// Compress blocks with LZ4.
    #[arg(long)]
    lz4: bool,
    /// Directory for the piece file (default: a temporary directory in the
    /// current directory, so that O_DIRECT reaches a real disk).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

struct Latencies {
    ops: u64,
    elapsed: Duration,
    hist: Histogram<u64>,
}

impl Latencies {
    fn ns_per_op(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.ops.max(1) as f64
    }
    fn p99_us(&self) -> f64 {
        self.hist.value_at_quantile(0.99) as f64 / 1000.0
    }
}

/// Runs `op(i)` for i in 0..ops or until `limit` passes, timing each call.
fn timed(ops: usize, limit: Duration, mut op: impl FnMut(usize)) -> Latencies {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram");
    let start = Instant::now();
    let mut done = 0;
    while done < ops {
        let t = Instant::now();
        op(done);
        hist.saturating_record(t.elapsed().as_nanos() as u64);
        done += 1;
        if done % 1024 == 0 && start.elapsed() > limit {
            break;
        }
    }
    Latencies {
        ops: done as u64,
        elapsed: start.elapsed(),
        hist,
    }
}

fn phf_kind(name: &str) -> Result<PhfKind, String> {
    match name {
        "cphash" => Ok(PhfKind::CpHash),
        "ptr_hash" => Ok(PhfKind::PtrHash),
        other => Err(format!("unknown perfect hash {other:?}")),
    }
}

/// Raw random 4 KiB O_DIRECT reads of `path`: what the disk gives one thread.
fn raw_direct_reads(path: &Path, ops: usize, limit: Duration) -> std::io::Result<Latencies> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let pages = (file.metadata()?.len() / 4096).max(1);
    let layout = std::alloc::Layout::from_size_align(4096, 4096).expect("layout");
    // SAFETY: non-zero size; freed below.
    let buf = unsafe { std::alloc::alloc(layout) };
    let mut rng = fastrand::Rng::with_seed(11);
    let mut err = None;
    let lat = timed(ops, limit, |_| {
        // SAFETY: `buf` is a live 4096-byte allocation.
        let b = unsafe { std::slice::from_raw_parts_mut(buf, 4096) };
        if let Err(e) = file.read_at(b, rng.u64(..pages) * 4096) {
            err = Some(e);
        }
    });
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(buf, layout) };
    err.map_or(Ok(lat), Err)
}

pub fn run(a: PieceArgs) -> Result<(), Box<dyn std::error::Error>> {
    let tmp = match &a.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir_in(".")?,
    };
    let mut rng = fastrand::Rng::with_seed(42);
    eprintln!(
        "piece: generating {} entries ({} B keys, {} B values)",
        a.keys, a.key_size, a.value_size
    );
    let keys: Vec<Vec<u8>> = (0..a.keys)
        .map(|_| (0..a.key_size).map(|_| rng.u8(..)).collect())
        .collect();
    let value: Vec<u8> = (0..a.value_size).map(|_| rng.u8(..)).collect();
    let mut entries: Vec<EntryRef> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| EntryRef {
            key: k,
            value: Some(&value),
            seq: i as u64,
        })
        .collect();
    entries.sort_unstable_by(|x, y| x.key.cmp(y.key));
    entries.dedup_by(|x, y| x.key == y.key);
    let missing: Vec<Vec<u8>> = (0..a.ops.min(100_000))
        .map(|_| (0..a.key_size + 1).map(|_| rng.u8(..)).collect())
        .collect();
    let mut order: Vec<usize> = (0..entries.len()).collect();
    rng.shuffle(&mut order);

    let mut report = Report::new("piece");
    report.param("keys", entries.len());
    report.param("key_size", a.key_size);
    report.param("value_size", a.value_size);
    report.param("compression", if a.lz4 { "lz4" } else { "none" });
    let limit = Duration::from_secs_f64(a.direct_seconds);
    let fs = CountingFs::new(PosixFs);

    for name in &a.phf {
        let path = tmp.path().join(format!("{name}.ph"));
        let opts = PieceOptions {
            phf_kind: phf_kind(name)?,
            compression: if a.lz4 {
                Compression::Lz4
            } else {
                Compression::None
            },
            ..PieceOptions::default()
        };
        let mut build_ns = f64::INFINITY;
        let mut props = None;
        for round in 0..a.write_rounds.max(1) {
            eprintln!(
                "piece/{name}: writing ({}/{})",
                round + 1,
                a.write_rounds.max(1)
            );
            let t = Instant::now();
            props = Some(write_piece(&fs, &path, &entries, &opts)?);
            build_ns = build_ns.min(t.elapsed().as_nanos() as f64 / entries.len().max(1) as f64);
        }
        let props = props.expect("written at least once");
        let file_bytes = std::fs::metadata(&path)?.len();

        for mode in [ReadMode::Mmap, ReadMode::Pread, ReadMode::Direct] {
            eprintln!("piece/{name}: get() via {}", mode.name());
            let r = PieceReader::open(&fs, &path, mode)?;
            let ops = a.ops.min(entries.len().max(1) * 4);
            let (reads0, bytes0) = fs.counts().read_totals();
            let present = timed(
                ops,
                if mode == ReadMode::Direct {
                    limit
                } else {
                    Duration::MAX
                },
                |i| {
                    let e = &entries[order[i % order.len()]];
                    let got = r.get(e.key).expect("get");
                    assert!(got.is_some(), "present key not found");
                    black_box(got);
                },
            );
            let (reads1, bytes1) = fs.counts().read_totals();
            let absent = timed(
                missing.len(),
                if mode == ReadMode::Direct {
                    limit
                } else {
                    Duration::MAX
                },
                |i| {
                    assert!(r.get(&missing[i]).expect("get").is_none());
                },
            );
            let per_key = r.index_memory_bytes() as f64 / entries.len().max(1) as f64;
            report.result(
                &format!("piece/{name}"),
                vec![
                    ("read_mode", json!(mode.name())),
                    ("index_bytes_per_key", json!(round(per_key, 3))),
                    ("build_ns_per_key", json!(round(build_ns, 1))),
                    ("get_ns", json!(round(present.ns_per_op(), 1))),
                    ("get_p99_us", json!(round(present.p99_us(), 2))),
                    ("get_missing_ns", json!(round(absent.ns_per_op(), 1))),
                    ("ops_per_sec", json!(round(1e9 / present.ns_per_op(), 0))),
                    (
                        "reads_per_get",
                        json!(round((reads1 - reads0) as f64 / present.ops as f64, 3)),
                    ),
                    (
                        "bytes_per_get",
                        json!(round((bytes1 - bytes0) as f64 / present.ops as f64, 0)),
                    ),
                    ("slots_per_block", json!(props.slots_per_block)),
                    ("file_bytes", json!(file_bytes)),
                ],
            );
            fs.counts().reads.store(0, Relaxed);
        }
    }
    if let Some(first) = a.phf.first() {
        eprintln!("raw: 4 KiB O_DIRECT random reads");
        let raw = raw_direct_reads(&tmp.path().join(format!("{first}.ph")), a.ops, limit)?;
        report.result(
            "raw-4k-direct",
            vec![
                ("read_mode", json!("direct")),
                ("get_ns", json!(round(raw.ns_per_op(), 1))),
                ("get_p99_us", json!(round(raw.p99_us(), 2))),
                ("ops_per_sec", json!(round(1e9 / raw.ns_per_op(), 0))),
                ("reads_per_get", json!(1.0)),
                ("bytes_per_get", json!(4096)),
            ],
        );
    }
    report.print_table();
    if let Some(path) = &a.json {
        report.write_json(path)?;
    }
    Ok(())
}
