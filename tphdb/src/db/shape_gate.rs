//! Turns for merge passes that hold their entries by shape. Such a pass
//! holds at least one target partition's share of its input, which passes
//! its job's input half (a push-down of a TPH over `fanout` times that
//! half; see `docs/design.md`, "Levels"). Each job's share of
//! `compaction_memory_bytes` cannot bound that, so the passes held by
//! shape take turns: together they hold at most one input half, and a
//! pass over it runs alone. At the end of a 16M x 128-byte fill, two
//! push-downs into the new level 2 held about 20 MB each beside a flush.

use parking_lot::{Condvar, Mutex};

/// Memory of the passes held by shape now running, and their bound.
pub(crate) struct ShapeGate {
    held: Mutex<u64>,
    freed: Condvar,
    limit: u64,
}

impl ShapeGate {
    pub(crate) fn new(limit: u64) -> ShapeGate {
        ShapeGate {
            held: Mutex::new(0),
            freed: Condvar::new(),
            limit,
        }
    }

    /// Waits until a pass holding `bytes` fits beside the running ones (at
    /// once when none runs), then counts it until the turn is dropped.
    /// Returns whether it waited.
    pub(crate) fn enter(&self, bytes: u64) -> (ShapeTurn<'_>, bool) {
        let mut held = self.held.lock();
        let mut waited = false;
        while *held > 0 && held.saturating_add(bytes) > self.limit {
            waited = true;
            self.freed.wait(&mut held);
        }
        *held += bytes;
        (ShapeTurn { gate: self, bytes }, waited)
    }
}

/// A running pass's place in a [`ShapeGate`].
pub(crate) struct ShapeTurn<'a> {
    gate: &'a ShapeGate,
    bytes: u64,
}

impl Drop for ShapeTurn<'_> {
    fn drop(&mut self) {
        *self.gate.held.lock() -= self.bytes;
        self.gate.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_pass_over_the_limit_runs_when_it_is_alone() {
        let gate = ShapeGate::new(10);
        let (_turn, waited) = gate.enter(25);
        assert!(!waited);
        assert_eq!(*gate.held.lock(), 25);
    }

    #[test]
    fn passes_that_fit_together_run_together() {
        let gate = ShapeGate::new(10);
        let (_a, wa) = gate.enter(4);
        let (_b, wb) = gate.enter(6);
        assert!(!wa && !wb);
        assert_eq!(*gate.held.lock(), 10);
    }

    #[test]
    fn a_pass_that_does_not_fit_waits_for_the_running_one() {
        let gate = ShapeGate::new(10);
        let first_done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let (first, _) = gate.enter(8);
            let second = s.spawn(|| {
                let _turn = gate.enter(8);
                first_done.load(Ordering::SeqCst)
            });
            std::thread::sleep(Duration::from_millis(50));
            first_done.store(true, Ordering::SeqCst);
            drop(first);
            assert!(
                second.join().unwrap(),
                "the second pass ran beside the first"
            );
        });
        assert_eq!(*gate.held.lock(), 0);
    }
}
