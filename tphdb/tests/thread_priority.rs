//! `low_priority_compactions` lowers the compaction threads' CPU priority
//! and no other thread's. Alone in its binary: it reads the nice value of
//! every thread of the process by name.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use tphdb::{Options, DB};

/// The nice value in a thread's `stat`.
fn nice_in(stat: &str) -> i64 {
    // Fields after the name, which is in parentheses: state is the first,
    // nice the 17th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(16).unwrap().parse().unwrap()
}

/// `(name, nice)` of each thread of this process.
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
        out.push((comm.trim().to_string(), nice_in(&stat)));
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

#[test]
fn low_priority_compactions_lower_only_the_compaction_threads() {
    let own = nice_in(&std::fs::read_to_string("/proc/thread-self/stat").unwrap());
    for low in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let opts = Options {
            low_priority_compactions: low,
            background_threads: 2,
            ..Options::default()
        };
        let db = DB::open(&opts, dir.path()).unwrap();
        for i in 0..1000u32 {
            db.put(i.to_be_bytes(), b"value").unwrap();
        }
        db.compact_range(None, None).unwrap();
        let want = if low { 19 } else { own };
        // The pool's threads lower themselves as they start.
        let deadline = Instant::now() + Duration::from_secs(10);
        let compaction = loop {
            let nice = nice_of("tphdb-bg-");
            if (nice.len() == 2 && nice.iter().all(|&n| n == want)) || Instant::now() > deadline {
                break nice;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(
            compaction,
            vec![want, want],
            "low_priority_compactions {low}"
        );
        assert_eq!(nice_of("tphdb-flush-"), vec![own]);
        assert_eq!(
            db.get(7u32.to_be_bytes()).unwrap().as_deref(),
            Some(&b"value"[..])
        );
        db.close().unwrap();
    }
}
