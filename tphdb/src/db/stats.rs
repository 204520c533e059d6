//! Statistics, reported the way the paper reports them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::tph::MergeStats;

/// Counters updated as the database works.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) writes: AtomicU64,
    /// What running jobs hold now (see [`DBStats::job_memory_bytes`]).
    pub(crate) job_memory: AtomicU64,
    pub(crate) user_bytes_written: AtomicU64,
    pub(crate) wal_bytes: AtomicU64,
    pub(crate) wal_syncs: AtomicU64,
    pub(crate) gets: AtomicU64,
    pub(crate) get_hits: AtomicU64,
    pub(crate) get_block_reads: AtomicU64,
    pub(crate) get_bytes_read: AtomicU64,
    pub(crate) get_bytes_returned: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) flush_micros: AtomicU64,
    pub(crate) slowest_flush_micros: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) compaction_micros: AtomicU64,
    /// Bytes written and read, by cause (see [`WriteBreakdown`]).
    pub(crate) wal_file_bytes: AtomicU64,
    pub(crate) flush_written: AtomicU64,
    pub(crate) l0_merge_written: AtomicU64,
    pub(crate) push_down_written: AtomicU64,
    pub(crate) gc_fold_written: AtomicU64,
    pub(crate) index_written: AtomicU64,
    pub(crate) flush_read: AtomicU64,
    pub(crate) l0_merge_read: AtomicU64,
    pub(crate) push_down_read: AtomicU64,
    pub(crate) gc_fold_read: AtomicU64,
    pub(crate) key_hashes_read: AtomicU64,
    pub(crate) values_again_read: AtomicU64,
    pub(crate) pieces_folded: AtomicU64,
    pub(crate) pieces_dropped: AtomicU64,
    pub(crate) tombstones_dropped: AtomicU64,
    pub(crate) push_downs_overlapped: AtomicU64,
    pub(crate) push_down_waits: AtomicU64,
    pub(crate) shares_written: AtomicU64,
    pub(crate) peak_running_compactions: AtomicU64,
    pub(crate) low_priority_compactions: AtomicU64,
    pub(crate) stall_micros: AtomicU64,
    pub(crate) memtable_stall_micros: AtomicU64,
    pub(crate) level0_stall_micros: AtomicU64,
    /// Paced time by [`Pacer`], in its order.
    pub(crate) paced_micros: [AtomicU64; 4],
    /// Writers in a stall or a delay now: writes are not idle while they
    /// wait, whatever the count of writes does.
    pub(crate) writers_stalled: AtomicU64,
    pub(crate) open_micros: AtomicU64,
    pub(crate) wal_replayed_batches: AtomicU64,
    pub(crate) wal_dropped_bytes: AtomicU64,
    pub(crate) wal_files_skipped: AtomicU64,
    pub(crate) files_moved_to_lost: AtomicU64,
    pub(crate) memtables_spilled: AtomicU64,
    pub(crate) memtable_spilled_bytes: AtomicU64,
    pub(crate) memtable_spill_failures: AtomicU64,
}

/// What a job's new data counts as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JobCause {
    Flush,
    L0Merge,
    PushDown,
    /// A fold of every piece of a TPH into one: garbage collection, or the
    /// last step of a manual compaction.
    Gc,
}

/// Why a writer waited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stall {
    /// Every memtable was full: writes stopped for a flush.
    Memtables,
    /// Level 0 reached `l0_stop_trigger`: writes stopped for its merge.
    Level0,
    /// Writes were paced (`db/write_delay.rs`).
    Paced(Pacer),
}

/// What paced a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pacer {
    /// Level 0 past `l0_slowdown_trigger`, by its depth's steps.
    Level0Steps = 0,
    /// Level 0 past `l0_slowdown_trigger`, by the room it has before the
    /// running level-0 compaction ends.
    Level0Compaction = 1,
    /// The active memtable, for the flush that frees a frozen slot.
    Memtable = 2,
    /// One-level mode's backlog of frozen memtables and due TPHs.
    OneLevel = 3,
}

impl Stats {
    /// Counts a writer's wait for `cause` in the total and in its cause's.
    pub(crate) fn add_stall(&self, cause: Stall, waited: std::time::Duration) {
        let micros = waited.as_micros() as u64;
        self.stall_micros.fetch_add(micros, Relaxed);
        let by_cause = match cause {
            Stall::Memtables => &self.memtable_stall_micros,
            Stall::Level0 => &self.level0_stall_micros,
            Stall::Paced(p) => &self.paced_micros[p as usize],
        };
        by_cause.fetch_add(micros, Relaxed);
    }

    pub(crate) fn record_job(&self, cause: JobCause, m: &MergeStats) {
        let (written, read) = match cause {
            JobCause::Flush => {
                self.flushes.fetch_add(1, Relaxed);
                (&self.flush_written, &self.flush_read)
            }
            JobCause::L0Merge => (&self.l0_merge_written, &self.l0_merge_read),
            JobCause::PushDown => (&self.push_down_written, &self.push_down_read),
            JobCause::Gc => (&self.gc_fold_written, &self.gc_fold_read),
        };
        if cause != JobCause::Flush {
            self.compactions.fetch_add(1, Relaxed);
        }
        written.fetch_add(m.delta_bytes_written, Relaxed);
        read.fetch_add(m.input_bytes_read, Relaxed);
        self.gc_fold_written
            .fetch_add(m.fold_bytes_written, Relaxed);
        self.gc_fold_read.fetch_add(m.fold_bytes_read, Relaxed);
        self.index_written.fetch_add(m.index_bytes_written, Relaxed);
        self.key_hashes_read.fetch_add(m.hash_bytes_read, Relaxed);
        self.values_again_read
            .fetch_add(m.values_again_read, Relaxed);
        self.pieces_folded.fetch_add(m.pieces_folded, Relaxed);
        self.pieces_dropped.fetch_add(m.pieces_dropped, Relaxed);
        self.tombstones_dropped
            .fetch_add(m.tombstones_dropped, Relaxed);
    }
}

pub(crate) use crate::util::held::HeldBytes;

impl<'a> HeldBytes<'a> {
    /// Bytes a job holds, counted in [`Stats::job_memory`] for as long as
    /// the guard lives.
    pub(crate) fn new(stats: &'a Stats, bytes: u64) -> Self {
        HeldBytes::on(&stats.job_memory, bytes)
    }
}

/// The structure of one level.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LevelStats {
    /// Level number (0 is the flush level).
    pub level: u32,
    /// TPHs in the level.
    pub tphs: u64,
    /// Hash ranges of the level that hold no TPH (levels >= 1).
    pub empty_partitions: u64,
    /// Piece files of the level's TPHs.
    pub pieces: u64,
    /// Live keys (tombstones included).
    pub live_entries: u64,
    /// Entries stored, live or replaced.
    pub stored_entries: u64,
    /// Bytes of the level's files.
    pub file_bytes: u64,
    /// Estimated bytes of live entries.
    pub live_bytes: u64,
    /// Live keys whose newest version is a tombstone, estimated.
    pub live_tombstones: u64,
    /// Estimated bytes a fold of every piece would free: replaced entries,
    /// and at the bottom level also live tombstones (the GC job folds a
    /// TPH once this passes `Options::gc_dead_ratio` of its data).
    pub garbage_bytes: u64,
    /// Estimated bytes of the versions in lower levels that the level's
    /// live entries hide (0 at the bottom): garbage that a push-down, and
    /// then a fold below, frees. With `garbage_bytes` it counts towards
    /// `Options::max_garbage_ratio`.
    pub shadowed_bytes: u64,
    /// In-memory index bytes of the level.
    pub index_bytes: u64,
}

/// Every byte the database wrote, by cause. Together they are every byte
/// written through its file system (`DBStats::disk_bytes_written`), but
/// for the output of jobs that failed and were retried.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WriteBreakdown {
    /// The WAL, framing and padding included.
    pub wal: u64,
    /// New data that flushes wrote: the memtables' entries and the pieces'
    /// own indexes.
    pub flush: u64,
    /// New data that level-0 merges wrote into level 1.
    pub l0_merge: u64,
    /// New data that push-downs wrote into the level below.
    pub push_down: u64,
    /// Live entries rewritten because the pieces that held them were
    /// folded (`max_pieces`, `min_live_ratio`, GC jobs, manual compaction).
    pub gc_fold: u64,
    /// The TPHs' global indexes, rewritten into every new head piece.
    pub index: u64,
    /// The MANIFEST and CURRENT.
    pub manifest: u64,
}

impl WriteBreakdown {
    /// What flushes and compactions wrote: the paper's (and RocksDB's)
    /// write amplification counts these, not the WAL.
    pub fn flush_and_compaction(&self) -> u64 {
        self.flush + self.l0_merge + self.push_down + self.gc_fold + self.index
    }

    /// Every byte.
    pub fn total(&self) -> u64 {
        self.wal + self.flush_and_compaction() + self.manifest
    }
}

/// What flushes and compactions read, by cause.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactionReads {
    /// Level-0 TPHs read by level-0 merges.
    pub l0_merge: u64,
    /// TPHs read to push them down.
    pub push_down: u64,
    /// Pieces read to fold them, with the folded values read again.
    pub gc_fold: u64,
    /// Key-hash sections read to rebuild global indexes.
    pub key_hashes: u64,
    /// Values of a merge's inputs read a second time: a pass that holds
    /// its entries by shape (their keys, not their values) reads each
    /// value again from the input as it writes the new piece.
    pub values_again: u64,
}

impl CompactionReads {
    /// Every byte.
    pub fn total(&self) -> u64 {
        self.l0_merge + self.push_down + self.gc_fold + self.key_hashes + self.values_again
    }
}

/// A snapshot of the database's statistics.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct DBStats {
    /// Keys written (puts and deletes).
    pub writes: u64,
    /// Bytes of keys and values written by the user.
    pub user_bytes_written: u64,
    /// Bytes written through the file system (WAL, pieces, MANIFEST).
    pub disk_bytes_written: u64,
    /// Bytes read from disk (lookups, scans, compactions, recovery).
    pub disk_bytes_read: u64,
    /// What flushes and compactions wrote over what the user wrote: the
    /// paper's write amplification, and RocksDB's (its compaction
    /// statistics), WAL not counted.
    pub write_amplification: f64,
    /// WAL bytes over what the user wrote.
    pub wal_amplification: f64,
    /// Bytes written, by cause.
    pub writes_by_cause: WriteBreakdown,
    /// Bytes flushes and compactions read, by cause.
    pub compaction_reads: CompactionReads,
    /// Bytes lookups read from disk over bytes they returned.
    pub read_amplification: f64,
    /// Point lookups.
    pub gets: u64,
    /// Lookups that found a value.
    pub get_hits: u64,
    /// Block reads made by lookups.
    pub get_block_reads: u64,
    /// `get_block_reads / gets`.
    pub reads_per_get: f64,
    /// Block reads (by lookups and scans) the block cache answered.
    pub block_cache_hits: u64,
    /// Block reads that went to the file.
    pub block_cache_misses: u64,
    /// Bytes the block cache holds (0 without one).
    pub block_cache_bytes: u64,
    /// The most bytes the block cache may hold (`block_cache_bytes` or its
    /// share of `memory_budget_bytes`; 0 without a cache).
    pub block_cache_capacity: u64,
    /// Bytes of the write batches logged to the WAL (its file bytes, with
    /// the framing, are `writes_by_cause.wal`).
    pub wal_bytes: u64,
    /// WAL syncs.
    pub wal_syncs: u64,
    /// In-memory index of every TPH: global plus local parts.
    pub index_memory_bytes: u64,
    /// The global (TPH) part of `index_memory_bytes`.
    pub index_global_bytes: u64,
    /// The local (piece) part of `index_memory_bytes`.
    pub index_local_bytes: u64,
    /// Global index bytes of every TPH in memory: the current version's
    /// (`index_global_bytes`), those running compactions have built and
    /// not yet installed, and replaced ones that compactions (the version
    /// they started from), snapshots and iterators still hold.
    pub index_global_held_bytes: u64,
    /// `index_memory_bytes` per stored entry.
    pub index_bytes_per_key: f64,
    /// Bytes held by memtables.
    pub memtable_bytes: u64,
    /// Frozen memtables waiting to be flushed.
    pub immutable_memtables: u64,
    /// Bytes running flushes and compactions hold now in their lists of
    /// entries, the keys and values they copied out of pieces (a flush's
    /// keys and values are its memtable's, in `memtable_bytes`), and what
    /// writing each new piece takes beside them (hashes, slot tables, the
    /// write buffer), the global index each builds (a batch of its fuse's
    /// chunks, 32 bytes a key, and the cells built) and the index
    /// sections it carries while it writes the TPH's head piece. Not
    /// included: folds' entries, bounded by `compaction_memory_bytes` with
    /// the rest.
    pub job_memory_bytes: u64,
    /// Bytes of flushed memtables that snapshots and iterators still hold
    /// in memory: each pins the memtables of its moment until it is
    /// dropped. At most `pinned_memtable_bytes` of the options after each
    /// flush; the rest are moved to files.
    pub pinned_memtable_bytes: u64,
    /// Bytes of pinned memtables moved to files, now mapped from them.
    pub pinned_memtable_spilled_bytes: u64,
    /// Pinned memtables moved to files since open, and the bytes written
    /// for them (not counted in `write_breakdown`: no data of the database).
    pub memtables_spilled: u64,
    /// See `memtables_spilled`.
    pub memtable_spilled_bytes: u64,
    /// Moves of pinned memtables to files that failed (a full disk); they
    /// stayed in memory.
    pub memtable_spill_failures: u64,
    /// Per level, from level 0.
    pub levels: Vec<LevelStats>,
    /// Memtable flushes.
    pub flushes: u64,
    /// Time spent flushing.
    pub flush_micros: u64,
    /// The longest a flush took: a frozen memtable's lifetime, for which
    /// writes wait once the active memtable fills first.
    pub slowest_flush_micros: u64,
    /// Compactions (including level-0 merges and push-downs).
    pub compactions: u64,
    /// Time spent compacting.
    pub compaction_micros: u64,
    /// Pieces folded into new ones by GC.
    pub pieces_folded: u64,
    /// Pieces deleted because nothing in them was live.
    pub pieces_dropped: u64,
    /// Tombstones removed at the bottom level.
    pub tombstones_dropped: u64,
    /// Push-downs into which other jobs merged while they ran: their TPH
    /// stayed with what was merged in (see `docs/design.md`, Levels).
    pub push_downs_overlapped: u64,
    /// Push-downs that, their children written, waited for a merge into
    /// their TPH to end.
    pub push_down_waits: u64,
    /// Children that a push-down wrote from its share's key hashes,
    /// without holding the share's keys: empty children at the bottom,
    /// when the share passed the job's input memory (see
    /// `docs/design.md`, Levels).
    pub shares_written: u64,
    /// The most compactions (level-0 merges, push-downs, folds) that held
    /// a background thread at once: at most `background_threads`.
    pub peak_running_compactions: u64,
    /// Compactions (and ends of parked push-downs) that started at low
    /// priority once writes stopped
    /// (`CompactionPriority::LowWithoutWrites`).
    pub low_priority_compactions: u64,
    /// Flushes and compactions running now.
    pub running_jobs: u64,
    /// Whether a flush or compaction is due that has not started
    /// (RocksDB's `rocksdb.compaction-pending`). With `running_jobs` at 0
    /// too, the background work is done until the next writes.
    pub work_pending: bool,
    /// Time writers waited for flushes and compactions: stopped on full
    /// memtables, stopped at `l0_stop_trigger`, or paced (the rest).
    pub stall_micros: u64,
    /// Of `stall_micros`, writes stopped because every memtable was full.
    pub memtable_stall_micros: u64,
    /// Of `stall_micros`, writes stopped at `l0_stop_trigger`.
    pub level0_stall_micros: u64,
    /// Of `stall_micros`, writes paced while level 0 was past
    /// `l0_slowdown_trigger`, at the rate its depth's steps left
    /// (RocksDB's level-0 slowdown).
    pub paced_level0_micros: u64,
    /// Of `stall_micros`, writes paced to the room level 0 had before the
    /// running level-0 compaction's end.
    pub paced_level0_compaction_micros: u64,
    /// Of `stall_micros`, writes paced while every frozen memtable waited
    /// for its flush (RocksDB's memtable slowdown).
    pub paced_memtable_micros: u64,
    /// Of `stall_micros`, writes paced for one-level mode's backlog.
    pub paced_one_level_micros: u64,
    /// Time the last open took.
    pub open_micros: u64,
    /// WAL batches replayed at open.
    pub wal_replayed_batches: u64,
    /// Bytes of torn WAL tail dropped at open.
    pub wal_dropped_bytes: u64,
    /// WAL files after a torn one, not replayed at open (their writes are
    /// newer than a lost one).
    pub wal_files_skipped: u64,
    /// Complete pieces no version names that open moved to `lost/` rather
    /// than delete, not certain they were garbage (see `docs/format.md`).
    pub files_moved_to_lost: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tph::DeltaEntry;

    #[test]
    fn held_bytes_count_while_they_live() {
        let stats = Stats::default();
        let a = HeldBytes::new(&stats, 100);
        {
            let _b = HeldBytes::new(&stats, 50);
            assert_eq!(stats.job_memory.load(Relaxed), 150);
        }
        assert_eq!(stats.job_memory.load(Relaxed), 100);
        drop(a);
        assert_eq!(stats.job_memory.load(Relaxed), 0);
    }

    #[test]
    fn a_list_holds_its_entries_and_what_it_copied() {
        let mut list = Vec::with_capacity(10);
        list.push(DeltaEntry::copy_of(b"key", Some(b"value"), 1));
        list.push(DeltaEntry::copy_of(b"gone", None, 2));
        let entries = 10 * std::mem::size_of::<DeltaEntry>() as u64;
        assert_eq!(DeltaEntry::list_memory(&list, false), entries);
        assert_eq!(DeltaEntry::list_memory(&list, true), entries + 8 + 4);
    }
}
