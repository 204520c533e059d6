//! Cursors over sorted key/value sources, and the merge of several.
//!
//! A cursor is positioned on one entry at a time and moves both ways, like
//! LevelDB's iterators. Cursors below the DB iterator pass tombstones
//! through, because a tombstone in a newer source hides the key in older
//! ones. They name where a value is instead of reading it: moving through
//! keys needs no value, and the DB iterator reads the values it will return
//! in batches.

use std::sync::Arc;

use bytes::Bytes;
use rayon::prelude::*;

use crate::db::Direction;
use crate::error::Result;
use crate::tph::PieceFile;

/// Where the value of a cursor's entry is.
#[derive(Clone, Debug)]
pub(crate) enum ValueRef {
    /// A value in memory.
    Inline(Bytes),
    /// A delete.
    Tombstone,
    /// The entry in this slot of a piece: one block read away.
    InPiece(Arc<PieceFile>, u64),
}

impl ValueRef {
    /// Bytes that loading the value brings into memory: the value, or the
    /// whole block that holds it.
    pub(crate) fn bytes_to_load(&self) -> usize {
        match self {
            ValueRef::Inline(v) => v.len(),
            ValueRef::Tombstone => 0,
            ValueRef::InPiece(p, slot) => p.block_bytes(p.block_of(*slot).0),
        }
    }
}

#[cfg(test)]
impl ValueRef {
    /// The value, reading its block if it is in a piece; the entry read
    /// must have `key`.
    pub(crate) fn load(self, key: &[u8]) -> Result<Option<Bytes>> {
        match self {
            ValueRef::Inline(v) => Ok(Some(v)),
            ValueRef::Tombstone => Ok(None),
            ValueRef::InPiece(p, slot) => match p.entry_in_slot(slot)? {
                Some(e) if e.key == key => Ok(e.value),
                _ => Err(crate::error::Error::corruption(
                    format!("slot {slot}"),
                    "the key the key index names",
                    "another key",
                )
                .at(p.name())),
            },
        }
    }
}

/// A bidirectional cursor over entries in bytewise key order.
pub(crate) trait Cursor: Send {
    /// True when positioned on an entry.
    fn valid(&self) -> bool;
    /// Key of the current entry (only when valid).
    fn key(&self) -> &[u8];
    /// Where the current entry's value is (only when valid).
    fn value_ref(&self) -> ValueRef;
    /// Whether the current entry is a delete (only when valid).
    fn is_tombstone(&self) -> bool;
    fn seek_to_first(&mut self) -> Result<()>;
    fn seek_to_last(&mut self) -> Result<()>;
    /// First entry with key `>= target`.
    fn seek(&mut self, target: &[u8]) -> Result<()>;
    /// Last entry with key `<= target`.
    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()>;
    fn next(&mut self) -> Result<()>;
    fn prev(&mut self) -> Result<()>;
}

/// Merges cursors ordered newest first: each key is yielded once, from the
/// newest cursor that has it.
pub(crate) struct MergingCursor<'a> {
    children: Vec<Box<dyn Cursor + 'a>>,
    current: Option<usize>,
    direction: Direction,
    /// Seek the children in parallel, on the rayon pool the caller
    /// installed: worth it when a seek blocks on a device read per child.
    parallel: bool,
}

impl<'a> MergingCursor<'a> {
    pub(crate) fn new(children: Vec<Box<dyn Cursor + 'a>>) -> Self {
        MergingCursor {
            children,
            current: None,
            direction: Direction::Forward,
            parallel: false,
        }
    }

    /// Like [`MergingCursor::new`], seeking children in parallel.
    pub(crate) fn new_parallel(children: Vec<Box<dyn Cursor + 'a>>) -> Self {
        MergingCursor {
            parallel: children.len() > 1,
            ..MergingCursor::new(children)
        }
    }

    /// Applies a seek to every child.
    fn each(
        &mut self,
        f: impl Fn(&mut Box<dyn Cursor + 'a>) -> Result<()> + Sync + Send,
    ) -> Result<()> {
        if self.parallel {
            self.children.par_iter_mut().try_for_each(f)
        } else {
            self.children.iter_mut().try_for_each(f)
        }
    }

    /// The smallest key, newest child first on ties.
    fn pick_smallest(&mut self) {
        self.current = None;
        for (i, c) in self.children.iter().enumerate() {
            if c.valid()
                && self
                    .current
                    .is_none_or(|j| c.key() < self.children[j].key())
            {
                self.current = Some(i);
            }
        }
    }

    /// The largest key, newest child first on ties.
    fn pick_largest(&mut self) {
        self.current = None;
        for (i, c) in self.children.iter().enumerate() {
            if c.valid()
                && self
                    .current
                    .is_none_or(|j| c.key() > self.children[j].key())
            {
                self.current = Some(i);
            }
        }
    }
}

impl Cursor for MergingCursor<'_> {
    fn valid(&self) -> bool {
        self.current.is_some()
    }

    fn key(&self) -> &[u8] {
        self.children[self.current.expect("valid cursor")].key()
    }

    fn value_ref(&self) -> ValueRef {
        self.children[self.current.expect("valid cursor")].value_ref()
    }

    fn is_tombstone(&self) -> bool {
        self.children[self.current.expect("valid cursor")].is_tombstone()
    }

    fn seek_to_first(&mut self) -> Result<()> {
        self.each(|c| c.seek_to_first())?;
        self.direction = Direction::Forward;
        self.pick_smallest();
        Ok(())
    }

    fn seek_to_last(&mut self) -> Result<()> {
        self.each(|c| c.seek_to_last())?;
        self.direction = Direction::Reverse;
        self.pick_largest();
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.each(|c| c.seek(target))?;
        self.direction = Direction::Forward;
        self.pick_smallest();
        Ok(())
    }

    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.each(|c| c.seek_for_prev(target))?;
        self.direction = Direction::Reverse;
        self.pick_largest();
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        let Some(cur) = self.current else {
            return Ok(());
        };
        let key = self.children[cur].key().to_vec();
        if self.direction == Direction::Reverse {
            // Children sit at or before `key`: move every one past it.
            for c in &mut self.children {
                c.seek(&key)?;
                if c.valid() && c.key() == key.as_slice() {
                    c.next()?;
                }
            }
            self.direction = Direction::Forward;
        } else {
            for c in &mut self.children {
                if c.valid() && c.key() == key.as_slice() {
                    c.next()?;
                }
            }
        }
        self.pick_smallest();
        Ok(())
    }

    fn prev(&mut self) -> Result<()> {
        let Some(cur) = self.current else {
            return Ok(());
        };
        let key = self.children[cur].key().to_vec();
        if self.direction == Direction::Forward {
            for c in &mut self.children {
                c.seek_for_prev(&key)?;
                if c.valid() && c.key() == key.as_slice() {
                    c.prev()?;
                }
            }
            self.direction = Direction::Reverse;
        } else {
            for c in &mut self.children {
                if c.valid() && c.key() == key.as_slice() {
                    c.prev()?;
                }
            }
        }
        self.pick_largest();
        Ok(())
    }
}

/// A cursor over a sorted vector, for tests and small sources.
#[cfg(test)]
pub(crate) struct VecCursor {
    entries: Vec<(Vec<u8>, Option<Bytes>)>,
    pos: Option<usize>,
}

#[cfg(test)]
impl VecCursor {
    pub(crate) fn new(entries: Vec<(Vec<u8>, Option<Bytes>)>) -> Self {
        assert!(entries.windows(2).all(|w| w[0].0 < w[1].0));
        VecCursor { entries, pos: None }
    }
}

#[cfg(test)]
impl Cursor for VecCursor {
    fn valid(&self) -> bool {
        self.pos.is_some()
    }
    fn key(&self) -> &[u8] {
        &self.entries[self.pos.unwrap()].0
    }
    fn value_ref(&self) -> ValueRef {
        match &self.entries[self.pos.unwrap()].1 {
            Some(v) => ValueRef::Inline(v.clone()),
            None => ValueRef::Tombstone,
        }
    }
    fn is_tombstone(&self) -> bool {
        self.entries[self.pos.unwrap()].1.is_none()
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.pos = (!self.entries.is_empty()).then_some(0);
        Ok(())
    }
    fn seek_to_last(&mut self) -> Result<()> {
        self.pos = self.entries.len().checked_sub(1);
        Ok(())
    }
    fn seek(&mut self, t: &[u8]) -> Result<()> {
        let i = self.entries.partition_point(|e| e.0.as_slice() < t);
        self.pos = (i < self.entries.len()).then_some(i);
        Ok(())
    }
    fn seek_for_prev(&mut self, t: &[u8]) -> Result<()> {
        let i = self.entries.partition_point(|e| e.0.as_slice() <= t);
        self.pos = i.checked_sub(1);
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        self.pos = self.pos.map(|p| p + 1).filter(|&p| p < self.entries.len());
        Ok(())
    }
    fn prev(&mut self) -> Result<()> {
        self.pos = self.pos.and_then(|p| p.checked_sub(1));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    type Source = BTreeMap<Vec<u8>, Option<u8>>;

    fn cursor(s: &Source) -> Box<dyn Cursor> {
        Box::new(VecCursor::new(
            s.iter()
                .map(|(k, v)| (k.clone(), v.map(|b| Bytes::from(vec![b]))))
                .collect(),
        ))
    }

    #[derive(Debug, Clone)]
    enum Move {
        First,
        Last,
        Seek(Vec<u8>),
        SeekForPrev(Vec<u8>),
        Next,
        Prev,
    }

    fn moves() -> impl Strategy<Value = Move> {
        let key = prop::collection::vec(0u8..6, 0..3);
        prop_oneof![
            Just(Move::First),
            Just(Move::Last),
            key.clone().prop_map(Move::Seek),
            key.prop_map(Move::SeekForPrev),
            Just(Move::Next),
            Just(Move::Next),
            Just(Move::Prev),
            Just(Move::Prev),
        ]
    }

    proptest! {
        /// Any sequence of moves agrees with the merged map (newest wins).
        #[test]
        fn merge_matches_a_model(
            sources in prop::collection::vec(
                prop::collection::btree_map(prop::collection::vec(0u8..6, 0..3), prop::option::of(any::<u8>()), 0..12),
                0..4),
            ops in prop::collection::vec(moves(), 1..40),
        ) {
            let mut model = Source::new();
            for s in sources.iter().rev() {
                model.extend(s.iter().map(|(k, v)| (k.clone(), *v)));
            }
            let keys: Vec<&Vec<u8>> = model.keys().collect();
            let mut m = MergingCursor::new(sources.iter().map(cursor).collect());
            let mut pos: Option<usize> = None;
            for op in ops {
                match op {
                    Move::First => { m.seek_to_first().unwrap(); pos = (!keys.is_empty()).then_some(0); }
                    Move::Last => { m.seek_to_last().unwrap(); pos = keys.len().checked_sub(1); }
                    Move::Seek(t) => {
                        m.seek(&t).unwrap();
                        let i = keys.partition_point(|k| **k < t);
                        pos = (i < keys.len()).then_some(i);
                    }
                    Move::SeekForPrev(t) => {
                        m.seek_for_prev(&t).unwrap();
                        pos = keys.partition_point(|k| **k <= t).checked_sub(1);
                    }
                    Move::Next => {
                        if pos.is_none() { continue; }
                        m.next().unwrap();
                        pos = pos.map(|p| p + 1).filter(|&p| p < keys.len());
                    }
                    Move::Prev => {
                        if pos.is_none() { continue; }
                        m.prev().unwrap();
                        pos = pos.and_then(|p| p.checked_sub(1));
                    }
                }
                prop_assert_eq!(m.valid(), pos.is_some());
                if let Some(p) = pos {
                    prop_assert_eq!(m.key(), keys[p].as_slice());
                    let v = m.value_ref().load(keys[p]).unwrap();
                    prop_assert_eq!(v.map(|v| v[0]), model[keys[p]]);
                    prop_assert_eq!(m.is_tombstone(), model[keys[p]].is_none());
                }
            }
        }
    }
}
