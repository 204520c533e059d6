//! redb: one write transaction per write with `Durability::None`, and a
//! durable one every [`DURABLE_EVERY`] writes and at `settle` (redb holds
//! the state of non-durable commits in memory until then); reads in read
//! transactions.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::{Builder, Database, Durability, TableDefinition};

use tphdb_cli::engines::{EngineConfig, Kv, Result};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");

/// Writes between durable commits.
const DURABLE_EVERY: u64 = 1024;

pub struct Redb {
    db: Database,
    writes: AtomicU64,
}

impl Redb {
    pub fn open(dir: &Path, cfg: &EngineConfig) -> Result<Redb> {
        let mut builder = Builder::new();
        if let Some(mb) = cfg.memory_mb {
            builder.set_cache_size((mb << 20) as usize / 4);
        }
        let db = builder.create(dir.join("data.redb"))?;
        let txn = db.begin_write()?;
        txn.open_table(TABLE)?;
        txn.commit()?;
        Ok(Redb {
            db,
            writes: AtomicU64::new(0),
        })
    }

    fn write(&self, f: impl FnOnce(&mut redb::Table<&[u8], &[u8]>) -> Result<()>) -> Result<()> {
        let mut txn = self.db.begin_write()?;
        if self.writes.fetch_add(1, Ordering::Relaxed) % DURABLE_EVERY != DURABLE_EVERY - 1 {
            txn.set_durability(Durability::None);
        }
        {
            let mut table = txn.open_table(TABLE)?;
            f(&mut table)?;
        }
        Ok(txn.commit()?)
    }
}

impl Kv for Redb {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write(|t| {
            t.insert(key, value)?;
            Ok(())
        })
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(TABLE)?;
        Ok(table.get(key)?.map(|v| v.value().len()))
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.write(|t| {
            t.remove(key)?;
            Ok(())
        })
    }

    fn scan(&self, start: &[u8], n: usize) -> Result<usize> {
        let txn = self.db.begin_read()?;
        let table = txn.open_table(TABLE)?;
        let mut read = 0;
        for item in table.range(start..)?.take(n) {
            let (_, v) = item?;
            std::hint::black_box(v.value());
            read += 1;
        }
        Ok(read)
    }

    fn settle(&self) -> Result<()> {
        let txn = self.db.begin_write()?;
        Ok(txn.commit()?)
    }
}
