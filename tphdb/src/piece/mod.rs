//! Piece files: the immutable files a TPH is made of (paper §3.2, §4.2).
//!
//! A piece holds entries (key, value or tombstone, sequence number) in
//! blocks of `k` slots laid out in the order of the piece's local perfect
//! hash, so a lookup computes the slot in memory and reads one block. Beside
//! the blocks it stores the perfect hash, the block offsets, the 64-bit hash
//! of every key (to rebuild a TPH's global index without reading values) and
//! a key-order index with sampled keys for scans. Every byte is covered by a
//! CRC32C. The layout is in `docs/format.md`.

pub(crate) mod block;
mod block_index;
mod cache;
mod check;
mod entry;
mod entry_layout;
mod format;
mod hash_section;
mod inspect;
mod key_chunks;
mod key_sections;
mod layout;
mod offset_lines;
mod reader;
mod slots;
mod sorted;
mod survey;
mod writer;

pub use block_index::MAX_SEGMENT_BYTES;
pub use cache::BlockCache;
pub(crate) use entry::{check_limits, AsEntry};
pub(crate) use entry::{prefetch_ahead, EntryShape, EntrySource};
pub use entry::{Entry, EntryRef, MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub(crate) use entry_layout::{EntryLayout, SeqCoding};
pub use format::{Compression, PieceProperties};
pub(crate) use hash_section::write_sorted_pairs;
pub(crate) use reader::{KeyHashCursor, ReadCount};
pub use reader::{PieceIter, PieceReader};
pub use sorted::SortedCursor;
pub(crate) use survey::Survey;
pub(crate) use writer::{
    piece_write_memory, write_piece_in_passes, write_planned_piece, KeyOrderSink, KeySections,
    LoadPass, Plan, Sink,
};
pub use writer::{
    write_piece, write_piece_hashed, PieceOptions, DEFAULT_MAX_BLOCK_SLOTS, SAMPLE_INTERVAL,
};
