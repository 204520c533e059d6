//! What to flush or compact next, and which pieces a merge folds: pure
//! functions of the shape of a version, the jobs running and the policy,
//! apart from running jobs and applying their edits (LevelDB's
//! `VersionSet::PickCompaction`).
//!
//! A job owns the TPHs it rewrites: a flush in one-level mode and a level-0
//! compaction own all of level 1; pushing TPH `(i, p)` down owns its
//! `fanout` children, and `(i, p)` itself only at its end, so merges into
//! it go on meanwhile (see [`Running`]); a GC fold owns its TPH. Jobs on
//! disjoint TPHs run in parallel.

mod picker;
mod shape;
#[cfg(test)]
mod tests;
mod victims;

pub(crate) use picker::{level1_due, one_level_backlog, pick, Running, Work};
pub(crate) use shape::{
    deepens_near, may_deepen, push_down_threshold, should_deepen, Policy, Shape, TphId,
};
pub(crate) use victims::{pick_gc_victims, pick_victims, PieceLife};
