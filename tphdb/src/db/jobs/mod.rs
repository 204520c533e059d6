//! Background jobs: flushes and compactions, their scheduling and their
//! retries.
//!
//! What runs next is [`crate::compaction::pick`]'s choice. Compactions run on
//! a fixed-size thread pool, flushes on a thread of their own (see
//! `docs/design.md`). Jobs on disjoint subtrees run in parallel, and within
//! a job the merges into different children run in parallel too. A job that
//! runs out of space installs nothing and is retried after a backoff, woken
//! by the housekeeping thread.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::priority::Start;
use super::delta::{memtables_delta, memtables_flush_entries};
use super::install::Change;
use super::passes::merge_memory;
use super::stats::HeldBytes;
use super::{Inner, State};
use crate::compaction::{self, Shape, TphId, Work};
use crate::error::{Error, Result};
use crate::memtable::{FlushEntry, MemTable};
use crate::piece::piece_write_memory;
use crate::tph::{merge, write_level0, DeltaEntry, Hashed, Tph, Written};
use crate::version::{Version, VersionEdit};

mod context;
pub(crate) mod priority;

/// Work for the background pool.
#[derive(Debug)]
pub(crate) enum Job {
    /// Write these frozen memtables (oldest first) out.
    Flush(Vec<Arc<MemTable>>),
    /// Merge these level-0 TPHs into level 1.
    L0ToL1(Vec<u64>),
    /// Move a TPH, as it was when the job was picked, into its children.
    PushDown(TphId, Arc<Tph>),
    /// The end of a push-down that waited for a merge into its TPH (see
    /// `db/push_down.rs`).
    FinishPushDown(TphId),
    /// Fold the pieces of a TPH with the most garbage, as many as fit a
    /// job's input memory.
    Gc(TphId),
    /// Fold every piece of a bottom TPH into one (a manual compaction's
    /// last step).
    FoldAll(TphId),
}

impl Job {
    /// What the job's new data counts as.
    fn cause(&self) -> super::stats::JobCause {
        use super::stats::JobCause;
        match self {
            Job::Flush(_) => JobCause::Flush,
            Job::L0ToL1(_) => JobCause::L0Merge,
            Job::PushDown(..) | Job::FinishPushDown(_) => JobCause::PushDown,
            Job::Gc(_) | Job::FoldAll(_) => JobCause::Gc,
        }
    }

    /// What the job owns while it runs, as the picker chose it; none for a
    /// manual one.
    fn work(&self) -> Option<Work> {
        match self {
            Job::Flush(_) => Some(Work::Flush),
            Job::L0ToL1(heads) => Some(Work::L0ToL1(heads.clone())),
            Job::PushDown(id, _) | Job::FinishPushDown(id) => Some(Work::PushDown(*id)),
            Job::Gc(id) => Some(Work::Gc(*id)),
            Job::FoldAll(_) => None,
        }
    }
}

/// How [`Inner::execute`] left a job.
pub(crate) enum Ran {
    Applied,
    /// A push-down waits for a merge into its TPH to end (see
    /// `db/push_down.rs`).
    Parked,
}

impl Inner {
    /// Starts every job that can run now.
    pub(crate) fn maybe_schedule(self: &Arc<Self>, st: &mut State) {
        if self.read_only
            || st.bg_error.is_some()
            || st.manual
            || self.shutting_down.load(Ordering::Acquire)
        {
            return;
        }
        if let Err(e) = self.maybe_deepen(st) {
            self.edit_failed(st, &e);
            return;
        }
        if st.space.retry_at.is_some_and(|t| Instant::now() < t) {
            return;
        }
        st.space.retry_at = None;
        let start = self.compaction_start(st);
        while let Some(job) = self.pick(st, start != Start::Wait) {
            st.running_jobs += 1;
            self.spawn_job(st, job, start == Start::Low);
        }
    }

    /// Where a compaction may start now (see [`priority`]).
    pub(super) fn compaction_start(&self, st: &mut State) -> Start {
        self.low_priority.as_ref().map_or(Start::Normal, |l| {
            let writes = self.stats.writes.load(Ordering::Relaxed);
            let stalled = self.stats.writers_stalled.load(Ordering::Relaxed) > 0;
            l.start(&mut st.writes_seen, writes, stalled, Instant::now())
        })
    }

    /// Runs `job` on its pool: a flush on the flush thread, a compaction on
    /// the low-priority pool if `low` (and there is one).
    pub(super) fn spawn_job(self: &Arc<Self>, st: &mut State, job: Job, low: bool) {
        let number = st.space.start();
        let inner = self.clone();
        let pool = match (&job, &self.low_priority) {
            (Job::Flush(_), _) => &self.flush_pool,
            (_, Some(l)) => {
                l.started(low);
                if low {
                    self.stats
                        .low_priority_compactions
                        .fetch_add(1, Ordering::Relaxed);
                    &l.pool
                } else {
                    &self.pool
                }
            }
            (_, None) => &self.pool,
        };
        pool.spawn(move || inner.run_job(job, number));
    }

    /// Records how many compactions hold a thread, for
    /// `DBStats::peak_running_compactions`.
    pub(super) fn note_running_compactions(&self, st: &State) {
        self.stats
            .peak_running_compactions
            .fetch_max(st.running.pool_jobs as u64, Ordering::Relaxed);
    }

    /// The shape of the current version, as the picker sees it.
    fn shape(&self, st: &State) -> Shape {
        Shape::of(st.current(), merge_memory)
    }

    /// Whether a job is waiting to run, backoff or not.
    pub(crate) fn work_due(&self, st: &State) -> bool {
        compaction::pick(&self.shape(st), st.imms.len(), &st.running, &self.policy).is_some()
    }

    /// The next job, marked as running; only a flush unless `compactions`.
    fn pick(&self, st: &mut State, compactions: bool) -> Option<Job> {
        let shape = self.shape(st);
        let work = compaction::pick(&shape, st.imms.len(), &st.running, &self.policy)?;
        if !compactions && work != Work::Flush {
            return None;
        }
        let source = match work {
            Work::PushDown(id) => Some(st.current().tph(id.level, id.partition)?.clone()),
            _ => None,
        };
        st.running.start(&work, &shape, &self.policy);
        self.note_running_compactions(st);
        Some(match work {
            Work::Flush => {
                st.flushing_memtables = st.imms.len();
                st.flush_eta.started(Instant::now(), 1);
                self.flush_progress.clear();
                Job::Flush(st.imms.iter().cloned().collect())
            }
            Work::L0ToL1(heads) => {
                st.level0_eta.started(Instant::now(), heads.len());
                self.level0_progress.clear();
                Job::L0ToL1(heads)
            }
            Work::PushDown(id) => {
                let source = source?;
                st.push_downs.start(id, &source);
                Job::PushDown(id, source)
            }
            Work::Gc(id) => Job::Gc(id),
        })
    }

    /// Opens a level below the bottom when the policy says so.
    fn maybe_deepen(&self, st: &mut State) -> Result<()> {
        if !compaction::should_deepen(&self.shape(st), &self.policy) {
            return Ok(());
        }
        let Some(vs) = st.versions.writable() else {
            return Ok(());
        };
        let edit = VersionEdit {
            depth: Some(vs.current.depth + 1),
            ..VersionEdit::default()
        };
        vs.log_and_apply(edit, &HashMap::new())?;
        self.install_super_version(st);
        Ok(())
    }

    /// Runs `job`, numbered `number` by [`super::OutOfSpace::start`].
    pub(super) fn run_job(self: Arc<Self>, job: Job, number: u64) {
        let start = Instant::now();
        let result = self.execute(&job, false);
        if let Ok(Ran::Parked) = result {
            // Still running: it goes on as `Job::FinishPushDown`, but its
            // thread is free.
            let micros = start.elapsed().as_micros() as u64;
            self.stats
                .compaction_micros
                .fetch_add(micros, Ordering::Relaxed);
            let mut st = self.state.lock();
            self.body_ended();
            self.resume_push_downs(&mut st);
            self.maybe_schedule(&mut st);
            return;
        }
        if let Job::Flush(mems) = &job {
            // Before the job counts as done, so that a wait for idle sees
            // the bound hold.
            self.bound_pinned_memtables(mems);
        }
        let (work, flush) = (job.work(), matches!(job, Job::Flush(_)));
        let level0 = matches!(job, Job::L0ToL1(_));
        // Likewise its inputs (a push-down's TPH): the deferred list then
        // holds the last reference to each replaced piece, and the edit
        // that releases it deletes the file before anyone sees the job end.
        drop(job);
        let mut st = self.state.lock();
        match &result {
            // Out of space: what was installed stands (each edit is a
            // whole state); retry the rest once space may be back.
            Err(e) if e.is_no_space() => st.space.failed(e, number),
            Err(e) => self.poison(&mut st, e),
            Ok(_) => st.space.succeeded(),
        }
        if flush {
            st.flushing_memtables = 0;
            st.flush_eta.ended(Instant::now(), result.is_ok());
        }
        if level0 {
            st.level0_eta.ended(Instant::now(), result.is_ok());
        }
        if let Some(work) = work {
            let fanout = st.current().layout.fanout;
            st.running.finish(&work, fanout, &self.policy);
            if let Work::PushDown(id) = work {
                st.push_downs.finish(id);
            }
        }
        self.body_ended();
        self.resume_push_downs(&mut st);
        let micros = start.elapsed().as_micros() as u64;
        if flush {
            self.stats.flush_micros.fetch_add(micros, Ordering::Relaxed);
            let slowest = &self.stats.slowest_flush_micros;
            slowest.fetch_max(micros, Ordering::Relaxed);
        } else {
            let spent = &self.stats.compaction_micros;
            spent.fetch_add(micros, Ordering::Relaxed);
        }
        st.running_jobs -= 1;
        self.maybe_schedule(&mut st);
        if st.running_jobs == 0 {
            self.release_deferred(&mut st);
        }
        drop(st);
        self.bg_cv.notify_all();
    }

    /// Counts the end of the job body on the calling thread, before the
    /// state lock that holds it is let go: the next pick sees its pool free.
    fn body_ended(&self) {
        if let Some(l) = &self.low_priority {
            l.ended(&self.pool);
        }
    }

    /// Moves the oldest flushed memtables that snapshots and iterators still
    /// pin to files (see [`MemTable::spill`]) until those left in memory
    /// take at most `pinned_memtable_bytes`. A failure (a full disk) leaves
    /// them in memory until the next flush tries again. `in_hand` are the
    /// memtables the calling flush holds, which do not count as pins.
    fn bound_pinned_memtables(&self, in_hand: &[Arc<MemTable>]) {
        let pinned: Vec<Arc<MemTable>> = {
            let mut retired = self.flushed_memtables.lock();
            retired.retain(|m| m.strong_count() > 0);
            retired
                .iter()
                .filter_map(std::sync::Weak::upgrade)
                .filter(|m| {
                    let ours = 1 + usize::from(in_hand.iter().any(|h| Arc::ptr_eq(h, m)));
                    Arc::strong_count(m) > ours && !m.is_spilled()
                })
                .collect()
        };
        let mut resident: usize = pinned.iter().map(|m| m.memory_bytes()).sum();
        // Oldest first: flushes append to `flushed_memtables`.
        for m in pinned {
            if resident <= self.opts.pinned_memtable_bytes {
                break;
            }
            match self.spill_file().and_then(|f| m.spill(&f)) {
                Ok(moved) => {
                    resident -= m.memory_bytes();
                    self.stats.memtables_spilled.fetch_add(1, Ordering::Relaxed);
                    self.stats
                        .memtable_spilled_bytes
                        .fetch_add(moved, Ordering::Relaxed);
                }
                Err(_) => {
                    self.stats
                        .memtable_spill_failures
                        .fetch_add(1, Ordering::Relaxed);
                    break;
                }
            }
        }
    }

    /// An unnamed file for a spilled memtable: in the database's directory
    /// on the real file system (it has the space the data has), elsewhere in
    /// the system's temporary directory. Unnamed, it never outlives the
    /// process, and its space returns when its mappings go.
    fn spill_file(&self) -> std::io::Result<std::fs::File> {
        if self.opts.file_system.is_none() {
            tempfile::tempfile_in(&self.dir)
        } else {
            tempfile::tempfile()
        }
    }

    /// Does a job's work and applies its result; `alone` when no other
    /// job runs (a manual compaction).
    pub(crate) fn execute(&self, job: &Job, alone: bool) -> Result<Ran> {
        // A job looks up the TPHs it reads and merges into when it needs
        // them and holds only those: a copy of the whole version, held for
        // the job's run, would keep every TPH another job replaced
        // meanwhile alive, global index and all.
        let mut change = Change::default();
        let mut flushed: &[Arc<MemTable>] = &[];
        match job {
            Job::Flush(mems) => {
                flushed = mems;
                let newest: Vec<&MemTable> = mems.iter().rev().map(|m| &**m).collect();
                if self.opts.one_level {
                    let delta = memtables_delta(&newest);
                    let _held = HeldBytes::new(&self.stats, DeltaEntry::list_memory(&delta, false));
                    let progress = Some(&self.flush_progress);
                    self.merge_into_level(
                        1,
                        Written::held(delta),
                        &[],
                        true,
                        progress,
                        &mut change,
                    )?;
                } else {
                    let entries = memtables_flush_entries(&newest);
                    let list = entries.capacity() * std::mem::size_of::<FlushEntry<'_>>();
                    let writing = piece_write_memory(entries.len(), &self.piece_options);
                    let _held = HeldBytes::new(&self.stats, list as u64 + writing);
                    self.add_level0_tph(&entries, &mut change)?;
                }
            }
            Job::L0ToL1(heads) => {
                let (inputs, all): (Vec<Arc<Tph>>, _) = {
                    let st = self.state.lock();
                    let v = st.current();
                    let inputs = v.l0.iter().filter(|t| heads.contains(&t.head_number()));
                    (inputs.cloned().collect(), 0..v.partitions(1))
                };
                let progress = Some(&self.level0_progress);
                self.merge_tphs_into_level(&inputs, 1, all, progress, &mut change)?;
                for t in &inputs {
                    change.edit.remove_l0.push(t.head_number());
                    change.retire(t);
                }
            }
            Job::PushDown(id, source) => {
                if !self.push_down(*id, source, alone, &mut change)? {
                    return Ok(Ran::Parked);
                }
            }
            Job::FinishPushDown(id) => self.finish_push_down(*id, &mut change)?,
            Job::Gc(id) | Job::FoldAll(id) => {
                let (level, p) = (id.level, id.partition);
                let (base, depth) = {
                    let st = self.state.lock();
                    (st.current().tph(level, p).cloned(), st.current().depth)
                };
                if let Some(base) = base {
                    let number = self.new_file_number()?;
                    let below = || self.current_version();
                    let mut ctx = self.merge_context(level, p, level == depth, number);
                    ctx.below = Some(&below);
                    // One merge and no delta: the job's input half holds
                    // the folded entries (a GC job picks as many as fit it,
                    // so they are held and read once).
                    ctx.fold_memory_bytes = self.job_input_bytes();
                    if matches!(job, Job::Gc(_)) {
                        ctx.gc_input_bytes = Some(self.job_input_bytes());
                    } else {
                        ctx.max_pieces = 1;
                    }
                    change.add(level, p, merge(&ctx, Some(&base), Vec::new())?);
                }
            }
        }
        self.stats.record_job(job.cause(), &change.stats);
        self.apply(change, flushed)?;
        Ok(Ran::Applied)
    }

    /// Writes `entries` (sorted by key, a version a key) as the newest
    /// level-0 TPH; nothing if there are none.
    pub(super) fn add_level0_tph<E: Hashed>(
        &self,
        entries: &[E],
        change: &mut Change,
    ) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let number = self.new_file_number()?;
        let ctx = self.merge_context(0, 0, false, number);
        let (tph, stats) = write_level0(&ctx, entries)?;
        change.edit.add_l0.push(tph.head_number());
        change.new_tphs.insert(tph.head_number(), Arc::new(tph));
        change.stats.add(&stats);
        Ok(())
    }

    /// The current version, for a moment.
    pub(super) fn current_version(&self) -> Arc<Version> {
        self.state.lock().current().clone()
    }

    /// The input one compaction may hold.
    pub(super) fn job_input_bytes(&self) -> u64 {
        self.policy.job_input_bytes
    }

    /// Waits until nothing is running and nothing is due: a job waiting
    /// for its retry after running out of space is due, and a waiter fails
    /// once a job that started after it saw the failure failed too.
    pub(crate) fn wait_idle(self: &Arc<Self>) -> Result<()> {
        let mut st = self.state.lock();
        let mut space = super::SpaceWait::default();
        loop {
            if let Some(e) = &st.bg_error {
                return Err(Error::Poisoned(e.clone()));
            }
            if self.read_only {
                return Ok(());
            }
            space.check(&st.space)?;
            self.maybe_schedule(&mut st);
            if st.running_jobs == 0 && !self.work_due(&st) {
                return Ok(());
            }
            self.bg_cv.wait_for(&mut st, Duration::from_millis(100));
        }
    }

    /// Flushes, then pushes everything to the bottom level and folds every
    /// bottom TPH into one piece, with no other job running.
    pub(crate) fn compact_all(self: &Arc<Self>) -> Result<()> {
        let _manual = self.manual_compaction.lock();
        self.flush()?;
        {
            let mut st = self.state.lock();
            st.manual = true;
            while st.running_jobs > 0 {
                self.bg_cv.wait(&mut st);
            }
        }
        let result = (|| -> Result<()> {
            let v = self.state.lock().current().clone();
            if !v.l0.is_empty() {
                let heads = v.l0.iter().map(|t| t.head_number()).collect();
                self.execute(&Job::L0ToL1(heads), true)?;
            }
            let partitions = |level: u32| -> Vec<u64> {
                self.state.lock().current().levels[level as usize - 1]
                    .keys()
                    .copied()
                    .collect()
            };
            let depth = self.state.lock().current().depth;
            for level in 1..depth {
                for partition in partitions(level) {
                    let source = self.state.lock().current().tph(level, partition).cloned();
                    if let Some(source) = source {
                        let id = TphId { level, partition };
                        self.execute(&Job::PushDown(id, source), true)?;
                    }
                }
            }
            for partition in partitions(depth) {
                let id = TphId {
                    level: depth,
                    partition,
                };
                self.execute(&Job::FoldAll(id), true)?;
            }
            Ok(())
        })();
        let mut st = self.state.lock();
        // A full disk is not fatal: each edit a step made installed a
        // whole state (a failed edit decides for itself).
        match &result {
            Err(e) if !e.is_no_space() => self.poison(&mut st, e),
            _ => {}
        }
        st.manual = false;
        self.maybe_schedule(&mut st);
        drop(st);
        self.bg_cv.notify_all();
        result
    }
}

#[cfg(test)]
mod tests;
