//! Reading a piece file.

mod entry_layout;
mod iter;
mod key_hashes;

pub use iter::PieceIter;
pub(crate) use key_hashes::KeyHashCursor;

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use super::block::{Block, TRAILER_BYTES};
use super::block_index::BlockIndex;
use super::cache::BlockCache;
use super::entry::Entry;
use super::entry_layout::EntryLayout;
use super::format::{decode_directory, Footer, PieceProperties, Section, SectionId, FOOTER_BYTES};
use super::sorted::SortedIndex;
use crate::error::{Error, Result};
use crate::fs::{FileSystem, RandomAccessFile, ReadMode};
use crate::hash::{key_hash, KEY_HASH_SEED};
use crate::phf::Phf;
use crate::util::checksum_matches;
use crate::util::codec::Decoder;
use entry_layout::read_entry_layout;

/// An open piece file.
///
/// Keeps in memory only what a lookup needs (paper §4.3): the perfect hash,
/// the block offset table and the (normally empty) overflow list. A `get`
/// reads exactly one block. The key-order index is loaded when a scan needs
/// it and kept in the block cache, never in the reader: it would grow with
/// the data.
#[derive(Debug)]
pub struct PieceReader {
    name: String,
    file: Arc<dyn RandomAccessFile>,
    props: PieceProperties,
    pub(super) phf: Phf,
    pub(super) blocks: BlockIndex,
    /// `(hash, slot)` of entries whose hash repeats another's, by hash.
    overflow: Vec<(u64, u32)>,
    pub(super) sections: Vec<Section>,
    /// The piece's format version (from its footer).
    format_version: u32,
    /// How its entries are stored: what every key starts with, left out
    /// of them (format 5), how sequence numbers are coded and whether
    /// entries have tags (format 6).
    layout: EntryLayout,
    /// The shared block cache and this piece's number in it.
    cache: Option<(Arc<BlockCache>, u64)>,
    /// Whether blocks go in the cache too (not when mapped: the page cache
    /// holds them).
    cache_blocks: bool,
}

impl PieceReader {
    /// Opens the piece at `path`, reading it with `mode`.
    /// A piece whose perfect hash is a PtrHash is refused (see
    /// [`Phf::decode_with`]); [`PieceReader::open_with`] can allow it.
    pub fn open(fs: &dyn FileSystem, path: &Path, mode: ReadMode) -> Result<PieceReader> {
        PieceReader::open_with(fs, path, mode, false)
    }

    /// [`PieceReader::open`], reading PtrHash pieces too when
    /// `allow_ptrhash`.
    pub fn open_with(
        fs: &dyn FileSystem,
        path: &Path,
        mode: ReadMode,
        allow_ptrhash: bool,
    ) -> Result<PieceReader> {
        let file = fs.open_read(path, mode)?;
        PieceReader::from_file(file, path.display().to_string(), allow_ptrhash)
    }

    /// Opens a piece from an already open file; `name` appears in errors.
    pub fn from_file(
        file: Arc<dyn RandomAccessFile>,
        name: String,
        allow_ptrhash: bool,
    ) -> Result<PieceReader> {
        Self::load(file, &name, allow_ptrhash).map_err(|e| e.at(&name))
    }

    fn load(
        file: Arc<dyn RandomAccessFile>,
        name: &str,
        allow_ptrhash: bool,
    ) -> Result<PieceReader> {
        let len = file.len();
        if len < FOOTER_BYTES as u64 {
            return Err(Error::corruption(
                "file length",
                format!("at least {FOOTER_BYTES} bytes"),
                len,
            ));
        }
        let footer = Footer::decode(&file.read_copy(len - FOOTER_BYTES as u64, FOOTER_BYTES)?)?;
        let dir_end = footer.dir_offset.checked_add(footer.dir_len as u64);
        if dir_end != Some(len - FOOTER_BYTES as u64) {
            return Err(Error::corruption(
                "section directory location",
                format!("ending at byte {}", len - FOOTER_BYTES as u64),
                format!("{} bytes at {}", footer.dir_len, footer.dir_offset),
            ));
        }
        let dir = file.read_copy(footer.dir_offset, footer.dir_len as usize)?;
        let crc = crc32c::crc32c(&dir);
        if !checksum_matches(footer.dir_crc, crc) {
            return Err(Error::corruption(
                "section directory checksum",
                format!("{:#010x}", footer.dir_crc),
                format!("{crc:#010x}"),
            ));
        }
        let sections = decode_directory(&dir, footer.dir_offset)?;
        let section = |id| read_section(file.as_ref(), &sections, id);

        let props = PieceProperties::decode(&section(SectionId::Properties)?)?;
        if props.key_hash_seed != KEY_HASH_SEED {
            return Err(Error::corruption(
                "key hash seed",
                KEY_HASH_SEED,
                props.key_hash_seed,
            ));
        }
        let first_section = sections.iter().map(|s| s.offset).min().unwrap_or(0);
        if props.data_bytes > first_section {
            return Err(Error::corruption(
                "data region",
                format!("ending before the first section at {first_section}"),
                format!("{} bytes", props.data_bytes),
            ));
        }
        let phf = Phf::decode_with(section(SectionId::Phf)?, allow_ptrhash)?;
        if phf.table_size() as u64 != props.table_size
            || phf.len() as u64 != props.entry_count - props.overflow_count
        {
            return Err(Error::corruption(
                "perfect hash size",
                format!(
                    "{} slots for {} keys",
                    props.table_size,
                    props.entry_count - props.overflow_count
                ),
                format!("{} slots for {} keys", phf.table_size(), phf.len()),
            ));
        }
        let blocks = BlockIndex::decode(
            &section(SectionId::BlockIndex)?,
            props.block_count,
            props.data_bytes,
            TRAILER_BYTES as u64,
        )?;
        let overflow = decode_overflow(&section(SectionId::Overflow)?, &props)?;
        let layout = read_entry_layout(file.as_ref(), &sections, footer.version, &props)?;
        file.done_with(0, len as usize);
        Ok(PieceReader {
            name: name.to_string(),
            file,
            props,
            phf,
            blocks,
            overflow,
            sections,
            format_version: footer.version,
            layout,
            cache: None,
            cache_blocks: false,
        })
    }

    /// The piece's summary numbers.
    pub fn properties(&self) -> &PieceProperties {
        &self.props
    }

    /// The name used in errors (the path it was opened from).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Number of entries, tombstones included.
    pub fn len(&self) -> usize {
        self.props.entry_count as usize
    }

    /// True when the piece holds no entry.
    pub fn is_empty(&self) -> bool {
        self.props.entry_count == 0
    }

    /// Bytes of memory the lookup index takes: perfect hash, block offsets,
    /// overflow list, key prefix.
    pub fn index_memory_bytes(&self) -> usize {
        self.phf.memory_bytes()
            + self.blocks.memory_bytes()
            + self.overflow.len() * 16
            + self.layout.key_prefix.len()
    }

    /// Number of 4 GiB data segments.
    pub fn segment_count(&self) -> usize {
        self.blocks.segment_count()
    }

    /// Looks a key up: one read of one block when the key's hash is unique in
    /// the piece (always, but for 64-bit hash collisions).
    pub fn get(&self, key: &[u8]) -> Result<Option<Entry>> {
        self.get_hashed(key, key_hash(key))
    }

    /// [`PieceReader::get`] with the key's hash already computed.
    pub fn get_hashed(&self, key: &[u8], hash: u64) -> Result<Option<Entry>> {
        self.get_counted(key, hash, &mut ReadCount::default())
    }

    /// [`PieceReader::get_hashed`], adding its reads to `count`.
    pub(crate) fn get_counted(
        &self,
        key: &[u8],
        hash: u64,
        count: &mut ReadCount,
    ) -> Result<Option<Entry>> {
        // A key without the prefix all of the piece's keys have is not
        // among them: no read.
        if self.phf.is_empty() || !key.starts_with(&self.layout.key_prefix) {
            return Ok(None);
        }
        let slot = self.phf.slot(hash) as u64;
        if let Some(e) = self.entry_counted(slot, Some(key), count)? {
            return Ok(Some(e));
        }
        if !self.overflow.is_empty() {
            let from = self.overflow.partition_point(|&(h, _)| h < hash);
            for &(h, s) in &self.overflow[from..] {
                if h != hash {
                    break;
                }
                if let Some(e) = self.entry_counted(s as u64, Some(key), count)? {
                    return Ok(Some(e));
                }
            }
        }
        Ok(None)
    }

    /// Asks the CPU for the perfect-hash memory a get of `hash` reads first
    /// (see [`PieceReader::prefetch_block`]).
    #[inline]
    pub(crate) fn prefetch_slot(&self, hash: u64) {
        self.phf.prefetch(hash);
    }

    /// Asks the file for the block a get of `hash` reads (a mapped file
    /// brings its memory into the CPU's cache). A batch of gets that calls
    /// this for each key before reading any waits for their blocks side by
    /// side instead of one after another.
    #[inline]
    pub(crate) fn prefetch_block(&self, hash: u64) {
        if self.phf.is_empty() {
            return;
        }
        let slot = self.phf.slot(hash) as u64;
        let b = slot / self.props.slots_per_block as u64;
        if b < self.props.block_count {
            let (offset, len) = self.blocks.block(b);
            self.file.prefetch(offset, len);
        }
    }

    /// Slots in block `b`.
    fn block_slots(&self, b: u64) -> usize {
        let k = self.props.slots_per_block as u64;
        (self.props.total_slots() - b * k).min(k) as usize
    }

    fn decode_block(&self, b: u64, bytes: Bytes) -> Result<Block> {
        Block::decode(
            bytes,
            self.block_slots(b),
            self.props.max_block_bytes as usize,
        )
        .map_err(|e| e.at(format_args!("{} block {b}", self.name)))
    }

    /// What every key of the piece starts with, left out of its entries
    /// (empty before format 5, or when the keys share no prefix).
    pub fn key_prefix(&self) -> &[u8] {
        &self.layout.key_prefix
    }

    /// How the piece stores its entries.
    pub(crate) fn entry_layout(&self) -> &EntryLayout {
        &self.layout
    }

    /// Caches this piece's key-order index, and its blocks when
    /// `cache_blocks`, in `cache` under `number`, which no other piece
    /// sharing the cache may use.
    pub fn with_block_cache(
        mut self,
        cache: Arc<BlockCache>,
        number: u64,
        cache_blocks: bool,
    ) -> PieceReader {
        self.cache = Some((cache, number));
        self.cache_blocks = cache_blocks;
        self
    }

    fn block_cache(&self) -> Option<(&BlockCache, u64)> {
        match &self.cache {
            Some((cache, number)) if self.cache_blocks => Some((cache, *number)),
            _ => None,
        }
    }

    /// Reads and verifies block `b`: one read, or none from the cache.
    pub(crate) fn read_block(&self, b: u64) -> Result<Block> {
        self.read_block_counted(b, &mut ReadCount::default())
    }

    /// [`PieceReader::read_block`], adding a read to `count` unless the
    /// cache had the block.
    fn read_block_counted(&self, b: u64, count: &mut ReadCount) -> Result<Block> {
        if let Some((cache, number)) = self.block_cache() {
            if let Some(block) = cache.get(number, b) {
                return Ok(block);
            }
        }
        let (offset, len) = self.blocks.block(b);
        count.reads += 1;
        count.bytes += len as u64;
        let bytes = self
            .file
            .read_at(offset, len)
            .map_err(|e| e.at(&self.name))?;
        let block = self.decode_block(b, bytes)?;
        if let Some((cache, number)) = self.block_cache() {
            cache.insert(number, b, block.clone());
        }
        Ok(block)
    }

    /// `len` bytes at `offset` of the file (one read), in memory of their
    /// own ([`RandomAccessFile::read_copy`]).
    pub(crate) fn read_range(&self, offset: u64, len: usize) -> Result<Bytes> {
        self.file
            .read_copy(offset, len)
            .map_err(|e| e.at(&self.name))
    }

    /// `len` bytes of blocks at `offset` (one read), from the mapping of a
    /// mapped piece: a pass decodes them where they lie and lets go of
    /// them as it goes. Copied out (`read_range`), they made a 4M x 1 KiB
    /// fill's compactions 10-40% longer: its passes read the values again
    /// 4.5 times over, whole windows when a quarter of their blocks is
    /// wanted.
    pub(crate) fn read_blocks(&self, offset: u64, len: usize) -> Result<Bytes> {
        self.file.read_at(offset, len).map_err(|e| e.at(&self.name))
    }

    /// The entry in `slot`, if any: one read.
    pub(crate) fn entry_in_slot(&self, slot: u64) -> Result<Option<Entry>> {
        self.entry_counted(slot, None, &mut ReadCount::default())
    }

    /// Bytes of block `b` on disk.
    pub(crate) fn block_bytes(&self, b: u64) -> usize {
        self.blocks.block(b).1
    }

    /// Which block holds `slot`, and where in it.
    pub(crate) fn block_of(&self, slot: u64) -> (u64, usize) {
        let k = self.props.slots_per_block as u64;
        (slot / k, (slot % k) as usize)
    }

    /// The entry in `slot`, if any and if its key is `key` (when given):
    /// one read, added to `count`.
    fn entry_counted(
        &self,
        slot: u64,
        key: Option<&[u8]>,
        count: &mut ReadCount,
    ) -> Result<Option<Entry>> {
        let k = self.props.slots_per_block as u64;
        let (block, i) = (
            self.read_block_counted(slot / k, count)?,
            (slot % k) as usize,
        );
        match key {
            Some(key) => block.entry_of(i, &self.layout, key),
            None => block.entry(i, &self.layout),
        }
        .map_err(|e| e.at(format_args!("{} slot {slot}", self.name)))
    }

    fn section(&self, id: SectionId) -> Result<Bytes> {
        read_section(self.file.as_ref(), &self.sections, id).map_err(|e| e.at(&self.name))
    }

    /// Lets go of the file's pages this process has mapped (see
    /// [`read_section`]); what was read stays valid.
    pub(crate) fn release_mapped_pages(&self) {
        self.file.done_with(0, self.file.len() as usize);
    }

    /// A caller-defined section (see `write_piece_in_passes`), verified,
    /// in memory of its own (see [`read_section`]).
    pub(crate) fn extra_section(&self, id: u32) -> Result<Option<Bytes>> {
        let Some(s) = self.sections.iter().find(|s| s.id == id) else {
            return Ok(None);
        };
        let bytes = self
            .file
            .read_copy(s.offset, s.len as usize)
            .map_err(|e| e.at(&self.name))?;
        let crc = crc32c::crc32c(&bytes);
        if !checksum_matches(s.crc, crc) {
            return Err(Error::corruption(
                format!("section {id} checksum"),
                format!("{:#010x}", s.crc),
                format!("{crc:#010x}"),
            )
            .at(&self.name));
        }
        Ok(Some(bytes))
    }

    /// Bytes of the file.
    pub fn file_bytes(&self) -> u64 {
        self.file.len()
    }

    /// The key-order index, from the cache or loaded (and verified).
    pub(crate) fn sorted_index(&self) -> Result<Arc<SortedIndex>> {
        if let Some((cache, number)) = &self.cache {
            if let Some(s) = cache.sorted_index(*number) {
                return Ok(s);
            }
        }
        let index = self.section(SectionId::ChunkIndex)?;
        let chunks = self
            .sections
            .iter()
            .find(|s| s.id == SectionId::KeyChunks as u32)
            .expect("decode_directory checked that every required section exists");
        let index = Arc::new(
            SortedIndex::decode(
                &index,
                chunks.offset,
                chunks.len,
                &self.props,
                self.format_version,
            )
            .map_err(|e| e.at(&self.name))?,
        );
        if let Some((cache, number)) = &self.cache {
            cache.insert_sorted_index(*number, index.clone());
        }
        Ok(index)
    }
}

/// Reads done by lookups, for statistics.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReadCount {
    pub(crate) reads: u64,
    pub(crate) bytes: u64,
}

/// A section, verified, in memory of its own (`read_copy`): a section read
/// through a mapping and kept there would keep its pages resident, and the
/// kernel maps the pages around each one read as well (fault-around, 64
/// KiB), so every open piece held about 400 KiB of mapped file in the
/// process: 205 MB of a 16M-key fill's peak RSS, growing with the
/// database. Callers of a file that copies out of its mapping let go of it
/// once they have what they keep.
fn read_section(file: &dyn RandomAccessFile, sections: &[Section], id: SectionId) -> Result<Bytes> {
    let s = sections
        .iter()
        .find(|s| s.id == id as u32)
        .expect("decode_directory checked that every required section exists");
    let bytes = file.read_copy(s.offset, s.len as usize)?;
    let crc = crc32c::crc32c(&bytes);
    if !checksum_matches(s.crc, crc) {
        return Err(Error::corruption(
            format!("{} section checksum", id.name()),
            format!("{:#010x}", s.crc),
            format!("{crc:#010x}"),
        ));
    }
    Ok(bytes)
}

fn decode_overflow(b: &[u8], props: &PieceProperties) -> Result<Vec<(u64, u32)>> {
    if b.len() as u64 != props.overflow_count * 12 {
        return Err(Error::corruption(
            "overflow length",
            props.overflow_count * 12,
            b.len(),
        ));
    }
    let mut d = Decoder::new(b, "overflow");
    let mut v = Vec::with_capacity(props.overflow_count as usize);
    for _ in 0..props.overflow_count {
        v.push((d.u64()?, d.u32()?));
    }
    let mut slots: Vec<u32> = v.iter().map(|&(_, s)| s).collect();
    slots.sort_unstable();
    let in_range = slots
        .iter()
        .all(|&s| (s as u64) >= props.table_size && (s as u64) < props.total_slots());
    if !v.windows(2).all(|w| w[0] <= w[1]) || !in_range || slots.windows(2).any(|w| w[0] == w[1]) {
        return Err(Error::corruption(
            "overflow list",
            format!(
                "sorted, distinct slots in [{}, {})",
                props.table_size,
                props.total_slots()
            ),
            "other values",
        ));
    }
    Ok(v)
}
