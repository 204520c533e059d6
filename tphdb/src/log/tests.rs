use std::path::Path;

use super::*;
use crate::fs::{FileSystem, MemFs, ReadMode};

fn write_log(fs: &MemFs, records: &[Vec<u8>]) -> Vec<u8> {
    let path = Path::new("/log");
    let mut w = LogWriter::new(fs.create(path).unwrap(), 0);
    for r in records {
        w.add_record(r).unwrap();
    }
    w.sync().unwrap();
    fs.read_file(path).unwrap()
}

fn read_log(fs: &MemFs, bytes: Vec<u8>) -> (Vec<Vec<u8>>, Option<TailDrop>) {
    let path = Path::new("/read");
    fs.write_file(path, bytes);
    let mut r = LogReader::new(fs.open_read(path, ReadMode::Pread).unwrap());
    let mut out = Vec::new();
    while let Some(rec) = r.next_record().unwrap() {
        out.push(rec);
    }
    (out, r.tail_drop().cloned())
}

fn sample_records() -> Vec<Vec<u8>> {
    let mut rng = fastrand::Rng::with_seed(1);
    let mut v = vec![
        vec![],
        b"a".to_vec(),
        vec![7; BLOCK_SIZE - HEADER_SIZE],
        vec![1; 3 * BLOCK_SIZE + 5],
    ];
    for _ in 0..50 {
        v.push((0..rng.usize(0..2000)).map(|_| rng.u8(..)).collect());
    }
    // Lengths that leave 0..HEADER_SIZE bytes at a block's end.
    for tail in 0..=HEADER_SIZE {
        v.push(vec![9; BLOCK_SIZE - 2 * HEADER_SIZE - tail]);
    }
    v
}

#[test]
fn records_round_trip_across_block_boundaries() {
    let fs = MemFs::new();
    let records = sample_records();
    let (got, tail) = read_log(&fs, write_log(&fs, &records));
    assert_eq!(tail, None);
    assert_eq!(got, records);
}

#[test]
fn every_truncation_yields_exactly_the_complete_records() {
    let fs = MemFs::new();
    let records: Vec<Vec<u8>> = (0..40u32)
        .map(|i| vec![i as u8; (i as usize * 397) % 3000])
        .collect();
    let path = Path::new("/log");
    let mut w = LogWriter::new(fs.create(path).unwrap(), 0);
    let mut ends = Vec::new();
    for r in &records {
        w.add_record(r).unwrap();
        ends.push(w.len());
    }
    let bytes = fs.read_file(path).unwrap();
    for len in 0..=bytes.len() {
        let (got, tail) = read_log(&fs, bytes[..len].to_vec());
        let complete = ends.iter().filter(|&&e| e <= len as u64).count();
        assert_eq!(got.len(), complete, "length {len}");
        assert_eq!(&records[..complete], &got[..]);
        let last_end = if complete == 0 { 0 } else { ends[complete - 1] };
        // Only zero block padding (under a header's size) may follow silently.
        let rest = &bytes[last_end as usize..len];
        let padding = rest.len() < HEADER_SIZE && rest.iter().all(|&b| b == 0);
        assert_eq!(tail.is_none(), padding, "length {len}");
        // The drop starts right after the last complete record.
        if let Some(t) = tail {
            assert_eq!(t.offset, last_end, "length {len}");
        }
    }
}

#[test]
fn every_byte_corruption_yields_a_prefix_and_reports_the_drop() {
    let fs = MemFs::new();
    let records: Vec<Vec<u8>> = (0..30u32)
        .map(|i| vec![i as u8; 100 + i as usize * 50])
        .collect();
    let bytes = write_log(&fs, &records);
    for i in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[i] ^= 0x10;
        let (got, tail) = read_log(&fs, bad);
        assert_eq!(&records[..got.len()], &got[..], "byte {i}");
        assert!(
            got.len() < records.len(),
            "corruption at byte {i} went unnoticed"
        );
        let tail = tail.expect("a drop is reported");
        assert!(tail.offset <= i as u64);
    }
}

#[test]
fn appending_after_reopen_continues_the_block_layout() {
    let fs = MemFs::new();
    let path = Path::new("/log2");
    let mut w = LogWriter::new(fs.create(path).unwrap(), 0);
    w.add_record(&vec![1; 40_000]).unwrap();
    w.sync().unwrap();
    let first = fs.read_file(path).unwrap();
    // Reopen: a new writer continues in the same block position.
    let f = fs.create(Path::new("/log3")).unwrap();
    let mut w2 = LogWriter::new(f, 0);
    w2.add_record(&vec![1; 40_000]).unwrap();
    w2.add_record(b"second").unwrap();
    w2.sync().unwrap();
    let mut both = first.clone();
    let mut w3 = LogWriter::new(fs.create(Path::new("/tail")).unwrap(), first.len() as u64);
    w3.add_record(b"second").unwrap();
    w3.sync().unwrap();
    both.extend(fs.read_file(Path::new("/tail")).unwrap());
    assert_eq!(both, fs.read_file(Path::new("/log3")).unwrap());
}

/// Regression: a torn last record whose continuation fragment survived at a
/// later block start was taken for "valid data follows the damage", and a
/// MANIFEST ending that way failed to open as corrupt instead of dropping
/// the torn record. Only a fragment that starts a record (FULL or FIRST)
/// shows that records were written after the damaged one.
#[test]
fn a_torn_last_record_with_a_surviving_continuation_is_a_torn_tail() {
    let fs = MemFs::new();
    let records = vec![vec![1u8; 100], vec![2u8; BLOCK_SIZE]];
    let mut bytes = write_log(&fs, &records);
    // The second record starts in block 0 (FIRST) and ends in block 1
    // (LAST). Garble its FIRST fragment only: block 1's LAST fragment, at
    // a block start, still checks out.
    let first_fragment = 100 + HEADER_SIZE;
    bytes[first_fragment + HEADER_SIZE + 10] ^= 0xff;
    let (got, tail) = read_log(&fs, bytes.clone());
    assert_eq!(got, records[..1]);
    let tail = tail.expect("the torn record is reported");
    assert!(
        !tail.valid_data_follows,
        "a LAST fragment is no later record: {tail:?}"
    );

    // A record written after the torn one does count.
    let records = vec![vec![1u8; 100], vec![2u8; BLOCK_SIZE], b"after".to_vec()];
    let mut bytes = write_log(&fs, &records);
    bytes[first_fragment + HEADER_SIZE + 10] ^= 0xff;
    let (_, tail) = read_log(&fs, bytes);
    assert!(tail.expect("reported").valid_data_follows);
}

/// Regression: the writer advanced its block offset before the append
/// succeeded, so after a failed append every later record was framed for
/// a position it was not written at, and a reader dropped them as a torn
/// tail. Also: bytes of the failed record must not stay in the log.
#[test]
fn records_after_a_failed_append_are_framed_where_they_land() {
    use crate::fs::{FaultFs, OpKind};
    let fs = FaultFs::new();
    fs.set_torn_appends(true);
    let path = Path::new("/log");
    let mut w = LogWriter::new(fs.create(path).unwrap(), 0);
    let mut want = Vec::new();
    for i in 0..40u32 {
        let record = vec![i as u8; 3000 + i as usize * 701];
        if i == 7 {
            // This append writes half its bytes, then fails.
            fs.fail_nth(&[OpKind::Write], 0, false, std::io::ErrorKind::StorageFull);
            assert!(w.add_record(&record).unwrap_err().is_no_space());
            assert!(w.ends_cleanly());
            continue;
        }
        w.add_record(&record).unwrap();
        want.push(record);
    }
    w.sync().unwrap();
    let bytes = crate::fs::read_all(&fs, path).unwrap().to_vec();
    let (got, tail) = read_log(&MemFs::new(), bytes);
    assert_eq!(tail, None);
    assert_eq!(got.len(), want.len());
    assert!(
        got == want,
        "the records that were acknowledged, and only them"
    );
}

/// When the remains of a failed record cannot be cut off, the log takes no
/// further record: one after them would follow damage.
#[test]
fn a_log_whose_failed_record_cannot_be_cut_takes_no_more_records() {
    use crate::fs::{FaultFs, OpKind};
    let fs = FaultFs::new();
    fs.set_torn_appends(true);
    let mut w = LogWriter::new(fs.create(Path::new("/log")).unwrap(), 0);
    w.add_record(b"first").unwrap();
    fs.fail_nth(
        &[OpKind::Write, OpKind::Truncate],
        0,
        true,
        std::io::ErrorKind::Other,
    );
    assert!(w.add_record(&[5; 1000]).is_err());
    fs.clear_faults();
    assert!(!w.ends_cleanly());
    assert!(w.add_record(b"later").is_err());
    assert!(w.sync().is_err());
}
