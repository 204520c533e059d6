//! Compactions at low CPU priority once writes stop
//! ([`CompactionPriority::LowWithoutWrites`]).
//!
//! An unprivileged thread can lower its nice value but never raise it
//! again, so low-priority compactions run on threads of their own, as many
//! as the normal pool's. Merges hold memory per running thread, and the two
//! pools together have twice the threads: a merge on the low pool, or on
//! the normal pool while a low one runs, takes half a share. Low-priority
//! jobs start only once no normal one runs, so that no full share is ever
//! held beside them; normal ones start whenever they are due.
//!
//! [`CompactionPriority::LowWithoutWrites`]: crate::CompactionPriority::LowWithoutWrites

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The low-priority pool and the job bodies running on each pool.
pub(crate) struct LowPriority {
    pub(crate) pool: rayon::ThreadPool,
    /// Job bodies running on `pool`.
    low_running: AtomicUsize,
    /// Job bodies running on the normal compaction pool.
    normal_running: AtomicUsize,
    idle_after: Duration,
}

/// Where the next compaction may start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    Normal,
    Low,
    /// Writes stopped, but normal jobs still run: the next starts at low
    /// priority once they end.
    Wait,
}

impl LowPriority {
    pub(crate) fn new(pool: rayon::ThreadPool, idle_after: Duration) -> LowPriority {
        LowPriority {
            pool,
            low_running: AtomicUsize::new(0),
            normal_running: AtomicUsize::new(0),
            idle_after,
        }
    }

    /// Where a compaction may start now, given what the scheduler has seen
    /// of the writes (see [`WritesSeen::idle`]).
    pub(crate) fn start(
        &self,
        writes: &mut WritesSeen,
        count: u64,
        stalled: bool,
        now: Instant,
    ) -> Start {
        if !writes.idle(count, stalled, now, self.idle_after) {
            Start::Normal
        } else if self.normal_running.load(Ordering::Acquire) > 0 {
            Start::Wait
        } else {
            Start::Low
        }
    }

    /// Counts a job body started on the low pool (`low`) or the normal one.
    /// Called with the state lock held, as [`LowPriority::ended`] is.
    pub(crate) fn started(&self, low: bool) {
        self.counter(low).fetch_add(1, Ordering::AcqRel);
    }

    /// Counts the end (or parking) of a body that ran on the calling
    /// thread; nothing for a thread of neither pool.
    pub(crate) fn ended(&self, normal_pool: &rayon::ThreadPool) {
        if let Some(low) = self.on_pool(normal_pool) {
            self.counter(low).fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The share of a merge's memory a merge on the calling thread takes,
    /// in halves: 2 (all of it) on the normal pool while no low-priority
    /// job runs, and off both pools (a flush, an ingest, a manual
    /// compaction), 1 otherwise.
    pub(crate) fn merge_halves(&self, normal_pool: &rayon::ThreadPool) -> u64 {
        let beside_low = self.low_running.load(Ordering::Acquire) > 0;
        match self.on_pool(normal_pool) {
            Some(true) => 1,
            Some(false) if beside_low => 1,
            _ => 2,
        }
    }

    /// Whether the calling thread is of the low pool (`Some(true)`), the
    /// normal one (`Some(false)`) or neither.
    fn on_pool(&self, normal_pool: &rayon::ThreadPool) -> Option<bool> {
        if self.pool.current_thread_index().is_some() {
            Some(true)
        } else if normal_pool.current_thread_index().is_some() {
            Some(false)
        } else {
            None
        }
    }

    fn counter(&self, low: bool) -> &AtomicUsize {
        if low {
            &self.low_running
        } else {
            &self.normal_running
        }
    }
}

/// The writes the scheduler has seen: their count, and when it last saw
/// it change.
#[derive(Debug, Default)]
pub(crate) struct WritesSeen {
    count: u64,
    changed_at: Option<Instant>,
}

impl WritesSeen {
    /// Whether no write arrived for `idle_after`, given the writes' `count`
    /// so far and whether writers wait in a stall or a delay (`stalled`).
    /// Only the count is known, so a change counts from the call that first
    /// sees it (never earlier than the write); before any write, writes
    /// are idle. Writers waiting count as writes arriving: no write
    /// completes while they wait, and the jobs they wait for must keep
    /// normal priority however long that lasts.
    pub(crate) fn idle(
        &mut self,
        count: u64,
        stalled: bool,
        now: Instant,
        idle_after: Duration,
    ) -> bool {
        if count != self.count || stalled {
            self.count = count;
            self.changed_at = Some(now);
        }
        self.changed_at
            .is_none_or(|t| now.saturating_duration_since(t) >= idle_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
    }

    #[test]
    fn writes_are_idle_once_the_count_stood_still_long_enough() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut w = WritesSeen::default();
        assert!(w.idle(0, false, t0, ms(100)), "no write yet");
        assert!(
            !w.idle(5, false, t0 + ms(10), ms(100)),
            "the first sight of writes"
        );
        assert!(!w.idle(5, false, t0 + ms(60), ms(100)));
        assert!(w.idle(5, false, t0 + ms(110), ms(100)));
        assert!(!w.idle(6, false, t0 + ms(500), ms(100)), "writes again");
        assert!(w.idle(6, false, t0 + ms(600), ms(100)));
        assert!(!w.idle(6, true, t0 + ms(900), ms(100)), "writers stalled");
        assert!(!w.idle(6, false, t0 + ms(950), ms(100)));
        assert!(w.idle(6, false, t0 + ms(1000), ms(100)));
    }

    #[test]
    fn writers_waiting_in_a_stall_keep_compactions_at_normal_priority() {
        let normal = pool(1);
        let low = LowPriority::new(pool(1), Duration::from_millis(100));
        let mut w = WritesSeen::default();
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        assert_eq!(low.start(&mut w, 1, false, t0), Start::Normal);
        // No write completed for a second, but writers wait for compactions.
        assert_eq!(low.start(&mut w, 1, true, later), Start::Normal);
        let after = later + Duration::from_millis(150);
        assert_eq!(
            low.start(&mut w, 1, false, after),
            Start::Low,
            "idle since the stall"
        );
        normal.install(|| {
            low.started(false);
            assert_eq!(low.start(&mut w, 1, true, after), Start::Normal);
            low.ended(&normal);
        });
    }

    #[test]
    fn low_priority_jobs_wait_for_the_normal_ones_and_halve_every_share_beside_them() {
        let normal = pool(2);
        let low = LowPriority::new(pool(2), Duration::from_millis(100));
        let mut w = WritesSeen::default();
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(1);
        assert_eq!(
            low.start(&mut w, 1, false, t0),
            Start::Normal,
            "writes just seen"
        );
        normal.install(|| {
            low.started(false);
            assert_eq!(low.merge_halves(&normal), 2, "no low job runs");
        });
        assert_eq!(
            low.start(&mut w, 1, false, later),
            Start::Wait,
            "a normal job runs"
        );
        normal.install(|| low.ended(&normal));
        assert_eq!(low.start(&mut w, 1, false, later), Start::Low);
        low.pool.install(|| {
            low.started(true);
            assert_eq!(low.merge_halves(&normal), 1, "on the low pool");
        });
        // Writes are back: a normal job starts beside the low one, on half
        // a share.
        assert_eq!(low.start(&mut w, 2, false, later), Start::Normal);
        normal.install(|| assert_eq!(low.merge_halves(&normal), 1));
        assert_eq!(low.merge_halves(&normal), 2, "off both pools");
        low.pool.install(|| low.ended(&normal));
        normal.install(|| assert_eq!(low.merge_halves(&normal), 2));
    }
}
