//! What to flush or compact next, and which pieces a merge folds: pure
//! functions of the shape of a version, the jobs running and the policy,
//! apart from running jobs and applying their edits (LevelDB's
//! `VersionSet::PickCompaction`).
//!
//! A job owns the TPHs it rewrites: a flush in one-level mode and a level-0
//! compaction own all of level 1; pushing TPH `(i, p)` down owns it and its
//! `fanout` children; a GC fold owns its TPH. Jobs on disjoint TPHs run in
//! parallel.

use std::collections::{BTreeMap, HashSet};

use crate::tph::Garbage;
use crate::version::{partitions_fit, Version};

/// A TPH's place: level (1 or deeper) and partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct TphId {
    pub(crate) level: u32,
    pub(crate) partition: u64,
}

/// What the picker needs to know of a TPH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TphSize {
    pub(crate) head: u64,
    /// Data bytes of its live entries.
    pub(crate) live_data_bytes: u64,
    /// Memory a merge of its live entries holds.
    pub(crate) merge_bytes: u64,
    pub(crate) garbage: Garbage,
}

impl TphSize {
    /// The share of its stored bytes a fold of all its pieces would free:
    /// dead entries, and at the bottom also live tombstones.
    fn garbage_share(&self, bottom: bool) -> f64 {
        let g = &self.garbage;
        let freed = g.dead_bytes + if bottom { g.live_tombstone_bytes } else { 0 };
        freed as f64 / g.data_bytes.max(1) as f64
    }

    /// The share of its live keys that are tombstones.
    fn tombstone_share(&self) -> f64 {
        self.garbage.live_tombstones as f64 / self.garbage.live_entries.max(1) as f64
    }
}

/// The sizes of a version's TPHs, by place.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Shape {
    pub(crate) fanout: u64,
    pub(crate) depth: u32,
    /// Newest first.
    pub(crate) l0: Vec<TphSize>,
    /// `levels[i - 1]` is level `i`, by partition.
    pub(crate) levels: Vec<BTreeMap<u64, TphSize>>,
}

impl Shape {
    /// The shape of `v`; `merge_bytes` estimates a TPH's merge memory.
    pub(crate) fn of(v: &Version, merge_bytes: impl Fn(&crate::tph::Tph) -> u64) -> Shape {
        let size = |t: &crate::tph::Tph| TphSize {
            head: t.head_number(),
            live_data_bytes: t.live_data_bytes(),
            merge_bytes: merge_bytes(t),
            garbage: t.garbage(),
        };
        Shape {
            fanout: v.layout.fanout,
            depth: v.depth,
            l0: v.l0.iter().map(|t| size(t)).collect(),
            levels: v
                .levels
                .iter()
                .map(|l| l.iter().map(|(&p, t)| (p, size(t))).collect())
                .collect(),
        }
    }

    /// Partitions of level `level >= 1`.
    fn partitions(&self, level: u32) -> u64 {
        self.fanout.saturating_pow(level)
    }

    /// The share of all stored data bytes (level 0 included) that folds
    /// would free: see [`TphSize::garbage_share`].
    fn garbage_share(&self) -> f64 {
        let (mut garbage, mut stored) = (0u64, 0u64);
        for t in &self.l0 {
            stored += t.garbage.data_bytes;
        }
        for (i, level) in self.levels.iter().enumerate() {
            let bottom = i + 1 == self.depth as usize;
            for t in level.values() {
                stored += t.garbage.data_bytes;
                garbage += t.garbage.dead_bytes
                    + if bottom {
                        t.garbage.live_tombstone_bytes
                    } else {
                        0
                    };
            }
        }
        garbage as f64 / stored.max(1) as f64
    }

    fn children(&self, id: TphId) -> impl Iterator<Item = TphId> + '_ {
        let f = self.fanout;
        (id.partition * f..id.partition * f + f).map(move |partition| TphId {
            level: id.level + 1,
            partition,
        })
    }
}

/// The knobs of the policy, from the options.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Policy {
    pub(crate) one_level: bool,
    pub(crate) l0_compaction_trigger: usize,
    pub(crate) tph_target_bytes: u64,
    pub(crate) max_levels: u32,
    /// Level-0 TPHs at which writes are paced: from there on a level-0
    /// compaction goes before any push-down out of level 1.
    pub(crate) l0_slowdown_trigger: usize,
    /// Memory of input one compaction may hold (the other half of its share
    /// of `compaction_memory_bytes` is for the index it builds).
    pub(crate) job_input_bytes: u64,
    /// Jobs that run at once: the push-downs out of level 1 that may start
    /// between two level-0 compactions.
    pub(crate) background_threads: usize,
    /// The garbage share past which a TPH is collected when nothing more
    /// urgent is due (see [`collect_garbage`]).
    pub(crate) gc_dead_ratio: f64,
    /// The share of all stored bytes that may be garbage: past it, the TPH
    /// with the largest garbage share is collected whatever that share.
    pub(crate) max_garbage_ratio: f64,
}

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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Running {
    pub(crate) flush: bool,
    /// A job merging into every TPH of level 1 runs: a level-0 compaction,
    /// or a flush in one-level mode.
    pub(crate) all_of_level1: bool,
    /// TPHs a push-down owns.
    pub(crate) tphs: HashSet<TphId>,
    /// Push-downs out of level 1 started since the last job merging into
    /// all of it (a level-0 compaction, or a flush in one-level mode).
    pub(crate) level1_pushes_since_merge: usize,
    /// A GC fold runs (one at a time).
    pub(crate) gc: bool,
}

impl Running {
    fn level1_busy(&self) -> bool {
        self.all_of_level1 || self.tphs.iter().any(|t| t.level == 1)
    }

    /// Marks what `work` owns; `shape` is the version it was picked from.
    pub(crate) fn start(&mut self, work: &Work, shape: &Shape, policy: &Policy) {
        match work {
            Work::Flush => {
                debug_assert!(!self.flush);
                self.flush = true;
                if policy.one_level {
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
                debug_assert!(!self.tphs.contains(id));
                self.level1_pushes_since_merge += usize::from(id.level == 1);
                self.tphs.insert(*id);
                self.tphs.extend(shape.children(*id));
            }
            Work::Gc(id) => {
                debug_assert!(!self.gc && !self.tphs.contains(id));
                self.gc = true;
                self.tphs.insert(*id);
            }
        }
    }

    /// Releases what `work` owned.
    pub(crate) fn finish(&mut self, work: &Work, fanout: u64, policy: &Policy) {
        match work {
            Work::Flush => {
                self.flush = false;
                if policy.one_level {
                    self.all_of_level1 = false;
                }
            }
            Work::L0ToL1(_) => self.all_of_level1 = false,
            Work::PushDown(id) => {
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

    /// Whether a job may rewrite TPH `id` alone.
    fn may_take(&self, id: TphId) -> bool {
        let level1_held = id.level == 1 && self.all_of_level1;
        !level1_held && !self.tphs.contains(&id)
    }

    /// Whether a job may push TPH `id` into its children.
    fn may_push(&self, shape: &Shape, id: TphId) -> bool {
        self.may_take(id) && shape.children(id).all(|c| !self.tphs.contains(&c))
    }
}

/// The job to start next, if any: flushes first (writers wait for them),
/// then compactions, then garbage collection.
///
/// A level-0 compaction and a push-down out of level 1 both own level-1
/// TPHs, so they take turns: while level 0 is due but below
/// `l0_slowdown_trigger`, up to `background_threads` push-downs of level-1
/// TPHs past their target go before each level-0 compaction. Giving level
/// 0 every turn it was due starved the push-downs during a fill: level-1
/// TPHs grew to 2.5 times their target and were then pushed all at once,
/// which held level 1 long enough to stop writes, and made every level-0
/// compaction rebuild larger indexes. Among push-downs, the TPH furthest
/// past its target goes first.
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
    let l0_waiting = shape.l0.len() >= policy.l0_compaction_trigger;
    let level1_turn =
        running.level1_pushes_since_merge < turns && shape.l0.len() < policy.l0_slowdown_trigger;
    // While level 0 waits, push-downs out of level 1 start only in their
    // turn, also while another holds level 1: otherwise the threads could
    // hand level 1 to each other until every due TPH had gone down.
    let level1_pushes = !l0_waiting || level1_turn;
    let push = most_urgent_push_down(shape, running, policy, level1_pushes);
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
/// level 1: after each flush, up to `turns` of them go before the next.
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
    let push = most_urgent_push_down(shape, running, policy, level1_turn);
    let level1_push = matches!(push, Some(id) if id.level == 1);
    if flush_due && !running.level1_busy() && !level1_push {
        return Some(Work::Flush);
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
///   ([`pick_gc_victims`]);
/// - while the garbage of the whole database passes `max_garbage_ratio` of
///   its bytes, so does the TPH with the largest share, whatever it is.
///   Overwrites spread garbage evenly, so every TPH could stay below
///   `gc_dead_ratio` while the database holds nearly twice its live data.
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
    let fold_ratio = if shape.garbage_share() > policy.max_garbage_ratio {
        0.0
    } else {
        ratio
    };
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
/// `level1`.
fn most_urgent_push_down(
    shape: &Shape,
    running: &Running,
    policy: &Policy,
    level1: bool,
) -> Option<TphId> {
    let mut best: Option<(f64, TphId)> = None;
    for level in 1..shape.depth {
        if level == 1 && (running.all_of_level1 || !level1) {
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

/// Level-1 TPHs past their push-down threshold, while a level below takes
/// them.
pub(crate) fn level1_due(v: &Version, target: u64) -> usize {
    if v.depth < 2 {
        return 0;
    }
    let fanout = v.layout.fanout;
    v.levels[0]
        .iter()
        .filter(|(&p, t)| t.live_data_bytes() > push_down_threshold(target, fanout, p))
        .count()
}

/// How far writes in one-level mode run ahead of the jobs, for pacing
/// (`db/write_delay.rs`; level 0's count in the other modes): memtables
/// waiting for level 1 and the level-1 TPHs due for a push-down. `None`
/// (full speed) while no memtable waits and no more TPHs are due than
/// one turn of push-downs takes ([`pick_one_level`]). A flush waits for
/// the push-downs out of level 1 that started before it; unpaced, writers
/// filled the memtables in a fraction of that wait and stood still for
/// the rest, 44 of 173 seconds of a 16M-key fill below 0.3 of the median.
pub(crate) fn one_level_backlog(
    waiting_memtables: usize,
    due: usize,
    turns: usize,
) -> Option<usize> {
    (waiting_memtables > 0 || due > turns.max(1)).then_some(waiting_memtables + due)
}

/// The size past which TPH `partition` of a level above the bottom is
/// pushed down: from half of `target` up to `target`, by its place among
/// its siblings. The TPHs of a level receive equal shares of every merge
/// into it, so with one threshold for all they came due together, and
/// their push-downs held level 1 away from level 0 for long enough that
/// writes were paced to a fifth of their rate every 25 s of a fill.
pub(crate) fn push_down_threshold(target: u64, fanout: u64, partition: u64) -> u64 {
    let f = fanout.max(1);
    target / 2 + target / 2 / f * (partition % f + 1)
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

/// What the GC choice needs to know of a piece of a TPH being merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PieceLife {
    /// Its entries that are still live (0: the piece is dead and goes).
    pub(crate) live: u64,
    /// All its entries.
    pub(crate) entries: u64,
    /// Data bytes of the live entries: what folding it rewrites.
    pub(crate) live_bytes: u64,
    pub(crate) garbage: Garbage,
}

/// Which pieces (oldest first) a merge folds into the piece it writes: any
/// whose live fraction is below `min_live_ratio` (space reclamation), and
/// then enough of the cheapest to rewrite (fewest live bytes, then oldest)
/// that the TPH keeps at most `max_pieces`, the new piece included. Folding
/// anything makes a new piece even without a delta (`adds_piece`). Dead
/// pieces are never victims: they simply go.
pub(crate) fn pick_victims(
    pieces: &[PieceLife],
    max_pieces: usize,
    min_live_ratio: f64,
    adds_piece: bool,
) -> Vec<bool> {
    let mut victim = vec![false; pieces.len()];
    let mut candidates: Vec<usize> = (0..pieces.len()).filter(|&i| pieces[i].live > 0).collect();
    for &i in &candidates {
        let p = pieces[i];
        if (p.live as f64) < min_live_ratio * p.entries.max(1) as f64 {
            victim[i] = true;
        }
    }
    let kept = candidates.iter().filter(|&&i| !victim[i]).count();
    let max = max_pieces.max(1);
    let new_piece = adds_piece || victim.iter().any(|&v| v) || kept + 1 > max;
    let mut excess = (kept + new_piece as usize).saturating_sub(max);
    candidates.sort_by_key(|&i| (pieces[i].live_bytes, i));
    for i in candidates {
        if excess == 0 {
            break;
        }
        if !victim[i] {
            victim[i] = true;
            excess -= 1;
        }
    }
    victim
}

/// Which pieces (oldest first) a GC fold folds: those with replaced
/// entries, the largest dead share first, then at the bottom those with
/// live tombstones, the most first; as many as fit `input_bytes` of merge
/// memory (at least one). Pieces with no garbage stay.
///
/// Each fold makes progress: while any piece has replaced entries one of
/// them is folded, and the new piece has none; once none has, no tombstone
/// at the bottom hides anything (it would hide a replaced entry), so the
/// folded pieces' tombstones all go. A TPH therefore reaches no garbage in
/// a bounded number of folds, however the estimates of bytes err.
pub(crate) fn pick_gc_victims(pieces: &[PieceLife], bottom: bool, input_bytes: u64) -> Vec<bool> {
    let dead_share =
        |p: &PieceLife| p.garbage.dead_bytes as f64 / p.garbage.data_bytes.max(1) as f64;
    let mut order: Vec<usize> = (0..pieces.len())
        .filter(|&i| {
            let p = &pieces[i];
            p.live > 0 && (p.garbage.has_dead(p.entries) || bottom && p.garbage.live_tombstones > 0)
        })
        .collect();
    order.sort_by(|&a, &b| {
        let (pa, pb) = (&pieces[a], &pieces[b]);
        let key = |p: &PieceLife| {
            (
                p.garbage.has_dead(p.entries),
                dead_share(p),
                p.garbage.live_tombstones,
            )
        };
        let (ka, kb) = (key(pa), key(pb));
        kb.0.cmp(&ka.0)
            .then(kb.1.total_cmp(&ka.1))
            .then(kb.2.cmp(&ka.2))
            .then(a.cmp(&b))
    });
    let mut victim = vec![false; pieces.len()];
    let mut used = 0u64;
    for i in order {
        let p = &pieces[i];
        let cost = p.live_bytes + p.live * crate::tph::MERGE_BYTES_PER_ENTRY;
        if used > 0 && used.saturating_add(cost) > input_bytes {
            break;
        }
        used = used.saturating_add(cost).max(1);
        victim[i] = true;
    }
    victim
}

/// The deepest level in one-level mode: level 1, which flushes merge into,
/// and once a TPH of it passes its push-down threshold, one level below it
/// (the paper's "1 or 2 layers", §4.4.1). With level 1 as the only level
/// its TPHs grow with the database while every flush brings each a piece of a
/// `fanout`th of a memtable: at 4M x 1 KiB keys, 512 MB TPHs received 8 MB
/// pieces and kept 16 by folding the smallest (WA 2.74); at 16M they were
/// 2 GB and each flush folded about a gigabyte, so writes stood still for
/// most of the load. Below level 1, pieces arrive a `fanout`th of a TPH's
/// target at a time, and the bottom grows `fanout` times more slowly.
pub(crate) const ONE_LEVEL_MAX_DEPTH: u32 = 2;

/// Whether the bottom level should get a level below it: its TPHs average
/// more than the target size (in one-level mode, one of them passes its
/// push-down threshold), and one more level fits. Every TPH is then
/// held near `tph_target_bytes`, at the bottom as above it, and receives
/// pieces of about a `fanout`th of that: `max_pieces` of them fit before a
/// fold. Letting the bottom grow to `fanout` times the target instead (the
/// rule before) made a TPH of 2 GB receive pieces of 30-60 MB, and keeping
/// 16 pieces then folded an eighth of it each time: `fillrandom` of 16M
/// 1 KiB values wrote 2.26 bytes of folds per byte, against the one
/// push-down per level a deeper tree costs.
pub(crate) fn should_deepen(shape: &Shape, policy: &Policy) -> bool {
    let deepest = if policy.one_level {
        policy.max_levels.min(ONE_LEVEL_MAX_DEPTH)
    } else {
        policy.max_levels
    };
    if shape.depth >= deepest || !partitions_fit(shape.fanout, shape.depth + 1) {
        return false;
    }
    let bottom_tphs = &shape.levels[shape.depth as usize - 1];
    if policy.one_level {
        // As soon as one TPH would be due: waiting for the average to pass
        // the target made all of level 1 due at once, and a flush waited
        // for eight push-downs (writes stood still for 8 s of a fill).
        return bottom_tphs.iter().any(|(&p, t)| {
            t.live_data_bytes > push_down_threshold(policy.tph_target_bytes, shape.fanout, p)
        });
    }
    let bottom: u64 = bottom_tphs.values().map(|t| t.live_data_bytes).sum();
    bottom
        > shape
            .partitions(shape.depth)
            .saturating_mul(policy.tph_target_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            one_level: false,
            l0_compaction_trigger: 4,
            tph_target_bytes: 100,
            max_levels: 4,
            l0_slowdown_trigger: 8,
            job_input_bytes: 1000,
            background_threads: 2,
            gc_dead_ratio: 0.5,
            max_garbage_ratio: 1.0,
        }
    }

    fn tph(head: u64, live_data_bytes: u64) -> TphSize {
        TphSize {
            head,
            live_data_bytes,
            merge_bytes: live_data_bytes * 2,
            garbage: Garbage {
                data_bytes: live_data_bytes,
                live_entries: live_data_bytes / 10,
                ..Garbage::default()
            },
        }
    }

    /// Fanout 2, depth 2: `l0` TPHs of 10 bytes, and level 1 as given.
    fn shape(l0: usize, level1: &[(u64, u64)]) -> Shape {
        Shape {
            fanout: 2,
            depth: 2,
            l0: (0..l0 as u64).rev().map(|h| tph(100 + h, 10)).collect(),
            levels: vec![
                level1.iter().map(|&(p, b)| (p, tph(p + 1, b))).collect(),
                BTreeMap::new(),
            ],
        }
    }

    #[test]
    fn flushes_come_first_and_one_at_a_time() {
        let s = shape(5, &[]);
        let mut running = Running::default();
        assert_eq!(pick(&s, 1, &running, &policy()), Some(Work::Flush));
        running.start(&Work::Flush, &s, &policy());
        assert!(matches!(
            pick(&s, 1, &running, &policy()),
            Some(Work::L0ToL1(_))
        ));
        running.finish(&Work::Flush, 2, &policy());
        assert_eq!(running, Running::default());
    }

    #[test]
    fn level0_compacts_its_oldest_tphs_within_the_memory_bound() {
        let s = shape(5, &[]);
        let p = policy();
        // Oldest first: heads 100, 101, ... (each merge 20 bytes).
        assert_eq!(
            pick(&s, 0, &Running::default(), &p),
            Some(Work::L0ToL1(vec![100, 101, 102, 103, 104]))
        );
        // Two passes (fanout 2) of 23 bytes hold two merges of 20.
        let tight = Policy {
            job_input_bytes: 23,
            ..p
        };
        assert_eq!(
            pick(&s, 0, &Running::default(), &tight),
            Some(Work::L0ToL1(vec![100, 101]))
        );
        // At least one, however large.
        let tiny = Policy {
            job_input_bytes: 1,
            ..p
        };
        assert_eq!(
            pick(&s, 0, &Running::default(), &tiny),
            Some(Work::L0ToL1(vec![100]))
        );
        assert_eq!(pick(&shape(3, &[]), 0, &Running::default(), &p), None);
    }

    #[test]
    fn push_downs_wait_for_what_owns_their_tphs() {
        let p = policy();
        let s = shape(0, &[(0, 500), (1, 50)]);
        let id = TphId {
            level: 1,
            partition: 0,
        };
        assert_eq!(
            pick(&s, 0, &Running::default(), &p),
            Some(Work::PushDown(id))
        );
        let mut running = Running::default();
        running.start(&Work::PushDown(id), &s, &p);
        assert_eq!(running.tphs.len(), 3, "the TPH and its two children");
        assert_eq!(pick(&s, 0, &running, &p), None);
        // A level-0 compaction waits for level 1 to be free, and the other
        // way round.
        let with_l0 = shape(8, &[(0, 150)]);
        assert_eq!(pick(&with_l0, 0, &running, &p), None);
        running.finish(&Work::PushDown(id), 2, &p);
        let l0 = pick(&with_l0, 0, &running, &p).unwrap();
        assert!(matches!(l0, Work::L0ToL1(_)));
        running.start(&l0, &with_l0, &p);
        assert_eq!(pick(&with_l0, 0, &running, &p), None);
    }

    #[test]
    fn level0_and_push_downs_out_of_level1_take_turns() {
        let p = policy();
        let s = shape(4, &[(0, 150), (1, 120), (2, 90)]);
        let pushed = |partition| {
            Some(Work::PushDown(TphId {
                level: 1,
                partition,
            }))
        };
        // Two push-downs (one per thread), the largest first, then level 0.
        let mut running = Running::default();
        assert_eq!(pick(&s, 0, &running, &p), pushed(0));
        running.start(&pushed(0).unwrap(), &s, &p);
        let s = shape(4, &[(1, 120), (2, 90)]);
        assert_eq!(pick(&s, 0, &running, &p), pushed(1));
        running.start(&pushed(1).unwrap(), &s, &p);
        running.finish(&pushed(0).unwrap(), 2, &p);
        running.finish(&pushed(1).unwrap(), 2, &p);
        let s = shape(4, &[(0, 110), (2, 90)]);
        let l0 = pick(&s, 0, &running, &p).unwrap();
        assert!(matches!(l0, Work::L0ToL1(_)));
        running.start(&l0, &s, &p);
        running.finish(&l0, 2, &p);
        assert_eq!(pick(&s, 0, &running, &p), pushed(0));
        // While one push-down holds level 1, another starts only in its
        // turn: with two started since the last level-0 compaction, none.
        let mut two = Running::default();
        for partition in [0, 1] {
            two.start(
                &pushed(partition).unwrap(),
                &shape(4, &[(0, 150), (1, 120)]),
                &p,
            );
        }
        two.finish(&pushed(0).unwrap(), 2, &p);
        assert_eq!(pick(&shape(4, &[(0, 150)]), 0, &two, &p), None);
        // From the slowdown trigger on, level 0 goes first.
        assert!(matches!(
            pick(&shape(8, &[(0, 150)]), 0, &Running::default(), &p),
            Some(Work::L0ToL1(_))
        ));
        // Without level 0 due, push-downs run whatever the count.
        running.level1_pushes_since_merge = 5;
        assert_eq!(pick(&shape(3, &[(0, 150)]), 0, &running, &p), pushed(0));
    }

    #[test]
    fn siblings_come_due_between_half_and_all_of_the_target() {
        let t: Vec<u64> = (0..8).map(|p| push_down_threshold(256, 8, p)).collect();
        assert_eq!(t, [144, 160, 176, 192, 208, 224, 240, 256]);
        // By place among siblings, at every level.
        assert_eq!(push_down_threshold(256, 8, 8), t[0]);
        assert_eq!(push_down_threshold(256, 8, 63), t[7]);
        // With fanout 2 (the tests' shapes): 75 and 100.
        assert_eq!(push_down_threshold(100, 2, 0), 75);
        assert_eq!(push_down_threshold(100, 2, 1), 100);
    }

    #[test]
    fn one_level_writes_slow_once_a_memtable_waits_or_more_is_due_than_a_turn_takes() {
        assert_eq!(one_level_backlog(0, 0, 2), None);
        assert_eq!(one_level_backlog(0, 2, 2), None);
        assert_eq!(one_level_backlog(0, 3, 2), Some(3));
        assert_eq!(one_level_backlog(1, 0, 2), Some(1));
        assert_eq!(one_level_backlog(1, 2, 2), Some(3));
    }

    #[test]
    fn a_one_level_flush_owns_level1() {
        let p = Policy {
            one_level: true,
            ..policy()
        };
        let s = Shape {
            depth: 1,
            ..shape(0, &[(0, 500)])
        };
        let mut running = Running::default();
        running.start(&Work::Flush, &s, &p);
        assert!(running.level1_busy());
        running.finish(&Work::Flush, 2, &p);
        assert_eq!(running, Running::default());
        // Level 1 is the bottom: nothing to push down.
        assert_eq!(pick(&s, 0, &running, &p), None);
    }

    #[test]
    fn one_level_flushes_and_push_downs_out_of_level1_take_turns() {
        let p = Policy {
            one_level: true,
            background_threads: 1,
            ..policy()
        };
        // Level 1 over a bottom level, both of its TPHs past their target.
        let s = shape(0, &[(0, 500), (1, 500)]);
        let mut running = Running::default();
        let first = pick(&s, 0, &running, &p).unwrap();
        assert!(matches!(first, Work::PushDown(TphId { level: 1, .. })));
        running.start(&first, &s, &p);
        // With nothing to flush the other push-down starts at once.
        assert!(matches!(
            pick(&s, 0, &running, &p),
            Some(Work::PushDown(TphId { level: 1, .. }))
        ));
        // A waiting memtable has the next turn: the other push-down waits
        // for it rather than keep level 1 from it.
        assert_eq!(pick(&s, 1, &running, &p), None);
        running.finish(&first, 2, &p);
        assert_eq!(pick(&s, 1, &running, &p), Some(Work::Flush));
        running.start(&Work::Flush, &s, &p);
        running.finish(&Work::Flush, 2, &p);
        // After the flush, a push-down has its turn again, though another
        // memtable waits: starving them let level 1 grow with the database.
        let second = pick(&s, 1, &running, &p).unwrap();
        assert!(matches!(second, Work::PushDown(TphId { level: 1, .. })));
        running.start(&second, &s, &p);
        assert_eq!(pick(&s, 1, &running, &p), None);
    }

    fn life(live: u64, entries: u64, live_bytes: u64) -> PieceLife {
        PieceLife {
            live,
            entries,
            live_bytes,
            garbage: Garbage::default(),
        }
    }

    /// `tph(head, live)` with `dead` more bytes of replaced entries and
    /// `tombstones` of its live keys (of `live / 10`) tombstones.
    fn with_garbage(head: u64, live: u64, dead: u64, tombstones: u64) -> TphSize {
        let mut t = tph(head, live);
        t.garbage.data_bytes += dead;
        t.garbage.dead_bytes = dead;
        t.garbage.live_tombstones = tombstones;
        t.garbage.live_tombstone_bytes = tombstones;
        t
    }

    #[test]
    fn garbage_is_collected_once_nothing_else_is_due() {
        let p = policy();
        let mut s = shape(0, &[(0, 50)]);
        // Level 2 (the bottom): 60 of 100 bytes dead.
        s.levels[1].insert(1, with_garbage(7, 40, 60, 0));
        let gc = Some(Work::Gc(TphId {
            level: 2,
            partition: 1,
        }));
        assert_eq!(pick(&s, 0, &Running::default(), &p), gc);
        // Below the ratio: nothing to do.
        s.levels[1].insert(1, with_garbage(7, 60, 40, 0));
        assert_eq!(pick(&s, 0, &Running::default(), &p), None);
        // At the bottom, live tombstones are garbage too.
        s.levels[1].insert(1, with_garbage(7, 60, 40, 20));
        assert_eq!(pick(&s, 0, &Running::default(), &p), gc);

        // A waiting flush, a level 0 that is due and a push-down go first.
        assert_eq!(pick(&s, 1, &Running::default(), &p), Some(Work::Flush));
        let mut running = Running::default();
        running.start(&Work::Flush, &s, &p);
        assert_eq!(pick(&s, 1, &running, &p), gc, "the flush runs");
        let mut due = s.clone();
        due.l0 = shape(4, &[]).l0;
        assert!(matches!(
            pick(&due, 0, &Running::default(), &p),
            Some(Work::L0ToL1(_))
        ));
        running.all_of_level1 = true;
        assert_eq!(pick(&due, 0, &running, &p), None, "level 0 waits");
        s.levels[0].insert(0, tph(1, 150));
        assert!(matches!(
            pick(&s, 0, &Running::default(), &p),
            Some(Work::PushDown(TphId { level: 1, .. }))
        ));

        // One fold at a time, and never of a TPH a job owns.
        s.levels[0].insert(0, tph(1, 50));
        let mut running = Running::default();
        let work = pick(&s, 0, &running, &p).unwrap();
        running.start(&work, &s, &p);
        s.levels[1].insert(0, with_garbage(8, 10, 90, 0));
        assert_eq!(pick(&s, 0, &running, &p), None);
        running.finish(&work, 2, &p);
        assert_eq!(running, Running::default());
        running.start(
            &Work::PushDown(TphId {
                level: 1,
                partition: 0,
            }),
            &s,
            &p,
        );
        assert_eq!(pick(&s, 0, &running, &p), None, "both are children");
        // The most garbage goes first.
        assert_eq!(
            pick(&s, 0, &Running::default(), &p),
            Some(Work::Gc(TphId {
                level: 2,
                partition: 0
            }))
        );
        // Off at a ratio of one.
        let off = Policy {
            gc_dead_ratio: 1.0,
            ..p
        };
        assert_eq!(pick(&s, 0, &Running::default(), &off), None);
    }

    #[test]
    fn the_whole_database_holds_at_most_max_garbage_ratio() {
        let p = Policy {
            max_garbage_ratio: 0.2,
            ..policy()
        };
        // Two bottom TPHs below `gc_dead_ratio`: 30 and 40 of 100 bytes.
        let mut s = shape(0, &[(0, 50), (1, 50)]);
        s.levels[1].insert(0, with_garbage(7, 70, 30, 0));
        s.levels[1].insert(1, with_garbage(8, 60, 40, 0));
        // 70 of 300 bytes: past 0.2, the larger share goes first.
        let second = Some(Work::Gc(TphId {
            level: 2,
            partition: 1,
        }));
        assert_eq!(pick(&s, 0, &Running::default(), &p), second);
        // Off at a ratio of one: each TPH is below its own threshold.
        let off = Policy {
            max_garbage_ratio: 1.0,
            ..p
        };
        assert_eq!(pick(&s, 0, &Running::default(), &off), None);
        // Once it is folded, 30 of 260 bytes are garbage: under the bound.
        s.levels[1].insert(1, with_garbage(9, 60, 0, 0));
        assert_eq!(pick(&s, 0, &Running::default(), &p), None);
        // Level 1 counts towards the whole, with its own garbage.
        s.levels[0].insert(0, with_garbage(1, 40, 5, 1));
        s.levels[1].insert(1, with_garbage(9, 60, 40, 0));
        assert_eq!(pick(&s, 0, &Running::default(), &p), second);
        // The bound never starts a fold ahead of other work.
        assert_eq!(pick(&s, 1, &Running::default(), &p), Some(Work::Flush));
    }

    #[test]
    fn tombstones_go_down_early_to_meet_what_they_delete() {
        let p = policy();
        // Above the bottom, tombstones hide what lies below: not garbage.
        let mut s = shape(0, &[(0, 50)]);
        s.levels[0].insert(0, with_garbage(1, 50, 0, 2));
        assert_eq!(pick(&s, 0, &Running::default(), &p), None);
        // Mostly tombstones (of 5 live keys): pushed down.
        s.levels[0].insert(0, with_garbage(1, 50, 0, 3));
        let push = Some(Work::PushDown(TphId {
            level: 1,
            partition: 0,
        }));
        assert_eq!(pick(&s, 0, &Running::default(), &p), push);
        // A level 0 of mostly tombstones compacts below its trigger, first.
        s.l0 = vec![tph(101, 10), tph(100, 10)];
        assert_eq!(pick(&s, 0, &Running::default(), &p), push);
        s.l0[0] = with_garbage(101, 10, 0, 1);
        assert_eq!(
            pick(&s, 0, &Running::default(), &p),
            Some(Work::L0ToL1(vec![100, 101]))
        );
    }

    /// A piece of `entries` entries of 10 bytes, `live` of them live,
    /// `tombstones` of those tombstones.
    fn piece(live: u64, entries: u64, tombstones: u64) -> PieceLife {
        PieceLife {
            live,
            entries,
            live_bytes: live * 10,
            garbage: Garbage {
                data_bytes: entries * 10,
                dead_bytes: (entries - live) * 10,
                live_entries: live,
                live_tombstones: tombstones,
                live_tombstone_bytes: tombstones * 10,
            },
        }
    }

    #[test]
    fn gc_folds_replaced_entries_first_within_the_memory_bound() {
        let per_entry = crate::tph::MERGE_BYTES_PER_ENTRY + 10;
        let pieces = [
            piece(10, 10, 0), // no garbage: stays
            piece(5, 10, 5),  // half dead, tombstones
            piece(2, 10, 0),  // most dead
            piece(8, 8, 8),   // only tombstones
            piece(0, 10, 0),  // dead: goes without a fold
        ];
        // Room for everything: every piece with garbage.
        let all = pick_gc_victims(&pieces, true, u64::MAX);
        assert_eq!(all, [false, true, true, true, false]);
        // Above the bottom tombstones are not garbage.
        let above = pick_gc_victims(&pieces, false, u64::MAX);
        assert_eq!(above, [false, true, true, false, false]);
        // Room for one: the largest dead share.
        let one = pick_gc_victims(&pieces, true, 2 * per_entry);
        assert_eq!(one, [false, false, true, false, false]);
        // At least one, however large.
        assert_eq!(pick_gc_victims(&pieces, true, 1), one);
        // Then the next dead share.
        assert_eq!(
            pick_gc_victims(&pieces, true, 7 * per_entry),
            [false, true, true, false, false]
        );
        // With nothing replaced, the tombstones, the most first.
        let tombstones = [piece(4, 4, 1), piece(6, 6, 3), piece(5, 5, 0)];
        assert_eq!(pick_gc_victims(&tombstones, true, 1), [false, true, false]);
        assert_eq!(
            pick_gc_victims(&tombstones, false, u64::MAX),
            [false, false, false]
        );
    }

    #[test]
    fn folds_keep_the_piece_count_and_take_the_cheapest() {
        // Four pieces, room for four with the new one: fold the cheapest.
        let pieces = [
            life(10, 10, 500),
            life(10, 10, 100),
            life(10, 10, 300),
            life(10, 10, 100),
        ];
        assert_eq!(
            pick_victims(&pieces, 4, 0.3, true),
            [false, true, false, false]
        );
        // Ties go to the oldest; room for all: nothing folds.
        assert_eq!(pick_victims(&pieces, 5, 0.3, true), [false; 4]);
        assert_eq!(
            pick_victims(&pieces, 2, 0.3, true),
            [false, true, true, true]
        );
    }

    #[test]
    fn mostly_dead_pieces_fold_and_dead_ones_just_go() {
        let pieces = [life(2, 10, 20), life(0, 10, 0), life(9, 10, 90)];
        // The first is 20% live: folded even with room, making a new piece.
        assert_eq!(pick_victims(&pieces, 16, 0.3, false), [true, false, false]);
        assert_eq!(pick_victims(&pieces, 16, 0.1, false), [false; 3]);
        // At max_pieces without a delta, one still folds to make room.
        assert_eq!(pick_victims(&pieces[2..], 1, 0.1, false), [true]);
    }

    #[test]
    fn the_bottom_deepens_once_its_tphs_average_past_the_target_or_one_level_has_one_due() {
        let p = policy();
        // Depth 2 over fanout 2: 4 bottom partitions of target 100, so
        // deepening starts past 4 * 100 bytes, however they are spread.
        let mut s = shape(0, &[]);
        s.levels[1] = (0..4).map(|i| (i, tph(i, 100))).collect();
        assert!(!should_deepen(&s, &p));
        s.levels[1].insert(0, tph(0, 20));
        s.levels[1].insert(3, tph(3, 181));
        assert!(should_deepen(&s, &p));
        assert!(should_deepen(&s, &p));
        assert!(!should_deepen(&s, &Policy { max_levels: 2, ..p }));
        // One-level mode: level 1 and one level below it, no more.
        let one_level = Policy {
            one_level: true,
            ..p
        };
        assert!(!should_deepen(&s, &one_level));
        // It deepens as soon as one TPH passes its push-down threshold (75
        // and 100 bytes), before the average reaches the target.
        let mut s1 = shape(0, &[(0, 70), (1, 90)]);
        s1.depth = 1;
        assert!(!should_deepen(&s1, &one_level));
        s1.levels[0].insert(0, tph(0, 76));
        s1.levels[0].insert(1, tph(1, 10));
        assert!(should_deepen(&s1, &one_level));
        assert!(!should_deepen(&s1, &p));
        assert!(!should_deepen(
            &s1,
            &Policy {
                max_levels: 1,
                ..one_level
            }
        ));
    }
}
