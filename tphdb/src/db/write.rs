//! The write path: group commit into the WAL and the memtable.
//!
//! Writers queue up; the writer at the front becomes the leader, takes the
//! batches of the writers behind it (up to 1 MiB), writes them as one WAL
//! record (synced if any of them asked), inserts them into the memtable and
//! wakes the others. Sequence numbers are assigned by the leader, so a batch
//! is visible all at once and the WAL holds batches in sequence order.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Condvar;

use super::stats::{Pacer, Stall};
use super::write_delay::{MemtablePace, PacedBy};
use super::{job_eta, write_delay, Inner, SyncPolicy, WriteOptions};
use crate::batch::WriteBatch;
use crate::compaction;
use crate::error::{Error, Result};
use crate::filename::{path, wal_name};
use crate::log::LogWriter;
use crate::memtable::MemTable;

/// A group takes batches up to this many bytes.
const MAX_GROUP_BYTES: usize = 1 << 20;

/// The WAL and what goes with it; the leader of a write group holds it.
pub(crate) struct WalWriter {
    /// `None` for a read-only database.
    pub(crate) log: Option<LogWriter>,
    pub(crate) number: u64,
    pub(crate) mem: Arc<MemTable>,
    /// Last sequence number assigned.
    pub(crate) last_seq: u64,
    /// Last sequence number written to a WAL (writes that skip the WAL
    /// take sequence numbers too): what a new WAL's header says.
    pub(crate) last_logged_seq: u64,
    /// Records appended to the current WAL since it was last synced.
    pub(crate) dirty: bool,
    /// Earlier WALs, oldest first, that the writer moved past without
    /// syncing: a sync syncs them first, and those whose memtables are
    /// flushed are dropped. Not syncing at every memtable switch lets a WAL
    /// be deleted before it is written back, so in a fill it never reaches
    /// the device (as RocksDB's).
    pub(crate) older: Vec<OlderWal>,
}

/// A WAL the writer moved past while it held unsynced records.
pub(crate) struct OlderWal {
    number: u64,
    log: LogWriter,
}

impl WalWriter {
    /// A writer appending to WAL `number` (none: a read-only database),
    /// whose header it writes.
    pub(crate) fn new(
        log: Option<LogWriter>,
        number: u64,
        mem: Arc<MemTable>,
        last_seq: u64,
    ) -> Result<WalWriter> {
        let mut w = WalWriter {
            dirty: false,
            log,
            number,
            mem,
            last_seq,
            last_logged_seq: last_seq,
            older: Vec::new(),
        };
        if let Some(log) = &mut w.log {
            write_header(log, last_seq)?;
        }
        Ok(w)
    }

    /// Makes every logged write durable: first the earlier WALs not yet
    /// synced (dropping those numbered below `flushed_below`, whose
    /// memtables are flushed), then the current one.
    pub(crate) fn sync(&mut self, flushed_below: u64) -> Result<()> {
        self.older.retain(|w| w.number >= flushed_below);
        while let Some(w) = self.older.first_mut() {
            w.log.sync()?;
            self.older.remove(0);
        }
        if let (Some(log), true) = (&mut self.log, self.dirty) {
            log.sync()?;
            self.dirty = false;
        }
        Ok(())
    }

    /// Moves to WAL `number`, whose header `log` holds, keeping the current
    /// one to sync later if it holds unsynced records.
    fn start_next(&mut self, number: u64, log: LogWriter, flushed_below: u64) {
        let old = self.log.replace(log);
        let old_number = std::mem::replace(&mut self.number, number);
        let was_dirty = std::mem::replace(&mut self.dirty, false);
        if let (Some(log), true) = (old, was_dirty) {
            self.older.push(OlderWal {
                number: old_number,
                log,
            });
        }
        self.older.retain(|w| w.number >= flushed_below);
    }
}

/// Writes and syncs the first record of a WAL: an empty batch at the last
/// sequence number logged before it, so that replay can tell an earlier
/// WAL a crash cut short (see `replay::replay_wal`). Synced, so that a crash
/// cannot take it while keeping later WALs: it is what tells replay where
/// this WAL began even when a crash cut every earlier one.
fn write_header(log: &mut LogWriter, last_logged_seq: u64) -> Result<()> {
    log.add_record(WriteBatch::new().encode_with_seq(last_logged_seq))?;
    log.sync()
}

struct Pending {
    id: u64,
    batch: WriteBatch,
    sync: bool,
    no_wal: bool,
    cv: Arc<Condvar>,
}

/// Writers waiting for a leader, and the results leaders hand back.
#[derive(Default)]
pub(crate) struct WriteQueue {
    pending: VecDeque<Pending>,
    done: HashMap<u64, Result<()>>,
    next_id: u64,
    leader_active: bool,
}

impl Inner {
    pub(crate) fn write(self: &Arc<Self>, batch: WriteBatch, opts: &WriteOptions) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly("opened with open_for_read_only".into()));
        }
        batch.validate()?;
        if batch.is_empty() {
            return Ok(());
        }
        let sync = opts.sync || self.opts.sync_policy == SyncPolicy::EveryWrite;
        let cv = Arc::new(Condvar::new());
        let mut q = self.queue.lock();
        let id = q.next_id;
        q.next_id += 1;
        q.pending.push_back(Pending {
            id,
            batch,
            sync,
            no_wal: opts.disable_wal,
            cv: cv.clone(),
        });
        loop {
            if let Some(r) = q.done.remove(&id) {
                return r;
            }
            if !q.leader_active && q.pending.front().is_some_and(|p| p.id == id) {
                break;
            }
            cv.wait(&mut q);
        }

        // This writer leads: take the group behind it.
        q.leader_active = true;
        let first = q.pending.pop_front().expect("the leader is queued");
        let (mut batch, mut sync, no_wal) = (first.batch, first.sync, first.no_wal);
        let mut members = Vec::new();
        while let Some(p) = q.pending.front() {
            if p.no_wal != no_wal
                || batch.size_in_bytes() + p.batch.size_in_bytes() > MAX_GROUP_BYTES
            {
                break;
            }
            let p = q.pending.pop_front().expect("front exists");
            batch.append(&p.batch);
            sync |= p.sync;
            members.push((p.id, p.cv));
        }
        drop(q);

        let result = self.write_group(batch, sync, no_wal);

        let mut q = self.queue.lock();
        for (id, cv) in members {
            q.done.insert(id, result.clone());
            cv.notify_one();
        }
        q.leader_active = false;
        if let Some(front) = q.pending.front() {
            front.cv.notify_one();
        }
        result
    }

    fn write_group(
        self: &Arc<Self>,
        mut batch: WriteBatch,
        sync: bool,
        no_wal: bool,
    ) -> Result<()> {
        let mut wal = self.wal.lock();
        self.make_room_for_write(&mut wal, batch.size_in_bytes() as u64, false)?;
        let seq = wal.last_seq + 1;
        let count = batch.len() as u64;
        if !no_wal {
            let log = wal.log.as_mut().expect("a writable database has a WAL");
            let record = batch.encode_with_seq(seq);
            let len = record.len() as u64;
            let file_len = log.len();
            if let Err(e) = log.add_record(record) {
                // Out of space with the partial record cut off, the WAL ends
                // in the last acknowledged write as before: writing goes on
                // in it once there is space. Anything else leaves its end
                // unknown.
                if !(e.is_no_space() && log.ends_cleanly()) {
                    let mut st = self.state.lock();
                    self.poison(&mut st, &e);
                }
                return Err(e);
            }
            self.stats
                .wal_file_bytes
                .fetch_add(log.len() - file_len, Ordering::Relaxed);
            self.stats.wal_bytes.fetch_add(len, Ordering::Relaxed);
            wal.dirty = true;
            wal.last_logged_seq = seq + count - 1;
            if sync {
                // After a failed sync the page cache may have dropped the
                // data: no later write may be acknowledged.
                let flushed_below = self.wals_flushed_below.load(Ordering::Acquire);
                if let Err(e) = wal.sync(flushed_below) {
                    let mut st = self.state.lock();
                    self.poison(&mut st, &e);
                    return Err(e);
                }
                self.stats.wal_syncs.fetch_add(1, Ordering::Relaxed);
            }
        }
        let user_bytes = wal.mem.insert_batch(seq, &batch);
        debug_assert!(count > 0 && seq > self.visible_seq.load(Ordering::Acquire));
        wal.last_seq = seq + count - 1;
        self.visible_seq.store(wal.last_seq, Ordering::Release);
        self.stats
            .user_bytes_written
            .fetch_add(user_bytes, Ordering::Relaxed);
        self.stats.writes.fetch_add(count, Ordering::Relaxed);
        Ok(())
    }

    /// Waits while flushes or level 0 fall too far behind (counting the
    /// stall), paces a write of `bytes` while level 0 is past its slowdown
    /// trigger, and freezes the memtable when it is full (or, with `force`,
    /// whenever it holds anything).
    pub(crate) fn make_room_for_write(
        self: &Arc<Self>,
        wal: &mut WalWriter,
        bytes: u64,
        force: bool,
    ) -> Result<()> {
        let opts = &self.opts;
        let mut slowed = false;
        let mut space = super::SpaceWait::default();
        loop {
            let mut st = self.state.lock();
            if let Some(e) = &st.bg_error {
                return Err(Error::Poisoned(e.clone()));
            }
            let l0 = st.current().l0.len();
            let max_imms = opts.max_immutable_memtables.max(1);
            let active_bytes = wal.mem.memory_bytes();
            let full = active_bytes >= opts.write_buffer_bytes;
            let switch = full || (force && !wal.mem.is_empty());
            // Frozen memtables stop writes only when the active one must be
            // frozen too (RocksDB's `max_write_buffer_number`): until then
            // writes go on into it while they flush.
            let memtables_full = switch && st.imms.len() >= max_imms;
            if memtables_full || (!opts.one_level && l0 >= opts.l0_stop_trigger) {
                // Waiting for jobs that cannot get space would never end.
                space.check(&st.space)?;
                let t = Instant::now();
                self.stats.writers_stalled.fetch_add(1, Ordering::Relaxed);
                self.maybe_schedule(&mut st);
                self.bg_cv.wait_for(&mut st, Duration::from_millis(100));
                self.stats.writers_stalled.fetch_sub(1, Ordering::Relaxed);
                let cause = match memtables_full {
                    true => Stall::Memtables,
                    false => Stall::Level0,
                };
                self.stats.add_stall(cause, t.elapsed());
                continue;
            }
            if !slowed {
                slowed = true;
                // Frozen memtables the running flush does not hold.
                let waiting = st.imms.len().saturating_sub(st.flushing_memtables);
                let memtable = self.memtable_pace(&st, active_bytes, max_imms, waiting > 0);
                let (jobs, near_stop, level0) = if opts.one_level {
                    let due =
                        compaction::level1_due(st.current(), opts.tph_target_bytes, &st.running);
                    let backlog =
                        compaction::one_level_backlog(waiting, due, opts.background_threads);
                    (backlog, st.imms.len() >= max_imms, None)
                } else {
                    let backlog = (l0 >= opts.l0_slowdown_trigger).then_some(l0);
                    let near_stop = l0 + 1 >= opts.l0_stop_trigger;
                    // The running level-0 compaction's end, when known,
                    // paces writes in place of the backlog's steps.
                    match backlog.and_then(|_| self.level0_fill_rate(&st, l0, active_bytes)) {
                        Some(rate) if !near_stop => (None, false, Some(rate)),
                        _ => (backlog, near_stop, None),
                    }
                };
                let (wait, paced_by) = {
                    let mut delay = self.write_delay.lock();
                    let now = Instant::now();
                    let wait = delay.delay(jobs, near_stop, memtable, level0, bytes, now);
                    (wait, delay.paced_by())
                };
                if !wait.is_zero() {
                    drop(st);
                    self.stats.writers_stalled.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(wait);
                    self.stats.writers_stalled.fetch_sub(1, Ordering::Relaxed);
                    let pacer = match paced_by {
                        PacedBy::Backlog if opts.one_level => Pacer::OneLevel,
                        PacedBy::Backlog => Pacer::Level0Steps,
                        PacedBy::Level0Compaction => Pacer::Level0Compaction,
                        PacedBy::Memtable => Pacer::Memtable,
                    };
                    self.stats.add_stall(Stall::Paced(pacer), wait);
                    continue;
                }
            }
            if !switch {
                return Ok(());
            }
            if let Err(e) = self.switch_memtable(&mut st, wal) {
                if !e.is_no_space() {
                    self.poison(&mut st, &e);
                }
                return Err(e);
            }
            return Ok(());
        }
    }

    /// How the active memtable, `active_bytes` full, paces writes: while
    /// all `max_imms` frozen slots are taken, it fills no faster than the
    /// flush that frees one is expected to end (`waiting`: some frozen
    /// memtable waits for the flush after the running one), or when that is
    /// not known, its last quarter is paced in steps.
    fn memtable_pace(
        &self,
        st: &super::State,
        active_bytes: usize,
        max_imms: usize,
        waiting: bool,
    ) -> MemtablePace {
        let opts = &self.opts;
        if st.imms.len() < max_imms {
            return MemtablePace::Steps(0);
        }
        let left = st
            .flush_eta
            .left(&self.flush_progress, waiting, Instant::now());
        match left {
            Some(left) => {
                let room = opts.write_buffer_bytes.saturating_sub(active_bytes);
                MemtablePace::Until(job_eta::fill_rate(room, left))
            }
            None => MemtablePace::Steps(write_delay::memtable_backlog(
                active_bytes,
                opts.write_buffer_bytes,
                st.imms.len(),
                max_imms,
            )),
        }
    }

    /// The rate in bytes a second at which writes fill the memtables so
    /// that level 0, `l0` TPHs deep, is one short of its stop trigger no
    /// sooner than the running level-0 compaction ends: a pace that never
    /// stops writes. The backlog's steps slowed writes by 0.8 a TPH however
    /// soon the compaction would end, to 0.41 of their rate 15 TPHs deep.
    /// `None` when no level-0 compaction runs, nothing says when it ends,
    /// or level 0 is that deep already.
    fn level0_fill_rate(&self, st: &super::State, l0: usize, active_bytes: usize) -> Option<f64> {
        let opts = &self.opts;
        let left = st
            .level0_eta
            .running_left(&self.level0_progress, Instant::now())?;
        let room = job_eta::level0_room(
            l0,
            st.imms.len(),
            opts.l0_stop_trigger,
            opts.write_buffer_bytes,
            active_bytes,
        )?;
        Some(job_eta::fill_rate(room, left))
    }

    /// Freezes the memtable and starts a new WAL. The old WAL is not synced
    /// (a later sync syncs it first, if it is still needed); the new one's
    /// header says where the old one ended, so that replay stops at an old
    /// WAL a crash cut short.
    fn switch_memtable(self: &Arc<Self>, st: &mut super::State, wal: &mut WalWriter) -> Result<()> {
        let number = st.versions.writable().expect("writable").new_file_number();
        let wal_path = path(&self.dir, &wal_name(number));
        let mut log = LogWriter::new(self.fs.create(&wal_path)?, 0);
        let started = self
            .fs
            .sync_dir(&self.dir)
            .and_then(|()| write_header(&mut log, wal.last_logged_seq));
        if let Err(e) = started {
            drop(log);
            let _ = self.fs.remove(&wal_path);
            return Err(e);
        }
        self.stats
            .wal_file_bytes
            .fetch_add(log.len(), Ordering::Relaxed);
        let flushed_below = self.wals_flushed_below.load(Ordering::Acquire);
        wal.start_next(number, log, flushed_below);
        let mem = Arc::new(self.opts.new_memtable(number));
        st.imms
            .push_back(std::mem::replace(&mut st.mem, mem.clone()));
        wal.mem = mem;
        self.install_super_version(st);
        self.maybe_schedule(st);
        Ok(())
    }

    /// Freezes the memtable and waits until every frozen memtable up to it
    /// is flushed.
    pub(crate) fn flush(self: &Arc<Self>) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly("opened with open_for_read_only".into()));
        }
        let target = {
            let mut wal = self.wal.lock();
            self.make_room_for_write(&mut wal, 0, true)?;
            wal.number
        };
        let mut st = self.state.lock();
        let mut space = super::SpaceWait::default();
        loop {
            if let Some(e) = &st.bg_error {
                return Err(Error::Poisoned(e.clone()));
            }
            if st.imms.iter().all(|m| m.wal_number() >= target) {
                return Ok(());
            }
            space.check(&st.space)?;
            self.maybe_schedule(&mut st);
            self.bg_cv.wait_for(&mut st, Duration::from_millis(100));
        }
    }

    /// The body of the housekeeping thread of a writable database: it syncs
    /// the WAL every `sync_interval` (with [`SyncPolicy::IntervalMs`]) and
    /// starts the jobs whose retry time has come. Without it a job that ran
    /// out of space would wait for the next write that needs it.
    pub(crate) fn housekeeping_loop(self: Arc<Self>, sync_interval: Option<Duration>) {
        let mut next_sync = sync_interval.map(|i| Instant::now() + i);
        loop {
            {
                let mut st = self.state.lock();
                loop {
                    if self.shutting_down.load(Ordering::Acquire) {
                        return;
                    }
                    let now = Instant::now();
                    if st.space.retry_at.is_some_and(|t| t <= now) {
                        self.maybe_schedule(&mut st);
                    }
                    if next_sync.is_some_and(|t| t <= now) {
                        break;
                    }
                    // A retry that could not start (a manual compaction
                    // runs, or writes stopped) waits for the next signal.
                    let retry = st.space.retry_at.filter(|&t| t > now);
                    match retry.into_iter().chain(next_sync).min() {
                        Some(t) => {
                            self.bg_cv.wait_until(&mut st, t);
                        }
                        None => self.bg_cv.wait(&mut st),
                    }
                }
            }
            // Outside the state lock: the WAL lock comes first.
            next_sync = sync_interval.map(|i| Instant::now() + i);
            let flushed_below = self.wals_flushed_below.load(Ordering::Acquire);
            let r = self.wal.lock().sync(flushed_below);
            if let Err(e) = r {
                let mut st = self.state.lock();
                self.poison(&mut st, &e);
                return;
            }
            self.stats.wal_syncs.fetch_add(1, Ordering::Relaxed);
        }
    }
}
