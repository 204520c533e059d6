//! The deltas flushes and compactions merge: memtables and TPHs read into
//! sorted lists within a memory bound, merged newest first, split by
//! partition, and merged into the TPHs of a level.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use rayon::prelude::*;

use super::install::{discard, Change};
use super::job_eta::JobProgress;
use super::passes::Passes;
use super::stats::HeldBytes;
use super::Inner;
use crate::compaction::TphId;
use crate::error::Result;
use crate::hash::{hashes_of_partitions, partition_of};
use crate::memtable::{FlushEntry, FrozenArena, MemTable, NewestVersion};
use crate::piece::{piece_write_memory, EntryShape};
use crate::tph::{
    merge, values_run, write_share, DeltaEntry, MergeOutcome, RangePasses, Tph, Written,
    SHARE_BYTES_PER_ENTRY,
};
use crate::util::min_heap::{heapify, sift_down};

/// The newest version of each key across `lists` (each sorted by key),
/// where `lists[0]` is the newest: a k-way merge, so at most the lists and
/// the output are in memory at once.
pub(super) fn newest_first<E: EntryShape>(lists: Vec<Vec<E>>) -> Vec<E> {
    if lists.len() == 1 {
        return lists.into_iter().next().expect("one list");
    }
    let total = lists.iter().map(Vec::len).sum();
    merge_newest(lists.into_iter().map(Vec::into_iter).collect(), total)
}

/// The newest version of each key across `sources` (each sorted by key),
/// where `sources[0]` is the newest, into a list of `capacity` entries
/// (at least the result's length, so that it is allocated once).
fn merge_newest<E: EntryShape, I: Iterator<Item = E>>(
    mut sources: Vec<I>,
    capacity: usize,
) -> Vec<E> {
    let mut out: Vec<E> = Vec::with_capacity(capacity);
    if sources.len() == 1 {
        out.extend(sources.pop().expect("one source"));
        return out;
    }
    // A min-heap of the sources by their head's key, equal keys newest
    // source first, kept as indexes compared through `heads`: keys are
    // neither cloned (a reference count each) nor pushed and popped, and
    // the top is replaced in place by its source's next entry.
    let mut heads: Vec<Option<E>> = sources.iter_mut().map(Iterator::next).collect();
    let mut heap: Vec<usize> = (0..heads.len()).filter(|&i| heads[i].is_some()).collect();
    heapify(&mut heap, |a, b| head_before(&heads, a, b));
    while let Some(&top) = heap.first() {
        let e = heads[top].take().expect("a head per heap entry");
        heads[top] = sources[top].next();
        if heads[top].is_none() {
            heap.swap_remove(0);
        }
        sift_down(&mut heap, 0, |a, b| head_before(&heads, a, b));
        if out.last().is_none_or(|last| last.key() != e.key()) {
            out.push(e);
        }
    }
    out
}

/// Whether source `a`'s head goes before source `b`'s: the smaller key,
/// equal keys the newer source.
fn head_before<E: EntryShape>(heads: &[Option<E>], a: usize, b: usize) -> bool {
    let key = |i: usize| heads[i].as_ref().expect("a head per heap entry").key();
    match key(a).cmp(key(b)) {
        Ordering::Less => true,
        Ordering::Equal => a < b,
        Ordering::Greater => false,
    }
}

/// The newest version of each key across frozen memtables (frozen here if
/// they were not), `mems[0]` the newest, sharing their memory: what a
/// flush into level 1 merges. The memtables are merged as they are read:
/// a flush of several holds one list, not one per memtable and their
/// merge.
pub(super) fn memtables_delta(mems: &[&MemTable]) -> Vec<DeltaEntry> {
    // At most one entry per version: sized once, no doubling on the way.
    let capacity = mems.iter().map(|m| m.len()).sum();
    if let [mem] = mems {
        let arena = mem.freeze();
        let mut delta = Vec::with_capacity(capacity);
        mem.for_each_newest_version(|v| delta.push(shared_entry(arena, &v)));
        return delta;
    }
    let sources = mems
        .iter()
        .map(|mem| {
            let arena = mem.freeze();
            mem.newest_versions().map(move |v| shared_entry(arena, &v))
        })
        .collect();
    merge_newest(sources, capacity)
}

/// A memtable's version as a delta entry sharing its frozen arena.
fn shared_entry(arena: &FrozenArena, v: &NewestVersion<'_>) -> DeltaEntry {
    let (chunk, off) = arena.share(v.key_and_value);
    DeltaEntry::new(chunk, off, v.key.len(), v.value.map(<[u8]>::len), v.seq)
}

/// [`memtables_delta`] as a flush into level 0 writes it: each entry
/// where it lies in its memtable, 8 bytes beside it instead of 40. A
/// single memtable (the usual flush, here and in [`memtables_delta`]) is
/// listed by runs of its skiplist walked side by side, 3x faster than one
/// entry after the other.
pub(super) fn memtables_flush_entries<'a>(mems: &[&'a MemTable]) -> Vec<FlushEntry<'a>> {
    if let [mem] = mems {
        mem.freeze();
        return mem.flush_list();
    }
    let capacity = mems.iter().map(|m| m.len()).sum();
    let sources = mems
        .iter()
        .map(|mem| {
            mem.freeze();
            mem.flush_entries()
        })
        .collect();
    merge_newest(sources, capacity)
}

/// Splits a sorted delta by partition of a level with `partitions` TPHs,
/// each part sorted by key and allocated at its exact size. The delta is
/// ordered by partition in place and the parts are cut off its end one by
/// one, so that at most one part is held twice.
pub(super) fn split(mut delta: Vec<Written>, partitions: u64) -> BTreeMap<u64, Vec<Written>> {
    let part = |e: &Written| partition_of(e.h(), partitions);
    delta.sort_unstable_by(|a, b| part(a).cmp(&part(b)).then_with(|| a.key().cmp(b.key())));
    let mut parts = BTreeMap::new();
    while let Some(last) = delta.last() {
        let p = part(last);
        let start = delta.partition_point(|e| part(e) < p);
        if start == 0 {
            delta.shrink_to_fit();
            parts.insert(p, std::mem::take(&mut delta));
            break;
        }
        parts.insert(p, delta.split_off(start));
        delta.shrink_to_fit();
    }
    debug_assert!(parts.keys().all(|&p| p < partitions));
    parts
}

impl Inner {
    /// Merges the live entries of `inputs` (newest first) into the TPHs of
    /// `level` in `targets`. At most a job's share of
    /// `compaction_memory_bytes` of input is held at once: past that, the
    /// targets are merged in several passes over ranges of partitions, each
    /// reading only the blocks of the inputs that hold entries in its range
    /// (an entry outside `targets` is never kept, and the count check
    /// reports it). A pass takes at least one partition; when one
    /// partition's share passes the budget (a push-down of a TPH over
    /// `fanout` times it), or its keys and values pass two runs of values
    /// read again and are many and small (a level-0 merge's pass at
    /// 128-byte values; see [`Passes::plan`]), a pass holds its entries by
    /// shape and the new piece reads their values again as it is written,
    /// a run of values at a time ([`values_run`]: the merge's fold memory,
    /// at most 4 MiB).
    /// Each new TPH is installed once written; `change` keeps the
    /// statistics, and the caller retires the inputs. `progress` counts
    /// the passes, or with one pass the TPHs merged.
    pub(super) fn merge_tphs_into_level(
        &self,
        inputs: &[Arc<Tph>],
        level: u32,
        targets: Range<u64>,
        progress: Option<&JobProgress>,
        change: &mut Change,
    ) -> Result<()> {
        let Passes { per_pass, by_shape } = Passes::plan(
            inputs,
            self.job_input_bytes(),
            values_run(self.merge_memory_now()),
            &targets,
        );
        let partitions = self.state.lock().current().partitions(level);
        let mut found = vec![0u64; inputs.len()];
        let passes = (targets.end - targets.start).div_ceil(per_pass);
        // One pass takes every live entry of the inputs, reading them
        // whole; several read on in each piece's key hashes.
        let mut ranges: Option<Vec<RangePasses>> =
            (passes > 1).then(|| inputs.iter().map(|_| RangePasses::default()).collect());
        let (pass_progress, merge_progress) = match passes {
            1 => (None, progress),
            _ => (progress, None),
        };
        if let Some(p) = pass_progress {
            p.start(passes.try_into().unwrap_or(u32::MAX));
        }
        for pass in 0..passes {
            let lo = targets.start + pass * per_pass;
            let hi = (lo + per_pass).min(targets.end);
            let hashes = hashes_of_partitions(lo..hi, partitions);
            if by_shape && inputs.len() == 1 && hi == lo + 1 {
                let r = ranges.as_mut().map(|r| &mut r[0]);
                let share = self.write_share_into(level, lo, &inputs[0], r, change);
                if let Some(n) = share.inspect_err(|_| discard(change))? {
                    found[0] += n;
                    if let Some(p) = pass_progress {
                        p.part_done();
                    }
                    continue;
                }
            }
            let lists = inputs
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let r = ranges.as_mut().map(|r| &mut r[i]);
                    let stats = &mut change.stats;
                    let l = if by_shape {
                        t.live_shapes_in(i, hashes.clone(), r, stats)?
                    } else {
                        Written::held(t.live_entries_in(hashes.clone(), r, stats)?)
                    };
                    found[i] += l.len() as u64;
                    Ok(l)
                })
                .collect::<Result<Vec<_>>>();
            let lists = lists.inspect_err(|_| discard(change))?;
            let held: u64 = lists.iter().map(Written::list_memory).sum();
            let _held = HeldBytes::new(&self.stats, held);
            let lists = newest_first(lists);
            self.merge_into_level(level, lists, inputs, true, merge_progress, change)?;
            if let Some(p) = pass_progress {
                p.part_done();
            }
        }
        for (i, t) in inputs.iter().enumerate() {
            let finished = match ranges.as_mut() {
                Some(r) => r[i].finish(t, &mut change.stats),
                None => Ok(()),
            };
            finished.inspect_err(|_| discard(change))?;
            if found[i] != t.live_count() {
                discard(change);
                return Err(t.live_count_mismatch(found[i]));
            }
        }
        Ok(())
    }

    /// Writes `source`'s share of `(level, partition)` as that place's TPH,
    /// installed at once, when the place holds none and is the bottom (a
    /// level the tree has just grown): from the share's key hashes, not
    /// its keys ([`write_share`]). Returns how many live entries the share
    /// had, or `None` when a merge is to take it.
    fn write_share_into(
        &self,
        level: u32,
        partition: u64,
        source: &Arc<Tph>,
        passes: Option<&mut RangePasses>,
        change: &mut Change,
    ) -> Result<Option<u64>> {
        {
            let st = self.state.lock();
            let v = st.current();
            if level != v.depth || v.tph(level, partition).is_some() {
                return Ok(None);
            }
        }
        let ctx = self.merge_context(level, partition, true, self.new_file_number()?);
        let expected = source.expected_live_in(&ctx.hashes);
        let _writing = HeldBytes::new(
            &self.stats,
            piece_write_memory(expected, &self.piece_options)
                + expected as u64 * SHARE_BYTES_PER_ENTRY,
        );
        let (outcome, found) = write_share(&ctx, source, passes)?;
        if matches!(outcome, MergeOutcome::Replaced { .. }) {
            self.stats.shares_written.fetch_add(1, Relaxed);
        }
        let mut one = Change::default();
        one.add(level, partition, outcome);
        change.absorb(self.install_now(one)?);
        Ok(Some(found))
    }

    /// Installs `one` (a merge's new TPH, or its removal) as an edit of its
    /// own, if it changes the version; returns what is left of it: its
    /// statistics, for the job's result.
    fn install_now(&self, mut one: Change) -> Result<Change> {
        if !one.changes_version() {
            return Ok(one);
        }
        let stats = std::mem::take(&mut one.stats);
        self.apply(one, &[])?;
        let mut left = Change::default();
        left.stats = stats;
        Ok(left)
    }

    /// Merges `delta` into the TPHs of `level` it touches, in parallel,
    /// each into the TPH current when its merge starts (a job's own TPHs
    /// change only by its hand). With `install_each`, each new TPH is
    /// installed as soon as it is written, as one edit, instead of with the
    /// job's result: the TPH it replaces (and its global index) goes then,
    /// not once every partition is done. Only for entries readers already
    /// see elsewhere (frozen memtables, level 0, the TPH pushed down): the
    /// version between the edits reads the same, and a crash between them
    /// leaves copies that the next merge of the same entries replaces.
    /// Entries held by shape are read again from `inputs`. A flush (and a
    /// level-0 compaction of one pass) counts the TPHs merged in
    /// `progress`.
    pub(super) fn merge_into_level(
        &self,
        level: u32,
        delta: Vec<Written>,
        inputs: &[Arc<Tph>],
        install_each: bool,
        progress: Option<&JobProgress>,
        change: &mut Change,
    ) -> Result<()> {
        let (partitions, bottom) = {
            let st = self.state.lock();
            (st.current().partitions(level), level == st.current().depth)
        };
        let parts = split(delta, partitions);
        if let Some(p) = progress {
            p.start(parts.len() as u32);
        }
        let numbers: Vec<u64> = parts
            .keys()
            .map(|_| self.new_file_number())
            .collect::<Result<_>>()?;
        let below = || self.current_version();
        let outcomes: Vec<Result<Change>> = parts
            .into_iter()
            .zip(numbers)
            .collect::<Vec<_>>()
            .into_par_iter()
            .map(|((p, d), number)| {
                // The list is the caller's to count; its piece's writing
                // is this merge's.
                let _writing = HeldBytes::new(
                    &self.stats,
                    piece_write_memory(d.len(), &self.piece_options),
                );
                let (base, pinned) = self.merge_target(level, p);
                let mut ctx = self.merge_context(level, p, bottom, number);
                ctx.pinned = &pinned;
                ctx.inputs = inputs;
                ctx.below = Some(&below);
                let mut one = Change::default();
                one.add(level, p, merge(&ctx, base.as_deref(), d)?);
                if install_each {
                    one = self.install_now(one)?;
                }
                if let Some(p) = progress {
                    p.part_done();
                }
                Ok(one)
            })
            .collect();
        let mut first_error = None;
        for o in outcomes {
            match o {
                Ok(one) => change.absorb(one),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            None => Ok(()),
            Some(e) => {
                discard(change);
                Err(e)
            }
        }
    }

    /// The TPH of `(level, partition)` now, and the pieces of it a running
    /// push-down carries.
    fn merge_target(&self, level: u32, partition: u64) -> (Option<Arc<Tph>>, Arc<[u64]>) {
        let st = self.state.lock();
        let base = st.current().tph(level, partition).cloned();
        let id = TphId { level, partition };
        let pinned = st.push_downs.pins.get(&id).cloned();
        (base, pinned.unwrap_or_else(|| Arc::from([])))
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use proptest::prelude::*;

    use super::*;
    use crate::tph::Hashed;

    fn entry(key: &str, seq: u64) -> DeltaEntry {
        DeltaEntry::copy_of(key.as_bytes(), Some(seq.to_string().as_bytes()), seq)
    }

    #[test]
    fn newest_first_keeps_the_newest_list_version_of_each_key() {
        let newest = vec![entry("b", 30), entry("d", 31)];
        let middle = vec![entry("a", 20), entry("b", 21), entry("c", 22)];
        let oldest = vec![entry("a", 10), entry("d", 11), entry("e", 12)];
        let got: Vec<(Bytes, u64)> = newest_first(vec![newest, middle, oldest])
            .into_iter()
            .map(|e| (Bytes::copy_from_slice(e.key()), e.seq))
            .collect();
        let want: Vec<(Bytes, u64)> = [("a", 20), ("b", 30), ("c", 22), ("d", 31), ("e", 12)]
            .iter()
            .map(|&(k, s)| (Bytes::from(k), s))
            .collect();
        assert_eq!(got, want);
    }

    /// Two memtables of `n` keys each, the newer overwriting the upper
    /// half of the older's and deleting every seventh key it writes.
    fn two_memtables(n: u64) -> (MemTable, MemTable) {
        let (newer, older) = (MemTable::new(2, 1024, true), MemTable::new(1, 1024, true));
        for i in 0..n {
            older.insert(key8(i).as_bytes(), i, Some(b"old"));
        }
        for i in n / 2..n + n / 2 {
            let value = (i % 7 != 0).then_some(&b"new"[..]);
            newer.insert(key8(i).as_bytes(), n + i, value);
        }
        (newer, older)
    }

    fn key8(i: u64) -> String {
        format!("{i:08}")
    }

    /// Regression: a flush of several frozen memtables listed each one's
    /// entries, then merged the lists into a third: twice the entries'
    /// references at once (88 bytes each). It now merges them as it reads
    /// them into one list.
    #[test]
    fn a_flush_of_two_memtables_holds_one_list() {
        let n = 20_000u64;
        let (newer, older) = two_memtables(n);
        newer.insert(key8(n).as_bytes(), 3 * n, Some(b"newest"));

        let (delta, peak) = crate::util::heap::peak_during(|| memtables_delta(&[&newer, &older]));
        let list = (older.len() + newer.len()) * std::mem::size_of::<DeltaEntry>();
        assert!(
            peak <= list + list / 8,
            "{peak} bytes held for a list of {list}"
        );

        assert_eq!(delta.len() as u64, n + n / 2);
        assert!(delta.windows(2).all(|w| w[0].key() < w[1].key()));
        for e in &delta {
            let i: u64 = std::str::from_utf8(e.key()).unwrap().parse().unwrap();
            let want: (u64, Option<&[u8]>) = if i == n {
                (3 * n, Some(b"newest"))
            } else if i < n / 2 {
                (i, Some(b"old"))
            } else {
                (n + i, (i % 7 != 0).then_some(&b"new"[..]))
            };
            assert_eq!((e.seq, e.value()), want, "key {i}");
        }
    }

    /// A flush into level 0 held the same 40-byte entries as a merge; it
    /// now holds 8 bytes an entry, pointing into the memtables.
    #[test]
    fn a_flush_into_level_0_holds_8_bytes_an_entry_of_the_same_versions() {
        let (newer, older) = two_memtables(20_000);
        let (entries, peak) =
            crate::util::heap::peak_during(|| memtables_flush_entries(&[&newer, &older]));
        let versions = older.len() + newer.len();
        assert_eq!(std::mem::size_of::<FlushEntry<'_>>(), 8);
        assert!(
            peak <= versions * 8 + versions,
            "{peak} bytes held for {versions} versions"
        );
        let delta = memtables_delta(&[&newer, &older]);
        assert_eq!(entries.len(), delta.len());
        for (f, d) in entries.iter().zip(&delta) {
            assert_eq!(
                (f.key(), f.seq(), f.value_len(), f.key_hash()),
                (d.key(), d.seq, d.value_len(), d.h)
            );
        }
    }

    #[test]
    fn split_keeps_key_order_within_each_partition() {
        let delta: Vec<DeltaEntry> = (0..200u64).map(|i| entry(&format!("{i:04}"), i)).collect();
        let parts = split(Written::held(delta), 8);
        let total: usize = parts.values().map(Vec::len).sum();
        assert_eq!(total, 200);
        for (&p, part) in &parts {
            assert!(part.iter().all(|e| partition_of(e.h(), 8) == p));
            assert!(part.windows(2).all(|w| w[0].key() < w[1].key()));
            assert_eq!(part.len(), part.capacity());
        }
    }

    proptest! {
        /// Against a model: lists applied oldest first into a map.
        #[test]
        fn newest_first_is_the_lists_applied_oldest_first(
            lists in prop::collection::vec(
                prop::collection::btree_map(0u8..40, any::<u16>(), 0..30),
                0..9,
            )
        ) {
            let mut model = BTreeMap::new();
            for (i, list) in lists.iter().enumerate().rev() {
                for (&k, &v) in list {
                    model.insert(vec![k], (i, v));
                }
            }
            let lists: Vec<Vec<DeltaEntry>> = lists
                .iter()
                .enumerate()
                .map(|(i, list)| {
                    list.iter()
                        .map(|(&k, &v)| DeltaEntry::copy_of(&[k], Some(&v.to_le_bytes()), i as u64))
                        .collect()
                })
                .collect();
            let got: Vec<(Vec<u8>, (usize, u16))> = newest_first(lists)
                .iter()
                .map(|e| {
                    let v = u16::from_le_bytes(e.value().unwrap().try_into().unwrap());
                    (e.key().to_vec(), (e.seq as usize, v))
                })
                .collect();
            prop_assert_eq!(got, model.into_iter().collect::<Vec<_>>());
        }
    }
}
