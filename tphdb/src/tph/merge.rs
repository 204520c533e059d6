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

use super::index::{bits_for, Exception, GlobalIndex, EMPTY};
use super::meta::{
    TphMeta, MAX_PIECES, SECTION_EXCEPTIONS, SECTION_META, SECTION_PHF, SECTION_SLOTS,
};
use super::{piece_file_name, PieceFile, PieceReads, Tph};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::hash::{key_hash, key_hash2, signature};
use crate::phf::Phf;
use crate::piece::{write_piece_with_sections, EntryRef, HashSection, PieceOptions};

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
#[derive(Clone, Copy)]
enum Loc {
    Slot(usize),
    Exception(usize),
}

/// The base TPH with the key hashes of every piece, loaded for a merge.
/// Identity is `(h, h2)`: the global index finds the piece, the piece's
/// hash section confirms the key.
struct Base<'a> {
    tph: &'a Tph,
    hashes: Vec<HashSection>,
}

impl<'a> Base<'a> {
    fn load(tph: &'a Tph) -> Result<Base<'a>> {
        let hashes = tph
            .pieces
            .iter()
            .map(|p| p.key_hash_section())
            .collect::<Result<_>>()?;
        Ok(Base { tph, hashes })
    }

    fn bytes_read(&self) -> u64 {
        self.hashes.iter().map(|s| s.bytes() as u64).sum()
    }

    /// The live key `(h, h2)` of the base, if there is one: its location and
    /// piece index.
    fn locate(&self, h: u64, h2: u64) -> Option<(Loc, usize)> {
        let idx = &self.tph.index;
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
        let piece = field as usize - 1;
        self.hashes[piece]
            .contains(h, h2)
            .then_some((Loc::Slot(s), piece))
    }

    /// Every live key of the base: `(h, h2, location, piece)`. An entry of a
    /// piece is live when the index routes its key to that piece.
    fn live_keys(&self) -> Result<Vec<(u64, u64, Loc, usize)>> {
        let idx = &self.tph.index;
        let mut out = Vec::with_capacity(self.tph.live_count() as usize);
        let mut per_piece = vec![0u64; self.hashes.len()];
        for (p, section) in self.hashes.iter().enumerate() {
            for (h, h2) in section.iter() {
                if let Some((loc, piece)) = self.locate(h, h2) {
                    if piece == p {
                        out.push((h, h2, loc, p));
                        per_piece[p] += 1;
                    }
                }
            }
        }
        if per_piece != self.tph.live_counts {
            return Err(Error::corruption(
                "tph live keys",
                format!("{:?} per piece", self.tph.live_counts),
                format!("{per_piece:?}"),
            )
            .at(self.tph.head.name()));
        }
        debug_assert!(idx.table_size() >= out.len() - idx.exceptions.len().min(out.len()));
        Ok(out)
    }
}

/// A live key of the merged TPH.
struct Live {
    h: u64,
    h2: u64,
    /// Piece index + 1 in the new TPH.
    field: u32,
}

/// Merges `delta` (distinct keys, sorted) into `base` and writes the new
/// head piece. Runs in the current rayon pool.
pub(crate) fn merge(
    ctx: &MergeContext<'_>,
    base: Option<&Tph>,
    delta: Vec<DeltaEntry>,
) -> Result<MergeOutcome> {
    debug_assert!(delta.windows(2).all(|w| w[0].key < w[1].key));
    let mut stats = MergeStats::default();
    let base = base.map(Base::load).transpose()?;
    if let Some(b) = &base {
        stats.bytes_read += b.bytes_read();
    }
    let base_pieces: &[Arc<PieceFile>] = base.as_ref().map_or(&[], |b| &b.tph.pieces);
    let n_base = base_pieces.len();

    // Which base keys the delta replaces (MergeArray cases 2 and 3).
    let delta_h2: Vec<u64> = delta.par_iter().map(|e| key_hash2(&e.key)).collect();
    let (table, n_exc) = base.as_ref().map_or((0, 0), |b| {
        (b.tph.index.table_size(), b.tph.index.exceptions.len())
    });
    let mut superseded_slot = vec![false; table];
    let mut superseded_exc = vec![false; n_exc];
    let mut live_counts: Vec<u64> = base
        .as_ref()
        .map_or(Vec::new(), |b| b.tph.live_counts.clone());
    if let Some(b) = &base {
        for (e, &h2) in delta.iter().zip(&delta_h2) {
            if let Some((loc, piece)) = b.locate(e.h, h2) {
                match loc {
                    Loc::Slot(s) => superseded_slot[s] = true,
                    Loc::Exception(i) => superseded_exc[i] = true,
                }
                live_counts[piece] -= 1;
            }
        }
    }

    // Dead pieces go; victims are folded into the new piece.
    let dead: Vec<bool> = live_counts.iter().map(|&l| l == 0).collect();
    let victim = pick_victims(ctx, base_pieces, &live_counts, &dead, !delta.is_empty());
    let changed = !delta.is_empty() || dead.iter().any(|&d| d) || victim.iter().any(|&v| v);
    if !changed {
        return Ok(MergeOutcome::Unchanged);
    }

    // Live entries of the victims that the delta does not replace.
    let mut carried: Vec<(DeltaEntry, u64)> = Vec::new();
    if let Some(b) = &base {
        for (i, p) in base_pieces.iter().enumerate().filter(|&(i, _)| victim[i]) {
            stats.bytes_read += p.properties().data_bytes;
            stats.pieces_folded += 1;
            for e in p.iter() {
                let e = e?;
                let h = key_hash(&e.key);
                let h2 = key_hash2(&e.key);
                let still_live = match b.locate(h, h2) {
                    Some((Loc::Slot(s), piece)) => piece == i && !superseded_slot[s],
                    Some((Loc::Exception(x), piece)) => piece == i && !superseded_exc[x],
                    None => false,
                };
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
        let b = base.as_ref();
        let held =
            |h: u64| b.is_some_and(|b| remaining.iter().any(|&i| b.hashes[i].contains_hash(h)));
        let before = written.len();
        written.retain(|(e, _)| e.value.is_some() || held(e.h));
        stats.tombstones_dropped = (before - written.len()) as u64;
    }
    written.sort_unstable_by(|a, b| a.0.key.cmp(&b.0.key));

    // The merged key set: surviving base keys keep their (renumbered) piece.
    let mut new_index = vec![u32::MAX; n_base];
    for (j, &i) in remaining.iter().enumerate() {
        new_index[i] = j as u32;
    }
    let new_piece_field = remaining.len() as u32 + 1;
    let mut live: Vec<Live> = Vec::with_capacity(remaining.len() + written.len());
    if let Some(b) = &base {
        for (h, h2, loc, piece) in b.live_keys()? {
            let superseded = match loc {
                Loc::Slot(s) => superseded_slot[s],
                Loc::Exception(x) => superseded_exc[x],
            };
            if !superseded && new_index[piece] != u32::MAX {
                live.push(Live {
                    h,
                    h2,
                    field: new_index[piece] + 1,
                });
            }
        }
    }
    for (e, h2) in &written {
        live.push(Live {
            h: e.h,
            h2: *h2,
            field: new_piece_field,
        });
    }
    let mut obsolete: Vec<Arc<PieceFile>> = (0..n_base)
        .filter(|&i| dead[i] || victim[i])
        .map(|i| base_pieces[i].clone())
        .collect();
    if let Some(b) = &base {
        let head = b.tph.head.number();
        let head_kept = remaining.iter().any(|&i| base_pieces[i].number() == head);
        if !head_kept && !obsolete.iter().any(|p| p.number() == head) {
            obsolete.push(b.tph.head.clone());
        }
    }
    if live.is_empty() {
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
        return Err(Error::InvalidArgument(format!(
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
    debug_assert_eq!(meta.live_total(), live.len() as u64);

    let sections = build_index_sections(ctx, &meta, &live)?;
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
    let index = GlobalIndex::decode(
        Phf::decode(Bytes::from(sections[1].1.clone()))?,
        meta.sig_bits,
        meta.piece_bits,
        Bytes::from(sections[2].1.clone()),
        &sections[3].1,
        piece_count,
    )?;
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

/// Chooses the pieces to fold: enough of the cheapest (fewest live bytes,
/// then oldest) to stay within `max_pieces`, and any mostly dead piece.
fn pick_victims(
    ctx: &MergeContext<'_>,
    pieces: &[Arc<PieceFile>],
    live_counts: &[u64],
    dead: &[bool],
    adds_piece: bool,
) -> Vec<bool> {
    let mut victim = vec![false; pieces.len()];
    let live_bytes = |i: usize| pieces[i].properties().data_bytes_of(live_counts[i]);
    let mut candidates: Vec<usize> = (0..pieces.len()).filter(|&i| !dead[i]).collect();
    for &i in &candidates {
        let entries = pieces[i].properties().entry_count.max(1);
        if (live_counts[i] as f64) < ctx.min_live_ratio * entries as f64 {
            victim[i] = true;
        }
    }
    let kept = candidates.iter().filter(|&&i| !victim[i]).count();
    let max = ctx.max_pieces.max(1);
    // Folding anything means a new piece is written even without a delta.
    let new_piece = adds_piece || victim.iter().any(|&v| v) || kept + 1 > max;
    let mut excess = (kept + new_piece as usize).saturating_sub(max);
    candidates.sort_by_key(|&i| (live_bytes(i), i));
    for i in candidates {
        if excess == 0 {
            break;
        }
        if !victim[i] {
            victim[i] = true;
            excess -= 1;
        }
    }
    victim
}

/// The global index of the merged key set, as head-piece sections in the
/// order meta, phf, slots, exceptions.
fn build_index_sections(
    ctx: &MergeContext<'_>,
    meta: &TphMeta,
    live: &[Live],
) -> Result<Vec<(u32, Vec<u8>)>> {
    let hashes: Vec<u64> = live.iter().map(|l| l.h).collect();
    let phf = Phf::build(ctx.piece_options.phf_kind, &hashes, &ctx.piece_options.phf)?.phf;
    let table = phf.table_size();
    let mut fields = vec![(0u64, EMPTY); table];
    let mut exceptions = Vec::new();
    for l in live {
        let s = phf.slot(l.h);
        fields[s] = (signature(l.h, meta.sig_bits), l.field);
    }
    // A hash shared by several live keys: every one of them is an exception,
    // so that the exception list alone routes that hash.
    let mut by_hash: Vec<(u64, u64, u32)> = live.iter().map(|l| (l.h, l.h2, l.field)).collect();
    by_hash.sort_unstable();
    for group in by_hash.chunk_by(|a, b| a.0 == b.0) {
        if group.len() > 1 {
            exceptions.extend(
                group
                    .iter()
                    .map(|&(h, h2, field)| Exception { h, h2, field }),
            );
        }
    }
    let mut phf_bytes = Vec::new();
    phf.encode(&mut phf_bytes);
    Ok(vec![
        (SECTION_META, meta.encode()),
        (SECTION_PHF, phf_bytes),
        (
            SECTION_SLOTS,
            GlobalIndex::encode_slots(&fields, meta.sig_bits, meta.piece_bits),
        ),
        (
            SECTION_EXCEPTIONS,
            GlobalIndex::encode_exceptions(&exceptions),
        ),
    ])
}
