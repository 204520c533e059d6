//! `tphdb bench <workload>`.

mod phf;
mod piece;
mod report;

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
}

pub fn run(args: BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    match args.workload {
        Workload::Phf(a) => phf::run(a),
        Workload::Piece(a) => piece::run(a),
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
