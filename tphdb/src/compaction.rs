//! What to flush or compact next, and which pieces a merge folds: pure
//! functions of the shape of a version, the jobs running and the policy,
//! apart from running jobs and applying their edits (LevelDB's
//! `VersionSet::PickCompaction`).
//!
//! A job owns the TPHs it rewrites: a flush in one-level mode and a level-0
//! compaction own all of level 1; pushing TPH `(i, p)` down owns it and its
//! `fanout` children. Jobs on disjoint TPHs run in parallel.

use std::collections::{BTreeMap, HashSet};

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
    /// Push-downs out of level 1 started since the last level-0 compaction.
    pub(crate) level1_pushes_since_l0: usize,
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
                self.all_of_level1 |= policy.one_level;
            }
            Work::L0ToL1(_) => {
                debug_assert!(!self.level1_busy());
                self.all_of_level1 = true;
                self.level1_pushes_since_l0 = 0;
            }
            Work::PushDown(id) => {
                debug_assert!(!self.tphs.contains(id));
                self.level1_pushes_since_l0 += usize::from(id.level == 1);
                self.tphs.insert(*id);
                self.tphs.extend(shape.children(*id));
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
        }
    }
}

/// The job to start next, if any: flushes first (writers wait for them),
/// then compactions.
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
    let flush_blocked = policy.one_level && running.level1_busy();
    if !running.flush && frozen_memtables > 0 && !flush_blocked {
        return Some(Work::Flush);
    }
    let l0_waiting = !policy.one_level && shape.l0.len() >= policy.l0_compaction_trigger;
    let level1_turn = running.level1_pushes_since_l0 < policy.background_threads.max(1)
        && shape.l0.len() < policy.l0_slowdown_trigger;
    // While level 0 waits, push-downs out of level 1 start only in their
    // turn, also while another holds level 1: otherwise the threads could
    // hand level 1 to each other until every due TPH had gone down.
    let push = most_urgent_push_down(shape, running, policy, !l0_waiting || level1_turn);
    if l0_waiting && !running.level1_busy() {
        return match push {
            Some(id) if id.level == 1 => Some(Work::PushDown(id)),
            _ => Some(Work::L0ToL1(oldest_l0_that_fit(shape, policy))),
        };
    }
    push.map(Work::PushDown)
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
                && !running.tphs.contains(&id)
                && shape.children(id).all(|c| !running.tphs.contains(&c))
            {
                best = Some((score, id));
            }
        }
    }
    best.map(|(_, id)| id)
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

/// Whether the bottom level should get a level below it: its TPHs average
/// more than the target size, and one more level fits. Every TPH is then
/// held near `tph_target_bytes`, at the bottom as above it, and receives
/// pieces of about a `fanout`th of that: `max_pieces` of them fit before a
/// fold. Letting the bottom grow to `fanout` times the target instead (the
/// rule before) made a TPH of 2 GB receive pieces of 30-60 MB, and keeping
/// 16 pieces then folded an eighth of it each time: `fillrandom` of 16M
/// 1 KiB values wrote 2.26 bytes of folds per byte, against the one
/// push-down per level a deeper tree costs.
pub(crate) fn should_deepen(shape: &Shape, policy: &Policy) -> bool {
    if policy.one_level
        || shape.depth >= policy.max_levels
        || !partitions_fit(shape.fanout, shape.depth + 1)
    {
        return false;
    }
    let bottom: u64 = shape.levels[shape.depth as usize - 1]
        .values()
        .map(|t| t.live_data_bytes)
        .sum();
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
        }
    }

    fn tph(head: u64, live_data_bytes: u64) -> TphSize {
        TphSize {
            head,
            live_data_bytes,
            merge_bytes: live_data_bytes * 2,
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
        running.level1_pushes_since_l0 = 5;
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
        // No push-down in one-level mode: level 1 is the bottom.
        assert_eq!(pick(&s, 0, &running, &p), None);
    }

    fn life(live: u64, entries: u64, live_bytes: u64) -> PieceLife {
        PieceLife {
            live,
            entries,
            live_bytes,
        }
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
    fn the_bottom_deepens_once_its_tphs_average_past_the_target() {
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
        assert!(!should_deepen(
            &s,
            &Policy {
                one_level: true,
                ..p
            }
        ));
    }
}
