//! What a job's merges are given: a file number for what they write, and
//! the context of each merge, with the memory it may hold.

use super::super::Inner;
use crate::compaction;
use crate::error::{Error, Result};
use crate::tph::MergeContext;

/// Memory of a level-0 TPH's global index build (a flush's, or a bulk
/// load's): chunks of about 75,000 keys, 2 MiB to peel, not 2^18 keys and
/// 7 MiB. The build is a flush's largest table (28 bytes an entry against
/// the list's and hashes' 16), and a flush runs at every peak of a load,
/// its frozen memtable beside the active one; a level-0 TPH's index lives
/// until the next level-0 merge, so its chunks' 3% more cells cost little.
const LEVEL0_INDEX_MEMORY_BYTES: usize = 2 << 20;

impl Inner {
    /// The memory one merge on the calling thread may hold for the pieces
    /// it folds, and again for the index it builds: a quarter of a job's
    /// share, halved on the low-priority pool and beside it.
    pub(in crate::db) fn merge_memory_now(&self) -> u64 {
        let full = self.opts.merge_memory_bytes();
        match &self.low_priority {
            Some(l) => (full * l.merge_halves(&self.pool) / 2).max(1),
            None => full,
        }
    }

    pub(in crate::db) fn new_file_number(&self) -> Result<u64> {
        let mut st = self.state.lock();
        match st.versions.writable() {
            Some(vs) => Ok(vs.new_file_number()),
            None => Err(Error::Internal("a job on a read-only database".into())),
        }
    }

    /// A merge's context: what it writes into (`level`, `partition`) and
    /// with what memory.
    pub(in crate::db) fn merge_context(
        &self,
        level: u32,
        partition: u64,
        bottom: bool,
        number: u64,
    ) -> MergeContext<'_> {
        // One share for the folds and one for the index, read once so
        // that both are the same.
        let merge_memory = self.merge_memory_now();
        MergeContext {
            fs: &self.fs,
            dir: &self.dir,
            reads: &self.piece_reads,
            piece_options: &self.piece_options,
            sig_bits: if bottom {
                self.opts.bottom_signature_bits
            } else {
                self.opts.signature_bits
            },
            field_bits: (bottom && self.opts.bottom_field_bits > 0)
                .then_some(self.opts.bottom_field_bits),
            level,
            partition,
            bottom,
            max_pieces: self.opts.effective_max_pieces(),
            push_past_bytes: (level >= 1 && !bottom).then(|| {
                let fanout = u64::from(self.opts.fanout);
                compaction::push_down_threshold(self.opts.tph_target_bytes, fanout, partition)
            }),
            bottom_pushed_near: (level >= 1
                && bottom
                && compaction::may_deepen(&self.policy, u64::from(self.opts.fanout), level))
            .then(|| compaction::deepens_near(&self.policy, u64::from(self.opts.fanout))),
            min_live_ratio: self.opts.min_live_ratio,
            gc_input_bytes: None,
            fold_memory_bytes: merge_memory,
            new_number: number,
            // A read-only database runs no merge; a number not used is a
            // gap in the file numbers, nothing more.
            index_number: self.new_file_number().ok(),
            index_memory_bytes: match level {
                0 => (merge_memory as usize).min(LEVEL0_INDEX_MEMORY_BYTES),
                _ => merge_memory as usize,
            },
            job_memory: Some(&self.stats.job_memory),
            hashes: match level {
                0 => 0..=u64::MAX,
                _ => {
                    let partitions = u64::from(self.opts.fanout).saturating_pow(level);
                    crate::hash::hashes_of_partitions(partition..partition + 1, partitions)
                }
            },
            pinned: &[],
            inputs: &[],
            carried_down: &[],
            below: None,
        }
    }
}
