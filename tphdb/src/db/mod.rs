//! The database: the public API and the state behind it.
//!
//! Writes go to the WAL and the active memtable (group commit: one leader
//! writes the batches of all waiting writers). Full memtables are frozen and
//! flushed by background jobs into level-0 TPHs (or, in one-level mode,
//! merged straight into level 1); compactions move data down the hash-range
//! levels. Readers pin a [`SuperVersion`] (memtables plus the set of TPHs)
//! and never block writers or compactions.

mod checkpoint;
mod delta;
mod explain;
mod ingest;
mod install;
mod iter;
mod job_eta;
mod jobs;
pub(crate) mod open;
mod options;
mod passes;
mod pool_threads;
mod push_down;
mod read;
mod repair;
pub(crate) mod replay;
mod space;
mod stats;
mod stats_collect;
mod stats_report;
mod write;
mod write_delay;

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex};

pub use ingest::{BulkLoader, IngestReport};
pub use iter::{prefix_bounds, DBIterator, DBRawIterator, Direction, IteratorMode, ReadOptions};
pub use options::{CompactionPriority, Options, SyncPolicy, WriteOptions};
pub use read::Snapshot;
pub use repair::{FileCheck, RepairReport, VerifyReport};
pub use stats::{CompactionReads, DBStats, LevelStats, WriteBreakdown};

use self::space::{OutOfSpace, SpaceWait};
use self::stats::Stats;
use self::write::{WalWriter, WriteQueue};
use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::fs::{FileLock, FileSystem, IoCounts};
use crate::memtable::MemTable;
use crate::version::{Version, VersionSet};

/// What a reader pins: the memtables and TPHs at one moment.
pub(crate) struct SuperVersion {
    pub(crate) mem: Arc<MemTable>,
    /// Newest first.
    pub(crate) imms: Vec<Arc<MemTable>>,
    pub(crate) version: Arc<Version>,
}

/// Mutable state, under `Inner::state`.
pub(crate) struct State {
    pub(crate) mem: Arc<MemTable>,
    /// Frozen memtables, oldest first.
    pub(crate) imms: VecDeque<Arc<MemTable>>,
    pub(crate) versions: Versions,
    /// What the running jobs own.
    pub(crate) running: crate::compaction::Running,
    /// The pins and parked ends of running push-downs.
    pub(crate) push_downs: push_down::PushDowns,
    /// The oldest frozen memtables a running flush writes out.
    pub(crate) flushing_memtables: usize,
    /// When the running flush started, and how long flushes take.
    pub(crate) flush_eta: job_eta::JobEta,
    /// When the running level-0 compaction started, and how long they
    /// take a level-0 TPH.
    pub(crate) level0_eta: job_eta::JobEta,
    /// Jobs started and not ended, parked push-downs included.
    pub(crate) running_jobs: usize,
    /// Set by `compact_range` so that no job starts while it works.
    pub(crate) manual: bool,
    /// Once set, writes fail with [`Error::Poisoned`].
    pub(crate) bg_error: Option<String>,
    /// Jobs failing for lack of space, and when they retry.
    pub(crate) space: OutOfSpace,
    /// The writes the scheduler has seen, for low-priority compactions.
    pub(crate) writes_seen: jobs::priority::WritesSeen,
    /// Files the last applied edit made obsolete. They are deleted once the
    /// next edit is durable: a crash can tear only the last MANIFEST record,
    /// and then the version before it must still have all its files.
    pub(crate) deferred: Deferred,
}

/// Deletions waiting for the next durable edit.
#[derive(Default)]
pub(crate) struct Deferred {
    pub(crate) pieces: Vec<Arc<crate::tph::PieceFile>>,
    /// WALs below this number.
    pub(crate) wals_below: Option<u64>,
}

impl Deferred {
    pub(crate) fn is_empty(&self) -> bool {
        self.pieces.is_empty() && self.wals_below.is_none()
    }
}

/// The versions of a writable database, or the one of a read-only one.
pub(crate) enum Versions {
    Writable(VersionSet),
    ReadOnly(Arc<Version>),
}

impl Versions {
    /// The version set, when the database is writable.
    pub(crate) fn writable(&mut self) -> Option<&mut VersionSet> {
        match self {
            Versions::Writable(vs) => Some(vs),
            Versions::ReadOnly(_) => None,
        }
    }
}

impl State {
    pub(crate) fn current(&self) -> &Arc<Version> {
        match &self.versions {
            Versions::Writable(vs) => &vs.current,
            Versions::ReadOnly(v) => v,
        }
    }
}

pub(crate) struct Inner {
    pub(crate) dir: PathBuf,
    pub(crate) fs: Arc<dyn FileSystem>,
    pub(crate) io: Arc<IoCounts>,
    pub(crate) opts: Options,
    /// What to compact when, from `opts`.
    pub(crate) policy: crate::compaction::Policy,
    pub(crate) piece_options: crate::piece::PieceOptions,
    pub(crate) piece_reads: crate::tph::PieceReads,
    pub(crate) read_only: bool,
    /// Released at shutdown, not when the last `Arc` goes: a job's thread
    /// may hold one a moment longer.
    lock: Mutex<Option<Box<dyn FileLock>>>,
    pub(crate) queue: Mutex<WriteQueue>,
    /// The WAL; held by a write group's leader for the whole group.
    pub(crate) wal: Mutex<WalWriter>,
    pub(crate) state: Mutex<State>,
    /// Signaled when a job finishes or the state changes.
    pub(crate) bg_cv: Condvar,
    pub(crate) sv: ArcSwap<SuperVersion>,
    /// Largest sequence number visible to readers.
    pub(crate) visible_seq: AtomicU64,
    /// WALs numbered below this hold only flushed writes: nothing needs
    /// them synced (the MANIFEST's log number).
    pub(crate) wals_flushed_below: AtomicU64,
    pub(crate) stats: Stats,
    /// Pacing of writes while level 0 is past its slowdown trigger; taken
    /// with the WAL lock held.
    pub(crate) write_delay: Mutex<write_delay::WriteDelay>,
    /// The running flush's parts done, for its end's estimate.
    pub(crate) flush_progress: job_eta::JobProgress,
    /// The running level-0 compaction's parts done, likewise.
    pub(crate) level0_progress: job_eta::JobProgress,
    pub(crate) pool: rayon::ThreadPool,
    /// With `CompactionPriority::LowWithoutWrites`, the compactions that
    /// start once writes stopped run here instead.
    pub(crate) low_priority: Option<jobs::priority::LowPriority>,
    /// Flushes run here, never queued behind a long compaction on `pool`:
    /// writers wait for flushes when frozen memtables pile up.
    pub(crate) flush_pool: rayon::ThreadPool,
    /// Threads for the parallel reads of scans; only for read modes that
    /// block on the device (with mmap, pages are mostly in memory).
    pub(crate) io_pool: Option<Arc<rayon::ThreadPool>>,
    pub(crate) shutting_down: AtomicBool,
    /// Syncs the WAL on an interval and wakes retries; writable only.
    housekeeper: Mutex<Option<JoinHandle<()>>>,
    /// Held through a manual compaction: two at once would merge the same
    /// TPHs from the same version, and the second result would drop the
    /// first's writes.
    pub(crate) manual_compaction: Mutex<()>,
    /// Flushed memtables, which snapshots and iterators may still hold.
    pub(crate) flushed_memtables: Mutex<Vec<std::sync::Weak<MemTable>>>,
    /// Last: waits, once the pools above are dropped, for their threads.
    _end_of_pools: pool_threads::EndOfPools,
}

impl Inner {
    /// Publishes the current memtables and version to readers.
    pub(crate) fn install_super_version(&self, st: &State) {
        self.sv.store(Arc::new(SuperVersion {
            mem: st.mem.clone(),
            imms: st.imms.iter().rev().cloned().collect(),
            version: st.current().clone(),
        }));
    }

    /// A super-version and the sequence number to read it at, from the
    /// same moment: nothing in the super-version's TPHs is newer than the
    /// sequence, and no write up to it lives in a newer memtable. A memtable
    /// switch or flush in between changes the super-version; then retry.
    pub(crate) fn read_view(&self) -> (Arc<SuperVersion>, u64) {
        loop {
            let sv = self.sv.load_full();
            let seq = self.visible_seq.load(Ordering::Acquire);
            if Arc::ptr_eq(&sv, &self.sv.load()) {
                return (sv, seq);
            }
        }
    }

    /// Stops writes after an error whose effect on disk is unknown.
    pub(crate) fn poison(&self, st: &mut State, e: &Error) {
        if st.bg_error.is_none() {
            st.bg_error = Some(e.to_string());
        }
        self.bg_cv.notify_all();
    }

    fn shutdown(&self) -> Result<()> {
        if self.shutting_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        {
            let mut st = self.state.lock();
            while st.running_jobs > 0 {
                self.bg_cv.wait(&mut st);
            }
        }
        self.bg_cv.notify_all();
        if let Some(t) = self.housekeeper.lock().take() {
            let _ = t.join();
        }
        let bg_error = {
            let mut st = self.state.lock();
            // A cleanly closed database's CURRENT records its MANIFEST's
            // full length: the next open checks every edit is there.
            if st.bg_error.is_none() {
                if let Some(Err(e)) = st.versions.writable().map(|v| v.record_manifest_length()) {
                    self.poison(&mut st, &e);
                }
            }
            st.bg_error.clone()
        };
        let result = match bg_error {
            // Writes stopped after an error: say so, as the last chance the
            // caller has to hear it.
            Some(e) => Err(Error::Poisoned(e)),
            None if self.read_only => Ok(()),
            None => {
                let flushed_below = self.wals_flushed_below.load(Ordering::Acquire);
                self.wal.lock().sync(flushed_below)
            }
        };
        self.lock.lock().take();
        result
    }
}

/// An open database. `Send + Sync`: share it between threads with an `Arc`
/// or by reference; every method takes `&self`.
pub struct DB {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for DB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DB")
            .field("path", &self.inner.dir)
            .finish_non_exhaustive()
    }
}

impl DB {
    /// Opens (or creates) the database in `path`.
    pub fn open(opts: &Options, path: impl AsRef<Path>) -> Result<DB> {
        Ok(DB {
            inner: open::open(opts, path.as_ref(), false)?,
        })
    }

    /// Opens with default options, creating the database if missing.
    pub fn open_default(path: impl AsRef<Path>) -> Result<DB> {
        DB::open(&Options::default(), path)
    }

    /// Opens an existing database for reading only. Many processes may do
    /// so at once as long as none has it open for writing. The WAL is
    /// replayed into memory; nothing in the directory changes.
    pub fn open_for_read_only(opts: &Options, path: impl AsRef<Path>) -> Result<DB> {
        Ok(DB {
            inner: open::open(opts, path.as_ref(), true)?,
        })
    }

    /// Deletes the database in `path` and its directory.
    pub fn destroy(opts: &Options, path: impl AsRef<Path>) -> Result<()> {
        open::destroy(opts, path.as_ref())
    }

    /// Checks every checksum and index invariant of the database in
    /// `path`, file by file, without changing anything. Takes a shared
    /// lock: it runs beside read-only opens, not beside a writer.
    pub fn verify(opts: &Options, path: impl AsRef<Path>) -> Result<VerifyReport> {
        repair::verify(opts, path.as_ref())
    }

    /// Salvages every intact entry of the database in `path` (pieces and
    /// WALs; the newest version of each key wins) into a new, consistent
    /// database in its place, and moves the old files to `path/lost/`.
    /// A key whose newest version was in a damaged block comes back with
    /// an older version, or not at all; a deleted key whose tombstone was
    /// damaged can come back. The report lists what was lost.
    pub fn repair(opts: &Options, path: impl AsRef<Path>) -> Result<RepairReport> {
        repair::repair(opts, path.as_ref())
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.put_opt(key, value, &WriteOptions::default())
    }

    /// [`DB::put`] with write options.
    pub fn put_opt(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        opts: &WriteOptions,
    ) -> Result<()> {
        let mut b = WriteBatch::new();
        b.put(key, value);
        self.write_opt(b, opts)
    }

    /// Removes `key`.
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.delete_opt(key, &WriteOptions::default())
    }

    /// [`DB::delete`] with write options.
    pub fn delete_opt(&self, key: impl AsRef<[u8]>, opts: &WriteOptions) -> Result<()> {
        let mut b = WriteBatch::new();
        b.delete(key);
        self.write_opt(b, opts)
    }

    /// Applies a batch atomically.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        self.write_opt(batch, &WriteOptions::default())
    }

    /// [`DB::write`] with write options.
    pub fn write_opt(&self, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        self.inner.write(batch, opts)
    }

    /// A consistent read-only view that later writes do not change.
    pub fn snapshot(&self) -> Snapshot<'_> {
        Snapshot::new(&self.inner)
    }

    /// A snapshot that borrows nothing from the database: it holds what it
    /// reads itself, and stays readable after the `DB` is closed. For
    /// bindings to other languages, whose objects cannot carry a Rust
    /// lifetime.
    pub fn snapshot_unbound(&self) -> Snapshot<'static> {
        Snapshot::new(&self.inner)
    }

    /// Iterates from `mode`'s position; see [`IteratorMode`].
    pub fn iterator(&self, mode: IteratorMode<'_>) -> DBIterator<'_> {
        self.iterator_opt(mode, ReadOptions::default())
    }

    /// [`DB::iterator`] with read options (snapshot, bounds).
    pub fn iterator_opt<'a>(
        &'a self,
        mode: IteratorMode<'_>,
        opts: ReadOptions<'a>,
    ) -> DBIterator<'a> {
        DBIterator::new(self.raw_iterator_opt(opts), mode)
    }

    /// Iterates over the keys starting with `prefix`, in order.
    pub fn prefix_iterator<'a>(&'a self, prefix: impl AsRef<[u8]>) -> DBIterator<'a> {
        let prefix = prefix.as_ref().to_vec();
        let (lower_bound, upper_bound) = iter::prefix_bounds(None, None, Some(&prefix));
        let opts = ReadOptions {
            lower_bound,
            upper_bound,
            ..ReadOptions::default()
        };
        DBIterator::new(
            self.raw_iterator_opt(opts),
            IteratorMode::From(&prefix, Direction::Forward),
        )
    }

    /// A cursor with explicit seeks and steps.
    pub fn raw_iterator(&self) -> DBRawIterator<'_> {
        self.raw_iterator_opt(ReadOptions::default())
    }

    /// [`DB::raw_iterator`] with read options.
    pub fn raw_iterator_opt<'a>(&'a self, opts: ReadOptions<'a>) -> DBRawIterator<'a> {
        let (sv, seq) = match opts.snapshot {
            Some(s) => (s.sv.clone(), s.seq),
            None => self.inner.read_view(),
        };
        DBRawIterator::new(&sv, seq, self.inner.io_pool.clone(), opts)
    }

    /// A cursor over the latest state that borrows nothing from the
    /// database: it holds what it reads itself, and stays valid after the
    /// `DB` is closed or dropped. For bindings to other languages, whose
    /// objects cannot carry a Rust lifetime.
    pub fn raw_iterator_unbound(
        &self,
        lower_bound: Option<Vec<u8>>,
        upper_bound: Option<Vec<u8>>,
    ) -> DBRawIterator<'static> {
        let (sv, seq) = self.inner.read_view();
        let opts = ReadOptions {
            snapshot: None,
            lower_bound,
            upper_bound,
        };
        DBRawIterator::new(&sv, seq, self.inner.io_pool.clone(), opts)
    }

    /// Flushes the memtables to TPHs and waits for it.
    pub fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    /// Flushes, then compacts everything into the bottom level, folding each
    /// TPH into one piece. The range is accepted for API compatibility: keys
    /// are spread over hash ranges, so a key range touches every TPH.
    pub fn compact_range(&self, _start: Option<&[u8]>, _end: Option<&[u8]>) -> Result<()> {
        self.inner.compact_all()
    }

    /// Waits until no flush or compaction is running or due.
    pub fn wait_for_compactions(&self) -> Result<()> {
        self.inner.wait_idle()
    }

    /// A loader that writes many entries into TPHs directly, without the
    /// WAL or a memtable, several times faster than `put` (see
    /// [`BulkLoader`]). Entries are sorted in memory in chunks of
    /// `write_buffer_bytes`, at most 1 GiB (two at most in memory: one
    /// filling, one being written); each chunk is durable once written and
    /// newer than every write before it. A load that fails part way leaves
    /// the chunks before the failure in place. Writes from other threads
    /// wait while a chunk is written.
    pub fn bulk_loader(&self) -> BulkLoader<'_> {
        BulkLoader::new(self)
    }

    /// Loads `entries` with a [`DB::bulk_loader`]; a later value of a key
    /// wins.
    pub fn ingest<K: AsRef<[u8]>, V: AsRef<[u8]>>(
        &self,
        entries: impl IntoIterator<Item = (K, V)>,
    ) -> Result<IngestReport> {
        let mut loader = self.bulk_loader();
        for (k, v) in entries {
            loader.put(k, v)?;
        }
        loader.finish()
    }

    /// Makes a consistent copy of the database in `dir`, which must not
    /// exist, while it stays open for reads and writes: the memtables are
    /// flushed, then the pieces of the current version are hard-linked
    /// (copied where links are impossible) and a MANIFEST naming them is
    /// written. The copy holds every write acknowledged before the call and
    /// opens as a database of its own.
    pub fn checkpoint(&self, dir: impl AsRef<Path>) -> Result<()> {
        self.inner.checkpoint(dir.as_ref())
    }

    /// Statistics, typed.
    pub fn stats(&self) -> DBStats {
        self.inner.collect_stats()
    }

    /// A named property: `tphdb.stats` (a report), `tphdb.levelstats`,
    /// `tphdb.num-files-at-level<N>`, `tphdb.estimate-num-keys`,
    /// `tphdb.index-memory-bytes`, `tphdb.cur-size-all-mem-tables`,
    /// `tphdb.num-immutable-mem-table`, `tphdb.size-all-mem-tables` (with
    /// the flushed memtables snapshots and iterators still hold),
    /// `tphdb.compaction-pending` (1 if a flush or compaction is due and
    /// not started) and `tphdb.num-running-jobs` (flushes and compactions
    /// running).
    pub fn property_value(&self, name: &str) -> Result<Option<String>> {
        Ok(self.inner.property(name))
    }

    /// Waits for background work, syncs the WAL and releases the database.
    /// Its background threads have ended when it returns, as when the
    /// database is dropped; only the scan threads of a read mode that
    /// blocks on the device may end a moment later.
    pub fn close(self) -> Result<()> {
        self.inner.shutdown()
    }
}

// Shared between threads by design.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<DB>();
};

impl Drop for DB {
    fn drop(&mut self) {
        let _ = self.inner.shutdown();
        // A job that just ended may still hold the database for a moment,
        // and the last to let go drops the pools: let it be this thread,
        // which then waits for the pools' threads (`pool_threads`).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while Arc::strong_count(&self.inner) > 1 && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
    }
}
