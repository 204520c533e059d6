//! Kill -9 of a writing process, 50 times: every acknowledged write must
//! survive, and each writer's keys must hold a prefix of its history.

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
