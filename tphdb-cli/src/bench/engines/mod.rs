//! The stores `tphdb bench` compares, behind one small interface. Peers
//! (RocksDB, LMDB, LevelDB, fjall, redb, and Pogreb's recorder) build with
//! the `peers` feature (see `scripts/setup-peers.sh`) into a binary of
//! their own, `tphdb-peers` (`tphdb-cli/src/peers/`), which runs their
//! child processes: a tphdb child is the `tphdb` binary, and maps none of
//! the peers' libraries. Built into one binary, each child mapped them
//! all, and RocksDB's and the C++ runtime's pages made 8 MB of a tphdb
//! child's resident memory that a process embedding tphdb would not hold.
//!
//! Every engine runs with compression off and without a sync per write
//! (the default of RocksDB, LevelDB and tphdb; LMDB with `NO_SYNC`, redb
//! with `Durability::None`), so that all of them do the same work.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::Value;

mod tphdb_engine;

pub type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// What every engine under test offers. Shared between threads.
pub trait Kv: Send + Sync {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()>;
    /// The value's length, or `None` when absent (the value is read).
    fn get(&self, key: &[u8]) -> Result<Option<usize>>;
    fn delete(&self, key: &[u8]) -> Result<()>;
    /// Reads up to `n` entries from the first key `>= start`; returns how
    /// many it read.
    fn scan(&self, start: &[u8], n: usize) -> Result<usize>;
    /// Makes every write durable and lets background work finish (flushes,
    /// compactions), so a following phase measures a settled store.
    fn settle(&self) -> Result<()>;
    /// Called after each timed operation with its kind (the
    /// `ycsb::OpKind` index) and whether its reads should find their keys:
    /// lets a recording engine delimit operations.
    fn end_op(&self, _label: u8, _expect_found: bool) {}
    /// Called when the measured phase starts.
    fn mark_run(&self) -> Result<()> {
        Ok(())
    }
    /// What flushes and compactions wrote, and the WAL, since the engine
    /// was opened; `None` for engines that do not count them.
    fn write_counters(&self) -> Option<WriteCounters> {
        None
    }
    /// What the engine's parts hold in memory now, by name (memtables,
    /// caches, index), for the memory timeline; empty when it does not
    /// say.
    fn memory_parts(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// How long writers have waited since the engine was opened, by
    /// cause, in microseconds (stopped, or paced), for the timeline;
    /// empty when it does not say.
    fn wait_counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Engine-specific figures for the report: `keys` are in the store,
    /// `user_bytes` of keys and values were written.
    fn extra(&self, _keys: u64, _user_bytes: u64) -> Vec<(&'static str, Value)> {
        Vec::new()
    }
}

/// Bytes an engine counts itself writing.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteCounters {
    /// Flushes and compactions (RocksDB's `rocksdb.flush.write.bytes` and
    /// `rocksdb.compact.write.bytes`).
    pub flush_and_compaction: u64,
    /// The WAL, when the engine counts it.
    pub wal: Option<u64>,
}

/// How the benchmark configures every engine.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct EngineConfig {
    /// Read with O_DIRECT where the engine can (tphdb, RocksDB).
    pub direct_io: bool,
    /// Bytes of index memory tphdb used in a previous run, for
    /// `rocksdb-tuned`'s block cache (0: a default of 32 MiB).
    pub tuned_cache_bytes: u64,
    /// Expected data size, for engines that must reserve a map (LMDB).
    pub data_bytes: u64,
    /// The process's memory budget in MiB. Engines whose defaults assume
    /// more are set up as a user running them in that budget would: tphdb
    /// gets half of it as `memory_budget_bytes` (memtables, compactions and
    /// block cache); redb's cache gets a quarter (its default is 1 GiB).
    pub memory_mb: Option<u64>,
    /// Memtables each engine may hold, the one being written included
    /// (none: each engine's default, 2 for both): RocksDB's
    /// `max_write_buffer_number`, one more than tphdb's
    /// `max_immutable_memtables`. Both write buffers are 64 MiB, so this
    /// compares them at equal memtable budgets.
    pub memtables: Option<usize>,
    /// tphdb settings the command line overrides (`None`: the default).
    pub tphdb: TphdbSettings,
}

/// tphdb options a benchmark may set.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct TphdbSettings {
    pub write_buffer_mb: Option<usize>,
    pub max_immutable_memtables: Option<usize>,
    pub compaction_memory_mb: Option<usize>,
    pub background_threads: Option<usize>,
    pub compaction_priority: Option<CompactionPriorityArg>,
    pub tph_target_mb: Option<u64>,
    pub fanout: Option<u32>,
    pub signature_bits: Option<u32>,
    pub bottom_signature_bits: Option<u32>,
    pub bottom_field_bits: Option<u32>,
    pub one_level: bool,
    pub single_tier: bool,
    pub align_blocks: bool,
    /// `Options::gc_dead_ratio` (none: the default).
    pub gc_dead_ratio: Option<f64>,
    /// `Options::max_garbage_ratio` (none: the default).
    pub max_garbage_ratio: Option<f64>,
}

/// `tphdb::CompactionPriority`, as a flag's values.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
pub enum CompactionPriorityArg {
    Normal,
    Low,
    LowWithoutWrites,
}

/// Every engine name `--engines` accepts.
pub const ALL: [&str; 8] = [
    "tphdb",
    "rocksdb",
    "rocksdb-tuned",
    "lmdb",
    "leveldb",
    "fjall",
    "redb",
    "pogreb",
];

/// Refuses an engine this build cannot open, before anything runs: the
/// peers need `--features peers`.
pub fn check_available(name: &str) -> Result<()> {
    if !ALL.contains(&name) {
        return Err(format!("unknown engine {name}; known: {}", ALL.join(", ")).into());
    }
    if name != "tphdb" && !cfg!(feature = "peers") {
        return Err(format!(
            "engine {name} needs a build with `--features peers` (run scripts/setup-peers.sh first)"
        )
        .into());
    }
    Ok(())
}

/// Opens a peer engine by name in a new directory; `None` for a name it
/// does not know.
pub type PeerOpen = fn(&str, &Path, &EngineConfig) -> Option<Result<Box<dyn Kv>>>;

static PEERS: OnceLock<PeerOpen> = OnceLock::new();

/// Lets [`open`] open the peers: called by the binary that links them.
pub fn set_peers(open: PeerOpen) {
    let _ = PEERS.set(open);
}

/// The binary a benchmark runs engine `name`'s child in: this one for
/// tphdb, `tphdb-peers` beside it for the others.
pub fn child_exe(name: &str) -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    if name == "tphdb" {
        return Ok(exe);
    }
    let peers = exe.with_file_name(format!("tphdb-peers{}", std::env::consts::EXE_SUFFIX));
    if peers.exists() {
        Ok(peers)
    } else {
        Err(format!(
            "engine {name} runs in {}, which is missing: build it beside tphdb with \
             `cargo build --release -p tphdb-cli --features peers`",
            peers.display()
        )
        .into())
    }
}

/// Opens engine `name` in the new directory `dir`.
pub fn open(name: &str, dir: &Path, cfg: &EngineConfig) -> Result<Box<dyn Kv>> {
    std::fs::create_dir_all(dir)?;
    if name == "tphdb" {
        return Ok(Box::new(tphdb_engine::Tphdb::open(dir, cfg)?));
    }
    check_available(name)?;
    match PEERS.get().and_then(|open| open(name, dir, cfg)) {
        Some(engine) => engine,
        None => Err(format!("engine {name} cannot be opened by this binary").into()),
    }
}
