//! The benchmark binary runs end to end at small sizes and writes JSON of the
//! documented shape.

use std::process::Command;

use serde_json::Value;

fn run_bench(args: &[&str]) -> Value {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let json = dir.path().join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_tphdb"))
        .current_dir(dir.path())
        .arg("bench")
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap()
}

fn results(v: &Value) -> &Vec<Value> {
    v["results"].as_array().unwrap()
}

/// A parameter the perfect hash refuses is an error message, not a panic.
#[test]
fn bench_phf_reports_a_refused_parameter() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tphdb"))
        .current_dir(dir.path())
        .args(["bench", "phf", "--keys", "1000", "--lambda", "7"])
        .args(["--engines", "cphash", "--rounds", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("keys_per_bucket"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bench_phf_reports_every_engine() {
    let v = run_bench(&[
        "phf",
        "--keys",
        "20000",
        "--rounds",
        "1",
        "--query-passes",
        "1",
    ]);
    assert_eq!(v["workload"], "phf");
    assert_eq!(v["params"]["keys"], 20000);
    let engines: Vec<&str> = results(&v)
        .iter()
        .map(|r| r["engine"].as_str().unwrap())
        .collect();
    assert_eq!(engines, ["cphash", "ptr_hash", "fmph"]);
    for r in results(&v) {
        for field in [
            "bits_per_key",
            "build_ns_per_key_1t",
            "build_ns_per_key_mt",
            "query_ns_per_key",
        ] {
            assert!(r[field].as_f64().unwrap() > 0.0, "{field} in {r}");
        }
    }
    let cphash = &results(&v)[0];
    assert!(cphash["bits_per_key"].as_f64().unwrap() < 3.0);
}

#[test]
fn bench_piece_reports_every_read_path() {
    let v = run_bench(&[
        "piece",
        "--keys",
        "5000",
        "--ops",
        "2000",
        "--write-rounds",
        "1",
        "--direct-seconds",
        "1",
    ]);
    assert_eq!(v["workload"], "piece");
    let rows = results(&v);
    let modes: Vec<&str> = rows
        .iter()
        .map(|r| r["read_mode"].as_str().unwrap())
        .collect();
    assert_eq!(
        modes,
        ["mmap", "pread", "direct", "mmap", "pread", "direct", "direct"]
    );
    for r in &rows[..6] {
        assert_eq!(r["reads_per_get"].as_f64().unwrap(), 1.0, "{r}");
        assert!(r["index_bytes_per_key"].as_f64().unwrap() < 3.0);
    }
    assert_eq!(rows[6]["engine"], "raw-4k-direct");
}

#[test]
fn db_workloads_report_the_documented_fields() {
    for w in [
        "fillrandom",
        "readrandom",
        "readmissing",
        "readwhilewriting",
        "seekrandom",
    ] {
        let v = run_bench(&[
            w,
            "--keys",
            "20000",
            "--ops",
            "5000",
            "--seconds",
            "5",
            "--write-buffer-mb",
            "1",
        ]);
        assert_eq!(v["workload"], w);
        let r = &results(&v)[0];
        assert_eq!(r["engine"], "tphdb");
        for f in ["ops_per_sec", "avg_us", "p99_us"] {
            assert!(r[f].as_f64().unwrap() > 0.0, "{w}: {f} in {r}");
        }
        if w != "seekrandom" {
            for f in [
                "write_amp",
                "read_amp",
                "reads_per_get",
                "index_bytes_per_key",
            ] {
                assert!(r.get(f).is_some(), "{w}: {f} missing in {r}");
            }
        }
        if w == "readrandom" {
            assert!(r["reads_per_get"].as_f64().unwrap() <= 1.01);
        }
    }
}

#[test]
fn stats_prints_a_database() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = tphdb::DB::open_default(dir.path()).unwrap();
        db.put(b"k", b"v").unwrap();
        db.flush().unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tphdb"))
        .args(["stats", "--db"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("level") && text.contains("index"), "{text}");
}

/// Regression: a `--dir` that did not exist yet failed the run ("No such
/// file or directory") instead of being created.
#[test]
fn bench_creates_a_missing_dir() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let missing = dir.path().join("not/yet");
    let v = run_bench(&[
        "fillrandom",
        "--engines",
        "tphdb",
        "--keys",
        "2000",
        "--dir",
        missing.to_str().unwrap(),
    ]);
    assert_eq!(results(&v).len(), 1);
    assert!(missing.is_dir());
}
