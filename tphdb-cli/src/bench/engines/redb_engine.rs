//! redb: one write transaction per write with `Durability::None` (`settle`
//! commits a durable one), reads in read transactions.

use std::path::Path;

use redb::{Database, Durability, TableDefinition};

use super::{EngineConfig, Kv, Result};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("bench");

pub struct Redb(Database);

impl Redb {
    pub fn open(dir: &Path, _cfg: &EngineConfig) -> Result<Redb> {
        let db = Database::create(dir.join("data.redb"))?;
        let txn = db.begin_write()?;
        txn.open_table(TABLE)?;
        txn.commit()?;
        Ok(Redb(db))
    }

    fn write(&self, f: impl FnOnce(&mut redb::Table<&[u8], &[u8]>) -> Result<()>) -> Result<()> {
        let mut txn = self.0.begin_write()?;
        txn.set_durability(Durability::None);
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
        let txn = self.0.begin_read()?;
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
        let txn = self.0.begin_read()?;
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
        let txn = self.0.begin_write()?;
        Ok(txn.commit()?)
    }
}
