//! Point reads and snapshots.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use bytes::Bytes;

use super::iter::{DBIterator, DBRawIterator, IteratorMode, ReadOptions};
use super::{Inner, SuperVersion, DB};
use crate::error::Result;
use crate::hash::key_hash;
use crate::piece::ReadCount;

impl Inner {
    /// The value of `key` as of sequence number `seq` in `sv`.
    ///
    /// Memtables newest first, then level-0 TPHs newest first, then one TPH
    /// per level: the first version found decides.
    pub(crate) fn get(&self, sv: &SuperVersion, seq: u64, key: &[u8]) -> Result<Option<Bytes>> {
        self.stats.gets.fetch_add(1, Relaxed);
        let h = key_hash(key);
        let value = match memtables_get(sv, seq, key, h) {
            Some(v) => v,
            None => {
                let mut count = ReadCount::default();
                let r = sv.version.get(key, h, &mut count);
                self.stats.get_block_reads.fetch_add(count.reads, Relaxed);
                self.stats.get_bytes_read.fetch_add(count.bytes, Relaxed);
                r?.and_then(|e| e.value)
            }
        };
        self.count_hit(key, value.as_ref());
        Ok(value)
    }

    /// [`Inner::get`] of each of `keys`, side by side: the TPHs' memory
    /// each key's lookup reads is prefetched a step of every key at a time
    /// (see [`crate::version::Version::get_many`]).
    pub(crate) fn get_many(
        &self,
        sv: &SuperVersion,
        seq: u64,
        keys: &[&[u8]],
    ) -> Vec<Result<Option<Bytes>>> {
        self.stats.gets.fetch_add(keys.len() as u64, Relaxed);
        let hashes: Vec<u64> = keys.iter().map(|k| key_hash(k)).collect();
        let mut values: Vec<Option<Result<Option<Bytes>>>> = keys
            .iter()
            .zip(&hashes)
            .map(|(key, &h)| memtables_get(sv, seq, key, h).map(Ok))
            .collect();
        let pending: Vec<usize> = (0..keys.len()).filter(|&i| values[i].is_none()).collect();
        if !pending.is_empty() {
            let mut found: Vec<_> = (0..keys.len()).map(|_| None).collect();
            let mut count = ReadCount::default();
            sv.version
                .get_many(keys, &hashes, pending, &mut found, &mut count);
            self.stats.get_block_reads.fetch_add(count.reads, Relaxed);
            self.stats.get_bytes_read.fetch_add(count.bytes, Relaxed);
            for (v, f) in values.iter_mut().zip(found) {
                if let Some(r) = f {
                    *v = Some(r.map(|e| e.and_then(|e| e.value)));
                }
            }
        }
        keys.iter()
            .zip(values)
            .map(|(key, v)| {
                let v = v.unwrap_or(Ok(None));
                if let Ok(value) = &v {
                    self.count_hit(key, value.as_ref());
                }
                v
            })
            .collect()
    }

    fn count_hit(&self, key: &[u8], value: Option<&Bytes>) {
        if let Some(v) = value {
            self.stats.get_hits.fetch_add(1, Relaxed);
            self.stats
                .get_bytes_returned
                .fetch_add((key.len() + v.len()) as u64, Relaxed);
        }
    }
}

/// The newest version of `key` (hash `h`) as of `seq` in `sv`'s memtables,
/// newest first: `Some(None)` for a tombstone, `None` if none holds it.
fn memtables_get(sv: &SuperVersion, seq: u64, key: &[u8], h: u64) -> Option<Option<Bytes>> {
    std::iter::once(&sv.mem)
        .chain(&sv.imms)
        .find_map(|m| m.get(key, h, seq))
        .map(|v| v.value)
}

impl DB {
    /// The value of `key`, copied.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        Ok(self.get_pinned(key)?.map(|b| b.to_vec()))
    }

    /// The value of `key` without a copy: it shares memory with the
    /// memtable or the block it was read from.
    pub fn get_pinned(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        let (sv, seq) = self.inner.read_view();
        self.inner.get(&sv, seq, key.as_ref())
    }

    /// [`DB::get`] with read options (a snapshot).
    pub fn get_opt(
        &self,
        key: impl AsRef<[u8]>,
        opts: &ReadOptions<'_>,
    ) -> Result<Option<Vec<u8>>> {
        match opts.snapshot {
            Some(s) => s.get(key),
            None => self.get(key),
        }
    }

    /// Values of several keys, read from one consistent view.
    pub fn multi_get<K: AsRef<[u8]>>(
        &self,
        keys: impl IntoIterator<Item = K>,
    ) -> Vec<Result<Option<Vec<u8>>>> {
        let keys: Vec<K> = keys.into_iter().collect();
        self.multi_get_pinned(&keys)
            .into_iter()
            .map(|v| v.map(|v| v.map(|b| b.to_vec())))
            .collect()
    }

    /// [`DB::multi_get`] without copies. The keys' lookups run side by
    /// side, each step's memory prefetched for all of them before any
    /// reads it (RocksDB's batched `MultiGet` does the like for its
    /// blocks): a batch of keys costs less than as many gets.
    pub fn multi_get_pinned<K: AsRef<[u8]>>(&self, keys: &[K]) -> Vec<Result<Option<Bytes>>> {
        let (sv, seq) = self.inner.read_view();
        let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_ref()).collect();
        self.inner.get_many(&sv, seq, &keys)
    }
}

/// A frozen view of the database: reads through it see exactly what existed
/// when it was taken, whatever is written, flushed or compacted later. It
/// pins the memtables and TPHs of that moment until dropped.
///
/// [`DB::snapshot`] ties it to the database's lifetime, as the `rocksdb`
/// crate does; [`DB::snapshot_unbound`] gives one that borrows nothing.
pub struct Snapshot<'a> {
    inner: Arc<Inner>,
    pub(crate) sv: Arc<SuperVersion>,
    pub(crate) seq: u64,
    _db: std::marker::PhantomData<&'a DB>,
}

impl<'a> Snapshot<'a> {
    pub(crate) fn new(inner: &Arc<Inner>) -> Snapshot<'a> {
        let (sv, seq) = inner.read_view();
        Snapshot {
            inner: inner.clone(),
            sv,
            seq,
            _db: std::marker::PhantomData,
        }
    }

    /// The value of `key` in the snapshot.
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Vec<u8>>> {
        Ok(self.get_pinned(key)?.map(|b| b.to_vec()))
    }

    /// [`Snapshot::get`] without a copy.
    pub fn get_pinned(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.inner.get(&self.sv, self.seq, key.as_ref())
    }

    /// Iterates over the snapshot.
    pub fn iterator(&self, mode: IteratorMode<'_>) -> DBIterator<'_> {
        DBIterator::new(self.raw_iterator(), mode)
    }

    /// A raw cursor over the snapshot.
    pub fn raw_iterator(&self) -> DBRawIterator<'_> {
        DBRawIterator::new(
            &self.sv,
            self.seq,
            self.inner.io_pool.clone(),
            ReadOptions::default(),
        )
    }

    /// A cursor over the snapshot that borrows nothing (see
    /// [`DB::raw_iterator_unbound`]).
    pub fn raw_iterator_unbound(
        &self,
        lower_bound: Option<Vec<u8>>,
        upper_bound: Option<Vec<u8>>,
    ) -> DBRawIterator<'static> {
        let opts = ReadOptions {
            snapshot: None,
            lower_bound,
            upper_bound,
        };
        DBRawIterator::new(&self.sv, self.seq, self.inner.io_pool.clone(), opts)
    }

    /// The sequence number the snapshot reads at.
    pub fn sequence(&self) -> u64 {
        self.seq
    }
}
