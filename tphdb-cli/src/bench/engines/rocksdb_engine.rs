//! RocksDB through the `rocksdb` crate, linked to the system library.
//!
//! `rocksdb`: the paper's settings (defaults, a 32 MiB block cache).
//! `rocksdb-tuned`: RocksDB's tuning guide for point lookups: 10-bit Bloom
//! filters, index and filter blocks in the block cache and pinned there, a
//! block cache as large as tphdb's index, and point-lookup friendly
//! settings.

use std::path::Path;

use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options, ReadOptions, DB};

use super::{EngineConfig, Kv, Result};

pub struct Rocks(DB);

impl Rocks {
    pub fn open(dir: &Path, cfg: &EngineConfig, tuned: bool) -> Result<Rocks> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.set_compression_type(DBCompressionType::None);
        opts.set_use_direct_reads(cfg.direct_io);
        let mut table = BlockBasedOptions::default();
        if tuned {
            let cache = cfg.tuned_cache_bytes.max(32 << 20) as usize;
            table.set_block_cache(&Cache::new_lru_cache(cache)?);
            table.set_bloom_filter(10.0, false);
            table.set_cache_index_and_filter_blocks(true);
            table.set_pin_l0_filter_and_index_blocks_in_cache(true);
            table.set_pin_top_level_index_and_filter(true);
            table.set_format_version(5);
            opts.set_level_compaction_dynamic_level_bytes(true);
            opts.set_max_background_jobs(2);
            opts.set_bytes_per_sync(1 << 20);
        } else {
            table.set_block_cache(&Cache::new_lru_cache(32 << 20)?);
        }
        opts.set_block_based_table_factory(&table);
        Ok(Rocks(DB::open(&opts, dir)?))
    }
}

impl Kv for Rocks {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.0.put(key, value)?)
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.0.get_pinned(key)?.map(|v| v.len()))
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        Ok(self.0.delete(key)?)
    }

    fn scan(&self, start: &[u8], n: usize) -> Result<usize> {
        let mut it = self.0.raw_iterator_opt(ReadOptions::default());
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
        self.0.flush()?;
        // Let pending compactions run: RocksDB has no "wait" in this API,
        // so poll its counter.
        loop {
            let pending = self
                .0
                .property_int_value("rocksdb.compaction-pending")?
                .unwrap_or(0)
                + self
                    .0
                    .property_int_value("rocksdb.num-running-compactions")?
                    .unwrap_or(0)
                + self
                    .0
                    .property_int_value("rocksdb.num-running-flushes")?
                    .unwrap_or(0);
            if pending == 0 {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }
}
