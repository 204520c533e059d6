//! Background work on a full disk: a job that runs out of space is retried
//! after a delay that doubles with each failure in a row, and callers
//! waiting for background work (a stalled writer, `flush`, `wait_idle`)
//! give up once a retry fails too.

use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The first retry after a job ran out of space; each failure in a row
/// doubles it, up to [`MAX_RETRY_DELAY`].
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(10);
const MAX_RETRY_DELAY: Duration = Duration::from_secs(1);

/// Jobs failing for lack of space: they retry after a backoff that
/// doubles with each failure in a row.
#[derive(Debug, Default)]
pub(crate) struct OutOfSpace {
    /// The last failure, while jobs keep failing.
    pub(crate) error: Option<String>,
    /// No job starts before this; the housekeeping thread wakes then.
    pub(crate) retry_at: Option<Instant>,
    in_a_row: u32,
    /// Jobs started so far; each is known by its number in this count.
    started: u64,
    /// The number of the last-started job that ran out of space.
    last_failed: u64,
}

impl OutOfSpace {
    /// Numbers a job that starts now.
    pub(crate) fn start(&mut self) -> u64 {
        self.started += 1;
        self.started
    }

    /// Job `job` ran out of space.
    pub(crate) fn failed(&mut self, e: &Error, job: u64) {
        self.error = Some(e.to_string());
        self.last_failed = self.last_failed.max(job);
        let delay = FIRST_RETRY_DELAY
            .saturating_mul(1 << self.in_a_row.min(16))
            .min(MAX_RETRY_DELAY);
        self.in_a_row += 1;
        self.retry_at = Some(Instant::now() + delay);
    }

    pub(crate) fn succeeded(&mut self) {
        self.error = None;
        self.in_a_row = 0;
        self.retry_at = None;
    }
}

/// A caller waiting for background work that may be out of space: it waits
/// for one retry, and fails if a job that started after it saw the failure
/// failed too. A job that started before (space may have come back while
/// it ran) fails nobody's wait.
#[derive(Default)]
pub(crate) struct SpaceWait {
    /// The jobs started when this waiter saw the current failure.
    started_when_seen: Option<u64>,
}

impl SpaceWait {
    pub(crate) fn check(&mut self, space: &OutOfSpace) -> Result<()> {
        let Some(e) = &space.error else {
            self.started_when_seen = None;
            return Ok(());
        };
        let seen = *self.started_when_seen.get_or_insert(space.started);
        if space.last_failed > seen {
            return Err(Error::io(
                format!("waiting for a flush or compaction that ran out of space: {e}"),
                std::io::Error::from(std::io::ErrorKind::StorageFull),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> Error {
        Error::io(
            "appending",
            std::io::Error::from(std::io::ErrorKind::StorageFull),
        )
    }

    /// A retry already running when the waiter came may have started before
    /// space was back: its failure says nothing about space now.
    #[test]
    fn a_job_that_started_before_the_wait_fails_no_waiter() {
        let mut space = OutOfSpace::default();
        let first = space.start();
        space.failed(&full(), first);
        let retry = space.start();
        let mut wait = SpaceWait::default();
        assert!(wait.check(&space).is_ok());
        space.failed(&full(), retry);
        assert!(wait.check(&space).is_ok(), "the retry started before");
        let next = space.start();
        assert!(wait.check(&space).is_ok());
        space.failed(&full(), next);
        let e = wait.check(&space).unwrap_err();
        assert!(e.is_no_space(), "{e}");
    }

    /// A waiter that saw the failure clear waits for a retry of the next
    /// one before giving up.
    #[test]
    fn a_waiter_gives_each_failure_one_retry() {
        let mut space = OutOfSpace::default();
        let mut wait = SpaceWait::default();
        assert!(wait.check(&space).is_ok());
        let job = space.start();
        space.succeeded();
        assert!(wait.check(&space).is_ok());
        let failing = space.start();
        space.failed(&full(), failing);
        assert!(wait.check(&space).is_ok(), "the first failure it sees");
        let retry = space.start();
        space.succeeded();
        assert!(wait.check(&space).is_ok());
        let again = space.start();
        space.failed(&full(), again);
        assert!(wait.check(&space).is_ok(), "a new failure gets its retry");
        let retry2 = space.start();
        space.failed(&full(), retry2);
        assert!(wait.check(&space).is_err());
        assert!(job < failing && failing < retry && retry < again);
    }

    #[test]
    fn retries_back_off_doubling_up_to_the_limit() {
        let mut space = OutOfSpace::default();
        // The least and the most each delay can be, as seen from outside.
        let mut delays = Vec::new();
        for _ in 0..12 {
            let job = space.start();
            let before = Instant::now();
            space.failed(&full(), job);
            let after = Instant::now();
            let at = space.retry_at.unwrap();
            delays.push((at - after, at - before));
        }
        assert!(delays[0].1 >= FIRST_RETRY_DELAY && delays[0].0 < 2 * FIRST_RETRY_DELAY);
        assert!(delays[3].1 >= 8 * FIRST_RETRY_DELAY);
        assert!(delays[11].0 <= MAX_RETRY_DELAY && delays[11].1 >= MAX_RETRY_DELAY);
        space.succeeded();
        assert!(space.retry_at.is_none() && space.error.is_none());
        let job = space.start();
        let before = Instant::now();
        space.failed(&full(), job);
        assert!(space.retry_at.unwrap() - before < 2 * FIRST_RETRY_DELAY);
    }
}
