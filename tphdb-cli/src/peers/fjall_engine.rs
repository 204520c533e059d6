//! fjall (an LSM tree in Rust): one keyspace, one partition, no
//! compression, journal written without a sync per write.

use std::path::Path;

use fjall::{
    CompressionType, Config, Keyspace, PartitionCreateOptions, PartitionHandle, PersistMode,
};

use tphdb_cli::engines::{EngineConfig, Kv, Result};

pub struct Fjall {
    keyspace: Keyspace,
    part: PartitionHandle,
}

impl Fjall {
    pub fn open(dir: &Path, _cfg: &EngineConfig) -> Result<Fjall> {
        let keyspace = Config::new(dir).open()?;
        let part = keyspace.open_partition(
            "bench",
            PartitionCreateOptions::default().compression(CompressionType::None),
        )?;
        Ok(Fjall { keyspace, part })
    }
}

impl Kv for Fjall {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        Ok(self.part.insert(key, value)?)
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        Ok(self.part.get(key)?.map(|v| v.len()))
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        Ok(self.part.remove(key)?)
    }

    fn scan(&self, start: &[u8], n: usize) -> Result<usize> {
        let mut read = 0;
        for item in self.part.range(start.to_vec()..).take(n) {
            std::hint::black_box(item?);
            read += 1;
        }
        Ok(read)
    }

    fn settle(&self) -> Result<()> {
        self.keyspace.persist(PersistMode::SyncAll)?;
        Ok(())
    }
}
