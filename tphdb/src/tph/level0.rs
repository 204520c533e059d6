//! A level-0 TPH written whole from new entries (a flush, an ingest): one
//! piece, no base to merge with, so none of a merge's planning. The
//! entries are taken by reference in whatever form their owner holds them:
//! a flush's point into its memtables, 8 bytes each instead of a merge's
//! 40, and their key hashes are computed once, into the array the piece's
//! writer takes.

use std::ops::RangeInclusive;

use super::head::{build_index_sections, new_meta, write_head, LiveKeySource};
use super::merge::{MergeContext, MergeStats};
use super::{DeltaEntry, Tph};
use crate::error::{Error, Result};
use crate::hash::{key_hash, key_hash2};
use crate::memtable::FlushEntry;
use crate::piece::{prefetch_ahead, AsEntry, EntryShape};

/// An entry and its [`crate::hash::key_hash`], kept or computed.
pub(crate) trait Hashed: AsEntry + Sync {
    fn key_hash(&self) -> u64;
}

impl Hashed for DeltaEntry {
    #[inline]
    fn key_hash(&self) -> u64 {
        self.h
    }
}

impl Hashed for FlushEntry<'_> {
    #[inline]
    fn key_hash(&self) -> u64 {
        key_hash(self.key())
    }
}

/// Writes `entries` (sorted by key, one version a key, tombstones kept) as
/// the TPH of `ctx` (level 0): the same file a merge of them into no base
/// writes.
pub(crate) fn write_level0<E: Hashed>(
    ctx: &MergeContext<'_>,
    entries: &[E],
) -> Result<(Tph, MergeStats)> {
    debug_assert!(entries.windows(2).all(|w| w[0].key() < w[1].key()));
    if entries.is_empty() {
        return Err(Error::Internal("a level-0 TPH of no entries".into()));
    }
    let mut stats = MergeStats::default();
    let meta = new_meta(ctx, None, &[], &[], entries.len(), 0)?;
    let hashes: Vec<u64> = (0..entries.len())
        .map(|i| {
            prefetch_ahead(entries, i);
            entries[i].key_hash()
        })
        .collect();
    let mut keys = NewKeys {
        entries,
        hashes: &hashes,
    };
    let sections = build_index_sections(ctx, &meta, &mut keys, &mut stats)?;
    let index_bytes: u64 = sections.iter().map(|(_, b)| b.len() as u64).sum();
    let (head, index) = write_head(ctx, &meta, entries, &hashes, 1, sections, &mut |_| {
        Ok(entries)
    })?;
    stats.index_bytes_written = index_bytes;
    stats.delta_bytes_written = head.file_bytes().saturating_sub(index_bytes);
    stats.entries_written = entries.len() as u64;
    let tph = Tph::assemble(head.clone(), vec![head], &meta, index, ctx.reads);
    Ok((tph, stats))
}

/// The keys of a TPH of new entries alone, with their hashes: all live,
/// in its one piece.
struct NewKeys<'a, E> {
    entries: &'a [E],
    hashes: &'a [u64],
}

impl<E: AsEntry + Sync> LiveKeySource for NewKeys<'_, E> {
    fn count(&self) -> u64 {
        self.entries.len() as u64
    }

    fn for_each_in(
        &mut self,
        hashes: RangeInclusive<u64>,
        _: &mut MergeStats,
        f: &mut dyn FnMut(u64, u64, u32),
    ) -> Result<()> {
        for (e, &h) in self.entries.iter().zip(self.hashes) {
            if hashes.contains(&h) {
                f(h, key_hash2(e.key()), 1);
            }
        }
        Ok(())
    }

    /// The fuse build's passes: no entry is read, as they all lie in
    /// piece 0.
    fn for_each_field_in(
        &mut self,
        hashes: RangeInclusive<u64>,
        _: &mut MergeStats,
        f: &mut dyn FnMut(u64, u32),
    ) -> Result<()> {
        for &h in self.hashes.iter().filter(|h| hashes.contains(h)) {
            f(h, 1);
        }
        Ok(())
    }

    fn check_counts(&mut self) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
