//! When the running flush will end, for pacing the memtable that fills
//! meanwhile: while every frozen memtable slot is taken, the active one
//! may fill no faster than the flush before it frees a slot, and writes
//! that keep to that never stop for it (`db/write_delay.rs`).
//!
//! A flush into level 1 (one-level mode) merges into its partitions one
//! after another and counts them as it goes; the share done so far says
//! how long the rest will take. Before the first is done, and for a flush
//! into level 0 (which writes one TPH), the recent flushes' duration says
//! it. A flush past that duration with nothing counted has no estimate:
//! the memtable's last quarter is then paced in fixed steps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Weight of the latest flush in the typical duration.
const LATEST_WEIGHT: f64 = 0.3;
/// The shortest time left a flush is given: one about to end does not
/// make writes wait.
const MIN_LEFT: Duration = Duration::from_millis(1);

/// The running flush's parts, done and in all, packed in one word so that a
/// reader never sees a count from one flush and a total from another.
#[derive(Default)]
pub(crate) struct FlushProgress(AtomicU64);

impl FlushProgress {
    /// A flush of `parts` parts starts them.
    pub(crate) fn start(&self, parts: u32) {
        self.0.store(u64::from(parts), Ordering::Relaxed);
    }

    /// One part is done.
    pub(crate) fn part_done(&self) {
        self.0.fetch_add(1 << 32, Ordering::Relaxed);
    }

    /// Nothing counted, as a flush is picked: only the running flush's
    /// count is read, and one from the flush before must not pass for it
    /// until the new one has split its delta.
    pub(crate) fn clear(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    /// (done, in all).
    fn get(&self) -> (u32, u32) {
        let v = self.0.load(Ordering::Relaxed);
        ((v >> 32) as u32, v as u32)
    }
}

/// The running flush's start and how long flushes take.
#[derive(Debug, Default)]
pub(crate) struct FlushEta {
    started: Option<Instant>,
    /// Recent flushes' duration, the latest weighing `LATEST_WEIGHT`.
    typical: Option<Duration>,
}

impl FlushEta {
    pub(crate) fn started(&mut self, now: Instant) {
        self.started = Some(now);
    }

    /// The flush ended at `now`; one that failed says nothing of how long
    /// flushes take.
    pub(crate) fn ended(&mut self, now: Instant, ok: bool) {
        let Some(started) = self.started.take() else {
            return;
        };
        if !ok {
            return;
        }
        let took = now.saturating_duration_since(started);
        self.typical = Some(match self.typical {
            None => took,
            Some(t) => t.mul_f64(1.0 - LATEST_WEIGHT) + took.mul_f64(LATEST_WEIGHT),
        });
    }

    /// How long until the memtables a flush holds or waits for are
    /// flushed, at `now`; `waiting` is whether some frozen memtable waits
    /// for the next flush. `None` when nothing says.
    pub(crate) fn left(
        &self,
        progress: &FlushProgress,
        waiting: bool,
        now: Instant,
    ) -> Option<Duration> {
        let running = match self.started {
            None => Duration::ZERO,
            Some(started) => {
                let elapsed = now.saturating_duration_since(started);
                match progress.get() {
                    (done, parts) if done > 0 && parts >= done => {
                        elapsed.mul_f64(f64::from(parts - done) / f64::from(done))
                    }
                    _ => self.typical?.checked_sub(elapsed)?,
                }
            }
        };
        // A flush that has not started takes a typical one's time (its
        // wait for a thread is not known); so does the one after it.
        let next = match self.started.is_none() || waiting {
            true => self.typical?,
            false => Duration::ZERO,
        };
        Some((running + next).max(MIN_LEFT))
    }
}

/// The rate in bytes a second at which `room` bytes fill in `left`.
pub(crate) fn fill_rate(room: usize, left: Duration) -> f64 {
    room as f64 / left.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// A clock whose flushes took `took` each.
    fn after_flushes(took: &[u64]) -> (FlushEta, Instant) {
        let mut eta = FlushEta::default();
        let mut now = Instant::now();
        for &t in took {
            eta.started(now);
            now += ms(t);
            eta.ended(now, true);
        }
        (eta, now)
    }

    #[test]
    fn with_nothing_counted_a_flush_takes_a_typical_time() {
        let none = FlushProgress::default();
        let (mut eta, now) = after_flushes(&[]);
        assert_eq!(eta.left(&none, false, now), None, "no flush seen yet");
        let (mut eta2, now2) = after_flushes(&[400, 400, 400]);
        eta2.started(now2);
        assert_eq!(eta2.left(&none, false, now2 + ms(100)), Some(ms(300)));
        // Past its typical time, nothing says when it ends.
        assert_eq!(eta2.left(&none, false, now2 + ms(500)), None);
        // Not started yet: a whole one.
        eta.started(now);
        eta.ended(now + ms(200), false);
        assert_eq!(eta.left(&none, false, now), None, "failures do not count");
    }

    #[test]
    fn the_typical_time_follows_recent_flushes() {
        let (eta, now) = after_flushes(&[1000, 500, 500, 500, 500, 500, 500, 500]);
        let left = eta.left(&FlushProgress::default(), true, now).unwrap();
        assert!(left > ms(500) && left < ms(550), "{left:?}");
    }

    #[test]
    fn the_parts_done_say_how_long_the_rest_takes() {
        let (mut eta, now) = after_flushes(&[300]);
        let progress = FlushProgress::default();
        eta.started(now);
        progress.start(16);
        for _ in 0..4 {
            progress.part_done();
        }
        // A quarter in 400 ms: 1.2 s more, whatever flushes took before.
        assert_eq!(eta.left(&progress, false, now + ms(400)), Some(ms(1200)));
        // And the next flush's typical time when a memtable waits for it.
        assert_eq!(eta.left(&progress, true, now + ms(400)), Some(ms(1500)));
        for _ in 4..16 {
            progress.part_done();
        }
        assert_eq!(eta.left(&progress, false, now + ms(900)), Some(MIN_LEFT));
        progress.clear();
        assert_eq!(progress.get(), (0, 0));
    }

    #[test]
    fn room_over_time_is_the_rate() {
        assert_eq!(fill_rate(64 << 20, ms(500)), 128.0 * 1048576.0);
    }
}
