//! The memtable: recent writes, all versions, in a concurrent skiplist.

use std::cmp::Ordering;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;
use crossbeam_skiplist::SkipMap;

use crate::cursor::{Cursor, ValueRef};
use crate::error::Result;

/// Skiplist key: user key ascending, then sequence number descending, so the
/// newest version of a key comes first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct InternalKey {
    pub(crate) key: Bytes,
    pub(crate) seq: u64,
}

impl Ord for InternalKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key.cmp(&other.key).then(other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for InternalKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Bytes charged per entry on top of key and value (skiplist node, Bytes).
const ENTRY_OVERHEAD: usize = 96;

/// A version found in a memtable: `value` is `None` for a delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Version {
    pub(crate) seq: u64,
    pub(crate) value: Option<Bytes>,
}

/// Writes not yet flushed. Safe to insert into and read from concurrently.
#[derive(Debug)]
pub(crate) struct MemTable {
    map: SkipMap<InternalKey, Option<Bytes>>,
    memory: AtomicUsize,
    /// The WAL file holding this memtable's writes (0 when there is none).
    wal_number: u64,
}

impl MemTable {
    pub(crate) fn new(wal_number: u64) -> MemTable {
        MemTable {
            map: SkipMap::new(),
            memory: AtomicUsize::new(0),
            wal_number,
        }
    }

    pub(crate) fn wal_number(&self) -> u64 {
        self.wal_number
    }

    /// Approximate bytes used.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.memory.load(Relaxed)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Inserts every operation of `batch`, the first with sequence number
    /// `seq`; returns the user bytes (keys and values) it holds.
    pub(crate) fn insert_batch(&self, seq: u64, batch: &crate::batch::WriteBatch) -> u64 {
        let mut user_bytes = 0u64;
        for (i, op) in batch.ops().enumerate() {
            let (key, value) = match op {
                crate::batch::BatchOp::Put(k, v) => (k, Some(v)),
                crate::batch::BatchOp::Delete(k) => (k, None),
            };
            user_bytes += (key.len() + value.map_or(0, <[u8]>::len)) as u64;
            self.insert(key, seq + i as u64, value);
        }
        user_bytes
    }

    pub(crate) fn insert(&self, key: &[u8], seq: u64, value: Option<&[u8]>) {
        let charge = key.len() + value.map_or(0, |v| v.len()) + ENTRY_OVERHEAD;
        self.memory.fetch_add(charge, Relaxed);
        self.map.insert(
            InternalKey {
                key: Bytes::copy_from_slice(key),
                seq,
            },
            value.map(Bytes::copy_from_slice),
        );
    }

    /// The newest version of `key` with a sequence number `<= snapshot`.
    pub(crate) fn get(&self, key: &[u8], snapshot: u64) -> Option<Version> {
        let probe = InternalKey {
            key: Bytes::copy_from_slice(key),
            seq: snapshot,
        };
        let e = self.map.lower_bound(Bound::Included(&probe))?;
        (e.key().key == key).then(|| Version {
            seq: e.key().seq,
            value: e.value().clone(),
        })
    }

    /// The newest version of every key, in key order: what a flush writes.
    pub(crate) fn newest_versions(&self) -> Vec<(Bytes, Version)> {
        let mut out: Vec<(Bytes, Version)> = Vec::new();
        for e in self.map.iter() {
            if out.last().is_some_and(|(k, _)| *k == e.key().key) {
                continue;
            }
            out.push((
                e.key().key.clone(),
                Version {
                    seq: e.key().seq,
                    value: e.value().clone(),
                },
            ));
        }
        out
    }

    /// First entry at or after (key, snapshot) in skiplist order.
    pub(crate) fn seek(&self, key: &[u8], snapshot: u64) -> Option<(InternalKey, Option<Bytes>)> {
        let probe = InternalKey {
            key: Bytes::copy_from_slice(key),
            seq: snapshot,
        };
        self.map
            .lower_bound(Bound::Included(&probe))
            .map(|e| (e.key().clone(), e.value().clone()))
    }

    /// First entry of the smallest key above `key`.
    fn seek_after(&self, key: &[u8]) -> Option<(InternalKey, Option<Bytes>)> {
        let probe = InternalKey {
            key: Bytes::copy_from_slice(key),
            seq: 0,
        };
        self.map
            .lower_bound(Bound::Excluded(&probe))
            .map(|e| (e.key().clone(), e.value().clone()))
    }

    /// Largest key below `key` (any version).
    fn key_before(&self, key: &[u8]) -> Option<Bytes> {
        let probe = InternalKey {
            key: Bytes::copy_from_slice(key),
            seq: u64::MAX,
        };
        self.map
            .upper_bound(Bound::Excluded(&probe))
            .map(|e| e.key().key.clone())
    }

    /// The largest key (any version).
    fn last_key(&self) -> Option<Bytes> {
        self.map.back().map(|e| e.key().key.clone())
    }
}

/// A cursor over the newest version of each key visible at a snapshot.
pub(crate) struct MemCursor {
    mem: Arc<MemTable>,
    snapshot: u64,
    current: Option<(Bytes, Option<Bytes>)>,
}

impl MemCursor {
    pub(crate) fn new(mem: Arc<MemTable>, snapshot: u64) -> Self {
        MemCursor {
            mem,
            snapshot,
            current: None,
        }
    }

    /// Settles on the first visible version at or after skiplist entry `e`.
    fn settle_forward(&mut self, mut e: Option<(InternalKey, Option<Bytes>)>) {
        loop {
            match e {
                None => {
                    self.current = None;
                    return;
                }
                Some((ik, v)) if ik.seq <= self.snapshot => {
                    self.current = Some((ik.key, v));
                    return;
                }
                // Only versions newer than the snapshot: skip to the
                // snapshot's position in this key, or the next key.
                Some((ik, _)) => {
                    e = match self.mem.seek(&ik.key, self.snapshot) {
                        Some(n) if n.0.key == ik.key => Some(n),
                        _ => self.mem.seek_after(&ik.key),
                    };
                }
            }
        }
    }

    /// Settles on the largest key `<= key` with a visible version.
    fn settle_backward(&mut self, mut key: Option<Bytes>) {
        while let Some(k) = key {
            if let Some(v) = self.mem.get(&k, self.snapshot) {
                self.current = Some((k, v.value));
                return;
            }
            key = self.mem.key_before(&k);
        }
        self.current = None;
    }
}

impl Cursor for MemCursor {
    fn valid(&self) -> bool {
        self.current.is_some()
    }

    fn key(&self) -> &[u8] {
        &self.current.as_ref().expect("valid cursor").0
    }

    fn value_ref(&self) -> ValueRef {
        match &self.current.as_ref().expect("valid cursor").1 {
            Some(v) => ValueRef::Inline(v.clone()),
            None => ValueRef::Tombstone,
        }
    }

    fn is_tombstone(&self) -> bool {
        self.current.as_ref().expect("valid cursor").1.is_none()
    }

    fn seek_to_first(&mut self) -> Result<()> {
        let e = self.mem.seek(b"", self.snapshot);
        self.settle_forward(e);
        Ok(())
    }

    fn seek_to_last(&mut self) -> Result<()> {
        let k = self.mem.last_key();
        self.settle_backward(k);
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let e = self.mem.seek(target, self.snapshot);
        self.settle_forward(e);
        Ok(())
    }

    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        self.settle_backward(Some(Bytes::copy_from_slice(target)));
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        if let Some((k, _)) = self.current.take() {
            let e = self.mem.seek_after(&k);
            self.settle_forward(e);
        }
        Ok(())
    }

    fn prev(&mut self) -> Result<()> {
        if let Some((k, _)) = self.current.take() {
            let before = self.mem.key_before(&k);
            self.settle_backward(before);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_visible_version_wins() {
        let m = MemTable::new(1);
        m.insert(b"a", 1, Some(b"1"));
        m.insert(b"a", 3, Some(b"3"));
        m.insert(b"a", 5, None);
        m.insert(b"b", 2, Some(b"b"));
        assert_eq!(m.get(b"a", 0), None);
        assert_eq!(m.get(b"a", 2).unwrap().value.as_deref(), Some(&b"1"[..]));
        assert_eq!(m.get(b"a", 4).unwrap().value.as_deref(), Some(&b"3"[..]));
        assert_eq!(m.get(b"a", 9).unwrap().value, None);
        assert_eq!(m.get(b"c", 9), None);
        let newest = m.newest_versions();
        assert_eq!(newest.len(), 2);
        assert_eq!(newest[0].1.seq, 5);
        assert!(m.memory_bytes() > 0);
    }

    #[test]
    fn cursor_sees_only_the_snapshot() {
        let m = Arc::new(MemTable::new(1));
        m.insert(b"a", 1, Some(b"a1"));
        m.insert(b"b", 5, Some(b"b5"));
        m.insert(b"c", 2, Some(b"c2"));
        m.insert(b"c", 6, None);
        m.insert(b"d", 7, Some(b"d7"));
        let collect = |snap: u64, backwards: bool| {
            let mut c = MemCursor::new(m.clone(), snap);
            let mut out = Vec::new();
            if backwards {
                c.seek_to_last().unwrap();
            } else {
                c.seek_to_first().unwrap();
            }
            while c.valid() {
                let v = c.value_ref().load(c.key()).unwrap();
                out.push((c.key().to_vec(), v.map(|v| v.to_vec())));
                if backwards {
                    c.prev().unwrap();
                } else {
                    c.next().unwrap();
                }
            }
            out
        };
        let at4 = vec![
            (b"a".to_vec(), Some(b"a1".to_vec())),
            (b"c".to_vec(), Some(b"c2".to_vec())),
        ];
        assert_eq!(collect(4, false), at4);
        assert_eq!(
            collect(4, true),
            at4.iter().rev().cloned().collect::<Vec<_>>()
        );
        let at9 = collect(9, false);
        assert_eq!(at9.len(), 4);
        assert_eq!(at9[2], (b"c".to_vec(), None));
        let mut c = MemCursor::new(m.clone(), 4);
        c.seek(b"b").unwrap();
        assert_eq!(c.key(), b"c");
        c.seek_for_prev(b"bz").unwrap();
        assert_eq!(c.key(), b"a");
    }
}
