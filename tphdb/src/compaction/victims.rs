//! Which pieces a merge or a GC fold rewrites into the piece it writes.

use crate::tph::{Garbage, MAX_PIECES};

/// What the GC choice needs to know of a piece of a TPH being merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PieceLife {
    /// Its entries that are still live (0: the piece is dead and goes).
    pub(crate) live: u64,
    /// All its entries.
    pub(crate) entries: u64,
    /// Data bytes of the live entries: what folding it rewrites.
    pub(crate) live_bytes: u64,
    pub(crate) garbage: Garbage,
    /// A running push-down carries the piece down and drops it from the
    /// TPH when it ends, so folding it would write its entries twice.
    pub(crate) pinned: bool,
}

/// Which pieces (oldest first) a merge folds into the piece it writes: any
/// whose live fraction is below `min_live_ratio` (space reclamation), and
/// then enough of the cheapest to rewrite (fewest live bytes, then oldest)
/// that the TPH keeps at most `max_pieces`, the new piece included; with
/// `tiers` (the delta's bytes), also every next cheapest piece no larger
/// than the piece the folded ones make with the delta so far. Folding
/// anything makes a new piece even without a delta (`adds_piece`). Dead
/// pieces are never victims: they simply go. Pinned pieces are folded only
/// if the TPH would otherwise pass [`MAX_PIECES`]: until their push-down
/// ends, the TPH may keep more than `max_pieces`.
///
/// The pieces of like size folded together keep the TPH's pieces in size
/// tiers, as a binary counter keeps its bits: folding only the one
/// cheapest piece at the limit made that piece grow by a delta at every
/// merge, so that a TPH taking merge after merge (the bottom) rewrote
/// ever more per delta. The merge passes `tiers` only where many merges
/// are to come (see `keeps_size_tiers` in `tph::merge`). A TPH above the
/// bottom passes none: its push-down carries every entry down anyway, and
/// folding its pieces of like size together made a small-memory server's
/// level-1 TPHs fold 40 pieces at a time, in passes that read them 35
/// times over, just before the push-down rewrote them.
pub(crate) fn pick_victims(
    pieces: &[PieceLife],
    max_pieces: usize,
    min_live_ratio: f64,
    adds_piece: bool,
    tiers: Option<u64>,
) -> Vec<bool> {
    let mut victim = vec![false; pieces.len()];
    let live: Vec<usize> = (0..pieces.len()).filter(|&i| pieces[i].live > 0).collect();
    for &i in &live {
        let p = pieces[i];
        if !p.pinned && (p.live as f64) < min_live_ratio * p.entries.max(1) as f64 {
            victim[i] = true;
        }
    }
    let kept = live.iter().filter(|&&i| !victim[i]).count();
    let max = max_pieces.max(1);
    let new_piece = adds_piece || victim.iter().any(|&v| v) || kept + 1 > max;
    let mut cheapest = live.clone();
    cheapest.sort_by_key(|&i| (pieces[i].live_bytes, i));
    let (unpinned, pinned): (Vec<usize>, Vec<usize>) =
        cheapest.into_iter().partition(|&i| !pieces[i].pinned);
    let excess = (kept + new_piece as usize).saturating_sub(max);
    fold(&mut victim, &unpinned, excess);
    if let Some(delta_bytes) = tiers.filter(|_| excess > 0) {
        let mut building = delta_bytes
            + (0..pieces.len())
                .filter(|&i| victim[i])
                .map(|i| pieces[i].live_bytes)
                .sum::<u64>();
        for &i in &unpinned {
            if victim[i] {
                continue;
            }
            if pieces[i].live_bytes > building {
                break;
            }
            victim[i] = true;
            building += pieces[i].live_bytes;
        }
    }
    let kept = live.iter().filter(|&&i| !victim[i]).count();
    let new_piece = adds_piece || victim.iter().any(|&v| v);
    fold(
        &mut victim,
        &pinned,
        (kept + new_piece as usize).saturating_sub(MAX_PIECES),
    );
    victim
}

/// Marks the first `excess` of `candidates` not yet victims as victims.
fn fold(victim: &mut [bool], candidates: &[usize], mut excess: usize) {
    for &i in candidates {
        if excess == 0 {
            break;
        }
        if !victim[i] {
            victim[i] = true;
            excess -= 1;
        }
    }
}

/// Which pieces (oldest first) a GC fold folds: those with replaced
/// entries, the largest dead share first, then at the bottom those with
/// live tombstones, the most first; as many as fit `input_bytes` of merge
/// memory (at least one). Pieces with no garbage stay.
///
/// Each fold makes progress: while any piece has replaced entries one of
/// them is folded, and the new piece has none; once none has, no tombstone
/// at the bottom hides anything (it would hide a replaced entry), so the
/// folded pieces' tombstones all go. A TPH therefore reaches no garbage in
/// a bounded number of folds, however the estimates of bytes err.
pub(crate) fn pick_gc_victims(pieces: &[PieceLife], bottom: bool, input_bytes: u64) -> Vec<bool> {
    let dead_share =
        |p: &PieceLife| p.garbage.dead_bytes as f64 / p.garbage.data_bytes.max(1) as f64;
    let mut order: Vec<usize> = (0..pieces.len())
        .filter(|&i| {
            let p = &pieces[i];
            p.live > 0 && (p.garbage.has_dead(p.entries) || bottom && p.garbage.live_tombstones > 0)
        })
        .collect();
    order.sort_by(|&a, &b| {
        let (pa, pb) = (&pieces[a], &pieces[b]);
        let key = |p: &PieceLife| {
            (
                p.garbage.has_dead(p.entries),
                dead_share(p),
                p.garbage.live_tombstones,
            )
        };
        let (ka, kb) = (key(pa), key(pb));
        kb.0.cmp(&ka.0)
            .then(kb.1.total_cmp(&ka.1))
            .then(kb.2.cmp(&ka.2))
            .then(a.cmp(&b))
    });
    let mut victim = vec![false; pieces.len()];
    let mut used = 0u64;
    for i in order {
        let p = &pieces[i];
        let cost = p.live_bytes + p.live * crate::tph::MERGE_BYTES_PER_ENTRY;
        if used > 0 && used.saturating_add(cost) > input_bytes {
            break;
        }
        used = used.saturating_add(cost).max(1);
        victim[i] = true;
    }
    victim
}

#[cfg(test)]
mod tests {
    use super::*;

    fn life(live: u64, entries: u64, live_bytes: u64) -> PieceLife {
        PieceLife {
            live,
            entries,
            live_bytes,
            garbage: Garbage::default(),
            pinned: false,
        }
    }

    /// A piece of `entries` entries of 10 bytes, `live` of them live,
    /// `tombstones` of those tombstones.
    fn piece(live: u64, entries: u64, tombstones: u64) -> PieceLife {
        PieceLife {
            live,
            entries,
            live_bytes: live * 10,
            garbage: Garbage {
                data_bytes: entries * 10,
                dead_bytes: (entries - live) * 10,
                live_entries: live,
                live_tombstones: tombstones,
                live_tombstone_bytes: tombstones * 10,
                shadowed_bytes: 0,
            },
            pinned: false,
        }
    }

    #[test]
    fn gc_folds_replaced_entries_first_within_the_memory_bound() {
        let per_entry = crate::tph::MERGE_BYTES_PER_ENTRY + 10;
        let pieces = [
            piece(10, 10, 0), // no garbage: stays
            piece(5, 10, 5),  // half dead, tombstones
            piece(2, 10, 0),  // most dead
            piece(8, 8, 8),   // only tombstones
            piece(0, 10, 0),  // dead: goes without a fold
        ];
        // Room for everything: every piece with garbage.
        let all = pick_gc_victims(&pieces, true, u64::MAX);
        assert_eq!(all, [false, true, true, true, false]);
        // Above the bottom tombstones are not garbage.
        let above = pick_gc_victims(&pieces, false, u64::MAX);
        assert_eq!(above, [false, true, true, false, false]);
        // Room for one: the largest dead share.
        let one = pick_gc_victims(&pieces, true, 2 * per_entry);
        assert_eq!(one, [false, false, true, false, false]);
        // At least one, however large.
        assert_eq!(pick_gc_victims(&pieces, true, 1), one);
        // Then the next dead share.
        assert_eq!(
            pick_gc_victims(&pieces, true, 7 * per_entry),
            [false, true, true, false, false]
        );
        // With nothing replaced, the tombstones, the most first.
        let tombstones = [piece(4, 4, 1), piece(6, 6, 3), piece(5, 5, 0)];
        assert_eq!(pick_gc_victims(&tombstones, true, 1), [false, true, false]);
        assert_eq!(
            pick_gc_victims(&tombstones, false, u64::MAX),
            [false, false, false]
        );
    }

    #[test]
    fn folds_keep_the_piece_count_and_take_the_cheapest() {
        // Four pieces, room for four with the new one: fold the cheapest.
        let pieces = [
            life(10, 10, 500),
            life(10, 10, 100),
            life(10, 10, 300),
            life(10, 10, 100),
        ];
        assert_eq!(
            pick_victims(&pieces, 4, 0.3, true, Some(0)),
            [false, true, false, true],
            "the cheapest, and the other of its size"
        );
        // Without tiers (above the bottom), only the cheapest;
        // ties go to the oldest.
        assert_eq!(
            pick_victims(&pieces, 4, 0.3, true, None),
            [false, true, false, false]
        );
        // Room for all: nothing folds.
        assert_eq!(pick_victims(&pieces, 5, 0.3, true, Some(0)), [false; 4]);
        // Three to make room: they build a piece as large as the last.
        assert_eq!(pick_victims(&pieces, 2, 0.3, true, Some(0)), [true; 4]);
        // A piece past what the folded ones and the delta make stays.
        let tiers = [life(10, 10, 800), life(10, 10, 100), life(10, 10, 300)];
        assert_eq!(
            pick_victims(&tiers, 3, 0.3, true, Some(50)),
            [false, true, false]
        );
        assert_eq!(
            pick_victims(&tiers, 3, 0.3, true, Some(200)),
            [false, true, true]
        );
    }

    /// Regression: at `max_pieces`, each merge folded only the cheapest
    /// piece with its delta, so that piece grew by a delta every merge and
    /// a TPH taking merge after merge rewrote ever more per delta (at 16
    /// pieces, 7.8 bytes per delta byte over 234 merges of equal deltas).
    /// Pieces of like size now fold together.
    #[test]
    fn a_tph_taking_many_merges_folds_in_size_tiers() {
        let (merges, delta) = (234u64, 1000u64);
        let mut sizes: Vec<u64> = Vec::new();
        let mut written = 0u64;
        for _ in 0..merges {
            let pieces: Vec<PieceLife> = sizes.iter().map(|&b| life(b, b, b)).collect();
            let victim = pick_victims(&pieces, 16, 0.3, true, Some(delta));
            let folded: u64 = (0..sizes.len())
                .filter(|&i| victim[i])
                .map(|i| sizes[i])
                .sum();
            let mut kept: Vec<u64> = (0..sizes.len())
                .filter(|&i| !victim[i])
                .map(|i| sizes[i])
                .collect();
            kept.push(delta + folded);
            written += delta + folded;
            sizes = kept;
            assert!(sizes.len() <= 16);
        }
        let per_delta = written as f64 / (merges * delta) as f64;
        assert!(per_delta < 3.0, "{per_delta} bytes written per delta byte");
    }

    #[test]
    fn mostly_dead_pieces_fold_and_dead_ones_just_go() {
        let pieces = [life(2, 10, 20), life(0, 10, 0), life(9, 10, 90)];
        // The first is 20% live: folded even with room, making a new piece.
        assert_eq!(
            pick_victims(&pieces, 16, 0.3, false, None),
            [true, false, false]
        );
        assert_eq!(pick_victims(&pieces, 16, 0.1, false, None), [false; 3]);
        // At max_pieces without a delta, one still folds to make room.
        assert_eq!(pick_victims(&pieces[2..], 1, 0.1, false, None), [true]);
    }
}
