//! tphdb: an embedded key-value store whose tables are two-tier perfect hash
//! tables (the CompassDB design): a point lookup is two in-memory probes and
//! one disk read.
#![warn(missing_docs)]

mod batch;
mod compaction;
mod cursor;
mod db;
mod error;
mod filename;
#[cfg(test)]
mod fixtures;
pub mod fs;
#[doc(hidden)]
pub mod fuzzing;
pub mod hash;
mod log;
mod memtable;
pub mod phf;
pub mod piece;
mod tph;
mod util;
mod version;

pub use batch::WriteBatch;
pub use db::{
    DBIterator, DBRawIterator, DbStats, Direction, FileCheck, IteratorMode, LevelStats, Options,
    ReadOptions, RepairReport, Snapshot, SyncPolicy, VerifyReport, WriteOptions, DB,
};
pub use error::{Error, Result};
