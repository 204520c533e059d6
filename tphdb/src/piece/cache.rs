//! The block cache: verified, decoded blocks of every piece of a database,
//! shared by its readers, so hot blocks skip the disk when pieces are read
//! with `pread` or `O_DIRECT` (mmap reads have the page cache instead).
//!
//! Keys are `(piece number, block)`. Piece numbers are never reused, so an
//! entry can never answer for another file; blocks of deleted pieces simply
//! age out.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::block::Block;

/// Bytes charged per cached block beyond its contents (key, entry, Bytes).
const ENTRY_OVERHEAD: u64 = 96;

#[derive(Clone)]
struct BlockWeight;

impl Weighter<(u64, u64), Block> for BlockWeight {
    fn weight(&self, _: &(u64, u64), block: &Block) -> u64 {
        block.raw_len() as u64 + ENTRY_OVERHEAD
    }
}

/// A size-bounded cache of blocks (S3-FIFO eviction).
pub struct BlockCache {
    blocks: Cache<(u64, u64), Block, BlockWeight>,
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
            blocks: Cache::with_weighter(items, capacity, BlockWeight),
            capacity,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub(crate) fn get(&self, piece: u64, block: u64) -> Option<Block> {
        let found = self.blocks.get(&(piece, block));
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Relaxed);
        found
    }

    pub(crate) fn insert(&self, piece: u64, block: u64, b: Block) {
        self.blocks.insert((piece, block), b);
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
