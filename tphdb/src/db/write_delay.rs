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

/// The pacing state; the writer holding the WAL lock consults it.
#[derive(Debug)]
pub(crate) struct WriteDelay {
    max_rate: f64,
    rate: f64,
    /// Bytes that may be written before the next refill.
    credit: f64,
    next_refill: Option<Instant>,
    /// The backlog (level-0 TPHs) when the rate was last adjusted; `None`
    /// while writes are not slowed.
    last_backlog: Option<usize>,
    /// Bytes written, unslowed, since `window_start`.
    window_bytes: f64,
    window_start: Option<Instant>,
    /// The unslowed rate of the last full window.
    recent_rate: Option<f64>,
}

impl WriteDelay {
    /// Pacing at most `max_rate_bytes_per_sec` once writes must slow.
    pub(crate) fn new(max_rate_bytes_per_sec: u64) -> WriteDelay {
        let max_rate = (max_rate_bytes_per_sec as f64).max(MIN_RATE_BYTES_PER_SEC);
        WriteDelay {
            max_rate,
            rate: max_rate,
            credit: 0.0,
            next_refill: None,
            last_backlog: None,
            window_bytes: 0.0,
            window_start: None,
            recent_rate: None,
        }
    }

    /// The rate writes are paced at while slowed, in bytes per second.
    #[cfg(test)]
    fn rate_bytes_per_sec(&self) -> f64 {
        self.rate
    }

    /// How long a write of `bytes` waits at `now`. `backlog` is `None`
    /// when writes need not slow; otherwise the level-0 count, and
    /// `near_stop` says it is one step from stopping writes.
    pub(crate) fn delay(
        &mut self,
        backlog: Option<usize>,
        near_stop: bool,
        bytes: u64,
        now: Instant,
    ) -> Duration {
        let Some(backlog) = backlog else {
            self.last_backlog = None;
            self.credit = 0.0;
            self.next_refill = None;
            self.measure(bytes, now);
            return Duration::ZERO;
        };
        match self.last_backlog {
            None => {
                let recent = self.recent_rate.unwrap_or(self.max_rate);
                self.rate = (recent * SLOWER).min(self.max_rate);
                self.window_start = None;
            }
            Some(last) if backlog > last => self.rate *= SLOWER,
            Some(last) if backlog < last => self.rate /= SLOWER,
            Some(_) => {}
        }
        if near_stop && self.last_backlog != Some(backlog) {
            self.rate *= NEAR_STOP;
        }
        self.rate = self.rate.clamp(MIN_RATE_BYTES_PER_SEC, self.max_rate);
        self.last_backlog = Some(backlog);

        let bytes = bytes as f64;
        if self.credit >= bytes {
            self.credit -= bytes;
            return Duration::ZERO;
        }
        let next = *self.next_refill.get_or_insert(now);
        if next <= now {
            let elapsed = now - next + REFILL;
            self.credit += elapsed.as_secs_f64() * self.rate;
            self.next_refill = Some(now + REFILL);
            if self.credit >= bytes {
                self.credit -= bytes;
                return Duration::ZERO;
            }
        }
        let over = bytes - self.credit;
        debug_assert!(self.rate >= MIN_RATE_BYTES_PER_SEC);
        self.credit = 0.0;
        let needed = Duration::from_secs_f64(over / self.rate);
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

    /// Writes of `bytes` every time the delay allows, for `seconds` of
    /// simulated time at a constant backlog; returns bytes per second.
    fn paced_rate(d: &mut WriteDelay, backlog: usize, bytes: u64, seconds: f64) -> f64 {
        let start = Instant::now();
        let mut now = start;
        let mut written = 0u64;
        while (now - start).as_secs_f64() < seconds {
            now += d.delay(Some(backlog), false, bytes, now);
            written += bytes;
        }
        written as f64 / (now - start).as_secs_f64()
    }

    #[test]
    fn slowed_writes_run_at_the_rate() {
        let mut d = WriteDelay::new(1 << 20);
        assert_eq!(
            d.delay(None, false, 1 << 30, Instant::now()),
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
        for ms in 0..2000u64 {
            d.delay(None, false, 8 << 10, start + Duration::from_millis(ms));
        }
        let now = start + Duration::from_secs(2);
        d.delay(Some(12), false, 1, now);
        let rate = d.rate_bytes_per_sec() / 1024.0;
        assert!((rate - 8000.0 * 0.8).abs() < 20.0, "{rate}");
        // Never above the option, however fast writes ran.
        let mut d = WriteDelay::new(1 << 20);
        for ms in 0..2000u64 {
            d.delay(None, false, 8 << 10, start + Duration::from_millis(ms));
        }
        d.delay(Some(12), false, 1, now);
        assert_eq!(d.rate_bytes_per_sec(), (1 << 20) as f64);
    }

    #[test]
    fn the_rate_falls_while_the_backlog_grows_and_recovers_after() {
        let mut d = WriteDelay::new(16 << 20);
        let now = Instant::now();
        d.delay(Some(12), false, 1, now);
        let first = d.rate_bytes_per_sec();
        assert_eq!(
            first,
            16.0 * 1048576.0 * 0.8,
            "no measured rate: the option's"
        );
        d.delay(Some(13), false, 1, now);
        d.delay(Some(14), false, 1, now);
        let slowed = d.rate_bytes_per_sec();
        assert!((slowed - first * 0.64).abs() < 1.0, "{slowed}");
        d.delay(Some(19), true, 1, now);
        assert!(d.rate_bytes_per_sec() < slowed * 0.5);
        for backlog in (10..19).rev() {
            d.delay(Some(backlog), false, 1, now);
        }
        assert_eq!(d.rate_bytes_per_sec(), (16 << 20) as f64);
        // Never below the floor, however long the backlog grows.
        for backlog in 20..200 {
            d.delay(Some(backlog), true, 1, now);
        }
        assert_eq!(d.rate_bytes_per_sec(), MIN_RATE_BYTES_PER_SEC);
        // Once writes need not slow, the next slowdown starts afresh.
        assert_eq!(d.delay(None, false, 1 << 30, now), Duration::ZERO);
        d.delay(Some(12), false, 1, now);
        assert_eq!(d.rate_bytes_per_sec(), first);
    }

    #[test]
    fn a_large_write_waits_its_share_of_the_rate() {
        let mut d = WriteDelay::new(1 << 20);
        let now = Instant::now();
        // 4 MiB at 0.8 MiB/s.
        let wait = d.delay(Some(12), false, 4 << 20, now);
        assert!(
            wait >= Duration::from_millis(4900) && wait <= Duration::from_millis(5100),
            "{wait:?}"
        );
    }
}
