use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use super::*;
use crate::fs::{FileSystem, MemFs, ReadMode};
use crate::hash::test_support::with_hash_bits;
use crate::memtable::MemTable;
use crate::piece::PieceOptions;
use crate::tph::head::LiveKeySource;
use crate::tph::{merge, piece_file_name, MergeOutcome, PieceReads, Written};

/// The context of a flush into `dir`.
fn context<'a>(
    fs: &'a Arc<dyn FileSystem>,
    dir: &'a PathBuf,
    reads: &'a PieceReads,
    options: &'a PieceOptions,
) -> MergeContext<'a> {
    MergeContext {
        fs,
        dir,
        reads,
        piece_options: options,
        sig_bits: 8,
        field_bits: None,
        level: 0,
        partition: 0,
        bottom: false,
        max_pieces: 16,
        push_past_bytes: None,
        bottom_pushed_near: None,
        min_live_ratio: 0.2,
        gc_input_bytes: None,
        fold_memory_bytes: u64::MAX,
        new_number: 7,
        index_number: None,
        // A few chunks at a time, in several passes over the entries.
        index_memory_bytes: 128 * crate::phf::fuse::BUILD_BYTES_PER_KEY,
        job_memory: None,
        hashes: 0..=u64::MAX,
        pinned: &[],
        inputs: &[],
        carried_down: &[],
        below: None,
    }
}

/// A memtable of `n` keys written twice or three times, some deleted last.
fn memtable(n: u32) -> MemTable {
    let mem = MemTable::new(1, 1024, true);
    let mut seq = 0;
    for round in 0..3u32 {
        for i in (0..n).filter(|i| round < 2 || i % 3 == 0) {
            seq += 1;
            let key = format!("key{i:06}");
            let value = vec![round as u8; (i % 50) as usize];
            let value = (round < 2 || i % 2 == 0).then_some(&value[..]);
            mem.insert(key.as_bytes(), seq, value);
        }
    }
    mem
}

/// Writes the memtable's newest versions as a level-0 TPH both ways:
/// straight from the memtable, and as a merge into no base of the same
/// entries copied. Returns the TPH written straight, and both files.
fn both_ways(mem: &MemTable) -> (Tph, Vec<u8>, Vec<u8>) {
    let mem_fs = MemFs::new();
    let fs: Arc<dyn FileSystem> = Arc::new(mem_fs.clone());
    let options = PieceOptions {
        page_size: 256,
        phf: crate::phf::PhfConfig {
            segment_keys: 64,
            ..crate::phf::PhfConfig::default()
        },
        ..PieceOptions::default()
    };
    let reads = PieceReads::from(ReadMode::Pread);
    let (straight, merged) = (PathBuf::from("/straight"), PathBuf::from("/merged"));

    // As a flush lists them.
    let entries = mem.flush_list();
    let (tph, stats) = write_level0(&context(&fs, &straight, &reads, &options), &entries).unwrap();
    assert_eq!(stats.entries_written, entries.len() as u64);

    let delta: Vec<DeltaEntry> = mem
        .newest_versions()
        .map(|v| DeltaEntry::copy_of(v.key, v.value, v.seq))
        .collect();
    let ctx = context(&fs, &merged, &reads, &options);
    let MergeOutcome::Replaced {
        stats: merged_stats,
        ..
    } = merge(&ctx, None, Written::held(delta)).unwrap()
    else {
        panic!("a merge of entries into no base makes a TPH");
    };
    assert_eq!(stats.bytes_written(), merged_stats.bytes_written());

    let name = piece_file_name(7);
    let file = |dir: &PathBuf| {
        let f = fs.open_read(&dir.join(&name), ReadMode::Pread).unwrap();
        f.read_at(0, f.len() as usize).unwrap().to_vec()
    };
    (tph, file(&straight), file(&merged))
}

/// Every key's newest version is in `tph`, as `mem` has it.
fn check_holds(tph: &Tph, mem: &MemTable) {
    let live = tph.live_entries().unwrap();
    let want: Vec<(Vec<u8>, u64, Option<Vec<u8>>)> = mem
        .newest_versions()
        .map(|v| (v.key.to_vec(), v.seq, v.value.map(<[u8]>::to_vec)))
        .collect();
    let mut got: Vec<(Vec<u8>, u64, Option<Vec<u8>>)> = live
        .iter()
        .map(|e| (e.key().to_vec(), e.seq, e.value().map(<[u8]>::to_vec)))
        .collect();
    got.sort();
    assert_eq!(got, want);
    assert_eq!(tph.verify(1).unwrap().0, want.len() as u64);
}

#[test]
fn a_level0_tph_written_from_a_memtable_is_the_merge_of_its_entries() {
    let mem = memtable(3000);
    let (tph, straight, merged) = both_ways(&mem);
    assert!(straight == merged, "the two ways wrote different files");
    check_holds(&tph, &mem);
}

/// With key hashes narrowed to 6 bits, keys share hashes: overflow slots in
/// the piece and exceptions in the global index.
#[test]
fn a_level0_tph_of_colliding_hashes_is_the_merge_of_its_entries() {
    with_hash_bits(6, || {
        let mem = memtable(300);
        let (tph, straight, merged) = both_ways(&mem);
        assert!(straight == merged, "the two ways wrote different files");
        assert!(
            !tph.index.exceptions.is_empty(),
            "the test must make exceptions"
        );
        check_holds(&tph, &mem);
    });
}

/// Distinct keys by hash, noting the job memory whenever the build asks
/// for them, and how many times it does.
struct Noting<'a> {
    hashes: Vec<u64>,
    gauge: &'a AtomicU64,
    least_seen: u64,
    most_seen: u64,
    passes: u32,
}

impl<'a> Noting<'a> {
    fn new(n: u64, gauge: &'a AtomicU64) -> Noting<'a> {
        Noting {
            hashes: (1..=n).map(|i| crate::util::reduce::mix64(i, 7)).collect(),
            gauge,
            least_seen: u64::MAX,
            most_seen: 0,
            passes: 0,
        }
    }
}

impl LiveKeySource for Noting<'_> {
    fn count(&self) -> u64 {
        self.hashes.len() as u64
    }
    fn for_each_in(
        &mut self,
        hashes: std::ops::RangeInclusive<u64>,
        _: &mut MergeStats,
        f: &mut dyn FnMut(u64, u64, u32),
    ) -> Result<()> {
        let held = self.gauge.load(Relaxed);
        self.least_seen = self.least_seen.min(held);
        self.most_seen = self.most_seen.max(held);
        self.passes += 1;
        for &h in self.hashes.iter().filter(|h| hashes.contains(h)) {
            f(h, !h, 1);
        }
        Ok(())
    }
    fn check_counts(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Runs `f` with a flush's context whose job memory is `gauge`.
fn with_gauged_context(f: impl FnOnce(&mut MergeContext<'_>, &AtomicU64)) {
    let fs: Arc<dyn FileSystem> = Arc::new(MemFs::new());
    let dir = PathBuf::from("/db");
    let reads = PieceReads::from(ReadMode::Pread);
    let options = PieceOptions::default();
    let gauge = AtomicU64::new(0);
    let mut ctx = context(&fs, &dir, &reads, &options);
    ctx.job_memory = Some(&gauge);
    f(&mut ctx, &gauge);
}

#[test]
fn an_index_build_and_the_sections_it_carries_count_as_job_memory() {
    use crate::tph::head::{build_index_sections, new_meta, write_head_with};

    with_gauged_context(|ctx, gauge| {
        let n = 1000u64;
        let mut keys = Noting::new(n, gauge);
        let meta = new_meta(ctx, None, &[], &[], n as usize, 0).unwrap();
        let sections =
            build_index_sections(ctx, &meta, &mut keys, &mut MergeStats::default()).unwrap();
        // A batch of 128 keys' chunks (the context's index memory) at least.
        let batch = 128 * crate::phf::fuse::BUILD_BYTES_PER_KEY as u64;
        assert!(keys.least_seen >= batch, "{} held", keys.least_seen);
        assert_eq!(gauge.load(Relaxed), 0, "let go once built");

        let section_bytes: u64 = sections.iter().map(|(_, b)| b.len() as u64).sum();
        let mut while_written = 0;
        let written = write_head_with(ctx, ctx.new_number, &meta, sections, |_, _, _, _| {
            while_written = gauge.load(Relaxed);
            Err(Error::Internal("not written".into()))
        });
        assert!(written.is_err());
        assert_eq!(while_written, section_bytes);
        assert_eq!(gauge.load(Relaxed), 0);
    });
}

/// Regression: with index memory for several chunks, a build took them in
/// one batch, holding their keys and peeling them side by side (two
/// chunks, about 8 MB more, in a level-1 build at the peak of a 16M x
/// 128-byte fill). It takes one chunk a pass now, whatever its memory.
#[test]
fn an_index_build_holds_one_chunk_at_a_time_whatever_its_memory() {
    use crate::phf::fuse::{keys_held, BUILD_BYTES_PER_KEY, MAX_CHUNK_KEYS};
    use crate::tph::head::{build_index_sections, new_meta};

    with_gauged_context(|ctx, gauge| {
        ctx.index_memory_bytes = 64 << 20;
        // Three chunks of 200,000 keys, which 64 MiB would take in one batch.
        let n = 600_000u64;
        let mut keys = Noting::new(n, gauge);
        let meta = new_meta(ctx, None, &[], &[], n as usize, 0).unwrap();
        build_index_sections(ctx, &meta, &mut keys, &mut MergeStats::default()).unwrap();
        assert_eq!(keys.passes, 3, "a pass a chunk");
        let one_chunk = keys_held(n, MAX_CHUNK_KEYS as usize) * BUILD_BYTES_PER_KEY as u64;
        assert!(one_chunk < 200_000 * 30, "{one_chunk}");
        let cells = n * u64::from(meta.sig_bits + meta.piece_bits) * 12 / 80;
        assert_eq!(keys.most_seen, one_chunk + cells);
        assert_eq!(gauge.load(Relaxed), 0, "let go once built");
    });
}
