//! `tphdb-peers`: the engines `tphdb bench` compares tphdb with, each run
//! in a child process of this binary (`tphdb-peers bench-child SPEC`).
//! They link RocksDB, LevelDB and the C++ runtime, which the `tphdb`
//! binary, where tphdb's own children run, therefore does not (see
//! `tphdb_cli::engines`).

mod fjall_engine;
mod leveldb_engine;
mod lmdb_engine;
mod pogreb_engine;
mod redb_engine;
mod rocksdb_engine;

use std::path::Path;

use tphdb_cli::engines::{EngineConfig, Kv, Result};

fn open(name: &str, dir: &Path, cfg: &EngineConfig) -> Option<Result<Box<dyn Kv>>> {
    fn boxed<E: Kv + 'static>(engine: Result<E>) -> Result<Box<dyn Kv>> {
        Ok(Box::new(engine?))
    }
    Some(match name {
        "rocksdb" => boxed(rocksdb_engine::Rocks::open(dir, cfg, false)),
        "rocksdb-tuned" => boxed(rocksdb_engine::Rocks::open(dir, cfg, true)),
        "lmdb" => boxed(lmdb_engine::Lmdb::open(dir, cfg)),
        "leveldb" => boxed(leveldb_engine::LevelDb::open(dir, cfg)),
        "fjall" => boxed(fjall_engine::Fjall::open(dir, cfg)),
        "redb" => boxed(redb_engine::Redb::open(dir, cfg)),
        "pogreb" => boxed(pogreb_engine::Recorder::open(dir, cfg)),
        _ => return None,
    })
}

fn main() {
    tphdb_cli::peers_main(open)
}
