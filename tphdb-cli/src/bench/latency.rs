//! Per-operation latency recording.

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// Latencies of a timed run.
pub struct Latencies {
    pub ops: u64,
    pub elapsed: Duration,
    pub hist: Histogram<u64>,
}

/// A histogram of nanoseconds from 1 ns to an hour, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram bounds")
}

impl Latencies {
    pub fn ns_per_op(&self) -> f64 {
        self.elapsed.as_nanos() as f64 / self.ops.max(1) as f64
    }

    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn avg_us(&self) -> f64 {
        self.hist.mean() / 1000.0
    }

    pub fn quantile_us(&self, q: f64) -> f64 {
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }
}

/// Runs `op(i)` for i in 0..ops or until `limit` passes, timing each call.
pub fn timed(ops: usize, limit: Duration, mut op: impl FnMut(usize)) -> Latencies {
    let mut hist = histogram();
    let start = Instant::now();
    let mut done = 0;
    while done < ops {
        let t = Instant::now();
        op(done);
        hist.saturating_record(t.elapsed().as_nanos() as u64);
        done += 1;
        if done % 256 == 0 && start.elapsed() > limit {
            break;
        }
    }
    Latencies {
        ops: done as u64,
        elapsed: start.elapsed(),
        hist,
    }
}
