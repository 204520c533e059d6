//! Text reports of a WAL and a MANIFEST, record by record, for
//! `tphdb inspect wal|manifest` (RocksDB's `ldb dump_wal` and
//! `manifest_dump`). Every record is checked as replay checks it; where
//! reading stops early, the report says where and why.

use std::io::Write;
use std::path::Path;

use crate::batch::{BatchOp, WriteBatch};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, PosixFs, ReadMode};
use crate::log::LogReader;
use crate::version::VersionEdit;

fn out_err(e: std::io::Error) -> Error {
    Error::io("writing the report", e)
}

/// A key as text: printable ASCII as is, other bytes as `\xNN`.
fn show(bytes: &[u8], limit: usize) -> String {
    let mut s: String = bytes[..bytes.len().min(limit)].escape_ascii().to_string();
    if bytes.len() > limit {
        s.push_str(&format!("...({} bytes)", bytes.len()));
    }
    s
}

/// Reads the log at `path` and hands each record to `each`; then reports
/// how the log ended.
fn records(
    path: &Path,
    out: &mut dyn Write,
    mut each: impl FnMut(usize, &[u8], &mut dyn Write) -> Result<()>,
) -> Result<()> {
    let mut reader = LogReader::new(PosixFs.open_read(path, ReadMode::Pread)?);
    let mut n = 0;
    while let Some(rec) = reader.next_record()? {
        each(n, &rec, out)?;
        n += 1;
    }
    match reader.tail_drop() {
        None => writeln!(out, "{n} records, clean end").map_err(out_err),
        Some(t) => writeln!(
            out,
            "{n} records, then a damaged or torn tail at offset {}: {} (intact records after it: {})",
            t.offset,
            t.reason,
            if t.valid_data_follows { "yes, corruption" } else { "no" }
        )
        .map_err(out_err),
    }
}

/// Every write batch of the WAL at `path`: its sequence numbers and
/// operations (keys shown up to `key_limit` bytes, value sizes).
pub fn wal(path: &Path, key_limit: usize, out: &mut dyn Write) -> Result<()> {
    records(path, out, |i, rec, out| {
        let (seq, batch) = WriteBatch::decode(rec)?;
        if batch.is_empty() {
            return writeln!(out, "record {i}: header, logged through seq {seq}").map_err(out_err);
        }
        let last = seq + batch.len() as u64 - 1;
        writeln!(out, "record {i}: seq {seq}..={last}, {} ops", batch.len()).map_err(out_err)?;
        for op in batch.ops() {
            match op {
                BatchOp::Put(k, v) => {
                    writeln!(out, "  put {} ({} bytes)", show(k, key_limit), v.len())
                }
                BatchOp::Delete(k) => writeln!(out, "  delete {}", show(k, key_limit)),
            }
            .map_err(out_err)?;
        }
        Ok(())
    })
}

/// Every version edit of the MANIFEST at `path`.
pub fn manifest(path: &Path, out: &mut dyn Write) -> Result<()> {
    records(path, out, |i, rec, out| {
        let e = VersionEdit::decode(rec)?;
        let mut parts = Vec::new();
        if let Some(v) = e.format {
            parts.push(format!("format {v}"));
        }
        if let Some(l) = e.layout {
            parts.push(format!(
                "layout fanout {} one_level {}",
                l.fanout, l.one_level
            ));
        }
        if let Some(d) = e.depth {
            parts.push(format!("depth {d}"));
        }
        for (name, v) in [
            ("log_number", e.log_number),
            ("next_file", e.next_file),
            ("last_seq", e.last_seq),
        ] {
            if let Some(v) = v {
                parts.push(format!("{name} {v}"));
            }
        }
        for h in &e.add_l0 {
            parts.push(format!("add L0 head {h}"));
        }
        for h in &e.remove_l0 {
            parts.push(format!("remove L0 head {h}"));
        }
        for (l, p, h) in &e.set {
            parts.push(format!("set L{l}/{p} head {h}"));
        }
        for (l, p) in &e.remove {
            parts.push(format!("remove L{l}/{p}"));
        }
        if parts.is_empty() {
            parts.push("empty (releases deferred deletions)".into());
        }
        writeln!(out, "edit {i}: {}", parts.join(", ")).map_err(out_err)
    })
}
