//! Compaction of a delta into a base TPH (paper §3.5, MergeArray).
//!
//! Only new, changed and deleted keys are written, into one new piece;
//! unchanged keys stay in the pieces that hold them. The new head piece
//! carries a new global index over the merged key set. Pieces left without
//! live keys are dropped; when the TPH would exceed `max_pieces` (or a piece
//! is mostly dead), the cheapest pieces are folded into the new piece (GC).

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use rayon::prelude::*;

use super::index::{bits_for, Exception, GlobalIndex, SlotTable, EMPTY};
use super::meta::{
    TphMeta, MAX_PIECES, SECTION_EXCEPTIONS, SECTION_META, SECTION_PHF, SECTION_SLOTS,
};
use super::{piece_file_name, PieceFile, PieceReads, Tph};
use crate::compaction::{pick_victims, PieceLife};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::hash::{key_hash, key_hash2, signature};
use crate::phf::Phf;
use crate::piece::{write_piece_with_sections, EntryRef, PieceOptions};

/// An entry moving into a TPH.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DeltaEntry {
    pub(crate) key: Bytes,
    /// `None` for a tombstone.
    pub(crate) value: Option<Bytes>,
    pub(crate) seq: u64,
    /// `key_hash(key)`.
    pub(crate) h: u64,
}

/// Where and how a merge writes.
pub(crate) struct MergeContext<'a> {
    pub(crate) fs: &'a Arc<dyn FileSystem>,
    pub(crate) dir: &'a Path,
    pub(crate) reads: &'a PieceReads,
    pub(crate) piece_options: &'a PieceOptions,
    pub(crate) sig_bits: u32,
    pub(crate) level: u32,
    pub(crate) partition: u64,
    /// Nothing older lies below: tombstones may go once no piece needs them.
    pub(crate) bottom: bool,
    pub(crate) max_pieces: usize,
    /// Pieces with a smaller live fraction are folded (space reclamation).
    pub(crate) min_live_ratio: f64,
    /// File number for the new head piece.
    pub(crate) new_number: u64,
    /// Key hashes the global index build holds at once (8 bytes each):
    /// past it the perfect hash is built in several passes over the keys.
    pub(crate) index_batch_keys: usize,
}

/// What a merge did, for statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MergeStats {
    pub(crate) bytes_written: u64,
    pub(crate) bytes_read: u64,
    pub(crate) entries_written: u64,
    pub(crate) pieces_folded: u64,
    pub(crate) pieces_dropped: u64,
    pub(crate) tombstones_dropped: u64,
}

/// The result of a merge.
pub(crate) enum MergeOutcome {
    /// Nothing to do: no delta and no garbage to collect.
    Unchanged,
    /// The TPH now holds no key at all.
    Emptied {
        obsolete: Vec<Arc<PieceFile>>,
        stats: MergeStats,
    },
    /// The new TPH, and the files the old one had that it does not.
    Replaced {
        tph: Box<Tph>,
        obsolete: Vec<Arc<PieceFile>>,
        stats: MergeStats,
    },
}

/// Where a base key lives in the base index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loc {
    Slot(usize),
    Exception(usize),
}

/// One bit per slot or exception of the base index.
struct Bits(Vec<u64>);

impl Bits {
    fn new(n: usize) -> Bits {
        Bits(vec![0; n.div_ceil(64)])
    }

    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }

    fn get(&self, i: usize) -> bool {
        self.0[i / 64] & (1 << (i % 64)) != 0
    }
}

/// The base keys the delta replaces, by where they live in the base index.
struct Superseded {
    slots: Bits,
    exceptions: Bits,
}

impl Superseded {
    fn new(base: Option<&Tph>) -> Superseded {
        let (table, exceptions) =
            base.map_or((0, 0), |b| (b.index.table_size(), b.index.exceptions.len()));
        Superseded {
            slots: Bits::new(table),
            exceptions: Bits::new(exceptions),
        }
    }

    fn mark(&mut self, loc: Loc) {
        match loc {
            Loc::Slot(s) => self.slots.set(s),
            Loc::Exception(x) => self.exceptions.set(x),
        }
    }

    fn contains(&self, loc: Loc) -> bool {
        match loc {
            Loc::Slot(s) => self.slots.get(s),
            Loc::Exception(x) => self.exceptions.get(x),
        }
    }
}

/// Where the base index routes `(h, h2)`: its location and piece. For a
/// hash shared by several keys the exception list decides exactly; for any
/// other the route is only a candidate for a key that may not be in the TPH
/// (a signature match by chance), but exact for a key some piece holds:
/// every key a piece holds is live, so no other key has its hash.
fn route(tph: &Tph, h: u64, h2: u64) -> Option<(Loc, usize)> {
    let idx = &tph.index;
    if idx.phf.is_empty() {
        return None;
    }
    let s = idx.phf.slot(h);
    let (sig, field) = idx.field(s);
    if field == EMPTY || sig != signature(h, idx.sig_bits) {
        return None;
    }
    if let Some(from) = idx.exceptions_for(h) {
        return idx.exceptions[from..]
            .iter()
            .enumerate()
            .take_while(|(_, e)| e.h == h)
            .find(|(_, e)| e.h2 == h2)
            .map(|(i, e)| (Loc::Exception(from + i), e.field as usize - 1));
    }
    Some((Loc::Slot(s), field as usize - 1))
}

/// The base keys among `delta`: for each, where it lives and its piece. A
/// routed candidate is confirmed against its piece's key hashes, streamed
/// once per piece and merged with the candidates in hash order.
fn base_keys_in(
    base: &Tph,
    delta: &[DeltaEntry],
    delta_h2: &[u64],
    stats: &mut MergeStats,
) -> Result<Vec<(Loc, usize)>> {
    let mut found = Vec::new();
    let mut candidates: Vec<(usize, u64, u64, Loc)> = Vec::new();
    for (e, &h2) in delta.iter().zip(delta_h2) {
        match route(base, e.h, h2) {
            Some((loc @ Loc::Exception(_), piece)) => found.push((loc, piece)),
            Some((loc @ Loc::Slot(_), piece)) => candidates.push((piece, e.h, h2, loc)),
            None => {}
        }
    }
    candidates.sort_unstable_by_key(|&(piece, h, h2, _)| (piece, h, h2));
    for group in candidates.chunk_by(|a, b| a.0 == b.0) {
        let piece = &base.pieces[group[0].0];
        stats.bytes_read += piece.properties().entry_count * 16;
        let mut next = 0;
        piece.for_each_key_hash(|h, h2| {
            while next < group.len() && (group[next].1, group[next].2) < (h, h2) {
                next += 1;
            }
            if next < group.len() && (group[next].1, group[next].2) == (h, h2) {
                found.push((group[next].3, group[next].0));
                next += 1;
            }
        })?;
    }
    Ok(found)
}

/// Which of `hashes` (sorted, distinct) some piece of `pieces` holds.
fn held_hashes(
    pieces: &[&Arc<PieceFile>],
    hashes: &[u64],
    stats: &mut MergeStats,
) -> Result<Vec<bool>> {
    let mut held = vec![false; hashes.len()];
    for piece in pieces {
        stats.bytes_read += piece.properties().entry_count * 16;
        let mut next = 0;
        piece.for_each_key_hash(|h, _| {
            while next < hashes.len() && hashes[next] < h {
                next += 1;
            }
            if next < hashes.len() && hashes[next] == h {
                held[next] = true;
            }
        })?;
    }
    Ok(held)
}

/// Every live key of the merged TPH, for building its global index: the
/// base's live keys that stay in their (renumbered) pieces, then the keys
/// the new piece writes. Streamed from the pieces' key hashes each time.
struct LiveKeys<'a> {
    base: Option<&'a Tph>,
    superseded: &'a Superseded,
    /// Base pieces that stay, by base index, and their live counts.
    remaining: &'a [usize],
    live_counts: &'a [u64],
    written: &'a [(DeltaEntry, u64)],
}

impl LiveKeys<'_> {
    fn count(&self) -> u64 {
        self.remaining
            .iter()
            .map(|&i| self.live_counts[i])
            .sum::<u64>()
            + self.written.len() as u64
    }

    /// Calls `f(h, h2, field)` for every live key, `field` being its piece
    /// in the new TPH plus one. Checks the live counts of the base pieces.
    fn for_each(&self, stats: &mut MergeStats, f: &mut dyn FnMut(u64, u64, u32)) -> Result<()> {
        if let Some(base) = self.base {
            for (j, &i) in self.remaining.iter().enumerate() {
                let piece = &base.pieces[i];
                stats.bytes_read += piece.properties().entry_count * 16;
                let field = j as u32 + 1;
                let mut live = 0u64;
                piece.for_each_key_hash(|h, h2| {
                    if let Some((loc, p)) = route(base, h, h2) {
                        if p == i && !self.superseded.contains(loc) {
                            live += 1;
                            f(h, h2, field);
                        }
                    }
                })?;
                if live != self.live_counts[i] {
                    return Err(Error::corruption(
                        format!("live keys of {}", piece.name()),
                        self.live_counts[i],
                        live,
                    )
                    .at(base.head.name()));
                }
            }
        }
        let new_field = self.remaining.len() as u32 + 1;
        for (e, h2) in self.written {
            f(e.h, *h2, new_field);
        }
        Ok(())
    }
}

/// Merges `delta` (distinct keys, sorted) into `base` and writes the new
/// head piece. Runs in the current rayon pool.
///
/// Memory: the delta and what the new piece writes (the job's input), one
/// bit per slot of the base index, and the new index as it is built;
/// the base's keys are streamed from its pieces' key-hash sections, and the
/// perfect hash is built holding at most `index_batch_keys` hashes.
pub(crate) fn merge(
    ctx: &MergeContext<'_>,
    base: Option<&Tph>,
    delta: Vec<DeltaEntry>,
) -> Result<MergeOutcome> {
    debug_assert!(delta.windows(2).all(|w| w[0].key < w[1].key));
    let mut stats = MergeStats::default();
    let base_pieces: &[Arc<PieceFile>] = base.map_or(&[], |b| &b.pieces);
    let n_base = base_pieces.len();

    // Which base keys the delta replaces (MergeArray cases 2 and 3).
    let delta_h2: Vec<u64> = delta.par_iter().map(|e| key_hash2(&e.key)).collect();
    let mut superseded = Superseded::new(base);
    let mut live_counts: Vec<u64> = base.map_or(Vec::new(), |b| b.live_counts.clone());
    if let Some(b) = base {
        for (loc, piece) in base_keys_in(b, &delta, &delta_h2, &mut stats)? {
            superseded.mark(loc);
            live_counts[piece] = live_counts[piece].checked_sub(1).ok_or_else(|| {
                Error::corruption(
                    format!("live keys of {}", b.pieces[piece].name()),
                    "at least one per key the delta replaces",
                    0,
                )
                .at(b.head.name())
            })?;
        }
    }

    // Dead pieces go; victims are folded into the new piece.
    let dead: Vec<bool> = live_counts.iter().map(|&l| l == 0).collect();
    let lives: Vec<PieceLife> = base_pieces
        .iter()
        .zip(&live_counts)
        .map(|(p, &live)| PieceLife {
            live,
            entries: p.properties().entry_count,
            live_bytes: p.properties().data_bytes_of(live),
        })
        .collect();
    let victim = pick_victims(
        &lives,
        ctx.max_pieces,
        ctx.min_live_ratio,
        !delta.is_empty(),
    );
    let changed = !delta.is_empty() || dead.iter().any(|&d| d) || victim.iter().any(|&v| v);
    if !changed {
        return Ok(MergeOutcome::Unchanged);
    }

    // Live entries of the victims that the delta does not replace.
    let mut carried: Vec<(DeltaEntry, u64)> = Vec::new();
    if let Some(b) = base {
        for (i, p) in base_pieces.iter().enumerate().filter(|&(i, _)| victim[i]) {
            stats.bytes_read += p.properties().data_bytes;
            stats.pieces_folded += 1;
            for e in p.iter() {
                let e = e?;
                let h = key_hash(&e.key);
                let h2 = key_hash2(&e.key);
                let still_live = route(b, h, h2)
                    .is_some_and(|(loc, piece)| piece == i && !superseded.contains(loc));
                if still_live {
                    carried.push((
                        DeltaEntry {
                            key: e.key,
                            value: e.value,
                            seq: e.seq,
                            h,
                        },
                        h2,
                    ));
                }
            }
        }
    }
    stats.pieces_dropped = dead.iter().filter(|&&d| d).count() as u64;
    let remaining: Vec<usize> = (0..n_base).filter(|&i| !dead[i] && !victim[i]).collect();

    // At the bottom a tombstone goes once no remaining piece holds its hash.
    let mut written: Vec<(DeltaEntry, u64)> =
        delta.into_iter().zip(delta_h2).chain(carried).collect();
    if ctx.bottom && written.iter().any(|(e, _)| e.value.is_none()) {
        let mut tombstones: Vec<u64> = written
            .iter()
            .filter(|(e, _)| e.value.is_none())
            .map(|(e, _)| e.h)
            .collect();
        tombstones.sort_unstable();
        tombstones.dedup();
        let pieces: Vec<&Arc<PieceFile>> = remaining.iter().map(|&i| &base_pieces[i]).collect();
        let held = held_hashes(&pieces, &tombstones, &mut stats)?;
        let is_held = |h: u64| tombstones.binary_search(&h).is_ok_and(|i| held[i]);
        let before = written.len();
        written.retain(|(e, _)| e.value.is_some() || is_held(e.h));
        stats.tombstones_dropped = (before - written.len()) as u64;
    }
    written.sort_unstable_by(|a, b| a.0.key.cmp(&b.0.key));

    let mut obsolete: Vec<Arc<PieceFile>> = (0..n_base)
        .filter(|&i| dead[i] || victim[i])
        .map(|i| base_pieces[i].clone())
        .collect();
    if let Some(b) = base {
        let head = b.head.number();
        let head_kept = remaining.iter().any(|&i| base_pieces[i].number() == head);
        if !head_kept && !obsolete.iter().any(|p| p.number() == head) {
            obsolete.push(b.head.clone());
        }
    }
    let live = LiveKeys {
        base,
        superseded: &superseded,
        remaining: &remaining,
        live_counts: &live_counts,
        written: &written,
    };
    if live.count() == 0 {
        return Ok(MergeOutcome::Emptied { obsolete, stats });
    }

    let mut pieces: Vec<Arc<PieceFile>> =
        remaining.iter().map(|&i| base_pieces[i].clone()).collect();
    let mut counts: Vec<u64> = remaining.iter().map(|&i| live_counts[i]).collect();
    if !written.is_empty() {
        counts.push(written.len() as u64);
    }
    let piece_count = counts.len();
    if piece_count > MAX_PIECES {
        return Err(Error::Internal(format!(
            "a TPH of {piece_count} pieces exceeds {MAX_PIECES}"
        )));
    }
    let meta = TphMeta {
        level: ctx.level,
        partition: ctx.partition,
        sig_bits: ctx.sig_bits,
        piece_bits: bits_for(piece_count as u64),
        pieces: remaining
            .iter()
            .map(|&i| (base_pieces[i].number(), live_counts[i]))
            .chain((!written.is_empty()).then_some((ctx.new_number, written.len() as u64)))
            .collect(),
    };
    debug_assert_eq!(meta.live_total(), live.count());

    let sections = build_index_sections(ctx, &meta, &live, &mut stats)?;
    let entries: Vec<EntryRef<'_>> = written
        .iter()
        .map(|(e, _)| EntryRef {
            key: &e.key,
            value: e.value.as_deref(),
            seq: e.seq,
        })
        .collect();
    let hashes: Vec<u64> = written.iter().map(|(e, _)| e.h).collect();
    let path = ctx.dir.join(piece_file_name(ctx.new_number));
    let extra: Vec<(u32, &[u8])> = sections.iter().map(|(id, b)| (*id, b.as_slice())).collect();
    let write_result = write_piece_with_sections(
        ctx.fs.as_ref(),
        &path,
        &entries,
        &hashes,
        ctx.piece_options,
        &extra,
    );
    if let Err(e) = write_result {
        let _ = ctx.fs.remove(&path);
        return Err(e);
    }
    let head = PieceFile::open(ctx.fs, ctx.dir, ctx.new_number, ctx.reads)?;
    stats.bytes_written = head.file_bytes();
    stats.entries_written = written.len() as u64;
    if !written.is_empty() {
        pieces.push(head.clone());
    }
    let [_, (_, phf), (_, slots), (_, exceptions)] = sections;
    let index = GlobalIndex::decode(
        Phf::decode_with(Bytes::from(phf), true)?,
        meta.sig_bits,
        meta.piece_bits,
        Bytes::from(slots),
        &exceptions,
        piece_count,
    )?;
    debug_assert_eq!(pieces.len(), counts.len());
    debug_assert!(
        counts.iter().all(|&c| c > 0),
        "a piece without live keys stays"
    );
    let tph = Tph {
        level: ctx.level,
        partition: ctx.partition,
        head,
        pieces,
        live_counts: counts,
        index,
    };
    Ok(MergeOutcome::Replaced {
        tph: Box::new(tph),
        obsolete,
        stats,
    })
}

/// The global index of the merged key set, as head-piece sections in the
/// order meta, phf, slots, exceptions. The keys are streamed from `live`:
/// once per batch of the perfect-hash build, then once to fill the slots.
fn build_index_sections(
    ctx: &MergeContext<'_>,
    meta: &TphMeta,
    live: &LiveKeys<'_>,
    stats: &mut MergeStats,
) -> Result<[(u32, Vec<u8>); 4]> {
    let built = Phf::build_streamed(
        ctx.piece_options.phf_kind,
        live.count(),
        &mut |f: &mut dyn FnMut(u64)| live.for_each(stats, &mut |h, _, _| f(h)),
        &ctx.piece_options.phf,
        ctx.index_batch_keys,
    )?;
    let phf = built.phf;
    // A hash shared by several live keys: every one of them is an exception,
    // so that the exception list alone routes that hash.
    let mut shared = built.duplicate_hashes;
    shared.sort_unstable();
    let mut slots = SlotTable::new(phf.table_size(), meta.sig_bits, meta.piece_bits);
    let mut exceptions = Vec::new();
    live.for_each(stats, &mut |h, h2, field| {
        slots.set(phf.slot(h), signature(h, meta.sig_bits), field);
        if shared.binary_search(&h).is_ok() {
            exceptions.push(Exception { h, h2, field });
        }
    })?;
    exceptions.sort_unstable();
    let mut phf_bytes = Vec::new();
    phf.encode(&mut phf_bytes);
    Ok([
        (SECTION_META, meta.encode()),
        (SECTION_PHF, phf_bytes),
        (SECTION_SLOTS, slots.finish()),
        (
            SECTION_EXCEPTIONS,
            GlobalIndex::encode_exceptions(&exceptions),
        ),
    ])
}
