//! What a merge writes into its new piece: the delta's entries, and the
//! live entries of the pieces it folds. Folded entries are held whole when
//! they fit the job's memory; past it they are held by their shape (key,
//! sequence number, value length) and read again from their pieces a run
//! of the new piece's slots at a time, so that a fold of pieces of any size
//! holds at most about `fold_memory_bytes` of values at once.

use bytes::Bytes;

use super::base::{route, Superseded};
use super::copies::Copies;
use super::merge::{DeltaEntry, MergeStats, MERGE_BYTES_PER_ENTRY};
use super::Tph;
use crate::error::{Error, Result};
use crate::hash::{key_hash, key_hash2};
use crate::piece::{EntryRef, EntryShape, EntrySource};

/// An entry of the new piece.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// In memory: the delta's, or a folded piece's that fit.
    Held(DeltaEntry),
    /// A folded piece's live entry, read again when its pass writes it.
    Folded(FoldedEntry),
}

// A merge turns its delta list into its written list in place, which
// needs the two entries to be the same size.
const _: () = assert!(std::mem::size_of::<Written>() == std::mem::size_of::<DeltaEntry>());

/// A folded piece's live entry without its value. Its `key_hash2` is
/// computed again when asked for: with it, the entry would not fit beside
/// a held entry's tombstone flag, where [`Written`] keeps its variant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FoldedEntry {
    key: Bytes,
    seq: u64,
    h: u64,
    /// `TOMBSTONE_LEN` for a tombstone.
    value_len: u32,
    /// Its piece in the base TPH.
    piece: u32,
}

/// A folded tombstone's `value_len` (values are at most
/// [`crate::piece::MAX_VALUE_BYTES`]).
const TOMBSTONE_LEN: u32 = u32::MAX;

impl Written {
    pub(crate) fn h(&self) -> u64 {
        match self {
            Written::Held(e) => e.h,
            Written::Folded(f) => f.h,
        }
    }

    pub(crate) fn h2(&self) -> u64 {
        match self {
            Written::Held(e) => e.h2,
            Written::Folded(f) => key_hash2(&f.key),
        }
    }

    pub(crate) fn is_tombstone(&self) -> bool {
        self.value_len().is_none()
    }
}

impl EntryShape for Written {
    fn key(&self) -> &[u8] {
        match self {
            Written::Held(e) => e.key(),
            Written::Folded(f) => &f.key,
        }
    }

    fn seq(&self) -> u64 {
        match self {
            Written::Held(e) => e.seq,
            Written::Folded(f) => f.seq,
        }
    }

    fn value_len(&self) -> Option<usize> {
        match self {
            Written::Held(e) => e.value().map(<[u8]>::len),
            Written::Folded(f) => (f.value_len != TOMBSTONE_LEN).then_some(f.value_len as usize),
        }
    }
}

/// The live entries of the victim pieces that the delta does not replace,
/// which move into the new piece, and the passes the new piece is written
/// in: one when they are held, enough that each pass reads at most about
/// `fold_memory_bytes` of them again otherwise.
pub(super) fn carry_victims(
    base: &Tph,
    victim: &[bool],
    live_counts: &[u64],
    superseded: &Superseded,
    fold_memory_bytes: u64,
    stats: &mut MergeStats,
) -> Result<(Vec<Written>, usize)> {
    let victims: Vec<usize> = (0..base.pieces.len()).filter(|&i| victim[i]).collect();
    let holding: u64 = victims
        .iter()
        .map(|&i| {
            let live = live_counts[i];
            base.pieces[i].properties().data_bytes_of(live) + live * MERGE_BYTES_PER_ENTRY
        })
        .sum();
    let held = holding <= fold_memory_bytes;
    let mut carried = Vec::new();
    let mut copies = Copies::default();
    for &i in &victims {
        let p = &base.pieces[i];
        stats.fold_bytes_read += p.properties().data_bytes;
        stats.pieces_folded += 1;
        for e in p.iter() {
            let e = e?;
            let h = key_hash(&e.key);
            let h2 = key_hash2(&e.key);
            let still_live = route(base, h, h2).is_some_and(|(exception, piece)| {
                piece == i && !superseded.contains(piece, exception, h, h2)
            });
            if !still_live {
                continue;
            }
            carried.push(if held {
                Written::Held(DeltaEntry::copied(&e, h, h2, &mut copies))
            } else {
                Written::Folded(FoldedEntry {
                    // Copied, like a held entry's (see `DeltaEntry::copied`).
                    key: copies.bytes(&e.key),
                    seq: e.seq,
                    h,
                    value_len: e.value.as_ref().map_or(TOMBSTONE_LEN, |v| v.len() as u32),
                    piece: i as u32,
                })
            });
        }
    }
    let passes = if held {
        1
    } else {
        let live_bytes: u64 = carried
            .iter()
            .map(|e| e.encoded_len() as u64 + MERGE_BYTES_PER_ENTRY)
            .sum();
        live_bytes.div_ceil(fold_memory_bytes.max(1)).max(1) as usize
    };
    Ok((carried, passes))
}

/// The entries of one pass's run of slots (indices into `written`; empty
/// slots are past its end): the held ones where they are, the folded ones
/// read again from their pieces (only the blocks that hold them) and
/// checked against their shapes. With nothing `folded`, the run is not
/// looked at.
pub(super) fn load_pass<'a>(
    base: Option<&Tph>,
    written: &'a [Written],
    folded: bool,
    run: &[u32],
    stats: &mut MergeStats,
) -> Result<PassEntries<'a>> {
    let mut loaded = Vec::new();
    if let (Some(base), true) = (base, folded) {
        let mut copies = Copies::default();
        // (piece, h, h2, index) of the folded entries the run holds.
        let mut wanted: Vec<(u32, u64, u64, u32)> = run
            .iter()
            .filter_map(|&i| match written.get(i as usize) {
                Some(Written::Folded(f)) => Some((f.piece, f.h, key_hash2(&f.key), i)),
                _ => None,
            })
            .collect();
        wanted.sort_unstable();
        for group in wanted.chunk_by(|a, b| a.0 == b.0) {
            let piece = &base.pieces[group[0].0 as usize];
            let mut hashes: Vec<u64> = group.iter().map(|w| w.1).collect();
            hashes.dedup();
            stats.fold_bytes_read += piece.for_each_entry_with_hashes(&hashes, |e| {
                let h = key_hash(&e.key);
                let at = group.partition_point(|w| w.1 < h);
                if group.get(at).is_none_or(|w| w.1 != h) {
                    return;
                }
                let h2 = key_hash2(&e.key);
                if let Some(w) = group[at..]
                    .iter()
                    .take_while(|w| w.1 == h)
                    .find(|w| w.2 == h2)
                {
                    loaded.push((w.3, DeltaEntry::copied(&e, h, h2, &mut copies)));
                }
            })?;
        }
        loaded.sort_unstable_by_key(|&(i, _)| i);
        check_loaded(base, written, &wanted, &loaded)?;
    }
    Ok(PassEntries { written, loaded })
}

/// Refuses a pass whose folded entries are not all found again as they
/// were: the new piece's blocks would not match its other sections.
fn check_loaded(
    base: &Tph,
    written: &[Written],
    wanted: &[(u32, u64, u64, u32)],
    loaded: &[(u32, DeltaEntry)],
) -> Result<()> {
    for &(piece, _, _, i) in wanted {
        let at = loaded.binary_search_by_key(&i, |&(j, _)| j);
        let planned = &written[i as usize];
        let same = at.is_ok_and(|at| {
            let e = &loaded[at].1;
            planned.key() == e.key()
                && planned.seq() == e.seq
                && planned.value_len() == e.value().map(<[u8]>::len)
        });
        if !same {
            return Err(Error::corruption(
                "live entry to fold, read again",
                format!("{:?}", String::from_utf8_lossy(planned.key())),
                if at.is_ok() { "another entry" } else { "none" },
            )
            .at(base.pieces[piece as usize].name()));
        }
    }
    Ok(())
}

/// The entries a pass writes: `written`'s held entries, and the folded ones
/// the pass read again, by index.
pub(super) struct PassEntries<'a> {
    written: &'a [Written],
    loaded: Vec<(u32, DeltaEntry)>,
}

impl EntrySource for PassEntries<'_> {
    fn entry(&self, i: u32) -> Option<EntryRef<'_>> {
        match self.written.get(i as usize)? {
            Written::Held(e) => Some(e.entry_ref()),
            Written::Folded(_) => {
                let at = self.loaded.binary_search_by_key(&i, |&(j, _)| j).ok()?;
                Some(self.loaded[at].1.entry_ref())
            }
        }
    }
}
