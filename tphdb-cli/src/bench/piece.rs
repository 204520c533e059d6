//! `tphdb bench piece`: one piece file, its index memory and get() latency
//! through each read path, beside raw 4 KiB O_DIRECT reads of the same file.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::json;
use tphdb::fs::{CountingFs, PosixFs, ReadMode};
use tphdb::phf::PhfKind;
use tphdb::piece::{
    write_piece, Compression, EntryRef, PieceOptions, PieceReader, DEFAULT_MAX_BLOCK_SLOTS,
};

use super::disk::raw_direct_reads;
use super::latency::timed;
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
    /// Most entries a block holds, comma separated to compare several
    /// (the database's `max_block_slots`).
    #[arg(long, default_values_t = [DEFAULT_MAX_BLOCK_SLOTS], value_delimiter = ',')]
    max_block_slots: Vec<usize>,
    /// Directory for the piece file (default: a temporary directory in the
    /// current directory, so that O_DIRECT reaches a real disk).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Write results as JSON to this file.
    #[arg(long)]
    json: Option<PathBuf>,
}

fn phf_kind(name: &str) -> Result<PhfKind, String> {
    match name {
        "cphash" => Ok(PhfKind::CpHash),
        "ptr_hash" => Ok(PhfKind::PtrHash),
        other => Err(format!("unknown perfect hash {other:?}")),
    }
}

pub fn run(a: PieceArgs) -> Result<(), Box<dyn std::error::Error>> {
    let tmp = super::scratch_dir(a.dir.as_deref())?;
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

    let runs = a
        .phf
        .iter()
        .flat_map(|name| a.max_block_slots.iter().map(move |&slots| (name, slots)));
    // A run's name: the perfect hash, and the slot bound when several are
    // compared.
    let label = |name: &str, slots: usize| match a.max_block_slots.len() {
        1 => name.to_string(),
        _ => format!("{name}@{slots}"),
    };
    for (name, max_block_slots) in runs {
        let label = label(name, max_block_slots);
        let path = tmp.path().join(format!("{label}.ph"));
        let opts = PieceOptions {
            phf_kind: phf_kind(name)?,
            max_block_slots,
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
                "piece/{label}: writing ({}/{})",
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
            eprintln!("piece/{label}: get() via {}", mode.name());
            let r = PieceReader::open_with(&fs, &path, mode, true)?;
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
                &format!("piece/{label}"),
                vec![
                    ("read_mode", json!(mode.name())),
                    ("index_bytes_per_key", json!(round(per_key, 3))),
                    ("build_ns_per_key", json!(round(build_ns, 1))),
                    ("get_ns", json!(round(present.ns_per_op(), 1))),
                    ("get_p99_us", json!(round(present.quantile_us(0.99), 2))),
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
    if let (Some(first), Some(slots)) = (a.phf.first(), a.max_block_slots.first()) {
        eprintln!("raw: 4 KiB O_DIRECT random reads");
        let path = tmp.path().join(format!("{}.ph", label(first, *slots)));
        let raw = raw_direct_reads(&path, a.ops, limit)?;
        report.result(
            "raw-4k-direct",
            vec![
                ("read_mode", json!("direct")),
                ("get_ns", json!(round(raw.ns_per_op(), 1))),
                ("get_p99_us", json!(round(raw.quantile_us(0.99), 2))),
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
