//! A push-down's share of one child that holds no TPH yet, written as that
//! child's TPH without holding the share's keys.
//!
//! A push-down whose share of one child passes the job's input memory holds
//! it by shape (a key copy and 40 bytes an entry) and merges it as any
//! delta. Into a child at the bottom that holds nothing (a level the tree
//! has just grown) there is nothing to merge with: the new TPH is one
//! piece of the share's live entries, less its tombstones. Such a piece is
//! written from the pairs of key hashes alone (16 bytes an entry, in two
//! columns once sorted): its blocks a run of slots at a time, read
//! again from the source's pieces; its key-hash section from the pairs,
//! sorted; its key-order section from the source's own key-order sections,
//! merged as a scan would. The file is the one a merge of the same entries
//! writes.

use std::ops::RangeInclusive;
use std::sync::Arc;

use super::base::route;
use super::copies::Copies;
use super::cursor::TphCursor;
use super::delta_entry::DeltaEntry;
use super::fold::{passes_to_read_again, read_again};
use super::head::{build_index_sections, new_meta, write_head_with, LiveKeySource};
use super::merge::{MergeContext, MergeOutcome, MergeStats};
use super::{RangePasses, Tph};
use crate::error::{Error, Result};
use crate::hash::{key_hash, key_hash2};
use crate::piece::{
    write_planned_piece, write_sorted_pairs, EntryRef, EntrySource, KeyOrderSink, KeySections,
    Plan, Sink, Survey,
};
use crate::util::min_heap::{heapify, sift_down};

/// Memory writing a share of `entries` holds beyond a piece's writing
/// ([`crate::piece::piece_write_memory`], which counts two hashes an entry
/// and the slot table's four bytes or more): while the sorted pairs are
/// split into their two columns, three hashes an entry, before the slot
/// table is made.
pub(crate) const SHARE_BYTES_PER_ENTRY: u64 = 4;

/// Writes the live entries of `source` whose key hash lies in `hashes`
/// (the child's partition, `ctx.hashes`) as the TPH of a child that holds
/// none, at the bottom: its tombstones go, as a merge at the bottom drops
/// those no piece below needs. `passes` carries where the passes over the
/// source's key hashes are, as for [`Tph::live_entries_in`]. Returns the
/// outcome and how many live entries the share had, tombstones included.
pub(crate) fn write_share(
    ctx: &MergeContext<'_>,
    source: &Arc<Tph>,
    passes: Option<&mut RangePasses>,
) -> Result<(MergeOutcome, u64)> {
    if !ctx.bottom {
        return Err(Error::Internal(
            "a share written whole must go to the bottom".into(),
        ));
    }
    let hashes = ctx.hashes.clone();
    let mut stats = MergeStats::default();
    let mut survey = Survey::EMPTY;
    let mut pairs: Vec<[u64; 2]> = Vec::with_capacity(source.expected_live_in(&hashes));
    let (mut found, mut tombstones, mut refused) = (0u64, 0u64, None);
    source.for_each_live_in(hashes.clone(), passes, &mut stats, |e, h, _| {
        found += 1;
        if e.value.is_none() {
            tombstones += 1;
            return;
        }
        if let Err(err) = survey.add(&e) {
            refused.get_or_insert(err);
        }
        pairs.push([h, key_hash2(e.key)]);
    })?;
    if let Some(err) = refused {
        return Err(err);
    }
    stats.tombstones_dropped = tombstones;
    if found == 0 {
        return Ok((MergeOutcome::Unchanged, 0));
    }
    if pairs.is_empty() {
        return Ok((
            MergeOutcome::Emptied {
                obsolete: Vec::new(),
                stats,
            },
            found,
        ));
    }
    pairs.sort_unstable();
    if let Some(w) = pairs.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::corruption(
            "live entries of one key",
            1,
            format!("two with hashes {:#x}, {:#x}", w[0][0], w[0][1]),
        )
        .at(source.head.name()));
    }
    let n = pairs.len();
    let pairs = Columns::split(pairs);
    let survey = survey.finished(n);
    let meta = new_meta(ctx, None, &[], &[], n, 0)?;
    let sections = build_index_sections(ctx, &meta, &mut Pairs::new(&pairs), &mut stats)?;
    let index_bytes: u64 = sections.iter().map(|(_, b)| b.len() as u64).sum();
    let passes = passes_to_read_again(n as u64, survey.encoded_bytes as u64, ctx.fold_memory_bytes);
    let mut loaded_survey = Survey::EMPTY;
    let mut keys = ShareKeys {
        source,
        hashes,
        pairs: &pairs,
    };
    let plan = Plan {
        survey,
        hashes: &pairs.h,
        keys: &mut keys,
    };
    let mut load = |run: &[u32]| load_run(source, &pairs, run, &mut loaded_survey, &mut stats);
    let (head, index) = write_head_with(
        ctx,
        ctx.new_number,
        &meta,
        sections,
        |fs, path, options, extra| {
            write_planned_piece(fs, path, plan, options, extra, passes, &mut load)
        },
    )?;
    if loaded_survey.finished(n) != survey {
        let _ = ctx
            .fs
            .remove(&ctx.dir.join(super::piece_file_name(ctx.new_number)));
        return Err(Error::corruption(
            "entries of a share read again",
            format!("{survey:?}"),
            format!("{loaded_survey:?}"),
        )
        .at(source.head.name()));
    }
    stats.index_bytes_written = index_bytes;
    stats.delta_bytes_written = head.file_bytes().saturating_sub(index_bytes);
    stats.entries_written = n as u64;
    let tph = Tph::assemble(head.clone(), vec![head], &meta, index, ctx.reads);
    let outcome = MergeOutcome::Replaced {
        tph: Box::new(tph),
        obsolete: Vec::new(),
        stats,
    };
    Ok((outcome, found))
}

/// The entries of one run of the new piece's slots (indices into
/// `pairs`), read again from the pieces the source's index routes them
/// to, only the blocks that hold them; each is counted into `survey`.
fn load_run(
    source: &Tph,
    pairs: &Columns,
    run: &[u32],
    survey: &mut Survey,
    stats: &mut MergeStats,
) -> Result<Loaded> {
    // (piece, h, h2, index) of the run's entries.
    let mut wanted: Vec<(usize, u64, u64, u32)> = Vec::with_capacity(run.len());
    for &i in run {
        let Some((h, h2)) = pairs.get(i as usize) else {
            continue;
        };
        let (_, piece) = route(source, h, h2).ok_or_else(|| {
            Error::corruption("live entry of a share", "routed to a piece", "none")
                .at(source.head.name())
        })?;
        wanted.push((piece, h, h2, i));
    }
    wanted.sort_unstable();
    let mut loaded: Vec<(u32, DeltaEntry)> = Vec::with_capacity(wanted.len());
    let mut copies = Copies::default();
    for group in wanted.chunk_by(|a, b| a.0 == b.0) {
        let piece = &source.pieces[group[0].0];
        stats.values_again_read += read_again(piece, group, &mut copies, &mut loaded)?;
    }
    loaded.sort_unstable_by_key(|&(i, _)| i);
    let once = loaded.windows(2).all(|w| w[0].0 < w[1].0);
    if loaded.len() != wanted.len() || !once {
        return Err(Error::corruption(
            "live entries of a share read again",
            wanted.len(),
            loaded.len(),
        )
        .at(source.head.name()));
    }
    for (_, e) in &loaded {
        survey.add(&e.entry_ref())?;
    }
    Ok(Loaded(loaded))
}

/// A run's entries, by index.
struct Loaded(Vec<(u32, DeltaEntry)>);

impl EntrySource for Loaded {
    fn entry(&self, i: u32) -> Option<EntryRef<'_>> {
        let at = self.0.binary_search_by_key(&i, |&(j, _)| j).ok()?;
        Some(self.0[at].1.entry_ref())
    }
}

/// The new piece's key sections: the pairs, and the source's live keys of
/// the share in key order.
struct ShareKeys<'a> {
    source: &'a Arc<Tph>,
    hashes: RangeInclusive<u64>,
    pairs: &'a Columns,
}

impl KeySections for ShareKeys<'_> {
    fn write_key_hashes(&mut self, sink: Sink<'_>) -> Result<()> {
        write_sorted_pairs(&self.pairs.h, self.pairs.h2(), sink)
    }

    /// Tombstones, which the piece does not hold, are passed over. The
    /// scan reads every key of the source, `fanout` times its share's,
    /// through the pieces' descriptors (`read_copy`): through their
    /// mappings, it held 2 to 6 MB of each source's pages even when it let
    /// go of each piece's every 64 keys, and each letting go cost every
    /// core a TLB flush. The pieces' cursors are merged through a heap: a
    /// merging cursor's step compares every piece's key (up to 64 pieces),
    /// which took a third of the compaction threads' time at the end of a
    /// 16M x 128-byte fill.
    fn for_each_in_key_order(&mut self, f: KeyOrderSink<'_>) -> Result<()> {
        let mut pieces = TphCursor::pieces_in_hashes(self.source, self.hashes.clone())?;
        for c in &mut pieces {
            c.seek_to_first()?;
        }
        let mut heap: Vec<usize> = (0..pieces.len()).filter(|&i| pieces[i].valid()).collect();
        heapify(&mut heap, |a, b| pieces[a].key() < pieces[b].key());
        while let Some(&top) = heap.first() {
            let c = &mut pieces[top];
            if !c.is_tombstone() {
                let key = c.key();
                let i = self
                    .pairs
                    .find(key_hash(key), key_hash2(key))
                    .ok_or_else(|| {
                        Error::corruption(
                            "live key of a share, in key order",
                            "one read for its blocks",
                            format!("{:?}", String::from_utf8_lossy(key)),
                        )
                        .at(self.source.head.name())
                    })?;
                f(key, false, i as u32)?;
            }
            c.next()?;
            if !c.valid() {
                heap.swap_remove(0);
            }
            sift_down(&mut heap, 0, |a, b| pieces[a].key() < pieces[b].key());
        }
        Ok(())
    }
}

/// The share's pairs of key hashes, sorted, as two columns: the first is
/// the perfect hash's input as it stands.
struct Columns {
    h: Vec<u64>,
    /// The second hashes, in the memory the pairs had (the first `len`
    /// words of it).
    h2: Vec<[u64; 2]>,
    len: usize,
}

impl Columns {
    /// `pairs`, sorted, split: the second column takes the pairs' own
    /// memory, so that the share holds two hashes an entry while its piece
    /// is written, not three.
    fn split(mut pairs: Vec<[u64; 2]>) -> Columns {
        let len = pairs.len();
        let h = pairs.iter().map(|p| p[0]).collect();
        let words = pairs.as_flattened_mut();
        // Word `i` is written after words up to `2i + 1` are read.
        for i in 0..len {
            words[i] = words[2 * i + 1];
        }
        pairs.truncate(len.div_ceil(2));
        pairs.shrink_to_fit();
        Columns { h, h2: pairs, len }
    }

    fn h2(&self) -> &[u64] {
        &self.h2.as_flattened()[..self.len]
    }

    fn get(&self, i: usize) -> Option<(u64, u64)> {
        Some((*self.h.get(i)?, *self.h2().get(i)?))
    }

    /// The index of the pair `(h, h2)`.
    fn find(&self, h: u64, h2: u64) -> Option<usize> {
        let from = self.h.partition_point(|&x| x < h);
        let to = from + self.h[from..].partition_point(|&x| x == h);
        let at = self.h2()[from..to].binary_search(&h2).ok()?;
        Some(from + at)
    }
}

/// The new TPH's keys for its global index: all in its one piece.
struct Pairs<'a> {
    pairs: &'a Columns,
    found: u64,
}

impl<'a> Pairs<'a> {
    fn new(pairs: &'a Columns) -> Pairs<'a> {
        Pairs { pairs, found: 0 }
    }
}

impl LiveKeySource for Pairs<'_> {
    fn count(&self) -> u64 {
        self.pairs.len as u64
    }

    fn for_each_in(
        &mut self,
        hashes: RangeInclusive<u64>,
        _stats: &mut MergeStats,
        f: &mut dyn FnMut(u64, u64, u32),
    ) -> Result<()> {
        let hs = &self.pairs.h;
        let from = hs.partition_point(|&h| h < *hashes.start());
        let to = from + hs[from..].partition_point(|&h| h <= *hashes.end());
        for (&h, &h2) in hs[from..to].iter().zip(&self.pairs.h2()[from..to]) {
            f(h, h2, 1);
            self.found += 1;
        }
        Ok(())
    }

    fn check_counts(&mut self) -> Result<()> {
        let found = std::mem::take(&mut self.found);
        if found != self.count() {
            return Err(Error::Internal(format!(
                "the index passes found {found} of {} keys",
                self.count()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_split_into_columns_keep_their_order_and_are_found_again() {
        for len in [0usize, 1, 2, 7, 1000] {
            // Runs of equal first hashes, as colliding keys would give.
            let pairs: Vec<[u64; 2]> = (0..len as u64).map(|i| [i / 3, i * 7 + 1]).collect();
            let columns = Columns::split(pairs.clone());
            assert_eq!(columns.len, len);
            assert!(columns.h2.capacity() <= len.div_ceil(2) + 1);
            for (i, p) in pairs.iter().enumerate() {
                assert_eq!(columns.get(i), Some((p[0], p[1])));
                assert_eq!(columns.find(p[0], p[1]), Some(i));
                assert_eq!(columns.find(p[0], p[1] + 1), None);
            }
            assert_eq!(columns.get(len), None);
            assert_eq!(columns.find(u64::MAX, 0), None);
        }
    }
}
