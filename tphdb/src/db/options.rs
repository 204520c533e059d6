//! Options of a database, its writes and its reads.

use std::fmt;
use std::sync::Arc;

use crate::fs::{FileSystem, ReadMode};
use crate::phf::PhfKind;
use crate::piece::Compression;

/// When the WAL is synced to disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SyncPolicy {
    /// Every write group is synced before it is acknowledged.
    EveryWrite,
    /// A background thread syncs every this many milliseconds; a crash
    /// loses at most that window of acknowledged writes.
    IntervalMs(u64),
    /// Only writes with [`WriteOptions::sync`] (and memtable switches and
    /// `close`) sync; writes reach the OS page cache at once, so a process
    /// crash loses nothing, an OS crash loses the unsynced tail.
    Never,
}

/// The CPU priority of the compaction threads (flushes keep the caller's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum CompactionPriority {
    /// The caller's priority, as RocksDB's compaction threads have.
    #[default]
    Normal,
    /// The lowest (nice 19, as RocksDB's `LowerThreadPoolCPUPriority` with
    /// `CpuPriority::kLow`): reads and writes take the CPU first and
    /// compactions the rest, also while writers wait for them. Writers
    /// still slow down and stop when compactions fall behind.
    Low,
    /// The lowest for compactions that start once no write arrived for
    /// [`Options::compaction_idle_millis`] (nice 19 in the `SCHED_IDLE`
    /// class: only cores nothing else wants), the caller's for the others:
    /// a write load's compactions keep pace with it, and the reads that
    /// follow do not compete for the CPU with the backlog it left. The
    /// low-priority compactions run on threads of their own and never
    /// beside full-share ones (see `docs/design.md`).
    LowWithoutWrites,
}

/// Options of a database. Defaults follow the CompassDB paper, but for
/// memtable sizes (see `docs/design.md`). Each field says its default;
/// sizes are in bytes and say so in their names.
#[derive(Clone)]
pub struct Options {
    /// Create the database if the directory holds none (true).
    pub create_if_missing: bool,
    /// Fail if a database already exists (false).
    pub error_if_exists: bool,
    /// Size at which the active memtable is frozen and flushed (64 MiB; the
    /// paper: 128 MiB).
    pub write_buffer_bytes: usize,
    /// Frozen memtables that may wait for their flush while writes go on
    /// into the active one (1: two memtables in all, RocksDB's default
    /// `max_write_buffer_number`; the paper: 4). Writers stall when the
    /// active memtable is full and this many frozen ones still wait.
    pub max_immutable_memtables: usize,
    /// Memory that flushed memtables may keep while snapshots and
    /// iterators still pin them (64 MiB, a write buffer). Past it, at each
    /// flush, the oldest are moved to unnamed temporary files in the
    /// database directory and mapped back in place: reads through them
    /// still work, but their pages are page cache the kernel may drop and
    /// read back, and the files' space returns when the last pin goes.
    pub pinned_memtable_bytes: usize,
    /// One bound on the memory the database holds (none). When set it is
    /// shared out, replacing `write_buffer_bytes`, `pinned_memtable_bytes`,
    /// `compaction_memory_bytes` and `block_cache_bytes`: half for memtables
    /// (`2 + max_immutable_memtables` write buffers, each at least 64 KiB:
    /// the active one, the frozen ones, and one for memtables pinned past
    /// their flush), the rest for the running compactions and the block
    /// cache: a quarter for the cache with the `Pread` and `Direct` read
    /// modes, a sixteenth with `Mmap`, where it holds only the key-order
    /// indexes scans load. A level-0 compaction merges as many level-0 TPHs
    /// as its share of the compactions' memory holds, and rebuilds the
    /// global index of every level-1 TPH whatever it brings: at 64 MiB, a
    /// quarter for compactions let it bring one memtable at a time, and
    /// those rebuilds took most of the CPU of a server under a SET load.
    /// `tph_target_bytes` then keeps at most the defaults' ratio to a write
    /// buffer (4), so that level 1 stays in proportion to what each level-0
    /// compaction brings it. Outside it, and reported apart in
    /// [`crate::DBStats`]: the in-memory index (about 2 bytes a key),
    /// iterators' read-ahead (at most 256 KiB each) and the page cache.
    pub memory_budget_bytes: Option<usize>,
    /// One-level mode (§4.4.1, false): flushes merge straight into level 1;
    /// there is no level 0, and at most one level below level 1, added
    /// once a level-1 TPH nears `tph_target_bytes`. Writes are paced while
    /// flushes wait for push-downs out of level 1.
    pub one_level: bool,
    /// Single-tier mode (§4.4.2, false): at most two pieces per TPH, for
    /// overwrite-heavy workloads (less space and read amplification).
    pub single_tier: bool,
    /// Pieces per TPH before the oldest are folded (16, as the paper;
    /// 1..=1024).
    pub max_pieces: usize,
    /// TPHs of level `i + 1` per TPH of level `i` (8; at least 2). Fixed
    /// when the database is created.
    pub fanout: u32,
    /// Deepest level, level 0 not counted (6; 1..=16, and
    /// `fanout^max_levels <= 2^32`).
    pub max_levels: u32,
    /// A TPH above the bottom level is pushed down past at most this many
    /// bytes (256 MiB; siblings between half and all of it, so that they
    /// do not all come due at once); the bottom level gets a level below
    /// it once its TPHs average more than this.
    pub tph_target_bytes: u64,
    /// Level-0 TPHs that trigger a compaction into level 1 (4).
    pub l0_compaction_trigger: usize,
    /// Level-0 TPHs at which writes are paced (12), so that they slow
    /// smoothly rather than stop: while a level-0 compaction runs and its
    /// end is known, at the rate that leaves level 0 one TPH short of
    /// `l0_stop_trigger` when it ends; otherwise at a rate that falls while
    /// level 0 grows (by 0.8 per TPH, and by 0.6 more one TPH short of
    /// `l0_stop_trigger`) and rises while it shrinks (RocksDB's rule). See
    /// `delayed_write_rate_bytes`.
    pub l0_slowdown_trigger: usize,
    /// Level-0 TPHs at which writes wait for compaction (20).
    pub l0_stop_trigger: usize,
    /// The most slowed writes may run at, in bytes per second of write
    /// batches (64 MiB/s; at least 16 KiB/s). A slowdown starts at 0.8 of
    /// the rate writes ran at over the last second, at most this. RocksDB's
    /// `delayed_write_rate` is 16 MiB/s, the rate it drops to: a seventh of
    /// what a 1 KiB fill writes here, a cliff rather than a slowdown.
    pub delayed_write_rate_bytes: u64,
    /// When the WAL is synced (`Never`: only writes that ask, memtable
    /// switches and `close`).
    pub sync_policy: SyncPolicy,
    /// How piece files are read (`Mmap`).
    pub read_mode: ReadMode,
    /// Bytes of verified blocks kept in memory, shared by all reads, with
    /// the `Pread` and `Direct` read modes (with `Mmap` the page cache does
    /// this), and of the pieces' key-order indexes that scans load, in every
    /// mode (8 MiB). 0 turns the cache off: each iterator then loads the
    /// indexes it needs and drops them with it.
    pub block_cache_bytes: usize,
    /// Piece files kept open at once (1000, LevelDB's default; at least
    /// 1); past it the least recently read are closed and reopen on their
    /// next read. With the `Pread` and `Direct` read modes every read goes
    /// through the descriptor; mapped pieces (`Mmap`) use theirs for the
    /// sections opening reads and the key hashes and key-order chunks
    /// compactions and scans read, which would otherwise stay mapped.
    pub max_open_files: usize,
    /// Block compression of new pieces (`None`, as the paper measures).
    pub compression: Compression,
    /// Perfect hash of new pieces (CPHash). With PtrHash, pieces built with
    /// PtrHash are also read; otherwise they are refused, because the
    /// PtrHash loader does not validate what it loads.
    pub phf_kind: PhfKind,
    /// Perfect hash table size over key count of the pieces' local
    /// indexes (1.1, as the paper; 1.0 to 16.0, and 1.0 is a minimal
    /// perfect hash). A piece whose entries are of about one size (their
    /// lengths' standard deviation within a sixteenth of their mean) is
    /// built minimal whatever this says: its blocks then all hold the same
    /// number of entries and their offsets take a few bits a block in
    /// memory instead of about 11 (see `docs/design.md`, the read path).
    pub phf_table_factor: f64,
    /// Keys per perfect-hash segment (4096; 1 to 2^26): segments are built
    /// in parallel (paper §4.1.3), small ones stay in the CPU cache while
    /// built, and a segment is the grain at which a range of hashes (a
    /// compaction pass's partitions) finds its entries in a range of a
    /// piece's blocks. A piece of fewer than 8 times this many keys has 8
    /// segments instead (of at least 1,024 keys).
    pub phf_segment_keys: usize,
    /// Signature bits per global-index slot of TPHs above the deepest
    /// level (10; 1..=32). A key a TPH does not hold costs a read with
    /// probability `2^-bits` there, and a lookup consults every level-0 TPH
    /// and one TPH per level before the one holding its key: the paper's 8
    /// bits let several TPHs add up past 1% extra reads, 10 bits keep them
    /// under it for about 0.27 more index bytes per key of these levels.
    pub signature_bits: u32,
    /// Signature bits of the deepest level's TPHs (8, the paper's; 1..=32).
    /// A get reaches the deepest level only for a key no level above holds,
    /// so these bits cost extra reads only for absent keys (`2^-bits` each),
    /// never for present ones, while that level holds most keys and so most
    /// of the index (RocksDB's `optimize_filters_for_hits` drops the last
    /// level's filters for the same reason).
    pub bottom_signature_bits: u32,
    /// Bits of a deepest-level global index field, signature and piece
    /// number together, at most (0, the default: no bound). At 11, a TPH
    /// of 9 to 16 pieces, whose piece numbers take 4 bits, keeps 7-bit
    /// signatures (never fewer than 6, nor than `bottom_signature_bits`):
    /// an eighth less index at the level that holds most keys, for twice
    /// the absent keys let through there (`pieces / 2048`, 0.44% to 0.78%,
    /// against `pieces / 4096`; a field past the last piece rejects an
    /// absent key as a wrong signature does). Present keys read no more.
    /// Measured at 16M keys of 1 KiB: 2.36 instead of 2.51 index bytes a
    /// key after overwrites, and 0.0083 instead of 0.0067 block reads per
    /// absent get, which made a cold `readmissing` 1.4x slower.
    pub bottom_field_bits: u32,
    /// Memory the running compactions together hold (128 MiB), shared
    /// equally by the `background_threads`; half of a share is for input,
    /// half for the merges running on the threads (as many as there are
    /// threads, whichever jobs they belong to), each a quarter of a share
    /// for the pieces it folds and a quarter for the global index it
    /// rebuilds (a flush's merge takes as much beside its memtable; a GC
    /// or `compact_range` job, one merge with no input, folds within the
    /// input half). A level-0 compaction takes the oldest level-0 TPHs that
    /// fit; a larger input is merged in several passes over ranges of the
    /// target partitions, each reading the inputs again (a pass holds at
    /// least one partition's share: past the input half, as in a
    /// push-down of a TPH over `fanout` times it, the pass holds its
    /// entries' keys and reads their values again as it writes, a fold's
    /// memory and at most 4 MiB at a time); a fold of pieces whose live
    /// entries pass a merge's fold memory writes its piece in passes over
    /// runs of its slots, each reading its values again from the folded
    /// pieces (again at most 4 MiB a run). A
    /// TPH's index is rebuilt from its pieces' key hashes, streamed, its
    /// fuse built a batch of chunks at a time within the merge's index
    /// memory (32 bytes per key in a batch).
    pub compaction_memory_bytes: usize,
    /// Threads for compactions, a fixed pool (2; at least 1); flushes have
    /// a thread of their own besides.
    pub background_threads: usize,
    /// The compaction threads' CPU priority ([`CompactionPriority::Normal`]):
    /// lower, for a server whose requests and compactions share few cores.
    /// Linux only; elsewhere every thread keeps the caller's priority.
    pub compaction_priority: CompactionPriority,
    /// How long no write must have arrived before a compaction starts at
    /// low priority under [`CompactionPriority::LowWithoutWrites`] (100).
    pub compaction_idle_millis: u64,
    /// Threads iterators use to read blocks and seek pieces in parallel
    /// with the `Pread` and `Direct` read modes (16: reads block, so more
    /// threads than cores keep more reads in flight). Unused with `Mmap`;
    /// 0 or 1 reads in the caller's thread.
    pub scan_io_threads: usize,
    /// Block size target of pieces (4096 bytes, a page; at most 1 MiB).
    pub page_size_bytes: usize,
    /// Entries a block holds at most (8; at least 1). A get reads and
    /// checksums its entry's whole block: a page holds 32 entries of
    /// 100-byte values, and blocks of 8 of them make a get from the page
    /// cache about a quarter faster, for 0.15 more index bytes a key
    /// (block offsets) and 0.4% more space. Entries of an eighth of a page
    /// or more (512-byte values) keep page-sized blocks.
    pub max_block_slots: usize,
    /// Start a block that fits in a page on the next page boundary when it
    /// would otherwise straddle one (false). Aligned, every such block is
    /// one page to read; packed, most blocks span two pages, which an SSD
    /// reads in the same time as one (one `O_DIRECT` read either way), and
    /// pieces lose no space to padding: 28% less written and stored at
    /// 1 KiB values, 8% at 128 bytes (see `docs/design.md`).
    pub align_blocks: bool,
    /// Start a new MANIFEST past this size (64 MiB).
    pub manifest_max_bytes: u64,
    /// Pieces whose live fraction falls below this are folded at the next
    /// compaction of their TPH (0.3).
    pub min_live_ratio: f64,
    /// A key filter per memtable of this share of `write_buffer_bytes`
    /// (1/64, charged to the memtable): a get of a key the memtable does
    /// not hold skips its skiplist search. 0 turns it off (RocksDB's
    /// `memtable_prefix_bloom_size_ratio` with whole-key filtering).
    pub memtable_filter_ratio: f64,
    /// Memtable memory in 2 MiB blocks the kernel is asked to back with
    /// transparent huge pages (on; Linux, where
    /// `/sys/kernel/mm/transparent_hugepage/enabled` is `madvise` or
    /// `always`): a skiplist insert or search then misses the TLB far
    /// less, 20% more writes/s in a 16M x 128-byte fill. Off, blocks are
    /// small pages (RocksDB's `memtable_huge_page_size` 0), for a host
    /// where the kernel's compaction of memory to make huge pages stalls.
    pub memtable_huge_pages: bool,
    /// A TPH whose garbage passes this share of its bytes is folded whole
    /// once the background has nothing more urgent to do (0.5): dead
    /// entries count, and at the bottom also tombstones. Level 0 and the
    /// TPHs above the bottom whose live keys are more than this share
    /// tombstones are compacted early, so deletes reach what they delete.
    /// A fold writes at most `1 - gc_dead_ratio` bytes per byte it frees;
    /// 1.0 turns this collection off.
    pub gc_dead_ratio: f64,
    /// The share of the database's stored bytes that may be garbage
    /// (0.08): past it, garbage collection folds the TPHs with the largest
    /// garbage share whatever their own share, until the database is back
    /// under it. Versions that the live entries of a TPH above the bottom
    /// hide in the levels below count too, and a TPH with a larger share
    /// of those than any TPH's garbage share is pushed down instead, so
    /// that folds below can free them. Overwrites spread garbage evenly
    /// over every TPH, so without this the database could hold nearly
    /// `1 / (1 - gc_dead_ratio)` times its live data. Lower keeps less
    /// space and writes more: a 4M x
    /// 1 KiB overwrite ended at 1.27x RocksDB's space with 1.0, 1.16x with
    /// 0.2 and 0.99x with 0.1, writing 2.97, 3.00 and 3.09 bytes per byte;
    /// at 16M, 1.062x with 0.1 and 1.039x with 0.08, writing 3.42 and 3.45.
    /// 1.0 leaves collection to `gc_dead_ratio`.
    pub max_garbage_ratio: f64,
    /// File system to use (none: the real one, [`crate::fs::PosixFs`]).
    pub file_system: Option<Arc<dyn FileSystem>>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create_if_missing: true,
            error_if_exists: false,
            write_buffer_bytes: 64 << 20,
            max_immutable_memtables: 1,
            pinned_memtable_bytes: 64 << 20,
            memory_budget_bytes: None,
            one_level: false,
            single_tier: false,
            max_pieces: 16,
            fanout: 8,
            max_levels: 6,
            tph_target_bytes: 256 << 20,
            l0_compaction_trigger: 4,
            l0_slowdown_trigger: 12,
            l0_stop_trigger: 20,
            delayed_write_rate_bytes: 64 << 20,
            sync_policy: SyncPolicy::Never,
            read_mode: ReadMode::Mmap,
            block_cache_bytes: 8 << 20,
            max_open_files: 1000,
            compression: Compression::None,
            phf_kind: PhfKind::CpHash,
            phf_table_factor: 1.1,
            phf_segment_keys: 1 << 12,
            signature_bits: 10,
            bottom_signature_bits: 8,
            bottom_field_bits: 0,
            compaction_memory_bytes: 128 << 20,
            background_threads: 2,
            compaction_priority: CompactionPriority::Normal,
            compaction_idle_millis: 100,
            scan_io_threads: 16,
            page_size_bytes: 4096,
            max_block_slots: crate::piece::DEFAULT_MAX_BLOCK_SLOTS,
            align_blocks: false,
            manifest_max_bytes: 64 << 20,
            min_live_ratio: 0.3,
            gc_dead_ratio: 0.5,
            max_garbage_ratio: 0.08,
            memtable_filter_ratio: 1.0 / 64.0,
            memtable_huge_pages: true,
            file_system: None,
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("create_if_missing", &self.create_if_missing)
            .field("error_if_exists", &self.error_if_exists)
            .field("write_buffer_bytes", &self.write_buffer_bytes)
            .field("max_immutable_memtables", &self.max_immutable_memtables)
            .field("pinned_memtable_bytes", &self.pinned_memtable_bytes)
            .field("memory_budget_bytes", &self.memory_budget_bytes)
            .field("one_level", &self.one_level)
            .field("single_tier", &self.single_tier)
            .field("max_pieces", &self.max_pieces)
            .field("fanout", &self.fanout)
            .field("max_levels", &self.max_levels)
            .field("tph_target_bytes", &self.tph_target_bytes)
            .field("l0_compaction_trigger", &self.l0_compaction_trigger)
            .field("l0_slowdown_trigger", &self.l0_slowdown_trigger)
            .field("l0_stop_trigger", &self.l0_stop_trigger)
            .field("delayed_write_rate_bytes", &self.delayed_write_rate_bytes)
            .field("sync_policy", &self.sync_policy)
            .field("read_mode", &self.read_mode)
            .field("block_cache_bytes", &self.block_cache_bytes)
            .field("max_open_files", &self.max_open_files)
            .field("compression", &self.compression)
            .field("phf_kind", &self.phf_kind)
            .field("phf_table_factor", &self.phf_table_factor)
            .field("phf_segment_keys", &self.phf_segment_keys)
            .field("signature_bits", &self.signature_bits)
            .field("bottom_signature_bits", &self.bottom_signature_bits)
            .field("bottom_field_bits", &self.bottom_field_bits)
            .field("compaction_memory_bytes", &self.compaction_memory_bytes)
            .field("background_threads", &self.background_threads)
            .field("compaction_priority", &self.compaction_priority)
            .field("compaction_idle_millis", &self.compaction_idle_millis)
            .field("scan_io_threads", &self.scan_io_threads)
            .field("page_size_bytes", &self.page_size_bytes)
            .field("max_block_slots", &self.max_block_slots)
            .field("align_blocks", &self.align_blocks)
            .field("manifest_max_bytes", &self.manifest_max_bytes)
            .field("min_live_ratio", &self.min_live_ratio)
            .field("gc_dead_ratio", &self.gc_dead_ratio)
            .field("max_garbage_ratio", &self.max_garbage_ratio)
            .field("memtable_filter_ratio", &self.memtable_filter_ratio)
            .field("memtable_huge_pages", &self.memtable_huge_pages)
            .field("file_system", &self.file_system)
            .finish()
    }
}

/// Under a memory budget, `tph_target_bytes` is at most this many write
/// buffers, the ratio of the defaults (256 MiB for 64 MiB). Every level-0
/// compaction rebuilds the global indexes of level 1 over all its keys, so
/// level 1's size over a compaction's input sets what each written byte
/// costs there: at 64 MiB, with 8 MiB write buffers, level 1 could hold 2
/// GiB (256 write buffers) and a server load of 0.66 GB stayed in it whole.
const TPH_TARGET_PER_WRITE_BUFFER: u64 = 4;

impl Options {
    /// Shares `memory_budget_bytes`, if set, out to the options it
    /// replaces; the database runs with the result.
    pub(crate) fn apply_memory_budget(&mut self) {
        if let Some(budget) = self.memory_budget_bytes {
            let memtables = budget / 2;
            self.write_buffer_bytes =
                (memtables / (2 + self.max_immutable_memtables)).max(64 << 10);
            self.pinned_memtable_bytes = self.write_buffer_bytes;
            // Through mappings the page cache holds the blocks, and the
            // cache only the key-order indexes scans load.
            self.block_cache_bytes = match self.read_mode {
                ReadMode::Mmap => budget / 16,
                ReadMode::Pread | ReadMode::Direct => budget / 4,
            };
            self.compaction_memory_bytes = (budget - memtables - self.block_cache_bytes).max(1);
            self.tph_target_bytes = self
                .tph_target_bytes
                .min(TPH_TARGET_PER_WRITE_BUFFER * self.write_buffer_bytes as u64);
        }
    }

    /// The memory one compaction may hold: an equal share of
    /// `compaction_memory_bytes` per background thread, as that many run at
    /// once. Half is for its input, half for the merges it runs.
    pub(crate) fn job_memory_bytes(&self) -> u64 {
        (self.compaction_memory_bytes / self.background_threads.max(1)).max(1) as u64
    }

    /// What one merge may hold for the pieces it folds, and as much again
    /// for the global index it builds: a quarter of a job's share each. A
    /// job merges its target partitions in parallel on the background
    /// threads, so the merges running at once number at most the threads,
    /// and with the jobs' inputs (half a share each) they stay within
    /// `compaction_memory_bytes`.
    pub(crate) fn merge_memory_bytes(&self) -> u64 {
        (self.job_memory_bytes() / 4).max(1)
    }

    /// The perfect-hash construction parameters of the local indexes.
    pub(crate) fn phf_config(&self) -> crate::phf::PhfConfig {
        crate::phf::PhfConfig {
            table_factor: self.phf_table_factor,
            segment_keys: self.phf_segment_keys,
            ..crate::phf::PhfConfig::default()
        }
    }

    /// A new memtable for the writes logged in WAL `wal_number`.
    pub(crate) fn new_memtable(&self, wal_number: u64) -> crate::memtable::MemTable {
        crate::memtable::MemTable::new(
            wal_number,
            self.memtable_filter_bytes(),
            self.memtable_huge_pages,
        )
    }

    /// Bytes of each memtable's key filter.
    pub(crate) fn memtable_filter_bytes(&self) -> usize {
        (self.write_buffer_bytes as f64 * self.memtable_filter_ratio) as usize
    }

    /// `max_pieces` after applying `single_tier`.
    pub(crate) fn effective_max_pieces(&self) -> usize {
        if self.single_tier {
            self.max_pieces.clamp(1, 2)
        } else {
            self.max_pieces.max(1)
        }
    }

    pub(crate) fn validate(&self) -> crate::Result<()> {
        let bad = |m: &str| Err(crate::Error::InvalidArgument(m.to_string()));
        if self.fanout < 2 {
            return bad("fanout must be at least 2");
        }
        if !(1..=16).contains(&self.max_levels) {
            return bad("max_levels must be in 1..=16");
        }
        if !crate::version::partitions_fit(self.fanout.into(), self.max_levels) {
            return bad("fanout^max_levels must be at most 2^32 (hash ranges are 32-bit)");
        }
        if !(1..=32).contains(&self.signature_bits) {
            return bad("signature_bits must be in 1..=32");
        }
        if !(1..=32).contains(&self.bottom_signature_bits) {
            return bad("bottom_signature_bits must be in 1..=32");
        }
        if self.bottom_field_bits > 56 {
            return bad("bottom_field_bits must be at most 56 (0: no bound)");
        }
        if self.max_pieces == 0 || self.max_pieces > 1024 {
            return bad("max_pieces must be in 1..=1024");
        }
        self.phf_config().validate()?;
        if self.max_open_files == 0 {
            return bad("max_open_files must be at least 1");
        }
        if !(0.0..=0.25).contains(&self.memtable_filter_ratio) {
            return bad("memtable_filter_ratio must be in [0, 0.25]");
        }
        if !(self.gc_dead_ratio > 0.0 && self.gc_dead_ratio <= 1.0) {
            return bad("gc_dead_ratio must be in (0, 1]");
        }
        if !(self.max_garbage_ratio > 0.0 && self.max_garbage_ratio <= 1.0) {
            return bad("max_garbage_ratio must be in (0, 1]");
        }
        if self.background_threads == 0 {
            return bad("background_threads must be at least 1");
        }
        if self.page_size_bytes == 0 || self.page_size_bytes > 1 << 20 {
            return bad("page_size_bytes must be in 1..=1 MiB");
        }
        if self.max_block_slots == 0 {
            return bad("max_block_slots must be at least 1");
        }
        if self.l0_compaction_trigger == 0 || self.l0_stop_trigger < self.l0_compaction_trigger {
            return bad("need 1 <= l0_compaction_trigger <= l0_stop_trigger");
        }
        Ok(())
    }
}

/// Options of a write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Sync the WAL before acknowledging (survives an OS crash).
    pub sync: bool,
    /// Skip the WAL: the write is lost on a crash until its memtable is
    /// flushed.
    pub disable_wal: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_budget_is_shared_out_to_memtables_compactions_and_the_cache() {
        let mut o = Options {
            memory_budget_bytes: Some(96 << 20),
            max_immutable_memtables: 2,
            ..Options::default()
        };
        o.apply_memory_budget();
        assert_eq!(o.write_buffer_bytes, 12 << 20);
        assert_eq!(o.pinned_memtable_bytes, 12 << 20);
        assert_eq!(
            o.block_cache_bytes,
            6 << 20,
            "mapped: key-order indexes only"
        );
        assert_eq!(o.compaction_memory_bytes, 42 << 20);
        assert_eq!(o.tph_target_bytes, 48 << 20, "four write buffers");
        let total = o.write_buffer_bytes * 3
            + o.pinned_memtable_bytes
            + o.compaction_memory_bytes
            + o.block_cache_bytes;
        assert_eq!(total, 96 << 20);
        // Read with pread, the cache holds blocks too.
        let mut o = Options {
            memory_budget_bytes: Some(96 << 20),
            max_immutable_memtables: 2,
            read_mode: ReadMode::Pread,
            ..Options::default()
        };
        o.apply_memory_budget();
        assert_eq!(o.block_cache_bytes, 24 << 20);
        assert_eq!(o.compaction_memory_bytes, 24 << 20);
        // Without a budget the options stand as given.
        let mut o = Options::default();
        o.apply_memory_budget();
        assert_eq!(o.write_buffer_bytes, Options::default().write_buffer_bytes);
        assert_eq!(o.block_cache_bytes, Options::default().block_cache_bytes);
        assert_eq!(o.tph_target_bytes, Options::default().tph_target_bytes);
    }
}
