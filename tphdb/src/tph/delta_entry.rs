//! The entries flushes and compactions hold on their way into a TPH: a
//! key and value in a shared chunk ([`super::chunk`]), with the lengths,
//! sequence number and key hash a merge plans with.

use std::sync::Arc;

use super::chunk::Chunk;
use super::copies::Copies;
use crate::hash::{key_hash, key_hash2};
use crate::piece::{AsEntry, EntryRef};

/// An entry moving into a TPH: 40 bytes beside its key and value, which
/// lie next to each other in a chunk it shares with a memtable's arena, a
/// merge's copies or a load's buffer ([`super::chunk`]). The lengths are
/// kept here, not only in the chunk: a piece's writer reads them in passes
/// over every entry that would otherwise each miss the cache.
pub(crate) struct DeltaEntry {
    chunk: Arc<Chunk>,
    /// The key's offset in `chunk`; the value follows it.
    off: u32,
    key_len: u32,
    /// [`TOMBSTONE_LEN`] for a tombstone.
    value_len: u32,
    /// [`HELD`] for an entry in memory; for one a merge holds by shape
    /// (see [`Written`]), whose chunk has the key alone, the piece to read
    /// it again from.
    pub(super) origin: u32,
    pub(crate) seq: u64,
    /// `key_hash(key)`.
    pub(crate) h: u64,
}

/// The `origin` of an entry held with its value.
pub(super) const HELD: u32 = u32::MAX;

/// `value_len` of a tombstone (values are at most
/// [`crate::piece::MAX_VALUE_BYTES`]).
pub(super) const TOMBSTONE_LEN: u32 = u32::MAX;

// Held by the million in flushes and merges.
const _: () = assert!(std::mem::size_of::<DeltaEntry>() == 40);

impl AsEntry for DeltaEntry {
    #[inline]
    fn as_entry(&self) -> EntryRef<'_> {
        self.entry_ref()
    }

    /// The entry itself, not yet its key and value: their address is in it.
    #[inline]
    fn prefetch(&self) {
        crate::util::prefetch(self);
    }
}

impl DeltaEntry {
    /// The entry whose key is `key_len` bytes at `off` in `chunk`, followed
    /// by its value (`None`: a tombstone, and nothing after the key).
    pub(crate) fn new(
        chunk: Arc<Chunk>,
        off: u32,
        key_len: usize,
        value_len: Option<usize>,
        seq: u64,
    ) -> DeltaEntry {
        let mut e = DeltaEntry {
            chunk,
            off,
            key_len: u32::try_from(key_len).expect("keys are at most MAX_KEY_BYTES"),
            value_len: value_len.map_or(TOMBSTONE_LEN, |n| {
                u32::try_from(n).expect("values are at most MAX_VALUE_BYTES")
            }),
            origin: HELD,
            seq,
            h: 0,
        };
        e.h = key_hash(e.key());
        // The value must lie in the chunk too.
        let _ = e.value();
        e
    }

    /// The entry of `key` and `value` (`None` for a tombstone), copied.
    #[cfg(test)]
    pub(crate) fn copy_of(key: &[u8], value: Option<&[u8]>, seq: u64) -> DeltaEntry {
        let (chunk, off) = Copies::default().entry(key, value);
        DeltaEntry::new(chunk, off, key.len(), value.map(<[u8]>::len), seq)
    }

    /// `e`, read from a piece, with its key hash `h`. Key and value are
    /// copied into `copies`: slices would keep the whole read buffer alive
    /// (or, mapped, every page of the piece resident) for as long as the
    /// merge holds the entry.
    pub(crate) fn copied(e: EntryRef<'_>, h: u64, copies: &mut Copies) -> DeltaEntry {
        let (chunk, off) = copies.entry(e.key, e.value);
        DeltaEntry::of_entry(e, chunk, off, h, HELD)
    }

    /// `e`'s shape, with its key hash `h`, to read again from `origin`:
    /// its key is copied into `copies`, its value is not.
    pub(super) fn shape_of(
        e: EntryRef<'_>,
        h: u64,
        origin: u32,
        copies: &mut Copies,
    ) -> DeltaEntry {
        let (chunk, off) = copies.key(e.key);
        DeltaEntry::of_entry(e, chunk, off, h, origin)
    }

    fn of_entry(e: EntryRef<'_>, chunk: Arc<Chunk>, off: u32, h: u64, origin: u32) -> DeltaEntry {
        DeltaEntry {
            chunk,
            off,
            // Within the limits a piece's decoder checks.
            key_len: e.key.len() as u32,
            value_len: e.value.map_or(TOMBSTONE_LEN, |v| v.len() as u32),
            origin,
            seq: e.seq,
            h,
        }
    }

    #[inline]
    pub(crate) fn key(&self) -> &[u8] {
        self.chunk.slice(self.off as usize, self.key_len as usize)
    }

    /// `key_hash2(key)`: with `h`, the key's identity in a TPH.
    pub(crate) fn h2(&self) -> u64 {
        key_hash2(self.key())
    }

    /// The value's length, `None` for a tombstone.
    #[inline]
    pub(crate) fn value_len(&self) -> Option<usize> {
        (self.value_len != TOMBSTONE_LEN).then_some(self.value_len as usize)
    }

    /// The value, `None` for a tombstone.
    #[inline]
    pub(crate) fn value(&self) -> Option<&[u8]> {
        debug_assert_eq!(self.origin, HELD, "a shape's value is in its piece");
        let at = self.off as usize + self.key_len as usize;
        self.value_len().map(|n| self.chunk.slice(at, n))
    }

    /// Memory `list` holds: its entries, and with `copied` their keys and
    /// values (copied out of pieces, not shared with a memtable).
    pub(crate) fn list_memory(list: &Vec<DeltaEntry>, copied: bool) -> u64 {
        let entries = list.capacity() * std::mem::size_of::<DeltaEntry>();
        let bytes = if copied {
            list.iter().map(DeltaEntry::held_bytes).sum()
        } else {
            0
        };
        (entries + bytes) as u64
    }

    /// The bytes the entry refers to: its key, and its value unless it is
    /// held by shape.
    pub(crate) fn held_bytes(&self) -> usize {
        let value = if self.origin == HELD {
            self.value_len().unwrap_or(0)
        } else {
            0
        };
        self.key_len as usize + value
    }

    /// The entry as a piece writes it.
    #[inline]
    pub(crate) fn entry_ref(&self) -> EntryRef<'_> {
        EntryRef {
            key: self.key(),
            value: self.value(),
            seq: self.seq,
        }
    }
}

impl Clone for DeltaEntry {
    fn clone(&self) -> DeltaEntry {
        DeltaEntry {
            chunk: self.chunk.clone(),
            ..*self
        }
    }
}

impl PartialEq for DeltaEntry {
    fn eq(&self, other: &DeltaEntry) -> bool {
        let fields = |e: &DeltaEntry| (e.seq, e.h, e.origin, e.value_len);
        fields(self) == fields(other)
            && self.key() == other.key()
            && (self.origin != HELD || self.value() == other.value())
    }
}

impl Eq for DeltaEntry {}

impl std::fmt::Debug for DeltaEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaEntry")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("value_len", &self.value_len())
            .field("seq", &self.seq)
            .field("origin", &self.origin)
            .finish()
    }
}

/// Memory an entry of a merge's input or of a fold costs beyond its key and
/// value: in the inputs, the merged list and a partition's.
pub(crate) const MERGE_BYTES_PER_ENTRY: u64 = 3 * std::mem::size_of::<DeltaEntry>() as u64;
