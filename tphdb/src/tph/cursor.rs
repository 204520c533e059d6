//! Key-order scans of a TPH: the pieces' own key-order indexes, merged, each
//! filtered to the entries the global index says are live.

use std::ops::{Deref, RangeInclusive};
use std::sync::Arc;

use super::{PieceFile, Tph};
use crate::cursor::{Cursor, MergingCursor, ValueRef};
use crate::error::Result;
use crate::piece::{PieceReader, SortedCursor};

/// A shared handle to a piece, as the reader a cursor holds.
struct PieceRef(Arc<PieceFile>);

impl Deref for PieceRef {
    type Target = PieceReader;
    fn deref(&self) -> &PieceReader {
        &self.0
    }
}

/// One piece's entries in key order, skipping those a newer piece replaced
/// and, if asked, those whose key hash lies outside a range.
struct LiveCursor {
    tph: Arc<Tph>,
    piece: usize,
    /// Every entry in the piece is live, no check needed.
    all_live: bool,
    hashes: Option<RangeInclusive<u64>>,
    inner: SortedCursor<PieceRef>,
}

impl LiveCursor {
    fn live(&self) -> bool {
        let Some(key) = self.inner.key() else {
            return true;
        };
        if self.all_live && self.hashes.is_none() {
            return true;
        }
        let h = self.inner.key_hash().expect("positioned on a key");
        self.hashes.as_ref().is_none_or(|r| r.contains(&h))
            && (self.all_live || self.tph.is_live_hashed(key, h, self.piece))
    }

    fn skip_forward(&mut self) -> Result<()> {
        while !self.live() {
            self.inner.move_next()?;
        }
        Ok(())
    }

    fn skip_backward(&mut self) -> Result<()> {
        while !self.live() {
            self.inner.move_prev()?;
        }
        Ok(())
    }
}

impl Cursor for LiveCursor {
    fn valid(&self) -> bool {
        self.inner.valid()
    }

    fn key(&self) -> &[u8] {
        self.inner.key().expect("valid cursor")
    }

    fn value_ref(&self) -> ValueRef {
        if self.is_tombstone() {
            return ValueRef::Tombstone;
        }
        ValueRef::InPiece(
            self.inner.reader().0.clone(),
            self.inner.slot().expect("valid cursor"),
        )
    }

    fn is_tombstone(&self) -> bool {
        self.inner.is_tombstone().expect("valid cursor")
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.inner.seek_to_first()?;
        self.skip_forward()
    }

    fn seek_to_last(&mut self) -> Result<()> {
        self.inner.seek_to_last()?;
        self.skip_backward()
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.inner.seek(target)?;
        self.skip_forward()
    }

    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.inner.seek_for_prev(target)?;
        self.skip_backward()
    }

    fn next(&mut self) -> Result<()> {
        self.inner.move_next()?;
        self.skip_forward()
    }

    fn prev(&mut self) -> Result<()> {
        self.inner.move_prev()?;
        self.skip_backward()
    }
}

/// A cursor over a TPH's live entries (tombstones included) in key order.
pub(crate) struct TphCursor(MergingCursor<'static>);

impl TphCursor {
    /// `parallel`: seek the pieces in parallel (see `MergingCursor`).
    pub(crate) fn new(tph: &Arc<Tph>, parallel: bool) -> Result<TphCursor> {
        let children = TphCursor::pieces(tph, None, |_| tph.pieces.len() == 1)?;
        Ok(TphCursor(if parallel {
            MergingCursor::new_parallel(children)
        } else {
            MergingCursor::new(children)
        }))
    }

    /// A cursor per piece over its live entries whose key hash lies in
    /// `hashes`, in key order: a push-down's share of one child. A key is
    /// live in one piece at most, so no two cursors list the same key.
    pub(crate) fn pieces_in_hashes(
        tph: &Arc<Tph>,
        hashes: RangeInclusive<u64>,
    ) -> Result<Vec<Box<dyn Cursor>>> {
        TphCursor::pieces(tph, Some(hashes), |i| tph.piece_all_live(i))
    }

    fn pieces(
        tph: &Arc<Tph>,
        hashes: Option<RangeInclusive<u64>>,
        all_live: impl Fn(usize) -> bool,
    ) -> Result<Vec<Box<dyn Cursor>>> {
        let mut children: Vec<Box<dyn Cursor>> = Vec::with_capacity(tph.pieces.len());
        for (piece, p) in tph.pieces.iter().enumerate() {
            children.push(Box::new(LiveCursor {
                tph: tph.clone(),
                piece,
                all_live: all_live(piece),
                hashes: hashes.clone(),
                inner: SortedCursor::new(PieceRef(p.clone()))?,
            }));
        }
        Ok(children)
    }
}

impl Cursor for TphCursor {
    fn valid(&self) -> bool {
        self.0.valid()
    }
    fn key(&self) -> &[u8] {
        self.0.key()
    }
    fn value_ref(&self) -> ValueRef {
        self.0.value_ref()
    }
    fn is_tombstone(&self) -> bool {
        self.0.is_tombstone()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.0.seek_to_first()
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.0.seek_to_last()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.0.seek(target)
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.0.seek_for_prev(target)
    }
    fn next(&mut self) -> Result<()> {
        self.0.next()
    }
    fn prev(&mut self) -> Result<()> {
        self.0.prev()
    }
}
