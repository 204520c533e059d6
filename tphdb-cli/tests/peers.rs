//! A tiny side-by-side run of every engine the `peers` feature builds.
//! Without the feature (the system libraries not installed) it checks that
//! peers are refused with a clear message instead.

use std::process::Command;

fn bench(args: &[&str]) -> (bool, String, String) {
    bench_with(std::path::Path::new(env!("CARGO_BIN_EXE_tphdb")), args)
}

/// A tiny `bench` run of the `tphdb` binary at `exe`.
fn bench_with(exe: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(exe)
        .arg("bench")
        .args(args)
        .args(["--keys", "2000", "--ops", "2000", "--dir"])
        .arg(dir.path())
        .output()
        .expect("run tphdb bench");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[cfg(feature = "peers")]
fn every_engine_runs_every_workload() {
    let engines = "tphdb,rocksdb,rocksdb-tuned,lmdb,leveldb,fjall,redb,pogreb";
    let plots = tempfile::tempdir().unwrap();
    let workloads = [
        "ycsb-a",
        "ycsb-b",
        "ycsb-c",
        "ycsb-d",
        "ycsb-e",
        "ycsb-f",
        "fillseq",
        "fillrandom",
        "overwrite",
        "readrandom",
        "readmissing",
        "readhot",
        "readseq",
        "seekrandom",
        "readwhilewriting",
        "deleterandom",
        "pogreb",
    ];
    for w in workloads {
        let plot_dir = plots.path().to_str().unwrap();
        let json = plots.path().join(format!("{w}.json"));
        let json_path = json.to_str().unwrap();
        let (ok, stdout, stderr) = bench(&[
            w,
            "--engines",
            engines,
            "--plot",
            plot_dir,
            "--json",
            json_path,
        ]);
        assert!(ok, "{w}: {stdout}\n{stderr}");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let rows = v["results"].as_array().unwrap();
        // Pogreb has no ordered scans and no concurrent writer.
        let pogreb_skips = ["ycsb-e", "seekrandom", "readseq", "readwhilewriting"].contains(&w);
        assert_eq!(rows.len(), if pogreb_skips { 7 } else { 8 }, "{w}");
        for r in rows {
            // Every engine read back what the workload wrote.
            assert_eq!(r["unexpected_reads"], 0, "{w}: {r}");
            assert!(r["ops_per_sec"].as_f64().unwrap() > 0.0, "{w}: {r}");
        }
        let svg = std::fs::read_to_string(plots.path().join(format!("{w}-throughput.svg")))
            .expect("a throughput plot");
        assert!(svg.starts_with("<svg") && svg.contains("rocksdb"), "{w}");
        for e in engines
            .split(',')
            .filter(|e| !(pogreb_skips && *e == "pogreb"))
        {
            assert!(
                stdout.lines().any(|l| l.starts_with(&format!("{e} "))),
                "{w}: no row for {e}:\n{stdout}"
            );
        }
    }
}

/// Regression: the peers were linked into the `tphdb` binary, so every
/// tphdb child of a side-by-side benchmark mapped RocksDB's, LevelDB's and
/// the C++ runtime's libraries, 8 MB of its resident memory that a process
/// embedding tphdb would not hold. They are linked into `tphdb-peers`
/// only, whose children run them: neither library is a dependency of
/// `tphdb` (named in its dynamic section), and both are of `tphdb-peers`.
#[test]
#[cfg(feature = "peers")]
fn a_tphdb_child_maps_none_of_the_peers_libraries() {
    let needs = |exe: &str, library: &str| {
        let bytes = std::fs::read(exe).unwrap();
        bytes
            .windows(library.len())
            .any(|w| w == library.as_bytes())
    };
    for library in ["librocksdb.so", "libleveldb.so"] {
        assert!(
            needs(env!("CARGO_BIN_EXE_tphdb-peers"), library),
            "{library}"
        );
        assert!(!needs(env!("CARGO_BIN_EXE_tphdb"), library), "{library}");
    }
}

/// A `tphdb` without `tphdb-peers` beside it (`cargo run --bin tphdb`
/// builds only the one) refuses peers before anything runs, saying how to
/// build it.
#[test]
#[cfg(feature = "peers")]
fn peers_need_their_binary_beside_tphdb() {
    let alone = tempfile::tempdir().unwrap();
    let exe = alone.path().join("tphdb");
    std::fs::copy(env!("CARGO_BIN_EXE_tphdb"), &exe).unwrap();
    let (ok, stdout, stderr) = bench_with(&exe, &["ycsb-c", "--engines", "tphdb,rocksdb"]);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("tphdb-peers") && stderr.contains("--features peers"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("ycsb-c: tphdb"),
        "ran before refusing: {stderr}"
    );
}

#[test]
#[cfg(not(feature = "peers"))]
fn peers_need_the_feature() {
    let (ok, stdout, stderr) = bench(&["ycsb-c", "--engines", "tphdb,rocksdb"]);
    assert!(!ok, "{stdout}");
    assert!(stderr.contains("--features peers"), "{stderr}");
    let (ok, stdout, stderr) = bench(&["ycsb-c", "--engines", "tphdb"]);
    assert!(ok, "{stdout}\n{stderr}");
}

/// `--memory-mb` puts each engine in a cgroup memory limit; checked where
/// the cgroup v1 memory controller is writable (as root in CI).
#[test]
fn a_memory_budget_limits_each_engine() {
    let probe = std::path::Path::new("/sys/fs/cgroup/memory/tphdb-bench-probe");
    if std::fs::create_dir(probe).is_err() {
        eprintln!("no writable cgroup v1 memory controller: not checked");
        return;
    }
    std::fs::remove_dir(probe).unwrap();
    let (ok, stdout, stderr) = bench(&["readrandom", "--memory-mb", "600"]);
    assert!(ok, "{stdout}\n{stderr}");
    // A budget far below what the load needs (16 MiB stopped being that
    // once flushes held less than their memtable): the kernel kills the
    // engine, and its row says so.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tphdb"))
        .args([
            "bench",
            "fillrandom",
            "--keys",
            "300000",
            "--memory-mb",
            "4",
            "--dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let row = stdout.lines().find(|l| l.starts_with("tphdb "));
    assert!(
        row.is_some_and(|r| r.contains("SIGKILL")) && stderr.contains("tphdb: failed"),
        "{stdout}\n{stderr}"
    );
}

/// `readrandom --direct-io` adds rows for the disk itself, and plots skip
/// them.
#[test]
fn direct_io_readrandom_reports_the_disk() {
    // O_DIRECT needs a real file system: the target directory, not /tmp.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let json = dir.path().join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_tphdb"))
        .args(["bench", "readrandom", "--keys", "20000", "--ops", "5000"])
        .args(["--direct-io", "--fio-seconds", "1", "--dir"])
        .arg(dir.path())
        .arg("--plot")
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let engines: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["engine"].as_str().unwrap())
        .collect();
    assert_eq!(engines[..2], ["tphdb", "disk-4k-direct"], "{engines:?}");
    assert!(dir.path().join("readrandom-latency-read.svg").exists());
}
