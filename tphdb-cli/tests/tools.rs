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
    // The newest piece holding entries (a merged TPH's newest pieces are
    // heads holding only its index, whose damage loses no entry).
    pieces.sort();
    let victim = pieces
        .iter()
        .rev()
        .find(|p| !ok(&["inspect", "piece", p.to_str().unwrap()]).contains(" entries 0 ("))
        .unwrap();
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

fn ok(args: &[&str]) -> String {
    let out = tphdb(args);
    assert!(
        out.status.success(),
        "tphdb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn get_put_delete_and_scan_from_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    ok(&["put", "--db", db, "greeting", "hello\\tworld"]);
    ok(&["put", "--db", db, "--hex", "00ff", "0a"]);
    ok(&["put", "--db", db, "grape", "purple"]);
    assert_eq!(ok(&["get", "--db", db, "greeting"]), "hello\\tworld\n");
    assert_eq!(ok(&["get", "--db", db, "--hex", "00ff"]), "0a\n");
    let missing = tphdb(&["get", "--db", db, "nothing"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("not found"));

    assert_eq!(
        ok(&["scan", "--db", db]),
        "\\x00\\xff\t\\n\ngrape\tpurple\ngreeting\thello\\tworld\n"
    );
    assert_eq!(
        ok(&[
            "scan",
            "--db",
            db,
            "--prefix",
            "gr",
            "--reverse",
            "--keys-only"
        ]),
        "greeting\ngrape\n"
    );
    assert_eq!(
        ok(&["scan", "--db", db, "--from", "a", "--to", "greeting"]),
        "grape\tpurple\n"
    );
    assert_eq!(
        ok(&["scan", "--db", db, "--limit", "1", "--keys-only", "--hex"]),
        "00ff\n"
    );
    // Regression: with --reverse, --from became the lower bound and the
    // start at once, so only a key equal to it was printed.
    assert_eq!(
        ok(&[
            "scan",
            "--db",
            db,
            "--from",
            "gra",
            "--reverse",
            "--keys-only"
        ]),
        "greeting\ngrape\n"
    );
    assert_eq!(
        ok(&[
            "scan",
            "--db",
            db,
            "--from",
            "a",
            "--to",
            "greeting",
            "--reverse",
            "--keys-only"
        ]),
        "grape\n"
    );
    ok(&["delete", "--db", db, "grape"]);
    assert_eq!(
        ok(&["scan", "--db", db, "--prefix", "gr", "--keys-only"]),
        "greeting\n"
    );
    // Each command's open flushes what the WAL before it held: the WALs left
    // hold the last put and the delete. The MANIFEST holds the edits.
    let files = |ext: &str| -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(db)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains(ext))
            .collect();
        v.sort();
        v
    };
    let wals: String = files(".log")
        .iter()
        .map(|f| ok(&["inspect", "wal", f.to_str().unwrap()]))
        .collect();
    for want in ["put grape (6 bytes)", "delete grape", "clean end"] {
        assert!(wals.contains(want), "{want} missing in\n{wals}");
    }
    let manifest = ok(&[
        "inspect",
        "manifest",
        files("MANIFEST")[0].to_str().unwrap(),
    ]);
    assert!(
        manifest.starts_with("edit 0: format 8, layout fanout"),
        "{manifest}"
    );
    assert!(manifest.contains("clean end"), "{manifest}");
    // Only `put` and `load` create a database.
    let absent = dir.path().join("absent");
    assert!(!tphdb(&["delete", "--db", absent.to_str().unwrap(), "k"])
        .status
        .success());
    assert!(!absent.exists());
}

#[test]
fn dump_load_checkpoint_compact_and_inspect() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let db = DB::open_default(&src).unwrap();
    for i in 0..20_000u32 {
        // Keys and values with every byte, tabs and newlines among them.
        let key = [&i.to_be_bytes()[..], b"\t\n#\\"].concat();
        db.put(&key, vec![(i % 256) as u8; (i % 50) as usize])
            .unwrap();
    }
    db.close().unwrap();
    let (src, dump) = (src.to_str().unwrap(), dir.path().join("dump.txt"));
    ok(&["dump", "--db", src, "--out", dump.to_str().unwrap()]);
    let text = std::fs::read_to_string(&dump).unwrap();
    assert!(text.starts_with("# tphdb dump v1 format=escaped\n"));
    assert!(text.ends_with(&format!("crc32c={:08x}\n", crc_of_lines(&text))));

    // Rebuilt from the dump, it dumps the same.
    let copy = dir.path().join("copy");
    let copy_s = copy.to_str().unwrap();
    ok(&["load", "--db", copy_s, "--input", dump.to_str().unwrap()]);
    let again = dir.path().join("again.txt");
    ok(&["dump", "--db", copy_s, "--out", again.to_str().unwrap()]);
    assert!(std::fs::read(&again).unwrap() == text.as_bytes());

    // A dump cut short is refused before anything is loaded.
    let cut = dir.path().join("cut.txt");
    std::fs::write(&cut, &text.as_bytes()[..text.len() / 2]).unwrap();
    let refused = dir.path().join("refused");
    let out = tphdb(&[
        "load",
        "--db",
        refused.to_str().unwrap(),
        "--input",
        cut.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(!refused.exists());

    // Unsorted lines without a header load too; the last value wins.
    let lines = dir.path().join("lines.txt");
    std::fs::write(&lines, "b\t2\na\t1\nb\t3\n").unwrap();
    ok(&["load", "--db", copy_s, "--input", lines.to_str().unwrap()]);
    assert_eq!(ok(&["get", "--db", copy_s, "b"]), "3\n");

    let cp = dir.path().join("cp");
    ok(&["checkpoint", "--db", copy_s, "--to", cp.to_str().unwrap()]);
    ok(&["compact", "--db", copy_s]);
    assert_eq!(ok(&["get", "--db", cp.to_str().unwrap(), "a"]), "1\n");
    assert!(ok(&["verify", "--db", cp.to_str().unwrap()]).contains("no damage"));

    // Every piece's report: a merged TPH's head holds its index alone, and
    // its data pieces their entries alone.
    let report: String = std::fs::read_dir(&cp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "ph"))
        .map(|piece| {
            ok(&[
                "inspect",
                "piece",
                piece.to_str().unwrap(),
                "--entries",
                "2",
            ])
        })
        .collect();
    for part in [
        "footer:",
        "sections:",
        "properties:",
        "perfect hash: cphash",
        " hashes each from 0x",
        "TPH head: level ",
        "blocks:",
        "seq ",
    ] {
        assert!(report.contains(part), "{part} missing in\n{report}");
    }
}

/// The CRC-32C of a dump's entry lines, as its trailer gives it.
fn crc_of_lines(text: &str) -> u32 {
    text.split_inclusive('\n')
        .filter(|l| !l.starts_with('#'))
        .fold(0, |crc, l| crc32c::crc32c_append(crc, l.as_bytes()))
}
