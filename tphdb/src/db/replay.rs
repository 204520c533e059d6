//! Replaying the WALs at open: what a crash left of the writes no piece
//! holds yet, and where replay must stop so the database reopens to a
//! prefix of its writes.

use std::path::Path;

use crate::batch::WriteBatch;
use crate::error::Result;
use crate::filename::{path, unflushed_wals, wal_name};
use crate::fs::{FileSystem, ReadMode};
use crate::log::LogReader;
use crate::memtable::MemTable;
use crate::version::RecoveredState;

/// What replaying the WAL found.
#[derive(Debug, Default)]
pub(crate) struct WalReplay {
    pub(crate) files: usize,
    /// WALs after a torn one, not replayed.
    pub(crate) skipped_files: usize,
    pub(crate) batches: u64,
    pub(crate) dropped_bytes: u64,
}

/// How replaying one WAL ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WalEnd {
    /// Every record replayed.
    Whole,
    /// The records before some damage were replayed, or none: the WAL was
    /// cut short by a crash, or is a WAL the writer set up but could not
    /// use (and could not remove). The next WAL's header tells whether
    /// anything logged was lost.
    Cut,
    /// Its header says writes were logged before it that the WALs replayed
    /// so far do not reach: an earlier WAL lost them, so nothing of this
    /// one was replayed.
    AfterLostWrites,
}

/// Where replay stands between two WALs.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ReplayPosition {
    /// The last sequence number the WALs replayed so far logged (`None`:
    /// unknown, as before the first WAL).
    logged_through: Option<u64>,
    /// The last WAL replayed was cut short.
    after_cut: bool,
}

/// Replays one WAL into `mem`, from `at`.
///
/// A WAL starts with a header: an empty batch whose sequence number is the
/// last one logged before the WAL began. Earlier WALs are not synced when
/// the writer moves on (only before a synced write), so a crash can cut an
/// earlier WAL cleanly between records; the header is how replay tells.
pub(crate) fn replay_wal(
    fs: &dyn FileSystem,
    dir: &Path,
    number: u64,
    mem: &MemTable,
    last_seq: &mut u64,
    at: &mut ReplayPosition,
    info: &mut WalReplay,
) -> Result<WalEnd> {
    let name = wal_name(number);
    let mut reader = LogReader::new(fs.open_read(&path(dir, &name), ReadMode::Pread)?);
    let mut first = true;
    while let Some(rec) = reader.next_record()? {
        // A record that passed its checksum but does not decode is damage,
        // not a torn write: refuse to guess.
        // `decode` checks that the batch's sequence numbers are in range.
        let (seq, batch) = WriteBatch::decode(&rec).map_err(|e| e.at(&name))?;
        if std::mem::take(&mut first) {
            let lost = if batch.is_empty() {
                at.logged_through.is_some_and(|reached| seq > reached)
            } else {
                // No header (a WAL from before headers): nothing tells
                // what the cut before it lost, so assume the worst.
                at.after_cut
            };
            if lost {
                info.files += 1;
                return Ok(WalEnd::AfterLostWrites);
            }
            if batch.is_empty() {
                at.logged_through.get_or_insert(seq);
                continue;
            }
        }
        mem.insert_batch(seq, &batch);
        if !batch.is_empty() {
            let end = seq + batch.len() as u64 - 1;
            *last_seq = (*last_seq).max(end);
            at.logged_through = Some(at.logged_through.map_or(end, |r| r.max(end)));
        }
        info.batches += 1;
    }
    info.files += 1;
    let end = match reader.tail_drop() {
        Some(t) => {
            info.dropped_bytes += t.dropped_bytes;
            WalEnd::Cut
        }
        // Every WAL starts with its header: an empty one lost it.
        None if first => WalEnd::Cut,
        None => WalEnd::Whole,
    };
    // The next WAL's header tells whether a cut lost anything logged (then
    // replay stops there) or only what was never acknowledged: a failed
    // write, or a WAL never used.
    at.after_cut = end == WalEnd::Cut;
    Ok(end)
}

/// Replays the unflushed WALs into `mem`, stopping at the first torn one.
pub(super) fn replay_wals(
    fs: &dyn FileSystem,
    dir: &Path,
    names: &[String],
    state: &RecoveredState,
    mem: &MemTable,
    last_seq: &mut u64,
) -> Result<WalReplay> {
    let wals = unflushed_wals(names, state.log_number);
    let mut replay = WalReplay::default();
    let mut at = ReplayPosition::default();
    for (i, &n) in wals.iter().enumerate() {
        // Point-in-time recovery: writes in later WALs came after the lost
        // ones, so they are dropped too. A crash loses only writes no sync
        // covered: a synced write syncs every earlier WAL first.
        let end = replay_wal(fs, dir, n, mem, last_seq, &mut at, &mut replay)?;
        if end == WalEnd::AfterLostWrites {
            replay.skipped_files = wals.len() - i;
            break;
        }
    }
    Ok(replay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;
    use crate::log::LogWriter;

    /// One WAL as written: an optional header, then batches of one put each
    /// (`(seq, key)`), then `torn` bytes of a record cut short.
    struct Wal {
        header: Option<u64>,
        puts: Vec<(u64, &'static str)>,
        torn: bool,
    }

    fn write_wals(fs: &MemFs, wals: &[Wal]) -> Vec<String> {
        let dir = Path::new("/db");
        let mut names = Vec::new();
        for (i, wal) in wals.iter().enumerate() {
            let name = wal_name(10 + i as u64);
            let file = fs.create(&path(dir, &name)).unwrap();
            let mut log = LogWriter::new(file, 0);
            if let Some(seq) = wal.header {
                write_header(&mut log, seq);
            }
            for &(seq, key) in &wal.puts {
                let mut b = WriteBatch::new();
                b.put(key, "v");
                log.add_record(b.encode_with_seq(seq)).unwrap();
            }
            log.sync().unwrap();
            drop(log);
            let p = path(dir, &name);
            let f = fs.open_read(&p, ReadMode::Pread).unwrap();
            let mut bytes = f.read_at(0, f.len() as usize).unwrap().to_vec();
            if wal.torn {
                // A record header promising more bytes than follow.
                bytes.extend_from_slice(&[0xab, 0xcd, 0xef, 0x01, 0x40, 0x00, 0x01, b'x']);
            }
            fs.write_file(&p, bytes);
            names.push(name);
        }
        names
    }

    fn write_header(log: &mut LogWriter, seq: u64) {
        log.add_record(WriteBatch::new().encode_with_seq(seq))
            .unwrap();
    }

    /// Replays `wals` and returns the keys recovered and the files skipped.
    fn replay(wals: &[Wal]) -> (Vec<&'static str>, usize) {
        let fs = MemFs::new();
        let names = write_wals(&fs, wals);
        let state = RecoveredState {
            log_number: 10,
            ..Default::default()
        };
        let mem = MemTable::new(0, 1024, true);
        let mut last_seq = 0;
        let info = replay_wals(&fs, Path::new("/db"), &names, &state, &mem, &mut last_seq).unwrap();
        let keys = ["a", "b", "c", "d", "e"]
            .into_iter()
            .filter(|k| {
                let k = k.as_bytes();
                mem.get(k, crate::hash::key_hash(k), u64::MAX).is_some()
            })
            .collect();
        (keys, info.skipped_files)
    }

    fn wal(header: Option<u64>, puts: &[(u64, &'static str)], torn: bool) -> Wal {
        Wal {
            header,
            puts: puts.to_vec(),
            torn,
        }
    }

    #[test]
    fn a_wal_cut_where_the_next_one_began_loses_nothing_logged() {
        // The next header says logging reached seq 2 before it: the cut
        // lost only a write that failed and was never acknowledged.
        let wals = [
            wal(Some(0), &[(1, "a"), (2, "b")], true),
            wal(Some(2), &[(3, "c")], false),
        ];
        assert_eq!(replay(&wals), (vec!["a", "b", "c"], 0));
    }

    #[test]
    fn a_wal_after_lost_writes_is_not_replayed() {
        // The crash cut seq 2 from the first WAL; the second began after it.
        let wals = [
            wal(Some(0), &[(1, "a")], true),
            wal(Some(2), &[(3, "c")], false),
            wal(Some(3), &[(4, "d")], false),
        ];
        assert_eq!(replay(&wals), (vec!["a"], 2));
    }

    #[test]
    fn an_abandoned_wal_torn_in_its_header_does_not_stop_replay() {
        // The writer could neither finish nor remove WAL 11; WAL 12's
        // header says nothing logged was lost.
        let wals = [
            wal(Some(0), &[(1, "a"), (2, "b")], false),
            wal(None, &[], true),
            wal(Some(2), &[(3, "c")], false),
        ];
        assert_eq!(replay(&wals), (vec!["a", "b", "c"], 0));
    }

    #[test]
    fn an_empty_wal_does_not_stop_replay() {
        let wals = [
            wal(Some(0), &[(1, "a")], false),
            wal(None, &[], false),
            wal(Some(1), &[(2, "b")], false),
        ];
        assert_eq!(replay(&wals), (vec!["a", "b"], 0));
    }

    #[test]
    fn headerless_wals_stop_at_the_first_cut() {
        // WALs from before headers: nothing tells what a cut lost.
        let wals = [
            wal(None, &[(1, "a")], false),
            wal(None, &[(2, "b")], true),
            wal(None, &[(3, "c")], false),
        ];
        assert_eq!(replay(&wals), (vec!["a", "b"], 1));
    }
}
