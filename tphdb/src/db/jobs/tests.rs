//! Which TPHs jobs build: signature widths by level, the deepest level's
//! field bound; what a running job keeps alive.

use std::sync::atomic::{AtomicBool, Ordering};

use super::Job;
use crate::{Options, DB};

/// The deepest level's TPHs are built with `bottom_signature_bits`,
/// level 0's with `signature_bits`; global indexes are fuses, near a
/// field a key.
#[test]
fn the_deepest_level_gets_the_bottom_signature_bits() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        write_buffer_bytes: 256 << 10,
        tph_target_bytes: 256 << 10,
        fanout: 4,
        l0_compaction_trigger: 4,
        signature_bits: 11,
        bottom_signature_bits: 6,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    for i in 0..60_000u64 {
        let key = i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes();
        db.put(key, [7u8; 100]).unwrap();
    }
    db.wait_for_compactions().unwrap();
    // Settled, level 0 holds fewer TPHs than its trigger: one more
    // flush leaves one there if none is.
    db.put(b"one more", b"flush").unwrap();
    db.flush().unwrap();
    let v = db.inner.state.lock().current().clone();
    assert!(v.depth >= 2, "depth {}", v.depth);
    let bits = |level: u32| -> Vec<u32> {
        v.tphs()
            .filter(|t| t.level() == level)
            .map(|t| t.signature_bits())
            .collect()
    };
    let (level0, deepest) = (bits(0), bits(v.depth));
    assert!(!level0.is_empty() && !deepest.is_empty());
    assert!(level0.iter().all(|&b| b == 11), "level 0: {level0:?}");
    assert!(deepest.iter().all(|&b| b == 6), "deepest: {deepest:?}");
    // A fuse of a few thousand keys takes about 1.4 cells a key (a
    // quarter million: 1.1), a cell being a field: signature and piece.
    assert!(v.tphs().all(|t| t.global_index_is_fuse()));
    let field_bits: u64 = v
        .tphs()
        .map(|t| t.live_count() * u64::from(t.signature_bits() + t.piece_bits()))
        .sum();
    let index_bits: u64 = v.tphs().map(|t| t.global_index_bytes() as u64 * 8).sum();
    let cells_a_field = index_bits as f64 / field_bits as f64;
    assert!(cells_a_field < 1.55, "{cells_a_field} cells a key");
}

/// With `bottom_field_bits` 11, a deepest-level TPH of more than eight
/// pieces gives its signature the bit its piece numbers take past
/// three; one of fewer keeps `bottom_signature_bits`, as every TPH does
/// without the bound. Keys are all found and absent keys are not.
#[test]
fn a_bottom_tph_of_many_pieces_keeps_its_fields_within_bottom_field_bits() {
    for field_bits in [11, 0] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            one_level: true,
            fanout: 2,
            bottom_field_bits: field_bits,
            ..Options::default()
        };
        let db = DB::open(&opts, dir.path()).unwrap();
        let key = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes();
        let (flushes, per_flush) = (12u64, 3000u64);
        let mut shapes = Vec::new();
        for f in 0..flushes {
            for i in f * per_flush..(f + 1) * per_flush {
                db.put(key(i), i.to_le_bytes()).unwrap();
            }
            db.flush().unwrap();
            db.wait_for_compactions().unwrap();
            let v = db.inner.state.lock().current().clone();
            assert_eq!(v.depth, 1);
            shapes.extend(
                v.tphs()
                    .map(|t| (t.piece_count(), t.signature_bits(), t.piece_bits())),
            );
        }
        for &(pieces, sig, piece_bits) in &shapes {
            let want = if pieces > 8 && field_bits == 11 { 7 } else { 8 };
            assert_eq!(sig, want, "{pieces} pieces, field bits {field_bits}");
            assert!(field_bits == 0 || sig + piece_bits <= 11);
        }
        assert!(shapes.iter().any(|s| s.0 > 8), "{shapes:?}");
        assert!(shapes.iter().any(|s| s.0 <= 8), "{shapes:?}");
        for i in 0..flushes * per_flush {
            assert_eq!(
                db.get(key(i)).unwrap().as_deref(),
                Some(&i.to_le_bytes()[..])
            );
        }
        let before = db.stats().get_block_reads;
        let absent = flushes * per_flush..flushes * per_flush + 20_000;
        assert!(absent.clone().all(|i| db.get(key(i)).unwrap().is_none()));
        // 7-bit signatures past a field of up to 12 pieces in 16: about
        // 12/2048 of absent keys read a block (0.6%); 3% would be far
        // more.
        let reads = db.stats().get_block_reads - before;
        assert!(reads < 600, "{reads} block reads, field bits {field_bits}");
    }
}

/// Regression: a level-0 compaction installed the level-1 TPHs it wrote
/// all at once, at its end, so until then it held the new global index of
/// every level-1 TPH beside the old one (at a deep fill's peak about
/// twice level 1's index). Each is now installed as it is written, and the
/// one it replaces goes then. Measured by sampling, through the job, the
/// global indexes alive beyond the current version's.
#[test]
fn a_level0_compaction_installs_each_level1_tph_as_it_writes_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = Options {
        write_buffer_bytes: 1 << 20,
        tph_target_bytes: 1 << 20,
        fanout: 8,
        ..Options::default()
    };
    let key = |i: u64| i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes();
    let keys = 200_000u64;
    {
        let db = DB::open(&opts, dir.path()).unwrap();
        for i in 0..keys {
            db.put(key(i), [1u8; 40]).unwrap();
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        db.close().unwrap();
    }
    // Level 0 now only grows: the test runs its compaction itself.
    opts.l0_compaction_trigger = 1000;
    opts.l0_slowdown_trigger = 1000;
    opts.l0_stop_trigger = 1000;
    let db = DB::open(&opts, dir.path()).unwrap();
    for i in 0..keys {
        db.put(key(i), [2u8; 40]).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let v = db.inner.state.lock().current().clone();
    assert!(v.depth >= 2, "depth {}", v.depth);
    let heads: Vec<u64> = v.l0.iter().map(|t| t.head_number()).collect();
    assert!(!heads.is_empty());
    drop(v);

    let done = AtomicBool::new(false);
    let most_held = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut most = 0;
            while !done.load(Ordering::Acquire) {
                let st = db.stats();
                most = most.max(st.index_global_held_bytes - st.index_global_bytes);
            }
            most
        });
        let ran = db.inner.execute(&Job::L0ToL1(heads), true);
        done.store(true, Ordering::Release);
        ran.unwrap();
        sampler.join().unwrap()
    });
    let v = db.inner.state.lock().current().clone();
    assert!(v.l0.is_empty());
    assert_eq!(v.levels[0].len(), 8, "every level-1 partition got keys");
    let level1_index: u64 = v.levels[0]
        .values()
        .map(|t| t.global_index_bytes() as u64)
        .sum();
    // Two merges at a time on a two-thread pool: a quarter of level 1's
    // indexes in flight, against all of them before.
    assert!(
        most_held < level1_index / 2,
        "{most_held} bytes of global index held beyond the current version's, \
         level 1's being {level1_index}"
    );
    for i in (0..keys).step_by(101) {
        assert_eq!(db.get(key(i)).unwrap().as_deref(), Some(&[2u8; 40][..]));
    }
}

/// Level-0 compactions record how long they take a TPH and count their
/// parts as they go, as flushes do: what paces writes while level 0 is
/// past its slowdown trigger (`db/job_eta.rs`).
#[test]
fn level0_compactions_record_their_time_and_count_their_parts() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        write_buffer_bytes: 256 << 10,
        tph_target_bytes: 1 << 20,
        fanout: 4,
        l0_compaction_trigger: 2,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    for i in 0..40_000u64 {
        let key = i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes();
        db.put(key, [7u8; 100]).unwrap();
    }
    db.wait_for_compactions().unwrap();
    assert!(db.stats().compactions > 0);
    let st = db.inner.state.lock();
    assert!(st.flush_eta.typical().is_some(), "flushes timed");
    assert!(
        st.level0_eta.typical().is_some(),
        "level-0 compactions timed"
    );
    let (done, parts) = db.inner.level0_progress.get();
    assert!(
        parts > 0 && done == parts,
        "{done} of {parts} parts counted"
    );
    let now = std::time::Instant::now();
    let progress = &db.inner.level0_progress;
    assert_eq!(st.level0_eta.running_left(progress, now), None, "none runs");
}

/// Under `LowWithoutWrites`, the low-priority pool's threads are nice 19
/// in the `SCHED_IDLE` class; the normal pool's keep the caller's class.
/// Under `Low`, the normal pool is nice 19 but not idle: it runs under
/// writes too.
#[cfg(target_os = "linux")]
#[test]
fn low_priority_compaction_threads_take_only_idle_cores() {
    // (class, nice) of the calling thread.
    fn priority() -> (i32, i32) {
        // SAFETY: plain system calls about the calling thread.
        unsafe {
            let class = libc::sched_getscheduler(0);
            let nice = libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t);
            (class, nice)
        }
    }
    let caller = priority();
    let dir = tempfile::tempdir().unwrap();
    let open = |p: crate::CompactionPriority, sub: &str| {
        let opts = Options {
            compaction_priority: p,
            ..Options::default()
        };
        DB::open(&opts, dir.path().join(sub)).unwrap()
    };
    let db = open(crate::CompactionPriority::LowWithoutWrites, "a");
    let low = db.inner.low_priority.as_ref().expect("a low-priority pool");
    assert_eq!(low.pool.install(priority), (libc::SCHED_IDLE, 19));
    assert_eq!(db.inner.pool.install(priority), caller);
    let db = open(crate::CompactionPriority::Low, "b");
    assert!(db.inner.low_priority.is_none());
    assert_eq!(db.inner.pool.install(priority), (libc::SCHED_OTHER, 19));
}
