//! Compaction of a delta into a base TPH (paper §3.5, MergeArray).
//!
//! Only new, changed and deleted keys are written, into one new piece;
//! unchanged keys stay in the pieces that hold them. The new head piece
//! carries a new global index over the merged key set. Pieces left without
//! live keys are dropped; when the TPH would exceed `max_pieces` (or a piece
//! is mostly dead), the cheapest pieces are folded into the new piece (GC).

use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::base::{held_hashes, supersede, LiveKeys};
use super::fold::{carry_victims, load_pass, passes_for, Written};
use super::garbage::{live_shadowed, piece_garbage};
use super::head::{
    build_index_sections, new_meta, write_head, write_head_with, write_piece_file, LiveKeySource,
};
use super::meta::MAX_PIECES;
use super::{piece_file_name, PieceFile, PieceReads, Tph};
use crate::compaction::{pick_gc_victims, pick_victims, PieceLife};
use crate::error::Result;
use crate::fs::FileSystem;
use crate::piece::{write_piece_in_passes, EntryShape, PieceOptions};
use crate::util::held::HeldBytes;
use crate::version::Version;

/// Where and how a merge writes.
pub(crate) struct MergeContext<'a> {
    pub(crate) fs: &'a Arc<dyn FileSystem>,
    pub(crate) dir: &'a Path,
    pub(crate) reads: &'a PieceReads,
    pub(crate) piece_options: &'a PieceOptions,
    pub(crate) sig_bits: u32,
    /// At the bottom, the bits of a global index field at most: a TPH with
    /// more pieces takes them from its signature (see
    /// [`super::head::signature_bits_within`]).
    pub(crate) field_bits: Option<u32>,
    pub(crate) level: u32,
    pub(crate) partition: u64,
    /// Nothing older lies below: tombstones may go once no piece needs them.
    pub(crate) bottom: bool,
    pub(crate) max_pieces: usize,
    /// Above the bottom, the size past which the TPH is pushed down whole
    /// (`tph_target_bytes`). A TPH past it keeps up to
    /// `PUSH_DUE_PIECES_FACTOR` times `max_pieces` before folding: its
    /// push-down carries every live entry down anyway, so a fold would
    /// write them twice.
    pub(crate) push_past_bytes: Option<u64>,
    /// At a bottom that may still get a level below it, the size near
    /// which its TPHs are pushed down when it does (`tph_target_bytes`): a
    /// TPH that reaches it within `PUSH_DUE_PIECES_FACTOR` times
    /// `max_pieces` pieces folds nothing before then, and one that will
    /// not take `max_pieces` more deltas before then folds only what the
    /// piece count needs, not size tiers.
    pub(crate) bottom_pushed_near: Option<u64>,
    /// Pieces with a smaller live fraction are folded (space reclamation).
    pub(crate) min_live_ratio: f64,
    /// A GC fold: the pieces to fold are those with the most garbage whose
    /// live entries fit this memory (at least one), not those
    /// `max_pieces` and `min_live_ratio` choose.
    pub(crate) gc_input_bytes: Option<u64>,
    /// Values of folded entries a merge holds at once: past it, the new
    /// piece is written in several passes, each reading its share of the
    /// folded pieces again, at most `fold::PASS_VALUES_BYTES` (the job's
    /// input memory).
    pub(crate) fold_memory_bytes: u64,
    /// File number for the new head piece.
    pub(crate) new_number: u64,
    /// File number for an index-only head: with one, a merge that writes
    /// entries writes its global index apart from them, so that the index
    /// goes with its file when the next merge replaces it. A data piece
    /// that carried its TPH's index kept it once a later merge's head
    /// replaced it: an index over every key at the time, for each piece,
    /// 217 of a 16M x 128-byte load's 2,764 MB.
    pub(crate) index_number: Option<u64>,
    /// Memory the global index build may hold: past it the fuse is built
    /// in several passes over the keys.
    pub(crate) index_memory_bytes: usize,
    /// Where the merge counts what it holds beyond its caller's lists:
    /// the index build and the sections it carries to the head
    /// (the database's job memory; `None` in tests of the merge alone).
    pub(crate) job_memory: Option<&'a AtomicU64>,
    /// The hashes the TPH's keys come from (its partition's; all at level
    /// 0): the global index's chunks divide them evenly.
    pub(crate) hashes: RangeInclusive<u64>,
    /// Base pieces a running push-down carries down: kept rather than
    /// folded (see [`pick_victims`]).
    pub(crate) pinned: &'a [u64],
    /// The TPHs the delta was read from, when some of its entries are held
    /// by shape ([`super::fold::Origin`]): their values are read again as
    /// the new piece is written.
    pub(crate) inputs: &'a [Arc<Tph>],
    /// Base pieces to drop whole with their entries: those a push-down
    /// carried down, at its end. Only the newer pieces remain, so every
    /// key they hold stays live in them.
    pub(crate) carried_down: &'a [u64],
    /// The levels below, for TPHs above the bottom: which of the delta's
    /// keys hide a version there ([`super::meta::MetaPiece::shadowed`]).
    /// Asked for when the merge needs them, so that a long job does not
    /// keep TPHs other jobs replaced meanwhile (and their indexes) alive.
    pub(crate) below: Option<&'a (dyn Fn() -> Arc<Version> + Sync)>,
}

impl MergeContext<'_> {
    /// Counts `bytes` in the job's memory while the guard lives.
    pub(crate) fn hold(&self, bytes: u64) -> Option<HeldBytes<'_>> {
        self.job_memory.map(|gauge| HeldBytes::on(gauge, bytes))
    }
}

/// What a merge did, for statistics. The bytes of the piece it wrote are
/// split by cause: the delta's entries (with the piece's own indexes, pro
/// rata), the folded pieces' live entries, and the TPH's global index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct MergeStats {
    pub(crate) delta_bytes_written: u64,
    pub(crate) fold_bytes_written: u64,
    pub(crate) index_bytes_written: u64,
    /// Inputs read by the job (set by the job, not the merge).
    pub(crate) input_bytes_read: u64,
    /// Folded pieces read.
    pub(crate) fold_bytes_read: u64,
    /// Key-hash sections read to rebuild the global index.
    pub(crate) hash_bytes_read: u64,
    /// Values of entries held by shape read again from the inputs.
    pub(crate) values_again_read: u64,
    pub(crate) entries_written: u64,
    pub(crate) pieces_folded: u64,
    pub(crate) pieces_dropped: u64,
    pub(crate) tombstones_dropped: u64,
}

impl MergeStats {
    /// Adds `other`'s counts.
    pub(crate) fn add(&mut self, other: &MergeStats) {
        self.delta_bytes_written += other.delta_bytes_written;
        self.fold_bytes_written += other.fold_bytes_written;
        self.index_bytes_written += other.index_bytes_written;
        self.input_bytes_read += other.input_bytes_read;
        self.fold_bytes_read += other.fold_bytes_read;
        self.hash_bytes_read += other.hash_bytes_read;
        self.values_again_read += other.values_again_read;
        self.entries_written += other.entries_written;
        self.pieces_folded += other.pieces_folded;
        self.pieces_dropped += other.pieces_dropped;
        self.tombstones_dropped += other.tombstones_dropped;
    }

    /// Every byte written.
    #[cfg(test)]
    pub(crate) fn bytes_written(&self) -> u64 {
        self.delta_bytes_written + self.fold_bytes_written + self.index_bytes_written
    }
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

/// Merges `delta` (distinct keys, sorted) into `base` and writes the new
/// head piece. Runs in the current rayon pool.
///
/// Memory: the delta (the job's input; entries held by shape take their
/// keys, and a pass's share of their values), the folded pieces' live
/// entries (whole within `fold_memory_bytes`, else their shapes and a
/// pass's share of their values), the replaced keys of the base pieces that stay, and
/// the new index as it is built; the base's keys are streamed from its
/// pieces' key-hash sections, and the fuse is built a batch of chunks at a
/// time within `index_memory_bytes`.
pub(crate) fn merge(
    ctx: &MergeContext<'_>,
    base: Option<&Tph>,
    delta: Vec<Written>,
) -> Result<MergeOutcome> {
    debug_assert!(delta.windows(2).all(|w| w[0].key() < w[1].key()));
    let mut stats = MergeStats::default();
    let base_pieces: &[Arc<PieceFile>] = base.map_or(&[], |b| &b.pieces);

    // Which base keys the delta replaces (MergeArray cases 2 and 3).
    let (superseded, live_counts) = supersede(base, &delta, &mut stats)?;

    // Dead pieces go, and so do those carried down; victims are folded
    // into the new piece.
    let dead: Vec<bool> = base_pieces
        .iter()
        .zip(&live_counts)
        .map(|(p, &l)| l == 0 || ctx.carried_down.contains(&p.number()))
        .collect();
    let lives: Vec<PieceLife> = base_pieces
        .iter()
        .zip(&live_counts)
        .zip(&dead)
        .map(|((p, &live), &dead)| {
            let live = if dead { 0 } else { live };
            PieceLife {
                live,
                entries: p.properties().entry_count,
                live_bytes: p.properties().data_bytes_of(live),
                garbage: piece_garbage(p.properties(), p.key_prefix().len(), live),
                pinned: ctx.pinned.contains(&p.number()),
            }
        })
        .collect();
    let victim = match ctx.gc_input_bytes {
        Some(input_bytes) => pick_gc_victims(&lives, ctx.bottom, input_bytes),
        None => {
            let delta_bytes = encoded_bytes(&delta);
            let max_pieces = max_pieces(ctx, base, delta_bytes);
            let tiers = keeps_size_tiers(ctx, base, delta_bytes).then_some(delta_bytes);
            pick_victims(
                &lives,
                max_pieces,
                ctx.min_live_ratio,
                !delta.is_empty(),
                tiers,
            )
        }
    };
    let changed = !delta.is_empty() || dead.iter().any(|&d| d) || victim.iter().any(|&v| v);
    if !changed {
        return Ok(MergeOutcome::Unchanged);
    }
    let carried = match base {
        Some(b) => carry_victims(
            b,
            &victim,
            &live_counts,
            &superseded,
            ctx.fold_memory_bytes,
            &mut stats,
        )?,
        None => Vec::new(),
    };
    stats.pieces_dropped = live_counts.iter().filter(|&&l| l == 0).count() as u64;
    let remaining: Vec<usize> = (0..base_pieces.len())
        .filter(|&i| !dead[i] && !victim[i])
        .collect();

    let shadowed = shadowed_entries(ctx, base, &delta, &victim, &live_counts);
    let carried_bytes = encoded_bytes(&carried);
    let mut written = delta;
    written.reserve_exact(carried.len());
    written.extend(carried);
    if ctx.bottom {
        let pieces: Vec<&Arc<PieceFile>> = remaining.iter().map(|&i| &base_pieces[i]).collect();
        drop_bottom_tombstones(&mut written, &pieces, &mut stats)?;
    }
    written.sort_unstable_by(|a, b| a.key().cmp(b.key()));
    let passes = passes_for(&written, ctx.fold_memory_bytes);

    let obsolete = obsolete_files(base, &dead, &victim, &remaining);
    let mut live = LiveKeys {
        base,
        superseded: &superseded,
        remaining: &remaining,
        live_counts: &live_counts,
        written: &written,
        found: Vec::new(),
        cursors: Vec::new(),
    };
    if live.count() == 0 {
        return Ok(MergeOutcome::Emptied { obsolete, stats });
    }
    let meta = new_meta(ctx, base, &remaining, &live_counts, written.len(), shadowed)?;
    debug_assert_eq!(meta.live_total(), live.count());
    let sections = build_index_sections(ctx, &meta, &mut live, &mut stats)?;
    let index_bytes: u64 = sections.iter().map(|(_, b)| b.len() as u64).sum();
    let hashes: Vec<u64> = written.iter().map(Written::h).collect();
    let folded = written.iter().any(|e| e.origin().is_some());
    let mut load = |run: &[u32]| load_pass(base, ctx.inputs, &written, folded, run, &mut stats);
    // The head, its index, the data piece, and the bytes of entries and of
    // index each was written with.
    let (head, index, data, data_bytes, index_bytes) = match ctx
        .index_number
        .filter(|_| !written.is_empty())
    {
        Some(index_number) => {
            let piece = write_piece_file(ctx, ctx.new_number, |fs, path, options| {
                write_piece_in_passes(fs, path, &written, &hashes, options, &[], passes, &mut load)
            })?;
            let no_entries: &[crate::piece::EntryRef<'_>] = &[];
            let head = write_head_with(ctx, index_number, &meta, sections, |fs, path, o, x| {
                write_piece_in_passes(fs, path, no_entries, &[], o, x, 1, &mut |_| Ok(no_entries))
            });
            match head {
                Ok((head, index)) => {
                    let (data_bytes, index_bytes) = (piece.file_bytes(), head.file_bytes());
                    (head, index, piece, data_bytes, index_bytes)
                }
                Err(e) => {
                    let _ = ctx
                        .fs
                        .remove(&ctx.dir.join(piece_file_name(ctx.new_number)));
                    return Err(e);
                }
            }
        }
        None => {
            let (head, index) =
                write_head(ctx, &meta, &written, &hashes, passes, sections, &mut load)?;
            let data_bytes = head.file_bytes().saturating_sub(index_bytes);
            (head.clone(), index, head, data_bytes, index_bytes)
        }
    };
    drop(hashes);
    // The data piece's bytes are its entries and their indexes: the
    // delta's share and the folds', by their entries' sizes.
    let total = encoded_bytes(&written).max(1);
    let carried_bytes = carried_bytes.min(total);
    stats.index_bytes_written = index_bytes;
    stats.fold_bytes_written = (data_bytes as u128 * carried_bytes as u128 / total as u128) as u64;
    stats.delta_bytes_written = data_bytes - stats.fold_bytes_written;
    stats.entries_written = written.len() as u64;

    let mut pieces: Vec<Arc<PieceFile>> =
        remaining.iter().map(|&i| base_pieces[i].clone()).collect();
    if !written.is_empty() {
        pieces.push(data);
    }
    debug_assert!(
        meta.pieces.iter().all(|p| p.live > 0),
        "a piece without live keys stays"
    );
    let tph = Tph::assemble(head, pieces, &meta, index, ctx.reads);
    Ok(MergeOutcome::Replaced {
        tph: Box::new(tph),
        obsolete,
        stats,
    })
}

/// Bytes `entries` take encoded in a piece.
fn encoded_bytes<E: EntryShape>(entries: &[E]) -> u64 {
    entries.iter().map(|e| e.encoded_len() as u64).sum()
}

/// How many more pieces than `max_pieces` a TPH above the bottom may keep.
const PUSH_DUE_PIECES_FACTOR: usize = 4;

/// Whether a merge folds the TPH's pieces in size tiers (see
/// [`pick_victims`]), which pays only over many merges to come: not above
/// the bottom, where the push-down rewrites every entry anyway, nor at a
/// bottom that will get a level below it before the TPH takes
/// `max_pieces` more deltas like this one. At a bottom that could deepen,
/// a fill's level-1 TPHs of 16 pieces folded all 16 (250 MB each) two
/// merges before their push-down carried them down: 0.8 bytes written per
/// user byte of a 16M x 128 B fill, and 150 MB of peak memory.
fn keeps_size_tiers(ctx: &MergeContext<'_>, base: Option<&Tph>, delta_bytes: u64) -> bool {
    if ctx.push_past_bytes.is_some() {
        return false;
    }
    let Some(pushed_near) = ctx.bottom_pushed_near else {
        return true;
    };
    let grown = base.map_or(0, |b| b.live_data_bytes()) + delta_bytes;
    let merges_left = pushed_near.saturating_sub(grown) / delta_bytes.max(1);
    merges_left >= ctx.max_pieces as u64
}

/// The pieces the merged TPH may keep after a delta of `delta_bytes`.
/// Above the bottom, a TPH's push-down carries every live entry down
/// anyway, so a fold before it writes them twice:
/// - Past its threshold, it keeps up to `PUSH_DUE_PIECES_FACTOR` times
///   `max_pieces`. Level-0 merges score their push-downs of level 1 against
///   level 0's backlog, so a level-1 TPH can stay past its target for
///   several merges; folding it then cost `fillrandom` of 16M 1 KiB values
///   0.43 bytes per byte.
/// - Below it, as many pieces as deltas of this one's size take to fill it
///   (within the same bound). In one-level mode each flush brings a level-1
///   TPH an eighth of a memtable, so 16 pieces filled only half of its
///   threshold, and folding the rest of the way cost a 16M-key fill 0.29
///   bytes per byte.
fn max_pieces(ctx: &MergeContext<'_>, base: Option<&Tph>, delta_bytes: u64) -> usize {
    let most = (ctx.max_pieces * PUSH_DUE_PIECES_FACTOR).min(MAX_PIECES);
    let Some(threshold) = ctx.push_past_bytes else {
        return bottom_max_pieces(ctx, base, delta_bytes, most);
    };
    let base_bytes = base.map_or(0, |b| b.live_data_bytes());
    if base_bytes.saturating_add(delta_bytes) > threshold {
        return most;
    }
    let to_fill = threshold.div_ceil(delta_bytes.max(1));
    usize::try_from(to_fill)
        .unwrap_or(usize::MAX)
        .clamp(ctx.max_pieces.min(most), most)
}

/// The pieces a bottom TPH may keep after a delta of `delta_bytes`. Where
/// the tree may still deepen, the new level carries every entry of the
/// TPH down when the TPH is near `bottom_pushed_near` (its siblings grow
/// alike, hashes spreading the keys), so a fold before then writes them
/// twice: a TPH that reaches that size within `most` pieces, taking deltas
/// like this one, keeps up to `most`. A 16M x 128 B fill's level-1 TPHs
/// (15 MB a delta) reached 16 pieces at 235 MB and folded a piece at each
/// of their last three merges before the 256 MiB at which level 2 came:
/// 0.16 bytes written per user byte. One that will not (small deltas
/// fold small pieces cheaply) keeps what it holds, at least `max_pieces`:
/// dropping to `max_pieces` at once would fold all its extra pieces in
/// one merge.
fn bottom_max_pieces(
    ctx: &MergeContext<'_>,
    base: Option<&Tph>,
    delta_bytes: u64,
    most: usize,
) -> usize {
    let Some(near) = ctx.bottom_pushed_near else {
        return ctx.max_pieces;
    };
    let held = base.map_or(0, Tph::piece_count);
    let keep_held = held.clamp(ctx.max_pieces.min(most), most);
    if delta_bytes == 0 {
        return keep_held;
    }
    let grown = base.map_or(0, |b| b.live_data_bytes()) + delta_bytes;
    let to_come = near.saturating_sub(grown).div_ceil(delta_bytes);
    // The new piece, then one a delta until the TPH is near.
    if (held as u64 + 1).saturating_add(to_come) <= most as u64 {
        most
    } else {
        keep_held
    }
}

/// At the bottom a tombstone goes once no remaining piece holds its hash:
/// nothing older lies below for it to hide.
fn drop_bottom_tombstones(
    written: &mut Vec<Written>,
    remaining: &[&Arc<PieceFile>],
    stats: &mut MergeStats,
) -> Result<()> {
    let mut tombstones: Vec<u64> = written
        .iter()
        .filter(|e| e.is_tombstone())
        .map(Written::h)
        .collect();
    if tombstones.is_empty() {
        return Ok(());
    }
    tombstones.sort_unstable();
    tombstones.dedup();
    let held = held_hashes(remaining, &tombstones, stats)?;
    let is_held = |h: u64| tombstones.binary_search(&h).is_ok_and(|i| held[i]);
    let before = written.len();
    written.retain(|e| !e.is_tombstone() || is_held(e.h()));
    stats.tombstones_dropped = (before - written.len()) as u64;
    Ok(())
}

/// The files of the base the merged TPH no longer reads: dead and folded
/// pieces, and the old head when it is not a remaining data piece.
fn obsolete_files(
    base: Option<&Tph>,
    dead: &[bool],
    victim: &[bool],
    remaining: &[usize],
) -> Vec<Arc<PieceFile>> {
    let Some(b) = base else {
        return Vec::new();
    };
    let mut obsolete: Vec<Arc<PieceFile>> = (0..b.pieces.len())
        .filter(|&i| dead[i] || victim[i])
        .map(|i| b.pieces[i].clone())
        .collect();
    let head = b.head.number();
    let head_kept = remaining.iter().any(|&i| b.pieces[i].number() == head);
    if !head_kept && !obsolete.iter().any(|p| p.number() == head) {
        obsolete.push(b.head.clone());
    }
    obsolete
}

/// Of the entries the new piece will hold, those whose key hides a version
/// in a level below: the delta's found there, and the folded pieces' share
/// of theirs.
fn shadowed_entries(
    ctx: &MergeContext<'_>,
    base: Option<&Tph>,
    delta: &[Written],
    victim: &[bool],
    live_counts: &[u64],
) -> u64 {
    let Some(below) = ctx.below.filter(|_| !ctx.bottom && ctx.level >= 1) else {
        return 0;
    };
    let below = below();
    let mut shadowed = delta
        .iter()
        .filter(|e| below.holds_below(ctx.level, e.key(), e.h()))
        .count() as u64;
    if let Some(b) = base {
        for (i, p) in b.pieces.iter().enumerate().filter(|&(i, _)| victim[i]) {
            shadowed += live_shadowed(p.properties(), live_counts[i], b.shadowed_counts[i]);
        }
    }
    shadowed
}
