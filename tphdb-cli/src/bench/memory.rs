//! Memory over a run: the process's resident set and what the engine says
//! its parts hold, sampled once a second from the measured phase through
//! the final settle (where a fill's compactions still run). The resident
//! set is also read every 20 ms, and the parts again at each new high: a
//! peak often lasts less than a second (a merge's lists while it copies
//! them), and the samples a second apart missed it by up to 14 MB.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::engines::Kv;

/// Resident set size in bytes (`VmRSS`).
pub fn rss() -> u64 {
    status_kb("VmRSS:") << 10
}

/// Peak resident set size in bytes (`VmHWM`).
pub fn peak_rss() -> u64 {
    status_kb("VmHWM:") << 10
}

fn status_kb(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    field_kb(&s, field)
}

fn field_kb(status: &str, field: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
}

/// The resident set by kind, in bytes: anonymous memory (heaps, arenas,
/// stacks) and file pages mapped into the process (the binary, and an
/// engine's memory-mapped files).
fn rss_by_kind() -> [(&'static str, u64); 2] {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    [
        ("process_anon", field_kb(&s, "RssAnon:") << 10),
        ("process_file", field_kb(&s, "RssFile:") << 10),
    ]
}

/// What the heap holds, in bytes, with jemalloc as the allocator (every
/// engine's, C and C++ peers included): `heap_allocated`, the bytes of live
/// allocations, and `heap_resident`, the pages the allocator holds resident
/// for them, its metadata and freed pages not yet returned. Memory mapped
/// outside the heap (a memtable's arena, mapped files) is in neither.
fn heap() -> Vec<(&'static str, u64)> {
    #[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
    {
        use tikv_jemalloc_ctl::{epoch, stats};
        // The statistics are a snapshot taken when the epoch advances.
        if epoch::advance().is_ok() {
            if let (Ok(allocated), Ok(resident)) =
                (stats::allocated::read(), stats::resident::read())
            {
                return vec![
                    ("heap_allocated", allocated as u64),
                    ("heap_resident", resident as u64),
                ];
            }
        }
    }
    Vec::new()
}

/// Samples a second apart, in MB: `rss` and, by name, the engine's parts
/// ([`Kv::memory_parts`]), the resident set's anonymous and file-backed
/// parts (`process_anon`, `process_file`), which every engine has, and the
/// heap's ([`heap`]); and the same taken at the highest resident set seen.
/// Beside them, the engine's waits so far ([`Kv::wait_counters`]).
#[derive(Debug, Default)]
pub struct MemoryTimeline {
    pub rss_mb: Vec<f64>,
    pub parts_mb: BTreeMap<String, Vec<f64>>,
    /// Microseconds writers had waited by each sample, by cause.
    waited_us: BTreeMap<String, Vec<u64>>,
    /// The parts at the highest resident set the frequent reads saw,
    /// `rss` first.
    highest: Vec<(String, f64)>,
}

fn mb(bytes: u64) -> f64 {
    (bytes as f64 / 1e5).round() / 10.0
}

/// The parts now, by name, in MB.
fn parts_now(db: &dyn Kv) -> Vec<(String, f64)> {
    let parts = db.memory_parts().into_iter().chain(rss_by_kind());
    parts
        .chain(heap())
        .map(|(name, bytes)| (name.to_string(), mb(bytes)))
        .collect()
}

impl MemoryTimeline {
    fn sample(&mut self, db: &dyn Kv) {
        self.rss_mb.push(mb(rss()));
        for (name, x) in parts_now(db) {
            self.parts_mb.entry(name).or_default().push(x);
        }
        for (name, us) in db.wait_counters() {
            self.waited_us.entry(name.to_string()).or_default().push(us);
        }
    }

    /// Milliseconds writers waited between one sample and the next, by
    /// cause: entry `i` is the second after sample `i`.
    pub fn waited_ms_per_sec(&self) -> BTreeMap<String, Vec<f64>> {
        let per_sec = |v: &Vec<u64>| {
            let ms = |w: &[u64]| (w[1].saturating_sub(w[0]) as f64 / 100.0).round() / 10.0;
            v.windows(2).map(ms).collect()
        };
        let waited = self.waited_us.iter();
        waited.map(|(name, v)| (name.clone(), per_sec(v))).collect()
    }

    /// Takes the parts if `rss_mb` passes the highest resident set yet by
    /// half a megabyte (while memory grows, not at every read).
    fn note_high(&mut self, rss_mb: f64, db: &dyn Kv) {
        if self
            .highest
            .first()
            .is_none_or(|(_, top)| rss_mb >= *top + 0.5)
        {
            let mut parts = parts_now(db);
            parts.sort_by(|a, b| a.0.cmp(&b.0));
            self.highest = std::iter::once(("rss".to_string(), rss_mb))
                .chain(parts)
                .collect();
        }
    }

    /// The engine's parts at the highest resident set, that resident set
    /// first: as the frequent reads caught it, or else at the sample of the
    /// highest.
    pub fn at_peak(&self) -> Vec<(String, f64)> {
        if !self.highest.is_empty() {
            return self.highest.clone();
        }
        let Some((i, &top)) = self
            .rss_mb
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
        else {
            return Vec::new();
        };
        let mut out = vec![("rss".to_string(), top)];
        for (name, v) in &self.parts_mb {
            if let Some(&x) = v.get(i) {
                out.push((name.clone(), x));
            }
        }
        out
    }
}

/// Runs `f` while a thread samples `db`'s memory once a second, and reads
/// the resident set every 20 ms for the parts at its highest.
pub fn sampled<T>(db: &dyn Kv, f: impl FnOnce() -> T) -> (T, MemoryTimeline) {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut timeline = MemoryTimeline::default();
            let mut next = std::time::Instant::now();
            while !stop.load(Ordering::Relaxed) {
                if std::time::Instant::now() >= next {
                    timeline.sample(db);
                    next += Duration::from_secs(1);
                }
                timeline.note_high(mb(rss()), db);
                std::thread::sleep(Duration::from_millis(20));
            }
            timeline
        });
        let out = f();
        stop.store(true, Ordering::Relaxed);
        (out, sampler.join().expect("memory sampler"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::engines::Result;

    #[test]
    fn the_peak_is_the_highest_resident_set_with_the_parts_of_that_second() {
        let timeline = MemoryTimeline {
            rss_mb: vec![100.0, 300.0, 250.0],
            parts_mb: BTreeMap::from([
                ("memtables".to_string(), vec![10.0, 64.0, 128.0]),
                ("index".to_string(), vec![1.0, 2.0, 3.0]),
            ]),
            highest: Vec::new(),
            waited_us: BTreeMap::new(),
        };
        let want = [("rss", 300.0), ("index", 2.0), ("memtables", 64.0)];
        let got = timeline.at_peak();
        assert_eq!(got.len(), want.len());
        for ((name, x), (want_name, want_x)) in got.iter().zip(want) {
            assert_eq!((name.as_str(), *x), (want_name, want_x));
        }
        assert!(MemoryTimeline::default().at_peak().is_empty());
    }

    #[test]
    fn waits_per_second_are_the_differences_between_samples() {
        let timeline = MemoryTimeline {
            waited_us: BTreeMap::from([
                ("paced".to_string(), vec![0, 250_000, 250_000, 1_000_400]),
                ("stopped".to_string(), vec![5]),
            ]),
            ..MemoryTimeline::default()
        };
        let got = timeline.waited_ms_per_sec();
        assert_eq!(got["paced"], [250.0, 0.0, 750.4]);
        assert!(got["stopped"].is_empty(), "one sample, no second");
    }

    /// An engine whose one part is set by the test.
    struct Parts(std::sync::atomic::AtomicU64);

    impl Kv for Parts {
        fn put(&self, _: &[u8], _: &[u8]) -> Result<()> {
            Ok(())
        }
        fn get(&self, _: &[u8]) -> Result<Option<usize>> {
            Ok(None)
        }
        fn delete(&self, _: &[u8]) -> Result<()> {
            Ok(())
        }
        fn scan(&self, _: &[u8], _: usize) -> Result<usize> {
            Ok(0)
        }
        fn settle(&self) -> Result<()> {
            Ok(())
        }
        fn memory_parts(&self) -> Vec<(&'static str, u64)> {
            vec![("jobs", self.0.load(Ordering::Relaxed))]
        }
    }

    /// The parts reported at the peak are those of the highest resident
    /// set the frequent reads saw, between the once-a-second samples.
    #[test]
    fn the_peak_between_samples_keeps_the_parts_of_its_moment() {
        let db = Parts(std::sync::atomic::AtomicU64::new(0));
        let mut timeline = MemoryTimeline::default();
        timeline.sample(&db);
        for (rss, jobs) in [(100.0, 1), (100.3, 2), (180.0, 3), (120.0, 4), (179.0, 5)] {
            db.0.store(jobs << 20, Ordering::Relaxed);
            timeline.note_high(rss, &db);
        }
        timeline.sample(&db);
        let peak: BTreeMap<String, f64> = timeline.at_peak().into_iter().collect();
        assert_eq!(peak["rss"], 180.0);
        assert_eq!(peak["jobs"], 3.1, "{peak:?}");
        assert!(peak.contains_key("process_anon"));
        assert!(timeline.rss_mb.iter().all(|&r| r < 180.0));
    }

    #[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
    #[test]
    fn the_heap_counts_a_live_allocation() {
        let held = vec![1u8; 64 << 20];
        let parts: BTreeMap<_, _> = heap().into_iter().collect();
        assert!(parts["heap_allocated"] >= 64 << 20, "{parts:?}");
        assert!(
            parts["heap_resident"] >= parts["heap_allocated"],
            "{parts:?}"
        );
        drop(held);
    }

    /// Regression: `rss()` then `peak_rss()`, two reads, once saw 4,603,904
    /// bytes resident and a peak of 4,587,520 (other tests' threads
    /// freeing in between, the peak not yet updated). One read of the
    /// status has both from the same counters.
    #[test]
    fn this_process_has_a_resident_set_within_its_peak() {
        assert!(rss() > 0 && peak_rss() > 0);
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        let (now, peak) = (field_kb(&s, "VmRSS:"), field_kb(&s, "VmHWM:"));
        assert!(now > 0 && now <= peak, "{now} kB resident, peak {peak} kB");
    }

    #[test]
    fn the_resident_set_splits_into_anonymous_and_file_pages() {
        let [(_, anon), (_, file)] = rss_by_kind();
        // The test binary's own pages are file-backed; its heap anonymous.
        assert!(anon > 0 && file > 0, "{anon} anonymous, {file} file");
        assert!(anon + file <= peak_rss() + (1 << 20));
    }
}
