//! Push-downs that let merges into their TPH go on.
//!
//! A push-down moves a TPH, as it was when the job was picked, into its
//! children. Meanwhile flushes (in one-level mode), level-0 compactions and
//! the push-downs of its parent may merge into the TPH; they keep the
//! pieces it carries (its pins) instead of folding them. Once the children
//! are written, the push-down takes the TPH (waiting, parked, for a merge
//! into it to finish) and, in the same edit as the children, drops the
//! pieces it carried down: what was merged in meanwhile stays, under a new
//! global index over those pieces alone.
//!
//! Every key of the pieces that stay is newer than the carried pieces, so
//! the TPH's view of those keys is unchanged; keys only the carried pieces
//! held are now found below, with the versions they had.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::install::{discard, Change};
use super::jobs::priority::Start;
use super::Inner;
use crate::compaction::TphId;
use crate::error::{Error, Result};
use crate::tph::{merge, Tph};

/// The pieces each running push-down carries down, by its TPH.
pub(crate) type Pins = HashMap<TphId, Arc<[u64]>>;

/// What running push-downs hold beside [`crate::compaction::Running`].
#[derive(Default)]
pub(crate) struct PushDowns {
    pub(crate) pins: Pins,
    /// Push-downs whose children are written, waiting for the merge into
    /// their TPH to end; they still count as running jobs.
    parked: HashMap<TphId, Parked>,
}

struct Parked {
    source: Arc<Tph>,
    change: Change,
}

impl PushDowns {
    /// Records a push-down of `source` starting.
    pub(crate) fn start(&mut self, id: TphId, source: &Tph) {
        self.pins.insert(id, source.piece_numbers().into());
    }

    pub(crate) fn finish(&mut self, id: TphId) {
        self.pins.remove(&id);
    }
}

impl Inner {
    /// Pushes `source` into its children, then drops what it carried from
    /// its TPH, all in `change`. Returns `false` when it parked instead:
    /// a merge into the TPH runs, and [`Inner::resume_push_downs`] starts
    /// the rest once it ends. `alone` (a manual compaction) means no other
    /// job runs.
    pub(super) fn push_down(
        &self,
        id: TphId,
        source: &Arc<Tph>,
        alone: bool,
        change: &mut Change,
    ) -> Result<bool> {
        let fanout = self.current_version().layout.fanout;
        let children = id.partition * fanout..(id.partition + 1) * fanout;
        let inputs = std::slice::from_ref(source);
        self.merge_tphs_into_level(inputs, id.level + 1, children, None, change)?;
        {
            let mut st = self.state.lock();
            if !alone && !st.running.take_source(id) {
                st.running.park(id);
                let change = std::mem::take(change);
                let source = source.clone();
                st.push_downs.parked.insert(id, Parked { source, change });
                self.stats.push_down_waits.fetch_add(1, Relaxed);
                return Ok(false);
            }
        }
        self.trim_source(id, source, change)
            .inspect_err(|_| discard(change))?;
        Ok(true)
    }

    /// The rest of a parked push-down, once it holds its TPH.
    pub(super) fn finish_push_down(&self, id: TphId, change: &mut Change) -> Result<()> {
        let Parked { source, change: c } = self
            .state
            .lock()
            .push_downs
            .parked
            .remove(&id)
            .ok_or_else(|| {
                Error::Internal(format!(
                    "no parked push-down of {}/{}",
                    id.level, id.partition
                ))
            })?;
        *change = c;
        self.trim_source(id, &source, change)
            .inspect_err(|_| discard(change))
    }

    /// Starts the parked push-downs whose TPH no job merges into any more,
    /// while a thread is free for them. Called whenever a job ends, before
    /// new jobs are picked (the end holds its TPH, and so all of level 1
    /// for level 0's next compaction, but takes a fraction of a second),
    /// also while shutting down: parked jobs count as running.
    pub(super) fn resume_push_downs(self: &Arc<Self>, st: &mut super::State) {
        let ids: Vec<TphId> = st.push_downs.parked.keys().copied().collect();
        if ids.is_empty() {
            return;
        }
        let start = self.compaction_start(st);
        if start == Start::Wait {
            return; // until the normal jobs end
        }
        for id in ids {
            if st.running.resume(id, &self.policy) {
                self.note_running_compactions(st);
                let job = super::jobs::Job::FinishPushDown(id);
                self.spawn_job(st, job, start == Start::Low);
            }
        }
    }

    /// Drops the pieces `source` carried down from its TPH, which the
    /// caller holds: the TPH leaves its level if nothing was merged into
    /// it meanwhile; otherwise a new head indexes the pieces that stay.
    fn trim_source(&self, id: TphId, source: &Tph, change: &mut Change) -> Result<()> {
        let (level, p) = (id.level, id.partition);
        let (current, depth) = {
            let st = self.state.lock();
            (st.current().tph(level, p).cloned(), st.current().depth)
        };
        change.retire(source);
        let Some(current) = current else {
            return Ok(());
        };
        if current.head_number() == source.head_number() {
            change.edit.remove.push((level, p));
            return Ok(());
        }
        let carried = source.piece_numbers();
        // The pieces that stay, as they are: a fold here would hold the
        // next flush back for nothing.
        let stay = current.piece_numbers();
        self.stats.push_downs_overlapped.fetch_add(1, Relaxed);
        let number = self.new_file_number()?;
        let below = || self.current_version();
        let mut ctx = self.merge_context(level, p, level == depth, number);
        ctx.carried_down = &carried;
        ctx.pinned = &stay;
        ctx.below = Some(&below);
        change.add(level, p, merge(&ctx, Some(&current), Vec::new())?);
        Ok(())
    }
}
