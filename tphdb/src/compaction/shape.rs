//! What the picker sees of a version: the size and garbage of each TPH by
//! place, and the policy's knobs; when the tree gets a level deeper.

use std::collections::BTreeMap;

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
    pub(super) fn garbage_share(&self, bottom: bool) -> f64 {
        self.garbage.foldable_bytes(bottom) as f64 / self.garbage.data_bytes.max(1) as f64
    }

    /// The share of its stored bytes that the versions its live entries
    /// hide in lower levels amount to (above the bottom).
    pub(super) fn shadowed_share(&self) -> f64 {
        self.garbage.shadowed_bytes as f64 / self.garbage.data_bytes.max(1) as f64
    }

    /// The share of its live keys that are tombstones.
    pub(super) fn tombstone_share(&self) -> f64 {
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
    pub(super) fn partitions(&self, level: u32) -> u64 {
        self.fanout.saturating_pow(level)
    }

    /// The share of all stored data bytes (level 0 included) that folds
    /// would free (see [`TphSize::garbage_share`]), with the versions
    /// that the live entries of TPHs above the bottom hide below them,
    /// which their push-downs and then folds free.
    pub(super) fn garbage_share(&self) -> f64 {
        let (mut garbage, mut stored) = (0u64, 0u64);
        for t in &self.l0 {
            stored += t.garbage.data_bytes;
        }
        for (i, level) in self.levels.iter().enumerate() {
            let bottom = i + 1 == self.depth as usize;
            for t in level.values() {
                stored += t.garbage.data_bytes;
                garbage += t.garbage.collectable_bytes(bottom);
            }
        }
        garbage as f64 / stored.max(1) as f64
    }

    pub(super) fn children(&self, id: TphId) -> impl Iterator<Item = TphId> + '_ {
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
    /// urgent is due (see [`super::picker`]).
    pub(crate) gc_dead_ratio: f64,
    /// The share of all stored bytes that may be garbage: past it, the TPH
    /// with the largest garbage share is collected whatever that share.
    pub(crate) max_garbage_ratio: f64,
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

/// Whether a tree `depth` levels deep may still get a level below its
/// bottom.
pub(crate) fn may_deepen(policy: &Policy, fanout: u64, depth: u32) -> bool {
    let deepest = if policy.one_level {
        policy.max_levels.min(ONE_LEVEL_MAX_DEPTH)
    } else {
        policy.max_levels
    };
    depth < deepest && partitions_fit(fanout, depth + 1)
}

/// About the size a bottom TPH has when its level gets one below it (see
/// [`should_deepen`]): the target, or in one-level mode the lowest
/// push-down threshold, which the first of level 1's TPHs (all growing
/// alike) passes. Counting on the target there, a 16M x 1 KiB one-level
/// fill's level-1 TPHs folded all 16 pieces (650 MB) in one flush a few
/// flushes before the level below took them, and writes stood still for
/// two seconds.
pub(crate) fn deepens_near(policy: &Policy, fanout: u64) -> u64 {
    if policy.one_level {
        push_down_threshold(policy.tph_target_bytes, fanout, 0)
    } else {
        policy.tph_target_bytes
    }
}

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
    if !may_deepen(policy, shape.fanout, shape.depth) {
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
