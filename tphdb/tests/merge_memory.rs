//! The memory a merge holds, measured with a counting allocator (this test
//! binary's own, so no other test binary runs beside it; the tests here
//! take turns through `MEASURING`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

mod common;

use tphdb::{Options, DB};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = CURRENT.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(now, Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Held by each test for its whole run: the allocator counts every thread
/// of the process, and the tests ran in parallel, so one's peak included
/// the other's merges (482.7 bytes per entry measured in a CI run for a
/// flush that holds 142).
static MEASURING: Mutex<()> = Mutex::new(());

fn measuring() -> MutexGuard<'static, ()> {
    MEASURING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Heap held at the peak of `f`, above what was held when it started.
fn peak_during(f: impl FnOnce()) -> usize {
    let start = CURRENT.load(Relaxed);
    PEAK.store(start, Relaxed);
    f();
    PEAK.load(Relaxed) - start
}

/// Regression: merging even one key into a TPH held about 80 bytes per live
/// key of the whole TPH (its key hashes, a list of its live keys, a byte
/// per slot, the perfect-hash build over all of them), outside any memory
/// bound; in one-level mode every flush merges into TPHs holding the whole
/// database. The base's keys are now streamed from its pieces and its
/// global index built a batch of chunks at a time, within the index half
/// of `compaction_memory_bytes`.
#[test]
fn merging_into_a_large_tph_holds_a_bounded_amount_of_memory() {
    let _turn = measuring();
    // The real file system, mapped: files are not heap, as in MemFs.
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        one_level: true,
        fanout: 2,
        write_buffer_bytes: 64 << 20,
        // 1 MiB per job: index batches of 13K keys.
        compaction_memory_bytes: 2 << 20,
        phf_segment_keys: 1 << 12,
        background_threads: 2,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let keys = 800_000u32;
    for i in 0..keys {
        db.put(i.to_be_bytes(), b"v").unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let level1 = &db.stats().levels[1];
    assert_eq!(level1.live_entries, keys as u64);
    assert_eq!(level1.tphs, 2);

    // A first small merge lets go of what the load left (its memtable
    // goes with the super-version it was last read through).
    db.put(b"warm", b"up").unwrap();
    db.flush().unwrap();
    db.put(b"one more", b"key").unwrap();
    let peak = peak_during(|| db.flush().unwrap());
    // What stays is the new TPH's index: about 2 bytes per key (a fuse of
    // chunks this small). What goes: a bit per entry of the base, a batch
    // of keys (13K here), the file's write buffer (1 MiB). The merge used
    // to hold 80 bytes per key of the TPH, 32 MB here.
    let tph_keys = (keys / 2) as usize;
    let bound = (4 << 20) + 3 * tph_keys;
    eprintln!(
        "peak {peak} bytes during the flush ({:.2} per key of the TPH), bound {bound}",
        peak as f64 / tph_keys as f64
    );
    assert!(peak < bound, "{peak} bytes held, bound {bound}");
    assert_eq!(db.get(b"one more").unwrap().as_deref(), Some(&b"key"[..]));
    assert_eq!(
        db.get(7u32.to_be_bytes()).unwrap().as_deref(),
        Some(&b"v"[..])
    );
}

/// Regression: a flush copied its memtable's keys and values out (two
/// allocations per entry), listed every entry three times, held 16 MiB of
/// encoded blocks and built its key sections whole: 392 bytes per 148-byte
/// entry on top of the memtable's 179. It now shares the frozen memtable's
/// arena, lists each entry once, holds about 1 MiB of blocks per thread and
/// streams its key sections to the file (164 measured; 138 with 64-byte
/// list entries, not 88; 104 with 40-byte ones, which point into a shared
/// chunk instead of holding a `Bytes`; 86.5 with a flush's own 16-byte
/// entries, which point into the memtable; 78.5 with 8-byte ones, their
/// key hashes only in the array the piece's writer takes; 67.2 with the
/// key-hash section sorted in ranges of 16K pairs instead of 64K, its
/// second hashes computed in the writer's survey; 65.5 before, and 57.6
/// after, the level-0 index built in chunks of 75,000 keys, not 200,000,
/// and the second hashes computed range by range. A fifth of it is the new
/// active memtable's filter, 4 MiB here).
#[test]
fn a_flush_holds_little_beyond_its_memtable() {
    let _turn = measuring();
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        write_buffer_bytes: 256 << 20,
        background_threads: 1,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let entries = 200_000u64;
    let value = [7u8; 128];
    for i in 0..entries {
        let key = format!("{:020}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        db.put(key.as_bytes(), value).unwrap();
    }
    let memtable = db.stats().memtable_bytes;
    let peak = peak_during(|| db.flush().unwrap());
    let per_entry = peak as f64 / entries as f64;
    eprintln!("peak {peak} bytes during the flush ({per_entry:.1} per entry), memtable {memtable}");
    assert!(per_entry < 62.0, "{per_entry:.1} bytes per entry held");
    assert_eq!(db.stats().levels[0].live_entries, entries);
}

/// Regression: a fold held the live entries of every piece it folded,
/// whatever their size: `compact_range` folds each TPH whole, so it held a
/// TPH's keys and values at once (24.9 MB measured here, for TPHs of 20 MB
/// and a job's input memory of 1 MiB).
/// Past the job's input memory a fold now holds the folded entries' keys
/// and writes its piece in passes, each reading its share of the values
/// again.
#[test]
fn folding_a_large_tph_holds_the_jobs_memory_not_the_tph() {
    let _turn = measuring();
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        one_level: true,
        fanout: 2,
        write_buffer_bytes: 4 << 20,
        // 2 MiB per job, half of it for input.
        compaction_memory_bytes: 4 << 20,
        background_threads: 2,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let keys = 10_000u32;
    let value = |i: u32| vec![i as u8; 4000];
    for round in 0..2 {
        for i in (round..keys).step_by(2) {
            db.put(i.to_be_bytes(), value(i)).unwrap();
        }
        db.flush().unwrap();
    }
    db.wait_for_compactions().unwrap();
    let level1 = &db.stats().levels[1];
    assert_eq!((level1.tphs, level1.live_entries), (2, keys as u64));
    assert!(level1.pieces >= 4, "{} pieces", level1.pieces);

    let peak = peak_during(|| db.compact_range(None, None).unwrap());
    let tph_bytes = keys as usize / 2 * 4000;
    eprintln!("peak {peak} bytes while folding TPHs of {tph_bytes} bytes");
    // The job's 2 MiB, the blocks being encoded (about 1 MiB a thread),
    // the new piece's write buffer and about 130 bytes a key of the TPH
    // (5.75 MB measured).
    assert!(peak < 7 << 20, "{peak} bytes held");
    assert_eq!(db.stats().levels[1].pieces, 2);
    for i in (0..keys).step_by(97) {
        assert_eq!(db.get(i.to_be_bytes()).unwrap(), Some(value(i)));
    }
}

/// Regression: a level-0 compaction too large for one pass took as many
/// passes as its input was budgets (six here), over ranges of one or two of
/// level 1's eight partitions, so a pass of two held a quarter of the
/// input: 1.4 times the job's input memory. Passes now take as many
/// partitions as fit (one here), each an eighth of the input.
#[test]
fn a_level0_compaction_in_passes_holds_at_most_the_jobs_input_memory() {
    let _turn = measuring();
    let value = |i: u32| vec![i as u8; 4000];
    let key = |i: u32| i.wrapping_mul(0x9E37_79B9).to_be_bytes();
    // Six level-0 TPHs whose merge takes about 5.5 times the job's input:
    // 16 MiB per job, 8 MiB of it for input.
    let (tphs, per_tph) = (6u32, 1800u32);
    let level0 = Level0 {
        fanout: 8,
        compaction_memory_bytes: 32 << 20,
        tphs,
        per_tph,
    };
    let (db, peak) = level0.merged(key, value);
    let input = (tphs * per_tph) as usize * (4000 + 280);
    eprintln!("peak {peak} bytes merging {input} bytes of input in passes");
    // The job's input memory (8 MiB, of which a pass's eighth takes 5.9
    // MB), the blocks being encoded (about 1 MiB a thread), the files'
    // buffers and the new indexes: 11.4 MB measured, 20.4 MB before.
    assert!(peak < 14 << 20, "{peak} bytes held");
    for i in (0..tphs * per_tph).step_by(89) {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)));
    }
}

/// Level-0 TPHs written with compactions held back, then merged into
/// level 1 by a database opened to compact them.
struct Level0 {
    fanout: u32,
    compaction_memory_bytes: usize,
    tphs: u32,
    per_tph: u32,
}

impl Level0 {
    fn options(&self, l0_compaction_trigger: usize) -> Options {
        Options {
            fanout: self.fanout,
            write_buffer_bytes: 32 << 20,
            compaction_memory_bytes: self.compaction_memory_bytes,
            background_threads: 2,
            l0_compaction_trigger,
            l0_slowdown_trigger: 64,
            l0_stop_trigger: 64,
            ..Options::default()
        }
    }

    /// The merged database (its directory kept with it) and the heap the
    /// merge held at its peak.
    fn merged<K: AsRef<[u8]>>(
        &self,
        key: impl Fn(u32) -> K,
        value: impl Fn(u32) -> Vec<u8>,
    ) -> (Merged, usize) {
        let dir = tempfile::tempdir().unwrap();
        let shape = (self.tphs, self.per_tph);
        common::write_level0(dir.path(), &self.options(64), shape, key, value);
        let mut db = None;
        let peak = peak_during(|| {
            let d = DB::open(&self.options(1), dir.path()).unwrap();
            d.wait_for_compactions().unwrap();
            db = Some(d);
        });
        let db = db.unwrap();
        assert_eq!(db.stats().levels[0].tphs, 0);
        (Merged { db, _dir: dir }, peak)
    }
}

/// A database and the directory it lives in.
struct Merged {
    db: DB,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for Merged {
    type Target = DB;
    fn deref(&self) -> &DB {
        &self.db
    }
}

/// Regression: each merge a compaction runs got the index half of the job's
/// share for its global index build (and the input half for the pieces it
/// folds), and a job merges its partitions in parallel on the background
/// threads: two level-1 TPHs rebuilding their indexes at once held twice
/// the half. Each running merge now takes a quarter of the job's share for
/// each, so the merges a job's share can run at once stay within it.
#[test]
fn merges_running_at_once_share_the_jobs_index_memory() {
    let _turn = measuring();
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        fanout: 2,
        write_buffer_bytes: 64 << 20,
        // 16 MiB per job: index builds within 8 MiB a merge before, 4 after.
        compaction_memory_bytes: 32 << 20,
        background_threads: 2,
        l0_compaction_trigger: 1,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let key = |i: u32| i.wrapping_mul(0x9E37_79B9).to_be_bytes();
    let keys = 1_200_000u32;
    for i in 0..keys {
        db.put(key(i), b"v").unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let level1 = &db.stats().levels[1];
    assert_eq!((level1.tphs, level1.live_entries), (2, keys as u64));
    // A small level-0 TPH touching both level-1 TPHs: its compaction
    // rebuilds both global indexes (600K keys each) at once.
    for i in 0..2000u32 {
        db.put(key(i * 7), b"w").unwrap();
    }
    let peak = peak_during(|| {
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
    });
    assert_eq!(db.stats().levels[0].tphs, 0);
    eprintln!("peak {peak} bytes while two TPHs of 600K keys rebuilt their indexes");
    // Two builds within 4 MiB each, the new indexes (about 2 bytes a key)
    // and the key-hash sections streamed a MiB at a time: 9.3 to 9.8 MB
    // measured, 13.6 MB before.
    assert!(peak < 12 << 20, "{peak} bytes held");
    assert_eq!(db.get(key(7)).unwrap().as_deref(), Some(&b"w"[..]));
    assert_eq!(db.get(key(1)).unwrap().as_deref(), Some(&b"v"[..]));
}

/// Regression: a pass of a compaction held at least one target partition's
/// share of its input, keys and values, whatever the job's input memory: a
/// push-down of a TPH past `fanout` times that memory held a child's share
/// (32.7 MB of copies and a 14 MB list in a 16M x 128 B fill, two such
/// passes at the peak). Past the job's input memory a pass now holds its
/// entries' keys, and each new piece reads their values again as it is
/// written, a merge's fold memory at a time.
#[test]
fn a_compaction_pass_past_the_jobs_input_memory_holds_keys_not_values() {
    let _turn = measuring();
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        fanout: 2,
        max_levels: 3,
        write_buffer_bytes: 64 << 20,
        tph_target_bytes: 4 << 20,
        // 2 MiB per job, 1 MiB of it for input.
        compaction_memory_bytes: 4 << 20,
        background_threads: 2,
        l0_compaction_trigger: 1,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let key = |i: u32| i.wrapping_mul(0x9E37_79B9).to_be_bytes();
    let value = |i: u32| vec![i as u8; 4000];
    let keys = 5000u32;
    for i in 0..keys {
        db.put(key(i), value(i)).unwrap();
    }
    // The level-0 TPH goes to level 1's two TPHs (10 MB each), which pass
    // their target and are pushed down (5 MB a child), and so on below.
    let peak = peak_during(|| {
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
    });
    let st = db.stats();
    assert_eq!(st.levels[0].tphs, 0);
    assert!(
        st.levels.iter().skip(2).any(|l| l.live_entries > 0),
        "nothing pushed down: {}",
        st.level_table()
    );
    eprintln!("peak {peak} bytes compacting 20 MB down the levels");
    // Held by shape: the keys and lists (a few hundred KB), the fold
    // memory's values (512 KiB a merge), the blocks being encoded (about 1
    // MiB a thread), the blocks read and the files' buffers: 8.9 MB
    // measured, 16.9 MB when a pass held its partition's share of values,
    // 8.3-8.4 MB since each level opened is written from the shares' key
    // hashes (`tph/share.rs`; the fixed part is most of it here).
    assert!(peak < 12 << 20, "{peak} bytes held");
    for i in (0..keys).step_by(7) {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)), "key {i}");
    }
}

/// Regression: a level-0 merge's pass held its share of the level-0 TPHs'
/// keys and values whenever the share fit the job's input memory: in a
/// 16M x 128-byte fill each pass held 17.5 MB (92,000 entries copied, a
/// list of each input's and their merge), and passes ran most of the
/// load, beside the flushes at its peak. A pass whose keys and values
/// pass two runs of values read again, each run of many entries, now
/// holds its entries by shape, and the new piece reads their values again
/// a run at a time.
#[test]
fn a_level0_merge_pass_of_small_values_holds_keys_not_values() {
    let _turn = measuring();
    let value = |i: u32| vec![i as u8; 128];
    let key = |i: u32| format!("{:020}", i.wrapping_mul(0x9E37_79B9));
    // At the default compaction memory a pass holds up to 32 MiB of input
    // (one level-1 partition of the two here, 25 MB) and reads values
    // again 4 MiB at a time.
    let (tphs, per_tph) = (2u32, 90_000u32);
    let level0 = Level0 {
        fanout: 2,
        compaction_memory_bytes: Options::default().compaction_memory_bytes,
        tphs,
        per_tph,
    };
    let (db, peak) = level0.merged(key, value);
    let st = db.stats();
    assert_eq!(st.levels[1].live_entries, u64::from(tphs * per_tph));
    eprintln!(
        "peak {peak} bytes merging {} entries of 128-byte values, {} bytes read again",
        tphs * per_tph,
        st.compaction_reads.values_again
    );
    assert!(st.compaction_reads.values_again > 0);
    // 90,000 entries a pass: each input's list and their merge (40 bytes
    // an entry each) and the keys, a run of values read again (4 MiB),
    // the blocks being encoded and the new indexes: 14.8 MB measured,
    // 23.2 MB with the values held.
    assert!(peak < 18 << 20, "{peak} bytes held");
    for i in (0..tphs * per_tph).step_by(997) {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i)));
    }
}
