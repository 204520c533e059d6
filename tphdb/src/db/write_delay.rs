//! Pacing writes while compaction falls behind, RocksDB's delayed write
//! rate: instead of writing at full speed until level 0 is full and then
//! stopping dead for seconds, writes slow to a rate that falls while the
//! backlog grows and rises again while it shrinks. Unlike RocksDB, which
//! drops straight to its fixed rate, the first slowed rate is 0.8 of the
//! rate writes were running at (capped by the option), so that a slowdown
//! is a step down rather than a cliff.

use std::time::{Duration, Instant};

/// The rate never falls below this (RocksDB's floor too).
const MIN_RATE_BYTES_PER_SEC: f64 = 16.0 * 1024.0;
/// Credit is refilled at most this often; shorter delays are not worth a
/// sleep.
const REFILL: Duration = Duration::from_millis(1);
/// The rate is multiplied by this when the backlog grew, and divided by it
/// when the backlog shrank (RocksDB's 0.8).
const SLOWER: f64 = 0.8;
/// And by this when the backlog is one step from stopping writes.
const NEAR_STOP: f64 = 0.6;
/// Unslowed writes are measured over windows this long.
const MEASURE: Duration = Duration::from_secs(1);

/// The active memtable's share of `write_buffer_bytes` past which writes
/// slow while every frozen memtable slot is taken (a flush still runs) and
/// nothing says when that flush ends (`db/job_eta.rs`). Filling the last
/// quarter at a falling rate gives a slow flush time to end before writes
/// must stop for it: at 16M keys of 1 KiB, a flush that took more than the
/// 0.85 s a memtable took to fill stopped writes for most of a second,
/// twice in a run (0.09 of the median rate).
const MEMTABLE_PACED_FROM: f64 = 0.75;
/// Steps the last quarter of the active memtable is paced in; the last is
/// one step from a stop.
const MEMTABLE_STEPS: usize = 4;

/// How the active memtable's filling paces writes, for
/// [`WriteDelay::delay`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum MemtablePace {
    /// The flush it waits for ends in a known time (`db/job_eta.rs`):
    /// fill no faster than this many bytes a second, the room left over
    /// that time, so that it is full no sooner. At or above the rate writes
    /// run at, it does not slow them.
    Until(f64),
    /// When the flush ends is not known: the last quarter's steps
    /// ([`memtable_backlog`]), 0 for none.
    Steps(usize),
}

/// How far the active memtable has run ahead of its flushes, in steps of
/// backlog for [`MemtablePace::Steps`]: 0 while a frozen memtable may still
/// be added (`frozen < max_frozen`) or the active one holds less than
/// three quarters of `write_buffer_bytes`, then one more a sixteenth, up
/// to [`MEMTABLE_STEPS`] in the last sixteenth.
pub(crate) fn memtable_backlog(
    active_bytes: usize,
    write_buffer_bytes: usize,
    frozen: usize,
    max_frozen: usize,
) -> usize {
    if frozen < max_frozen || write_buffer_bytes == 0 {
        return 0;
    }
    let fill = active_bytes as f64 / write_buffer_bytes as f64;
    if fill < MEMTABLE_PACED_FROM {
        return 0;
    }
    let step = (fill - MEMTABLE_PACED_FROM) / (1.0 - MEMTABLE_PACED_FROM) * MEMTABLE_STEPS as f64;
    (step as usize + 1).min(MEMTABLE_STEPS)
}

/// The share of the slowed rate writes run at with the active memtable
/// `steps` into its paced last quarter ([`memtable_backlog`]): 0.8 less a
/// step, and 0.6 of that in the last. A factor of the current state, not
/// a change of the rate: the memtable's steps fall back to none at every
/// switch, and adjusting the rate by them (four steps down, one up) ratcheted
/// it to the floor under a level-0 backlog, for seconds.
fn memtable_factor(steps: usize) -> f64 {
    match steps {
        0 => 1.0,
        s if s >= MEMTABLE_STEPS => SLOWER.powi(s as i32 - 1) * NEAR_STOP,
        s => SLOWER.powi(s as i32 - 1),
    }
}

/// What bound the rate of the last paced write ([`WriteDelay::paced_by`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PacedBy {
    /// The jobs' backlog (level 0's depth, or one-level mode's backlog).
    Backlog,
    /// The active memtable: its flush's end, or its last quarter's steps.
    Memtable,
    /// The room level 0 has before the running level-0 compaction ends.
    Level0Compaction,
}

/// The pacing state; the writer holding the WAL lock consults it.
#[derive(Debug)]
pub(crate) struct WriteDelay {
    max_rate: f64,
    /// Where a slowdown starts: 0.8 of the recent unslowed rate.
    start_rate: f64,
    /// The rate the jobs' backlog leaves, before the memtable's factor.
    rate: f64,
    /// Bytes that may be written before the next refill.
    credit: f64,
    next_refill: Option<Instant>,
    /// Writes are being paced.
    slowed: bool,
    /// The jobs' backlog when the rate was last adjusted; `None` while it
    /// does not slow writes.
    last_backlog: Option<usize>,
    /// Bytes written, unslowed, since `window_start`.
    window_bytes: f64,
    window_start: Option<Instant>,
    /// The unslowed rate of the last full window.
    recent_rate: Option<f64>,
    /// What bound the rate of the last paced write.
    paced_by: PacedBy,
}

impl WriteDelay {
    /// Pacing at most `max_rate_bytes_per_sec` once writes must slow.
    pub(crate) fn new(max_rate_bytes_per_sec: u64) -> WriteDelay {
        let max_rate = (max_rate_bytes_per_sec as f64).max(MIN_RATE_BYTES_PER_SEC);
        WriteDelay {
            max_rate,
            start_rate: max_rate,
            rate: max_rate,
            credit: 0.0,
            next_refill: None,
            slowed: false,
            last_backlog: None,
            window_bytes: 0.0,
            window_start: None,
            recent_rate: None,
            paced_by: PacedBy::Backlog,
        }
    }

    /// What bound the rate of the last write [`WriteDelay::delay`] paced.
    pub(crate) fn paced_by(&self) -> PacedBy {
        self.paced_by
    }

    /// The rate writes are paced at while slowed, in bytes per second,
    /// before the memtable's factor.
    #[cfg(test)]
    fn rate_bytes_per_sec(&self) -> f64 {
        self.rate
    }

    /// How long a write of `bytes` waits at `now`. `backlog` is how far
    /// the jobs are behind (level 0's count past its slowdown trigger, or
    /// one-level mode's backlog; `None` when they do not slow writes), and
    /// `near_stop` says it is one step from stopping writes; `memtable` is
    /// how the active memtable paces them, and `level0` the rate at which
    /// memtables may fill while the running level-0 compaction frees room
    /// (`db/job_eta.rs`; the backlog is then `None`).
    pub(crate) fn delay(
        &mut self,
        backlog: Option<usize>,
        near_stop: bool,
        memtable: MemtablePace,
        level0: Option<f64>,
        bytes: u64,
        now: Instant,
    ) -> Duration {
        // A fill rate writes do not reach yet leaves them be; the rate
        // they run at is measured only then.
        let running_at = self.recent_rate.unwrap_or(self.max_rate);
        let (steps, until) = match memtable {
            MemtablePace::Steps(s) => (s, None),
            MemtablePace::Until(r) => (0, Some(r)),
        };
        let until = [
            (until, PacedBy::Memtable),
            (level0, PacedBy::Level0Compaction),
        ]
        .into_iter()
        // No rate as infinity, compared as a number: a guard on an
        // `Option<f64>` compiles to a compare of a `None`'s unwritten
        // payload, which valgrind takes for a use of uninitialised memory
        // (see `delay`'s pacing bound below).
        .map(|(r, by)| (r.unwrap_or(f64::INFINITY), by))
        .filter(|&(r, _)| r < running_at)
        .min_by(|a, b| a.0.total_cmp(&b.0));
        if backlog.is_none() && steps == 0 && until.is_none() {
            self.slowed = false;
            self.last_backlog = None;
            self.credit = 0.0;
            self.next_refill = None;
            self.measure(bytes, now);
            return Duration::ZERO;
        }
        if !self.slowed {
            self.slowed = true;
            let recent = self.recent_rate.unwrap_or(self.max_rate);
            self.start_rate = (recent * SLOWER).min(self.max_rate);
            self.rate = self.start_rate;
            self.window_start = None;
        }
        match (self.last_backlog, backlog) {
            // The jobs caught up; the memtable alone paces from the start.
            (Some(_), None) => self.rate = self.start_rate,
            (Some(last), Some(b)) if b > last => self.rate *= SLOWER,
            (Some(last), Some(b)) if b < last => self.rate /= SLOWER,
            _ => {}
        }
        if near_stop && backlog.is_some() && self.last_backlog != backlog {
            self.rate *= NEAR_STOP;
        }
        self.rate = self.rate.clamp(MIN_RATE_BYTES_PER_SEC, self.max_rate);
        self.last_backlog = backlog;
        // Paced by the fill rate alone, writes run at it, not a step below
        // the rate they ran at.
        let stepped = match backlog.is_some() || steps > 0 {
            true => self.rate * memtable_factor(steps),
            false => f64::INFINITY,
        };
        // Compared as a plain number: matched as `Some((r, _)) if r <
        // stepped`, the optimized code compared the rate of a `None` (bytes
        // never written) before looking at which it was, and valgrind
        // failed the C API's test on it.
        let (until_rate, until_by) = until.unwrap_or((f64::INFINITY, PacedBy::Memtable));
        self.paced_by = if until_rate < stepped {
            until_by
        } else if backlog.is_some() {
            PacedBy::Backlog
        } else {
            PacedBy::Memtable
        };
        let rate = stepped.min(until_rate).max(MIN_RATE_BYTES_PER_SEC);

        let bytes = bytes as f64;
        if self.credit >= bytes {
            self.credit -= bytes;
            return Duration::ZERO;
        }
        let next = *self.next_refill.get_or_insert(now);
        if next <= now {
            let elapsed = now - next + REFILL;
            self.credit += elapsed.as_secs_f64() * rate;
            self.next_refill = Some(now + REFILL);
            if self.credit >= bytes {
                self.credit -= bytes;
                return Duration::ZERO;
            }
        }
        let over = bytes - self.credit;
        self.credit = 0.0;
        let needed = Duration::from_secs_f64(over / rate);
        let next = self.next_refill.expect("set above") + needed;
        self.next_refill = Some(next);
        next.saturating_duration_since(now).max(REFILL)
    }
}

impl WriteDelay {
    /// Counts an unslowed write toward the recent rate.
    fn measure(&mut self, bytes: u64, now: Instant) {
        let start = *self.window_start.get_or_insert(now);
        self.window_bytes += bytes as f64;
        let elapsed = now - start;
        if elapsed >= MEASURE {
            self.recent_rate = Some(self.window_bytes / elapsed.as_secs_f64());
            self.window_bytes = 0.0;
            self.window_start = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: MemtablePace = MemtablePace::Steps(0);

    /// Unslowed writes of `bytes` at `start` plus each of `ms`
    /// milliseconds: the recent rate a slowdown starts from.
    fn write_unslowed(
        d: &mut WriteDelay,
        start: Instant,
        ms: impl Iterator<Item = u64>,
        bytes: u64,
    ) {
        for ms in ms {
            d.delay(
                None,
                false,
                NONE,
                None,
                bytes,
                start + Duration::from_millis(ms),
            );
        }
    }

    /// A delay of a high option that saw writes run unslowed at 64 MiB/s
    /// for a second (the recent rate a slowdown starts from), and the
    /// moment after that second.
    fn after_a_second_at_64_mib() -> (WriteDelay, Instant) {
        let mut d = WriteDelay::new(1 << 30);
        let start = Instant::now();
        write_unslowed(&mut d, start, 0..=1000, 64 << 10);
        (d, start + Duration::from_secs(1))
    }

    /// Writes of `bytes` every time the delay allows, for `seconds` of
    /// simulated time at a constant backlog; returns bytes per second.
    fn paced_rate(d: &mut WriteDelay, backlog: usize, bytes: u64, seconds: f64) -> f64 {
        let start = Instant::now();
        let mut now = start;
        let mut written = 0u64;
        while (now - start).as_secs_f64() < seconds {
            now += d.delay(Some(backlog), false, NONE, None, bytes, now);
            written += bytes;
        }
        written as f64 / (now - start).as_secs_f64()
    }

    #[test]
    fn slowed_writes_run_at_the_rate() {
        let mut d = WriteDelay::new(1 << 20);
        assert_eq!(
            d.delay(None, false, NONE, None, 1 << 30, Instant::now()),
            Duration::ZERO
        );
        // Nothing measured yet: 0.8 of the option.
        let rate = paced_rate(&mut d, 12, 1024, 10.0);
        assert!((rate / (1 << 20) as f64 - 0.8).abs() < 0.04, "{rate}");
    }

    #[test]
    fn a_slowdown_starts_just_below_the_rate_writes_were_running_at() {
        let mut d = WriteDelay::new(64 << 20);
        let start = Instant::now();
        // 8000 KiB/s unslowed for two seconds.
        write_unslowed(&mut d, start, 0..2000, 8 << 10);
        let now = start + Duration::from_secs(2);
        d.delay(Some(12), false, NONE, None, 1, now);
        let rate = d.rate_bytes_per_sec() / 1024.0;
        assert!((rate - 8000.0 * 0.8).abs() < 20.0, "{rate}");
        // Never above the option, however fast writes ran.
        let mut d = WriteDelay::new(1 << 20);
        write_unslowed(&mut d, start, 0..2000, 8 << 10);
        d.delay(Some(12), false, NONE, None, 1, now);
        assert_eq!(d.rate_bytes_per_sec(), (1 << 20) as f64);
    }

    #[test]
    fn the_rate_falls_while_the_backlog_grows_and_recovers_after() {
        let mut d = WriteDelay::new(16 << 20);
        let now = Instant::now();
        d.delay(Some(12), false, NONE, None, 1, now);
        let first = d.rate_bytes_per_sec();
        assert_eq!(
            first,
            16.0 * 1048576.0 * 0.8,
            "no measured rate: the option's"
        );
        d.delay(Some(13), false, NONE, None, 1, now);
        d.delay(Some(14), false, NONE, None, 1, now);
        let slowed = d.rate_bytes_per_sec();
        assert!((slowed - first * 0.64).abs() < 1.0, "{slowed}");
        d.delay(Some(19), true, NONE, None, 1, now);
        assert!(d.rate_bytes_per_sec() < slowed * 0.5);
        for backlog in (10..19).rev() {
            d.delay(Some(backlog), false, NONE, None, 1, now);
        }
        assert_eq!(d.rate_bytes_per_sec(), (16 << 20) as f64);
        // Never below the floor, however long the backlog grows.
        for backlog in 20..200 {
            d.delay(Some(backlog), true, NONE, None, 1, now);
        }
        assert_eq!(d.rate_bytes_per_sec(), MIN_RATE_BYTES_PER_SEC);
        // Once writes need not slow, the next slowdown starts afresh.
        assert_eq!(
            d.delay(None, false, NONE, None, 1 << 30, now),
            Duration::ZERO
        );
        d.delay(Some(12), false, NONE, None, 1, now);
        assert_eq!(d.rate_bytes_per_sec(), first);
    }

    #[test]
    fn the_last_quarter_of_the_active_memtable_is_paced_only_while_no_frozen_slot_is_free() {
        let mib = 1 << 20;
        // A frozen slot free: the memtable will be frozen, not waited for.
        assert_eq!(memtable_backlog(63 * mib, 64 * mib, 0, 1), 0);
        assert_eq!(memtable_backlog(63 * mib, 64 * mib, 1, 2), 0);
        // Every slot taken: nothing below three quarters.
        assert_eq!(memtable_backlog(47 * mib, 64 * mib, 1, 1), 0);
        let steps: Vec<usize> = [48, 51, 52, 56, 60, 63, 64, 80]
            .iter()
            .map(|&m| memtable_backlog(m * mib, 64 * mib, 1, 1))
            .collect();
        assert_eq!(steps, [1, 1, 2, 3, 4, 4, 4, 4]);
        assert_eq!(memtable_backlog(1, 0, 1, 1), 0, "no write buffer");
    }

    /// Regression: the memtable's steps were added to level 0's backlog,
    /// so each memtable took the rate down four steps and its switch up
    /// one: under a steady level-0 backlog the rate fell to the floor in a
    /// few memtables, and writes nearly stopped for seconds. The steps are
    /// a factor now: the rate level 0 leaves is the same after each.
    #[test]
    fn memtables_filling_under_a_level0_backlog_leave_its_rate_as_it_was() {
        let mut d = WriteDelay::new(16 << 20);
        let now = Instant::now();
        d.delay(Some(12), false, NONE, None, 1, now);
        let rate = d.rate_bytes_per_sec();
        for _memtable in 0..10 {
            for steps in 0..=MEMTABLE_STEPS {
                d.delay(Some(12), false, MemtablePace::Steps(steps), None, 1, now);
            }
        }
        d.delay(Some(12), false, NONE, None, 1, now);
        assert_eq!(d.rate_bytes_per_sec(), rate);
        // Level 0 caught up while the memtable paces: from the start again.
        d.delay(Some(13), false, NONE, None, 1, now);
        assert!(d.rate_bytes_per_sec() < rate);
        d.delay(None, false, MemtablePace::Steps(2), None, 1, now);
        assert_eq!(d.rate_bytes_per_sec(), rate);
    }

    /// Filling the last quarter of a memtable at the paced rates takes
    /// more than twice as long as at full speed: time a slow flush gets
    /// before writes stop.
    #[test]
    fn pacing_the_last_quarter_gives_a_flush_twice_the_time() {
        let (buffer, write) = (64u64 << 20, 1u64 << 10);
        let full_speed = 64.0 * 1048576.0;
        let (mut d, mut now) = after_a_second_at_64_mib();
        let mut active = buffer * 3 / 4;
        let paced_from = now;
        while active < buffer {
            let steps = memtable_backlog(active as usize, buffer as usize, 1, 1);
            now += d.delay(None, false, MemtablePace::Steps(steps), None, write, now);
            active += write;
        }
        let paced = (now - paced_from).as_secs_f64();
        let unpaced = (buffer / 4) as f64 / full_speed;
        assert!(paced > 2.0 * unpaced, "{paced} s against {unpaced} s");
        assert!(paced < 4.0 * unpaced, "{paced} s against {unpaced} s");
    }

    /// Filling at the rate that makes the memtable full as its flush ends:
    /// writes run at it however fast they ran before, and a rate above
    /// theirs leaves them unslowed (and measured).
    #[test]
    fn a_fill_rate_below_the_writes_paces_them_at_it() {
        let (mut d, mut now) = after_a_second_at_64_mib();
        let above = MemtablePace::Until(100.0 * 1048576.0);
        assert_eq!(
            d.delay(None, false, above, None, 64 << 10, now),
            Duration::ZERO
        );
        let until = MemtablePace::Until(16.0 * 1048576.0);
        let rate = mib_per_sec_over_2s(&mut d, &mut now, None, until, None);
        assert!((rate - 16.0).abs() < 0.5, "{rate} MiB/s");
        // Under a level-0 backlog too, the slower of the two.
        let slowed = d.delay(Some(12), false, until, None, 1, now);
        assert!(d.rate_bytes_per_sec() > 16.0 * 1048576.0, "{slowed:?}");
        let rate = mib_per_sec_over_2s(&mut d, &mut now, Some(12), until, None);
        assert!((rate - 16.0).abs() < 0.5, "{rate} MiB/s");
    }

    /// The MiB a second 64 KiB writes run at for two seconds from `now`,
    /// as often as the delay lets them; `now` ends where they do.
    fn mib_per_sec_over_2s(
        d: &mut WriteDelay,
        now: &mut Instant,
        backlog: Option<usize>,
        memtable: MemtablePace,
        level0: Option<f64>,
    ) -> f64 {
        let from = *now;
        let mut written = 0u64;
        while *now - from < Duration::from_secs(2) {
            *now += d.delay(backlog, false, memtable, level0, 64 << 10, *now);
            written += 64 << 10;
        }
        written as f64 / (*now - from).as_secs_f64() / 1048576.0
    }

    /// Level 0 past its slowdown trigger with the running level-0
    /// compaction's end known: writes run at the rate that fills the room
    /// left below the stop by then, not a backlog step below theirs, and
    /// at the slower of it and the memtable's rate.
    #[test]
    fn a_level0_fill_rate_paces_writes_at_it() {
        let (mut d, mut now) = after_a_second_at_64_mib();
        let mib = 1048576.0;
        // Above the 64 MiB/s writes run at: unslowed.
        let wait = d.delay(None, false, NONE, Some(100.0 * mib), 64 << 10, now);
        assert_eq!(wait, Duration::ZERO);
        let rate_at = |d: &mut WriteDelay, now: &mut Instant, memtable, level0| {
            mib_per_sec_over_2s(d, now, None, memtable, level0)
        };
        let rate = rate_at(&mut d, &mut now, NONE, Some(48.0 * mib));
        assert!((rate - 48.0).abs() < 1.0, "{rate} MiB/s");
        assert_eq!(d.paced_by(), PacedBy::Level0Compaction);
        let memtable = MemtablePace::Until(24.0 * mib);
        let rate = rate_at(&mut d, &mut now, memtable, Some(48.0 * mib));
        assert!((rate - 24.0).abs() < 1.0, "{rate} MiB/s");
        assert_eq!(d.paced_by(), PacedBy::Memtable);
        let rate = rate_at(&mut d, &mut now, NONE, Some(32.0 * mib));
        assert!((rate - 32.0).abs() < 1.0, "{rate} MiB/s");
        // The backlog's rate (0.8 of the 64 MiB/s measured) below the
        // room's: the backlog paces.
        mib_per_sec_over_2s(&mut d, &mut now, Some(19), NONE, Some(60.0 * mib));
        assert_eq!(d.paced_by(), PacedBy::Backlog);
    }

    #[test]
    fn a_large_write_waits_its_share_of_the_rate() {
        let mut d = WriteDelay::new(1 << 20);
        let now = Instant::now();
        // 4 MiB at 0.8 MiB/s.
        let wait = d.delay(Some(12), false, NONE, None, 4 << 20, now);
        assert!(
            wait >= Duration::from_millis(4900) && wait <= Duration::from_millis(5100),
            "{wait:?}"
        );
    }
}
