//! `tphdb bench <workload>`.

pub mod child;
mod db;
mod disk;
pub mod engines;
mod latency;
mod memory;
pub mod peer;
mod permutation;
mod phase;
mod phf;
mod piece;
mod plot;
mod report;
mod result;
mod workload;
mod ycsb;

use clap::{Args, Subcommand};

pub use report::Report;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    workload: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Perfect hash functions: CPHash against PtrHash and FMPH.
    Phf(phf::PhfArgs),
    /// Piece files: index memory per key and get() latency.
    Piece(piece::PieceArgs),
    /// Write every key once, in key order.
    Fillseq(peer::PeerArgs),
    /// Write every key once, in random order.
    Fillrandom(peer::PeerArgs),
    /// Overwrite random loaded keys.
    Overwrite(peer::PeerArgs),
    /// Point reads of present keys.
    Readrandom(peer::PeerArgs),
    /// Point reads of absent keys.
    Readmissing(peer::PeerArgs),
    /// Point reads of a hot 1% of the keys.
    Readhot(peer::PeerArgs),
    /// One scan of every key, in order.
    Readseq(peer::PeerArgs),
    /// A seek to a random key, then --scan-length keys.
    Seekrandom(peer::PeerArgs),
    /// Point reads while one more thread overwrites.
    Readwhilewriting(peer::PeerArgs),
    /// Delete every key once, in random order.
    Deleterandom(peer::PeerArgs),
    /// Time to reopen a loaded database, with and without a WAL to replay.
    Open(db::DbArgs),
    /// YCSB A: 50% reads, 50% updates, zipfian.
    #[command(name = "ycsb-a")]
    YcsbA(peer::PeerArgs),
    /// YCSB B: 95% reads, 5% updates, zipfian.
    #[command(name = "ycsb-b")]
    YcsbB(peer::PeerArgs),
    /// YCSB C: reads only, zipfian.
    #[command(name = "ycsb-c")]
    YcsbC(peer::PeerArgs),
    /// YCSB D: 95% reads of the latest records, 5% inserts.
    #[command(name = "ycsb-d")]
    YcsbD(peer::PeerArgs),
    /// YCSB E: 95% scans of 1-100 records, 5% inserts, zipfian.
    #[command(name = "ycsb-e")]
    YcsbE(peer::PeerArgs),
    /// YCSB F: 50% reads, 50% read-modify-writes, zipfian.
    #[command(name = "ycsb-f")]
    YcsbF(peer::PeerArgs),
    /// Pogreb's benchmark: random 16-64-byte keys and 128-512-byte
    /// values, write all, reopen, read all in a random order.
    Pogreb(peer::PeerArgs),
}

pub fn run(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    match args.workload {
        Command::Phf(a) => phf::run(a),
        Command::Piece(a) => piece::run(a),
        Command::Fillseq(a) => peer::run(workload::Workload::Fillseq, a),
        Command::Fillrandom(a) => peer::run(workload::Workload::Fillrandom, a),
        Command::Overwrite(a) => peer::run(workload::Workload::Overwrite, a),
        Command::Readrandom(a) => peer::run(workload::Workload::Readrandom, a),
        Command::Readmissing(a) => peer::run(workload::Workload::Readmissing, a),
        Command::Readhot(a) => peer::run(workload::Workload::Readhot, a),
        Command::Readseq(a) => peer::run(workload::Workload::Readseq, a),
        Command::Seekrandom(a) => peer::run(workload::Workload::Seekrandom, a),
        Command::Readwhilewriting(a) => peer::run(workload::Workload::Readwhilewriting, a),
        Command::Deleterandom(a) => peer::run(workload::Workload::Deleterandom, a),
        Command::Open(a) => db::run_open(a),
        Command::YcsbA(a) => peer::run(workload::Workload::YcsbA, a),
        Command::YcsbB(a) => peer::run(workload::Workload::YcsbB, a),
        Command::YcsbC(a) => peer::run(workload::Workload::YcsbC, a),
        Command::YcsbD(a) => peer::run(workload::Workload::YcsbD, a),
        Command::YcsbE(a) => peer::run(workload::Workload::YcsbE, a),
        Command::YcsbF(a) => peer::run(workload::Workload::YcsbF, a),
        Command::Pogreb(a) => peer::run(workload::Workload::Pogreb, a),
    }
}

/// A temporary directory for a run's files inside `--dir` (created if
/// missing) or the working directory; removed when dropped.
fn scratch_dir(dir: Option<&std::path::Path>) -> std::io::Result<tempfile::TempDir> {
    let parent = dir.unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(parent)?;
    tempfile::tempdir_in(parent)
}

/// Number of hardware threads.
pub fn all_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `f` on a rayon pool of `threads` threads.
pub fn with_threads<R: Send>(threads: usize, f: impl FnOnce() -> R + Send) -> R {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("thread pool")
        .install(f)
}
