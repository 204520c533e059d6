//! Reading a piece file.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use super::block::{Block, TRAILER_BYTES};
use super::block_index::BlockIndex;
use super::cache::BlockCache;
use super::entry::Entry;
use super::format::{decode_directory, Footer, PieceProperties, Section, SectionId, FOOTER_BYTES};
use super::sorted::{SortedCursor, SortedIndex};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, RandomAccessFile, ReadMode};
use crate::hash::{key_hash, KEY_HASH_SEED};
use crate::phf::Phf;
use crate::util::checksum_matches;
use crate::util::codec::{u64_at, Decoder};

/// Slot-order iteration reads this many bytes of blocks per call.
const SCAN_READ_BYTES: usize = 1 << 20;

/// [`PieceReader::for_each_key_hash`] reads the key hashes this many bytes
/// at a time (a multiple of the 16 bytes of a pair).
const HASH_CHUNK_BYTES: u64 = 1 << 20;

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
        let footer = Footer::decode(&file.read_at(len - FOOTER_BYTES as u64, FOOTER_BYTES)?)?;
        let dir_end = footer.dir_offset.checked_add(footer.dir_len as u64);
        if dir_end != Some(len - FOOTER_BYTES as u64) {
            return Err(Error::corruption(
                "section directory location",
                format!("ending at byte {}", len - FOOTER_BYTES as u64),
                format!("{} bytes at {}", footer.dir_len, footer.dir_offset),
            ));
        }
        let dir = file.read_at(footer.dir_offset, footer.dir_len as usize)?;
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
        file.done_with(0, len as usize);
        Ok(PieceReader {
            name: name.to_string(),
            file,
            props,
            phf,
            blocks,
            overflow,
            sections,
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
    /// overflow list.
    pub fn index_memory_bytes(&self) -> usize {
        self.phf.memory_bytes() + self.blocks.memory_bytes() + self.overflow.len() * 16
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
        if self.phf.is_empty() {
            return Ok(None);
        }
        let slot = self.phf.slot(hash) as u64;
        if let Some(e) = self.entry_counted(slot, count)? {
            if e.key == key {
                return Ok(Some(e));
            }
        }
        if !self.overflow.is_empty() {
            let from = self.overflow.partition_point(|&(h, _)| h < hash);
            for &(h, s) in &self.overflow[from..] {
                if h != hash {
                    break;
                }
                if let Some(e) = self.entry_counted(s as u64, count)? {
                    if e.key == key {
                        return Ok(Some(e));
                    }
                }
            }
        }
        Ok(None)
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

    /// `len` bytes at `offset` of the file (one read).
    pub(crate) fn read_range(&self, offset: u64, len: usize) -> Result<Bytes> {
        self.file.read_at(offset, len).map_err(|e| e.at(&self.name))
    }

    /// The entry in `slot`, if any: one read.
    pub(crate) fn entry_in_slot(&self, slot: u64) -> Result<Option<Entry>> {
        self.entry_counted(slot, &mut ReadCount::default())
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

    /// The entry in `slot`, if any: one read, added to `count`.
    fn entry_counted(&self, slot: u64, count: &mut ReadCount) -> Result<Option<Entry>> {
        let k = self.props.slots_per_block as u64;
        self.read_block_counted(slot / k, count)?
            .entry((slot % k) as usize)
            .map_err(|e| e.at(format_args!("{} slot {slot}", self.name)))
    }

    fn section(&self, id: SectionId) -> Result<Bytes> {
        read_section(self.file.as_ref(), &self.sections, id).map_err(|e| e.at(&self.name))
    }

    /// The 64-bit key hash of every entry, ascending; what a TPH's global
    /// index can be rebuilt from without reading keys or values.
    pub fn key_hashes(&self) -> Result<Vec<u64>> {
        Ok(self.key_hash_section()?.iter().map(|(h, _)| h).collect())
    }

    /// The verified key-hash section: `(key_hash, key_hash2)` of every entry,
    /// ascending.
    pub(crate) fn key_hash_section(&self) -> Result<HashSection> {
        let b = self.section(SectionId::Hashes)?;
        let s = HashSection(b);
        let n = s.len();
        let sorted = (1..n).all(|i| s.get(i - 1) <= s.get(i));
        if s.0.len() as u64 != self.props.entry_count * 16 || !sorted {
            return Err(Error::corruption(
                "key hashes",
                format!("{} ascending hash pairs", self.props.entry_count),
                format!("{} bytes, sorted: {sorted}", s.0.len()),
            )
            .at(&self.name));
        }
        Ok(s)
    }

    /// Calls `f` with `(key_hash, key_hash2)` of every entry, ascending,
    /// reading the key-hash section in chunks of [`HASH_CHUNK_BYTES`]: the
    /// memory it takes does not grow with the piece. Order and count are
    /// checked as it goes, the section's checksum at the end: on an error
    /// `f` may have seen entries of a damaged section, and the caller must
    /// discard what it made of them.
    pub(crate) fn for_each_key_hash(&self, f: impl FnMut(u64, u64)) -> Result<()> {
        let result = self.for_each_key_hash_chunked(f);
        // The chunks were let go of as they were read, but the kernel maps
        // the pages around each one read too.
        self.release_mapped_pages();
        result
    }

    fn for_each_key_hash_chunked(&self, mut f: impl FnMut(u64, u64)) -> Result<()> {
        let section = self
            .sections
            .iter()
            .find(|s| s.id == SectionId::Hashes as u32)
            .expect("decode_directory checked that every required section exists");
        let bad = |what: String| {
            Error::corruption(
                "key hashes",
                format!("{} ascending hash pairs", self.props.entry_count),
                what,
            )
            .at(&self.name)
        };
        if section.len != self.props.entry_count * 16 {
            return Err(bad(format!("{} bytes", section.len)));
        }
        let (mut crc, mut at, mut prev) = (0u32, 0u64, (0u64, 0u64));
        while at < section.len {
            let n = (section.len - at).min(HASH_CHUNK_BYTES) as usize;
            let chunk = self.read_range(section.offset + at, n)?;
            crc = crc32c::crc32c_append(crc, &chunk);
            for i in 0..n / 16 {
                let pair = (u64_at(&chunk, 2 * i), u64_at(&chunk, 2 * i + 1));
                if pair < prev {
                    return Err(bad(format!("{pair:?} after {prev:?}")));
                }
                prev = pair;
                f(pair.0, pair.1);
            }
            self.file.done_with(section.offset + at, n);
            at += n as u64;
        }
        if !checksum_matches(section.crc, crc) {
            return Err(Error::corruption(
                "key hashes section checksum",
                format!("{:#010x}", section.crc),
                format!("{crc:#010x}"),
            )
            .at(&self.name));
        }
        Ok(())
    }

    /// Lets go of the file's pages this process has mapped (see
    /// [`read_section`]); what was read stays valid.
    pub(crate) fn release_mapped_pages(&self) {
        self.file.done_with(0, self.file.len() as usize);
    }

    /// A caller-defined section (see `write_piece_with_sections`), verified,
    /// in memory of its own (see [`read_section`]).
    pub(crate) fn extra_section(&self, id: u32) -> Result<Option<Bytes>> {
        let Some(s) = self.sections.iter().find(|s| s.id == id) else {
            return Ok(None);
        };
        let bytes = self
            .file
            .read_at(s.offset, s.len as usize)
            .map(|b| Bytes::copy_from_slice(&b))
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
            SortedIndex::decode(&index, chunks.offset, chunks.len, &self.props)
                .map_err(|e| e.at(&self.name))?,
        );
        if let Some((cache, number)) = &self.cache {
            cache.insert_sorted_index(*number, index.clone());
        }
        Ok(index)
    }

    /// Every entry, in slot (storage) order, reading blocks sequentially in
    /// large batches.
    pub fn iter(&self) -> PieceIter<'_> {
        PieceIter {
            reader: self,
            next_block: 0,
            pending: Vec::new(),
            block: None,
            slot: 0,
            window: None,
        }
    }

    /// A cursor over the entries in key order (bytewise), with seeks.
    pub fn sorted_cursor(&self) -> Result<SortedCursor<&PieceReader>> {
        SortedCursor::new(self)
    }
}

/// Reads done by lookups, for statistics.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReadCount {
    pub(crate) reads: u64,
    pub(crate) bytes: u64,
}

/// `(key_hash, key_hash2)` of every entry of a piece, ascending.
#[derive(Clone, Debug)]
pub(crate) struct HashSection(Bytes);

impl HashSection {
    pub(crate) fn len(&self) -> usize {
        self.0.len() / 16
    }

    pub(crate) fn get(&self, i: usize) -> (u64, u64) {
        (u64_at(&self.0, 2 * i), u64_at(&self.0, 2 * i + 1))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Whether some entry has exactly these two hashes.
    pub(crate) fn contains(&self, h: u64, h2: u64) -> bool {
        let i = self.lower_bound((h, h2));
        i < self.len() && self.get(i) == (h, h2)
    }

    fn lower_bound(&self, x: (u64, u64)) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.get(mid) < x {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }
}

/// A section, verified, copied out of the file: a section read through a
/// mapping and kept there would keep its pages resident, and the kernel
/// maps the pages around each one read as well (fault-around, 64 KiB), so
/// every open piece held about 400 KiB of mapped file in the process: 205
/// MB of a 16M-key fill's peak RSS, growing with the database. Callers let
/// go of the mapping once they have what they keep.
fn read_section(file: &dyn RandomAccessFile, sections: &[Section], id: SectionId) -> Result<Bytes> {
    let s = sections
        .iter()
        .find(|s| s.id == id as u32)
        .expect("decode_directory checked that every required section exists");
    let bytes = Bytes::copy_from_slice(&file.read_at(s.offset, s.len as usize)?);
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

/// Iterator over a piece's entries in slot order; see [`PieceReader::iter`].
pub struct PieceIter<'a> {
    reader: &'a PieceReader,
    next_block: u64,
    /// Read but not yet decoded blocks, front first.
    pending: Vec<(u64, Bytes)>,
    block: Option<Block>,
    slot: usize,
    /// The file range last read, let go of when the next is read: a scan
    /// reads each block once.
    window: Option<(u64, usize)>,
}

impl Drop for PieceIter<'_> {
    fn drop(&mut self) {
        // Each window was let go of as the next was read; this also drops
        // the pages the kernel mapped around them.
        self.reader.release_mapped_pages();
    }
}

impl PieceIter<'_> {
    fn fill(&mut self) -> Result<()> {
        let r = self.reader;
        let count = r.props.block_count;
        let first = self.next_block;
        if let Some((start, len)) = self.window.take() {
            r.file.done_with(start, len);
        }
        let mut last = first + 1;
        while last < count && r.blocks.range(first, last + 1).1 <= SCAN_READ_BYTES {
            last += 1;
        }
        let (start, len) = r.blocks.range(first, last);
        let bytes = r.file.read_at(start, len).map_err(|e| e.at(&r.name))?;
        self.window = Some((start, len));
        for b in (first..last).rev() {
            let (off, len) = r.blocks.block(b);
            let at = (off - start) as usize;
            self.pending.push((b, bytes.slice(at..at + len)));
        }
        self.next_block = last;
        Ok(())
    }
}

impl Iterator for PieceIter<'_> {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        loop {
            if let Some(block) = &self.block {
                while self.slot < block.slot_count() {
                    let i = self.slot;
                    self.slot += 1;
                    match block.entry(i) {
                        Ok(Some(e)) => return Some(Ok(e)),
                        Ok(None) => {}
                        Err(e) => {
                            self.block = None;
                            self.next_block = self.reader.props.block_count;
                            return Some(Err(e.at(&self.reader.name)));
                        }
                    }
                }
            }
            if self.pending.is_empty() {
                if self.next_block >= self.reader.props.block_count {
                    return None;
                }
                if let Err(e) = self.fill() {
                    self.next_block = self.reader.props.block_count;
                    return Some(Err(e));
                }
            }
            let (b, bytes) = self.pending.pop().expect("filled above");
            match self.reader.decode_block(b, bytes) {
                Ok(block) => {
                    self.block = Some(block);
                    self.slot = 0;
                }
                Err(e) => {
                    self.pending.clear();
                    self.next_block = self.reader.props.block_count;
                    return Some(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{mapped_resident_bytes, PosixFs, ReadMode};
    use crate::piece::{write_piece, EntryRef, PieceOptions};

    #[test]
    fn reading_every_key_hash_leaves_no_mapped_page_resident() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hashes.ph");
        let keys: Vec<Vec<u8>> = (0..100_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let entries: Vec<EntryRef<'_>> = keys
            .iter()
            .map(|k| EntryRef {
                key: k,
                value: Some(b"value"),
                seq: 1,
            })
            .collect();
        write_piece(&PosixFs, &path, &entries, &PieceOptions::default()).unwrap();
        let r = PieceReader::open(&PosixFs, &path, ReadMode::Mmap).unwrap();
        let mut n = 0;
        r.for_each_key_hash(|_, _| n += 1).unwrap();
        assert_eq!(n, keys.len());
        assert_eq!(mapped_resident_bytes(&path), 0);
    }
}
