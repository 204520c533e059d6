//! Collecting [`DBStats`] from the engine: its counters, the current
//! version's structure, the memtables and the caches, at one moment.

use std::sync::atomic::Ordering::Relaxed;

use super::stats::{CompactionReads, DBStats, LevelStats, Pacer, WriteBreakdown};
use super::Inner;

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
        let (running_jobs, work_pending) = {
            let st = self.state.lock();
            (
                st.running_jobs as u64,
                !self.read_only && self.work_due(&st),
            )
        };
        let (sv, _) = self.read_view();
        let v = &sv.version;
        let (mut pinned_in_memory, mut pinned_spilled) = (0u64, 0u64);
        for m in self.flushed_memtables.lock().iter() {
            if let Some(m) = m.upgrade() {
                let bytes = m.memory_bytes() as u64;
                if m.is_spilled() {
                    pinned_spilled += bytes;
                } else {
                    pinned_in_memory += bytes;
                }
            }
        }
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
                let g = t.garbage();
                ls.live_tombstones += g.live_tombstones;
                let bottom = level as u32 == v.depth;
                ls.garbage_bytes += g.foldable_bytes(bottom);
                ls.shadowed_bytes += g.hidden_bytes(bottom);
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
        let block_cache_capacity = self.piece_reads.cache.as_ref().map_or(0, |c| c.capacity());
        let manifest = {
            let mut st = self.state.lock();
            st.versions.writable().map_or(0, |v| v.bytes_written())
        };
        let writes_by_cause = WriteBreakdown {
            wal: s.wal_file_bytes.load(Relaxed),
            flush: s.flush_written.load(Relaxed),
            l0_merge: s.l0_merge_written.load(Relaxed),
            push_down: s.push_down_written.load(Relaxed),
            gc_fold: s.gc_fold_written.load(Relaxed),
            index: s.index_written.load(Relaxed),
            manifest,
        };
        DBStats {
            writes: s.writes.load(Relaxed),
            user_bytes_written: user,
            disk_bytes_written: written,
            disk_bytes_read: self.io.bytes_read.load(Relaxed),
            write_amplification: ratio(writes_by_cause.flush_and_compaction(), user),
            wal_amplification: ratio(writes_by_cause.wal, user),
            writes_by_cause,
            compaction_reads: CompactionReads {
                l0_merge: s.l0_merge_read.load(Relaxed),
                push_down: s.push_down_read.load(Relaxed),
                gc_fold: s.gc_fold_read.load(Relaxed),
                key_hashes: s.key_hashes_read.load(Relaxed),
                values_again: s.values_again_read.load(Relaxed),
            },
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
            block_cache_capacity,
            wal_bytes: s.wal_bytes.load(Relaxed),
            wal_syncs: s.wal_syncs.load(Relaxed),
            index_memory_bytes: global + local,
            index_global_bytes: global,
            index_local_bytes: local,
            index_global_held_bytes: self.piece_reads.global_index_held.load(Relaxed),
            index_bytes_per_key: ratio(global + local, stored),
            memtable_bytes,
            immutable_memtables: sv.imms.len() as u64,
            job_memory_bytes: s.job_memory.load(Relaxed),
            pinned_memtable_bytes: pinned_in_memory,
            pinned_memtable_spilled_bytes: pinned_spilled,
            memtables_spilled: s.memtables_spilled.load(Relaxed),
            memtable_spilled_bytes: s.memtable_spilled_bytes.load(Relaxed),
            memtable_spill_failures: s.memtable_spill_failures.load(Relaxed),
            levels,
            flushes: s.flushes.load(Relaxed),
            flush_micros: s.flush_micros.load(Relaxed),
            slowest_flush_micros: s.slowest_flush_micros.load(Relaxed),
            compactions: s.compactions.load(Relaxed),
            compaction_micros: s.compaction_micros.load(Relaxed),
            pieces_folded: s.pieces_folded.load(Relaxed),
            pieces_dropped: s.pieces_dropped.load(Relaxed),
            tombstones_dropped: s.tombstones_dropped.load(Relaxed),
            push_downs_overlapped: s.push_downs_overlapped.load(Relaxed),
            push_down_waits: s.push_down_waits.load(Relaxed),
            shares_written: s.shares_written.load(Relaxed),
            peak_running_compactions: s.peak_running_compactions.load(Relaxed),
            low_priority_compactions: s.low_priority_compactions.load(Relaxed),
            running_jobs,
            work_pending,
            stall_micros: s.stall_micros.load(Relaxed),
            memtable_stall_micros: s.memtable_stall_micros.load(Relaxed),
            level0_stall_micros: s.level0_stall_micros.load(Relaxed),
            paced_level0_micros: s.paced_micros[Pacer::Level0Steps as usize].load(Relaxed),
            paced_level0_compaction_micros: s.paced_micros[Pacer::Level0Compaction as usize]
                .load(Relaxed),
            paced_memtable_micros: s.paced_micros[Pacer::Memtable as usize].load(Relaxed),
            paced_one_level_micros: s.paced_micros[Pacer::OneLevel as usize].load(Relaxed),
            open_micros: s.open_micros.load(Relaxed),
            wal_replayed_batches: s.wal_replayed_batches.load(Relaxed),
            wal_dropped_bytes: s.wal_dropped_bytes.load(Relaxed),
            wal_files_skipped: s.wal_files_skipped.load(Relaxed),
            files_moved_to_lost: s.files_moved_to_lost.load(Relaxed),
        }
    }

    /// Entries of the active and frozen memtables, every version counted.
    pub(super) fn memtable_entries(&self) -> u64 {
        let (sv, _) = self.read_view();
        std::iter::once(&sv.mem)
            .chain(&sv.imms)
            .map(|m| m.len() as u64)
            .sum()
    }
}
