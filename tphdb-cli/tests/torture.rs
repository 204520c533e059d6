//! Short runs of the torture commands: `crashtest` (kill -9 of a writing
//! process; every acknowledged write must survive, and each writer's keys
//! must hold a prefix of its history) and `stress` (concurrent operations
//! checked against a model).

use std::process::Command;

#[test]
fn fifty_kills_lose_no_acknowledged_write() {
    let out = Command::new(env!("CARGO_BIN_EXE_tphdb"))
        .args(["crashtest", "--cycles", "50", "--max-kill-ms", "700"])
        .output()
        .expect("run tphdb crashtest");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("crashtest passed: 50 kills"), "{stdout}");
}

#[test]
fn a_short_stress_run_finds_no_failure() {
    let out = Command::new(env!("CARGO_BIN_EXE_tphdb"))
        .args([
            "stress",
            "--seconds",
            "6",
            "--threads",
            "4",
            "--keys",
            "3000",
        ])
        .args(["--reopen-seconds", "2", "--write-buffer-kb", "64"])
        .output()
        .expect("run tphdb stress");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains(": 0 failures"), "{stdout}");
    assert!(stdout.contains("2 reopens"), "{stdout}");
}

/// Regression: when the thread that reopens the database and reports
/// (here: printing to a closed stdout at its 5-second report; in general,
/// a failed reopen) gave up, the workers were never told to stop and spun
/// for good. The run now ends, with an error.
#[test]
fn a_stress_run_whose_coordinator_fails_ends() {
    use std::io::BufRead;
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let mut child = Command::new(env!("CARGO_BIN_EXE_tphdb"))
        .args([
            "stress",
            "--seconds",
            "8",
            "--threads",
            "2",
            "--keys",
            "500",
        ])
        .args(["--reopen-seconds", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run tphdb stress");
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("the first line");
    assert!(first.starts_with("stress:"), "{first}");
    drop(stdout);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("stress still running 60 s after its output closed");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success(), "{status}");
}
