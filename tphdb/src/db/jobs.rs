//! Background jobs: flushes and compactions, and their scheduling.
//!
//! Compactions run on a fixed-size thread pool, flushes on a thread of
//! their own (see `docs/design.md`). A job owns the TPHs it rewrites
//! (marked busy): a flush in one-level mode and a level-0 compaction own all
//! of level 1; pushing TPH `(i, p)` down owns it and its `fanout` children.
//! Jobs on disjoint subtrees run in parallel, and within a job the merges
//! into different children run in parallel too.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use super::delta::{memtable_delta, merge_memory, newest_first};
use super::{Inner, State};
use crate::error::{Error, Result};
use crate::filename::{parse, path, wal_name, FileKind};
use crate::memtable::MemTable;
use crate::tph::{merge, MergeContext, MergeOutcome, MergeStats, PieceFile, Tph};
use crate::version::VersionEdit;

/// Work for the background pool.
#[derive(Debug)]
pub(crate) enum Job {
    /// Write these frozen memtables (oldest first) out.
    Flush(Vec<Arc<MemTable>>),
    /// Merge these level-0 TPHs into level 1.
    L0ToL1(Vec<u64>),
    /// Move TPH `(level, partition)` into its children.
    PushDown(u32, u64),
    /// Fold every piece of a bottom TPH into one (manual compaction).
    Gc(u32, u64),
}

/// What a job changes, before it is applied.
#[derive(Default)]
pub(super) struct Change {
    edit: VersionEdit,
    new_tphs: HashMap<u64, Arc<Tph>>,
    obsolete: Vec<Arc<PieceFile>>,
    pub(super) stats: MergeStats,
}

impl Change {
    /// Records the outcome of merging into `(level, partition)`.
    pub(super) fn add(&mut self, level: u32, partition: u64, outcome: MergeOutcome) {
        let (obsolete, stats) = match outcome {
            MergeOutcome::Unchanged => return,
            MergeOutcome::Emptied { obsolete, stats } => {
                self.edit.remove.push((level, partition));
                (obsolete, stats)
            }
            MergeOutcome::Replaced {
                tph,
                obsolete,
                stats,
            } => {
                self.edit.set.push((level, partition, tph.head_number()));
                self.new_tphs.insert(tph.head_number(), Arc::from(tph));
                (obsolete, stats)
            }
        };
        self.obsolete.extend(obsolete);
        let s = &mut self.stats;
        s.bytes_written += stats.bytes_written;
        s.bytes_read += stats.bytes_read;
        s.entries_written += stats.entries_written;
        s.pieces_folded += stats.pieces_folded;
        s.pieces_dropped += stats.pieces_dropped;
        s.tombstones_dropped += stats.tombstones_dropped;
    }

    /// Every file of a TPH that leaves the version.
    fn retire(&mut self, tph: &Tph) {
        self.obsolete.extend(tph.files().cloned());
    }
}

/// Deletes the head pieces a failed job wrote for TPHs it never installed.
pub(super) fn discard(change: &Change) {
    for t in change.new_tphs.values() {
        for f in t.files() {
            if f.number() == t.head_number() {
                f.mark_obsolete();
            }
        }
    }
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
            self.poison(st, &e);
            return;
        }
        while let Some(job) = self.pick(st) {
            st.running_jobs += 1;
            let inner = self.clone();
            let pool = match job {
                Job::Flush(_) => &self.flush_pool,
                _ => &self.pool,
            };
            pool.spawn(move || inner.run_job(job));
        }
    }

    /// Whether some job owns a TPH of level 1 (a one-level flush owns all of
    /// it, marked as partition `u64::MAX`).
    fn level1_busy(st: &State) -> bool {
        st.l0_compacting || st.busy.iter().any(|k| k.0 == 1)
    }

    fn pick(&self, st: &mut State) -> Option<Job> {
        if st.retry_after.is_some_and(|t| Instant::now() < t) {
            return None;
        }
        let opts = &self.opts;
        let v = st.current().clone();
        let flush_blocked = opts.one_level && Self::level1_busy(st);
        if !st.flushing && !st.imms.is_empty() && !flush_blocked {
            st.flushing = true;
            if opts.one_level {
                st.busy.insert((1, u64::MAX));
            }
            return Some(Job::Flush(st.imms.iter().cloned().collect()));
        }
        if !opts.one_level && v.l0.len() >= opts.l0_compaction_trigger && !Self::level1_busy(st) {
            // The oldest level-0 TPHs whose merge fits the compaction
            // memory (at least one): newer ones stay above level 1, which
            // keeps reads right, and a merge in one pass reads its inputs
            // once. Taking all of a level 0 that fell behind took many
            // passes over it, each slower than the flushes piling up.
            st.l0_compacting = true;
            let budget = self.job_memory();
            let (mut oldest, mut used) = (Vec::new(), 0);
            for t in v.l0.iter().rev() {
                used += merge_memory(t);
                if used > budget && !oldest.is_empty() {
                    break;
                }
                oldest.push(t.head_number());
            }
            return Some(Job::L0ToL1(oldest));
        }
        for level in 1..v.depth {
            if level == 1 && (st.l0_compacting || st.busy.contains(&(1, u64::MAX))) {
                continue;
            }
            let f = v.layout.fanout;
            for (&p, tph) in &v.levels[level as usize - 1] {
                let children = (p * f..p * f + f).map(|c| (level + 1, c));
                if tph.live_data_bytes() > opts.tph_target_bytes
                    && !st.busy.contains(&(level, p))
                    && children.clone().all(|c| !st.busy.contains(&c))
                {
                    st.busy.insert((level, p));
                    st.busy.extend(children);
                    return Some(Job::PushDown(level, p));
                }
            }
        }
        None
    }

    /// Opens a level below the bottom once the bottom's TPHs average
    /// `fanout` times the target size.
    fn maybe_deepen(&self, st: &mut State) -> Result<()> {
        let opts = &self.opts;
        let Some(vs) = st.versions.as_mut() else {
            return Ok(());
        };
        let v = vs.current.clone();
        if opts.one_level
            || v.depth >= opts.max_levels
            || !crate::version::partitions_fit(v.layout.fanout, v.depth + 1)
        {
            return Ok(());
        }
        let bottom: u64 = v.levels[v.depth as usize - 1]
            .values()
            .map(|t| t.live_data_bytes())
            .sum();
        let limit = v
            .partitions(v.depth)
            .saturating_mul(opts.tph_target_bytes)
            .saturating_mul(v.layout.fanout);
        if bottom <= limit {
            return Ok(());
        }
        let edit = VersionEdit {
            depth: Some(v.depth + 1),
            ..VersionEdit::default()
        };
        vs.log_and_apply(edit, &HashMap::new())?;
        self.install_super_version(st);
        Ok(())
    }

    fn run_job(self: Arc<Self>, job: Job) {
        let start = Instant::now();
        let result = self.execute(&job);
        let mut st = self.state.lock();
        match &result {
            // Out of space: nothing was installed; retry once space may be back.
            Err(e) if e.is_no_space() => {
                st.no_space = Some(e.to_string());
                st.no_space_failures += 1;
                st.retry_after = Some(Instant::now() + std::time::Duration::from_millis(200));
            }
            Err(e) => self.poison(&mut st, e),
            Ok(()) => st.retry_after = None,
        }
        match &job {
            Job::Flush(_) => {
                st.flushing = false;
                st.busy.remove(&(1, u64::MAX));
            }
            Job::L0ToL1(_) => st.l0_compacting = false,
            Job::PushDown(level, p) => {
                let f = self.opts.fanout as u64;
                st.busy.remove(&(*level, *p));
                for c in p * f..p * f + f {
                    st.busy.remove(&(level + 1, c));
                }
            }
            Job::Gc(..) => {}
        }
        let micros = start.elapsed().as_micros() as u64;
        match &job {
            Job::Flush(_) => self.stats.flush_micros.fetch_add(micros, Ordering::Relaxed),
            _ => self
                .stats
                .compaction_micros
                .fetch_add(micros, Ordering::Relaxed),
        };
        st.running_jobs -= 1;
        self.maybe_schedule(&mut st);
        if st.running_jobs == 0 {
            self.release_deferred(&mut st);
        }
        drop(st);
        self.bg_cv.notify_all();
    }

    /// Does a job's work and applies its result.
    pub(crate) fn execute(&self, job: &Job) -> Result<()> {
        let version = self.state.lock().current().clone();
        let mut change = Change::default();
        let mut flushed: &[Arc<MemTable>] = &[];
        match job {
            Job::Flush(mems) => {
                flushed = mems;
                let delta = newest_first(mems.iter().rev().map(|m| memtable_delta(m)).collect());
                if self.opts.one_level {
                    self.merge_into_level(&version, 1, delta, &mut change)?;
                } else if !delta.is_empty() {
                    let number = self.new_file_number()?;
                    let outcome = merge(&self.merge_context(0, 0, false, number), None, delta)?;
                    if let MergeOutcome::Replaced { tph, stats, .. } = outcome {
                        change.edit.add_l0.push(tph.head_number());
                        change.new_tphs.insert(tph.head_number(), Arc::from(tph));
                        change.stats.bytes_written += stats.bytes_written;
                        change.stats.entries_written += stats.entries_written;
                    }
                }
            }
            Job::L0ToL1(heads) => {
                let inputs: Vec<Arc<Tph>> = version
                    .l0
                    .iter()
                    .filter(|t| heads.contains(&t.head_number()))
                    .cloned()
                    .collect();
                let all = 0..version.partitions(1);
                self.merge_tphs_into_level(&version, &inputs, 1, all, &mut change)?;
                for t in &inputs {
                    change.edit.remove_l0.push(t.head_number());
                    change.retire(t);
                }
            }
            Job::PushDown(level, p) => {
                let tph = version.tph(*level, *p).cloned().ok_or_else(|| {
                    Error::InvalidArgument(format!("no TPH at level {level} partition {p}"))
                })?;
                let fanout = version.layout.fanout;
                let children = p * fanout..(p + 1) * fanout;
                let inputs = [tph];
                self.merge_tphs_into_level(&version, &inputs, level + 1, children, &mut change)?;
                change.edit.remove.push((*level, *p));
                change.retire(&inputs[0]);
            }
            Job::Gc(level, p) => {
                if let Some(base) = version.tph(*level, *p) {
                    let number = self.new_file_number()?;
                    let mut ctx = self.merge_context(*level, *p, *level == version.depth, number);
                    ctx.max_pieces = 1;
                    change.add(*level, *p, merge(&ctx, Some(base), Vec::new())?);
                }
            }
        }
        let is_flush = matches!(job, Job::Flush(_));
        self.stats.record_job(is_flush, &change.stats);
        self.apply(change, flushed)
    }

    /// The memory one compaction may hold: an equal share of
    /// `compaction_memory_bytes` per background thread, as that many run
    /// at once.
    pub(super) fn job_memory(&self) -> u64 {
        (self.opts.compaction_memory_bytes / self.opts.background_threads.max(1)).max(1) as u64
    }

    pub(super) fn new_file_number(&self) -> Result<u64> {
        let mut st = self.state.lock();
        match st.versions.as_mut() {
            Some(vs) => Ok(vs.new_file_number()),
            None => Err(Error::ReadOnly("opened with open_for_read_only".into())),
        }
    }

    pub(super) fn merge_context(
        &self,
        level: u32,
        partition: u64,
        bottom: bool,
        number: u64,
    ) -> MergeContext<'_> {
        MergeContext {
            fs: &self.fs,
            dir: &self.dir,
            reads: &self.piece_reads,
            piece_options: &self.piece_options,
            sig_bits: self.opts.signature_bits,
            level,
            partition,
            bottom,
            max_pieces: self.opts.effective_max_pieces(),
            min_live_ratio: self.opts.min_live_ratio,
            new_number: number,
        }
    }

    /// Makes a job's result durable and current; retires what it replaced.
    fn apply(&self, mut change: Change, flushed: &[Arc<MemTable>]) -> Result<()> {
        let mut st = self.state.lock();
        if let Some(e) = &st.bg_error {
            discard(&change);
            return Err(Error::ReadOnly(e.clone()));
        }
        if !flushed.is_empty() {
            let remaining = st
                .imms
                .iter()
                .filter(|m| !flushed.iter().any(|f| Arc::ptr_eq(f, m)))
                .map(|m| m.wal_number());
            change.edit.log_number =
                Some(remaining.chain([st.mem.wal_number()]).min().unwrap_or(0));
        }
        let visible = self.visible_seq.load(Ordering::Acquire);
        let vs = st
            .versions
            .as_mut()
            .expect("jobs run only on writable databases");
        vs.last_seq = vs.last_seq.max(visible);
        // The new pieces' directory entries must be durable before the
        // MANIFEST names them.
        if let Err(e) = self.fs.sync_dir(&self.dir) {
            discard(&change);
            self.poison(&mut st, &e);
            return Err(e);
        }
        // From here on the edit may reach the disk even if this fails: its
        // files stay (unused ones are removed at the next open).
        let edit = std::mem::take(&mut change.edit);
        let vs = st
            .versions
            .as_mut()
            .expect("jobs run only on writable databases");
        if let Err(e) = vs.log_and_apply(edit, &change.new_tphs) {
            self.poison(&mut st, &e);
            return Err(e);
        }
        let log_number = vs.log_number;
        let done = std::mem::replace(
            &mut st.deferred,
            super::Deferred {
                pieces: std::mem::take(&mut change.obsolete),
                wals_below: (!flushed.is_empty()).then_some(log_number),
            },
        );
        self.carry_out(done);
        if !flushed.is_empty() {
            st.imms
                .retain(|m| !flushed.iter().any(|f| Arc::ptr_eq(f, m)));
        }
        st.no_space = None;
        self.install_super_version(&st);
        Ok(())
    }

    /// Once the background is idle, makes the deferred deletions happen
    /// with an empty edit: otherwise the last job's inputs would stay on
    /// disk until the next job, doubling the space a settled database
    /// takes. A failure leaves them deferred (they are removed at the
    /// next open at the latest).
    fn release_deferred(&self, st: &mut State) {
        if st.deferred.is_empty()
            || st.bg_error.is_some()
            || self.shutting_down.load(Ordering::Acquire)
        {
            return;
        }
        let Some(vs) = st.versions.as_mut() else {
            return;
        };
        if let Err(e) = vs.log_and_apply(VersionEdit::default(), &HashMap::new()) {
            // Out of space, as for a job: nothing changed, and the next
            // edit will try again. Anything else is fatal.
            if !e.is_no_space() {
                self.poison(st, &e);
            }
            return;
        }
        self.carry_out(std::mem::take(&mut st.deferred));
    }

    /// Deletes what an edit, now durable, made obsolete (pieces once their
    /// last reader lets go).
    fn carry_out(&self, done: super::Deferred) {
        for f in &done.pieces {
            f.mark_obsolete();
        }
        if let Some(n) = done.wals_below {
            self.delete_wals_below(n);
        }
    }

    /// Deletes WAL files whose memtables are all flushed.
    fn delete_wals_below(&self, log_number: u64) {
        if let Ok(names) = self.fs.list(&self.dir) {
            for name in names {
                if let Some(FileKind::Wal(n)) = parse(&name) {
                    if n < log_number {
                        let _ = self.fs.remove(&path(&self.dir, &wal_name(n)));
                    }
                }
            }
        }
    }

    /// Waits until nothing is running and nothing is due.
    pub(crate) fn wait_idle(self: &Arc<Self>) -> Result<()> {
        let mut st = self.state.lock();
        let mut space = super::SpaceWait::default();
        loop {
            if let Some(e) = &st.bg_error {
                return Err(Error::ReadOnly(e.clone()));
            }
            if self.read_only {
                return Ok(());
            }
            space.check(&st)?;
            self.maybe_schedule(&mut st);
            if st.running_jobs == 0 {
                return Ok(());
            }
            self.bg_cv
                .wait_for(&mut st, std::time::Duration::from_millis(100));
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
        let result = (|| {
            let v = self.state.lock().current().clone();
            if !v.l0.is_empty() {
                self.execute(&Job::L0ToL1(v.l0.iter().map(|t| t.head_number()).collect()))?;
            }
            let partitions = |level: u32| -> Vec<u64> {
                self.state.lock().current().levels[level as usize - 1]
                    .keys()
                    .copied()
                    .collect()
            };
            let depth = self.state.lock().current().depth;
            for level in 1..depth {
                for p in partitions(level) {
                    self.execute(&Job::PushDown(level, p))?;
                }
            }
            for p in partitions(depth) {
                self.execute(&Job::Gc(depth, p))?;
            }
            Ok(())
        })();
        let mut st = self.state.lock();
        if let Err(e) = &result {
            self.poison(&mut st, e);
        }
        st.manual = false;
        self.maybe_schedule(&mut st);
        drop(st);
        self.bg_cv.notify_all();
        result
    }
}
