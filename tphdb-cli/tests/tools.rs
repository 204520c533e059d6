//! `tphdb verify` and `tphdb repair` on a real directory.

use std::process::{Command, Output};

use tphdb::{Options, DB};

fn tphdb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tphdb"))
        .args(args)
        .output()
        .expect("run tphdb")
}

#[test]
fn verify_finds_damage_and_repair_salvages_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let db_dir = dir.path().join("db");
    let opts = Options {
        write_buffer_bytes: 64 << 10,
        ..Options::default()
    };
    let db = DB::open(&opts, &db_dir).unwrap();
    for i in 0..5000u32 {
        db.put(format!("key{i:06}"), vec![b'v'; 50]).unwrap();
    }
    db.flush().unwrap();
    db.close().unwrap();
    let path = db_dir.to_str().unwrap();

    let out = tphdb(&["verify", "--db", path]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("no damage"), "{stdout}");

    let mut pieces: Vec<_> = std::fs::read_dir(&db_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ph"))
        .collect();
    pieces.sort();
    let victim = pieces.last().unwrap();
    let mut bytes = std::fs::read(victim).unwrap();
    bytes[100] ^= 1;
    std::fs::write(victim, bytes).unwrap();

    let out = tphdb(&["verify", "--db", path]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("DAMAGED"), "{stdout}");

    let out = tphdb(&["repair", "--db", path]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("lost: "), "{stdout}");

    let out = tphdb(&["verify", "--db", path]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let db = DB::open(&opts, &db_dir).unwrap();
    let kept = db.iterator(tphdb::IteratorMode::Start).count();
    assert!(kept > 4000 && kept < 5000, "{kept} keys kept");
}
