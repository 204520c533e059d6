//! tphdb's account of what it wrote, by cause, against the kernel's. One
//! test in its own binary, so the process's I/O counters are its own.

use tphdb::{Options, DB};

/// `(write_bytes, cancelled_write_bytes)` of this process so far.
fn kernel_writes() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("write_bytes:"), field("cancelled_write_bytes:"))
}

/// The causes add up to every byte written through the file system, and to
/// what the kernel counts this process dirtying (page rounding aside).
#[test]
fn bytes_written_by_cause_add_up_to_the_file_systems_and_the_kernels() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (k0, _) = kernel_writes();
    let opts = Options {
        write_buffer_bytes: 2 << 20,
        tph_target_bytes: 4 << 20,
        fanout: 4,
        ..Options::default()
    };
    let db = DB::open(&opts, dir.path()).unwrap();
    let value = [7u8; 120];
    for round in 0..3u32 {
        for i in 0..60_000u32 {
            let k = (i.wrapping_mul(2_654_435_761) ^ round).to_be_bytes();
            db.put(k, value).unwrap();
        }
    }
    for i in 0..20_000u32 {
        db.delete(i.wrapping_mul(2_654_435_761).to_be_bytes())
            .unwrap();
    }
    db.flush().unwrap();
    db.wait_for_compactions().unwrap();
    db.compact_range(None, None).unwrap();
    let stats = db.stats();
    let w = &stats.writes_by_cause;
    assert_eq!(w.total(), stats.disk_bytes_written, "{w:?}");
    assert!(
        w.wal > 0 && w.flush > 0 && w.index > 0 && w.manifest > 0,
        "{w:?}"
    );
    assert!(w.l0_merge + w.push_down + w.gc_fold > 0, "{w:?}");
    let ours = stats.disk_bytes_written;
    db.close().unwrap();
    // Everything dirty reaches the kernel's count once it is written back.
    let status = std::process::Command::new("sync").status();
    assert!(status.is_ok_and(|s| s.success()));
    let (k1, _) = kernel_writes();
    let kernel = k1 - k0;
    if kernel == 0 {
        eprintln!("SKIPPED: the kernel counts no writes for this file system");
        return;
    }
    let ratio = kernel as f64 / ours as f64;
    eprintln!("kernel {kernel} bytes, tphdb {ours}: {ratio:.3}");
    assert!(
        (0.97..1.05).contains(&ratio),
        "kernel {kernel}, tphdb {ours}"
    );
}
