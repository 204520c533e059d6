//! The block cache: verified, decoded blocks of every piece of a database,
//! shared by its readers, so hot blocks skip the disk when pieces are read
//! with `pread` or `O_DIRECT` (mmap reads have the page cache instead), and
//! the pieces' key-order indexes, which scans load (in every read mode):
//! the cache bounds the memory they take.
//!
//! Keys are `(piece number, block)`, with block `u64::MAX` for the key-order
//! index. Piece numbers are never reused, so an entry can never answer for
//! another file; entries of deleted pieces simply age out.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::block::Block;
use super::sorted::SortedIndex;

/// Bytes charged per cached entry beyond its contents (key, entry, Bytes).
const ENTRY_OVERHEAD: u64 = 96;

/// The cache key of a piece's key-order index.
const SORTED_INDEX: u64 = u64::MAX;

#[derive(Clone)]
enum Cached {
    Block(Block),
    SortedIndex(Arc<SortedIndex>),
}

#[derive(Clone)]
struct Weight;

impl Weighter<(u64, u64), Cached> for Weight {
    fn weight(&self, _: &(u64, u64), c: &Cached) -> u64 {
        ENTRY_OVERHEAD
            + match c {
                Cached::Block(b) => b.raw_len() as u64,
                Cached::SortedIndex(s) => s.memory_bytes(),
            }
    }
}

/// A size-bounded cache of blocks and key-order indexes (S3-FIFO eviction).
pub struct BlockCache {
    blocks: Cache<(u64, u64), Cached, Weight>,
    capacity: u64,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl std::fmt::Debug for BlockCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockCache")
            .field("capacity", &self.capacity)
            .field("used", &self.blocks.weight())
            .finish_non_exhaustive()
    }
}

impl BlockCache {
    /// A cache holding up to `capacity` bytes of blocks.
    pub fn new(capacity: u64) -> BlockCache {
        // 4 KiB blocks are the common case; the estimate only sizes tables.
        let items = (capacity / 4096).max(16) as usize;
        BlockCache {
            blocks: Cache::with_weighter(items, capacity, Weight),
            capacity,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub(crate) fn get(&self, piece: u64, block: u64) -> Option<Block> {
        let found = match self.blocks.get(&(piece, block)) {
            Some(Cached::Block(b)) => Some(b),
            _ => None,
        };
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Relaxed);
        found
    }

    pub(crate) fn insert(&self, piece: u64, block: u64, b: Block) {
        debug_assert_ne!(block, SORTED_INDEX);
        self.blocks.insert((piece, block), Cached::Block(b));
    }

    pub(crate) fn sorted_index(&self, piece: u64) -> Option<Arc<SortedIndex>> {
        match self.blocks.get(&(piece, SORTED_INDEX)) {
            Some(Cached::SortedIndex(s)) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn insert_sorted_index(&self, piece: u64, index: Arc<SortedIndex>) {
        self.blocks
            .insert((piece, SORTED_INDEX), Cached::SortedIndex(index));
    }

    /// The most bytes it holds.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// `(hits, misses, bytes in use)`.
    pub fn usage(&self) -> (u64, u64, u64) {
        (
            self.hits.load(Relaxed),
            self.misses.load(Relaxed),
            self.blocks.weight(),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use super::BlockCache;
    use crate::fs::{MemFs, ReadMode};
    use crate::piece::entry::entries_of;
    use crate::piece::{write_piece, PieceOptions, PieceReader};

    fn piece(fs: &MemFs) -> PieceReader {
        let keys: Vec<Vec<u8>> = (0..5000u32)
            .map(|i| format!("key{i:06}").into_bytes())
            .collect();
        let entries = entries_of(&keys, b"v");
        let path = Path::new("/p.ph");
        write_piece(fs, path, &entries, &PieceOptions::default()).unwrap();
        PieceReader::open(fs, path, ReadMode::Mmap).unwrap()
    }

    /// Regression: every piece kept its key-order index for good once a
    /// scan had loaded it, so scans grew memory with the data. The index
    /// lives in the block cache, within its bound.
    #[test]
    fn a_pieces_key_index_is_held_by_the_cache_not_the_piece() {
        let fs = MemFs::new();
        let reader = piece(&fs);
        let index = reader.sorted_index().unwrap();
        let weak = Arc::downgrade(&index);
        drop(index);
        assert!(
            weak.upgrade().is_none(),
            "no cache: the index goes with its users"
        );

        let cache = Arc::new(BlockCache::new(32 << 10));
        let reader = piece(&fs).with_block_cache(cache.clone(), 7, false);
        let first = reader.sorted_index().unwrap();
        assert!(
            Arc::ptr_eq(&first, &reader.sorted_index().unwrap()),
            "a cache hit"
        );
        let weak = Arc::downgrade(&first);
        drop(first);
        // Other entries push it out: nothing else keeps it.
        let other = piece(&fs).with_block_cache(cache.clone(), 8, false);
        for number in 9..200 {
            let p = piece(&fs).with_block_cache(cache.clone(), number, false);
            p.sorted_index().unwrap();
            p.sorted_index().unwrap();
        }
        other.sorted_index().unwrap();
        assert!(weak.upgrade().is_none(), "evicted and freed");
        assert!(cache.usage().2 <= 32 << 10);
    }
}
