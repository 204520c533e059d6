//! How a merge of TPHs into a level is cut into passes over ranges of the
//! target partitions, and whether a pass holds its entries or their
//! shapes (see `Inner::merge_tphs_into_level`).

use std::ops::Range;
use std::sync::Arc;

use crate::tph::{Tph, MERGE_BYTES_PER_ENTRY};

/// Memory a merge of `t`'s live entries holds: keys and values, plus what
/// each entry costs (in the inputs, the merged list and a partition's).
pub(super) fn merge_memory(t: &Tph) -> u64 {
    t.live_data_bytes() + t.live_count() * MERGE_BYTES_PER_ENTRY
}

/// A merge's passes: target partitions a pass, and whether passes hold
/// their entries by shape.
pub(super) struct Passes {
    pub(super) per_pass: u64,
    pub(super) by_shape: bool,
}

impl Passes {
    /// The passes of a merge of `inputs` into `targets`: each within
    /// `budget` (the job's input memory) unless one partition passes it;
    /// `values_run` is what a pass of a new piece's writing reads again at
    /// a time.
    pub(super) fn plan(
        inputs: &[Arc<Tph>],
        budget: u64,
        values_run: u64,
        targets: &Range<u64>,
    ) -> Passes {
        let input_bytes: u64 = inputs.iter().map(|t| merge_memory(t)).sum();
        let data_bytes: u64 = inputs.iter().map(|t| t.live_data_bytes()).sum();
        let entries: u64 = inputs.iter().map(|t| t.live_count()).sum();
        let per_pass = partitions_per_pass(input_bytes, budget, targets);
        let by_shape = holds_shapes(
            (input_bytes, data_bytes, entries),
            (budget, values_run),
            per_pass,
            targets,
        );
        Passes { per_pass, by_shape }
    }
}

/// How many of `targets` one pass of a merge of `input_bytes` takes: as
/// many as keep a pass's share of the input (hashes are uniform, so each
/// partition's is even) within `budget`, and at least one. A pass holds
/// at least one partition's share, which passes the budget when the input
/// does `targets.len()` times (a push-down of a TPH over `fanout` times
/// the job's input; see `docs/design.md`).
fn partitions_per_pass(input_bytes: u64, budget: u64, targets: &Range<u64>) -> u64 {
    let width = (targets.end - targets.start).max(1);
    let fit = u128::from(width) * u128::from(budget) / u128::from(input_bytes.max(1));
    fit.clamp(1, u128::from(width)) as u64
}

/// Entries a run of values read again must hold for a pass to hold its
/// entries by shape when it fits the budget: a run reads the blocks of
/// the inputs its entries lie in, and a run of few entries (a level-0
/// merge's at 1 KiB values: 4,000) found them sparse there, reading each
/// block of its inputs 7 times over and slowing a 16M x 1 KiB fill by
/// 25%. At 128-byte values a run holds 27,000 and the reads cost no
/// time measured.
const MIN_RUN_ENTRIES: u64 = 16 << 10;

/// Whether passes of `per_pass` of `targets` hold their entries by shape:
/// when a pass's share of the input passes `budget`, which happens only
/// at one partition a pass, or when its share of the inputs' keys and
/// values (`data_bytes` over `entries`) passes twice `values_run`, the
/// values a pass of the new piece's writing reads again at a time (held,
/// they would take at least twice what a pass by shape holds of them),
/// and such a run holds [`MIN_RUN_ENTRIES`].
fn holds_shapes(
    (input_bytes, data_bytes, entries): (u64, u64, u64),
    (budget, values_run): (u64, u64),
    per_pass: u64,
    targets: &Range<u64>,
) -> bool {
    let width = u128::from((targets.end - targets.start).max(1));
    let past = |bytes: u64, bound: u64| {
        u128::from(bytes) * u128::from(per_pass) > u128::from(bound) * width
    };
    let run_entries = u128::from(values_run) * u128::from(entries) / u128::from(data_bytes.max(1));
    past(input_bytes, budget)
        || (past(data_bytes, values_run.saturating_mul(2))
            && run_entries >= u128::from(MIN_RUN_ENTRIES))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_holds_at_most_the_budget_unless_one_partition_passes_it() {
        // 5.5 budgets over 8 partitions: one partition a pass, not some
        // passes of one and some of two (two would hold 1.4 budgets).
        assert_eq!(partitions_per_pass(55, 10, &(0..8)), 1);
        assert_eq!(partitions_per_pass(40, 10, &(0..8)), 2);
        assert_eq!(partitions_per_pass(10, 10, &(8..16)), 8);
        assert_eq!(partitions_per_pass(0, 10, &(0..8)), 8);
        assert_eq!(partitions_per_pass(1000, 10, &(0..8)), 1);
        for input in 1..200u64 {
            let per = partitions_per_pass(input, 10, &(0..8));
            assert!(per == 1 || input * per <= 10 * 8, "{input}: {per}");
        }
    }

    #[test]
    fn a_pass_holds_shapes_past_its_budget_or_of_many_small_entries_past_two_runs() {
        let eight = 0..8;
        // Past the budget at one partition a pass, whatever the entries.
        assert!(holds_shapes((90, 80, 1), (10, 100), 1, &eight));
        assert!(!holds_shapes((80, 70, 1), (10, 100), 1, &eight));
        // Within the budget: a pass of 128-byte entries past two runs of
        // values, and not one of 1 KiB entries (too few a run).
        let small = (200 << 20, 160 << 20, 1 << 20);
        assert!(holds_shapes(small, (32 << 20, 4 << 20), 1, &eight));
        assert!(!holds_shapes(small, (32 << 20, 16 << 20), 1, &eight));
        let large = (1200 << 20, 1100 << 20, 1 << 20);
        assert!(!holds_shapes(large, (160 << 20, 4 << 20), 1, &eight));
        // Two partitions a pass hold twice the share.
        let near = (100 << 20, 60 << 20, 400 << 10);
        assert!(!holds_shapes(near, (32 << 20, 4 << 20), 1, &eight));
        assert!(holds_shapes(near, (32 << 20, 4 << 20), 2, &eight));
    }
}
