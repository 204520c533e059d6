//! `tphdb`'s commands: benchmarks and tools for the tphdb storage engine.
//! A library for the two binaries that run them: `tphdb`, and
//! `tphdb-peers` (the `peers` feature), in which a side-by-side benchmark
//! runs the engines it compares tphdb with ([`engines`]).

mod bench;
mod crashtest;
mod lines;
mod orphan;
mod stress;
mod tools;

use clap::{Parser, Subcommand};

/// The engines a benchmark runs, for the peers' binary.
pub use bench::engines;

/// jemalloc: its background thread returns freed pages after a second
/// (`.cargo/config.toml`), where glibc's heaps kept tens of megabytes of
/// freed merge buffers resident. Behind the `jemalloc` feature (on by
/// default), since linking the crate at all replaces `malloc` in the
/// whole process: a heap profile needs a build without it.
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(name = "tphdb", version, about = "tphdb: benchmarks and tools")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a benchmark; prints a table and optionally writes JSON.
    Bench(Box<bench::BenchArgs>),
    /// Print the value of a key (read-only; exits 1 if it is missing).
    Get {
        #[command(flatten)]
        db: tools::DbArgs,
        /// The key.
        key: String,
    },
    /// Set a key to a value (a synced write; creates the database).
    Put {
        #[command(flatten)]
        db: tools::DbArgs,
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// Delete a key (a synced write).
    Delete {
        #[command(flatten)]
        db: tools::DbArgs,
        /// The key.
        key: String,
    },
    /// Print entries in key order, one `key<TAB>value` line each
    /// (read-only).
    Scan(tools::ScanArgs),
    /// Write every entry to a file in the dump line format, from one
    /// snapshot (read-only).
    Dump {
        #[command(flatten)]
        db: tools::DbArgs,
        /// The output file, or `-` for standard output.
        #[arg(long, default_value = "-")]
        out: std::path::PathBuf,
    },
    /// Bulk-load a dump, or `key<TAB>value` lines in any order, without
    /// the WAL (creates the database).
    Load {
        #[command(flatten)]
        db: tools::DbArgs,
        /// The input file, or `-` for standard input.
        #[arg(long, default_value = "-")]
        input: std::path::PathBuf,
        /// Write with `put` (WAL and memtable) instead, as an application
        /// would: the baseline the bulk load is measured against.
        #[arg(long)]
        put_loop: bool,
    },
    /// Compact everything into the bottom level, one piece per TPH.
    Compact {
        #[command(flatten)]
        db: tools::DbArgs,
    },
    /// Make a consistent copy in a new directory (hard links to the
    /// pieces).
    Checkpoint {
        #[command(flatten)]
        db: tools::DbArgs,
        /// The new directory.
        #[arg(long)]
        to: std::path::PathBuf,
    },
    /// Show the inside of a piece, WAL or MANIFEST, like RocksDB's
    /// `sst_dump` and `ldb dump_wal`/`manifest_dump`.
    Inspect {
        #[command(subcommand)]
        what: tools::InspectWhat,
    },
    /// Print a database's statistics and structure (opens it read-only).
    Stats {
        /// The database directory.
        #[arg(long)]
        db: std::path::PathBuf,
    },
    /// Check every checksum and index invariant, file by file (read-only).
    Verify {
        /// The database directory.
        #[arg(long)]
        db: std::path::PathBuf,
    },
    /// Salvage what is intact into a consistent database in place; the old
    /// files move to DIR/lost/.
    Repair {
        /// The database directory.
        #[arg(long)]
        db: std::path::PathBuf,
    },
    /// Kill -9 a writing process at random moments, reopen and verify, in
    /// a loop.
    Crashtest(crashtest::CrashtestArgs),
    /// Many threads mix reads, writes, scans and snapshots against an
    /// expected-state model, with flushes, compactions and reopens.
    Stress(stress::StressArgs),
    /// One engine's run of a side-by-side benchmark (internal).
    #[command(hide = true)]
    BenchChild {
        /// The run, as JSON.
        spec: String,
    },
    /// One child process of `crashtest` (internal).
    #[command(hide = true)]
    CrashtestChild(crashtest::ChildArgs),
}

/// `tphdb`: parses the command line and runs the command.
pub fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(*args),
        Command::Get { db, key } => tools::get(db, &key),
        Command::Put { db, key, value } => tools::put(db, &key, &value),
        Command::Delete { db, key } => tools::delete(db, &key),
        Command::Scan(a) => tools::scan(a),
        Command::Dump { db, out } => tools::dump(db, &out),
        Command::Load {
            db,
            input,
            put_loop,
        } => tools::load(db, &input, put_loop),
        Command::Compact { db } => tools::compact(db),
        Command::Checkpoint { db, to } => tools::checkpoint(db, &to),
        Command::Inspect { what } => tools::inspect(what),
        Command::Stats { db } => stats(&db),
        Command::Verify { db } => verify(&db),
        Command::Repair { db } => repair(&db),
        Command::Crashtest(a) => crashtest::run(a),
        Command::BenchChild { spec } => bench_child(&spec),
        Command::Stress(a) => stress::run(a),
        Command::CrashtestChild(a) => crashtest::child(a),
    };
    exit_on_error(result);
}

/// A command's failure: its message on standard error, and exit status 1.
fn exit_on_error(result: Result<(), Box<dyn std::error::Error>>) {
    if let Err(e) = result {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn stats(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let db = tphdb::DB::open_for_read_only(&tphdb::Options::default(), dir)?;
    print!("{}", db.stats().report());
    Ok(())
}

fn verify(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let report = tphdb::DB::verify(&tphdb::Options::default(), dir)?;
    print!("{report}");
    if !report.is_ok() {
        return Err("the database is damaged".into());
    }
    Ok(())
}

fn repair(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let report = tphdb::DB::repair(&tphdb::Options::default(), dir)?;
    print!("{report}");
    Ok(())
}

/// `tphdb-peers bench-child SPEC`: one peer engine's run of a side-by-side
/// benchmark, opened by `open` (the peers' binary links them; `tphdb`
/// does not, so that a tphdb child maps none of their libraries).
pub fn peers_main(open: engines::PeerOpen) {
    engines::set_peers(open);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.as_slice() {
        [command, spec] if command == "bench-child" => bench_child(spec),
        _ => Err("usage: tphdb-peers bench-child SPEC (run by `tphdb bench`)".into()),
    };
    exit_on_error(result);
}

fn bench_child(spec: &str) -> Result<(), Box<dyn std::error::Error>> {
    let result = bench::child::child(serde_json::from_str(spec)?)?;
    println!("{}", serde_json::to_string(&result)?);
    Ok(())
}
