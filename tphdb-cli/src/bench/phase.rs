//! A timed phase of a benchmark: operations split over threads, latency
//! per operation kind, throughput per second, with progress shown.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::engines::{self, Kv};
use super::latency::histogram;
use super::report::round;
use super::result::LatencySummary;
use super::ycsb::OpKind;

type BoxError = Box<dyn std::error::Error>;

/// What one operation did.
pub struct Outcome {
    pub kind: OpKind,
    pub read: u64,
    pub written: u64,
    /// A read found nothing where a value was expected, or the reverse.
    pub unexpected: bool,
    /// Whether the operation's reads should find their keys.
    pub expect_found: bool,
}

impl Outcome {
    /// An operation that wrote `bytes` of keys and values.
    pub fn wrote(kind: OpKind, bytes: u64) -> engines::Result<Self> {
        let mut o = Outcome::new(kind);
        o.written = bytes;
        Ok(o)
    }

    /// An operation that read `bytes` of keys and values.
    pub fn read(kind: OpKind, bytes: u64) -> engines::Result<Self> {
        let mut o = Outcome::new(kind);
        o.read = bytes;
        Ok(o)
    }

    pub fn new(kind: OpKind) -> Self {
        Outcome {
            kind,
            read: 0,
            written: 0,
            unexpected: false,
            expect_found: true,
        }
    }
}

#[derive(Default)]
pub struct Recorder {
    pub hists: BTreeMap<OpKind, Histogram<u64>>,
}

impl Recorder {
    fn record(&mut self, kind: OpKind, ns: u64) {
        self.hists
            .entry(kind)
            .or_insert_with(histogram)
            .saturating_record(ns);
    }

    fn merge(&mut self, other: &Recorder) {
        for (k, h) in &other.hists {
            self.hists
                .entry(*k)
                .or_insert_with(histogram)
                .add(h)
                .expect("same bounds");
        }
    }

    pub fn all(&self) -> Histogram<u64> {
        let mut all = histogram();
        for h in self.hists.values() {
            all.add(h).expect("same bounds");
        }
        all
    }
}

pub fn us(ns: u64) -> f64 {
    round(ns as f64 / 1000.0, 2)
}

/// The latency summary of one operation kind.
pub fn latency_summary(h: &Histogram<u64>) -> LatencySummary {
    LatencySummary {
        count: h.len(),
        avg_us: round(h.mean() / 1000.0, 2),
        p50_us: us(h.value_at_quantile(0.5)),
        p99_us: us(h.value_at_quantile(0.99)),
        p999_us: us(h.value_at_quantile(0.999)),
        max_us: us(h.max()),
        // Quantiles spaced evenly in log(1 - q), for plots.
        cdf: (0..=40)
            .map(|i| 1.0 - 10f64.powf(-(i as f64) / 10.0))
            .map(|q| (round(q, 5), us(h.value_at_quantile(q))))
            .collect(),
    }
}

/// A thread's operations: called with the index of each operation.
pub type ThreadOps<'a> = Box<dyn FnMut(u64) -> engines::Result<Outcome> + Send + 'a>;

pub struct PhaseResult {
    pub ops: u64,
    pub secs: f64,
    pub rec: Recorder,
    pub per_second: Vec<u64>,
    pub read: u64,
    pub written: u64,
    pub unexpected: u64,
}

/// Runs `ops` operations split over `threads` threads (each made by
/// `make(thread)`) until done or `limit`, with a progress bar on a terminal
/// and a line every 5 seconds otherwise.
pub fn phase<'a>(
    db: &dyn Kv,
    label: &str,
    threads: usize,
    ops: u64,
    limit: Duration,
    make: &(dyn Fn(usize) -> ThreadOps<'a> + Sync),
) -> Result<PhaseResult, BoxError> {
    let threads = threads.max(1);
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (read, written, unexpected) = (AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0));
    let total = Mutex::new(Recorder::default());
    let start = Instant::now();
    let mut per_second = Vec::new();
    std::thread::scope(|s| -> Result<(), BoxError> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (done, stop, total) = (&done, &stop, &total);
                let (read, written, unexpected) = (&read, &written, &unexpected);
                s.spawn(move || -> engines::Result<()> {
                    let mut op = make(t);
                    let mut rec = Recorder::default();
                    let (from, to) = (
                        ops * t as u64 / threads as u64,
                        ops * (t as u64 + 1) / threads as u64,
                    );
                    for i in from..to {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let t0 = Instant::now();
                        let o = op(i)?;
                        db.end_op(o.kind as u8, o.expect_found);
                        rec.record(o.kind, t0.elapsed().as_nanos() as u64);
                        read.fetch_add(o.read, Ordering::Relaxed);
                        written.fetch_add(o.written, Ordering::Relaxed);
                        unexpected.fetch_add(u64::from(o.unexpected), Ordering::Relaxed);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    total.lock().expect("recorder").merge(&rec);
                    Ok(())
                })
            })
            .collect();
        let bar = std::io::stderr().is_terminal().then(|| {
            indicatif::ProgressBar::new(ops)
                .with_style(
                    indicatif::ProgressStyle::with_template(
                        "  {prefix} [{bar:40}] {pos}/{len} ops, {msg}",
                    )
                    .expect("template")
                    .progress_chars("=> "),
                )
                .with_prefix(label.to_string())
        });
        let (mut last, mut tick) = (0, start);
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(10));
            if tick.elapsed() >= Duration::from_secs(1) {
                tick += Duration::from_secs(1);
                let now = done.load(Ordering::Relaxed);
                per_second.push(now - last);
                last = now;
                let rate = format!(
                    "{} ops/s in the last second",
                    per_second.last().copied().unwrap_or(0)
                );
                match &bar {
                    Some(b) => {
                        b.set_position(now);
                        b.set_message(rate);
                    }
                    None if per_second.len() % 5 == 0 => {
                        eprintln!("  {label}: {now}/{ops} ops, {rate}")
                    }
                    None => {}
                }
            }
            if start.elapsed() > limit {
                stop.store(true, Ordering::Relaxed);
            }
        }
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        for h in handles {
            h.join().expect("bench thread").map_err(|e| e.to_string())?;
        }
        Ok(())
    })?;
    Ok(PhaseResult {
        ops: done.load(Ordering::Relaxed),
        secs: start.elapsed().as_secs_f64(),
        rec: total.into_inner().expect("recorder"),
        per_second,
        read: read.load(Ordering::Relaxed),
        written: written.load(Ordering::Relaxed),
        unexpected: unexpected.load(Ordering::Relaxed),
    })
}
