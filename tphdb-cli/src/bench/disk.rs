//! What the disk gives one thread: random 4 KiB O_DIRECT reads of a file,
//! timed in-process and, when installed, by fio.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use super::latency::{timed, Latencies};

/// Random 4 KiB O_DIRECT reads of `path`, one at a time.
pub fn raw_direct_reads(path: &Path, ops: usize, limit: Duration) -> std::io::Result<Latencies> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    let pages = (file.metadata()?.len() / 4096).max(1);
    let layout = std::alloc::Layout::from_size_align(4096, 4096).expect("layout");
    // SAFETY: non-zero size; freed below.
    let buf = unsafe { std::alloc::alloc(layout) };
    let mut rng = fastrand::Rng::with_seed(11);
    let mut err = None;
    let lat = timed(ops, limit, |_| {
        // SAFETY: `buf` is a live 4096-byte allocation.
        let b = unsafe { std::slice::from_raw_parts_mut(buf, 4096) };
        if let Err(e) = file.read_at(b, rng.u64(..pages) * 4096) {
            err = Some(e);
        }
    });
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(buf, layout) };
    err.map_or(Ok(lat), Err)
}

/// fio's figures for random 4 KiB direct reads at queue depth 1.
pub struct FioResult {
    pub iops: f64,
    pub mean_us: f64,
    pub p99_us: f64,
}

/// Runs fio read-only on `path` for `seconds`; `None` when fio is missing
/// or fails.
pub fn fio_randread(path: &Path, seconds: u32) -> Option<FioResult> {
    let out = Command::new("fio")
        .args([
            "--name=randread",
            "--rw=randread",
            "--bs=4k",
            "--direct=1",
            "--iodepth=1",
            "--ioengine=psync",
            "--readonly",
            "--time_based",
            "--output-format=json",
        ])
        .arg(format!("--runtime={seconds}"))
        .arg(format!("--filename={}", path.display()))
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let v: Value = serde_json::from_slice(&out.stdout).ok()?;
    let read = &v["jobs"][0]["read"];
    Some(FioResult {
        iops: read["iops"].as_f64()?,
        mean_us: read["clat_ns"]["mean"].as_f64()? / 1000.0,
        p99_us: read["clat_ns"]["percentile"]["99.000000"]
            .as_f64()
            .unwrap_or(0.0)
            / 1000.0,
    })
}
