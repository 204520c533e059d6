//! tphdb: an embedded key-value store whose tables are two-tier perfect hash
//! tables (the CompassDB design): a point lookup is two in-memory probes and
//! one disk read.
//!
//! The API is the root of this crate: [`DB`] and what its methods take and
//! return, [`Options`] and the types its fields need, [`Error`], and the
//! [`fs`] module for running over a file system of your own. The modules
//! hidden from these docs (`piece`, `phf`, `hash`, `fuzzing`) are the
//! engine's parts, public for its command-line tools, benchmarks and
//! fuzzers; they may change in any release.
#![warn(missing_docs)]
// No unwrap on data from disk or a user; unit tests may (clippy.toml).
#![warn(clippy::unwrap_used)]

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
#[doc(hidden)]
pub mod hash;
#[doc(hidden)]
pub mod inspect;
mod log;
mod memtable;
#[doc(hidden)]
pub mod phf;
#[doc(hidden)]
pub mod piece;
mod tph;
mod util;
mod version;

pub use batch::WriteBatch;
pub use db::{
    prefix_bounds, BulkLoader, CompactionPriority, CompactionReads, DBIterator, DBRawIterator,
    DBStats, Direction, FileCheck, IngestReport, IteratorMode, LevelStats, Options, ReadOptions,
    RepairReport, Snapshot, SyncPolicy, VerifyReport, WriteBreakdown, WriteOptions, DB,
};
pub use error::{Error, Result};
pub use fs::ReadMode;
pub use phf::PhfKind;
pub use piece::Compression;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
