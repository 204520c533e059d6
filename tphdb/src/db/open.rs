//! Opening a database: recovery from the MANIFEST and the WAL.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use parking_lot::{Condvar, Mutex};

use super::stats::Stats;
use super::write::{WalWriter, WriteQueue};
use super::{CompactionPriority, Inner, Options, State, SuperVersion, SyncPolicy, Versions};
use crate::error::{Error, Result};
use crate::filename::{
    is_flushed_wal, parse, path, unflushed_wals, wal_name, FileKind, CURRENT, LOCK,
};
use crate::fs::{CountingFs, FileSystem, PosixFs, ReadMode};
use crate::log::LogWriter;
use crate::memtable::MemTable;
use crate::piece::{BlockCache, PieceOptions};
use crate::tph::PieceReads;
use crate::version::{Layout, RecoveredState, Version, VersionEdit, VersionSet};

use super::jobs::priority::LowPriority;
use super::jobs::Job;
use super::pool_threads::PoolThreads;
use super::replay::replay_wals;

/// Opens the database in `dir`: takes the lock, recovers the version from
/// the MANIFEST and the writes from the WALs, and (writable) starts a new
/// MANIFEST and WAL, cleans up, and starts the background work.
pub(crate) fn open(opts: &Options, dir: &Path, read_only: bool) -> Result<Arc<Inner>> {
    opts.validate()?;
    let mut budgeted = opts.clone();
    budgeted.apply_memory_budget();
    let opts = &budgeted;
    let started = Instant::now();
    let (fs, io) = counted_file_system(opts);
    if read_only {
        if !fs.exists(&path(dir, CURRENT)) {
            return Err(no_database(dir));
        }
    } else {
        fs.create_dir_all(dir)?;
    }
    let lock = fs.lock(&path(dir, LOCK), !read_only)?;
    let piece_reads = piece_reads(opts);
    let (recovered, version) = recover_version(&fs, dir, opts, &piece_reads)?;
    // The layout is fixed when the database is created.
    let mut opts = opts.clone();
    opts.fanout = version.layout.fanout as u32;
    opts.one_level = version.layout.one_level;

    let names = fs.list(dir)?;
    let wal_mem = opts.new_memtable(
        unflushed_wals(&names, recovered.state.log_number)
            .last()
            .copied()
            .unwrap_or(0),
    );
    let mut last_seq = recovered.state.last_seq;
    let replay = replay_wals(
        fs.as_ref(),
        dir,
        &names,
        &recovered.state,
        &wal_mem,
        &mut last_seq,
    )?;

    let started_state = if read_only {
        let mem = Arc::new(wal_mem);
        StartedState {
            wal: WalWriter::new(None, 0, mem.clone(), last_seq)?,
            mem,
            imms: VecDeque::new(),
            versions: Versions::ReadOnly(Arc::new(version)),
            moved_to_lost: 0,
        }
    } else {
        start_writable(
            &fs, dir, &opts, &names, &recovered, version, wal_mem, last_seq,
        )?
    };
    let StartedState {
        mem,
        imms,
        versions,
        wal,
        moved_to_lost,
    } = started_state;

    let st = State {
        mem: mem.clone(),
        imms,
        versions,
        running: Default::default(),
        push_downs: Default::default(),
        flushing_memtables: 0,
        flush_eta: Default::default(),
        level0_eta: Default::default(),
        running_jobs: 0,
        manual: false,
        bg_error: None,
        space: Default::default(),
        deferred: Default::default(),
        writes_seen: Default::default(),
    };
    let sv = SuperVersion {
        mem,
        imms: st.imms.iter().rev().cloned().collect(),
        version: st.current().clone(),
    };
    let stats = Stats::default();
    // The new WAL's header.
    let header_bytes = wal.log.as_ref().map_or(0, |l| l.len());
    stats.wal_file_bytes.store(header_bytes, Ordering::Relaxed);
    stats
        .open_micros
        .store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    stats
        .wal_replayed_batches
        .store(replay.batches, Ordering::Relaxed);
    stats
        .wal_dropped_bytes
        .store(replay.dropped_bytes, Ordering::Relaxed);
    stats
        .wal_files_skipped
        .store(replay.skipped_files as u64, Ordering::Relaxed);
    stats
        .files_moved_to_lost
        .store(moved_to_lost, Ordering::Relaxed);
    let pools = ThreadPools::start(&opts)?;
    let inner = Arc::new(Inner {
        dir: dir.to_path_buf(),
        fs,
        io,
        policy: crate::compaction::Policy {
            one_level: opts.one_level,
            l0_compaction_trigger: opts.l0_compaction_trigger,
            tph_target_bytes: opts.tph_target_bytes,
            max_levels: opts.max_levels,
            l0_slowdown_trigger: opts.l0_slowdown_trigger,
            job_input_bytes: (opts.job_memory_bytes() / 2).max(1),
            background_threads: opts.background_threads,
            gc_dead_ratio: opts.gc_dead_ratio,
            max_garbage_ratio: opts.max_garbage_ratio,
        },
        piece_options: piece_options(&opts),
        flush_progress: Default::default(),
        level0_progress: Default::default(),
        write_delay: Mutex::new(super::write_delay::WriteDelay::new(
            opts.delayed_write_rate_bytes,
        )),
        opts,
        piece_reads,
        read_only,
        lock: Mutex::new(Some(lock)),
        queue: Mutex::new(WriteQueue::default()),
        wal: Mutex::new(wal),
        state: Mutex::new(st),
        bg_cv: Condvar::new(),
        sv: ArcSwap::from_pointee(sv),
        visible_seq: AtomicU64::new(last_seq),
        wals_flushed_below: AtomicU64::new(recovered.state.log_number),
        stats,
        pool: pools.compaction,
        low_priority: pools.low_priority,
        flush_pool: pools.flush,
        io_pool: pools.io,
        _end_of_pools: super::pool_threads::EndOfPools(pools.running),
        shutting_down: AtomicBool::new(false),
        housekeeper: Mutex::new(None),
        manual_compaction: Mutex::new(()),
        flushed_memtables: Mutex::new(Vec::new()),
    });
    if !read_only {
        // A failed start must not leave threads holding the database (and
        // its LOCK): later opens in this process would find it busy.
        if let Err(e) = start_writing(&inner) {
            let _ = inner.shutdown();
            return Err(e);
        }
    }
    Ok(inner)
}

fn no_database(dir: &Path) -> Error {
    Error::InvalidArgument(format!("no database in {}", dir.display()))
}

/// The file system the options choose, with the I/O counters every
/// database keeps.
fn counted_file_system(opts: &Options) -> (Arc<dyn FileSystem>, Arc<crate::fs::IoCounts>) {
    let base: Arc<dyn FileSystem> = opts
        .file_system
        .clone()
        .unwrap_or_else(|| Arc::new(PosixFs));
    let counting = CountingFs::shared(base);
    let io = counting.counts().clone();
    (Arc::new(counting), io)
}

/// How the database reads its pieces.
fn piece_reads(opts: &Options) -> PieceReads {
    PieceReads {
        mode: opts.read_mode,
        // With mmap it holds only the key-order indexes: the page cache has
        // the blocks.
        cache: (opts.block_cache_bytes > 0)
            .then(|| Arc::new(BlockCache::new(opts.block_cache_bytes as u64))),
        open_files: Some(crate::fs::OpenFiles::new(opts.max_open_files)),
        allow_ptrhash: opts.phf_kind == crate::phf::PhfKind::PtrHash,
        global_index_held: Arc::default(),
    }
}

/// How the database writes its pieces.
fn piece_options(opts: &Options) -> PieceOptions {
    PieceOptions {
        phf_kind: opts.phf_kind,
        phf: opts.phf_config(),
        page_size: opts.page_size_bytes,
        max_block_slots: opts.max_block_slots,
        compression: opts.compression,
        align_blocks: opts.align_blocks,
        ..PieceOptions::default()
    }
}

/// What the MANIFEST said, and whether there was one.
struct Recovered {
    state: RecoveredState,
    existed: bool,
}

/// The recovered MANIFEST state and its version with every TPH open, or an
/// empty one for a new database.
fn recover_version(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    opts: &Options,
    reads: &PieceReads,
) -> Result<(Recovered, Version)> {
    if fs.exists(&path(dir, CURRENT)) {
        if opts.error_if_exists {
            return Err(Error::InvalidArgument(format!(
                "a database exists in {}",
                dir.display()
            )));
        }
        let state = VersionSet::read_state(fs.as_ref(), dir)?;
        let version = VersionSet::open_version(fs, dir, &state, reads)?;
        return Ok((
            Recovered {
                state,
                existed: true,
            },
            version,
        ));
    }
    if !opts.create_if_missing {
        return Err(no_database(dir));
    }
    let layout = Layout {
        fanout: opts.fanout as u64,
        one_level: opts.one_level,
    };
    let state = RecoveredState {
        layout: Some(layout),
        depth: 1,
        next_file: 2,
        ..RecoveredState::default()
    };
    Ok((
        Recovered {
            state,
            existed: false,
        },
        Version::empty(layout),
    ))
}

/// What an open starts the database with.
struct StartedState {
    mem: Arc<MemTable>,
    /// Frozen memtables, oldest first: the replayed writes.
    imms: VecDeque<Arc<MemTable>>,
    versions: Versions,
    wal: WalWriter,
    /// Pieces moved to `lost/`.
    moved_to_lost: u64,
}

/// The state of a writable open: a new MANIFEST holding the recovered
/// version, a new WAL, the replayed writes as a frozen memtable, and the
/// files nothing needs removed.
#[allow(clippy::too_many_arguments)]
fn start_writable(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    opts: &Options,
    names: &[String],
    recovered: &Recovered,
    version: Version,
    replayed: MemTable,
    last_seq: u64,
) -> Result<StartedState> {
    let max_number = names
        .iter()
        .filter_map(|n| match parse(n) {
            Some(FileKind::Wal(n) | FileKind::Piece(n) | FileKind::Manifest(n)) => Some(n),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let state = &recovered.state;
    let next_file = state.next_file.max(max_number + 1).max(2);
    let mut vs = VersionSet::start(
        fs.clone(),
        dir,
        version,
        next_file,
        state.log_number,
        last_seq,
        opts.manifest_max_bytes,
    )?;
    let number = vs.new_file_number();
    let file = fs.create(&path(dir, &wal_name(number)))?;
    fs.sync_dir(dir)?;
    let mem = Arc::new(opts.new_memtable(number));
    let mut imms = VecDeque::new();
    if !replayed.is_empty() {
        imms.push_back(Arc::new(replayed));
    }
    // A new database has nothing to lose.
    let certain = !recovered.existed || state.manifest_len_recorded;
    let moved_to_lost = remove_obsolete_files(fs.as_ref(), dir, names, &vs, certain);
    let wal = WalWriter::new(Some(LogWriter::new(file, 0)), number, mem.clone(), last_seq)?;
    Ok(StartedState {
        mem,
        imms,
        versions: Versions::Writable(vs),
        wal,
        moved_to_lost,
    })
}

/// The background threads of a database.
struct ThreadPools {
    compaction: rayon::ThreadPool,
    low_priority: Option<LowPriority>,
    flush: rayon::ThreadPool,
    io: Option<Arc<rayon::ThreadPool>>,
    /// The threads of all but `io`, which scans share and may outlive the
    /// database.
    running: Arc<PoolThreads>,
}

impl ThreadPools {
    fn start(opts: &Options) -> Result<ThreadPools> {
        let running = Arc::new(PoolThreads::default());
        let named = |threads: usize, name: &'static str| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(move |i| format!("tphdb-{name}-{i}"))
        };
        let started = |name: &str, built: std::result::Result<_, rayon::ThreadPoolBuildError>| {
            built.map_err(|e| {
                Error::io(format!("starting {name} threads"), std::io::Error::other(e))
            })
        };
        let pool_of = |threads: usize, name: &'static str, priority: ThreadPriority| {
            let mut builder = named(threads, name).spawn_handler(|thread| running.spawn(thread));
            if priority != ThreadPriority::Caller {
                builder = builder.start_handler(move |_| lower_this_threads_priority(priority));
            }
            started(name, builder.build())
        };
        // Scans read in parallel only where reads block on the device (with
        // mmap, pages are mostly in memory). Not joined at close: iterators
        // share the pool and may outlive the database.
        let io = if opts.read_mode == ReadMode::Mmap || opts.scan_io_threads <= 1 {
            None
        } else {
            let io = named(opts.scan_io_threads, "io").build();
            Some(Arc::new(started("io", io)?))
        };
        let threads = opts.background_threads;
        let low_priority = match opts.compaction_priority {
            CompactionPriority::LowWithoutWrites => Some(LowPriority::new(
                pool_of(threads, "bg-low", ThreadPriority::Idle)?,
                Duration::from_millis(opts.compaction_idle_millis),
            )),
            _ => None,
        };
        Ok(ThreadPools {
            compaction: pool_of(
                threads,
                "bg",
                match opts.compaction_priority {
                    CompactionPriority::Low => ThreadPriority::Lowest,
                    _ => ThreadPriority::Caller,
                },
            )?,
            low_priority,
            flush: pool_of(1, "flush", ThreadPriority::Caller)?,
            io,
            running,
        })
    }
}

/// The CPU priority of a pool's threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ThreadPriority {
    Caller,
    /// Nice 19: a small share of a busy core.
    Lowest,
    /// Nice 19 in the `SCHED_IDLE` class: a core nothing else wants, given
    /// up at once when something does. For compactions that start only
    /// once writes stopped, which the reads that follow should not feel.
    Idle,
}

/// Gives the calling thread `priority`. Linux keeps a nice value and a
/// scheduling class per thread, so this leaves the process's other threads
/// as they are. Best effort: a failure leaves the priority as it was.
fn lower_this_threads_priority(priority: ThreadPriority) {
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on the calling thread; `param` outlives
    // the call that reads it.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19);
        if priority == ThreadPriority::Idle {
            let param = libc::sched_param { sched_priority: 0 };
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = priority;
}

/// Starts the housekeeping thread, writes what the old WALs held to a
/// piece and starts the jobs that are due.
fn start_writing(inner: &Arc<Inner>) -> Result<()> {
    let sync_interval = match inner.opts.sync_policy {
        SyncPolicy::IntervalMs(ms) => Some(Duration::from_millis(ms.max(1))),
        _ => None,
    };
    let i = inner.clone();
    let handle = std::thread::Builder::new()
        .name("tphdb-housekeeping".into())
        .spawn(move || i.housekeeping_loop(sync_interval))
        .map_err(|e| Error::io("starting the housekeeping thread", e))?;
    *inner.housekeeper.lock() = Some(handle);
    retire_replayed_wals(inner)?;
    let mut st = inner.state.lock();
    inner.maybe_schedule(&mut st);
    Ok(())
}

/// Deletes files no version needs: pieces not referenced, WALs already
/// flushed, other MANIFESTs and temporary files. Failures are ignored:
/// leftovers are retried at the next open.
///
/// A piece no version names is certainly garbage when the recovered
/// MANIFEST holds every edit up to the length CURRENT recorded (see
/// `VersionSet::record_manifest_length`): nothing was deleted on the
/// strength of a later edit. Without that record (a CURRENT of format
/// version 1), a complete, checksummed piece could be the output of an edit
/// the MANIFEST lost: it goes to `lost/` instead, and is counted. Returns
/// how many went there.
fn remove_obsolete_files(
    fs: &dyn FileSystem,
    dir: &Path,
    names: &[String],
    vs: &VersionSet,
    certain: bool,
) -> u64 {
    let live = vs.current.live_files();
    let mut kept = 0;
    for name in names {
        let remove = match parse(name) {
            Some(FileKind::Piece(n)) => !live.contains(&n),
            Some(FileKind::Wal(_)) => is_flushed_wal(name, vs.log_number),
            Some(FileKind::Manifest(n)) => n != vs.manifest_number(),
            Some(FileKind::Temp) => true,
            _ => false,
        };
        if !remove {
            continue;
        }
        let complete_piece = || {
            matches!(parse(name), Some(FileKind::Piece(_)))
                && crate::piece::PieceReader::open(fs, &path(dir, name), ReadMode::Pread).is_ok()
        };
        if !certain && complete_piece() {
            if super::repair::move_to_lost(fs, dir, name).is_ok() {
                kept += 1;
            }
        } else {
            let _ = fs.remove(&path(dir, name));
        }
    }
    if kept > 0 {
        let _ = fs.sync_dir(&dir.join(super::repair::LOST_DIR));
        let _ = fs.sync_dir(dir);
    }
    kept
}

/// Before the first new write: flushes what the old WALs held and records
/// that they are no longer needed. Otherwise a torn old WAL would, at the
/// next recovery, stop the replay before the new one.
fn retire_replayed_wals(inner: &Arc<Inner>) -> Result<()> {
    let recovered: Vec<Arc<MemTable>> = inner.state.lock().imms.iter().cloned().collect();
    if !recovered.is_empty() {
        return inner.execute(&Job::Flush(recovered), true).map(drop);
    }
    let mut st = inner.state.lock();
    let edit = VersionEdit {
        log_number: Some(st.mem.wal_number()),
        ..VersionEdit::default()
    };
    st.versions
        .writable()
        .expect("a writable database has versions")
        .log_and_apply(edit, &HashMap::new())
}

pub(crate) fn destroy(opts: &Options, dir: &Path) -> Result<()> {
    let fs: Arc<dyn FileSystem> = opts
        .file_system
        .clone()
        .unwrap_or_else(|| Arc::new(PosixFs));
    if !fs.exists(dir) {
        return Ok(());
    }
    let lock = fs.lock(&path(dir, LOCK), true)?;
    for name in fs.list(dir)? {
        if parse(&name).is_some_and(|k| k != FileKind::Lock) {
            fs.remove(&path(dir, &name))?;
        }
    }
    drop(lock);
    let _ = fs.remove(&path(dir, LOCK));
    fs.remove_dir(dir)
}
