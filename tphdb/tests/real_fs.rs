//! Failure paths on the real file system: a tmpfs that fills up, and one
//! remounted read-only. Mounting needs root (CAP_SYS_ADMIN); without it the
//! tests say so and skip.

use std::path::PathBuf;
use std::process::Command;

use tphdb::{Options, WriteOptions, DB};

/// A tmpfs mounted for one test, unmounted when dropped. The tests hold it
/// one at a time: a `mount` child forked while another test has a database
/// open holds a copy of its LOCK descriptor until it execs, and a reopen at
/// that moment would find the database busy.
struct Tmpfs {
    _one_at_a_time: std::sync::MutexGuard<'static, ()>,
    _dir: tempfile::TempDir,
    path: PathBuf,
}

static MOUNTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl Tmpfs {
    fn mount(size_kib: u64) -> Option<Tmpfs> {
        let guard = MOUNTS.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().ok()?;
        let path = dir.path().to_path_buf();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_kib}k"), "tmpfs"])
            .arg(&path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("SKIPPED: cannot mount a tmpfs here (needs root)");
            return None;
        }
        Some(Tmpfs {
            _one_at_a_time: guard,
            _dir: dir,
            path,
        })
    }

    fn remount_read_only(&self) {
        let ok = Command::new("mount")
            .args(["-o", "remount,ro"])
            .arg(&self.path)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "remounting read-only");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

/// Regression: the real file system's writer was a `BufWriter`. When a WAL
/// append ran out of space part way, the part that got through stayed in
/// the WAL and the rest stayed buffered, to be written when the file was
/// dropped (at the next memtable switch, once there was room again): the
/// write that had failed became a whole record in the WAL, and came back
/// at the next open.
#[test]
fn a_wal_append_that_runs_out_of_space_never_reaches_the_log() {
    let Some(fs) = Tmpfs::mount(4096) else { return };
    let db_dir = fs.path.join("db");
    let db = DB::open(&Options::default(), &db_dir).unwrap();
    // Fill the rest, keeping room to free later: a little for more WAL
    // records (not enough to flush them), then plenty.
    let small = fs.path.join("small-ballast");
    let large = fs.path.join("large-ballast");
    std::fs::write(&large, vec![0u8; 2560 << 10]).unwrap();
    std::fs::write(&small, vec![0u8; 64 << 10]).unwrap();
    let mut acknowledged = Vec::new();
    let mut failed = None;
    for i in 0..10_000u32 {
        let key = format!("key{i:05}");
        match db.put(&key, [i as u8; 1000]) {
            Ok(()) => acknowledged.push(key),
            Err(e) => {
                failed = Some((key, e));
                break;
            }
        }
    }
    let (failed_key, e) = failed.expect("the tmpfs filled up");
    assert!(e.is_no_space(), "{e}");
    assert!(acknowledged.len() > 50, "{} writes fit", acknowledged.len());
    assert!(db.get(&failed_key).unwrap().is_none());
    // Some room comes back: writing goes on without a reopen.
    std::fs::remove_file(&small).unwrap();
    let sync = WriteOptions {
        sync: true,
        ..WriteOptions::default()
    };
    for i in 0..20u32 {
        let key = format!("after{i}");
        db.put_opt(&key, [7u8; 1000], &sync).unwrap();
        acknowledged.push(key);
    }
    assert!(db.get(&failed_key).unwrap().is_none());
    drop(db);
    // Room for the recovery flush.
    std::fs::remove_file(&large).unwrap();
    let db = DB::open(&Options::default(), &db_dir).unwrap();
    let stats = db.stats();
    assert_eq!(stats.wal_dropped_bytes, 0, "the WALs end in whole records");
    assert_eq!(stats.wal_files_skipped, 0);
    for key in &acknowledged {
        assert!(db.get(key).unwrap().is_some(), "{key} lost");
    }
    assert!(
        db.get(&failed_key).unwrap().is_none(),
        "the failed write came back"
    );
}

/// Regression: `open_for_read_only` opened the LOCK file for writing, so a
/// database on read-only media could not be opened even for reading.
#[test]
fn a_database_on_read_only_media_opens_for_reading() {
    let Some(fs) = Tmpfs::mount(8 << 10) else {
        return;
    };
    let db_dir = fs.path.join("db");
    let db = DB::open(&Options::default(), &db_dir).unwrap();
    for i in 0..100u32 {
        db.put(format!("k{i}"), i.to_le_bytes()).unwrap();
    }
    db.flush().unwrap();
    db.put(b"in the wal", b"only").unwrap();
    db.close().unwrap();
    fs.remount_read_only();
    let db = DB::open_for_read_only(&Options::default(), &db_dir)
        .unwrap_or_else(|e| panic!("read-only open: {e}"));
    assert_eq!(
        db.get(b"k42").unwrap().as_deref(),
        Some(&42u32.to_le_bytes()[..])
    );
    assert_eq!(
        db.get(b"in the wal").unwrap().as_deref(),
        Some(&b"only"[..])
    );
    assert!(DB::open(&Options::default(), &db_dir).is_err(), "no writer");
}
