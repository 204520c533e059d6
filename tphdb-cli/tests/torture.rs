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
