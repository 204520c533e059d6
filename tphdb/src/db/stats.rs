//! Statistics, reported the way the paper reports them.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::Inner;
use crate::tph::MergeStats;

/// Counters updated as the database works.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    pub(crate) writes: AtomicU64,
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
    pub(crate) flush_bytes_written: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) compaction_micros: AtomicU64,
    pub(crate) compaction_bytes_read: AtomicU64,
    pub(crate) compaction_bytes_written: AtomicU64,
    pub(crate) pieces_folded: AtomicU64,
    pub(crate) pieces_dropped: AtomicU64,
    pub(crate) tombstones_dropped: AtomicU64,
    pub(crate) stall_micros: AtomicU64,
    pub(crate) open_micros: AtomicU64,
    pub(crate) wal_replayed_batches: AtomicU64,
    pub(crate) wal_dropped_bytes: AtomicU64,
    pub(crate) wal_files_skipped: AtomicU64,
    pub(crate) files_moved_to_lost: AtomicU64,
}

impl Stats {
    pub(crate) fn record_job(&self, is_flush: bool, m: &MergeStats) {
        if is_flush {
            self.flushes.fetch_add(1, Relaxed);
            self.flush_bytes_written.fetch_add(m.bytes_written, Relaxed);
        } else {
            self.compactions.fetch_add(1, Relaxed);
            self.compaction_bytes_read.fetch_add(m.bytes_read, Relaxed);
            self.compaction_bytes_written
                .fetch_add(m.bytes_written, Relaxed);
        }
        self.pieces_folded.fetch_add(m.pieces_folded, Relaxed);
        self.pieces_dropped.fetch_add(m.pieces_dropped, Relaxed);
        self.tombstones_dropped
            .fetch_add(m.tombstones_dropped, Relaxed);
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
    /// In-memory index bytes of the level.
    pub index_bytes: u64,
}

/// A snapshot of the database's statistics.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct DBStats {
    /// Keys written (puts and deletes).
    pub writes: u64,
    /// Bytes of keys and values written by the user.
    pub user_bytes_written: u64,
    /// Bytes written to disk (WAL, pieces, MANIFEST).
    pub disk_bytes_written: u64,
    /// Bytes read from disk (lookups, scans, compactions, recovery).
    pub disk_bytes_read: u64,
    /// `disk_bytes_written / user_bytes_written`.
    pub write_amplification: f64,
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
    /// WAL bytes written.
    pub wal_bytes: u64,
    /// WAL syncs.
    pub wal_syncs: u64,
    /// In-memory index of every TPH: global plus local parts.
    pub index_memory_bytes: u64,
    /// The global (TPH) part of `index_memory_bytes`.
    pub index_global_bytes: u64,
    /// The local (piece) part of `index_memory_bytes`.
    pub index_local_bytes: u64,
    /// `index_memory_bytes` per stored entry.
    pub index_bytes_per_key: f64,
    /// Bytes held by memtables.
    pub memtable_bytes: u64,
    /// Frozen memtables waiting to be flushed.
    pub immutable_memtables: u64,
    /// Bytes of flushed memtables that snapshots and iterators still hold:
    /// each pins the memtables of its moment until it is dropped.
    pub pinned_memtable_bytes: u64,
    /// Per level, from level 0.
    pub levels: Vec<LevelStats>,
    /// Memtable flushes.
    pub flushes: u64,
    /// Time spent flushing.
    pub flush_micros: u64,
    /// Compactions (including level-0 merges and push-downs).
    pub compactions: u64,
    /// Time spent compacting.
    pub compaction_micros: u64,
    /// Bytes compactions read.
    pub compaction_bytes_read: u64,
    /// Bytes compactions wrote.
    pub compaction_bytes_written: u64,
    /// Pieces folded into new ones by GC.
    pub pieces_folded: u64,
    /// Pieces deleted because nothing in them was live.
    pub pieces_dropped: u64,
    /// Tombstones removed at the bottom level.
    pub tombstones_dropped: u64,
    /// Time writers waited for flushes and compactions.
    pub stall_micros: u64,
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

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl Inner {
    pub(crate) fn collect_stats(&self) -> DBStats {
        let s = &self.stats;
        let (sv, _) = self.read_view();
        let v = &sv.version;
        let mut levels = Vec::new();
        let (mut global, mut local, mut stored) = (0u64, 0u64, 0u64);
        let level_count = v.levels.len() + 1;
        for level in 0..level_count {
            let tphs: Vec<_> = if level == 0 {
                v.l0.iter().collect()
            } else {
                v.levels[level - 1].values().collect()
            };
            let mut ls = LevelStats {
                level: level as u32,
                tphs: tphs.len() as u64,
                empty_partitions: if level == 0 {
                    0
                } else {
                    v.partitions(level as u32).saturating_sub(tphs.len() as u64)
                },
                ..LevelStats::default()
            };
            for t in tphs {
                let (g, l) = t.index_memory_parts();
                global += g as u64;
                local += l as u64;
                ls.index_bytes += (g + l) as u64;
                ls.pieces += t.piece_count() as u64;
                ls.live_entries += t.live_count();
                ls.stored_entries += t.stored_entries();
                ls.file_bytes += t.file_bytes();
                ls.live_bytes += t.live_data_bytes();
            }
            stored += ls.stored_entries;
            levels.push(ls);
        }
        let user = s.user_bytes_written.load(Relaxed);
        let written = self.io.bytes_written.load(Relaxed);
        let gets = s.gets.load(Relaxed);
        let memtable_bytes = std::iter::once(&sv.mem)
            .chain(&sv.imms)
            .map(|m| m.memory_bytes() as u64)
            .sum();
        let (block_cache_hits, block_cache_misses, block_cache_bytes) = self
            .piece_reads
            .cache
            .as_ref()
            .map_or((0, 0, 0), |c| c.usage());
        DBStats {
            writes: s.writes.load(Relaxed),
            user_bytes_written: user,
            disk_bytes_written: written,
            disk_bytes_read: self.io.bytes_read.load(Relaxed),
            write_amplification: ratio(written, user),
            read_amplification: ratio(
                s.get_bytes_read.load(Relaxed),
                s.get_bytes_returned.load(Relaxed),
            ),
            gets,
            get_hits: s.get_hits.load(Relaxed),
            get_block_reads: s.get_block_reads.load(Relaxed),
            reads_per_get: ratio(s.get_block_reads.load(Relaxed), gets),
            block_cache_hits,
            block_cache_misses,
            block_cache_bytes,
            wal_bytes: s.wal_bytes.load(Relaxed),
            wal_syncs: s.wal_syncs.load(Relaxed),
            index_memory_bytes: global + local,
            index_global_bytes: global,
            index_local_bytes: local,
            index_bytes_per_key: ratio(global + local, stored),
            memtable_bytes,
            immutable_memtables: sv.imms.len() as u64,
            pinned_memtable_bytes: self
                .flushed_memtables
                .lock()
                .iter()
                .filter_map(std::sync::Weak::upgrade)
                .map(|m| m.memory_bytes() as u64)
                .sum(),
            levels,
            flushes: s.flushes.load(Relaxed),
            flush_micros: s.flush_micros.load(Relaxed),
            compactions: s.compactions.load(Relaxed),
            compaction_micros: s.compaction_micros.load(Relaxed),
            compaction_bytes_read: s.compaction_bytes_read.load(Relaxed),
            compaction_bytes_written: s.compaction_bytes_written.load(Relaxed),
            pieces_folded: s.pieces_folded.load(Relaxed),
            pieces_dropped: s.pieces_dropped.load(Relaxed),
            tombstones_dropped: s.tombstones_dropped.load(Relaxed),
            stall_micros: s.stall_micros.load(Relaxed),
            open_micros: s.open_micros.load(Relaxed),
            wal_replayed_batches: s.wal_replayed_batches.load(Relaxed),
            wal_dropped_bytes: s.wal_dropped_bytes.load(Relaxed),
            wal_files_skipped: s.wal_files_skipped.load(Relaxed),
            files_moved_to_lost: s.files_moved_to_lost.load(Relaxed),
        }
    }

    pub(crate) fn property(&self, name: &str) -> Option<String> {
        let stats = self.collect_stats();
        match name {
            "tphdb.stats" => Some(stats.report()),
            "tphdb.levelstats" => Some(stats.level_table()),
            "tphdb.estimate-num-keys" => Some(
                stats
                    .levels
                    .iter()
                    .map(|l| l.live_entries)
                    .sum::<u64>()
                    .to_string(),
            ),
            "tphdb.index-memory-bytes" => Some(stats.index_memory_bytes.to_string()),
            "tphdb.cur-size-all-mem-tables" => Some(stats.memtable_bytes.to_string()),
            "tphdb.num-immutable-mem-table" => Some(stats.immutable_memtables.to_string()),
            "tphdb.size-all-mem-tables" => {
                Some((stats.memtable_bytes + stats.pinned_memtable_bytes).to_string())
            }
            _ => {
                let level: usize = name
                    .strip_prefix("tphdb.num-files-at-level")?
                    .parse()
                    .ok()?;
                Some(stats.levels.get(level).map_or(0, |l| l.pieces).to_string())
            }
        }
    }
}

impl DBStats {
    /// The per-level structure as a table.
    pub fn level_table(&self) -> String {
        let mut s = String::from(
            "level  tphs  empty  pieces      live    stored   file MiB  live MiB  index KiB\n",
        );
        for l in &self.levels {
            let _ = writeln!(
                s,
                "{:>5} {:>5} {:>6} {:>7} {:>9} {:>9} {:>10.1} {:>9.1} {:>10.1}",
                l.level,
                l.tphs,
                l.empty_partitions,
                l.pieces,
                l.live_entries,
                l.stored_entries,
                l.file_bytes as f64 / 1048576.0,
                l.live_bytes as f64 / 1048576.0,
                l.index_bytes as f64 / 1024.0
            );
        }
        s
    }

    /// A human-readable report of everything.
    pub fn report(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "writes {}  user bytes {}  disk written {}  write amp {:.3}",
            self.writes, self.user_bytes_written, self.disk_bytes_written, self.write_amplification
        );
        let _ = writeln!(
            s,
            "gets {} (hits {})  block reads {}  reads/get {:.4}  read amp {:.3}",
            self.gets,
            self.get_hits,
            self.get_block_reads,
            self.reads_per_get,
            self.read_amplification
        );
        let _ = writeln!(
            s,
            "block cache hits {}  misses {}  bytes {}",
            self.block_cache_hits, self.block_cache_misses, self.block_cache_bytes
        );
        let _ = writeln!(
            s,
            "index {} bytes (global {}, local {}), {:.3} bytes/key  memtables {} bytes",
            self.index_memory_bytes,
            self.index_global_bytes,
            self.index_local_bytes,
            self.index_bytes_per_key,
            self.memtable_bytes
        );
        let _ = writeln!(
            s,
            "flushes {} ({} ms)  compactions {} ({} ms, read {} written {})  pieces folded {} dropped {}  tombstones dropped {}",
            self.flushes,
            self.flush_micros / 1000,
            self.compactions,
            self.compaction_micros / 1000,
            self.compaction_bytes_read,
            self.compaction_bytes_written,
            self.pieces_folded,
            self.pieces_dropped,
            self.tombstones_dropped
        );
        let _ = writeln!(
            s,
            "stalls {} ms  wal {} bytes, {} syncs  open {} ms (replayed {} batches, dropped {} bytes, skipped {} WALs)",
            self.stall_micros / 1000,
            self.wal_bytes,
            self.wal_syncs,
            self.open_micros / 1000,
            self.wal_replayed_batches,
            self.wal_dropped_bytes,
            self.wal_files_skipped
        );
        s.push_str(&self.level_table());
        s
    }
}
