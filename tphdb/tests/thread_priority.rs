//! `compaction_priority` lowers the compaction threads' CPU priority and no
//! other thread's, and a closed database's threads are gone. Alone in its
//! binary: it reads the nice value of every thread of the process by name,
//! so its tests run one at a time.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use tphdb::{CompactionPriority, Options, DB};

/// Held by each test: the other's database has threads of the same names.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The nice value in a thread's `stat`.
fn nice_in(stat: &str) -> i64 {
    stat_field(stat, 16)
}

/// Field `n` of a thread's `stat` after its name (which is in parentheses):
/// state is the 0th, flags the 6th, nice the 16th.
fn stat_field(stat: &str, n: usize) -> i64 {
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(n).unwrap().parse().unwrap()
}

/// The kernel's flag of a thread in its exit (`PF_EXITING`).
const PF_EXITING: i64 = 0x4;

/// Whether the thread has begun to exit. A join returns once the kernel
/// has let go of the thread's memory, a moment before its entry leaves
/// `/proc`: a joined thread may still be listed, exiting.
fn exiting(stat: &str) -> bool {
    stat_field(stat, 6) & PF_EXITING != 0
}

/// `(name, nice)` of each thread of this process not exiting.
fn threads() -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let (Ok(comm), Ok(stat)) = (
            std::fs::read_to_string(dir.join("comm")),
            std::fs::read_to_string(dir.join("stat")),
        ) else {
            continue; // the thread ended meanwhile
        };
        if !exiting(&stat) {
            out.push((comm.trim().to_string(), nice_in(&stat)));
        }
    }
    out
}

fn nice_of(prefix: &str) -> Vec<i64> {
    threads()
        .into_iter()
        .filter(|(name, _)| name.starts_with(prefix))
        .map(|(_, nice)| nice)
        .collect()
}

/// Waits until the threads named `prefix*` are `count` and all at `nice`
/// (a pool's threads lower themselves as they start); returns their nice
/// values.
fn wait_for_nice(prefix: &str, count: usize, nice: i64) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = nice_of(prefix);
        if (found.len() == count && found.iter().all(|&n| n == nice)) || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn low_priority_compactions_lower_only_the_compaction_threads() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let own = nice_in(&std::fs::read_to_string("/proc/thread-self/stat").unwrap());
    for low in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            compaction_priority: if low {
                CompactionPriority::Low
            } else {
                CompactionPriority::Normal
            },
            background_threads: 2,
            ..Options::default()
        };
        let db = DB::open(&opts, dir.path()).unwrap();
        for i in 0..1000u32 {
            db.put(i.to_be_bytes(), b"value").unwrap();
        }
        db.compact_range(None, None).unwrap();
        let want = if low { 19 } else { own };
        assert_eq!(
            wait_for_nice("tphdb-bg-", 2, want),
            vec![want, want],
            "low priority {low}"
        );
        assert_eq!(nice_of("tphdb-flush-"), vec![own]);
        assert_eq!(
            db.get(7u32.to_be_bytes()).unwrap().as_deref(),
            Some(&b"value"[..])
        );
        db.close().unwrap();
    }
}

/// Under `LowWithoutWrites`, the compactions of a write load run on the
/// normal threads, and those that start once writes stopped (here: at
/// open, before any write) on the low-priority ones.
#[test]
fn compactions_start_at_low_priority_once_writes_stop() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let own = nice_in(&std::fs::read_to_string("/proc/thread-self/stat").unwrap());
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        compaction_priority: CompactionPriority::LowWithoutWrites,
        // Long enough that the load never looks idle between writes.
        compaction_idle_millis: 60_000,
        background_threads: 2,
        write_buffer_bytes: 64 << 10,
        l0_compaction_trigger: 4,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let value = [7u8; 100];
    for i in 0..20_000u32 {
        db.put(i.to_be_bytes(), value).unwrap();
    }
    db.wait_for_compactions().unwrap();
    let st = db.stats();
    assert!(st.compactions > 0, "the load compacted");
    assert_eq!(st.low_priority_compactions, 0, "while writes arrive");
    // Three level-0 TPHs wait below the trigger.
    db.compact_range(None, None).unwrap();
    for round in 0..3u32 {
        for i in 0..100u32 {
            db.put((round * 100 + i).to_be_bytes(), value).unwrap();
        }
        db.flush().unwrap();
    }
    db.wait_for_compactions().unwrap();
    assert_eq!(db.stats().levels[0].tphs, 3);
    db.close().unwrap();
    // Reopened with a trigger that makes level 0 due at once: no write
    // has arrived since the open.
    let opts = Options {
        l0_compaction_trigger: 2,
        ..opts
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    db.wait_for_compactions().unwrap();
    let st = db.stats();
    assert!(st.low_priority_compactions > 0, "{st:?}");
    assert_eq!(st.levels[0].tphs, 0, "level 0 merged");
    assert_eq!(wait_for_nice("tphdb-bg-low-", 2, 19), vec![19, 19]);
    assert_eq!(
        nice_of("tphdb-bg-")
            .into_iter()
            .filter(|&n| n == own)
            .count(),
        2,
        "the normal pool keeps the caller's priority"
    );
    for i in (0..20_000u32).step_by(997) {
        assert_eq!(
            db.get(i.to_be_bytes()).unwrap().as_deref(),
            Some(&value[..])
        );
    }
    db.close().unwrap();
}

/// Found by the `db_open` fuzz target: a dropped database's pool threads
/// outlived it for a moment (LeakSanitizer reported their state as
/// leaked), since a rayon pool dropped does not wait for its threads.
/// Threads already exiting do not count: a joined thread was listed so in
/// about one round of five.
#[test]
fn a_closed_database_leaves_none_of_its_threads() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        compaction_priority: CompactionPriority::LowWithoutWrites,
        background_threads: 2,
        ..Options::default()
    };
    for round in 0..20u32 {
        let db = DB::open(&opts, dir.path()).unwrap();
        db.put(round.to_be_bytes(), b"value").unwrap();
        db.compact_range(None, None).unwrap();
        drop(db);
        let left: Vec<String> = threads()
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| name.starts_with("tphdb-"))
            .collect();
        assert!(left.is_empty(), "round {round}: {left:?} still running");
    }
}
