//! Entry points into internal decoders for the fuzz targets in `fuzz/`.
//! Not part of the supported API: signatures may change at any time.

use std::path::Path;

use bytes::Bytes;

use crate::batch::{BatchOp, WriteBatch};
use crate::error::Result;
use crate::fs::{FileSystem, MemFs, ReadMode};
use crate::log::{LogReader, LogWriter};
use crate::memtable::MemTable;
use crate::piece::{Compression, Entry, EntryRef};
use crate::version::{VersionEdit, VersionSet};

/// A write: a put (`Some`) or a delete (`None`).
pub type Op = (Vec<u8>, Option<Vec<u8>>);

/// The newest version of a key: key, sequence number, value (`None`: a
/// tombstone).
pub type KeyVersion = (Vec<u8>, u64, Option<Vec<u8>>);

/// How a log ended: every record, and where and why it stopped early
/// (offset, whether intact records follow the damage).
pub struct LogContents {
    /// The records returned before the end or the damage.
    pub records: Vec<Vec<u8>>,
    /// `(offset, valid_data_follows)` when the tail was dropped.
    pub tail: Option<(u64, bool)>,
}

fn mem_file(bytes: &[u8]) -> (MemFs, &'static Path) {
    let fs = MemFs::new();
    let path = Path::new("/f");
    fs.write_file(path, bytes.to_vec());
    (fs, path)
}

/// Reads every record of a log file (WAL or MANIFEST framing).
pub fn read_log(bytes: &[u8]) -> Result<LogContents> {
    let (fs, path) = mem_file(bytes);
    let mut reader = LogReader::new(fs.open_read(path, ReadMode::Pread)?);
    let mut records = Vec::new();
    while let Some(r) = reader.next_record()? {
        records.push(r);
    }
    let tail = reader.tail_drop().map(|t| (t.offset, t.valid_data_follows));
    Ok(LogContents { records, tail })
}

/// Writes `records` with the log writer and returns the file's bytes.
pub fn write_log(records: &[Vec<u8>]) -> Result<Vec<u8>> {
    let fs = MemFs::new();
    let path = Path::new("/f");
    let mut w = LogWriter::new(fs.create(path)?, 0);
    for r in records {
        w.add_record(r)?;
    }
    Ok(crate::fs::read_all(&fs, path)?.to_vec())
}

/// Replays a WAL file with open's own replay: records, write batches,
/// memtable. Returns the newest version of every key (key, seq, value).
pub fn replay_wal(bytes: &[u8]) -> Result<Vec<KeyVersion>> {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    fs.write_file(&dir.join(crate::filename::wal_name(1)), bytes.to_vec());
    let mem = MemTable::new(1, 1024, false);
    let (mut last_seq, mut info) = (0, crate::db::replay::WalReplay::default());
    let mut at = crate::db::replay::ReplayPosition::default();
    crate::db::replay::replay_wal(&fs, dir, 1, &mem, &mut last_seq, &mut at, &mut info)?;
    Ok(mem
        .newest_versions()
        .map(|v| (v.key.to_vec(), v.seq, v.value.map(<[u8]>::to_vec)))
        .collect())
}

/// Encodes a write batch with sequence number `seq`.
pub fn encode_batch(seq: u64, ops: &[Op]) -> Vec<u8> {
    let mut b = WriteBatch::new();
    for (k, v) in ops {
        match v {
            Some(v) => b.put(k, v),
            None => b.delete(k),
        }
    }
    b.encode_with_seq(seq).to_vec()
}

/// Decodes a write batch record.
pub fn decode_batch(rep: &[u8]) -> Result<(u64, Vec<Op>)> {
    let (seq, b) = WriteBatch::decode(rep)?;
    let ops = b
        .ops()
        .map(|op| match op {
            BatchOp::Put(k, v) => (k.to_vec(), Some(v.to_vec())),
            BatchOp::Delete(k) => (k.to_vec(), None),
        })
        .collect();
    Ok((seq, ops))
}

/// Decodes one MANIFEST record, re-encodes it and decodes it again; returns
/// whether the two decodings agree (`None` when the record does not decode).
pub fn version_edit_roundtrip(rec: &[u8]) -> Option<bool> {
    let e = VersionEdit::decode(rec).ok()?;
    Some(VersionEdit::decode(&e.encode()).ok().as_ref() == Some(&e))
}

/// Replays a MANIFEST as open does (CURRENT names it); returns a
/// description of the recovered structure.
pub fn replay_manifest(bytes: &[u8]) -> Result<String> {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let name = "MANIFEST-000001";
    fs.write_file(&dir.join(name), bytes.to_vec());
    // No recorded length: the target explores the MANIFEST's own rules.
    let current = crate::version::encode_current(name, 0);
    fs.write_file(&dir.join("CURRENT"), current.into_bytes());
    Ok(format!("{:?}", VersionSet::read_state(&fs, dir)?))
}

/// Decodes a block of `count` slots and reads every slot as a piece of
/// format 4 would; then as pieces of format 6 with and without tags, whose
/// results are dropped (errors are fine, panics are not).
pub fn decode_block(bytes: &[u8], count: usize, max_raw: usize) -> Result<Vec<Option<Entry>>> {
    use crate::piece::{EntryLayout, SeqCoding};
    let block = crate::piece::block::Block::decode(Bytes::copy_from_slice(bytes), count, max_raw)?;
    let read = |layout: &EntryLayout| {
        (0..block.slot_count())
            .map(|i| block.entry(i, layout))
            .collect::<Result<Vec<_>>>()
    };
    for stored_key_len in [None, Some(4)] {
        let _ = read(&EntryLayout {
            key_prefix: Bytes::from_static(b"user:"),
            seq: SeqCoding::fixed(1000, 1000 + (1 << 20)),
            stored_key_len,
        });
    }
    read(&EntryLayout::PLAIN)
}

/// Encodes `slots` as one block; returns the bytes and the raw size.
pub fn encode_block(slots: &[Option<EntryRef<'_>>], lz4: bool) -> Result<(Vec<u8>, usize)> {
    let compression = if lz4 {
        Compression::Lz4
    } else {
        Compression::None
    };
    let mut out = Vec::new();
    let plain = &crate::piece::EntryLayout::PLAIN;
    let raw =
        crate::piece::block::encode_block(slots, plain, compression, &mut Vec::new(), &mut out)?;
    Ok((out, raw))
}

/// The `db_open` target: `data` frames files (`kind:u8 number:u32 len:u32
/// bytes`; kind 0 MANIFEST, 1 WAL, 2 piece; CURRENT names the first
/// MANIFEST); they are opened read-only, then read and scanned. Errors are
/// fine; panics are not.
pub fn db_open(data: &[u8]) {
    use crate::{IteratorMode, Options, DB};
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let mut d = data;
    let mut manifest = None;
    while d.len() >= 9 {
        let kind = d[0] % 3;
        let number = u32::from_le_bytes([d[1], d[2], d[3], d[4]]) % 1000;
        let len = (u32::from_le_bytes([d[5], d[6], d[7], d[8]]) as usize).min(d.len() - 9);
        let bytes = d[9..9 + len].to_vec();
        d = &d[9 + len..];
        let name = match kind {
            0 => {
                manifest.get_or_insert(number);
                format!("MANIFEST-{number:06}")
            }
            1 => format!("{number:06}.log"),
            _ => format!("{number:06}.ph"),
        };
        fs.write_file(&dir.join(name), bytes);
    }
    let Some(m) = manifest else { return };
    let name = format!("MANIFEST-{m:06}");
    let current = crate::version::encode_current(&name, 0);
    fs.write_file(&dir.join("CURRENT"), current.into_bytes());
    let opts = Options {
        file_system: Some(std::sync::Arc::new(fs.clone())),
        background_threads: 1,
        ..Options::default()
    };
    if let Ok(db) = DB::open_for_read_only(&opts, dir) {
        for k in [&b"key00001"[..], b"", b"zz"] {
            let _ = db.get(k);
        }
        for item in db.iterator(IteratorMode::Start).take(200) {
            if item.is_err() {
                break;
            }
        }
        for item in db.iterator(IteratorMode::End).take(50) {
            if item.is_err() {
                break;
            }
        }
    }
}
