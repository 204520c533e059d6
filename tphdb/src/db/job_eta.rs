//! When the running flush or level-0 compaction will end, for pacing the
//! writes that fill memtables meanwhile (`db/write_delay.rs`): while every
//! frozen memtable slot is taken, the active one may fill no faster than
//! the flush before it frees a slot; while level 0 is past its slowdown
//! trigger, the memtables may fill no faster than the level-0 compaction
//! running frees room below the stop trigger ([`level0_room`]). Writes that
//! keep to those rates never stop for either.
//!
//! A job that merges into partitions one after another (a flush into level
//! 1 in one-level mode, a level-0 compaction) counts them as it goes; the
//! share done so far says how long the rest will take. Before the first is
//! done, and for a flush into level 0 (which writes one TPH), recent jobs'
//! duration says it, per unit of input (a level-0 compaction's TPHs). A job
//! past that duration with nothing counted has no estimate: writes are then
//! paced in fixed steps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Weight of the latest job in the typical duration.
const LATEST_WEIGHT: f64 = 0.3;
/// The shortest time left a job is given: one about to end does not make
/// writes wait.
const MIN_LEFT: Duration = Duration::from_millis(1);

/// The running job's parts, done and in all, packed in one word so that a
/// reader never sees a count from one job and a total from another.
#[derive(Default)]
pub(crate) struct JobProgress(AtomicU64);

impl JobProgress {
    /// A job of `parts` parts starts them.
    pub(crate) fn start(&self, parts: u32) {
        self.0.store(u64::from(parts), Ordering::Relaxed);
    }

    /// One part is done.
    pub(crate) fn part_done(&self) {
        self.0.fetch_add(1 << 32, Ordering::Relaxed);
    }

    /// Nothing counted, as a job is picked: only the running job's count
    /// is read, and one from the job before must not pass for it until the
    /// new one has split its input.
    pub(crate) fn clear(&self) {
        self.0.store(0, Ordering::Relaxed);
    }

    /// (done, in all).
    pub(crate) fn get(&self) -> (u32, u32) {
        let v = self.0.load(Ordering::Relaxed);
        ((v >> 32) as u32, v as u32)
    }
}

/// The running job's start and size, and how long such jobs take.
#[derive(Debug, Default)]
pub(crate) struct JobEta {
    /// When the running job started, and its units of input.
    started: Option<(Instant, u32)>,
    /// Recent jobs' duration per unit of input, the latest weighing
    /// `LATEST_WEIGHT`.
    typical: Option<Duration>,
}

impl JobEta {
    /// A job of `units` units of input (at least one) started at `now`.
    pub(crate) fn started(&mut self, now: Instant, units: usize) {
        self.started = Some((now, units.clamp(1, u32::MAX as usize) as u32));
    }

    /// The job ended at `now`; one that failed says nothing of how long
    /// jobs take.
    pub(crate) fn ended(&mut self, now: Instant, ok: bool) {
        let Some((started, units)) = self.started.take() else {
            return;
        };
        if !ok {
            return;
        }
        let took = now.saturating_duration_since(started) / units;
        self.typical = Some(match self.typical {
            None => took,
            Some(t) => t.mul_f64(1.0 - LATEST_WEIGHT) + took.mul_f64(LATEST_WEIGHT),
        });
    }

    /// Recent jobs' duration per unit of input.
    #[cfg(test)]
    pub(crate) fn typical(&self) -> Option<Duration> {
        self.typical
    }

    /// How long until the running job ends, at `now`; `None` when none runs
    /// or nothing says.
    pub(crate) fn running_left(&self, progress: &JobProgress, now: Instant) -> Option<Duration> {
        let (started, units) = self.started?;
        let elapsed = now.saturating_duration_since(started);
        let left = match progress.get() {
            (done, parts) if done > 0 && parts >= done => {
                elapsed.mul_f64(f64::from(parts - done) / f64::from(done))
            }
            _ => self.typical?.checked_mul(units)?.checked_sub(elapsed)?,
        };
        Some(left.max(MIN_LEFT))
    }

    /// How long until the memtables a flush holds or waits for are
    /// flushed, at `now` (flushes being of one unit); `waiting` is whether
    /// some frozen memtable waits for the next flush. `None` when nothing
    /// says.
    pub(crate) fn left(
        &self,
        progress: &JobProgress,
        waiting: bool,
        now: Instant,
    ) -> Option<Duration> {
        let running = match self.started {
            None => Duration::ZERO,
            Some(_) => self.running_left(progress, now)?,
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

/// The bytes writes may add to the memtables before level 0 would reach
/// one short of `stop_trigger` TPHs, with `l0` TPHs in it, `frozen` frozen
/// memtables (each a level-0 TPH once flushed) and `active_bytes` in the
/// active memtable: the active memtable and those after it fill until the
/// one that would make level 0 that deep. `None` when level 0 is there
/// already.
pub(crate) fn level0_room(
    l0: usize,
    frozen: usize,
    stop_trigger: usize,
    write_buffer_bytes: usize,
    active_bytes: usize,
) -> Option<usize> {
    let memtables = stop_trigger.checked_sub(l0 + frozen + 1)?;
    (memtables * write_buffer_bytes)
        .checked_sub(active_bytes)
        .filter(|&room| room > 0)
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
    fn after_flushes(took: &[u64]) -> (JobEta, Instant) {
        let mut eta = JobEta::default();
        let mut now = Instant::now();
        for &t in took {
            eta.started(now, 1);
            now += ms(t);
            eta.ended(now, true);
        }
        (eta, now)
    }

    #[test]
    fn with_nothing_counted_a_flush_takes_a_typical_time() {
        let none = JobProgress::default();
        let (mut eta, now) = after_flushes(&[]);
        assert_eq!(eta.left(&none, false, now), None, "no flush seen yet");
        let (mut eta2, now2) = after_flushes(&[400, 400, 400]);
        eta2.started(now2, 1);
        assert_eq!(eta2.left(&none, false, now2 + ms(100)), Some(ms(300)));
        // Past its typical time, nothing says when it ends.
        assert_eq!(eta2.left(&none, false, now2 + ms(500)), None);
        // Not started yet: a whole one.
        eta.started(now, 1);
        eta.ended(now + ms(200), false);
        assert_eq!(eta.left(&none, false, now), None, "failures do not count");
    }

    #[test]
    fn the_typical_time_follows_recent_flushes() {
        let (eta, now) = after_flushes(&[1000, 500, 500, 500, 500, 500, 500, 500]);
        let left = eta.left(&JobProgress::default(), true, now).unwrap();
        assert!(left > ms(500) && left < ms(550), "{left:?}");
    }

    #[test]
    fn the_parts_done_say_how_long_the_rest_takes() {
        let (mut eta, now) = after_flushes(&[300]);
        let progress = JobProgress::default();
        eta.started(now, 1);
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
    fn a_level0_compaction_takes_the_typical_time_of_each_tph_it_merges() {
        let none = JobProgress::default();
        let mut eta = JobEta::default();
        let now = Instant::now();
        assert_eq!(eta.running_left(&none, now), None, "nothing runs");
        // Four TPHs in 2 s: half a second each.
        eta.started(now, 4);
        eta.ended(now + ms(2000), true);
        let now = now + ms(3000);
        eta.started(now, 10);
        assert_eq!(eta.running_left(&none, now + ms(1000)), Some(ms(4000)));
        // Once parts are counted, they say it.
        none.start(8);
        none.part_done();
        none.part_done();
        assert_eq!(eta.running_left(&none, now + ms(1000)), Some(ms(3000)));
        eta.ended(now + ms(4000), true);
        assert_eq!(eta.running_left(&none, now), None, "ended");
    }

    #[test]
    fn level0_room_is_what_fills_before_level0_is_one_short_of_its_stop() {
        let mib = 1 << 20;
        // 15 TPHs of a stop at 20: the active memtable and three more.
        assert_eq!(level0_room(15, 0, 20, 64 * mib, 10 * mib), Some(246 * mib));
        // A frozen memtable is a TPH to come.
        assert_eq!(level0_room(15, 1, 20, 64 * mib, 0), Some(192 * mib));
        // The active memtable is the last that fits, and it is full.
        assert_eq!(level0_room(18, 0, 20, 64 * mib, 64 * mib), None);
        assert_eq!(level0_room(18, 0, 20, 64 * mib, 60 * mib), Some(4 * mib));
        assert_eq!(level0_room(19, 0, 20, 64 * mib, 0), None);
        assert_eq!(level0_room(25, 1, 20, 64 * mib, 0), None);
    }

    #[test]
    fn room_over_time_is_the_rate() {
        assert_eq!(fill_rate(64 << 20, ms(500)), 128.0 * 1048576.0);
    }
}
