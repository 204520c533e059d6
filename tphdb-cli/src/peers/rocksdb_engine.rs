//! RocksDB through the `rocksdb` crate, linked to the system library.
//!
//! `rocksdb`: the paper's settings (defaults, a 32 MiB block cache).
//! `rocksdb-tuned`: RocksDB's tuning guide for point lookups: 10-bit Bloom
//! filters (full filters, format version 5), index and filter blocks held
//! in memory for good (outside the block cache), a block cache as large as
//! the memory tphdb reads with (its index plus its block cache), dynamic
//! level sizes.

use std::path::Path;

use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options, ReadOptions, DB};

use serde_json::{json, Value};

use tphdb_cli::engines::{EngineConfig, Kv, Result, WriteCounters};

pub struct Rocks {
    db: DB,
    opts: Options,
}

impl Rocks {
    pub fn open(dir: &Path, cfg: &EngineConfig, tuned: bool) -> Result<Rocks> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(DBCompressionType::None);
        opts.set_use_direct_reads(cfg.direct_io);
        if let Some(n) = cfg.memtables {
            opts.set_max_write_buffer_number(n.max(2) as i32);
        }
        let mut table = BlockBasedOptions::default();
        if tuned {
            // Index and filter blocks stay in the table readers' memory,
            // never evicted (caching them in a small block cache made
            // data blocks evict them, and every get re-read a whole filter
            // block); the block cache, for data blocks, gets the memory
            // tphdb's index uses.
            let cache = cfg.tuned_cache_bytes.max(1 << 20) as usize;
            table.set_block_cache(&Cache::new_lru_cache(cache)?);
            table.set_bloom_filter(10.0, false);
            table.set_cache_index_and_filter_blocks(false);
            table.set_format_version(5);
            opts.set_level_compaction_dynamic_level_bytes(true);
            opts.set_max_background_jobs(2);
            opts.set_bytes_per_sync(1 << 20);
        } else {
            table.set_block_cache(&Cache::new_lru_cache(32 << 20)?);
        }
        opts.set_block_based_table_factory(&table);
        // Block cache and Bloom filter counters, for the report.
        opts.enable_statistics();
        Ok(Rocks {
            db: DB::open(&opts, dir)?,
            opts,
        })
    }
}

impl Rocks {
    /// A ticker's count, by name, from the statistics RocksDB keeps.
    fn tickers(&self) -> impl Fn(&str) -> u64 {
        let stats = self.opts.get_statistics().unwrap_or_default();
        move |name: &str| -> u64 {
            stats
                .lines()
                .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
                .and_then(|l| l.split("COUNT :").nth(1))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        }
    }
}

impl Kv for Rocks {
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
        let mut it = self.db.raw_iterator_opt(ReadOptions::default());
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
        // Let pending compactions run: RocksDB has no "wait" in this API,
        // so poll its counter.
        loop {
            let pending = self
                .db
                .property_int_value("rocksdb.compaction-pending")?
                .unwrap_or(0)
                + self
                    .db
                    .property_int_value("rocksdb.num-running-compactions")?
                    .unwrap_or(0)
                + self
                    .db
                    .property_int_value("rocksdb.num-running-flushes")?
                    .unwrap_or(0);
            if pending == 0 {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    fn memory_parts(&self) -> Vec<(&'static str, u64)> {
        let property = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        vec![
            ("memtables", property("rocksdb.cur-size-all-mem-tables")),
            ("block_cache", property("rocksdb.block-cache-usage")),
            (
                "table_readers",
                property("rocksdb.estimate-table-readers-mem"),
            ),
        ]
    }

    fn write_counters(&self) -> Option<WriteCounters> {
        let count = self.tickers();
        Some(WriteCounters {
            flush_and_compaction: count("rocksdb.flush.write.bytes")
                + count("rocksdb.compact.write.bytes"),
            wal: Some(count("rocksdb.wal.bytes")),
        })
    }

    fn extra(&self, _keys: u64, _user_bytes: u64) -> Vec<(&'static str, Value)> {
        let count = self.tickers();
        vec![
            (
                "block_cache_index_miss",
                json!(count("rocksdb.block.cache.index.miss")),
            ),
            (
                "block_cache_filter_miss",
                json!(count("rocksdb.block.cache.filter.miss")),
            ),
            (
                "block_cache_data_miss",
                json!(count("rocksdb.block.cache.data.miss")),
            ),
            ("bloom_useful", json!(count("rocksdb.bloom.filter.useful"))),
            (
                "block_cache_bytes",
                json!(self
                    .db
                    .property_int_value("rocksdb.block-cache-usage")
                    .ok()
                    .flatten()),
            ),
        ]
    }
}
