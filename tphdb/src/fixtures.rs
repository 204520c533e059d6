//! Golden fixtures: files written by a released format, committed under
//! `tests/fixtures/<version>/`, that every later tphdb must open (or refuse
//! cleanly, for the damaged copies) and, for today's format, re-encode byte
//! for byte. A format change then shows up as a failing test here, not as
//! a silent incompatibility.
//!
//! `cargo test -p tphdb --lib write_fixtures -- --ignored` writes the
//! fixtures of the current format into a new version directory; it refuses
//! to touch one that exists. Fixtures are never regenerated: a new format
//! version gets a new directory, and the old ones stay.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::batch::WriteBatch;
use crate::fs::{FileSystem, MemFs, PosixFs};
use crate::log::LogWriter;
use crate::piece::{write_piece, EntryRef, PieceOptions};
use crate::version::{Layout, VersionEdit};
use crate::{IteratorMode, Options, DB};

/// The format the current code writes.
const CURRENT_VERSION: &str = "v12";

type State = BTreeMap<Vec<u8>, Vec<u8>>;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// The options the fixture database is written and read with: small
/// memtables and blocks so that a few hundred keys make several TPHs.
fn db_options() -> Options {
    Options {
        write_buffer_bytes: 8 << 10,
        tph_target_bytes: 8 << 10,
        fanout: 2,
        max_levels: 3,
        l0_compaction_trigger: 100,
        l0_slowdown_trigger: 100,
        l0_stop_trigger: 100,
        page_size_bytes: 512,
        background_threads: 1,
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:04}").into_bytes()
}

fn value(i: u32, round: u32) -> Vec<u8> {
    let mut v = format!("value {i} round {round} ").into_bytes();
    v.resize(10 + (i as usize * 7 + round as usize) % 40, b'.');
    v
}

/// Writes the fixture database into `dir`: compacted data at the bottom,
/// level-0 TPHs over it, overwrites, deletes, and writes left in the WAL.
/// Returns what it holds.
fn write_database(dir: &Path) -> crate::Result<State> {
    let mut state = State::new();
    let db = DB::open(&db_options(), dir)?;
    let put = |state: &mut State, i: u32, round: u32| -> crate::Result<()> {
        db.put(key(i), value(i, round))?;
        state.insert(key(i), value(i, round));
        Ok(())
    };
    let delete = |state: &mut State, i: u32| -> crate::Result<()> {
        db.delete(key(i))?;
        state.remove(&key(i));
        Ok(())
    };
    for i in 0..200 {
        put(&mut state, i, 0)?;
    }
    db.compact_range(None, None)?;
    for i in (0..200).step_by(3) {
        put(&mut state, i, 1)?;
    }
    for i in (0..200).step_by(7) {
        delete(&mut state, i)?;
    }
    db.flush()?;
    for i in 200..230 {
        put(&mut state, i, 2)?;
    }
    db.flush()?;
    // Left in the WAL (see `wal_writes`).
    for i in (1..230).step_by(11) {
        put(&mut state, i, 3)?;
    }
    delete(&mut state, 5)?;
    db.close()?;
    Ok(state)
}

fn encode_state(state: &State) -> String {
    state
        .iter()
        .map(|(k, v)| format!("{} {}\n", hex(k), hex(v)))
        .collect()
}

fn decode_state(text: &str) -> State {
    text.lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').expect("key and value");
            (unhex(k), unhex(v))
        })
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The entries of the standalone piece fixture.
fn piece_entries() -> Vec<(Vec<u8>, Option<Vec<u8>>, u64)> {
    (0..50u32)
        .map(|i| {
            let v = (i % 6 != 0).then(|| value(i, 9));
            (key(i), v, 1000 + i as u64)
        })
        .collect()
}

fn write_piece_fixture(fs: &dyn FileSystem, path: &Path) -> crate::Result<()> {
    let entries = piece_entries();
    let refs: Vec<EntryRef<'_>> = entries
        .iter()
        .map(|(k, v, seq)| EntryRef {
            key: k,
            value: v.as_deref(),
            seq: *seq,
        })
        .collect();
    // The v2 fixture was written with aligned blocks, then the default;
    // blocks had no bound on their slots before v6 was written (the
    // writer's choice, not the format's).
    let opts = PieceOptions {
        page_size: 512,
        align_blocks: true,
        max_block_slots: usize::MAX,
        ..PieceOptions::default()
    };
    write_piece(fs, path, &refs, &opts)?;
    Ok(())
}

/// Two write batches as WAL records.
fn write_wal_fixture(fs: &dyn FileSystem, path: &Path) -> crate::Result<()> {
    let mut w = LogWriter::new(fs.create(path)?, 0);
    let mut b = WriteBatch::new();
    b.put(b"alpha", b"one");
    b.delete(b"beta");
    b.put(b"", vec![7u8; 40_000]);
    w.add_record(b.encode_with_seq(41))?;
    let mut b = WriteBatch::new();
    b.put(b"gamma", b"");
    w.add_record(b.encode_with_seq(44))?;
    w.sync()
}

/// A snapshot edit and an edit of every other field, as MANIFEST records.
fn write_manifest_fixture(fs: &dyn FileSystem, path: &Path) -> crate::Result<()> {
    let mut w = LogWriter::new(fs.create(path)?, 0);
    let snapshot = VersionEdit {
        layout: Some(Layout {
            fanout: 8,
            one_level: false,
        }),
        depth: Some(2),
        log_number: Some(12),
        next_file: Some(30),
        last_seq: Some(5000),
        add_l0: vec![20, 21],
        set: vec![(1, 3, 17), (2, 60, 19)],
        ..VersionEdit::default()
    };
    w.add_record(&snapshot.encode())?;
    let edit = VersionEdit {
        log_number: Some(25),
        next_file: Some(31),
        last_seq: Some(6000),
        remove_l0: vec![20],
        remove: vec![(1, 3)],
        ..VersionEdit::default()
    };
    w.add_record(&edit.encode())?;
    w.sync()
}

fn read_all(db: &DB) -> crate::Result<State> {
    db.iterator(IteratorMode::Start)
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())))
        .collect()
}

/// Copies a fixture directory to a temporary one: opening writes (a new
/// MANIFEST, a LOCK file), and the committed files must stay as they are.
fn copy_dir(from: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for entry in std::fs::read_dir(from).expect("fixture directory") {
        let entry = entry.expect("entry");
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).expect("copy");
    }
    dir
}

/// How a damaged copy of the fixture database must open.
enum Outcome {
    /// Open fails with corruption.
    Corrupt,
    /// Opens, and holds exactly the fixture's state.
    Intact,
    /// Opens, and holds the state before the writes left in the WAL, plus
    /// a prefix of them: every key agrees with one of the two states.
    WalPrefix,
}

/// The damaged copies: (name, file to damage, damage, outcome).
#[allow(clippy::type_complexity)]
fn damages() -> Vec<(&'static str, fn(&str) -> bool, fn(&mut Vec<u8>), Outcome)> {
    vec![
        (
            "piece-bit-flip",
            |n| n.ends_with(".ph"),
            |b| {
                let at = b.len() / 3;
                b[at] ^= 0x20;
            },
            Outcome::Corrupt,
        ),
        (
            "piece-truncated",
            |n| n.ends_with(".ph"),
            |b| b.truncate(b.len() - 1),
            Outcome::Corrupt,
        ),
        (
            "manifest-middle-damage",
            |n| n.starts_with("MANIFEST-"),
            |b| b[20] ^= 0x01,
            Outcome::Corrupt,
        ),
        (
            // Whole synced records gone (format version 2 and later: CURRENT
            // records the MANIFEST's length).
            "manifest-truncated",
            |n| n.starts_with("MANIFEST-"),
            |b| b.truncate(b.len() / 2),
            Outcome::Corrupt,
        ),
        (
            "current-bad-crc",
            |n| n == "CURRENT",
            |b| {
                let at = b.len() - 2;
                b[at] ^= 0x01;
            },
            Outcome::Corrupt,
        ),
        (
            "wal-torn-tail",
            |n| n.ends_with(".log"),
            |b| b.truncate(b.len() - 5),
            Outcome::WalPrefix,
        ),
        ("untouched", |_| false, |_| {}, Outcome::Intact),
    ]
}

#[test]
#[ignore = "writes the fixtures of a new format version; run by hand, once"]
fn write_fixtures() {
    let root = fixtures().join(CURRENT_VERSION);
    assert!(
        !root.exists(),
        "{} exists: fixtures are never rewritten",
        root.display()
    );
    let db_dir = root.join("db");
    let state = write_database(&db_dir).unwrap();
    std::fs::remove_file(db_dir.join("LOCK")).unwrap();
    std::fs::write(root.join("db.expected"), encode_state(&state)).unwrap();
    write_piece_fixture(&PosixFs, &root.join("piece.ph")).unwrap();
    write_wal_fixture(&PosixFs, &root.join("wal.log")).unwrap();
    write_manifest_fixture(&PosixFs, &root.join("manifest.log")).unwrap();
    std::fs::write(
        root.join("CURRENT"),
        crate::version::encode_current("MANIFEST-000007", 1234),
    )
    .unwrap();
    for (name, target, damage, _) in damages() {
        let dir = root.join("damaged").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut files: Vec<_> = std::fs::read_dir(&db_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        // The largest matching file gets the damage.
        let victim = files
            .iter()
            .filter(|n| target(n))
            .max_by_key(|n| std::fs::metadata(db_dir.join(n)).unwrap().len())
            .cloned();
        for f in files {
            let mut bytes = std::fs::read(db_dir.join(&f)).unwrap();
            if Some(&f) == victim.as_ref() {
                damage(&mut bytes);
            }
            std::fs::write(dir.join(&f), bytes).unwrap();
        }
    }
}

/// Every fixture version's database opens, read-only and writable, with
/// exactly the state it was written with, and takes writes: overwrites
/// and deletes merged into TPHs whose heads an older version wrote (the
/// global index of format 1 routing them), and a reopen.
#[test]
fn every_fixture_database_opens_with_its_state() {
    let mut versions = 0;
    for entry in std::fs::read_dir(fixtures()).expect("tests/fixtures") {
        let root = entry.unwrap().path();
        let want = decode_state(&std::fs::read_to_string(root.join("db.expected")).unwrap());
        let copy = copy_dir(&root.join("db"));
        let db = DB::open_for_read_only(&db_options(), copy.path()).unwrap();
        assert_eq!(read_all(&db).unwrap(), want, "{}", root.display());
        for (k, v) in want.iter().step_by(5) {
            assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
        }
        drop(db);
        let db = DB::open(&db_options(), copy.path()).unwrap();
        assert_eq!(read_all(&db).unwrap(), want, "{}", root.display());
        let mut now = want.clone();
        now.insert(b"new".to_vec(), b"write".to_vec());
        for (i, k) in want.keys().enumerate().step_by(4) {
            if i % 8 == 0 {
                db.delete(k).unwrap();
                now.remove(k);
            } else {
                db.put(k, b"overwritten").unwrap();
                now.insert(k.clone(), b"overwritten".to_vec());
            }
        }
        db.put(b"new", b"write").unwrap();
        db.compact_range(None, None).unwrap();
        assert_eq!(db.get(b"new").unwrap().as_deref(), Some(&b"write"[..]));
        assert_eq!(read_all(&db).unwrap(), now, "{}", root.display());
        drop(db);
        let report = DB::verify(&db_options(), copy.path()).unwrap();
        assert!(report.is_ok(), "{}: {report:?}", root.display());
        let db = DB::open(&db_options(), copy.path()).unwrap();
        assert_eq!(read_all(&db).unwrap(), now, "{}", root.display());
        versions += 1;
    }
    assert!(versions >= 1, "no fixtures");
}

/// Damaged copies fail cleanly or recover exactly what the damage allows.
#[test]
fn damaged_fixture_databases_fail_cleanly_or_recover_a_prefix() {
    for entry in std::fs::read_dir(fixtures()).expect("tests/fixtures") {
        let root = entry.unwrap().path();
        let want = decode_state(&std::fs::read_to_string(root.join("db.expected")).unwrap());
        for (name, _, _, outcome) in damages() {
            // Cases added with a later version are not in earlier ones.
            let case = root.join("damaged").join(name);
            if !case.exists() {
                continue;
            }
            let copy = copy_dir(&case);
            let what = format!("{}: {name}", root.display());
            let opened =
                DB::open_for_read_only(&db_options(), copy.path()).and_then(|db| read_all(&db));
            match outcome {
                Outcome::Corrupt => match opened {
                    Err(e) => assert!(e.is_corruption(), "{what}: {e}"),
                    // The damage lies where no read of the current state
                    // goes (a block whose versions newer ones hide, as in
                    // v7's bit flip): every read is still right, and a
                    // verify finds it.
                    Ok(got) => {
                        assert_eq!(got, want, "{what}");
                        let report = DB::verify(&db_options(), copy.path()).unwrap();
                        assert!(!report.is_ok(), "{what}: opened, and verify passed");
                    }
                },
                Outcome::Intact => assert_eq!(opened.unwrap(), want, "{what}"),
                Outcome::WalPrefix => {
                    let got = opened.unwrap_or_else(|e| panic!("{what}: {e}"));
                    // Only keys the WAL touched may differ, and only as an
                    // older state of them; nothing else is lost.
                    let (wal_keys, _) = wal_writes();
                    for (k, v) in &want {
                        if !wal_keys.contains(k) {
                            assert_eq!(got.get(k), Some(v), "{what}");
                        }
                    }
                    assert!(got
                        .keys()
                        .all(|k| want.contains_key(k) || wal_keys.contains(k)));
                }
            }
        }
    }
}

/// Keys the fixture database's last writes (the ones left in its WAL)
/// touch, and how many writes that is.
fn wal_writes() -> (std::collections::HashSet<Vec<u8>>, usize) {
    let mut keys: std::collections::HashSet<Vec<u8>> = (1..230).step_by(11).map(key).collect();
    keys.insert(key(5));
    let n = keys.len();
    (keys, n)
}

/// Today's encoders write exactly the bytes of the fixtures of the current
/// version: a piece, WAL records, MANIFEST edits, CURRENT.
#[test]
fn todays_encoders_write_the_current_fixtures_byte_for_byte() {
    let root = fixtures().join(CURRENT_VERSION);
    let fs = MemFs::new();
    let check = |name: &str, write: &dyn Fn(&dyn FileSystem, &Path) -> crate::Result<()>| {
        let path = Path::new("/out");
        write(&fs, path).unwrap();
        let got = fs.read_file(path).unwrap();
        let want = std::fs::read(root.join(name)).unwrap();
        assert!(
            got == want,
            "{name}: today's encoding differs from the fixture"
        );
    };
    check("piece.ph", &|fs, p| write_piece_fixture(fs, p));
    check("wal.log", &|fs, p| write_wal_fixture(fs, p));
    check("manifest.log", &|fs, p| write_manifest_fixture(fs, p));
    let current = std::fs::read(root.join("CURRENT")).unwrap();
    assert_eq!(
        current,
        crate::version::encode_current("MANIFEST-000007", 1234).as_bytes()
    );
}

/// And today's decoders read every version's single-file fixtures back.
#[test]
fn every_fixture_version_decodes() {
    for entry in std::fs::read_dir(fixtures()).expect("tests/fixtures") {
        let root = entry.unwrap().path();
        let piece = crate::piece::PieceReader::open(
            &PosixFs,
            &root.join("piece.ph"),
            crate::fs::ReadMode::Pread,
        )
        .unwrap();
        for (k, v, seq) in piece_entries() {
            let e = piece.get(&k).unwrap().expect("every entry");
            assert_eq!((e.value.map(|v| v.to_vec()), e.seq), (v, seq));
        }
        // Key order (the keys are ascending already): each version's key
        // chunks lead to the entries.
        let mut c = piece.sorted_cursor().unwrap();
        c.seek_to_first().unwrap();
        for (k, v, seq) in piece_entries() {
            assert_eq!(c.key(), Some(&k[..]), "{}", root.display());
            assert_eq!(c.is_tombstone(), Some(v.is_none()));
            let e = c.load_entry().unwrap().expect("an entry");
            assert_eq!((e.value.map(|v| v.to_vec()), e.seq), (v, seq));
            c.move_next().unwrap();
        }
        assert!(!c.valid());
        // Key hashes: every version's read as the keys' own (pieces before
        // version 3 stored the second hash in 64 bits, of which the high
        // half is today's), so that compaction tells keys apart alike.
        let mut want: Vec<(u64, u64)> = piece_entries()
            .iter()
            .map(|(k, _, _)| (crate::hash::key_hash(k), crate::hash::key_hash2(k)))
            .collect();
        want.sort_unstable();
        let mut got = Vec::new();
        piece.for_each_key_hash(|h, h2| got.push((h, h2))).unwrap();
        assert_eq!(got, want, "{}", root.display());
        let wal = crate::fuzzing::read_log(&std::fs::read(root.join("wal.log")).unwrap()).unwrap();
        assert_eq!(wal.records.len(), 2);
        let (seq, batch) = WriteBatch::decode(&wal.records[0]).unwrap();
        assert_eq!((seq, batch.len()), (41, 3));
        let manifest =
            crate::fuzzing::read_log(&std::fs::read(root.join("manifest.log")).unwrap()).unwrap();
        let edits: Vec<VersionEdit> = manifest
            .records
            .iter()
            .map(|r| VersionEdit::decode(r).unwrap())
            .collect();
        assert_eq!(edits.len(), 2);
        assert_eq!(edits[0].set, vec![(1, 3, 17), (2, 60, 19)]);
        let current = std::fs::read(root.join("CURRENT")).unwrap();
        assert_eq!(
            crate::version::decode_current(&current).unwrap().manifest,
            "MANIFEST-000007"
        );
    }
}

/// A database whose CURRENT is of format version 1 records no MANIFEST
/// length, so open cannot be certain a piece no version names is garbage:
/// a complete one goes to `lost/`, counted, instead of being deleted. The
/// next open (CURRENT is now version 2) is certain again.
#[test]
fn unnamed_pieces_of_a_version_1_database_go_to_lost() {
    let root = fixtures().join("v1");
    let copy = copy_dir(&root.join("db"));
    std::fs::copy(root.join("piece.ph"), copy.path().join("000099.ph")).unwrap();
    std::fs::write(copy.path().join("000098.ph"), b"a torn piece").unwrap();
    let db = DB::open(&db_options(), copy.path()).unwrap();
    assert_eq!(db.stats().files_moved_to_lost, 1);
    assert!(copy.path().join("lost/000099.ph").exists());
    assert!(!copy.path().join("000099.ph").exists());
    assert!(
        !copy.path().join("000098.ph").exists(),
        "an incomplete piece is garbage"
    );
    drop(db);
    std::fs::copy(root.join("piece.ph"), copy.path().join("000097.ph")).unwrap();
    let db = DB::open(&db_options(), copy.path()).unwrap();
    assert_eq!(db.stats().files_moved_to_lost, 0);
    assert!(!copy.path().join("000097.ph").exists());
}
