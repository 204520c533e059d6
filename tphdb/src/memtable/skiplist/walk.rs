//! Listing a whole list in order as a flush does, several runs of it
//! walked side by side.
//!
//! A walk along level 0 waits for each node before it learns the next
//! one's address: a cache miss an entry, as nodes lie in the arena in
//! the order they were written, not in key order. A flush's walk of a
//! 64 MiB memtable (370,000 entries of 128-byte values) took 17% of the
//! flush. The nodes of a higher level cut the list into runs whose ends
//! are known before they are walked; walking [`RUNS_AT_ONCE`] of them in
//! turn keeps that many misses in flight instead of one.

use std::sync::atomic::Ordering::Acquire;

use super::{link, prefetch, Entry, SkipList};

/// The level whose nodes cut the list into runs: one node in 4^2 on
/// average, so runs of about 16 entries and a walk of a sixteenth of the
/// nodes to find them.
const RUN_LEVEL: usize = 2;
/// Runs walked side by side.
const RUNS_AT_ONCE: usize = 16;

impl SkipList {
    /// Calls `f` with the first (newest) version of every key, in key
    /// order. Meant for a frozen list; on a list still written to it
    /// passes at least the entries linked before the call.
    pub(crate) fn for_each_newest<'a>(&'a self, mut f: impl FnMut(Entry<'a>)) {
        // Run `i` starts at `bounds[i]` and ends before `bounds[i + 1]`
        // (null: the list's end).
        let mut bounds = vec![self.first_at(0)];
        let level = RUN_LEVEL.min(self.height.load(Acquire).saturating_sub(1));
        if level > 0 {
            let mut x = self.first_at(level);
            while !x.is_null() {
                bounds.push(x);
                // SAFETY: a node linked at `level` is taller than it.
                x = unsafe { link(x, level) }.load(Acquire);
            }
        }
        bounds.push(std::ptr::null_mut());
        let mut last: Option<Entry<'_>> = None;
        let mut runs: Vec<Vec<Entry<'_>>> = (0..RUNS_AT_ONCE).map(|_| Vec::new()).collect();
        let mut at = [std::ptr::null_mut(); RUNS_AT_ONCE];
        for first in (0..bounds.len() - 1).step_by(RUNS_AT_ONCE) {
            let group = &bounds[first..(first + RUNS_AT_ONCE + 1).min(bounds.len())];
            let count = group.len() - 1;
            at[..count].copy_from_slice(&group[..count]);
            let mut walking = count;
            while walking > 0 {
                walking = 0;
                for j in 0..count {
                    let x = at[j];
                    if x == group[j + 1] {
                        continue;
                    }
                    walking += 1;
                    // SAFETY: `x` is a linked node of this list, which
                    // lives as long as `self`.
                    let next = unsafe { link(x, 0) }.load(Acquire);
                    prefetch(next);
                    let e = Entry::new(x).expect("runs hold linked nodes");
                    // Versions of a key lie newest first.
                    if runs[j].last().is_none_or(|last| last.key() != e.key()) {
                        runs[j].push(e);
                    }
                    at[j] = next;
                }
            }
            for run in &mut runs[..count] {
                for (k, e) in run.drain(..).enumerate() {
                    // A key's versions may straddle two runs.
                    if k == 0 && last.is_some_and(|last| last.key() == e.key()) {
                        continue;
                    }
                    f(e);
                    last = Some(e);
                }
            }
        }
    }

    /// The first node linked at `level` (null if none).
    fn first_at(&self, level: usize) -> *mut u8 {
        // SAFETY: the head has every level.
        unsafe { link(self.head, level) }.load(Acquire)
    }
}
