//! Iterators over the database: memtables and every TPH merged in key order.

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;

use super::read::Snapshot;
use super::SuperVersion;
use crate::cursor::{Cursor, MergingCursor};
use crate::error::{Error, Result};
use crate::memtable::MemCursor;
use crate::tph::TphCursor;

/// Options of a read.
#[derive(Default)]
pub struct ReadOptions<'a> {
    /// Read from this snapshot instead of the latest state.
    pub snapshot: Option<&'a Snapshot<'a>>,
    /// Iterators start at or after this key.
    pub lower_bound: Option<Vec<u8>>,
    /// Iterators stop before this key (exclusive).
    pub upper_bound: Option<Vec<u8>>,
}

/// Where a [`DBIterator`] starts and which way it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IteratorMode<'a> {
    /// From the smallest key, forward.
    Start,
    /// From the largest key, backward.
    End,
    /// From a key: forward from the first key `>=` it, or backward from the
    /// last key `<=` it.
    From(&'a [u8], Direction),
}

/// Iteration direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Ascending keys.
    Forward,
    /// Descending keys.
    Reverse,
}

/// The smallest key greater than every key starting with `prefix`, if any.
pub(crate) fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut p = prefix.to_vec();
    while let Some(last) = p.pop() {
        if last < 0xff {
            p.push(last + 1);
            return Some(p);
        }
    }
    None
}

/// A cursor over the database with explicit seeks and steps, skipping
/// deleted keys. Errors make it invalid; see [`DBRawIterator::status`].
pub struct DBRawIterator<'a> {
    cursor: MergingCursor<'static>,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    valid: bool,
    error: Option<Error>,
    _db: PhantomData<&'a ()>,
}

impl<'a> DBRawIterator<'a> {
    pub(crate) fn new(
        sv: &Arc<SuperVersion>,
        seq: u64,
        opts: ReadOptions<'_>,
    ) -> DBRawIterator<'a> {
        let mut error = None;
        let mut children: Vec<Box<dyn Cursor>> = Vec::new();
        children.push(Box::new(MemCursor::new(sv.mem.clone(), seq)));
        for m in &sv.imms {
            children.push(Box::new(MemCursor::new(m.clone(), seq)));
        }
        let mut tph_cursor = |t: &Arc<crate::tph::Tph>| match TphCursor::new(t) {
            Ok(c) => Some(Box::new(c) as Box<dyn Cursor>),
            Err(e) => {
                error.get_or_insert(e);
                None
            }
        };
        for t in &sv.version.l0 {
            children.extend(tph_cursor(t));
        }
        for level in &sv.version.levels {
            // Partitions of a level hold disjoint keys: their merge is the
            // level in key order.
            let parts: Vec<Box<dyn Cursor>> = level.values().filter_map(&mut tph_cursor).collect();
            if !parts.is_empty() {
                children.push(Box::new(MergingCursor::new(parts)));
            }
        }
        DBRawIterator {
            cursor: MergingCursor::new(children),
            lower: opts.lower_bound,
            upper: opts.upper_bound,
            valid: false,
            error,
            _db: PhantomData,
        }
    }

    fn settle(&mut self, r: Result<()>, forward: bool) {
        self.valid = false;
        if self.error.is_some() {
            return;
        }
        let r = r.and_then(|()| {
            while self.cursor.valid() && self.cursor.value().is_none() {
                if forward {
                    self.cursor.next()?;
                } else {
                    self.cursor.prev()?;
                }
            }
            Ok(())
        });
        if let Err(e) = r {
            self.error = Some(e);
            return;
        }
        self.valid = self.cursor.valid()
            && self.upper.as_deref().is_none_or(|u| self.cursor.key() < u)
            && self.lower.as_deref().is_none_or(|l| self.cursor.key() >= l);
    }

    /// True when positioned on a key.
    pub fn valid(&self) -> bool {
        self.valid
    }

    /// The current key.
    pub fn key(&self) -> Option<&[u8]> {
        self.valid.then(|| self.cursor.key())
    }

    /// The current value.
    pub fn value(&self) -> Option<&[u8]> {
        self.valid
            .then(|| self.cursor.value().map(|v| &v[..]))
            .flatten()
    }

    pub(crate) fn value_bytes(&self) -> Option<Bytes> {
        self.valid.then(|| self.cursor.value().cloned()).flatten()
    }

    /// The error that stopped the iterator, if any.
    pub fn status(&self) -> Result<()> {
        match &self.error {
            None => Ok(()),
            Some(e) => Err(e.clone()),
        }
    }

    /// Moves to the first key (within the bounds).
    pub fn seek_to_first(&mut self) {
        let r = match self.lower.clone() {
            Some(l) => self.cursor.seek(&l),
            None => self.cursor.seek_to_first(),
        };
        self.settle(r, true);
    }

    /// Moves to the last key (within the bounds).
    pub fn seek_to_last(&mut self) {
        let r = match self.upper.clone() {
            Some(u) => self.cursor.seek_for_prev(&u).and_then(|()| {
                if self.cursor.valid() && self.cursor.key() >= u.as_slice() {
                    self.cursor.prev()?;
                }
                Ok(())
            }),
            None => self.cursor.seek_to_last(),
        };
        self.settle(r, false);
    }

    /// Moves to the first key `>= key`.
    pub fn seek(&mut self, key: impl AsRef<[u8]>) {
        let key = key.as_ref();
        let target = match &self.lower {
            Some(l) if l.as_slice() > key => l.clone(),
            _ => key.to_vec(),
        };
        let r = self.cursor.seek(&target);
        self.settle(r, true);
    }

    /// Moves to the last key `<= key`.
    pub fn seek_for_prev(&mut self, key: impl AsRef<[u8]>) {
        let key = key.as_ref();
        if self.upper.as_deref().is_some_and(|u| key >= u) {
            return self.seek_to_last();
        }
        let r = self.cursor.seek_for_prev(key);
        self.settle(r, false);
    }

    /// Moves to the next key.
    pub fn next(&mut self) {
        if self.valid {
            let r = self.cursor.next();
            self.settle(r, true);
        }
    }

    /// Moves to the previous key.
    pub fn prev(&mut self) {
        if self.valid {
            let r = self.cursor.prev();
            self.settle(r, false);
        }
    }
}

/// An iterator of `(key, value)` pairs; see [`IteratorMode`].
pub struct DBIterator<'a> {
    raw: DBRawIterator<'a>,
    direction: Direction,
    started: bool,
    mode_key: Option<Vec<u8>>,
    mode: IteratorModeOwned,
    done: bool,
}

#[derive(Clone, Copy)]
enum IteratorModeOwned {
    Start,
    End,
    From,
}

impl<'a> DBIterator<'a> {
    pub(crate) fn new(raw: DBRawIterator<'a>, mode: IteratorMode<'_>) -> DBIterator<'a> {
        let (m, key, direction) = match mode {
            IteratorMode::Start => (IteratorModeOwned::Start, None, Direction::Forward),
            IteratorMode::End => (IteratorModeOwned::End, None, Direction::Reverse),
            IteratorMode::From(k, d) => (IteratorModeOwned::From, Some(k.to_vec()), d),
        };
        DBIterator {
            raw,
            direction,
            started: false,
            mode_key: key,
            mode: m,
            done: false,
        }
    }

    /// Repositions the iterator as if created with `mode`.
    pub fn set_mode(&mut self, mode: IteratorMode<'_>) {
        let raw = std::mem::replace(&mut self.raw, unreachable_raw());
        *self = DBIterator::new(raw, mode);
    }
}

/// A placeholder raw iterator (no sources) used while swapping.
fn unreachable_raw<'a>() -> DBRawIterator<'a> {
    DBRawIterator {
        cursor: MergingCursor::new(Vec::new()),
        lower: None,
        upper: None,
        valid: false,
        error: None,
        _db: PhantomData,
    }
}

impl Iterator for DBIterator<'_> {
    type Item = Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if !self.started {
            self.started = true;
            match (self.mode, self.direction) {
                (IteratorModeOwned::Start, _) => self.raw.seek_to_first(),
                (IteratorModeOwned::End, _) => self.raw.seek_to_last(),
                (IteratorModeOwned::From, Direction::Forward) => {
                    let k = self.mode_key.take().unwrap_or_default();
                    self.raw.seek(k)
                }
                (IteratorModeOwned::From, Direction::Reverse) => {
                    let k = self.mode_key.take().unwrap_or_default();
                    self.raw.seek_for_prev(k)
                }
            }
        } else if self.direction == Direction::Forward {
            self.raw.next();
        } else {
            self.raw.prev();
        }
        if !self.raw.valid() {
            self.done = true;
            return self.raw.error.take().map(Err);
        }
        let key = Bytes::copy_from_slice(self.raw.key().expect("valid"));
        let value = self.raw.value_bytes().expect("valid iterators hold values");
        Some(Ok((key, value)))
    }
}
