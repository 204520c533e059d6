//! `tphdb-server --dir DIR [--bind 127.0.0.1] [--port 6379]`: serves a
//! tphdb database to Redis clients until SIGTERM, SIGINT or `SHUTDOWN`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use tphdb_server::{resp::Limits, Config, Fsync};

/// The Redis protocol over a tphdb database.
#[derive(Parser, Debug)]
#[command(name = "tphdb-server", version)]
struct Args {
    /// Database directory (created if missing).
    #[arg(long)]
    dir: PathBuf,
    /// Address to listen on (loopback unless you say otherwise).
    #[arg(long, default_value = "127.0.0.1")]
    bind: String,
    /// Port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// Password clients must AUTH with (also read from TPHDB_REQUIREPASS).
    #[arg(long, env = "TPHDB_REQUIREPASS", hide_env_values = true)]
    requirepass: Option<String>,
    /// Connections at once; more are refused.
    #[arg(long, default_value_t = 10_000)]
    maxclients: usize,
    /// Bytes of one request at most (all its arguments).
    #[arg(long, default_value_t = 64 << 20)]
    max_request_bytes: usize,
    /// Arguments of one request at most.
    #[arg(long, default_value_t = 1 << 20)]
    max_args: usize,
    /// Pipelined requests of one client run before its replies are sent.
    #[arg(long, default_value_t = 1024)]
    max_pipeline: usize,
    /// Close clients idle this many seconds (0: never).
    #[arg(long, default_value_t = 0)]
    timeout: u64,
    /// When acknowledged writes reach the disk.
    #[arg(long, value_enum, default_value_t = Fsync::Everysec)]
    appendfsync: Fsync,
    /// Allow FLUSHALL and FLUSHDB.
    #[arg(long)]
    enable_flushall: bool,
    /// Worker threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Memory the database may hold, in MiB (memtables, compactions, block
    /// cache; the index is apart). Default: tphdb's own defaults.
    #[arg(long)]
    memory_mb: Option<usize>,
    /// The compactions' CPU priority: `low` runs them at nice 19, so that
    /// requests take the CPU first; `low-without-writes` runs those that
    /// start once no write arrived for 100 ms at nice 19 in the
    /// `SCHED_IDLE` class, on cores nothing else wants.
    #[arg(long, value_enum, default_value_t = Priority::LowWithoutWrites)]
    compaction_priority: Priority,
    /// Entries a block of a new piece holds at most (the database's
    /// `max_block_slots`): fewer make gets of small values faster for more
    /// index memory. Default: tphdb's own (8).
    #[arg(long)]
    max_block_slots: Option<usize>,
}

/// `tphdb::CompactionPriority`, as a flag's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Priority {
    Normal,
    Low,
    LowWithoutWrites,
}

/// jemalloc: its background thread returns freed pages after a second
/// (`.cargo/config.toml`), where glibc's heaps kept tens of megabytes of
/// freed merge buffers resident.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let a = Args::parse();
    let db_options = tphdb::Options {
        memory_budget_bytes: a.memory_mb.map(|m| m << 20),
        compaction_priority: match a.compaction_priority {
            Priority::Normal => tphdb::CompactionPriority::Normal,
            Priority::Low => tphdb::CompactionPriority::Low,
            Priority::LowWithoutWrites => tphdb::CompactionPriority::LowWithoutWrites,
        },
        max_block_slots: a
            .max_block_slots
            .unwrap_or(tphdb::Options::default().max_block_slots),
        ..tphdb::Options::default()
    };
    let cfg = Config {
        dir: a.dir,
        bind: a.bind,
        port: a.port,
        requirepass: a.requirepass,
        maxclients: a.maxclients,
        limits: Limits {
            max_bulk_bytes: a.max_request_bytes,
            max_request_bytes: a.max_request_bytes,
            max_args: a.max_args,
        },
        max_pipeline: a.max_pipeline.max(1),
        timeout: (a.timeout > 0).then(|| Duration::from_secs(a.timeout)),
        appendfsync: a.appendfsync,
        enable_flushall: a.enable_flushall,
        threads: a.threads,
        db_options,
    };
    if let Err(e) = tphdb_server::run(cfg) {
        eprintln!("tphdb-server: {e}");
        std::process::exit(1);
    }
}
