//! The head piece of a merged TPH: its metadata and global index, built
//! over the merged key set and written beside the new piece's entries.

use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use super::index::{bits_for, Exception, GlobalIndex, FUSE_SEED};
use super::merge::{MergeContext, MergeStats};
use super::meta::{
    IndexFormat, MetaPiece, TphMeta, MAX_PIECES, SECTION_EXCEPTIONS, SECTION_FUSE, SECTION_META,
};
use super::{piece_file_name, PieceFile, Tph};
use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::hash::signature;
use crate::phf::fuse::{keys_held, Fuse, BUILD_BYTES_PER_KEY, MAX_CHUNK_KEYS};
use crate::piece::{
    write_piece_in_passes, EntryShape, EntrySource, LoadPass, PieceOptions, PieceProperties,
};

/// The merged TPH's metadata: the remaining base pieces, then the new one
/// when it holds entries (`written`, `shadowed` of them hiding a version
/// below).
pub(super) fn new_meta(
    ctx: &MergeContext<'_>,
    base: Option<&Tph>,
    remaining: &[usize],
    live_counts: &[u64],
    written: usize,
    shadowed: u64,
) -> Result<TphMeta> {
    let pieces: Vec<MetaPiece> = base
        .into_iter()
        .flat_map(|b| {
            remaining.iter().map(|&i| MetaPiece {
                number: b.pieces[i].number(),
                live: live_counts[i],
                shadowed: b.shadowed_counts[i],
            })
        })
        .chain((written > 0).then_some(MetaPiece {
            number: ctx.new_number,
            live: written as u64,
            shadowed: shadowed.min(written as u64),
        }))
        .collect();
    if pieces.len() > MAX_PIECES {
        return Err(Error::Internal(format!(
            "a TPH of {} pieces exceeds {MAX_PIECES}",
            pieces.len()
        )));
    }
    let piece_bits = bits_for(pieces.len() as u64 - 1);
    Ok(TphMeta {
        format: IndexFormat::Fuse,
        level: ctx.level,
        partition: ctx.partition,
        sig_bits: signature_bits_within(ctx.sig_bits, ctx.field_bits, piece_bits),
        piece_bits,
        pieces,
        wide_h2: false,
    })
}

/// The fewest signature bits a field bound leaves a TPH.
const MIN_BOUNDED_SIGNATURE_BITS: u32 = 6;

/// The signature bits of a TPH whose piece numbers take `piece_bits`:
/// `sig_bits`, less what a field of more than `field_bits` would take, but
/// at least `MIN_BOUNDED_SIGNATURE_BITS` (or `sig_bits`, if fewer). The
/// bottom's signatures only reject absent keys, and piece numbers past
/// the last piece reject some too: 9 pieces in 4 bits with 7-bit
/// signatures let through 9/2048 of them, 8 in 3 bits with 8-bit ones
/// 8/2048.
pub(crate) fn signature_bits_within(
    sig_bits: u32,
    field_bits: Option<u32>,
    piece_bits: u32,
) -> u32 {
    match field_bits {
        Some(field) => sig_bits
            .min(field.saturating_sub(piece_bits))
            .max(MIN_BOUNDED_SIGNATURE_BITS.min(sig_bits)),
        None => sig_bits,
    }
}

/// Writes the new head piece (`entries`, with their `hashes`, and the
/// index sections) in `passes` runs of slots, each from the entries `load`
/// finds for it, and opens it; returns it and the index it carries.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_head<E: EntryShape, S: EntrySource>(
    ctx: &MergeContext<'_>,
    meta: &TphMeta,
    entries: &[E],
    hashes: &[u64],
    passes: usize,
    sections: IndexSections,
    load: LoadPass<'_, S>,
) -> Result<(Arc<PieceFile>, GlobalIndex)> {
    write_head_with(
        ctx,
        ctx.new_number,
        meta,
        sections,
        |fs, path, options, extra| {
            write_piece_in_passes(fs, path, entries, hashes, options, extra, passes, load)
        },
    )
}

/// Writes head piece `number` as `write` writes a piece (to the path, with
/// the options and extra sections it is handed), with the index
/// `sections`, and opens it; returns it and the index it carries.
pub(super) fn write_head_with(
    ctx: &MergeContext<'_>,
    number: u64,
    meta: &TphMeta,
    sections: IndexSections,
    write: impl FnOnce(
        &dyn FileSystem,
        &Path,
        &PieceOptions,
        &[(u32, &[u8])],
    ) -> Result<PieceProperties>,
) -> Result<(Arc<PieceFile>, GlobalIndex)> {
    // Held until the index they encode is decoded and counted with the
    // TPH's (a merge's whole piece is written meanwhile).
    let _sections = ctx.hold(sections.iter().map(|(_, b)| b.len() as u64).sum());
    let extra: Vec<(u32, &[u8])> = sections.iter().map(|(id, b)| (*id, &b[..])).collect();
    let head = write_piece_file(ctx, number, |fs, path, options| {
        write(fs, path, options, &extra)
    })?;
    let [_, (_, fuse), (_, exceptions)] = sections;
    let index = GlobalIndex::decode_fuse(
        fuse,
        meta.sig_bits,
        meta.piece_bits,
        &exceptions,
        meta.pieces.len(),
        meta.wide_h2,
    )?;
    Ok((head, index))
}

/// Writes piece `number` of the TPH being built as `write` writes it (to
/// the path, with the options), and opens it; removes what was written if
/// it fails.
pub(super) fn write_piece_file(
    ctx: &MergeContext<'_>,
    number: u64,
    write: impl FnOnce(&dyn FileSystem, &Path, &PieceOptions) -> Result<PieceProperties>,
) -> Result<Arc<PieceFile>> {
    let path = ctx.dir.join(piece_file_name(number));
    // The local perfect hash's segments divide the partition, as the level
    // below divides it.
    let mut piece_options = ctx.piece_options.clone();
    piece_options.phf.hash_range = Some((*ctx.hashes.start(), *ctx.hashes.end()));
    if let Err(e) = write(ctx.fs.as_ref(), &path, &piece_options) {
        let _ = ctx.fs.remove(&path);
        return Err(e);
    }
    PieceFile::open(ctx.fs, ctx.dir, number, ctx.reads)
}

/// The live keys of a TPH being built, streamed an interval of hashes at a
/// time: what its global index is built from.
pub(super) trait LiveKeySource {
    /// How many there are.
    fn count(&self) -> u64;

    /// Calls `f(h, h2, field)` for every live key whose hash lies in
    /// `hashes`, `field` being its piece in the new TPH plus one. The calls
    /// between two [`LiveKeySource::check_counts`] take ascending intervals
    /// that together cover every hash (the first may start past 0; keys
    /// below it count as missing).
    fn for_each_in(
        &mut self,
        hashes: RangeInclusive<u64>,
        stats: &mut MergeStats,
        f: &mut dyn FnMut(u64, u64, u32),
    ) -> Result<()>;

    /// [`LiveKeySource::for_each_in`] without the second hash, for sources
    /// that would compute it from the key.
    fn for_each_field_in(
        &mut self,
        hashes: RangeInclusive<u64>,
        stats: &mut MergeStats,
        f: &mut dyn FnMut(u64, u32),
    ) -> Result<()> {
        self.for_each_in(hashes, stats, &mut |h, _, field| f(h, field))
    }

    /// Checks that the calls since the last check found every live key
    /// once, and starts over.
    fn check_counts(&mut self) -> Result<()>;
}

/// A new TPH's global index as its head piece's extra sections: the
/// meta, the fuse and the exceptions.
pub(super) type IndexSections = [(u32, Bytes); 3];

/// The global index of the merged key set, as head-piece sections in the
/// order meta, fuse, exceptions. The keys are streamed from `live` once
/// per batch of the fuse build (the first pass marks which base entries
/// are live), and once more only if some share a hash.
pub(super) fn build_index_sections(
    ctx: &MergeContext<'_>,
    meta: &TphMeta,
    live: &mut dyn LiveKeySource,
    stats: &mut MergeStats,
) -> Result<IndexSections> {
    let (sig_bits, piece_bits) = (meta.sig_bits, meta.piece_bits);
    // A chunk a batch at most: several save only passes over the live
    // keys, which go on where the pass before stopped, and held their keys
    // and peeled them side by side (two chunks, 14 of the 16 MB a level-1
    // build held at the heap's highest point in a 16M x 128-byte fill).
    let batch_keys =
        (ctx.index_memory_bytes / BUILD_BYTES_PER_KEY).clamp(1, MAX_CHUNK_KEYS as usize);
    // A batch's chunks, and the cells of the chunks built, about 1.1 a
    // key of the field's bits, in room for about 1.2 (the chunks' lists as
    // allocated).
    let _building = ctx.hold(
        keys_held(live.count(), batch_keys) * BUILD_BYTES_PER_KEY as u64
            + live.count() * u64::from(sig_bits + piece_bits) * 12 / 80,
    );
    let built = Fuse::build_streamed(
        live.count(),
        sig_bits + piece_bits,
        FUSE_SEED,
        ctx.hashes.clone(),
        &mut |hashes, f: &mut dyn FnMut(u64, u32)| {
            live.for_each_field_in(hashes, stats, &mut |h, field| f(h, field - 1))
        },
        &|h, piece| signature(h, sig_bits) << piece_bits | u64::from(piece),
        batch_keys,
    )?;
    live.check_counts()?;
    // A hash shared by several live keys: every one of them is an exception,
    // so that the exception list alone routes that hash.
    let shared = &built.duplicate_hashes;
    let mut exceptions = Vec::new();
    if !shared.is_empty() {
        live.for_each_in(0..=u64::MAX, stats, &mut |h, h2, field| {
            if shared.binary_search(&h).is_ok() {
                exceptions.push(Exception { h, h2, field });
            }
        })?;
        live.check_counts()?;
        exceptions.sort_unstable();
    }
    Ok([
        (SECTION_META, Bytes::from(meta.encode())),
        (SECTION_FUSE, built.section()),
        (
            SECTION_EXCEPTIONS,
            Bytes::from(GlobalIndex::encode_exceptions(&exceptions)),
        ),
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_field_bound_takes_signature_bits_down_to_a_floor() {
        use super::signature_bits_within as within;
        // 8-bit signatures within 11-bit fields: 3 piece bits keep them, 4
        // take one, 5 two; never below 6, nor above what was asked.
        assert_eq!(within(8, Some(11), 3), 8);
        assert_eq!(within(8, Some(11), 4), 7);
        assert_eq!(within(8, Some(11), 5), 6);
        assert_eq!(within(8, Some(11), 10), 6);
        assert_eq!(within(4, Some(11), 10), 4);
        assert_eq!(within(8, Some(20), 4), 8);
        assert_eq!(within(8, None, 10), 8);
    }
}
