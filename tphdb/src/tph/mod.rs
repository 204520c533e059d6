//! Two-tier perfect hash tables (paper §3.2, §3.5).
//!
//! A TPH is a group of immutable piece files plus a global index. Each piece
//! has its own perfect hash (the local index); the global index maps every
//! live key of the TPH to the piece that holds its newest version. The
//! global index lives in extra sections of the newest ("head") piece, so
//! opening a TPH reads it instead of rebuilding it. A lookup is two
//! in-memory probes and one block read.
//!
//! Invariant: every key that has an entry in any piece of the TPH is live
//! (has a slot or an exception). Keys leave the TPH only when no remaining
//! piece holds their hash, which is what makes routing by hash exact.

mod base;
pub(crate) mod chunk;
mod copies;
mod cursor;
mod delta_entry;
mod fold;
mod garbage;
mod head;
mod index;
mod level0;
mod merge;
mod meta;
mod piece_file;
mod share;

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

pub(crate) use cursor::TphCursor;
pub(crate) use delta_entry::{DeltaEntry, MERGE_BYTES_PER_ENTRY};
use fold::Origin;
pub(crate) use fold::{values_run, Written};
pub(crate) use garbage::Garbage;
use garbage::{live_shadowed, piece_garbage};
pub(crate) use level0::{write_level0, Hashed};
pub(crate) use merge::{merge, MergeContext, MergeOutcome, MergeStats};
pub(crate) use share::{write_share, SHARE_BYTES_PER_ENTRY};

use self::copies::Copies;
use self::index::GlobalIndex;
use self::meta::{IndexFormat, SECTION_EXCEPTIONS, SECTION_PHF, SECTION_SLOTS};
pub(crate) use self::meta::{TphMeta, MAX_PIECES, SECTION_FUSE, SECTION_META};
pub(crate) use self::piece_file::{piece_file_name, PieceFile, PieceReads};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::hash::key_hash;
use crate::phf::Phf;
use crate::piece::{AsEntry, Entry, EntryRef, EntryShape, KeyHashCursor, ReadCount};

/// A two-tier perfect hash table. Immutable; a compaction makes a new one.
pub(crate) struct Tph {
    level: u32,
    partition: u64,
    /// The piece holding the global index (a data piece, or index-only).
    head: Arc<PieceFile>,
    /// Data pieces, oldest first.
    pieces: Vec<Arc<PieceFile>>,
    live_counts: Vec<u64>,
    /// `MetaPiece::shadowed` of each piece.
    shadowed_counts: Vec<u64>,
    /// Kept, not summed on demand: one-level mode's writers read it for
    /// level 1 before each write group (see `compaction::level1_due`).
    live_data_bytes: u64,
    index: GlobalIndex,
    /// Where the index's bytes are counted while the TPH lives
    /// (`PieceReads::global_index_held`).
    held: Arc<AtomicU64>,
}

impl Drop for Tph {
    fn drop(&mut self) {
        self.held
            .fetch_sub(self.index.memory_bytes() as u64, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Tph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tph")
            .field("level", &self.level)
            .field("partition", &self.partition)
            .field("head", &self.head.number())
            .field("pieces", &self.piece_numbers())
            .finish_non_exhaustive()
    }
}

fn missing(what: &str) -> Error {
    Error::corruption("tph head piece", format!("a {what} section"), "none")
}

impl Tph {
    /// Opens the TPH whose head piece is `head_number`; pieces already open
    /// are taken from `open_pieces` (and new ones added to it).
    pub(crate) fn open(
        fs: &Arc<dyn FileSystem>,
        dir: &Path,
        head_number: u64,
        reads: &PieceReads,
        open_pieces: &mut HashMap<u64, Arc<PieceFile>>,
    ) -> Result<Tph> {
        let mut get = |n: u64| -> Result<Arc<PieceFile>> {
            if let Some(p) = open_pieces.get(&n) {
                return Ok(p.clone());
            }
            let p = PieceFile::open(fs, dir, n, reads)?;
            open_pieces.insert(n, p.clone());
            Ok(p)
        };
        let head = get(head_number)?;
        let load = || -> Result<(TphMeta, GlobalIndex)> {
            let meta = TphMeta::decode(
                &head
                    .extra_section(SECTION_META)?
                    .ok_or_else(|| missing("meta"))?,
            )?;
            let exceptions = head
                .extra_section(SECTION_EXCEPTIONS)?
                .ok_or_else(|| missing("exceptions"))?;
            let section = |id: u32, name: &str| -> Result<Bytes> {
                head.extra_section(id)?.ok_or_else(|| missing(name))
            };
            let index = match meta.format {
                IndexFormat::Slots => GlobalIndex::decode_slots(
                    Phf::decode_with(section(SECTION_PHF, "phf")?, reads.allow_ptrhash)?,
                    meta.sig_bits,
                    meta.piece_bits,
                    section(SECTION_SLOTS, "slots")?,
                    &exceptions,
                    meta.pieces.len(),
                    meta.wide_h2,
                )?,
                IndexFormat::Fuse => GlobalIndex::decode_fuse(
                    section(SECTION_FUSE, "fuse")?,
                    meta.sig_bits,
                    meta.piece_bits,
                    &exceptions,
                    meta.pieces.len(),
                    meta.wide_h2,
                )?,
            };
            Ok((meta, index))
        };
        let loaded = load().map_err(|e| e.at(head.name()));
        head.release_mapped_pages();
        let (meta, index) = loaded?;
        let mut pieces = Vec::with_capacity(meta.pieces.len());
        for p in &meta.pieces {
            pieces.push(get(p.number)?);
        }
        Ok(Tph::assemble(head, pieces, &meta, index, reads))
    }

    /// A TPH of these parts: `pieces[i]` is `meta.pieces[i]`; its index
    /// is counted in `reads.global_index_held` while it lives.
    fn assemble(
        head: Arc<PieceFile>,
        pieces: Vec<Arc<PieceFile>>,
        meta: &TphMeta,
        index: GlobalIndex,
        reads: &PieceReads,
    ) -> Tph {
        debug_assert_eq!(pieces.len(), meta.pieces.len());
        let live_counts: Vec<u64> = meta.pieces.iter().map(|p| p.live).collect();
        let live_data_bytes = pieces
            .iter()
            .zip(&live_counts)
            .map(|(p, &live)| p.properties().data_bytes_of(live))
            .sum();
        let held = reads.global_index_held.clone();
        held.fetch_add(index.memory_bytes() as u64, Ordering::Relaxed);
        Tph {
            level: meta.level,
            partition: meta.partition,
            head,
            pieces,
            live_counts,
            shadowed_counts: meta.pieces.iter().map(|p| p.shadowed).collect(),
            live_data_bytes,
            index,
            held,
        }
    }

    pub(crate) fn level(&self) -> u32 {
        self.level
    }

    pub(crate) fn partition(&self) -> u64 {
        self.partition
    }

    #[cfg(test)]
    pub(crate) fn signature_bits(&self) -> u32 {
        self.index.sig_bits
    }

    /// Bytes of the global index in memory.
    #[cfg(test)]
    pub(crate) fn global_index_bytes(&self) -> usize {
        self.index.memory_bytes()
    }

    #[cfg(test)]
    pub(crate) fn piece_bits(&self) -> u32 {
        self.index.piece_bits
    }

    #[cfg(test)]
    pub(crate) fn global_index_is_fuse(&self) -> bool {
        self.index.is_fuse()
    }

    pub(crate) fn pieces(&self) -> &[Arc<PieceFile>] {
        &self.pieces
    }

    pub(crate) fn head_number(&self) -> u64 {
        self.head.number()
    }

    pub(crate) fn piece_numbers(&self) -> Vec<u64> {
        self.pieces.iter().map(|p| p.number()).collect()
    }

    /// Every file the TPH reads: data pieces and the head.
    pub(crate) fn files(&self) -> impl Iterator<Item = &Arc<PieceFile>> {
        let head_is_data = self.pieces.iter().any(|p| p.number() == self.head.number());
        self.pieces
            .iter()
            .chain((!head_is_data).then_some(&self.head))
    }

    pub(crate) fn piece_count(&self) -> usize {
        self.pieces.len()
    }

    /// Live keys (tombstones included).
    pub(crate) fn live_count(&self) -> u64 {
        self.live_counts.iter().sum()
    }

    /// Whether the global index routes every entry of piece `i` to it (its
    /// live count is its entry count, as for a flush's piece or any piece of
    /// a fill): which of its entries are live needs no routing then.
    pub(crate) fn piece_all_live(&self, i: usize) -> bool {
        self.live_counts[i] == self.pieces[i].properties().entry_count
    }

    /// Entries stored in the pieces, live or not.
    pub(crate) fn stored_entries(&self) -> u64 {
        self.pieces.iter().map(|p| p.properties().entry_count).sum()
    }

    /// Bytes of the files the TPH reads.
    pub(crate) fn file_bytes(&self) -> u64 {
        self.files().map(|p| p.file_bytes()).sum()
    }

    /// Data bytes of live entries, estimated piece by piece.
    pub(crate) fn live_data_bytes(&self) -> u64 {
        self.live_data_bytes
    }

    /// What the TPH stores beyond its live values, estimated piece by piece
    /// (see [`piece_garbage`]).
    pub(crate) fn garbage(&self) -> Garbage {
        let mut g = Garbage::default();
        for (i, p) in self.pieces.iter().enumerate() {
            let (props, live) = (p.properties(), self.live_counts[i]);
            let mut piece = piece_garbage(props, p.key_prefix().len(), live);
            let shadowed = live_shadowed(props, live, self.shadowed_counts[i]);
            piece.shadowed_bytes = props.data_bytes_of(shadowed);
            g.add(&piece);
        }
        g
    }

    /// In-memory index bytes: `(global index, every piece's local index)`.
    pub(crate) fn index_memory_parts(&self) -> (usize, usize) {
        (
            self.index.memory_bytes(),
            self.pieces.iter().map(|p| p.index_memory_bytes()).sum(),
        )
    }

    /// The newest version of `key` in this TPH (a tombstone has no value),
    /// adding the block reads it made to `count`: one read, or none when
    /// the signature rules the key out.
    pub(crate) fn get_counted(
        &self,
        key: &[u8],
        h: u64,
        count: &mut ReadCount,
    ) -> Result<Option<Entry>> {
        match self.piece_for(key, h) {
            Some(p) => p.get_counted(key, h, count),
            None => Ok(None),
        }
    }

    /// Asks the CPU for the global-index memory a get of `h` reads.
    #[inline]
    pub(crate) fn prefetch_route(&self, h: u64) {
        self.index.prefetch(h);
    }

    /// The piece a get of `key` (hash `h`) reads, if the global index
    /// routes it to one: [`Tph::get_counted`] is that piece's get.
    #[inline]
    pub(crate) fn piece_for(&self, key: &[u8], h: u64) -> Option<&PieceFile> {
        self.index.route(key, h).map(|p| &*self.pieces[p])
    }

    /// Whether the global index routes `key` to a piece: it holds the key,
    /// or a key that shares its signature.
    pub(crate) fn routes(&self, key: &[u8], h: u64) -> bool {
        self.index.route(key, h).is_some()
    }

    /// Whether the entry for `key` (whose hash is `h`) found in piece
    /// `piece` is its live version.
    fn is_live_hashed(&self, key: &[u8], h: u64, piece: usize) -> bool {
        self.index.route(key, h) == Some(piece)
    }

    /// Checks the global index against the pieces: it routes every live
    /// entry to its own piece and every dead one to a newer version of its
    /// key, or to another copy of the same write (the same sequence number:
    /// a job cut short after installing part of its work merges its
    /// entries again), the live counts match, and (above level 0) every
    /// key belongs to the TPH's partition. Returns `(live, dead)` entry
    /// counts.
    pub(crate) fn verify(&self, partitions: u64) -> Result<(u64, u64)> {
        let name = self.head.name();
        let (mut live, mut dead) = (0u64, 0u64);
        for (i, p) in self.pieces.iter().enumerate() {
            let mut piece_live = 0u64;
            for e in p.iter() {
                let e = e?;
                let h = key_hash(&e.key);
                if self.level > 0 && crate::hash::partition_of(h, partitions) != self.partition {
                    return Err(Error::corruption(
                        format!("partition of a key in {}", p.name()),
                        self.partition,
                        crate::hash::partition_of(h, partitions),
                    )
                    .at(name));
                }
                match self.index.route(&e.key, h) {
                    Some(j) if j == i => piece_live += 1,
                    Some(j) => {
                        let newer = self.pieces[j].get_hashed(&e.key, h)?;
                        if newer.as_ref().is_none_or(|n| n.seq < e.seq) {
                            return Err(Error::corruption(
                                format!("global index entry of a key in {}", p.name()),
                                format!("a newer version in {}", self.pieces[j].name()),
                                format!("{:?}", newer.map(|n| n.seq)),
                            )
                            .at(name));
                        }
                        dead += 1;
                    }
                    None => {
                        return Err(Error::corruption(
                            format!("global index entry of a key in {}", p.name()),
                            "a route to a piece",
                            "none",
                        )
                        .at(name))
                    }
                }
            }
            if piece_live != self.live_counts[i] {
                return Err(Error::corruption(
                    format!("live entries of {}", p.name()),
                    self.live_counts[i],
                    piece_live,
                )
                .at(name));
            }
            live += piece_live;
        }
        Ok((live, dead))
    }

    /// Every live entry, in key order: the delta this TPH hands to the level
    /// below.
    #[cfg(test)]
    pub(crate) fn live_entries(&self) -> Result<Vec<DeltaEntry>> {
        let out = self.live_entries_in(0..=u64::MAX, None, &mut MergeStats::default())?;
        if out.len() as u64 != self.live_count() {
            return Err(self.live_count_mismatch(out.len() as u64));
        }
        Ok(out)
    }

    /// The live entries whose key hash lies in `hashes`, sorted by key; the
    /// bytes read for them are added to `stats`. Without `passes`, every
    /// piece is read whole, in large sequential reads, for when most of it
    /// is wanted; with them, only the blocks holding an entry in the range
    /// (see [`PieceReader::for_each_entry_in_hash_range`]). A merge too
    /// large for memory takes a few partitions per pass, and passes that
    /// each read every input whole read eight times the input at the
    /// default fanout; `passes` carries where the passes are in each
    /// piece's key hashes, which they read once between them (ranges must
    /// come in ascending order). Only what is kept is held in memory: keys
    /// and values are copied out of the read buffers, which would otherwise
    /// stay alive for as long as one entry of theirs does.
    pub(crate) fn live_entries_in(
        &self,
        hashes: RangeInclusive<u64>,
        passes: Option<&mut RangePasses>,
        stats: &mut MergeStats,
    ) -> Result<Vec<DeltaEntry>> {
        self.live_in(hashes, passes, stats, |e, h, _, copies| {
            DeltaEntry::copied(e, h, copies)
        })
    }

    /// [`Tph::live_entries_in`] by shape: each entry's key and the piece to
    /// read it again from, as the merge's input `input`, without its value.
    pub(crate) fn live_shapes_in(
        &self,
        input: usize,
        hashes: RangeInclusive<u64>,
        passes: Option<&mut RangePasses>,
        stats: &mut MergeStats,
    ) -> Result<Vec<Written>> {
        let origin = Origin::input(input)?;
        self.live_in(hashes, passes, stats, |e, h, piece, copies| {
            Written::shape_of(e, h, origin.at(piece), copies)
        })
    }

    /// The live entries whose key hash lies in `hashes`, as `make` takes
    /// each (with its key hash and piece), sorted by key.
    fn live_in<T: EntryShape>(
        &self,
        hashes: RangeInclusive<u64>,
        passes: Option<&mut RangePasses>,
        stats: &mut MergeStats,
        mut make: impl FnMut(EntryRef<'_>, u64, usize, &mut Copies) -> T,
    ) -> Result<Vec<T>> {
        // Sized for the range's share of the live keys, so that the list is
        // not grown by doubling.
        let mut out = Vec::with_capacity(self.expected_live_in(&hashes));
        let mut copies = Copies::default();
        self.for_each_live_in(hashes, passes, stats, |e, h, piece| {
            out.push(make(e, h, piece, &mut copies));
        })?;
        out.sort_unstable_by(|a, b| a.key().cmp(b.key()));
        Ok(out)
    }

    /// About how many live entries lie in `hashes` (hashes are uniform
    /// over the TPH's partition), a little over: what a list of them is
    /// sized for. (It took the share of all hashes, not of the partition's:
    /// a push-down's lists, sized for a `fanout`th of their entries from
    /// level 1 down, grew by doubling, the old list beside one twice its
    /// size each time.)
    pub(crate) fn expected_live_in(&self, hashes: &RangeInclusive<u64>) -> usize {
        let own = self.index.hashes().unwrap_or(0..=u64::MAX);
        let from = (*hashes.start()).max(*own.start());
        let to = (*hashes.end()).min(*own.end());
        let span = |a: u64, b: u64| (b - a) as f64 + 1.0;
        let share = if from > to {
            0.0
        } else {
            span(from, to) / span(*own.start(), *own.end())
        };
        let expected = (self.live_count() as f64 * share * 1.02) as usize + 64;
        expected.min(self.live_count() as usize)
    }

    /// Calls `f` with each live entry whose key hash lies in `hashes`, its
    /// key hash and its piece, piece by piece (see
    /// [`Tph::live_entries_in`] for `passes`).
    pub(crate) fn for_each_live_in(
        &self,
        hashes: RangeInclusive<u64>,
        mut passes: Option<&mut RangePasses>,
        stats: &mut MergeStats,
        mut f: impl FnMut(EntryRef<'_>, u64, usize),
    ) -> Result<()> {
        if let Some(passes) = passes.as_deref_mut() {
            passes.start(self, &hashes);
        }
        for (i, p) in self.pieces.iter().enumerate() {
            let all_live = self.piece_all_live(i);
            let mut keep = |e: EntryRef<'_>| {
                let h = key_hash(e.key);
                if hashes.contains(&h) && (all_live || self.index.route(e.key, h) == Some(i)) {
                    f(e, h, i);
                }
            };
            match passes.as_deref_mut() {
                None => {
                    for e in p.iter() {
                        keep(e?.as_entry());
                    }
                    stats.input_bytes_read += p.file_bytes();
                }
                Some(passes) => {
                    let cursor = &mut passes.cursors[i];
                    let (blocks, key_hashes) =
                        p.for_each_entry_in_hash_range(cursor, hashes.clone(), &mut keep)?;
                    stats.input_bytes_read += blocks;
                    stats.hash_bytes_read += key_hashes;
                }
            }
        }
        Ok(())
    }

    /// The error for a read of live entries that found `found` of them.
    pub(crate) fn live_count_mismatch(&self, found: u64) -> Error {
        Error::corruption(
            format!("tph {} live entries", self.head.number()),
            self.live_count(),
            found,
        )
    }
}

/// Where passes over ascending ranges of hashes ([`Tph::live_entries_in`])
/// are in each piece's key-hash section of one TPH: the passes read each
/// section once between them, not once each.
#[derive(Debug, Default)]
pub(crate) struct RangePasses {
    cursors: Vec<KeyHashCursor>,
    /// The end of the last range read.
    last_end: Option<u64>,
}

impl RangePasses {
    fn start(&mut self, tph: &Tph, hashes: &RangeInclusive<u64>) {
        debug_assert!(
            self.last_end.is_none_or(|end| end < *hashes.start()),
            "passes over ascending ranges"
        );
        self.last_end = Some(*hashes.end());
        self.cursors
            .resize_with(tph.pieces.len(), KeyHashCursor::default);
    }

    /// Reads what the passes left of each section (the hashes past the
    /// last range: none, when the ranges covered the TPH's keys), so that
    /// every section's checksum has been checked; adds the bytes to
    /// `stats`.
    pub(crate) fn finish(&mut self, tph: &Tph, stats: &mut MergeStats) -> Result<()> {
        self.cursors
            .resize_with(tph.pieces.len(), KeyHashCursor::default);
        for (p, cursor) in tph.pieces.iter().zip(&mut self.cursors) {
            if !cursor.is_done() && !p.is_empty() {
                stats.hash_bytes_read += p.key_hashes_through(cursor, u64::MAX, |_, _| {})?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
