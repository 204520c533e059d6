//! Key-order scans of a TPH: the pieces' own key-order indexes, merged, each
//! filtered to the entries the global index says are live.

use std::ops::Deref;
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

/// One piece's entries in key order, skipping those a newer piece replaced.
struct LiveCursor {
    tph: Arc<Tph>,
    piece: usize,
    /// The TPH's only piece: every entry in it is live, no check needed.
    only: bool,
    inner: SortedCursor<PieceRef>,
}

impl LiveCursor {
    fn live(&self) -> bool {
        self.only
            || self
                .inner
                .key()
                .is_none_or(|k| self.tph.is_live(k, self.piece))
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
        let mut children: Vec<Box<dyn Cursor>> = Vec::with_capacity(tph.pieces.len());
        for (piece, p) in tph.pieces.iter().enumerate() {
            children.push(Box::new(LiveCursor {
                tph: tph.clone(),
                piece,
                only: tph.pieces.len() == 1,
                inner: SortedCursor::new(PieceRef(p.clone()))?,
            }));
        }
        Ok(TphCursor(if parallel {
            MergingCursor::new_parallel(children)
        } else {
            MergingCursor::new(children)
        }))
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
