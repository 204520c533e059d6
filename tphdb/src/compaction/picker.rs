//! The job to start next, and the jobs running by what they own.

use std::collections::HashSet;

use super::shape::{push_down_threshold, Policy, Shape, TphId};
use crate::version::Version;

/// A job to start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Work {
    /// Write the frozen memtables out.
    Flush,
    /// Merge these level-0 TPHs (head numbers) into level 1.
    L0ToL1(Vec<u64>),
    /// Move a TPH into its children.
    PushDown(TphId),
    /// Fold every piece of a TPH into one, dropping what is dead.
    Gc(TphId),
}

/// The jobs running, by what they own.
///
/// A push-down reads its TPH as it was when it started and owns only the
/// children it merges into: merges into the TPH itself go on meanwhile,
/// keeping the pieces it carries (`MergeContext::pinned`). At its end it
/// takes the TPH once no merge into it runs, and drops the pieces it
/// carried down ([`Running::take_source`]). So a flush in one-level mode or
/// a level-0 compaction never waits for a push-down out of level 1.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Running {
    pub(crate) flush: bool,
    /// A job merging into every TPH of level 1 runs: a level-0 compaction,
    /// or a flush in one-level mode.
    pub(crate) all_of_level1: bool,
    /// TPHs a job rewrites, which no other job may merge into: the children
    /// of a push-down, a TPH a GC fold folds, and a push-down's own TPH at
    /// its end.
    pub(crate) tphs: HashSet<TphId>,
    /// TPHs being pushed into their children.
    pub(crate) pushing: HashSet<TphId>,
    /// Push-downs out of level 1 started since the last job merging into
    /// all of it (a level-0 compaction, or a flush in one-level mode).
    pub(crate) level1_pushes_since_merge: usize,
    /// A GC fold runs (one at a time).
    pub(crate) gc: bool,
    /// Jobs holding a thread of the compaction pool (flushes have their
    /// own). A job starts only on a free thread: queued behind busy
    /// threads it owned its TPHs for nothing and ran on a stale choice.
    pub(crate) pool_jobs: usize,
}

impl Running {
    /// Whether some job rewrites a level-1 TPH, so that no job may merge
    /// into all of level 1.
    pub(super) fn level1_busy(&self) -> bool {
        self.all_of_level1 || self.tphs.iter().any(|t| t.level == 1)
    }

    /// Whether level-1 TPH `partition`, with `live_bytes` of live data, is
    /// past its push-down threshold and not being pushed down. The picker
    /// asks it of a [`Shape`], the writers' pacing of a version.
    fn waits_for_push_down(
        &self,
        partition: u64,
        live_bytes: u64,
        target: u64,
        fanout: u64,
    ) -> bool {
        let id = TphId {
            level: 1,
            partition,
        };
        live_bytes > push_down_threshold(target, fanout, partition) && !self.pushing.contains(&id)
    }

    /// Whether a thread of the compaction pool is free.
    pub(crate) fn thread_free(&self, policy: &Policy) -> bool {
        self.pool_jobs < policy.background_threads.max(1)
    }

    /// Marks what `work` owns; `shape` is the version it was picked from.
    pub(crate) fn start(&mut self, work: &Work, shape: &Shape, policy: &Policy) {
        if *work != Work::Flush {
            debug_assert!(self.thread_free(policy));
            self.pool_jobs += 1;
        }
        match work {
            Work::Flush => {
                debug_assert!(!self.flush);
                self.flush = true;
                if policy.one_level {
                    debug_assert!(!self.level1_busy());
                    self.all_of_level1 = true;
                    self.level1_pushes_since_merge = 0;
                }
            }
            Work::L0ToL1(_) => {
                debug_assert!(!self.level1_busy());
                self.all_of_level1 = true;
                self.level1_pushes_since_merge = 0;
            }
            Work::PushDown(id) => {
                debug_assert!(self.may_push(shape, *id));
                self.level1_pushes_since_merge += usize::from(id.level == 1);
                self.pushing.insert(*id);
                self.tphs.extend(shape.children(*id));
            }
            Work::Gc(id) => {
                debug_assert!(!self.gc && self.may_take(*id));
                self.gc = true;
                self.tphs.insert(*id);
            }
        }
    }

    /// At the end of the push-down of `id`: takes its TPH if no job merges
    /// into it, so that none does until the push-down is finished.
    pub(crate) fn take_source(&mut self, id: TphId) -> bool {
        debug_assert!(self.pushing.contains(&id));
        if !self.may_merge_into(id) {
            return false;
        }
        self.tphs.insert(id);
        true
    }

    /// The push-down of `id` waits, without its thread, for a merge into
    /// its TPH to end.
    pub(crate) fn park(&mut self, id: TphId) {
        debug_assert!(self.pushing.contains(&id) && self.pool_jobs > 0);
        self.pool_jobs -= 1;
    }

    /// Takes the TPH of the parked push-down of `id` and a thread for its
    /// end, if both are free.
    pub(crate) fn resume(&mut self, id: TphId, policy: &Policy) -> bool {
        if !self.thread_free(policy) || !self.take_source(id) {
            return false;
        }
        self.pool_jobs += 1;
        true
    }

    /// Releases what `work` owned.
    pub(crate) fn finish(&mut self, work: &Work, fanout: u64, policy: &Policy) {
        if *work != Work::Flush {
            debug_assert!(self.pool_jobs > 0);
            self.pool_jobs -= 1;
        }
        match work {
            Work::Flush => {
                self.flush = false;
                if policy.one_level {
                    self.all_of_level1 = false;
                }
            }
            Work::L0ToL1(_) => self.all_of_level1 = false,
            Work::PushDown(id) => {
                self.pushing.remove(id);
                self.tphs.remove(id);
                let f = fanout;
                for partition in id.partition * f..id.partition * f + f {
                    self.tphs.remove(&TphId {
                        level: id.level + 1,
                        partition,
                    });
                }
            }
            Work::Gc(id) => {
                self.gc = false;
                self.tphs.remove(id);
            }
        }
    }

    /// Push-downs out of levels below level 1 that run.
    fn deep_pushes(&self) -> usize {
        self.pushing.iter().filter(|t| t.level > 1).count()
    }

    /// Whether a job may merge into TPH `id`.
    fn may_merge_into(&self, id: TphId) -> bool {
        let level1_held = id.level == 1 && self.all_of_level1;
        !level1_held && !self.tphs.contains(&id)
    }

    /// Whether a job may rewrite TPH `id` alone: no job merges into it, and
    /// none pushes it down.
    fn may_take(&self, id: TphId) -> bool {
        self.may_merge_into(id) && !self.pushing.contains(&id)
    }

    /// Whether a job may push TPH `id` into its children. Children being
    /// pushed down themselves are merged into meanwhile.
    fn may_push(&self, shape: &Shape, id: TphId) -> bool {
        self.may_take(id) && shape.children(id).all(|c| self.may_merge_into(c))
    }
}

/// The job to start next, if any: flushes first (writers wait for them),
/// then compactions, then garbage collection; only a flush while every
/// thread of the compaction pool is busy.
///
/// A push-down out of level 1 starts only while no level-0 compaction
/// (which merges into all of level 1) runs, though the compaction may start
/// while it runs, so they take turns starting: while level 0 is due, up to
/// `background_threads` push-downs of level-1 TPHs past their target go
/// before each level-0 compaction, and one from `l0_slowdown_trigger` on.
/// Giving level 0 every turn it was due starved the push-downs during a
/// fill: level-1 TPHs grew to 2.5 times their target and were then pushed
/// all at once, which held level 1 long enough to stop writes, and made
/// every level-0 compaction rebuild larger indexes; under a small memory
/// budget, where level 0 stays past the slowdown trigger for a whole load,
/// level 1 was never pushed down at all. Among push-downs, the TPH
/// furthest past its target goes first.
pub(crate) fn pick(
    shape: &Shape,
    frozen_memtables: usize,
    running: &Running,
    policy: &Policy,
) -> Option<Work> {
    let turns = policy.background_threads.max(1);
    if policy.one_level {
        return pick_one_level(shape, frozen_memtables, running, policy, turns);
    }
    if !running.flush && frozen_memtables > 0 {
        return Some(Work::Flush);
    }
    if !running.thread_free(policy) {
        return None;
    }
    let l0_waiting = shape.l0.len() >= policy.l0_compaction_trigger;
    let level1_turns = if shape.l0.len() < policy.l0_slowdown_trigger {
        turns
    } else {
        1
    };
    let level1_turn = running.level1_pushes_since_merge < level1_turns;
    // While level 0 waits, push-downs out of level 1 start only in their
    // turn, also while another holds level 1: otherwise the threads could
    // hand level 1 to each other until every due TPH had gone down.
    let level1_pushes = !l0_waiting || level1_turn;
    let upper_due = frozen_memtables > 0 || l0_waiting || level1_due_in(shape, running, policy);
    let push = most_urgent_push_down(shape, running, policy, level1_pushes, upper_due);
    if l0_waiting && !running.level1_busy() {
        return match push {
            Some(id) if id.level == 1 => Some(Work::PushDown(id)),
            _ => Some(Work::L0ToL1(oldest_l0_that_fit(shape, policy))),
        };
    }
    match push {
        Some(id) => Some(Work::PushDown(id)),
        None if l0_waiting || running.gc => None,
        None => collect_garbage(shape, running, policy),
    }
}

/// [`pick`] in one-level mode, where each flush merges into all of level 1
/// and so takes the level-0 compaction's turns with the push-downs out of
/// level 1: after each flush, up to `turns` of them start before the next,
/// which then runs beside them.
/// Flushing whenever a memtable waited starved them during a fill, level 1
/// came to hold the whole database, and each flush rebuilt the global
/// indexes over every key.
fn pick_one_level(
    shape: &Shape,
    frozen_memtables: usize,
    running: &Running,
    policy: &Policy,
    turns: usize,
) -> Option<Work> {
    let flush_due = !running.flush && frozen_memtables > 0;
    let level1_turn = !flush_due || running.level1_pushes_since_merge < turns;
    let push = most_urgent_push_down(shape, running, policy, level1_turn, true);
    let level1_push = matches!(push, Some(id) if id.level == 1);
    let thread_free = running.thread_free(policy);
    // A push-down with no thread to start on does not hold the flush back.
    if flush_due && !running.level1_busy() && (!level1_push || !thread_free) {
        return Some(Work::Flush);
    }
    if !thread_free {
        return None;
    }
    match push {
        Some(id) => Some(Work::PushDown(id)),
        None if flush_due || running.gc => None,
        None => collect_garbage(shape, running, policy),
    }
}

/// Work that frees space, once nothing else is due, one job at a time.
/// Deletes and overwrites leave garbage that merges fold away only when new
/// writes reach the TPH that holds it; this frees it without them:
/// - level 0, once a TPH of it holds mostly tombstones, compacts early;
/// - a TPH above the bottom whose live keys are mostly tombstones is
///   pushed down, so they meet what they delete;
/// - a TPH whose garbage (replaced entries, and at the bottom live
///   tombstones) passes `gc_dead_ratio` of its bytes has its pieces with
///   the most garbage folded, as many as a job's memory holds
///   ([`super::pick_gc_victims`]);
/// - while the garbage of the whole database passes `max_garbage_ratio` of
///   its bytes, so does the TPH with the largest share, whatever it is.
///   Overwrites spread garbage evenly, so every TPH could stay below
///   `gc_dead_ratio` while the database holds nearly twice its live data;
/// - and meanwhile a TPH above the bottom is pushed down when the versions
///   its live entries hide below are a larger share of its bytes than any
///   TPH's garbage: they are garbage that no fold frees while it stays.
///   Overwrites of a database whose level 1 is as large as its bottom
///   (128-byte values at 16M keys: level 1's TPHs reach `tph_target_bytes`
///   before they are pushed, whatever the size below) left 1.92 times
///   RocksDB's space, most of it such versions.
///
/// Each step ends what made it due or brings it closer: level 0 empties,
/// the pushed TPH leaves its level, and every fold removes replaced
/// entries or, once there are none, tombstones.
fn collect_garbage(shape: &Shape, running: &Running, policy: &Policy) -> Option<Work> {
    let ratio = policy.gc_dead_ratio;
    if !policy.one_level
        && !running.level1_busy()
        && shape.l0.iter().any(|t| t.tombstone_share() > ratio)
    {
        return Some(Work::L0ToL1(oldest_l0_that_fit(shape, policy)));
    }
    let over = shape.garbage_share() > policy.max_garbage_ratio;
    let fold_ratio = if over { 0.0 } else { ratio };
    let mut best: Option<(f64, Work)> = None;
    let mut consider = |score: f64, threshold: f64, work: Work| {
        if score > threshold && best.as_ref().is_none_or(|(b, _)| score > *b) {
            best = Some((score, work));
        }
    };
    for level in 1..=shape.depth {
        let bottom = level == shape.depth;
        for (&partition, tph) in &shape.levels[level as usize - 1] {
            let id = TphId { level, partition };
            if !bottom && running.may_push(shape, id) {
                consider(tph.tombstone_share(), ratio, Work::PushDown(id));
                if over {
                    consider(tph.shadowed_share(), 0.0, Work::PushDown(id));
                }
            }
            if running.may_take(id) {
                consider(tph.garbage_share(bottom), fold_ratio, Work::Gc(id));
            }
        }
    }
    best.map(|(_, work)| work)
}

/// The TPH above the bottom furthest past its push-down threshold that no
/// job owns, with none of its children owned either; level 1's only if
/// `level1`; and while `upper_due` (a flush, level 0 or a level-1
/// push-down waits), one below level 1 only while fewer than
/// `background_threads - 1` (at least one) of those run.
///
/// When the bottom deepens, every TPH of the old bottom comes due at once
/// (they grow together), and being further past their thresholds than
/// level 1's, their push-downs took both threads for half a minute of a
/// 32M-key fill: level 0's compactions and level 1's push-downs waited, and
/// writes were paced to a tenth of their rate and then stopped (51 of 504
/// seconds below 0.3 of the median). A thread left for the levels writes
/// flow through keeps them moving while the old bottom goes down; with
/// nothing due there, every thread may push the old bottom (bounding
/// those push-downs always left half the machine idle once writes
/// stopped: a settle of 645 s after that fill instead of 247 s).
fn most_urgent_push_down(
    shape: &Shape,
    running: &Running,
    policy: &Policy,
    level1: bool,
    upper_due: bool,
) -> Option<TphId> {
    let deep =
        !upper_due || running.deep_pushes() < policy.background_threads.saturating_sub(1).max(1);
    let mut best: Option<(f64, TphId)> = None;
    for level in 1..shape.depth {
        if (level == 1 && (running.all_of_level1 || !level1)) || (level > 1 && !deep) {
            continue;
        }
        for (&partition, tph) in &shape.levels[level as usize - 1] {
            let id = TphId { level, partition };
            let threshold = push_down_threshold(policy.tph_target_bytes, shape.fanout, partition);
            let score = tph.live_data_bytes as f64 / threshold.max(1) as f64;
            if tph.live_data_bytes > threshold
                && best.is_none_or(|(b, _)| score > b)
                && running.may_push(shape, id)
            {
                best = Some((score, id));
            }
        }
    }
    best.map(|(_, id)| id)
}

/// Whether a level-1 TPH not being pushed is past its push-down threshold.
fn level1_due_in(shape: &Shape, running: &Running, policy: &Policy) -> bool {
    shape.depth >= 2
        && shape.levels[0].iter().any(|(&p, t)| {
            running.waits_for_push_down(p, t.live_data_bytes, policy.tph_target_bytes, shape.fanout)
        })
}

/// Level-1 TPHs past their push-down threshold and not being pushed down,
/// while a level below takes them. Counting those being pushed too paced
/// writes whenever every thread pushed and one more TPH was due: in a
/// one-level fill, two seconds at 0.28-0.29 of the median while no
/// memtable waited.
pub(crate) fn level1_due(v: &Version, target: u64, running: &Running) -> usize {
    if v.depth < 2 {
        return 0;
    }
    let fanout = v.layout.fanout;
    v.levels[0]
        .iter()
        .filter(|(&p, t)| running.waits_for_push_down(p, t.live_data_bytes(), target, fanout))
        .count()
}

/// How far writes in one-level mode run ahead of the jobs, for pacing
/// (`db/write_delay.rs`; level 0's count in the other modes): memtables
/// waiting for level 1 and the level-1 TPHs due for a push-down that none
/// has started ([`level1_due`]). `None` (full speed) while no memtable
/// waits and no more TPHs are due than one turn of push-downs takes
/// ([`pick_one_level`]). Before push-downs let merges into their TPH go
/// on, a flush waited for those that started before it; unpaced, writers
/// filled the memtables in a fraction of that wait and stood still for
/// the rest, 44 of 173 seconds of a 16M-key fill below 0.3 of the median.
/// Level-1 TPHs left to grow make every flush rebuild larger indexes.
pub(crate) fn one_level_backlog(
    waiting_memtables: usize,
    due: usize,
    turns: usize,
) -> Option<usize> {
    (waiting_memtables > 0 || due > turns.max(1)).then_some(waiting_memtables + due)
}

/// The oldest level-0 TPHs whose merge fits a job's memory in as many
/// passes as level 1 has partitions (at least one TPH): a merge holds one
/// pass's range of partitions at a time, reading its inputs again for each
/// (from the page cache: they were just written), which costs far less than
/// the writes of merging level 0 in smaller slices. A slice of one TPH per
/// compaction writes a piece of a sixteenth the size into each level-1 TPH,
/// and the pieces then have to be folded: `fillrandom` of 4M 1 KiB values
/// wrote 3.58 bytes per byte that way and 2.33 this way (folds 1.46 to
/// 0.24). Newer TPHs stay above level 1, which keeps reads right.
fn oldest_l0_that_fit(shape: &Shape, policy: &Policy) -> Vec<u64> {
    let fits = policy.job_input_bytes.saturating_mul(shape.partitions(1));
    let (mut oldest, mut used) = (Vec::new(), 0u64);
    for t in shape.l0.iter().rev() {
        used = used.saturating_add(t.merge_bytes);
        if used > fits && !oldest.is_empty() {
            break;
        }
        oldest.push(t.head);
    }
    oldest
}
