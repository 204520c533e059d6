//! `tphdb bench <workload>`.

mod db;
mod disk;
mod engines;
mod latency;
pub mod peer;
mod phf;
mod piece;
mod plot;
mod report;
mod ycsb;

use clap::{Args, Subcommand};

pub use report::Report;

#[derive(Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    workload: Workload,
}

#[derive(Subcommand)]
enum Workload {
    /// Perfect hash functions: CPHash against PtrHash and FMPH.
    Phf(phf::PhfArgs),
    /// Piece files: index memory per key and get() latency.
    Piece(piece::PieceArgs),
    /// Write every key once, in random order.
    Fillrandom(db::DbArgs),
    /// Write every key once, in key order.
    Fillseq(db::DbArgs),
    /// Point reads of present keys.
    Readrandom(db::DbArgs),
    /// Point reads of absent keys.
    Readmissing(db::DbArgs),
    /// Point reads while one thread overwrites.
    Readwhilewriting(db::DbArgs),
    /// A seek to a random key, then --scan-length keys.
    Seekrandom(db::DbArgs),
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
}

pub fn run(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    match args.workload {
        Workload::Phf(a) => phf::run(a),
        Workload::Piece(a) => piece::run(a),
        Workload::Fillrandom(a) => db::run(db::DbWorkload::FillRandom, a),
        Workload::Fillseq(a) => db::run(db::DbWorkload::FillSeq, a),
        Workload::Readrandom(a) => db::run(db::DbWorkload::ReadRandom, a),
        Workload::Readmissing(a) => db::run(db::DbWorkload::ReadMissing, a),
        Workload::Readwhilewriting(a) => db::run(db::DbWorkload::ReadWhileWriting, a),
        Workload::Seekrandom(a) => db::run(db::DbWorkload::SeekRandom, a),
        Workload::Open(a) => db::run(db::DbWorkload::Open, a),
        Workload::YcsbA(a) => peer::run("ycsb-a", a),
        Workload::YcsbB(a) => peer::run("ycsb-b", a),
        Workload::YcsbC(a) => peer::run("ycsb-c", a),
        Workload::YcsbD(a) => peer::run("ycsb-d", a),
        Workload::YcsbE(a) => peer::run("ycsb-e", a),
        Workload::YcsbF(a) => peer::run("ycsb-f", a),
    }
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
