//! tphdb itself.

use std::path::Path;

use serde_json::{json, Value};
use tphdb::fs::ReadMode;
use tphdb::{CompactionPriority, Options, DB};

use super::{CompactionPriorityArg, EngineConfig, Kv, Result, WriteCounters};
use crate::bench::report::round;

pub struct Tphdb {
    db: DB,
    /// Block cache capacity (0: none, as with mmap reads).
    cache_bytes: u64,
}

impl Tphdb {
    pub fn open(dir: &Path, cfg: &EngineConfig) -> Result<Tphdb> {
        let d = Options::default();
        let t = &cfg.tphdb;
        let budget = cfg.memory_mb.map(|mb| (mb << 20) as usize);
        let opts = Options {
            write_buffer_bytes: t.write_buffer_mb.map_or(d.write_buffer_bytes, |m| m << 20),
            // Half the process's budget for what tphdb holds (memtables,
            // compactions, block cache), half for the index, the page cache
            // and the rest of the process.
            memory_budget_bytes: budget
                .filter(|_| t.write_buffer_mb.is_none())
                .map(|b| b / 2),
            max_immutable_memtables: t
                .max_immutable_memtables
                .or(cfg.memtables.map(|n| n.saturating_sub(1)))
                .unwrap_or(d.max_immutable_memtables),
            compaction_memory_bytes: t
                .compaction_memory_mb
                .map(|m| m << 20)
                .or(budget.map(|b| b / 8))
                .unwrap_or(d.compaction_memory_bytes),
            background_threads: t.background_threads.unwrap_or(d.background_threads),
            compaction_priority: match t.compaction_priority {
                None => d.compaction_priority,
                Some(CompactionPriorityArg::Normal) => CompactionPriority::Normal,
                Some(CompactionPriorityArg::Low) => CompactionPriority::Low,
                Some(CompactionPriorityArg::LowWithoutWrites) => {
                    CompactionPriority::LowWithoutWrites
                }
            },
            tph_target_bytes: t.tph_target_mb.map_or(d.tph_target_bytes, |m| m << 20),
            fanout: t.fanout.unwrap_or(d.fanout),
            signature_bits: t.signature_bits.unwrap_or(d.signature_bits),
            bottom_signature_bits: t.bottom_signature_bits.unwrap_or(d.bottom_signature_bits),
            bottom_field_bits: t.bottom_field_bits.unwrap_or(d.bottom_field_bits),
            one_level: t.one_level,
            single_tier: t.single_tier,
            align_blocks: t.align_blocks,
            gc_dead_ratio: t.gc_dead_ratio.unwrap_or(d.gc_dead_ratio),
            max_garbage_ratio: t.max_garbage_ratio.unwrap_or(d.max_garbage_ratio),
            read_mode: if cfg.direct_io {
                ReadMode::Direct
            } else {
                ReadMode::Mmap
            },
            ..d
        };
        let db = DB::open(&opts, dir)?;
        let cache_bytes = if opts.read_mode == ReadMode::Mmap {
            0
        } else {
            db.stats().block_cache_capacity
        };
        Ok(Tphdb { db, cache_bytes })
    }
}

impl Kv for Tphdb {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.db.put(key, value)?)
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.db.get_pinned(key)?.map(|v| v.len()))
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        Ok(self.db.delete(key)?)
    }

    fn scan(&self, start: &[u8], n: usize) -> Result<usize> {
        let mut it = self.db.raw_iterator();
        it.seek(start);
        let mut read = 0;
        while read < n && it.valid() {
            std::hint::black_box(it.value());
            read += 1;
            it.next();
        }
        it.status()?;
        Ok(read)
    }

    fn settle(&self) -> Result<()> {
        self.db.flush()?;
        self.db.wait_for_compactions()?;
        Ok(())
    }

    fn write_counters(&self) -> Option<WriteCounters> {
        let w = self.db.stats().writes_by_cause;
        Some(WriteCounters {
            flush_and_compaction: w.flush_and_compaction(),
            wal: Some(w.wal),
        })
    }

    fn memory_parts(&self) -> Vec<(&'static str, u64)> {
        let st = self.db.stats();
        vec![
            ("memtables", st.memtable_bytes),
            ("pinned_memtables", st.pinned_memtable_bytes),
            ("block_cache", st.block_cache_bytes),
            ("index", st.index_memory_bytes),
            ("jobs", st.job_memory_bytes),
            // Global indexes of TPHs outside the current version: built by
            // jobs and not yet installed, or replaced and still held.
            (
                "indexes_outside_current",
                st.index_global_held_bytes
                    .saturating_sub(st.index_global_bytes),
            ),
        ]
    }

    fn wait_counters(&self) -> Vec<(&'static str, u64)> {
        let st = self.db.stats();
        vec![
            ("stopped_memtables", st.memtable_stall_micros),
            ("stopped_level0", st.level0_stall_micros),
            ("paced_level0_steps", st.paced_level0_micros),
            ("paced_level0_compaction", st.paced_level0_compaction_micros),
            ("paced_memtable", st.paced_memtable_micros),
            ("paced_one_level", st.paced_one_level_micros),
        ]
    }

    fn extra(&self, keys: u64, user_bytes: u64) -> Vec<(&'static str, Value)> {
        let st = self.db.stats();
        let amp = |b: u64| round(b as f64 / user_bytes.max(1) as f64, 3);
        let w = &st.writes_by_cause;
        let r = &st.compaction_reads;
        // What each cause wrote (and compactions read) over what the user
        // wrote: where the write amplification comes from.
        let breakdown = json!({
            "wal": amp(w.wal),
            "flush": amp(w.flush),
            "l0_merge": amp(w.l0_merge),
            "push_down": amp(w.push_down),
            "gc_fold": amp(w.gc_fold),
            "index": amp(w.index),
            "manifest": amp(w.manifest),
        });
        let reads = json!({
            "l0_merge": amp(r.l0_merge),
            "push_down": amp(r.push_down),
            "gc_fold": amp(r.gc_fold),
            "key_hashes": amp(r.key_hashes),
            "values_again": amp(r.values_again),
        });
        let levels: Vec<Value> = st
            .levels
            .iter()
            .map(|l| {
                json!({
                    "level": l.level,
                    "tphs": l.tphs,
                    "empty_partitions": l.empty_partitions,
                    "pieces": l.pieces,
                    "live_entries": l.live_entries,
                    "stored_entries": l.stored_entries,
                    "file_bytes": l.file_bytes,
                    "live_bytes": l.live_bytes,
                    // Dead entries, indexes and page padding.
                    "other_bytes": l.file_bytes.saturating_sub(l.live_bytes),
                    "index_bytes": l.index_bytes,
                })
            })
            .collect();
        vec![
            ("reads_per_get", json!(round(st.reads_per_get, 4))),
            (
                "index_bytes_per_key",
                json!(round(st.index_memory_bytes as f64 / keys.max(1) as f64, 3)),
            ),
            ("index_bytes", json!(st.index_memory_bytes)),
            ("block_cache_capacity", json!(self.cache_bytes)),
            ("block_cache_hits", json!(st.block_cache_hits)),
            ("block_cache_misses", json!(st.block_cache_misses)),
            ("compactions", json!(st.compactions)),
            ("write_amp_breakdown", breakdown),
            ("compaction_read_amp", reads),
            (
                "stall_seconds",
                json!(round(st.stall_micros as f64 / 1e6, 2)),
            ),
            // Of those: writes stopped on full memtables, stopped at level
            // 0's stop trigger; the rest were paced, by what in
            // `paced_seconds`.
            (
                "memtable_stall_seconds",
                json!(round(st.memtable_stall_micros as f64 / 1e6, 2)),
            ),
            (
                "level0_stall_seconds",
                json!(round(st.level0_stall_micros as f64 / 1e6, 2)),
            ),
            (
                "paced_seconds",
                json!({
                    "level0_steps": round(st.paced_level0_micros as f64 / 1e6, 2),
                    "level0_compaction": round(st.paced_level0_compaction_micros as f64 / 1e6, 2),
                    "memtable": round(st.paced_memtable_micros as f64 / 1e6, 2),
                    "one_level": round(st.paced_one_level_micros as f64 / 1e6, 2),
                }),
            ),
            ("flushes", json!(st.flushes)),
            // Time spent in flushes (a frozen memtable's lifetime, with the
            // write rate what the active one grows by meanwhile) and in
            // compactions.
            (
                "flush_seconds",
                json!(round(st.flush_micros as f64 / 1e6, 2)),
            ),
            (
                "slowest_flush_seconds",
                json!(round(st.slowest_flush_micros as f64 / 1e6, 2)),
            ),
            (
                "compaction_seconds",
                json!(round(st.compaction_micros as f64 / 1e6, 2)),
            ),
            ("levels", Value::Array(levels)),
            ("structure", json!(st.level_table())),
        ]
    }
}
