//! Where a piece's key-hash and key-order sections come from: the entries
//! it is written from, or (a push-down's share, `tph::share`) its pairs of
//! key hashes and the key-order sections of the pieces it comes from.

use rayon::prelude::*;

use super::entry::{EntryShape, PREFETCH_AHEAD};
use super::hash_section::write_key_hashes;
use super::writer::Sink;
use crate::error::{Error, Result};

/// Where a piece's key-hash and key-order sections come from.
pub(crate) trait KeySections {
    /// Hands `sink` the key-hash section: both hashes of every entry,
    /// sorted ([`write_key_hashes`]). Called once, before
    /// [`KeySections::for_each_in_key_order`]: what only this section
    /// needs can go once it is written.
    fn write_key_hashes(&mut self, sink: Sink<'_>) -> Result<()>;

    /// Calls `f(key, is_tombstone, entry)` for every entry, in key order.
    fn for_each_in_key_order(&mut self, f: KeyOrderSink<'_>) -> Result<()>;
}

/// Where [`KeySections::for_each_in_key_order`] hands each key.
pub(crate) type KeyOrderSink<'a> = &'a mut dyn FnMut(&[u8], bool, u32) -> Result<()>;

/// The key sections of listed entries.
pub(super) struct EntryKeys<'a, E> {
    pub(super) entries: &'a [E],
    pub(super) hashes: &'a [u64],
    /// Entry indices in key order, if the entries are not.
    pub(super) key_order: Option<Vec<u32>>,
}

impl<E: EntryShape> KeySections for EntryKeys<'_, E> {
    fn write_key_hashes(&mut self, sink: Sink<'_>) -> Result<()> {
        write_key_hashes(self.hashes, self.entries, sink)
    }

    fn for_each_in_key_order(&mut self, f: KeyOrderSink<'_>) -> Result<()> {
        let order = self.key_order.as_deref();
        let in_order = |j: usize| order.map_or(j, |o| o[j] as usize);
        let n = self.entries.len();
        for j in 0..n {
            if j + PREFETCH_AHEAD < n {
                self.entries[in_order(j + PREFETCH_AHEAD)].prefetch_shape();
            }
            let i = in_order(j);
            let e = &self.entries[i];
            f(e.key(), e.value_len().is_none(), i as u32)?;
        }
        Ok(())
    }
}

/// Entry indices in key order, for entries out of it (flushes and
/// compactions hand theirs over in order); rejects repeated keys.
pub(super) fn key_order<E: EntryShape>(entries: &[E]) -> Result<Vec<u32>> {
    let mut order: Vec<u32> = (0..entries.len() as u32).collect();
    order.par_sort_unstable_by(|&a, &b| entries[a as usize].key().cmp(entries[b as usize].key()));
    if let Some(w) = order
        .windows(2)
        .find(|w| entries[w[0] as usize].key() == entries[w[1] as usize].key())
    {
        return Err(Error::InvalidArgument(format!(
            "key {:?} appears twice in one piece",
            String::from_utf8_lossy(entries[w[0] as usize].key())
        )));
    }
    Ok(order)
}
