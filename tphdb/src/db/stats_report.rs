//! `DBStats` as text: the per-level table and the report that
//! `tphdb stats` and the `tphdb.stats` property print.

use std::fmt::Write as _;

use super::stats::DBStats;
use super::Inner;

impl DBStats {
    /// The per-level structure as a table.
    pub fn level_table(&self) -> String {
        let mut s = String::from(
            "level  tphs  empty  pieces      live    stored  tombstones   file MiB  live MiB  garbage MiB  hidden MiB  index KiB\n",
        );
        for l in &self.levels {
            let _ = writeln!(
                s,
                "{:>5} {:>5} {:>6} {:>7} {:>9} {:>9} {:>11} {:>10.1} {:>9.1} {:>12.1} {:>11.1} {:>10.1}",
                l.level,
                l.tphs,
                l.empty_partitions,
                l.pieces,
                l.live_entries,
                l.stored_entries,
                l.live_tombstones,
                l.file_bytes as f64 / 1048576.0,
                l.live_bytes as f64 / 1048576.0,
                l.garbage_bytes as f64 / 1048576.0,
                l.shadowed_bytes as f64 / 1048576.0,
                l.index_bytes as f64 / 1024.0
            );
        }
        s
    }

    /// A human-readable report of everything.
    pub fn report(&self) -> String {
        let mut s = String::new();
        let w = &self.writes_by_cause;
        let r = &self.compaction_reads;
        let _ = writeln!(
            s,
            "writes {}  user bytes {}  disk written {}  write amp {:.3} (flush and compaction)  wal amp {:.3}",
            self.writes,
            self.user_bytes_written,
            self.disk_bytes_written,
            self.write_amplification,
            self.wal_amplification
        );
        let _ = writeln!(
            s,
            "written by cause: wal {}  flush {}  l0 merge {}  push-down {}  gc fold {}  index {}  manifest {}",
            w.wal, w.flush, w.l0_merge, w.push_down, w.gc_fold, w.index, w.manifest
        );
        let _ = writeln!(
            s,
            "compactions read: l0 merge {}  push-down {}  gc fold {}  key hashes {}  values again {}",
            r.l0_merge, r.push_down, r.gc_fold, r.key_hashes, r.values_again
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
            "block cache hits {}  misses {}  bytes {} of {}",
            self.block_cache_hits,
            self.block_cache_misses,
            self.block_cache_bytes,
            self.block_cache_capacity
        );
        let _ = writeln!(
            s,
            "index {} bytes (global {}, local {}; global of all TPHs held {}), {:.3} bytes/key  memtables {} bytes ({} frozen, {} pinned bytes, {} in files)  jobs {} bytes",
            self.index_memory_bytes,
            self.index_global_bytes,
            self.index_local_bytes,
            self.index_global_held_bytes,
            self.index_bytes_per_key,
            self.memtable_bytes,
            self.immutable_memtables,
            self.pinned_memtable_bytes,
            self.pinned_memtable_spilled_bytes,
            self.job_memory_bytes
        );
        let _ = writeln!(
            s,
            "flushes {} ({} ms, slowest {} ms)  compactions {} ({} ms)  pieces folded {} dropped {}  tombstones dropped {}",
            self.flushes,
            self.flush_micros / 1000,
            self.slowest_flush_micros / 1000,
            self.compactions,
            self.compaction_micros / 1000,
            self.pieces_folded,
            self.pieces_dropped,
            self.tombstones_dropped
        );
        let _ = writeln!(
            s,
            "push-downs merged into meanwhile {}  waited for a merge {}  children written from hashes {}  most compactions at once {}  at low priority {}  running now {}{}",
            self.push_downs_overlapped,
            self.push_down_waits,
            self.shares_written,
            self.peak_running_compactions,
            self.low_priority_compactions,
            self.running_jobs,
            if self.work_pending { ", more due" } else { "" }
        );
        let _ = writeln!(
            s,
            "stalls {} ms (memtables full {}, level 0 at its stop {}, paced {}: level 0's steps {}, to its compaction's end {}, to a flush's end {}, one-level backlog {})  wal {} batch bytes, {} syncs  open {} ms (replayed {} batches, dropped {} bytes, skipped {} WALs, {} files to lost/)",
            self.stall_micros / 1000,
            self.memtable_stall_micros / 1000,
            self.level0_stall_micros / 1000,
            self.stall_micros.saturating_sub(self.memtable_stall_micros + self.level0_stall_micros) / 1000,
            self.paced_level0_micros / 1000,
            self.paced_level0_compaction_micros / 1000,
            self.paced_memtable_micros / 1000,
            self.paced_one_level_micros / 1000,
            self.wal_bytes,
            self.wal_syncs,
            self.open_micros / 1000,
            self.wal_replayed_batches,
            self.wal_dropped_bytes,
            self.wal_files_skipped,
            self.files_moved_to_lost
        );
        s.push_str(&self.level_table());
        s
    }
}

impl Inner {
    pub(crate) fn property(&self, name: &str) -> Option<String> {
        let stats = self.collect_stats();
        match name {
            "tphdb.stats" => Some(stats.report()),
            "tphdb.levelstats" => Some(stats.level_table()),
            // As RocksDB's: live entries of the tables plus every entry of
            // the memtables (overwrites and deletes counted as keys).
            "tphdb.estimate-num-keys" => Some(
                (stats.levels.iter().map(|l| l.live_entries).sum::<u64>()
                    + self.memtable_entries())
                .to_string(),
            ),
            "tphdb.index-memory-bytes" => Some(stats.index_memory_bytes.to_string()),
            "tphdb.cur-size-all-mem-tables" => Some(stats.memtable_bytes.to_string()),
            "tphdb.num-immutable-mem-table" => Some(stats.immutable_memtables.to_string()),
            "tphdb.compaction-pending" => Some(u8::from(stats.work_pending).to_string()),
            "tphdb.num-running-jobs" => Some(stats.running_jobs.to_string()),
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
