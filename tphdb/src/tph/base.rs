//! The base TPH of a merge, read without listing its keys: where the base
//! index routes a key, which base keys a delta replaces, which hashes the
//! remaining pieces hold, and the merged TPH's live keys, all streamed from
//! the pieces' key-hash sections.

use std::ops::RangeInclusive;
use std::sync::Arc;

use super::fold::Written;
use super::head::LiveKeySource;
use super::{PieceFile, Tph};
use crate::error::{Error, Result};
use crate::piece::KeyHashCursor;
use crate::util::lagged::Lagged;

use super::merge::MergeStats;

/// How many keys ahead of its routing a key's index cells are asked for:
/// enough for the misses of a few keys to overlap.
const ROUTE_LAG: usize = 8;

/// One bit per entry of a piece or exception of the base index.
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

/// The base keys the delta replaces: `(h, h2)` per base piece, sorted (the
/// order of the pieces' key-hash sections), and the replaced exceptions.
pub(super) struct Superseded {
    by_piece: Vec<Vec<(u64, u64)>>,
    exceptions: Bits,
}

impl Superseded {
    pub(super) fn new(base: Option<&Tph>) -> Superseded {
        let (pieces, exceptions) =
            base.map_or((0, 0), |b| (b.pieces.len(), b.index.exceptions.len()));
        Superseded {
            by_piece: vec![Vec::new(); pieces],
            exceptions: Bits::new(exceptions),
        }
    }

    fn mark(&mut self, key: BaseKey) {
        match key {
            BaseKey::Exception(x) => self.exceptions.set(x),
            BaseKey::Entry { piece, h, h2 } => self.by_piece[piece].push((h, h2)),
        }
    }

    fn sort(&mut self) {
        for keys in &mut self.by_piece {
            keys.sort_unstable();
        }
    }

    /// Whether the base key `(h, h2)` that the base index routes to
    /// `piece` (through exception `exception`, if its hash is shared) is
    /// replaced.
    pub(super) fn contains(&self, piece: usize, exception: Option<usize>, h: u64, h2: u64) -> bool {
        match exception {
            Some(x) => self.exceptions.get(x),
            None => self.by_piece[piece].binary_search(&(h, h2)).is_ok(),
        }
    }
}

/// A base key the delta replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BaseKey {
    /// Exception `x` of the base index.
    Exception(usize),
    /// An entry of piece `piece` whose hash no other live key has.
    Entry { piece: usize, h: u64, h2: u64 },
}

/// Where the base index routes `(h, h2)`: its exception (when its hash is
/// shared) and piece. For a hash shared by several keys the exception list
/// decides exactly; for any other the route is only a candidate for a key
/// that may not be in the TPH (a signature match by chance), but exact for
/// a key some piece holds: every key a piece holds is live, so no other
/// key has its hash.
pub(super) fn route(tph: &Tph, h: u64, h2: u64) -> Option<(Option<usize>, usize)> {
    route_with(tph, h, || h2)
}

/// [`route`], asking for the second hash only for a hash several live
/// keys share.
fn route_with(tph: &Tph, h: u64, h2: impl FnOnce() -> u64) -> Option<(Option<usize>, usize)> {
    let idx = &tph.index;
    let piece = idx.candidate(h)?;
    if let Some(from) = idx.exceptions_for(h) {
        let h2 = h2();
        return idx.exceptions[from..]
            .iter()
            .enumerate()
            .take_while(|(_, e)| e.h == h)
            .find(|(_, e)| e.h2 == h2)
            .map(|(i, e)| (Some(from + i), e.field as usize - 1));
    }
    Some((None, piece))
}

/// The base keys among `delta`, and the live counts of the base pieces
/// without them. A routed candidate is confirmed against its piece's key
/// hashes, streamed once per piece and merged with the candidates in hash
/// order. A delta key's second hash is computed only when a piece holds
/// its first (or the base index lists it as shared): reading the key for
/// it is a cache miss, and most of a fill's candidates are new keys.
pub(super) fn supersede(
    base: Option<&Tph>,
    delta: &[Written],
    stats: &mut MergeStats,
) -> Result<(Superseded, Vec<u64>)> {
    let mut superseded = Superseded::new(base);
    let Some(base) = base else {
        return Ok((superseded, Vec::new()));
    };
    let mut found = Vec::new();
    // (piece, h, the entry's index in `delta`)
    let mut candidates: Vec<(usize, u64, usize)> = Vec::new();
    for (i, e) in delta.iter().enumerate() {
        if let Some(ahead) = delta.get(i + ROUTE_LAG) {
            base.index.prefetch(ahead.h());
        }
        let h = e.h();
        match route_with(base, h, || e.h2()) {
            Some((Some(x), piece)) => found.push((BaseKey::Exception(x), piece)),
            Some((None, piece)) => candidates.push((piece, h, i)),
            None => {}
        }
    }
    candidates.sort_unstable();
    for group in candidates.chunk_by(|a, b| a.0 == b.0) {
        let piece = group[0].0;
        let p = &base.pieces[piece];
        stats.hash_bytes_read += p.key_hash_bytes();
        let mut next = 0;
        p.for_each_key_hash(|h, h2| {
            while next < group.len() && group[next].1 < h {
                next += 1;
            }
            // Delta keys sharing a 64-bit hash are told apart by the second.
            for &(_, _, i) in group[next..].iter().take_while(|c| c.1 == h) {
                if delta[i].h2() == h2 {
                    found.push((BaseKey::Entry { piece, h, h2 }, piece));
                }
            }
        })?;
    }
    let mut live_counts = base.live_counts.clone();
    for (key, piece) in found {
        superseded.mark(key);
        live_counts[piece] = live_counts[piece].checked_sub(1).ok_or_else(|| {
            Error::corruption(
                format!("live keys of {}", base.pieces[piece].name()),
                "at least one per key the delta replaces",
                0,
            )
            .at(base.head.name())
        })?;
    }
    superseded.sort();
    Ok((superseded, live_counts))
}

/// Which of `hashes` (sorted, distinct) some piece of `pieces` holds.
pub(super) fn held_hashes(
    pieces: &[&Arc<PieceFile>],
    hashes: &[u64],
    stats: &mut MergeStats,
) -> Result<Vec<bool>> {
    let mut held = vec![false; hashes.len()];
    for piece in pieces {
        stats.hash_bytes_read += piece.key_hash_bytes();
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
/// the new piece writes. The index is built in passes over intervals of
/// hashes; each pass streams the pieces' key hashes and routes only the
/// keys in its interval through the base index (a few random accesses a
/// key), so that passes over disjoint intervals route each key once.
/// Routing every key in every pass made the passes a tenth of a
/// write-heavy server's CPU. The passes come in ascending intervals, and
/// each goes on reading a piece's key hashes where the one before stopped:
/// read whole for each of a level-1 merge's nine passes (at a 64 MiB
/// budget), they cost a write-heavy server 7% more CPU.
pub(super) struct LiveKeys<'a> {
    pub(super) base: Option<&'a Tph>,
    pub(super) superseded: &'a Superseded,
    /// Base pieces that stay, by base index, and their live counts.
    pub(super) remaining: &'a [usize],
    pub(super) live_counts: &'a [u64],
    pub(super) written: &'a [Written],
    /// Live keys found in each remaining piece by the passes so far.
    pub(super) found: Vec<u64>,
    /// How far the passes so far read each remaining piece's key hashes.
    pub(super) cursors: Vec<KeyHashCursor>,
}

impl LiveKeySource for LiveKeys<'_> {
    fn count(&self) -> u64 {
        self.remaining
            .iter()
            .map(|&i| self.live_counts[i])
            .sum::<u64>()
            + self.written.len() as u64
    }

    /// Counts the keys per piece for [`LiveKeys::check_counts`].
    fn for_each_in(
        &mut self,
        hashes: RangeInclusive<u64>,
        stats: &mut MergeStats,
        f: &mut dyn FnMut(u64, u64, u32),
    ) -> Result<()> {
        self.visit(hashes, stats, true, f)
    }

    /// The fuse build's passes: the new piece's keys are not read for
    /// their second hashes (a cache miss each).
    fn for_each_field_in(
        &mut self,
        hashes: RangeInclusive<u64>,
        stats: &mut MergeStats,
        f: &mut dyn FnMut(u64, u32),
    ) -> Result<()> {
        self.visit(hashes, stats, false, &mut |h, _, field| f(h, field))
    }

    /// Checks that the passes since the last check found each remaining
    /// piece's live count (they covered every hash once), and starts over.
    fn check_counts(&mut self) -> Result<()> {
        let found = std::mem::take(&mut self.found);
        let cursors = std::mem::take(&mut self.cursors);
        let Some(base) = self.base else {
            return Ok(());
        };
        for (j, &i) in self.remaining.iter().enumerate() {
            if !cursors.get(j).is_some_and(KeyHashCursor::is_done) {
                return Err(Error::Internal(format!(
                    "the index passes did not read all key hashes of {}",
                    base.pieces[i].name()
                )));
            }
            let live = found.get(j).copied().unwrap_or(0);
            if live != self.live_counts[i] {
                return Err(Error::corruption(
                    format!("live keys of {}", base.pieces[i].name()),
                    self.live_counts[i],
                    live,
                )
                .at(base.head.name()));
            }
        }
        Ok(())
    }
}

impl LiveKeys<'_> {
    /// [`LiveKeySource::for_each_in`], the new piece's keys with their
    /// second hashes only if `with_h2` (else 0).
    fn visit(
        &mut self,
        hashes: RangeInclusive<u64>,
        stats: &mut MergeStats,
        with_h2: bool,
        f: &mut dyn FnMut(u64, u64, u32),
    ) -> Result<()> {
        self.found.resize(self.remaining.len(), 0);
        self.cursors
            .resize(self.remaining.len(), KeyHashCursor::default());
        if let Some(base) = self.base {
            for (j, &i) in self.remaining.iter().enumerate() {
                let piece = &base.pieces[i];
                let field = j as u32 + 1;
                let all_live = base.piece_all_live(i);
                let mut live = 0u64;
                // The piece's replaced keys, in the order of its hashes.
                let replaced = &self.superseded.by_piece[i];
                let mut next = replaced.partition_point(|&(h, _)| h < *hashes.start());
                let mut take = |h: u64, h2: u64| {
                    let routed = if all_live && base.index.exceptions_for(h).is_none() {
                        Some((None, i))
                    } else {
                        route(base, h, h2)
                    };
                    if let Some((exception, p)) = routed {
                        let is_replaced = match exception {
                            Some(x) => self.superseded.exceptions.get(x),
                            None => {
                                while next < replaced.len() && replaced[next] < (h, h2) {
                                    next += 1;
                                }
                                replaced.get(next) == Some(&(h, h2))
                            }
                        };
                        if p == i && !is_replaced {
                            live += 1;
                            f(h, h2, field);
                        }
                    }
                };
                // Routed a few keys behind the stream, each key's index
                // cells asked for as it comes: their misses overlap.
                let mut lagged = Lagged::<(u64, u64), ROUTE_LAG>::new();
                let cursor = &mut self.cursors[j];
                stats.hash_bytes_read +=
                    piece.key_hashes_through(cursor, *hashes.end(), |h, h2| {
                        if h < *hashes.start() {
                            return;
                        }
                        if all_live {
                            return take(h, h2);
                        }
                        base.index.prefetch(h);
                        if let Some((h, h2)) = lagged.push((h, h2)) {
                            take(h, h2);
                        }
                    })?;
                for (h, h2) in lagged.rest() {
                    take(h, h2);
                }
                self.found[j] += live;
            }
        }
        let new_field = self.remaining.len() as u32 + 1;
        for e in self.written.iter().filter(|e| hashes.contains(&e.h())) {
            f(e.h(), if with_h2 { e.h2() } else { 0 }, new_field);
        }
        Ok(())
    }
}
