//! Iterators over the database: memtables and every TPH merged in key order.

use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use rayon::prelude::*;

use super::read::Snapshot;
use super::SuperVersion;
use crate::cursor::{Cursor, MergingCursor, ValueRef};
use crate::error::{Error, Result};
use crate::memtable::MemCursor;
use crate::tph::{PieceFile, TphCursor};

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

/// The bounds of a scan from `lower` (inclusive) to `upper` (exclusive),
/// narrowed to the keys starting with `prefix` when there is one.
pub fn prefix_bounds(
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    prefix: Option<&[u8]>,
) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let Some(p) = prefix else {
        return (lower, upper);
    };
    let lower = Some(lower.map_or_else(|| p.to_vec(), |l| l.max(p.to_vec())));
    let upper = match (upper, prefix_successor(p)) {
        (Some(u), Some(end)) => Some(u.min(end)),
        (u, end) => u.or(end),
    };
    (lower, upper)
}

/// The smallest key greater than every key starting with `prefix`: the
/// exclusive upper bound of a prefix scan. `None` when there is none (the
/// prefix is empty or all `0xff`).
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

/// Entries read ahead after a seek; doubled on every refill up to
/// [`MAX_BATCH`], like readahead, so a short scan does not pay for a long one.
const FIRST_BATCH: usize = 4;
const MAX_BATCH: usize = 64;
/// A batch stops once its blocks (and inline values) reach this many bytes,
/// whatever its entry count: large values cannot grow an iterator's memory.
/// Every batch takes at least one entry.
const MAX_BATCH_BYTES: usize = 256 << 10;

/// A cursor over the database with explicit seeks and steps, skipping
/// deleted keys. Errors make it invalid; see [`DBRawIterator::status`].
///
/// Keys come from the memtables and the pieces' key chunks; values are read
/// ahead in batches: the next entries in the direction of travel are
/// collected, each block they live in is read once, and the blocks of a
/// batch are read in parallel.
pub struct DBRawIterator<'a> {
    /// Positioned on the first entry not yet in `window`.
    cursor: MergingCursor<'static>,
    /// Parallel reads, when the read mode blocks on the device.
    io: Option<Arc<rayon::ThreadPool>>,
    /// Loaded entries in the order they will be visited; the front is the
    /// current one.
    window: VecDeque<(Bytes, Bytes)>,
    forward: bool,
    batch: usize,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    error: Option<Error>,
    _db: PhantomData<&'a ()>,
}

/// Reads the values of `refs`, each distinct block once, in parallel.
fn load_values(
    io: Option<&rayon::ThreadPool>,
    refs: Vec<(Bytes, ValueRef)>,
) -> Result<Vec<(Bytes, Bytes)>> {
    let mut blocks: HashMap<(u64, u64), (Arc<PieceFile>, Vec<usize>)> = HashMap::new();
    let mut values: Vec<Option<Bytes>> = vec![None; refs.len()];
    for (i, (_, r)) in refs.iter().enumerate() {
        match r {
            ValueRef::Inline(v) => values[i] = Some(v.clone()),
            ValueRef::Tombstone => unreachable!("tombstones are skipped before loading"),
            ValueRef::InPiece(p, slot) => {
                let (b, _) = p.block_of(*slot);
                blocks
                    .entry((p.number(), b))
                    .or_insert_with(|| (p.clone(), Vec::new()))
                    .1
                    .push(i);
            }
        }
    }
    let read = |(p, wanted): &(Arc<PieceFile>, Vec<usize>)| -> Result<Vec<(usize, Bytes)>> {
        let (b, _) = p.block_of(match &refs[wanted[0]].1 {
            ValueRef::InPiece(_, s) => *s,
            _ => unreachable!("grouped from pieces"),
        });
        let block = p.read_block(b)?;
        wanted
            .iter()
            .map(|&i| {
                let ValueRef::InPiece(_, slot) = &refs[i].1 else {
                    unreachable!("grouped from pieces")
                };
                match block.entry(p.block_of(*slot).1, p.entry_layout())? {
                    Some(e) if e.key == refs[i].0 => Ok((i, e.value.unwrap_or_default())),
                    _ => Err(Error::corruption(
                        format!("slot {slot}"),
                        "the key the key index names",
                        "another key",
                    )
                    .at(p.name())),
                }
            })
            .collect()
    };
    let groups: Vec<&(Arc<PieceFile>, Vec<usize>)> = blocks.values().collect();
    let loaded: Vec<Vec<(usize, Bytes)>> = match io {
        Some(io) if groups.len() > 1 => {
            io.install(|| groups.into_par_iter().map(read).collect::<Result<_>>())?
        }
        _ => groups.into_iter().map(read).collect::<Result<_>>()?,
    };
    for (i, v) in loaded.into_iter().flatten() {
        values[i] = Some(v);
    }
    Ok(refs
        .into_iter()
        .zip(values)
        .map(|((k, _), v)| (k, v.expect("every value loaded")))
        .collect())
}

impl<'a> DBRawIterator<'a> {
    pub(crate) fn new(
        sv: &Arc<SuperVersion>,
        seq: u64,
        io: Option<Arc<rayon::ThreadPool>>,
        opts: ReadOptions<'_>,
    ) -> DBRawIterator<'a> {
        let parallel = io.is_some();
        let merge = |c: Vec<Box<dyn Cursor>>| {
            if parallel {
                MergingCursor::new_parallel(c)
            } else {
                MergingCursor::new(c)
            }
        };
        let mut error = None;
        let mut children: Vec<Box<dyn Cursor>> = Vec::new();
        children.push(Box::new(MemCursor::new(sv.mem.clone(), seq)));
        for m in &sv.imms {
            children.push(Box::new(MemCursor::new(m.clone(), seq)));
        }
        let mut tph_cursor = |t: &Arc<crate::tph::Tph>| match TphCursor::new(t, parallel) {
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
                children.push(Box::new(merge(parts)));
            }
        }
        DBRawIterator {
            cursor: merge(children),
            io,
            window: VecDeque::new(),
            forward: true,
            batch: FIRST_BATCH,
            lower: opts.lower_bound,
            upper: opts.upper_bound,
            error,
            _db: PhantomData,
        }
    }

    /// Runs a cursor move on the I/O pool (seeks fan out to every piece).
    fn moved(
        &mut self,
        forward: bool,
        m: impl FnOnce(&mut MergingCursor<'static>) -> Result<()> + Send,
    ) {
        self.window.clear();
        self.forward = forward;
        self.batch = FIRST_BATCH;
        if self.error.is_some() {
            return;
        }
        let cursor = &mut self.cursor;
        let r = match &self.io {
            Some(io) => io.install(|| m(cursor)),
            None => m(cursor),
        };
        let r = r.and_then(|()| self.fill());
        if let Err(e) = r {
            self.window.clear();
            self.error = Some(e);
        }
    }

    /// Loads the next batch of live entries in the direction of travel.
    fn fill(&mut self) -> Result<()> {
        let mut pending: Vec<(Bytes, ValueRef)> = Vec::with_capacity(self.batch);
        let mut bytes = 0;
        while pending.len() < self.batch && bytes < MAX_BATCH_BYTES && self.cursor.valid() {
            let k = self.cursor.key();
            let out = if self.forward {
                self.upper.as_deref().is_some_and(|u| k >= u)
            } else {
                self.lower.as_deref().is_some_and(|l| k < l)
            };
            if out {
                break;
            }
            if !self.cursor.is_tombstone() {
                let value = self.cursor.value_ref();
                bytes += k.len() + value.bytes_to_load();
                pending.push((Bytes::copy_from_slice(k), value));
            }
            if self.forward {
                self.cursor.next()?;
            } else {
                self.cursor.prev()?;
            }
        }
        self.batch = (self.batch * 2).min(MAX_BATCH);
        self.window
            .extend(load_values(self.io.as_deref(), pending)?);
        Ok(())
    }

    /// True when positioned on a key.
    pub fn valid(&self) -> bool {
        !self.window.is_empty()
    }

    /// The current key.
    pub fn key(&self) -> Option<&[u8]> {
        self.window.front().map(|(k, _)| &k[..])
    }

    /// The current value.
    pub fn value(&self) -> Option<&[u8]> {
        self.window.front().map(|(_, v)| &v[..])
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
        let lower = self.lower.clone();
        self.moved(true, |c| match lower {
            Some(l) => c.seek(&l),
            None => c.seek_to_first(),
        });
    }

    /// Moves to the last key (within the bounds).
    pub fn seek_to_last(&mut self) {
        let upper = self.upper.clone();
        self.moved(false, |c| match upper {
            Some(u) => {
                c.seek_for_prev(&u)?;
                if c.valid() && c.key() >= u.as_slice() {
                    c.prev()?;
                }
                Ok(())
            }
            None => c.seek_to_last(),
        });
    }

    /// Moves to the first key `>= key`.
    pub fn seek(&mut self, key: impl AsRef<[u8]>) {
        let key = key.as_ref();
        let target = match &self.lower {
            Some(l) if l.as_slice() > key => l.clone(),
            _ => key.to_vec(),
        };
        self.moved(true, |c| c.seek(&target));
    }

    /// Moves to the last key `<= key`.
    pub fn seek_for_prev(&mut self, key: impl AsRef<[u8]>) {
        let key = key.as_ref();
        if self.upper.as_deref().is_some_and(|u| key >= u) {
            return self.seek_to_last();
        }
        let key = key.to_vec();
        self.moved(false, |c| c.seek_for_prev(&key));
    }

    /// Moves to the next key.
    pub fn next(&mut self) {
        self.step(true);
    }

    /// Moves to the previous key.
    pub fn prev(&mut self) {
        self.step(false);
    }

    fn step(&mut self, forward: bool) {
        let Some((current, _)) = self.window.front().cloned() else {
            return;
        };
        if self.forward == forward {
            self.window.pop_front();
            if self.window.is_empty() {
                if let Err(e) = self.fill() {
                    self.error = Some(e);
                }
            }
            return;
        }
        // Turning around: the cursor ran ahead of the window, the other way.
        self.moved(forward, |c| {
            if forward {
                c.seek(&current)?;
            } else {
                c.seek_for_prev(&current)?;
            }
            if c.valid() && c.key() == &current[..] {
                if forward {
                    c.next()?;
                } else {
                    c.prev()?;
                }
            }
            Ok(())
        });
    }

    pub(crate) fn current(&self) -> Option<(Bytes, Bytes)> {
        self.window.front().cloned()
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
        let io = self.raw.io.clone();
        let raw = std::mem::replace(&mut self.raw, unreachable_raw(io));
        *self = DBIterator::new(raw, mode);
    }
}

/// A placeholder raw iterator (no sources) used while swapping.
fn unreachable_raw<'a>(io: Option<Arc<rayon::ThreadPool>>) -> DBRawIterator<'a> {
    DBRawIterator {
        cursor: MergingCursor::new(Vec::new()),
        io,
        window: VecDeque::new(),
        forward: true,
        batch: FIRST_BATCH,
        lower: None,
        upper: None,
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
        match self.raw.current() {
            Some(kv) => Some(Ok(kv)),
            None => {
                self.done = true;
                self.raw.error.take().map(Err)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::fs::MemFs;
    use crate::{Options, DB};

    /// Regression: read-ahead was counted in entries only (up to 64), so
    /// an iterator over large values held up to 64 of them at once.
    #[test]
    fn read_ahead_is_bounded_in_bytes() {
        let opts = Options {
            file_system: Some(std::sync::Arc::new(MemFs::new())),
            ..Options::default()
        };
        let db = DB::open(&opts, "/db").unwrap();
        for i in 0..40u8 {
            db.put([i], vec![i; 200 << 10]).unwrap();
        }
        db.flush().unwrap();
        for i in 40..80u8 {
            db.put([i], vec![i; 200 << 10]).unwrap();
        }
        let mut it = db.raw_iterator();
        it.seek_to_first();
        let mut seen = 0;
        while it.valid() {
            let held: usize = it.window.iter().map(|(k, v)| k.len() + v.len()).sum();
            assert!(
                held <= super::MAX_BATCH_BYTES + (200 << 10),
                "{} entries, {held} bytes read ahead",
                it.window.len()
            );
            assert_eq!(it.value().unwrap()[0], seen);
            seen += 1;
            it.next();
        }
        it.status().unwrap();
        assert_eq!(seen, 80);
    }
}
