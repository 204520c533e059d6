//! LMDB through `heed`: one write transaction per write, `NO_SYNC` (the
//! OS writes the map back; `settle` syncs), reads in read transactions.

use std::path::Path;

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions};

use tphdb_cli::engines::{EngineConfig, Kv, Result};

pub struct Lmdb {
    env: Env,
    db: Database<Bytes, Bytes>,
}

impl Lmdb {
    pub fn open(dir: &Path, cfg: &EngineConfig) -> Result<Lmdb> {
        // The map must hold the data with room for B-tree overhead and
        // copy-on-write pages.
        let map = (cfg.data_bytes * 4).max(1 << 30).next_multiple_of(1 << 20);
        let mut options = EnvOpenOptions::new();
        options.map_size(map as usize);
        // SAFETY: the directory is new and only this process opens it.
        let env = unsafe {
            options.flags(EnvFlags::NO_SYNC | EnvFlags::NO_READ_AHEAD);
            options.open(dir)?
        };
        let mut txn = env.write_txn()?;
        let db = env.create_database(&mut txn, None)?;
        txn.commit()?;
        Ok(Lmdb { env, db })
    }
}

impl Kv for Lmdb {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut txn = self.env.write_txn()?;
        self.db.put(&mut txn, key, value)?;
        Ok(txn.commit()?)
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        let txn = self.env.read_txn()?;
        Ok(self
            .db
            .get(&txn, key)?
            .map(|v| std::hint::black_box(v).len()))
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        let mut txn = self.env.write_txn()?;
        self.db.delete(&mut txn, key)?;
        Ok(txn.commit()?)
    }

    fn scan(&self, start: &[u8], n: usize) -> Result<usize> {
        let txn = self.env.read_txn()?;
        let mut read = 0;
        for item in self
            .db
            .range(
                &txn,
                &(std::ops::Bound::Included(start), std::ops::Bound::Unbounded),
            )?
            .take(n)
        {
            std::hint::black_box(item?);
            read += 1;
        }
        Ok(read)
    }

    fn settle(&self) -> Result<()> {
        Ok(self.env.force_sync()?)
    }
}
