//! What a merge writes into its new piece: the delta's entries, and the
//! live entries of the pieces it folds. Folded entries are held whole when
//! they fit the job's memory; past it they are held by their shape (key,
//! sequence number, value length) and read again from their pieces a run
//! of the new piece's slots at a time, so that a fold of pieces of any size
//! holds at most about `fold_memory_bytes` of values at once. A delta read
//! from TPHs (a push-down's, a level-0 compaction's) whose share of one
//! partition passes the job's input memory is held by shape the same way,
//! read again from the input TPHs' pieces.

use std::sync::Arc;

use super::base::{route, Superseded};
use super::copies::Copies;
use super::delta_entry::{DeltaEntry, HELD, MERGE_BYTES_PER_ENTRY};
use super::merge::MergeStats;
use super::{PieceFile, Tph};
use crate::error::{Error, Result};
use crate::hash::{key_hash, key_hash2};
use crate::piece::{AsEntry, EntryRef, EntryShape, EntrySource};

/// An entry of the new piece: held in memory (the delta's, or a folded
/// piece's that fit), or held by shape (a live entry of a folded piece or
/// of an input TPH without its value, read again when its pass writes it).
/// The same 40 bytes as a [`DeltaEntry`], so that a merge turns its delta
/// list into its written list in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Written(DeltaEntry);

/// The piece an entry held by shape is read again from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Origin {
    /// 0 for the base TPH, `i + 1` for the merge's input `i`
    /// ([`super::MergeContext::inputs`]); never `u16::MAX`, which with
    /// piece `u16::MAX` is a held entry's mark.
    tph: u16,
    /// The piece's index in that TPH (at most `MAX_PIECES`).
    piece: u16,
}

impl Origin {
    /// The base TPH's first piece.
    const BASE: Origin = Origin { tph: 0, piece: 0 };

    /// The first piece of the merge's input `input`.
    pub(crate) fn input(input: usize) -> Result<Origin> {
        let tph = u16::try_from(input + 1)
            .ok()
            .filter(|&t| t < u16::MAX)
            .ok_or_else(|| Error::Internal(format!("a merge of {input} input TPHs")))?;
        Ok(Origin { tph, piece: 0 })
    }

    /// Whether the piece is the base TPH's (a fold's), not an input's.
    fn is_base(self) -> bool {
        self.tph == 0
    }

    /// Piece `piece` of the same TPH.
    pub(crate) fn at(self, piece: usize) -> Origin {
        Origin {
            piece: piece as u16,
            ..self
        }
    }

    fn packed(self) -> u32 {
        u32::from(self.tph) << 16 | u32::from(self.piece)
    }

    fn unpacked(origin: u32) -> Option<Origin> {
        (origin != HELD).then_some(Origin {
            tph: (origin >> 16) as u16,
            piece: origin as u16,
        })
    }

    /// The piece, if the base and the inputs hold it.
    fn piece<'a>(
        self,
        base: Option<&'a Tph>,
        inputs: &'a [Arc<Tph>],
    ) -> Option<&'a Arc<PieceFile>> {
        let tph = match self.tph {
            0 => base?,
            i => inputs.get(usize::from(i) - 1)?,
        };
        tph.pieces.get(usize::from(self.piece))
    }
}

// Piece indexes fit an origin's.
const _: () = assert!(super::meta::MAX_PIECES <= u16::MAX as usize);

impl From<DeltaEntry> for Written {
    fn from(e: DeltaEntry) -> Written {
        debug_assert_eq!(e.origin, HELD);
        Written(e)
    }
}

impl Written {
    /// `list` as entries to write, in place.
    pub(crate) fn held(list: Vec<DeltaEntry>) -> Vec<Written> {
        list.into_iter().map(Written::from).collect()
    }

    /// `e`'s shape, with its key hash `h`, read again from `origin`. The
    /// key is copied, like a held entry's (see [`DeltaEntry::copied`]).
    pub(crate) fn shape_of(
        e: EntryRef<'_>,
        h: u64,
        origin: Origin,
        copies: &mut Copies,
    ) -> Written {
        Written(DeltaEntry::shape_of(e, h, origin.packed(), copies))
    }

    /// Memory `list` holds, its entries read from pieces: the entries, and
    /// the bytes they copied out (a held entry's key and value, one held by
    /// shape its key).
    pub(crate) fn list_memory(list: &Vec<Written>) -> u64 {
        let entries = list.capacity() * std::mem::size_of::<Written>();
        let bytes: usize = list.iter().map(|e| e.0.held_bytes()).sum();
        (entries + bytes) as u64
    }

    /// The entry, if it is held with its value.
    pub(crate) fn as_held(&self) -> Option<&DeltaEntry> {
        (self.0.origin == HELD).then_some(&self.0)
    }

    /// Where the entry is read again from, if it is held by shape.
    pub(crate) fn origin(&self) -> Option<Origin> {
        Origin::unpacked(self.0.origin)
    }

    #[inline]
    pub(crate) fn h(&self) -> u64 {
        self.0.h
    }

    pub(crate) fn h2(&self) -> u64 {
        self.0.h2()
    }

    pub(crate) fn is_tombstone(&self) -> bool {
        self.value_len().is_none()
    }
}

impl EntryShape for Written {
    #[inline]
    fn key(&self) -> &[u8] {
        self.0.key()
    }

    #[inline]
    fn seq(&self) -> u64 {
        self.0.seq
    }

    #[inline]
    fn value_len(&self) -> Option<usize> {
        self.0.value_len()
    }
}

/// The live entries of the victim pieces that the delta does not replace,
/// which move into the new piece: held when they fit `fold_memory_bytes`,
/// else by shape.
pub(super) fn carry_victims(
    base: &Tph,
    victim: &[bool],
    live_counts: &[u64],
    superseded: &Superseded,
    fold_memory_bytes: u64,
    stats: &mut MergeStats,
) -> Result<Vec<Written>> {
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
                Written::from(DeltaEntry::copied(e.as_entry(), h, &mut copies))
            } else {
                Written::shape_of(e.as_entry(), h, Origin::BASE.at(i), &mut copies)
            });
        }
    }
    Ok(carried)
}

/// The passes a piece of `written` is written in: enough that each reads
/// at most about `memory_bytes` (and [`PASS_VALUES_BYTES`]) of its entries
/// held by shape again (one when none is).
pub(super) fn passes_for(written: &[Written], memory_bytes: u64) -> usize {
    let read_again = written.iter().filter(|e| e.origin().is_some());
    let (count, bytes) = read_again.fold((0, 0), |(n, b), e| (n + 1, b + e.encoded_len() as u64));
    passes_to_read_again(count, bytes, memory_bytes)
}

/// The passes a piece is written in when `count` of its entries, of
/// `bytes` encoded, are read again: see [`passes_for`].
pub(super) fn passes_to_read_again(count: u64, bytes: u64, memory_bytes: u64) -> usize {
    let read_again = bytes + count * MERGE_BYTES_PER_ENTRY;
    read_again.div_ceil(values_run(memory_bytes)).max(1) as usize
}

/// What a pass of a new piece's writing reads again at most, given a
/// merge's fold memory: that memory, and at most [`PASS_VALUES_BYTES`].
pub(crate) fn values_run(memory_bytes: u64) -> u64 {
    memory_bytes.clamp(1, PASS_VALUES_BYTES)
}

/// What one pass reads again at most, whatever the fold memory. A
/// push-down's pass held by shape read up to its merge's fold memory (16
/// MiB at the defaults: about 11 MB of copies and their list), and two
/// such push-downs met a flush at the peak of a 16M x 128-byte fill. In 4
/// MiB runs (with the key-hash section sorted in ranges) that peak fell
/// from 235 to 219 MB at no CPU cost measured; at 1 KiB values, whose
/// passes are four times as many, the fill ran 4.5% slower
/// (docs/benchmarks.md, "Peak RSS").
pub(super) const PASS_VALUES_BYTES: u64 = 4 << 20;

/// The entries of one pass's run of slots (indices into `written`; empty
/// slots are past its end): the held ones where they are, the folded ones
/// read again from their pieces in `base` or `inputs` (only the blocks
/// that hold them) and checked against their shapes. With nothing
/// `folded`, the run is not looked at.
pub(super) fn load_pass<'a>(
    base: Option<&Tph>,
    inputs: &[Arc<Tph>],
    written: &'a [Written],
    folded: bool,
    run: &[u32],
    stats: &mut MergeStats,
) -> Result<PassEntries<'a>> {
    let mut loaded = Vec::new();
    if folded {
        let mut copies = Copies::default();
        // (origin, h, h2, index) of the folded entries the run holds.
        let mut wanted: Vec<(Origin, u64, u64, u32)> = run
            .iter()
            .filter_map(|&i| {
                let w = written.get(i as usize)?;
                Some((w.origin()?, w.h(), w.h2(), i))
            })
            .collect();
        wanted.sort_unstable();
        for group in wanted.chunk_by(|a, b| a.0 == b.0) {
            let piece = group[0].0.piece(base, inputs).ok_or_else(|| {
                Error::Internal(format!(
                    "no piece {:?} to read folded entries from",
                    group[0].0
                ))
            })?;
            let read = read_again(piece, group, &mut copies, &mut loaded)?;
            // A folded base piece is read for its fold; an input's entries
            // held by shape are read a second time.
            if group[0].0.is_base() {
                stats.fold_bytes_read += read;
            } else {
                stats.values_again_read += read;
            }
        }
        loaded.sort_unstable_by_key(|&(i, _)| i);
        check_loaded(base, inputs, written, &wanted, &loaded)?;
    }
    Ok(PassEntries { written, loaded })
}

/// Reads again from `piece` the entries of `group`, `(_, h, h2, index)`
/// sorted by `h`, copied into `copies`, onto `loaded` with their index:
/// only the blocks that hold them. Returns the bytes of blocks read.
pub(super) fn read_again<T>(
    piece: &PieceFile,
    group: &[(T, u64, u64, u32)],
    copies: &mut Copies,
    loaded: &mut Vec<(u32, DeltaEntry)>,
) -> Result<u64> {
    let mut hashes: Vec<u64> = group.iter().map(|w| w.1).collect();
    hashes.dedup();
    piece.for_each_entry_with_hashes(&hashes, |e| {
        let h = key_hash(e.key);
        let at = group.partition_point(|w| w.1 < h);
        if group.get(at).is_none_or(|w| w.1 != h) {
            return;
        }
        let h2 = key_hash2(e.key);
        if let Some(w) = group[at..]
            .iter()
            .take_while(|w| w.1 == h)
            .find(|w| w.2 == h2)
        {
            loaded.push((w.3, DeltaEntry::copied(e, h, copies)));
        }
    })
}

/// Refuses a pass whose folded entries are not all found again as they
/// were: the new piece's blocks would not match its other sections.
fn check_loaded(
    base: Option<&Tph>,
    inputs: &[Arc<Tph>],
    written: &[Written],
    wanted: &[(Origin, u64, u64, u32)],
    loaded: &[(u32, DeltaEntry)],
) -> Result<()> {
    for &(origin, _, _, i) in wanted {
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
            .at(origin.piece(base, inputs).map_or("", |p| p.name())));
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
        match self.written.get(i as usize)?.as_held() {
            Some(e) => Some(e.entry_ref()),
            None => {
                let at = self.loaded.binary_search_by_key(&i, |&(j, _)| j).ok()?;
                Some(self.loaded[at].1.entry_ref())
            }
        }
    }

    #[inline]
    fn prefetch(&self, i: u32) {
        if let Some(w) = self.written.get(i as usize) {
            crate::util::prefetch(w);
        }
    }
}
