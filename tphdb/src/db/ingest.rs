//! Bulk loading: entries sorted in memory in bounded chunks and written
//! straight into TPHs, without the WAL or a memtable.
//!
//! Each chunk is sorted (the last value of a key wins) and merged into the
//! highest level that nothing above holds data in: into the bottom level of
//! an empty database, so a load into a fresh database is written once and
//! never compacted again until it outgrows its TPHs. A chunk is written
//! while writers wait and no background job runs, after the memtables are
//! flushed, so it is newer than every write before it and older than every
//! write after it. Its pieces are synced and named by a synced MANIFEST
//! edit before `put` or `finish` returns: a loaded chunk survives a crash,
//! a chunk still buffered does not.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rayon::slice::ParallelSliceMut;

use super::install::Change;
use super::stats::JobCause;
use super::{Inner, DB};
use crate::error::{Error, Result};
use crate::piece::check_limits;
use crate::tph::chunk::Chunk;
use crate::tph::{DeltaEntry, Written};

/// What a bulk load has written so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IngestReport {
    /// Entries handed to the loader.
    pub entries: u64,
    /// Distinct keys written (a key repeated within one chunk counts once).
    pub keys_written: u64,
    /// Chunks written, each sorted in memory and merged into TPHs.
    pub chunks: u64,
    /// Key and value bytes handed to the loader.
    pub user_bytes: u64,
}

/// Memory an entry of a chunk costs beyond its key and value: its place in
/// the chunk, then the delta entry it becomes.
const CHUNK_BYTES_PER_ENTRY: usize =
    std::mem::size_of::<Slot>() + std::mem::size_of::<DeltaEntry>();

/// An entry in a chunk's buffer.
#[derive(Clone, Copy)]
struct Slot {
    /// The key's first 8 bytes, big-endian, zero-padded: most comparisons
    /// end here, without touching the buffer.
    prefix: u64,
    start: usize,
    key_len: u32,
    value_len: u32,
}

/// Loads many entries into a database faster than `put` can: see
/// [`DB::bulk_loader`]. One chunk is sorted and written by a thread of its
/// own while the next one fills, so a load holds at most two chunks.
/// Dropped without [`BulkLoader::finish`], it waits for the chunk being
/// written; entries still buffered are not written.
pub struct BulkLoader<'a> {
    db: &'a DB,
    chunk_bytes: usize,
    data: Vec<u8>,
    slots: Vec<Slot>,
    report: IngestReport,
    /// The chunk being written while the next one fills: its distinct keys.
    writing: Option<std::thread::JoinHandle<Result<u64>>>,
}

impl std::fmt::Debug for BulkLoader<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BulkLoader")
            .field("buffered", &self.slots.len())
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

impl<'a> BulkLoader<'a> {
    pub(super) fn new(db: &'a DB) -> BulkLoader<'a> {
        // Entries lie at offsets below 4 GiB in their chunk.
        let chunk_bytes = db.inner.opts.write_buffer_bytes.clamp(4 << 10, 1 << 30);
        BulkLoader {
            db,
            chunk_bytes,
            data: Vec::new(),
            slots: Vec::new(),
            report: IngestReport::default(),
            writing: None,
        }
    }

    /// Adds `key` with `value`; a later value of the same key wins. Writes
    /// a chunk when the buffer is full.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        let (key, value) = (key.as_ref(), value.as_ref());
        check_limits(key, Some(value))?;
        let start = self.data.len();
        self.data.extend_from_slice(key);
        self.data.extend_from_slice(value);
        let mut head = [0u8; 8];
        let n = key.len().min(8);
        head[..n].copy_from_slice(&key[..n]);
        self.slots.push(Slot {
            prefix: u64::from_be_bytes(head),
            start,
            // Within the limits checked above.
            key_len: key.len() as u32,
            value_len: value.len() as u32,
        });
        self.report.entries += 1;
        self.report.user_bytes += (key.len() + value.len()) as u64;
        if self.buffered_bytes() >= self.chunk_bytes {
            self.write_chunk()?;
        }
        Ok(())
    }

    /// Writes what is buffered and reports the whole load.
    pub fn finish(mut self) -> Result<IngestReport> {
        if !self.slots.is_empty() {
            self.write_chunk()?;
        }
        self.wait_for_chunk()?;
        Ok(self.report)
    }

    /// What the load has written so far (buffered entries included in
    /// `entries` and `user_bytes` only).
    pub fn report(&self) -> IngestReport {
        self.report
    }

    fn buffered_bytes(&self) -> usize {
        self.data.len() + self.slots.len() * CHUNK_BYTES_PER_ENTRY
    }

    /// Waits for the chunk being written, if any.
    fn wait_for_chunk(&mut self) -> Result<()> {
        let Some(writing) = self.writing.take() else {
            return Ok(());
        };
        let keys = writing
            .join()
            .map_err(|_| Error::Internal("a bulk load's chunk writer panicked".into()))??;
        self.report.keys_written += keys;
        self.report.chunks += 1;
        Ok(())
    }

    /// Hands the buffer to a thread that sorts and writes it, once the
    /// chunk before it is written: chunks land in input order, and at most
    /// two are in memory.
    fn write_chunk(&mut self) -> Result<()> {
        self.wait_for_chunk()?;
        let data = Bytes::from(std::mem::take(&mut self.data));
        let slots = std::mem::take(&mut self.slots);
        let inner = self.db.inner.clone();
        let writer = std::thread::Builder::new()
            .name("tphdb-bulk-load".into())
            .spawn(move || sort_and_write(&inner, data, slots))
            .map_err(|e| Error::io("starting a bulk load's chunk writer", e))?;
        self.writing = Some(writer);
        Ok(())
    }
}

/// Sorts a chunk, keeps the last value of each key, and writes it.
fn sort_and_write(inner: &Arc<Inner>, data: Bytes, mut slots: Vec<Slot>) -> Result<u64> {
    {
        let key = |s: &Slot| &data[s.start..s.start + s.key_len as usize];
        // Equal keys stay in input order (by buffer position), so the last
        // one wins; an unstable sort is then enough, and faster.
        slots.par_sort_unstable_by(|a, b| {
            a.prefix
                .cmp(&b.prefix)
                .then_with(|| key(a).cmp(key(b)))
                .then(a.start.cmp(&b.start))
        });
        let mut unique: Vec<Slot> = Vec::with_capacity(slots.len());
        for s in slots {
            match unique.last_mut() {
                Some(last) if key(last) == key(&s) => *last = s,
                _ => unique.push(s),
            }
        }
        let keys = unique.len() as u64;
        let user_bytes: u64 = unique
            .iter()
            .map(|s| u64::from(s.key_len) + u64::from(s.value_len))
            .sum();
        let chunk = Chunk::shared(data);
        inner.ingest_chunk(keys, user_bytes, |first_seq| {
            unique
                .iter()
                .zip(first_seq..)
                .map(|(s, seq)| {
                    let off = u32::try_from(s.start).expect("entries start below 1 GiB");
                    let (key_len, value_len) = (s.key_len as usize, s.value_len as usize);
                    DeltaEntry::new(chunk.clone(), off, key_len, Some(value_len), seq)
                })
                .collect()
        })?;
        Ok(keys)
    }
}

impl Drop for BulkLoader<'_> {
    fn drop(&mut self) {
        // The database must not close under the chunk's writer.
        if let Some(writing) = self.writing.take() {
            let _ = writing.join();
        }
    }
}

impl Inner {
    /// Writes one sorted chunk of `keys` distinct keys, built by `delta`
    /// from its first sequence number, into the highest level nothing
    /// above holds data in.
    fn ingest_chunk(
        self: &Arc<Self>,
        keys: u64,
        user_bytes: u64,
        delta: impl FnOnce(u64) -> Vec<DeltaEntry>,
    ) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly("opened with open_for_read_only".into()));
        }
        // No manual compaction at the same time, and writers wait.
        let _manual = self.manual_compaction.lock();
        let mut wal = self.wal.lock();
        // Freezes a memtable holding anything; waits out a stall.
        self.make_room_for_write(&mut wal, 0, true)?;
        let number = self.stop_jobs_after_flushes()?;
        let result = (|| -> Result<()> {
            let first_seq = wal.last_seq + 1;
            let last_seq = wal.last_seq + keys;
            // Taken like writes without the WAL take them; readers see the
            // chunk only once the version holding it is installed.
            wal.last_seq = last_seq;
            self.visible_seq.store(last_seq, Ordering::Release);
            let delta = delta(first_seq);
            let version = self.state.lock().current().clone();
            let mut change = Change::default();
            if !version.l0.is_empty() {
                // Newer than all of level 0, as a flush would be.
                self.add_level0_tph(&delta, &mut change)?;
            } else {
                let level = (1..=version.depth)
                    .find(|&l| !version.levels[l as usize - 1].is_empty())
                    .unwrap_or(version.depth);
                self.merge_into_level(level, Written::held(delta), &[], false, None, &mut change)?;
            }
            self.stats.record_job(JobCause::Flush, &change.stats);
            self.apply(change, &[])
        })();
        if result.is_ok() {
            // Counted as writes; the pieces it wrote count as a flush's.
            let stats = &self.stats;
            stats
                .user_bytes_written
                .fetch_add(user_bytes, Ordering::Relaxed);
            stats.writes.fetch_add(keys, Ordering::Relaxed);
        }
        drop(wal);
        self.resume_jobs(&result, number);
        result
    }

    /// Waits until every frozen memtable is flushed, then keeps any job from
    /// starting and waits for the running ones; [`Inner::resume_jobs`]
    /// undoes it. Returns the number the caller's own job has among jobs
    /// (see [`super::OutOfSpace::start`]).
    fn stop_jobs_after_flushes(self: &Arc<Self>) -> Result<u64> {
        let mut st = self.state.lock();
        let mut space = super::SpaceWait::default();
        while !st.imms.is_empty() {
            if let Some(e) = &st.bg_error {
                return Err(Error::Poisoned(e.clone()));
            }
            space.check(&st.space)?;
            self.maybe_schedule(&mut st);
            self.bg_cv.wait_for(&mut st, Duration::from_millis(100));
        }
        st.manual = true;
        while st.running_jobs > 0 {
            self.bg_cv.wait(&mut st);
        }
        if let Some(e) = &st.bg_error {
            let e = Error::Poisoned(e.clone());
            drop(st);
            self.resume_jobs(&Ok(()), 0);
            return Err(e);
        }
        Ok(st.space.start())
    }

    /// Lets jobs run again after [`Inner::stop_jobs_after_flushes`]; a
    /// failure other than a full disk stops writes, as a failed flush does.
    fn resume_jobs(self: &Arc<Self>, result: &Result<()>, number: u64) {
        let mut st = self.state.lock();
        match result {
            Err(e) if e.is_no_space() => st.space.failed(e, number),
            Err(e) => self.poison(&mut st, e),
            Ok(()) => {}
        }
        st.manual = false;
        self.maybe_schedule(&mut st);
        if st.running_jobs == 0 {
            self.release_deferred(&mut st);
        }
        drop(st);
        self.bg_cv.notify_all();
    }
}
