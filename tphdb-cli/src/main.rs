//! `tphdb`: benchmarks and tools for the tphdb storage engine.

mod bench;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "tphdb", version, about = "tphdb: benchmarks and tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a benchmark; prints a table and optionally writes JSON.
    Bench(bench::BenchArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
