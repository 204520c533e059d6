//! Entries: what a piece stores for each key.

use bytes::Bytes;

use super::entry_layout::EntryLayout;
use crate::error::{Error, Result};

/// Longest key a piece accepts.
pub const MAX_KEY_BYTES: usize = 1 << 20;
/// Longest value a piece accepts.
pub const MAX_VALUE_BYTES: usize = 1 << 30;

/// An entry to be written: a key with a value, or a tombstone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryRef<'a> {
    /// The key.
    pub key: &'a [u8],
    /// The value, or `None` for a tombstone (a delete).
    pub value: Option<&'a [u8]>,
    /// Sequence number of the write.
    pub seq: u64,
}

/// An entry read from a piece. Key and value share the block's memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: Bytes,
    /// The value, or `None` for a tombstone.
    pub value: Option<Bytes>,
    /// Sequence number of the write.
    pub seq: u64,
}

/// What a piece is written from: anything that shows as an entry, so that
/// callers need not build a list of [`EntryRef`] beside their own.
pub(crate) trait AsEntry: Sync {
    fn as_entry(&self) -> EntryRef<'_>;

    /// Asks the CPU for the memory [`AsEntry::as_entry`] reads first (an
    /// entry written from lies anywhere in memory: a piece's slot order is
    /// random).
    fn prefetch(&self) {}
}

/// What planning a piece needs of an entry: all but the value's bytes. A
/// piece written in passes is planned from these, and each pass loads the
/// entries of its blocks whole (see `write_piece_in_passes`).
pub(crate) trait EntryShape: Sync {
    fn key(&self) -> &[u8];
    fn seq(&self) -> u64;
    /// The value's length; `None` for a tombstone.
    fn value_len(&self) -> Option<usize>;

    /// Asks the CPU for the memory [`EntryShape::key`] reads first; passes
    /// over entries in their order call it some entries ahead.
    fn prefetch_shape(&self) {}

    /// Bytes of the entry with a varint tag and sequence number (as
    /// pieces before format 6 store it): what estimates of a piece's size
    /// and memory count.
    fn encoded_len(&self) -> usize {
        EntryLayout::PLAIN.len_of(self.key().len(), self.seq(), self.value_len())
    }
}

impl<T: AsEntry> EntryShape for T {
    fn key(&self) -> &[u8] {
        self.as_entry().key
    }

    fn seq(&self) -> u64 {
        self.as_entry().seq
    }

    fn value_len(&self) -> Option<usize> {
        self.as_entry().value.map(<[u8]>::len)
    }

    #[inline]
    fn prefetch_shape(&self) {
        AsEntry::prefetch(self)
    }
}

/// How many entries ahead passes in entry order prefetch: a flush's
/// entries lie wherever the memtable's arena put them, so each pass over
/// them in key order missed the cache at every entry.
pub(crate) const PREFETCH_AHEAD: usize = 8;

/// Prefetches the entry [`PREFETCH_AHEAD`] after `i` in `entries`, if any:
/// called by a pass over `entries` in their order as it reaches `i`.
#[inline]
pub(crate) fn prefetch_ahead<E: EntryShape>(entries: &[E], i: usize) {
    if let Some(e) = entries.get(i + PREFETCH_AHEAD) {
        e.prefetch_shape();
    }
}

/// Where a piece's blocks get their entries whole: entry `i` of the piece,
/// or `None` if it is not at hand.
pub(crate) trait EntrySource: Sync {
    fn entry(&self, i: u32) -> Option<EntryRef<'_>>;

    /// Asks the CPU for the memory [`EntrySource::entry`] of `i` reads
    /// first, ahead of it.
    fn prefetch(&self, _i: u32) {}
}

impl<S: EntrySource + ?Sized> EntrySource for &S {
    fn entry(&self, i: u32) -> Option<EntryRef<'_>> {
        (**self).entry(i)
    }

    fn prefetch(&self, i: u32) {
        (**self).prefetch(i)
    }
}

impl<E: AsEntry> EntrySource for [E] {
    fn entry(&self, i: u32) -> Option<EntryRef<'_>> {
        self.get(i as usize).map(AsEntry::as_entry)
    }

    #[inline]
    fn prefetch(&self, i: u32) {
        if let Some(e) = self.get(i as usize) {
            e.prefetch();
        }
    }
}

impl AsEntry for Entry {
    fn as_entry(&self) -> EntryRef<'_> {
        EntryRef {
            key: &self.key,
            value: self.value.as_deref(),
            seq: self.seq,
        }
    }
}

impl AsEntry for EntryRef<'_> {
    fn as_entry(&self) -> EntryRef<'_> {
        *self
    }
}

/// Refuses a key or value over the limits ([`MAX_KEY_BYTES`],
/// [`MAX_VALUE_BYTES`]), before anything is written.
pub(crate) fn check_limits(key: &[u8], value: Option<&[u8]>) -> Result<()> {
    check_lengths(key.len(), value.map(<[u8]>::len))
}

/// [`check_limits`] of a key and a value of these lengths.
pub(crate) fn check_lengths(key: usize, value: Option<usize>) -> Result<()> {
    if key > MAX_KEY_BYTES {
        return Err(Error::InvalidArgument(format!(
            "key of {key} bytes exceeds the limit of {MAX_KEY_BYTES}"
        )));
    }
    if let Some(v) = value.filter(|&v| v > MAX_VALUE_BYTES) {
        return Err(Error::InvalidArgument(format!(
            "value of {v} bytes exceeds the limit of {MAX_VALUE_BYTES}"
        )));
    }
    Ok(())
}

/// Entries of `keys`, each with `value` and sequence number 1.
#[cfg(test)]
pub(crate) fn entries_of<'a>(keys: &'a [Vec<u8>], value: &'a [u8]) -> Vec<EntryRef<'a>> {
    keys.iter()
        .map(|k| EntryRef {
            key: k,
            value: Some(value),
            seq: 1,
        })
        .collect()
}
