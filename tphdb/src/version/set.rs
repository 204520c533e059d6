//! The MANIFEST and CURRENT: the durable record of versions.
//!
//! The MANIFEST is a record log of version edits; CURRENT names the live
//! MANIFEST and is replaced atomically (write a temporary file, sync,
//! rename, sync the directory). Every open starts a new MANIFEST holding a
//! snapshot of the recovered version, so a torn tail of the old one is never
//! appended to.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Layout, Version, VersionEdit};
use crate::error::{Error, Result};
use crate::filename::{manifest_name, path, CURRENT};
use crate::fs::{FileSystem, ReadMode};
use crate::log::{LogReader, LogWriter, TailDrop};
use crate::tph::{PieceFile, PieceReads, Tph};

/// The structure replayed from a MANIFEST, by file numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RecoveredState {
    pub(crate) layout: Option<Layout>,
    pub(crate) depth: u32,
    /// Newest first.
    pub(crate) l0: Vec<u64>,
    pub(crate) levels: BTreeMap<(u32, u64), u64>,
    pub(crate) log_number: u64,
    pub(crate) next_file: u64,
    pub(crate) last_seq: u64,
    /// Set when the MANIFEST ended in a torn record.
    pub(crate) manifest_tail: Option<TailDrop>,
    /// CURRENT recorded the MANIFEST's length (version 2) and the MANIFEST
    /// holds it intact: no edit that let files be deleted is missing.
    pub(crate) manifest_len_recorded: bool,
}

impl RecoveredState {
    fn apply(&mut self, e: &VersionEdit) {
        if e.layout.is_some() {
            self.layout = e.layout;
        }
        self.log_number = e.log_number.unwrap_or(self.log_number);
        self.next_file = e.next_file.unwrap_or(self.next_file);
        self.last_seq = e.last_seq.unwrap_or(self.last_seq);
        self.depth = e.depth.unwrap_or(self.depth);
        self.l0.retain(|h| !e.remove_l0.contains(h));
        for &h in &e.add_l0 {
            self.l0.insert(0, h);
        }
        for k in &e.remove {
            self.levels.remove(k);
        }
        for &(l, p, h) in &e.set {
            self.levels.insert((l, p), h);
        }
    }
}

/// What CURRENT says: the live MANIFEST, and how long it was (and synced)
/// when CURRENT was written. Version 1 had no length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Current {
    pub(crate) manifest: String,
    pub(crate) manifest_len: Option<u64>,
}

/// The CURRENT file (version 2): the MANIFEST name, its length, and a
/// CRC32C of the lines above it.
pub(crate) fn encode_current(manifest: &str, manifest_len: u64) -> String {
    let body = format!("{manifest}\nlength={manifest_len}\n");
    format!("{body}crc32c={:08x}\n", crc32c::crc32c(body.as_bytes()))
}

/// Bytes of a CURRENT naming `manifest` of `manifest_len` bytes.
fn current_len(manifest: &str, manifest_len: u64) -> u64 {
    encode_current(manifest, manifest_len).len() as u64
}

/// Version 1 of CURRENT: the name and a CRC32C of it.
#[cfg(test)]
pub(crate) fn encode_current_v1(manifest: &str) -> String {
    format!(
        "{manifest}\ncrc32c={:08x}\n",
        crc32c::crc32c(manifest.as_bytes())
    )
}

pub(crate) fn decode_current(b: &[u8]) -> Result<Current> {
    let text =
        std::str::from_utf8(b).map_err(|_| Error::corruption("CURRENT", "text", "binary data"))?;
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    let bad = |expected: &str| Error::corruption("CURRENT", expected, format!("{text:?}"));
    let (current, crc_line, body) = match lines[..] {
        [name, crc] => (
            Current {
                manifest: name.to_string(),
                manifest_len: None,
            },
            crc,
            name.to_string(),
        ),
        [name, length, crc] => {
            let len = length
                .strip_prefix("length=")
                .and_then(|l| l.parse::<u64>().ok())
                .ok_or_else(|| bad("a length line"))?;
            (
                Current {
                    manifest: name.to_string(),
                    manifest_len: Some(len),
                },
                crc,
                format!("{name}\n{length}\n"),
            )
        }
        _ => return Err(bad("two lines (version 1) or three (version 2)")),
    };
    if !text.ends_with('\n') || !current.manifest.starts_with("MANIFEST-") {
        return Err(bad("a MANIFEST name, one field a line"));
    }
    let want = format!("crc32c={:08x}", crc32c::crc32c(body.as_bytes()));
    if crc_line != want {
        return Err(Error::corruption("CURRENT", want, crc_line));
    }
    Ok(current)
}

/// Owns the MANIFEST and the current version.
pub(crate) struct VersionSet {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    manifest: LogWriter,
    manifest_number: u64,
    manifest_max_bytes: u64,
    pub(crate) current: Arc<Version>,
    pub(crate) next_file: u64,
    pub(crate) log_number: u64,
    pub(crate) last_seq: u64,
    /// Set when CURRENT may point at either MANIFEST: no edit may be
    /// written any more.
    broken: Option<String>,
    /// The MANIFEST length CURRENT records.
    recorded_len: u64,
    /// Bytes written to MANIFESTs and CURRENT since open.
    bytes_written: u64,
}

impl VersionSet {
    /// Reads CURRENT and replays its MANIFEST.
    pub(crate) fn read_state(fs: &dyn FileSystem, dir: &Path) -> Result<RecoveredState> {
        let current = crate::fs::read_all(fs, &path(dir, CURRENT))?;
        let current = decode_current(&current).map_err(|e| e.at(CURRENT))?;
        let name = current.manifest;
        let file = fs.open_read(&path(dir, &name), ReadMode::Pread)?;
        let file_len = file.len();
        let mut reader = LogReader::new(file);
        let mut state = RecoveredState {
            depth: 1,
            ..RecoveredState::default()
        };
        while let Some(rec) = reader.next_record()? {
            let edit = VersionEdit::decode(&rec).map_err(|e| e.at(&name))?;
            state.apply(&edit);
        }
        state.manifest_tail = reader.tail_drop().cloned();
        // Every record up to the length CURRENT records was synced before
        // CURRENT was: if any of it is gone, edits whose files may since
        // have been deleted are lost, and opening would silently lose data.
        if let Some(recorded) = current.manifest_len {
            let intact = state.manifest_tail.as_ref().map_or(file_len, |t| t.offset);
            if intact < recorded {
                return Err(Error::corruption(
                    "MANIFEST length",
                    format!("at least {recorded} intact bytes, as CURRENT records"),
                    format!("{intact} of {file_len} bytes intact"),
                )
                .at(&name));
            }
        }
        state.manifest_len_recorded = current.manifest_len.is_some();
        // Every edit is synced before the next is written, so only the last
        // record can be torn by a crash: damage followed by intact records
        // is corruption, not a crash.
        if let Some(t) = &state.manifest_tail {
            if t.valid_data_follows {
                return Err(Error::corruption(
                    format!("record at byte {}", t.offset),
                    "intact records, or a torn last record",
                    format!("{} followed by intact records", t.reason),
                )
                .at(&name));
            }
        }
        if state.last_seq > crate::batch::MAX_SEQUENCE {
            return Err(Error::corruption(
                "last sequence number",
                format!("at most {}", crate::batch::MAX_SEQUENCE),
                state.last_seq,
            )
            .at(&name));
        }
        let Some(layout) = state.layout else {
            return Err(Error::corruption(&name, "a layout record", "none").at(dir.display()));
        };
        // Hostile values must not size allocations or overflow the
        // partition arithmetic.
        let depth = state.depth;
        if layout.fanout < 2
            || !(1..=super::MAX_DEPTH).contains(&depth)
            || !super::partitions_fit(layout.fanout, depth)
        {
            return Err(Error::corruption(
                "layout",
                format!(
                    "fanout >= 2, depth 1..={}, fanout^depth <= 2^32",
                    super::MAX_DEPTH
                ),
                format!("fanout {}, depth {depth}", layout.fanout),
            )
            .at(&name));
        }
        for &(level, partition) in state.levels.keys() {
            if level == 0 || level > depth || partition >= layout.fanout.pow(level) {
                return Err(Error::corruption(
                    "TPH position",
                    format!("a level in 1..={depth} and a partition below fanout^level"),
                    format!("level {level} partition {partition}"),
                )
                .at(&name));
            }
        }
        Ok(state)
    }

    /// Opens the TPHs of a recovered state.
    pub(crate) fn open_version(
        fs: &Arc<dyn FileSystem>,
        dir: &Path,
        state: &RecoveredState,
        reads: &PieceReads,
    ) -> Result<Version> {
        let layout = state.layout.expect("read_state checked the layout");
        let mut open: HashMap<u64, Arc<PieceFile>> = HashMap::new();
        let mut v = Version::empty(layout);
        v.depth = state.depth.max(1);
        while v.levels.len() < v.depth as usize {
            v.levels.push(BTreeMap::new());
        }
        for &head in &state.l0 {
            v.l0.push(Arc::new(Tph::open(fs, dir, head, reads, &mut open)?));
        }
        for (&(level, partition), &head) in &state.levels {
            let tph = Tph::open(fs, dir, head, reads, &mut open)?;
            if level == 0 || level > v.depth || (tph.level(), tph.partition()) != (level, partition)
            {
                return Err(Error::corruption(
                    format!("TPH {head}"),
                    format!(
                        "level {level} partition {partition} within depth {}",
                        v.depth
                    ),
                    format!("level {} partition {}", tph.level(), tph.partition()),
                ));
            }
            v.levels[level as usize - 1].insert(partition, Arc::new(tph));
        }
        Ok(v)
    }

    /// Starts a MANIFEST holding `version` and points CURRENT at it.
    pub(crate) fn start(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        version: Version,
        mut next_file: u64,
        log_number: u64,
        last_seq: u64,
        manifest_max_bytes: u64,
    ) -> Result<VersionSet> {
        let manifest_number = next_file;
        next_file += 1;
        let manifest = write_manifest(
            fs.as_ref(),
            dir,
            manifest_number,
            &version,
            next_file,
            log_number,
            last_seq,
        )?;
        Ok(VersionSet {
            fs,
            dir: dir.to_path_buf(),
            recorded_len: manifest.len(),
            bytes_written: manifest.len()
                + current_len(&manifest_name(manifest_number), manifest.len()),
            manifest,
            manifest_number,
            manifest_max_bytes,
            current: Arc::new(version),
            next_file,
            log_number,
            last_seq,
            broken: None,
        })
    }

    pub(crate) fn manifest_number(&self) -> u64 {
        self.manifest_number
    }

    pub(crate) fn new_file_number(&mut self) -> u64 {
        let n = self.next_file;
        self.next_file += 1;
        n
    }

    /// Makes `edit` durable in the MANIFEST, then installs the version it
    /// describes. On error nothing is installed. If [`VersionSet::accepts_edits`]
    /// still holds after an out-of-space error, the MANIFEST is as it was
    /// (the partial record was cut off): the edit is certainly not on disk,
    /// its new files may be deleted, and a later edit may follow. Otherwise
    /// whether the edit is on disk is unknown: the caller must stop writing
    /// and keep the files the edit names (if it is not on disk, they are
    /// removed at the next open).
    pub(crate) fn log_and_apply(
        &mut self,
        mut edit: VersionEdit,
        new_tphs: &HashMap<u64, Arc<Tph>>,
    ) -> Result<()> {
        if let Some(e) = &self.broken {
            return Err(Error::Poisoned(e.clone()));
        }
        let version = self.current.apply(&edit, new_tphs)?;
        let log_number = self.log_number.max(edit.log_number.unwrap_or(0));
        edit.log_number = Some(log_number);
        edit.next_file = Some(self.next_file);
        edit.last_seq = Some(self.last_seq);
        let before = self.manifest.len();
        let appended = self.manifest.add_record(&edit.encode());
        self.bytes_written += self.manifest.len() - before;
        if let Err(e) = appended {
            if !(e.is_no_space() && self.manifest.ends_cleanly()) {
                self.broken = Some(format!("a MANIFEST append failed: {e}"));
            }
            return Err(e);
        }
        if let Err(e) = self.manifest.sync() {
            // The page cache may have dropped the record, or may write it
            // later: its fate is unknown whatever the cause.
            self.broken = Some(format!("a MANIFEST sync failed: {e}"));
            return Err(e);
        }
        self.log_number = log_number;
        self.current = Arc::new(version);
        if self.manifest.len() > self.manifest_max_bytes {
            self.roll_over();
        }
        Ok(())
    }

    /// Bytes written to MANIFESTs and CURRENT since open.
    pub(crate) fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// False once an edit failed in a way that leaves the MANIFEST's end
    /// unknown: no edit may follow.
    pub(crate) fn accepts_edits(&self) -> bool {
        self.broken.is_none()
    }

    /// Records the MANIFEST's length in CURRENT, durably. Files that edits
    /// made obsolete may be deleted only after this: an open then refuses
    /// a MANIFEST that lost any edit up to here, and an edit lost past here
    /// let nothing be deleted, so the state before it is whole. A failure
    /// leaves CURRENT naming the same MANIFEST with the old length or the
    /// new one, both true; the caller just deletes nothing.
    pub(crate) fn record_manifest_length(&mut self) -> Result<()> {
        if let Some(e) = &self.broken {
            return Err(Error::Poisoned(e.clone()));
        }
        let len = self.manifest.len();
        if len == self.recorded_len {
            return Ok(());
        }
        let fs = self.fs.as_ref();
        let name = manifest_name(self.manifest_number);
        self.bytes_written += current_len(&name, len);
        write_current_tmp(fs, &self.dir, &name, len)?;
        fs.rename(&path(&self.dir, "CURRENT.tmp"), &path(&self.dir, CURRENT))?;
        fs.sync_dir(&self.dir)?;
        self.recorded_len = len;
        Ok(())
    }

    /// Starts a new MANIFEST with a snapshot of the current version. The
    /// edit just logged is durable in both, so whichever one CURRENT names
    /// after a crash is right. Failures before CURRENT is replaced only
    /// postpone the rollover; after it, no further edit may be written.
    fn roll_over(&mut self) {
        let number = self.new_file_number();
        let name = manifest_name(number);
        let new_path = path(&self.dir, &name);
        let fs = self.fs.clone();
        let switched = start_manifest(
            fs.as_ref(),
            &new_path,
            &self.current,
            self.next_file,
            self.log_number,
            self.last_seq,
        )
        .and_then(|w| write_current_tmp(fs.as_ref(), &self.dir, &name, w.len()).map(|()| w))
        .and_then(|w| {
            fs.rename(&path(&self.dir, "CURRENT.tmp"), &path(&self.dir, CURRENT))
                .map(|()| w)
        });
        let Ok(writer) = switched else {
            let _ = fs.remove(&new_path);
            return;
        };
        self.recorded_len = writer.len();
        self.bytes_written += writer.len() + current_len(&name, writer.len());
        self.manifest = writer;
        let old = std::mem::replace(&mut self.manifest_number, number);
        if let Err(e) = fs.sync_dir(&self.dir) {
            self.broken = Some(format!(
                "syncing the directory after switching MANIFEST failed: {e}"
            ));
            return;
        }
        let _ = fs.remove(&path(&self.dir, &manifest_name(old)));
    }
}

/// Writes and syncs a MANIFEST holding a snapshot of `version`.
fn start_manifest(
    fs: &dyn FileSystem,
    file: &Path,
    version: &Version,
    next_file: u64,
    log_number: u64,
    last_seq: u64,
) -> Result<LogWriter> {
    let mut w = LogWriter::new(fs.create(file)?, 0);
    let mut edit = version.snapshot_edit();
    edit.format = Some(super::edit::FORMAT_VERSION);
    edit.next_file = Some(next_file);
    edit.log_number = Some(log_number);
    edit.last_seq = Some(last_seq);
    w.add_record(&edit.encode())?;
    w.sync()?;
    Ok(w)
}

/// Writes and syncs `CURRENT.tmp` naming `manifest` of `manifest_len`
/// synced bytes.
fn write_current_tmp(
    fs: &dyn FileSystem,
    dir: &Path,
    manifest: &str,
    manifest_len: u64,
) -> Result<()> {
    let mut f = fs.create(&path(dir, "CURRENT.tmp"))?;
    f.append(encode_current(manifest, manifest_len).as_bytes())?;
    f.sync()
}

/// A new MANIFEST holding `version`, named by CURRENT.
pub(crate) fn write_manifest(
    fs: &dyn FileSystem,
    dir: &Path,
    number: u64,
    version: &Version,
    next_file: u64,
    log_number: u64,
    last_seq: u64,
) -> Result<LogWriter> {
    let name = manifest_name(number);
    let w = start_manifest(
        fs,
        &path(dir, &name),
        version,
        next_file,
        log_number,
        last_seq,
    )?;
    write_current_tmp(fs, dir, &name, w.len())?;
    fs.rename(&path(dir, "CURRENT.tmp"), &path(dir, CURRENT))?;
    fs.sync_dir(dir)?;
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_is_checked() {
        for (c, len) in [
            (encode_current("MANIFEST-000007", 4321), Some(4321)),
            (encode_current_v1("MANIFEST-000007"), None),
        ] {
            let want = Current {
                manifest: "MANIFEST-000007".into(),
                manifest_len: len,
            };
            assert_eq!(decode_current(c.as_bytes()).unwrap(), want);
            for i in 0..c.len() {
                let mut b = c.clone().into_bytes();
                b[i] ^= 0x01;
                assert!(decode_current(&b).is_err(), "byte {i} of {c:?}");
            }
            for cut in 0..c.len() {
                assert!(
                    decode_current(&c.as_bytes()[..cut]).is_err(),
                    "{cut} of {c:?}"
                );
            }
        }
        assert!(decode_current(b"").is_err());
    }
}
