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
/// that the TPH keeps at most `max_pieces`, the new piece included. Folding
/// anything makes a new piece even without a delta (`adds_piece`). Dead
/// pieces are never victims: they simply go. Pinned pieces are folded only
/// if the TPH would otherwise pass [`MAX_PIECES`]: until their push-down
/// ends, the TPH may keep more than `max_pieces`.
pub(crate) fn pick_victims(
    pieces: &[PieceLife],
    max_pieces: usize,
    min_live_ratio: f64,
    adds_piece: bool,
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
    fold(
        &mut victim,
        &unpinned,
        (kept + new_piece as usize).saturating_sub(max),
    );
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
            pick_victims(&pieces, 4, 0.3, true),
            [false, true, false, false]
        );
        // Ties go to the oldest; room for all: nothing folds.
        assert_eq!(pick_victims(&pieces, 5, 0.3, true), [false; 4]);
        assert_eq!(
            pick_victims(&pieces, 2, 0.3, true),
            [false, true, true, true]
        );
    }

    #[test]
    fn mostly_dead_pieces_fold_and_dead_ones_just_go() {
        let pieces = [life(2, 10, 20), life(0, 10, 0), life(9, 10, 90)];
        // The first is 20% live: folded even with room, making a new piece.
        assert_eq!(pick_victims(&pieces, 16, 0.3, false), [true, false, false]);
        assert_eq!(pick_victims(&pieces, 16, 0.1, false), [false; 3]);
        // At max_pieces without a delta, one still folds to make room.
        assert_eq!(pick_victims(&pieces[2..], 1, 0.1, false), [true]);
    }
}
