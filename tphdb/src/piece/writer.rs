//! Writing a piece file.

use std::path::Path;

use rayon::prelude::*;

use super::block_index::{encode_offsets, MAX_SEGMENT_BYTES};
use super::entry::{EntryRef, EntryShape, EntrySource};
use super::format::{
    encode_directory, Compression, Footer, PieceProperties, Section, SectionId, FORMAT_VERSION,
};
use super::key_chunks::encode_key_index;
use super::key_sections::{key_order, EntryKeys};
pub(crate) use super::key_sections::{KeyOrderSink, KeySections};
use super::layout::{block_quantum, BlockWriter};
use super::slots::SlotLayout;
use super::survey::{survey, Survey};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, WritableFile};
use crate::hash::{key_hash, KEY_HASH_SEED};
use crate::phf::{Phf, PhfConfig, PhfKind};

/// Section ids from here on are free for callers (see
/// [`write_piece_in_passes`]).
pub(crate) const FIRST_EXTRA_SECTION: u32 = 16;

/// One key in this many is kept as a sample for seeks (paper §3.3).
pub const SAMPLE_INTERVAL: usize = 64;
/// Slots a block holds at most by default: entries under an eighth of a
/// page get blocks smaller than one (see `Options::max_block_slots`).
pub const DEFAULT_MAX_BLOCK_SLOTS: usize = 8;
/// An empty slot in `SlotLayout::by_slot`.
pub(super) const NONE: u32 = u32::MAX;

/// How a piece is written.
#[derive(Clone, Debug)]
pub struct PieceOptions {
    /// Perfect hash implementation of the local index.
    pub phf_kind: PhfKind,
    /// Perfect hash parameters (load factor, bucket size, segments).
    pub phf: PhfConfig,
    /// Blocks hold about this many bytes: `k = max(page_size / avg entry, 1)`,
    /// at most `max_block_slots`.
    pub page_size: usize,
    /// Slots a block holds at most (`Options::max_block_slots`): a get
    /// reads and checksums its whole block, so small entries get blocks
    /// smaller than a page.
    pub max_block_slots: usize,
    /// Block compression.
    pub compression: Compression,
    /// Largest data segment; offsets within a segment are 32-bit. Only
    /// tests set this below the default of 4 GiB.
    pub max_segment_bytes: u64,
    /// Start a block on the next page boundary when it would otherwise
    /// straddle one, so that a read of a block that fits in a page touches
    /// one page, for the padding (`Options::align_blocks`).
    pub align_blocks: bool,
}

impl Default for PieceOptions {
    fn default() -> Self {
        PieceOptions {
            phf_kind: PhfKind::CpHash,
            phf: PhfConfig::default(),
            page_size: 4096,
            max_block_slots: DEFAULT_MAX_BLOCK_SLOTS,
            compression: Compression::None,
            max_segment_bytes: MAX_SEGMENT_BYTES,
            align_blocks: false,
        }
    }
}

/// Writes `entries` (distinct keys, any order) as a piece file at `path` and
/// syncs it. Runs in the current rayon thread pool.
pub fn write_piece(
    fs: &dyn FileSystem,
    path: &Path,
    entries: &[EntryRef<'_>],
    options: &PieceOptions,
) -> Result<PieceProperties> {
    let hashes: Vec<u64> = entries.par_iter().map(|e| key_hash(e.key)).collect();
    write_piece_hashed(fs, path, entries, &hashes, options)
}

/// [`write_piece`] with each key's [`key_hash`] already computed
/// (`hashes[i]` for `entries[i]`). They must be the keys' own: gets look
/// an entry up by its key's hash, and a key-order scan finds the slot of
/// every entry but those in overflow slots from it.
pub fn write_piece_hashed(
    fs: &dyn FileSystem,
    path: &Path,
    entries: &[EntryRef<'_>],
    hashes: &[u64],
    options: &PieceOptions,
) -> Result<PieceProperties> {
    write_piece_in_passes(fs, path, entries, hashes, options, &[], 1, &mut |_| {
        Ok(entries)
    })
}

/// Memory writing a piece of `entries` holds beyond the entries
/// themselves: two hashes an entry (the caller's hashes, and room for the
/// key-hash section's counting sort, 5 bytes an entry, or a share's second
/// hashes), the slot table (an entry index a slot; each entry's slot, for
/// the key-order index, takes its place at the end), and the file's write
/// buffer. Flushes and merges count it with what they hold
/// ([`crate::DBStats::job_memory_bytes`]).
pub(crate) fn piece_write_memory(entries: usize, options: &PieceOptions) -> u64 {
    let slot_table = 4.0 * options.phf.table_factor.max(1.0);
    (entries as f64 * (16.0 + slot_table)) as u64 + crate::fs::WRITE_BUFFER_BYTES as u64
}

/// The perfect hash's table size over key count: minimal where the
/// entries' lengths are even. Then every block holds `k` entries and they
/// are of about one size, so a reader keeps their offsets in a few bits a
/// block (`block_index`), against about 11 where one slot in eleven is
/// empty and blocks hold `k - 1` entries as often as not: at 1 KiB values
/// 0.2 bytes a key less, for a hash about 0.9 bits a key larger and 15%
/// slower to build. Uneven entries keep `config`'s factor.
fn table_factor(survey: &Survey, entries: usize, config: &PhfConfig) -> f64 {
    match survey.lengths_are_even(entries) {
        true => 1.0,
        false => config.table_factor,
    }
}

/// The entries of one pass of [`write_piece_in_passes`]: handed the run of
/// slots the pass writes (entry indices, [`NONE`] for an empty slot),
/// returns where to find those entries whole: the entries the piece was
/// planned from, or its blocks will not match its other sections.
pub(crate) type LoadPass<'a, S> = &'a mut dyn FnMut(&[u32]) -> Result<S>;

/// Writes a piece of `entries` (with their `hashes`, as
/// [`write_piece_hashed`]) whose values need not be at hand: the piece is
/// planned from their shapes (key, sequence number, value length), then its
/// blocks are written in `passes` runs of slots, each from the entries
/// `load` finds for it, so that about `1 / passes` of the values are held
/// at a time; the file is the same for any number of passes.
/// `extra_sections` (ids of [`FIRST_EXTRA_SECTION`] and up) are stored and
/// checksummed like the others: a TPH's head piece carries its global
/// index this way.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_piece_in_passes<E: EntryShape, S: EntrySource>(
    fs: &dyn FileSystem,
    path: &Path,
    entries: &[E],
    hashes: &[u64],
    options: &PieceOptions,
    extra_sections: &[(u32, &[u8])],
    passes: usize,
    load: LoadPass<'_, S>,
) -> Result<PieceProperties> {
    if hashes.len() != entries.len() {
        return Err(Error::InvalidArgument(format!(
            "{} hashes for {} entries",
            hashes.len(),
            entries.len()
        )));
    }
    let survey = survey(entries)?;
    let key_order = match survey.in_key_order {
        true => None,
        false => Some(key_order(entries)?),
    };
    let mut keys = EntryKeys {
        entries,
        hashes,
        key_order,
    };
    let plan = Plan {
        survey,
        hashes,
        keys: &mut keys,
    };
    write_planned_piece(fs, path, plan, options, extra_sections, passes, load)
}

/// What a piece is planned from when its entries are not listed: the
/// survey of its entries, their key hashes (entry `i` is the `i`th), and
/// where its key sections come from.
pub(crate) struct Plan<'a> {
    pub(crate) survey: Survey,
    pub(crate) hashes: &'a [u64],
    pub(crate) keys: &'a mut dyn KeySections,
}

/// [`write_piece_in_passes`] of the entries `plan` describes: the blocks
/// from what `load` finds for each run of slots, the key sections from
/// `plan.keys`.
pub(crate) fn write_planned_piece<S: EntrySource>(
    fs: &dyn FileSystem,
    path: &Path,
    plan: Plan<'_>,
    options: &PieceOptions,
    extra_sections: &[(u32, &[u8])],
    passes: usize,
    load: LoadPass<'_, S>,
) -> Result<PieceProperties> {
    let Plan {
        survey,
        hashes,
        keys,
    } = plan;
    let n = hashes.len();
    check_inputs(n, options, extra_sections)?;
    let phf_config = PhfConfig {
        segment_keys: segment_keys(&options.phf, n),
        table_factor: table_factor(&survey, n, &options.phf),
        ..options.phf.clone()
    };
    let phf = Phf::build(options.phf_kind, hashes, &phf_config)?.phf;
    let slots = SlotLayout::new(&phf, hashes)?;

    let avg = survey.average_stored_bytes(n);
    let k = (options.page_size / avg).clamp(1, options.max_block_slots.clamp(1, u32::MAX as usize));
    let quantum = block_quantum(k, avg, options.page_size);
    let mut file = fs.create(path)?;
    let block_count = slots.by_slot.len().div_ceil(k);
    let entry_layout = survey.entry_layout();
    let mut blocks = BlockWriter::new(file.len(), block_count, quantum, &entry_layout, options);
    let slots_per_pass = block_count.div_ceil(passes.max(1)).max(1) * k;
    for run in slots.by_slot.chunks(slots_per_pass) {
        let source = load(run)?;
        blocks.write(file.as_mut(), &source, run, k)?;
    }
    let (starts, max_block_bytes) = blocks.finish(file.as_mut())?;
    let props = properties(
        &survey,
        n,
        &phf,
        &slots,
        k,
        file.len(),
        max_block_bytes,
        options,
    );

    let mut sections = Sections::default();
    let file = file.as_mut();
    sections.add(file, SectionId::Properties as u32, &props.encode())?;
    let mut buf = Vec::new();
    phf.encode(&mut buf);
    sections.add(file, SectionId::Phf as u32, &buf)?;
    buf.clear();
    encode_offsets(&starts, options.max_segment_bytes, &mut buf);
    sections.add(file, SectionId::BlockIndex as u32, &buf)?;
    sections.add(
        file,
        SectionId::Overflow as u32,
        &slots.encode_overflow(hashes),
    )?;
    sections.add_streamed(file, SectionId::Hashes as u32, &mut |sink| {
        keys.write_key_hashes(sink)
    })?;
    let table_size = slots.table_size as u64;
    let slot_of = slots.into_slot_of(n);
    let mut chunk_index = Vec::new();
    sections.add_streamed(file, SectionId::KeyChunks as u32, &mut |sink| {
        encode_key_index(&mut *keys, &slot_of, table_size, sink, &mut chunk_index)
    })?;
    sections.add(file, SectionId::ChunkIndex as u32, &chunk_index)?;
    if !entry_layout.key_prefix.is_empty() {
        sections.add(file, SectionId::KeyPrefix as u32, &entry_layout.key_prefix)?;
    }
    if let Some(stored) = entry_layout.stored_key_len {
        let key_len = stored + entry_layout.key_prefix.len() as u32;
        sections.add(file, SectionId::KeyLength as u32, &key_len.to_le_bytes())?;
    }
    for &(id, bytes) in extra_sections {
        sections.add(file, id, bytes)?;
    }
    sections.finish(file)?;
    file.sync()?;
    Ok(props)
}

/// A piece's perfect hash has at least this many segments, while each
/// keeps at least [`MIN_SEGMENT_KEYS`] keys.
const MIN_SEGMENTS: usize = 8;
const MIN_SEGMENT_KEYS: usize = 1024;

/// Keys per perfect-hash segment for a piece of `keys` keys: the
/// configured count, or fewer so that the piece has [`MIN_SEGMENTS`]. A
/// compaction pass over a range of hashes (a level-0 merge or a push-down
/// takes one partition of the level below per pass, eight by default)
/// reads the piece's blocks of that range and the segment straddling each
/// end; a piece of two segments of 4,096 keys was read half at each pass,
/// four times in all. Small segments cost memory (96 bytes each loaded)
/// and some bits a key, but only in small pieces.
fn segment_keys(config: &PhfConfig, keys: usize) -> usize {
    config
        .segment_keys
        .min((keys / MIN_SEGMENTS).max(MIN_SEGMENT_KEYS))
}

/// Refuses inputs a piece cannot hold, before anything is written.
fn check_inputs(
    entries: usize,
    options: &PieceOptions,
    extra_sections: &[(u32, &[u8])],
) -> Result<()> {
    if extra_sections
        .iter()
        .any(|&(id, _)| id < FIRST_EXTRA_SECTION)
    {
        return Err(Error::InvalidArgument(
            "extra section ids start at 16".into(),
        ));
    }
    if options.page_size == 0 || options.max_segment_bytes == 0 {
        return Err(Error::InvalidArgument(
            "page_size and max_segment_bytes must be positive".into(),
        ));
    }
    if entries >= NONE as usize {
        return Err(Error::InvalidArgument(format!(
            "{entries} entries exceed a piece's limit of 2^32 - 1"
        )));
    }
    Ok(())
}

/// The properties section's numbers.
#[allow(clippy::too_many_arguments)]
fn properties(
    survey: &Survey,
    entry_count: usize,
    phf: &Phf,
    slots: &SlotLayout,
    k: usize,
    data_bytes: u64,
    max_block_bytes: usize,
    options: &PieceOptions,
) -> PieceProperties {
    PieceProperties {
        entry_count: entry_count as u64,
        table_size: phf.table_size() as u64,
        overflow_count: slots.overflow.len() as u64,
        slots_per_block: k as u32,
        page_size: options.page_size.min(u32::MAX as usize) as u32,
        block_count: slots.by_slot.len().div_ceil(k) as u64,
        data_bytes,
        max_block_bytes: max_block_bytes as u64,
        compression: options.compression,
        key_hash_seed: KEY_HASH_SEED,
        min_seq: survey.min_seq,
        max_seq: survey.max_seq,
        tombstone_count: survey.tombstones,
        key_bytes: survey.key_bytes,
        value_bytes: survey.value_bytes,
    }
}

/// Where a section streamed to the file goes, a piece at a time.
pub(crate) type Sink<'a> = &'a mut dyn FnMut(&[u8]) -> Result<()>;

/// Sections streamed to the file are handed over in pieces about this big.
pub(super) const SINK_BUFFER_BYTES: usize = 64 << 10;

/// The sections written so far, for the directory.
#[derive(Default)]
struct Sections(Vec<Section>);

impl Sections {
    /// Appends section `id` to `file` and notes where it is.
    fn add(&mut self, file: &mut dyn WritableFile, id: u32, bytes: &[u8]) -> Result<()> {
        self.0.push(Section {
            id,
            offset: file.len(),
            len: bytes.len() as u64,
            crc: crc32c::crc32c(bytes),
        });
        file.append(bytes)
    }

    /// Appends section `id` as `write` hands it over, in pieces, and notes
    /// where it is: a big section need not be held in memory whole.
    fn add_streamed(
        &mut self,
        file: &mut dyn WritableFile,
        id: u32,
        write: &mut dyn FnMut(Sink<'_>) -> Result<()>,
    ) -> Result<()> {
        let offset = file.len();
        let mut crc = 0;
        write(&mut |bytes| {
            crc = crc32c::crc32c_append(crc, bytes);
            file.append(bytes)
        })?;
        self.0.push(Section {
            id,
            offset,
            len: file.len() - offset,
            crc,
        });
        Ok(())
    }

    /// Appends the directory and the footer.
    fn finish(self, file: &mut dyn WritableFile) -> Result<()> {
        let dir = encode_directory(&self.0);
        let footer = Footer {
            version: FORMAT_VERSION,
            dir_offset: file.len(),
            dir_len: dir.len() as u32,
            dir_crc: crc32c::crc32c(&dir),
        };
        file.append(&dir)?;
        file.append(&footer.encode())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::fs::{MemFs, ReadMode};
    use crate::piece::PieceReader;

    type Data = Vec<(Vec<u8>, Option<Vec<u8>>)>;

    /// Entries of mixed sizes, some tombstones, two sharing a key hash.
    fn entries() -> (Data, Vec<u64>) {
        let data: Data = (0..3000u32)
            .map(|i| {
                let value = (i % 17 != 0).then(|| vec![i as u8; (i as usize * 37) % 1500]);
                (
                    format!("key{:08}", i.wrapping_mul(2_654_435_761)).into_bytes(),
                    value,
                )
            })
            .collect();
        let mut hashes: Vec<u64> = data.iter().map(|(k, _)| key_hash(k)).collect();
        hashes[7] = hashes[1500];
        (data, hashes)
    }

    fn refs(data: &[(Vec<u8>, Option<Vec<u8>>)]) -> Vec<EntryRef<'_>> {
        data.iter()
            .map(|(k, v)| EntryRef {
                key: k,
                value: v.as_deref(),
                seq: k.len() as u64 + 9,
            })
            .collect()
    }

    /// The entries of a run, found by index as a pass's loader would.
    struct Found<'a>(HashMap<u32, EntryRef<'a>>);

    impl EntrySource for Found<'_> {
        fn entry(&self, i: u32) -> Option<EntryRef<'_>> {
            self.0.get(&i).copied()
        }
    }

    #[test]
    fn a_piece_written_in_passes_is_the_piece_written_whole() {
        let (data, hashes) = entries();
        let entries = refs(&data);
        for align_blocks in [false, true] {
            let options = PieceOptions {
                align_blocks,
                ..PieceOptions::default()
            };
            let fs = MemFs::new();
            let whole = Path::new("/whole.ph");
            write_piece_hashed(&fs, whole, &entries, &hashes, &options).unwrap();
            let expected = fs.read_file(whole).unwrap();
            for passes in [1, 2, 3, 7, 5000] {
                let path = Path::new("/passes.ph");
                let mut runs = 0;
                write_piece_in_passes(
                    &fs,
                    path,
                    &entries,
                    &hashes,
                    &options,
                    &[],
                    passes,
                    &mut |run| {
                        runs += 1;
                        let found = run
                            .iter()
                            .filter(|&&i| i != NONE)
                            .map(|&i| (i, entries[i as usize]));
                        Ok(Found(found.collect()))
                    },
                )
                .unwrap();
                assert!(
                    runs <= passes && (runs == 1) == (passes == 1),
                    "{runs} runs"
                );
                assert!(fs.read_file(path).unwrap() == expected, "{passes} passes");
            }
            let r = PieceReader::open(&fs, whole, ReadMode::Pread).unwrap();
            // Key 7 was given another key's hash.
            for (k, v) in data
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != 7)
                .map(|(_, e)| e)
            {
                assert_eq!(r.get(k).unwrap().unwrap().value.as_deref(), v.as_deref());
            }
        }
    }

    #[test]
    fn a_pass_without_an_entry_fails_the_write() {
        let (data, hashes) = entries();
        let entries = refs(&data);
        let fs = MemFs::new();
        let result = write_piece_in_passes(
            &fs,
            Path::new("/p.ph"),
            &entries,
            &hashes,
            &PieceOptions::default(),
            &[],
            3,
            &mut |run| {
                let found = run
                    .iter()
                    .filter(|&&i| i != NONE && i != 2999)
                    .map(|&i| (i, entries[i as usize]));
                Ok(Found(found.collect()))
            },
        );
        assert!(matches!(result, Err(Error::Internal(_))), "{result:?}");
    }

    /// The memory a flush or merge counts for writing a piece covers the
    /// tables the writer made: two hashes an entry and an entry index a
    /// slot of the table it built, with the overflow slots.
    #[test]
    fn the_counted_write_memory_covers_the_writers_tables() {
        let (data, hashes) = entries();
        let entries = refs(&data);
        let fs = MemFs::new();
        for table_factor in [1.0, 1.1, 1.5] {
            let mut options = PieceOptions::default();
            options.phf.table_factor = table_factor;
            let props =
                write_piece_hashed(&fs, Path::new("/p.ph"), &entries, &hashes, &options).unwrap();
            let slots = props.table_size + props.overflow_count;
            let tables = 16 * entries.len() as u64 + 4 * slots;
            let counted = piece_write_memory(entries.len(), &options);
            assert!(
                counted >= tables && counted - tables <= (1 << 20) + entries.len() as u64,
                "table factor {table_factor}: {counted} counted for {tables}"
            );
        }
    }
}
