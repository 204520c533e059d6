//! Background jobs as a user sees them: how many run at once, and what
//! they leave on disk once the database is settled.

use std::path::Path;

use tphdb::{Options, DB};

mod common;

use common::{small, spread_key};

/// The sizes of the piece files in `dir`.
fn piece_file_sizes(dir: &Path) -> Vec<u64> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().extension().is_some_and(|x| x == "ph"))
        .map(|e| e.metadata().unwrap().len())
        .collect()
}

/// Compactions start only on a free background thread. Before, every job
/// the picker allowed was handed to the pool at once: queued behind busy
/// threads, a job held the TPHs it owned for nothing (the end of a
/// push-down held level 1 for 10 s of a 32M-key fill, and writes stalled).
#[test]
fn compactions_start_only_on_a_free_thread() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        background_threads: 2,
        fanout: 8,
        max_levels: 3,
        ..small()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    for i in 0..150_000u64 {
        db.put(spread_key(i), [i as u8; 100]).unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let st = db.stats();
    let pushed = st.levels.iter().skip(2).any(|l| l.tphs > 0);
    assert!(pushed, "nothing below level 1: {}", st.level_table());
    assert!(st.compactions > 20, "{} compactions", st.compactions);
    assert!(
        (1..=2).contains(&st.peak_running_compactions),
        "{} compactions at once on 2 threads",
        st.peak_running_compactions
    );
    for i in (0..150_000).step_by(7) {
        assert_eq!(
            db.get(spread_key(i)).unwrap().as_deref(),
            Some(&[i as u8; 100][..])
        );
    }
}

/// `running_jobs` and `work_pending` say whether background work is
/// under way, as a server's INFO reports it: seen busy during a load, and
/// idle once a wait for compactions returns.
#[test]
fn stats_show_background_work_until_it_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&small(), dir.path()).unwrap();
    let idle = db.stats();
    assert_eq!((idle.running_jobs, idle.work_pending), (0, false));
    let (mut seen_busy, mut seen_holding) = (0, 0);
    for i in 0..100_000u64 {
        db.put(spread_key(i), [i as u8; 100]).unwrap();
        if i % 200 == 0 {
            let st = db.stats();
            if st.running_jobs > 0 || st.work_pending {
                seen_busy += 1;
            }
            if st.job_memory_bytes > 0 {
                seen_holding += 1;
            }
        }
    }
    assert!(seen_busy > 0, "no sample of 500 saw a job running or due");
    assert!(
        seen_holding > 0,
        "no sample of 500 saw a job holding memory"
    );
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    let st = db.stats();
    assert_eq!(
        (st.running_jobs, st.work_pending),
        (0, false),
        "{}",
        st.level_table()
    );
    assert_eq!(st.job_memory_bytes, 0, "what jobs held is let go");
    assert!(st.report().contains("running now 0"));
    assert_eq!(
        db.property_value("tphdb.num-running-jobs")
            .unwrap()
            .as_deref(),
        Some("0")
    );
    assert_eq!(
        db.property_value("tphdb.compaction-pending")
            .unwrap()
            .as_deref(),
        Some("0")
    );
}

/// A wait for compactions returns once the files of what the last jobs
/// replaced are gone, not while the job that pushed a TPH down still
/// holds it: a benchmark measuring space right after its settle counted
/// 150-200 MB of a 16M-key fill that was about to be deleted.
#[test]
fn a_wait_for_compactions_returns_with_replaced_files_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        background_threads: 2,
        fanout: 4,
        write_buffer_bytes: 1 << 20,
        tph_target_bytes: 1 << 20,
        l0_compaction_trigger: 2,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let mut stale = Vec::new();
    for round in 0..8u64 {
        for i in round * 4000..(round + 1) * 4000 {
            db.put(spread_key(i), vec![i as u8; 1000]).unwrap();
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        let on_disk: u64 = piece_file_sizes(dir.path()).iter().sum();
        let used: u64 = db.stats().levels.iter().map(|l| l.file_bytes).sum();
        if on_disk != used {
            stale.push((round, on_disk - used));
        }
    }
    let st = db.stats();
    assert!(st.levels.len() > 2, "no push-downs: {}", st.level_table());
    assert!(
        stale.is_empty(),
        "bytes of replaced pieces still on disk, by round: {stale:?}"
    );
}

/// Once background work is done, the directory holds only the pieces the
/// database uses: the last compaction's inputs do not linger.
#[test]
fn a_settled_database_keeps_no_obsolete_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let db = DB::open(&small(), dir.path()).unwrap();
    for round in 0..6u32 {
        for i in 0..2000u32 {
            db.put(format!("key{i:05}"), format!("value {round}"))
                .unwrap();
        }
        db.flush().unwrap();
    }
    db.wait_for_compactions().unwrap();
    let pieces_used: u64 = db.stats().levels.iter().map(|l| l.pieces).sum();
    let on_disk = piece_file_sizes(dir.path()).len() as u64;
    // Heads that hold only an index are files too, beyond the data pieces.
    let tphs: u64 = db.stats().levels.iter().map(|l| l.tphs).sum();
    assert!(
        on_disk <= pieces_used + tphs,
        "{on_disk} piece files for {pieces_used} pieces in {tphs} TPHs"
    );
}

/// Regression: in one-level mode level 1 gets a level below it once its
/// first TPH passes its push-down threshold, but its merges counted on
/// `tph_target_bytes` before that and folded their pieces in size tiers
/// (every piece at once) a few flushes before the new level took them: a
/// 16M x 1 KiB one-level fill's flush then rewrote 650 MB of level 1 and
/// writes stood still for two seconds. Until level 2 opens, a flush now
/// folds only what the piece count needs: one piece per TPH.
#[test]
fn one_level_flushes_before_the_level_below_fold_one_piece_per_tph() {
    let dir = tempfile::tempdir().unwrap();
    let (keys_per_flush, value) = (2_000u32, [5u8; 100]);
    // Each flush brings each of the two level-1 TPHs about 1,000 entries
    // of some 120 bytes: the target is ten and a half of those deltas, so
    // size tiers would pay before the target (9 deltas and more) but not
    // before the lowest threshold, three quarters of it.
    let delta = u64::from(keys_per_flush) / 2 * 120;
    let opts = Options {
        one_level: true,
        fanout: 2,
        max_pieces: 4,
        tph_target_bytes: delta * 21 / 2,
        write_buffer_bytes: 64 << 20,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let mut folded = 0;
    for round in 0..30u32 {
        for i in 0..keys_per_flush {
            db.put((round * keys_per_flush + i).to_be_bytes(), value)
                .unwrap();
        }
        db.flush().unwrap();
        db.wait_for_compactions().unwrap();
        let st = db.stats();
        if st.levels.len() > 2 {
            assert!(round > 5, "level 2 opened after {round} flushes");
            return;
        }
        assert!(
            st.pieces_folded - folded <= 2,
            "flush {round} folded {} pieces",
            st.pieces_folded - folded
        );
        folded = st.pieces_folded;
    }
    panic!("level 2 never opened");
}
