//! Damage and failures the sweeps do not reach one by one: flipped bits in
//! every file, a disk that stays full, a failed sync, torn and cut WALs.

use super::*;

/// A small database: 30 keys flushed into pieces, 10 more writes only in the
/// WAL. Returns the final state and the state once the flushed writes are
/// in (the least a WAL truncation may leave).
fn small_db(fs: &FaultFs) -> (State, State) {
    let opts = Options {
        write_buffer_bytes: 1 << 20,
        ..options(fs)
    };
    let db = DB::open(&opts, DIR).unwrap();
    let mut state = State::new();
    for i in 0..30u32 {
        db.put(key(i), value(i, i)).unwrap();
        state.insert(key(i), value(i, i));
    }
    db.flush().unwrap();
    let flushed = state.clone();
    for i in 25..35u32 {
        db.put(key(i), value(i, i + 100)).unwrap();
        state.insert(key(i), value(i, i + 100));
    }
    db.delete(key(3)).unwrap();
    state.remove(&key(3));
    db.close().unwrap();
    (state, flushed)
}

/// Every bit of every file: opening and reading yield an error, or the right
/// data (for the WAL: the data up to a clean cut of its tail).
#[test]
fn flipping_any_bit_of_any_file_never_yields_a_wrong_value() {
    let fs = FaultFs::new();
    let (state, flushed) = small_db(&fs);
    let files = fs.list(Path::new(DIR)).unwrap();
    let mut checked = 0;
    for name in files.iter().filter(|n| *n != "LOCK") {
        let path = Path::new(DIR).join(name);
        let f = fs.open_read(&path, tphdb::fs::ReadMode::Pread).unwrap();
        let good = f.read_at(0, f.len() as usize).unwrap().to_vec();
        for bit in 0..good.len() * 8 {
            let img = fs.snapshot();
            let mut bad = good.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            rewrite(&img, &path, &bad);
            let opts = Options {
                write_buffer_bytes: 1 << 20,
                ..options(&img)
            };
            let Ok(db) = DB::open_for_read_only(&opts, DIR) else {
                continue;
            };
            checked += 1;
            let Ok(got) = read_all(&db) else { continue };
            let ok = if name.ends_with(".log") {
                // A clean cut of the WAL: some prefix of its writes.
                got == state
                    || (got.len() >= flushed.len() - 5
                        && got
                            .iter()
                            .all(|(k, v)| state.get(k) == Some(v) || flushed.get(k) == Some(v)))
            } else {
                got == state
            };
            assert!(ok, "bit {bit} of {name}: wrong data ({} keys)", got.len());
            for (k, v) in &state {
                if let Ok(Some(g)) = db.get(k) {
                    assert!(
                        &g == v || flushed.get(k) == Some(&g) && name.ends_with(".log"),
                        "bit {bit} of {name}: wrong value"
                    );
                }
            }
        }
    }
    assert!(checked > 100, "{checked} flips opened at all");
}

fn rewrite(fs: &FaultFs, path: &Path, data: &[u8]) {
    let mut f = fs.create(path).unwrap();
    f.append(data).unwrap();
    f.sync().unwrap();
    fs.sync_dir(Path::new(DIR)).unwrap();
}

/// A full disk: writes fail with a clear error, reads go on, and once space
/// is back writing resumes, without a reopen, with nothing lost.
#[test]
fn a_full_disk_fails_writes_keeps_reads_and_recovers() {
    let fs = FaultFs::new();
    let db = DB::open(&options(&fs), DIR).unwrap();
    let mut state = State::new();
    for i in 0..100u32 {
        db.put(key(i), value(i, 0)).unwrap();
        state.insert(key(i), value(i, 0));
    }
    let used: u64 = fs
        .list(Path::new(DIR))
        .unwrap()
        .iter()
        .map(|n| fs.file_size(&Path::new(DIR).join(n)).unwrap())
        .sum();
    fs.set_capacity(Some(used + 20_000));
    let mut failed = None;
    for i in 0..5000u32 {
        let k = i % 150;
        match db.put(key(k), value(k, i)) {
            Ok(()) => {
                state.insert(key(k), value(k, i));
            }
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    let e = failed.expect("the disk filled up");
    assert!(e.is_no_space(), "{e}");
    for (k, v) in &state {
        assert_eq!(
            db.get(k).unwrap().as_ref(),
            Some(v),
            "reads go on while the disk is full"
        );
    }
    fs.set_capacity(None);
    // Background work retries a moment after it last failed.
    let resumed = std::time::Instant::now();
    while db.put(b"probe", b"x").is_err() {
        assert!(resumed.elapsed().as_secs() < 5, "writes did not resume");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    state.insert(b"probe".to_vec(), b"x".to_vec());
    for i in 0..300u32 {
        let k = i % 150;
        db.put(key(k), value(k, 10_000 + i))
            .expect("writing resumes once space is back");
        state.insert(key(k), value(k, 10_000 + i));
    }
    db.flush().unwrap();
    assert_eq!(read_all(&db).unwrap(), state);
    drop(db);
    let db = DB::open(&options(&fs), DIR).unwrap();
    assert_eq!(read_all(&db).unwrap(), state);
}

/// After a failed sync the database refuses writes until it is reopened:
/// the page cache may have dropped what the sync was to make durable.
#[test]
fn a_failed_sync_makes_the_database_read_only_until_reopened() {
    let fs = FaultFs::new();
    let db = DB::open(&options(&fs), DIR).unwrap();
    db.put(b"a", b"1").unwrap();
    fs.fail_nth(&[OpKind::Sync], 0, false, io::ErrorKind::Other);
    let sync = WriteOptions {
        sync: true,
        ..WriteOptions::default()
    };
    assert!(db.put_opt(b"b", b"2", &sync).is_err());
    let e = db.put(b"c", b"3").unwrap_err();
    assert!(matches!(e, tphdb::Error::Poisoned(_)), "{e}");
    assert_eq!(
        db.get(b"a").unwrap().as_deref(),
        Some(&b"1"[..]),
        "reads still work"
    );
    drop(db);
    let db = DB::open(&options(&fs), DIR).unwrap();
    db.put(b"c", b"3").unwrap();
    assert_eq!(db.get(b"a").unwrap().as_deref(), Some(&b"1"[..]));
}

/// Recovery is point in time: a WAL torn in its middle stops replay, and
/// the later WALs, whose writes are newer than the lost one, are skipped.
#[test]
fn wals_after_a_torn_one_are_not_replayed() {
    let fs = FaultFs::new();
    let opts = Options {
        write_buffer_bytes: 1 << 20,
        ..options(&fs)
    };
    let db = DB::open(&opts, DIR).unwrap();
    let sync = WriteOptions {
        sync: true,
        ..WriteOptions::default()
    };
    for i in 0..20u32 {
        db.put_opt(key(i), value(i, 1), &sync).unwrap();
    }
    // Keep the first WAL unflushed: every piece creation fails.
    fs.fail_nth(&[OpKind::Create], 1, true, io::ErrorKind::StorageFull);
    assert!(db.flush().unwrap_err().is_no_space());
    db.put_opt(b"later", b"write", &sync).unwrap();
    let image = fs.crash(0);
    drop(db);
    let mut wals: Vec<String> = image
        .list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|n| n.ends_with(".log"))
        .collect();
    wals.sort();
    assert_eq!(wals.len(), 2, "{wals:?}");
    // Damage the tail of the first WAL's data.
    let first = Path::new(DIR).join(&wals[0]);
    let f = image.open_read(&first, tphdb::fs::ReadMode::Pread).unwrap();
    let mut bytes = f.read_at(0, f.len() as usize).unwrap().to_vec();
    let at = bytes.len() - 10;
    bytes[at] ^= 0xff;
    rewrite(&image, &first, &bytes);
    let db = DB::open(&options(&image), DIR).unwrap();
    let stats = db.stats();
    assert_eq!(stats.wal_files_skipped, 1);
    assert!(stats.wal_dropped_bytes > 0);
    assert_eq!(
        db.get(b"later").unwrap(),
        None,
        "a write newer than a lost one"
    );
    for i in 0..19u32 {
        assert_eq!(db.get(key(i)).unwrap(), Some(value(i, 1)));
    }
}

/// Earlier WALs are not synced when the writer moves to a new one: a power
/// loss can cut any of them anywhere, even the first one whole, and the
/// database must still reopen to a prefix of the writes, one that holds
/// every write up to the last synced one (a sync syncs the earlier WALs).
#[test]
fn power_loss_cutting_unsynced_wals_anywhere_leaves_a_prefix() {
    let ops: Vec<Op> = (0..120u32).map(|i| Op::Put(i % 40, i)).collect();
    for synced_through in [0, 30, 70, 100] {
        let fs = FaultFs::new();
        let opts = Options {
            max_immutable_memtables: 10,
            ..options(&fs)
        };
        let db = DB::open(&opts, DIR).unwrap();
        // Keep every WAL unflushed: piece creation fails.
        fs.fail_nth_named(
            ".ph",
            &[OpKind::Create],
            0,
            true,
            io::ErrorKind::StorageFull,
        );
        for (i, op) in ops.iter().enumerate() {
            let Op::Put(k, v) = op else { unreachable!() };
            let sync = WriteOptions {
                sync: i + 1 == synced_through,
                ..WriteOptions::default()
            };
            db.put_opt(key(*k), value(*k, *v), &sync).unwrap();
        }
        let wals = fs
            .list(Path::new(DIR))
            .unwrap()
            .into_iter()
            .filter(|n| n.ends_with(".log"))
            .count();
        assert!(wals >= 3, "{wals} WALs");
        let mut lengths = std::collections::BTreeSet::new();
        for seed in 0..100 {
            let image = fs.crash(seed);
            let what = format!("synced through {synced_through}, seed {seed}");
            lengths.insert(verify(&image, &ops, synced_through, &what));
        }
        // The cuts fell in several places.
        assert!(lengths.len() > 3, "{lengths:?}");
    }
}
