//! The memtable: recent writes, all versions, in an arena skiplist.

mod arena;
mod skiplist;

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use fastbloom::AtomicBloomFilter;

use crate::cursor::{Cursor, ValueRef};
use crate::error::Result;
use crate::hash::key_hash;
use crate::piece::{AsEntry, EntryRef};
pub(crate) use arena::FrozenArena;
use skiplist::{Entry, NewEntry, Position, SkipList};

/// A version found in a memtable: `value` is `None` for a delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Version {
    pub(crate) seq: u64,
    pub(crate) value: Option<Bytes>,
}

/// The newest version of a key in a memtable, borrowed from it.
pub(crate) struct NewestVersion<'a> {
    pub(crate) key: &'a [u8],
    pub(crate) seq: u64,
    /// `None` for a delete.
    pub(crate) value: Option<&'a [u8]>,
    /// The key, then the value, as they lie in the arena.
    pub(crate) key_and_value: &'a [u8],
}

impl<'a> NewestVersion<'a> {
    fn of(x: Entry<'a>) -> Self {
        NewestVersion {
            key: x.key(),
            seq: x.seq(),
            value: x.value(),
            key_and_value: x.key_and_value(),
        }
    }
}

/// An entry a flush writes: the newest version of a key, where it lies in
/// the memtable. 8 bytes beside the arena, against the 40 of a merge's
/// entry ([`crate::tph::DeltaEntry`]), which also keeps lengths, sequence
/// number and key hash at hand: a flush holds one per entry of a full
/// memtable, at the moment writers wait for it.
#[derive(Clone, Copy)]
pub(crate) struct FlushEntry<'a> {
    entry: Entry<'a>,
}

// A flush of a 64 MiB memtable of 128-byte values holds 370,000.
const _: () = assert!(std::mem::size_of::<FlushEntry<'_>>() == 8);

impl AsEntry for FlushEntry<'_> {
    #[inline]
    fn as_entry(&self) -> EntryRef<'_> {
        EntryRef {
            key: self.entry.key(),
            value: self.entry.value(),
            seq: self.entry.seq(),
        }
    }

    #[inline]
    fn prefetch(&self) {
        self.entry.prefetch();
    }
}

/// Writes not yet flushed. One writer at a time (the database inserts
/// under its WAL lock; concurrent inserts take turns); readers never wait.
#[derive(Debug)]
pub(crate) struct MemTable {
    list: SkipList,
    /// Keys inserted, by [`key_hash`]: a get of a key the memtable does
    /// not hold (most gets, once the data outgrows the memtables) skips
    /// the skiplist search, a cache miss per level. RocksDB's memtable
    /// whole-key filter.
    filter: Option<AtomicBloomFilter>,
    /// The WAL file holding this memtable's writes (0 when there is none).
    wal_number: u64,
    frozen: OnceLock<FrozenArena>,
}

impl std::fmt::Debug for FrozenArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrozenArena")
    }
}

/// Bits set per key in a memtable's filter: each is a probe into a filter
/// small enough to stay in the CPU's caches. At 16 bits per key (128-byte
/// entries, the default size) a miss passes 0.24% of the time; at 4 bits
/// per key (entries of 32 bytes), 16%.
const FILTER_HASHES: u32 = 4;

impl MemTable {
    /// A memtable whose key filter takes `filter_bytes` (none if 0), in
    /// blocks backed by huge pages if `huge_pages` (see
    /// [`crate::Options::memtable_huge_pages`]).
    pub(crate) fn new(wal_number: u64, filter_bytes: usize, huge_pages: bool) -> MemTable {
        MemTable {
            filter: (filter_bytes > 0).then(|| {
                AtomicBloomFilter::with_num_bits(filter_bytes.max(8) * 8).hashes(FILTER_HASHES)
            }),
            list: SkipList::new(huge_pages),
            wal_number,
            frozen: OnceLock::new(),
        }
    }

    pub(crate) fn wal_number(&self) -> u64 {
        self.wal_number
    }

    /// Bytes allocated for the entries (keys, values, links and headers)
    /// and the key filter.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.list.memory_bytes() + self.filter_bytes()
    }

    fn filter_bytes(&self) -> usize {
        self.filter.as_ref().map_or(0, |f| f.num_bits() / 8)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Entries, every version counted.
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Inserts every operation of `batch`, the first with sequence number
    /// `seq`; returns the user bytes (keys and values) it holds.
    pub(crate) fn insert_batch(&self, seq: u64, batch: &crate::batch::WriteBatch) -> u64 {
        let mut entries = batch.ops().enumerate().map(|(i, op)| match op {
            crate::batch::BatchOp::Put(k, v) => (k, seq + i as u64, Some(v)),
            crate::batch::BatchOp::Delete(k) => (k, seq + i as u64, None),
        });
        let user_bytes = |entries: &[NewEntry<'_>]| {
            entries
                .iter()
                .map(|(k, _, v)| (k.len() + v.map_or(0, <[u8]>::len)) as u64)
                .sum()
        };
        if batch.len() == 1 {
            // A single put: nothing to search beside it, nothing to gather.
            let entry @ (key, seq, value) = entries.next().expect("a batch of one");
            self.insert(key, seq, value);
            return user_bytes(&[entry]);
        }
        let entries: Vec<NewEntry<'_>> = entries.collect();
        for (key, _, _) in &entries {
            self.note_key(key);
        }
        // Every entry has a sequence number of its own, so the order in
        // which they are linked changes nothing a reader can see, and none
        // is visible before the whole batch is in.
        self.list.insert_all(&entries);
        user_bytes(&entries)
    }

    pub(crate) fn insert(&self, key: &[u8], seq: u64, value: Option<&[u8]>) {
        self.note_key(key);
        self.list.insert(key, seq, value);
    }

    /// Adds `key` to the filter. Before the entry is linked: a reader that
    /// can see the entry (its sequence number was published after this)
    /// sees its filter bits.
    fn note_key(&self, key: &[u8]) {
        if let Some(f) = &self.filter {
            f.insert_hash(key_hash(key));
        }
    }

    /// The newest version of `key` (whose [`key_hash`] is `h`) with a
    /// sequence number `<= snapshot`.
    pub(crate) fn get(&self, key: &[u8], h: u64, snapshot: u64) -> Option<Version> {
        if self.filter.as_ref().is_some_and(|f| !f.contains_hash(h)) {
            return None;
        }
        let e = self.list.seek(key, snapshot)?;
        (e.key() == key).then(|| Version {
            seq: e.seq(),
            value: e.value().map(Bytes::copy_from_slice),
        })
    }

    /// Ends insertion (a later insert panics) and shares the memtable's
    /// memory, so that a flush holds its keys and values without copies.
    pub(crate) fn freeze(&self) -> &FrozenArena {
        self.frozen.get_or_init(|| self.list.freeze())
    }

    /// Freezes the memtable and moves its memory into `file`, mapped back
    /// in place (see `SkipList::spill`): what a snapshot or iterator that
    /// pins it long after its flush costs then is page cache, not process
    /// memory. Returns the bytes moved (0 if they were already).
    pub(crate) fn spill(&self, file: &std::fs::File) -> std::io::Result<u64> {
        self.freeze();
        self.list.spill(file)
    }

    /// Whether [`MemTable::spill`] moved it to a file.
    pub(crate) fn is_spilled(&self) -> bool {
        self.list.is_spilled()
    }

    /// The newest version of every key, in key order.
    pub(crate) fn newest_versions(&self) -> impl Iterator<Item = NewestVersion<'_>> {
        self.newest().map(NewestVersion::of)
    }

    /// The newest version of every key, in key order, as a flush writes
    /// it.
    pub(crate) fn flush_entries(&self) -> impl Iterator<Item = FlushEntry<'_>> {
        self.newest().map(|entry| FlushEntry { entry })
    }

    /// [`MemTable::flush_entries`], listed: several runs of the list
    /// walked at once, which waits for memory less than the iterator.
    pub(crate) fn flush_list(&self) -> Vec<FlushEntry<'_>> {
        let mut list = Vec::with_capacity(self.len());
        self.list
            .for_each_newest(|entry| list.push(FlushEntry { entry }));
        list
    }

    /// [`MemTable::newest_versions`], each handed to `f`, the list walked
    /// as [`MemTable::flush_list`] walks it.
    pub(crate) fn for_each_newest_version<'a>(&'a self, mut f: impl FnMut(NewestVersion<'a>)) {
        self.list.for_each_newest(|x| f(NewestVersion::of(x)));
    }

    fn newest(&self) -> impl Iterator<Item = Entry<'_>> {
        let mut e = self.list.first();
        std::iter::from_fn(move || {
            let x = e?;
            e = x.next();
            while let Some(older) = e.filter(|o| o.key() == x.key()) {
                e = older.next();
            }
            Some(x)
        })
    }
}

/// A cursor over the newest version of each key visible at a snapshot.
pub(crate) struct MemCursor {
    mem: Arc<MemTable>,
    snapshot: u64,
    current: Option<Position>,
}

impl MemCursor {
    pub(crate) fn new(mem: Arc<MemTable>, snapshot: u64) -> Self {
        MemCursor {
            mem,
            snapshot,
            current: None,
        }
    }

    fn current(&self) -> Entry<'_> {
        let pos = self.current.expect("valid cursor");
        // SAFETY: positions are only taken from entries of `self.mem`'s
        // list, which the cursor keeps alive.
        unsafe { self.mem.list.entry_at(pos) }
    }

    /// Settles on the first visible version at or after entry `e`.
    fn settle_forward<'a>(&mut self, list: &'a SkipList, mut e: Option<Entry<'a>>) {
        loop {
            match e {
                None => break,
                Some(x) if x.seq() <= self.snapshot => break,
                // Only versions newer than the snapshot: skip to the
                // snapshot's position in this key, or the next key.
                Some(x) => {
                    e = match list.seek(x.key(), self.snapshot) {
                        Some(n) if n.key() == x.key() => Some(n),
                        _ => list.seek_after(x.key()),
                    };
                }
            }
        }
        self.current = e.map(|x| x.position());
    }

    /// Settles on the largest key `<= key` with a visible version.
    fn settle_backward<'a>(&mut self, list: &'a SkipList, key: &'a [u8]) {
        let mut visible = list.seek(key, self.snapshot).filter(|e| e.key() == key);
        let mut below = key;
        while visible.is_none() {
            let Some(before) = list.last_below(below) else {
                break;
            };
            below = before.key();
            visible = list.seek(below, self.snapshot).filter(|e| e.key() == below);
        }
        self.current = visible.map(|x| x.position());
    }
}

impl Cursor for MemCursor {
    fn valid(&self) -> bool {
        self.current.is_some()
    }

    fn key(&self) -> &[u8] {
        self.current().key()
    }

    fn value_ref(&self) -> ValueRef {
        match self.current().value() {
            Some(v) => ValueRef::Inline(Bytes::copy_from_slice(v)),
            None => ValueRef::Tombstone,
        }
    }

    fn is_tombstone(&self) -> bool {
        self.current().value().is_none()
    }

    fn seek_to_first(&mut self) -> Result<()> {
        let mem = self.mem.clone();
        self.settle_forward(&mem.list, mem.list.first());
        Ok(())
    }

    fn seek_to_last(&mut self) -> Result<()> {
        let mem = self.mem.clone();
        match mem.list.last() {
            Some(e) => self.settle_backward(&mem.list, e.key()),
            None => self.current = None,
        }
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let mem = self.mem.clone();
        self.settle_forward(&mem.list, mem.list.seek(target, self.snapshot));
        Ok(())
    }

    fn seek_for_prev(&mut self, target: &[u8]) -> Result<()> {
        let mem = self.mem.clone();
        self.settle_backward(&mem.list, target);
        Ok(())
    }

    fn next(&mut self) -> Result<()> {
        if let Some(pos) = self.current {
            let mem = self.mem.clone();
            // SAFETY: `pos` came from `self.mem`'s list.
            let key = unsafe { mem.list.entry_at(pos) }.key();
            self.settle_forward(&mem.list, mem.list.seek_after(key));
        }
        Ok(())
    }

    fn prev(&mut self) -> Result<()> {
        if let Some(pos) = self.current {
            let mem = self.mem.clone();
            // SAFETY: `pos` came from `self.mem`'s list.
            let key = unsafe { mem.list.entry_at(pos) }.key();
            match mem.list.last_below(key) {
                Some(e) => self.settle_backward(&mem.list, e.key()),
                None => self.current = None,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(m: &MemTable, key: &[u8], snapshot: u64) -> Option<Version> {
        m.get(key, key_hash(key), snapshot)
    }

    #[test]
    fn newest_visible_version_wins() {
        for filter_bytes in [0, 1024] {
            let m = MemTable::new(1, filter_bytes, true);
            m.insert(b"a", 1, Some(b"1"));
            m.insert(b"a", 3, Some(b"3"));
            m.insert(b"a", 5, None);
            m.insert(b"b", 2, Some(b"b"));
            assert_eq!(get(&m, b"a", 0), None);
            assert_eq!(get(&m, b"a", 2).unwrap().value.as_deref(), Some(&b"1"[..]));
            assert_eq!(get(&m, b"a", 4).unwrap().value.as_deref(), Some(&b"3"[..]));
            assert_eq!(get(&m, b"a", 9).unwrap().value, None);
            assert_eq!(get(&m, b"c", 9), None);
            let newest: Vec<_> = m.newest_versions().map(|v| (v.key, v.seq)).collect();
            assert_eq!(newest, vec![(&b"a"[..], 5), (&b"b"[..], 2)]);
            assert!(m.memory_bytes() > filter_bytes);
        }
    }

    /// Every inserted key passes the filter; of keys never inserted, few
    /// do, and the filter is charged to the memtable.
    #[test]
    fn the_key_filter_passes_every_key_and_few_others() {
        let m = MemTable::new(1, 16 << 10, true);
        let empty = MemTable::new(1, 0, true).memory_bytes();
        assert_eq!(m.memory_bytes(), empty + (16 << 10));
        let key = |i: u32| format!("key{i:08}").into_bytes();
        for i in 0..8192 {
            m.insert(&key(i), u64::from(i) + 1, Some(b"v"));
        }
        for i in 0..8192 {
            assert!(get(&m, &key(i), u64::MAX).is_some(), "key {i}");
        }
        let passed = (8192..8192 * 3)
            .filter(|&i| {
                let k = key(i);
                m.filter.as_ref().unwrap().contains_hash(key_hash(&k))
            })
            .count();
        // 16 bits per key, 4 hashes: 0.24% expected.
        assert!(passed < 16384 / 100, "{passed} of 16384 passed");
    }

    #[test]
    fn cursor_sees_only_the_snapshot() {
        let m = Arc::new(MemTable::new(1, 0, true));
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
