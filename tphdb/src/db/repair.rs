//! Offline checking and salvage of a database directory: [`DB::verify`]
//! and [`DB::repair`].
//!
//! Repair is crash-safe by construction: it builds the salvaged database
//! in the `repair/` subdirectory, marks it complete, then moves the old
//! files to `lost/` and the new ones in. A repair interrupted after the
//! mark finishes the moves when run again; one interrupted before it
//! starts over, the old files untouched.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use super::{Options, WriteOptions, DB};
use crate::batch::{BatchOp, WriteBatch};
use crate::error::{Error, Result};
use crate::filename::{is_flushed_wal, parse, path, FileKind, CURRENT, LOCK};
use crate::fs::{FileSystem, PosixFs, ReadMode};
use crate::hash::{key_hash, partition_of};
use crate::log::LogReader;
use crate::piece::PieceReader;
use crate::tph::Tph;
use crate::version::{decode_current, Version, VersionSet};

/// What [`DB::verify`] found in one file.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct FileCheck {
    /// The file's name in the database directory.
    pub name: String,
    /// What was checked and counted.
    pub summary: String,
    /// What is wrong, if anything.
    pub problem: Option<String>,
}

/// The result of [`DB::verify`], file by file.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Every file looked at, in directory order.
    pub files: Vec<FileCheck>,
    /// Observations that are not damage (a torn WAL tail, leftover files).
    pub notes: Vec<String>,
}

impl VerifyReport {
    /// Whether no file has a problem.
    pub fn is_ok(&self) -> bool {
        self.files.iter().all(|f| f.problem.is_none())
    }

    fn add(&mut self, name: &str, result: Result<String>) {
        let (summary, problem) = match result {
            Ok(s) => (s, None),
            Err(e) => (String::new(), Some(e.to_string())),
        };
        self.files.push(FileCheck {
            name: name.to_string(),
            summary,
            problem,
        });
    }
}

impl fmt::Display for VerifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.files {
            match &c.problem {
                None => writeln!(f, "ok       {:<20} {}", c.name, c.summary)?,
                Some(p) => writeln!(f, "DAMAGED  {:<20} {p}", c.name)?,
            }
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        let bad = self.files.iter().filter(|c| c.problem.is_some()).count();
        match bad {
            0 => writeln!(f, "{} files checked: no damage", self.files.len()),
            _ => writeln!(
                f,
                "{} files checked: {bad} damaged (`tphdb repair` salvages what is intact)",
                self.files.len()
            ),
        }
    }
}

/// What [`DB::repair`] kept and lost.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RepairReport {
    /// Keys in the repaired database.
    pub keys: u64,
    /// Entries read back intact (all versions, pieces and WALs).
    pub entries_salvaged: u64,
    /// Piece files read, and those unreadable as a whole.
    pub pieces: usize,
    /// WAL files read.
    pub wals: usize,
    /// Passes over the files: each salvages the keys of one hash range, so
    /// that it holds at most about `compaction_memory_bytes` of entries.
    pub passes: u64,
    /// Damage met: each a file or block whose entries were lost.
    pub lost: Vec<String>,
    /// Where the old files went.
    pub moved_to: String,
}

impl fmt::Display for RepairReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "repaired: {} keys from {} intact entries of {} pieces and {} WALs ({} {})",
            self.keys,
            self.entries_salvaged,
            self.pieces,
            self.wals,
            self.passes,
            if self.passes == 1 { "pass" } else { "passes" }
        )?;
        for l in &self.lost {
            writeln!(f, "lost: {l}")?;
        }
        if self.lost.is_empty() {
            writeln!(f, "nothing was found damaged")?;
        }
        writeln!(f, "the old files are in {}", self.moved_to)
    }
}

fn file_system(opts: &Options) -> Arc<dyn FileSystem> {
    opts.file_system
        .clone()
        .unwrap_or_else(|| Arc::new(PosixFs))
}

/// Reads and decodes every record of a WAL; returns the number of
/// batches and how the log ended.
fn read_wal(fs: &dyn FileSystem, file: &Path) -> Result<(usize, Option<String>)> {
    let mut reader = LogReader::new(fs.open_read(file, ReadMode::Pread)?);
    let mut batches = 0;
    loop {
        match reader.next_record() {
            Ok(Some(rec)) => {
                WriteBatch::decode(&rec)?;
                batches += 1;
            }
            Ok(None) => break,
            Err(e) => return Err(e),
        }
    }
    let tail = reader.tail_drop().map(|t| {
        let follows = if t.valid_data_follows {
            ", and intact records follow it (more than a torn write)"
        } else {
            ""
        };
        format!(
            "{} bytes dropped at byte {}: {}{follows}",
            t.dropped_bytes, t.offset, t.reason
        )
    });
    Ok((batches, tail))
}

pub(crate) fn verify(opts: &Options, dir: &Path) -> Result<VerifyReport> {
    let fs = file_system(opts);
    if !fs.exists(&path(dir, CURRENT)) {
        return Err(Error::InvalidArgument(format!(
            "no database in {}",
            dir.display()
        )));
    }
    let _lock = fs.lock(&path(dir, LOCK), false)?;
    let mut report = VerifyReport::default();
    let state = VersionSet::read_state(fs.as_ref(), dir);
    // The file the report names: CURRENT itself when it does not decode.
    let manifest = crate::fs::read_all(fs.as_ref(), &path(dir, CURRENT))
        .ok()
        .and_then(|b| decode_current(&b).ok())
        .map_or_else(|| CURRENT.to_string(), |c| c.manifest);
    let state = match state {
        Ok(s) => {
            let summary = format!(
                "{} TPHs at level 0, {} at levels 1-{}",
                s.l0.len(),
                s.levels.len(),
                s.depth
            );
            if let Some(t) = &s.manifest_tail {
                report.notes.push(format!(
                    "{manifest}: a torn last record ({} bytes), ignored",
                    t.dropped_bytes
                ));
            }
            report.add(&manifest, Ok(summary));
            s
        }
        Err(e) => {
            report.add(&manifest, Err(e));
            return Ok(report);
        }
    };
    let layout = state.layout.expect("read_state checks the layout");
    let version = Version::empty(layout);
    let mut referenced = HashMap::new();
    let heads = state
        .l0
        .iter()
        .map(|&h| (0, h))
        .chain(state.levels.iter().map(|(&(level, _), &h)| (level, h)));
    // TPH-level results, reported with the head piece's own checks.
    let mut tph_checks: HashMap<u64, Result<String>> = HashMap::new();
    for (level, head) in heads {
        let result =
            Tph::open(&fs, dir, head, &ReadMode::Pread.into(), &mut referenced).and_then(|tph| {
                let partitions = if level == 0 {
                    1
                } else {
                    version.partitions(level)
                };
                let (live, dead) = tph.verify(partitions)?;
                Ok(format!(
                    "TPH head, level {level}: {} pieces, {live} live and {dead} dead entries; ",
                    tph.piece_count()
                ))
            });
        if let Err(e) = &result {
            if !referenced.contains_key(&head) {
                let name = crate::tph::piece_file_name(head);
                report.add(&name, Err(e.clone()));
                continue;
            }
        }
        tph_checks.insert(head, result);
    }
    let mut names = fs.list(dir)?;
    names.sort();
    for name in &names {
        match parse(name) {
            Some(FileKind::Piece(n)) => match referenced.get(&n) {
                Some(p) => {
                    let tph = tph_checks.remove(&n).unwrap_or(Ok(String::new()));
                    let piece = p.verify().map(|n| format!("piece: {n} entries, every block and index checked"));
                    report.add(name, tph.and_then(|t| piece.map(|p| t + &p)));
                }
                None => report.notes.push(format!("{name}: not in the database (left by an interrupted job; removed at the next open)")),
            },
            Some(FileKind::Wal(_)) if !is_flushed_wal(name, state.log_number) => {
                let result = read_wal(fs.as_ref(), &path(dir, name)).map(|(batches, tail)| {
                    if let Some(t) = tail {
                        report.notes.push(format!("{name}: {t}"));
                    }
                    format!("WAL: {batches} batches")
                });
                report.add(name, result);
            }
            Some(FileKind::Wal(_)) => report.notes.push(format!("{name}: an old WAL, already flushed")),
            Some(FileKind::Manifest(_)) if *name != manifest => {
                report.notes.push(format!("{name}: an old MANIFEST (removed at the next open)"))
            }
            _ => {}
        }
    }
    for (&n, _) in referenced.iter() {
        let name = crate::tph::piece_file_name(n);
        if !names.contains(&name) {
            report.add(
                &name,
                Err(Error::corruption(name.clone(), "a piece file", "none")),
            );
        }
    }
    Ok(report)
}

/// The newest entry of every key found: `(seq, value)` by key.
type Salvage = BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)>;

/// Memory a salvaged entry takes per byte of the files it came from: the
/// map's nodes and two allocations per entry, on top of key and value.
const SALVAGE_BYTES_PER_FILE_BYTE: u64 = 2;

/// Which keys a salvage pass keeps: those in partition `pass` of `passes`.
#[derive(Clone, Copy)]
struct Pass {
    pass: u64,
    passes: u64,
}

impl Pass {
    fn keeps(&self, key: &[u8]) -> bool {
        partition_of(key_hash(key), self.passes) == self.pass
    }

    /// The first pass reports what it finds; later ones find the same.
    fn reports(&self) -> bool {
        self.pass == 0
    }
}

fn keep_newest(s: &mut Salvage, key: &[u8], seq: u64, value: Option<&[u8]>) {
    match s.get(key) {
        Some((old, _)) if *old >= seq => {}
        _ => {
            s.insert(key.to_vec(), (seq, value.map(<[u8]>::to_vec)));
        }
    }
}

const REPAIR_DIR: &str = "repair";
pub(crate) const LOST_DIR: &str = "lost";

/// Moves `dir/name` into `dir/lost/` (created if missing), under a new
/// name if one is taken (`name.1`, ...). The caller syncs the directories.
pub(crate) fn move_to_lost(fs: &dyn FileSystem, dir: &Path, name: &str) -> Result<()> {
    let lost_dir = dir.join(LOST_DIR);
    fs.create_dir_all(&lost_dir)?;
    let mut target = lost_dir.join(name);
    let mut i = 1;
    while fs.exists(&target) {
        target = lost_dir.join(format!("{name}.{i}"));
        i += 1;
    }
    fs.rename(&path(dir, name), &target)
}
const COMPLETE: &str = "COMPLETE";

pub(crate) fn repair(opts: &Options, dir: &Path) -> Result<RepairReport> {
    let fs = file_system(opts);
    let names = fs.list(dir)?;
    let resuming = fs.exists(&dir.join(REPAIR_DIR).join(COMPLETE));
    if !resuming
        && !names
            .iter()
            .any(|n| parse(n).is_some_and(|k| k != FileKind::Lock))
    {
        return Err(Error::InvalidArgument(format!(
            "no database files in {}",
            dir.display()
        )));
    }
    let lock = fs.lock(&path(dir, LOCK), true)?;
    let new_dir = dir.join(REPAIR_DIR);
    let lost_dir = dir.join(LOST_DIR);
    let mut report = RepairReport {
        moved_to: lost_dir.display().to_string(),
        ..RepairReport::default()
    };
    let complete = new_dir.join(COMPLETE);
    if !fs.exists(&complete) {
        // What an attempt interrupted before the mark left.
        for name in fs.list(&new_dir).unwrap_or_default() {
            fs.remove(&new_dir.join(name))?;
        }
        build(opts, &fs, dir, &new_dir, &mut report)?;
        let listing: String = fs
            .list(&new_dir)?
            .into_iter()
            .filter(|n| parse(n).is_some_and(|k| k != FileKind::Lock))
            .map(|n| n + "\n")
            .collect();
        let mut f = fs.create(&new_dir.join("COMPLETE.tmp"))?;
        f.append(listing.as_bytes())?;
        f.sync()?;
        drop(f);
        fs.rename(&new_dir.join("COMPLETE.tmp"), &complete)?;
        fs.sync_dir(&new_dir)?;
    } else {
        report
            .lost
            .push("(resumed an interrupted repair: the figures above cover only this run)".into());
    }
    // Move the old files out and the new ones in. A name listed in
    // COMPLETE and gone from repair/ was moved in already.
    let listing = crate::fs::read_all(fs.as_ref(), &complete)?;
    let new_names: Vec<String> = String::from_utf8_lossy(&listing)
        .lines()
        .map(str::to_string)
        .collect();
    fs.create_dir_all(&lost_dir)?;
    for name in fs.list(dir)? {
        let Some(kind) = parse(&name) else { continue };
        let moved_in = new_names.contains(&name) && !fs.exists(&new_dir.join(&name));
        if kind == FileKind::Lock || moved_in {
            continue;
        }
        move_to_lost(fs.as_ref(), dir, &name)?;
    }
    fs.sync_dir(&lost_dir)?;
    fs.sync_dir(dir)?;
    for name in &new_names {
        let from = new_dir.join(name);
        if fs.exists(&from) {
            fs.rename(&from, &path(dir, name))?;
        }
    }
    fs.sync_dir(dir)?;
    for name in fs.list(&new_dir)? {
        fs.remove(&new_dir.join(name))?;
    }
    let _ = fs.remove_dir(&new_dir);
    drop(lock);
    Ok(report)
}

/// The pieces and WALs of the database as its MANIFEST describes it, if
/// the MANIFEST and every TPH head read back. Files outside it are older
/// (obsolete pieces waiting for deletion, flushed WALs) and may hold
/// versions whose tombstones were since dropped.
fn live_files(fs: &Arc<dyn FileSystem>, dir: &Path) -> Option<(HashSet<u64>, u64)> {
    let state = VersionSet::read_state(fs.as_ref(), dir).ok()?;
    let mut open = HashMap::new();
    for &head in state.l0.iter().chain(state.levels.values()) {
        Tph::open(fs, dir, head, &ReadMode::Pread.into(), &mut open).ok()?;
    }
    Some((open.into_keys().collect(), state.log_number))
}

/// The pieces and WALs repair reads: those the MANIFEST names when it is
/// intact, all of them otherwise (`false`).
fn files_to_salvage(fs: &Arc<dyn FileSystem>, dir: &Path) -> Result<(Vec<String>, bool)> {
    let mut names = fs.list(dir)?;
    names.sort();
    let live = live_files(fs, dir);
    names.retain(|name| match (&live, parse(name)) {
        (Some((pieces, _)), Some(FileKind::Piece(n))) => pieces.contains(&n),
        (Some((_, log_number)), Some(FileKind::Wal(_))) => !is_flushed_wal(name, *log_number),
        (_, Some(FileKind::Piece(_) | FileKind::Wal(_))) => true,
        _ => false,
    });
    Ok((names, live.is_some()))
}

/// Reads every intact entry of `names` (pieces and WALs in `dir`) whose
/// key `pass` keeps, the newest version of each key.
fn salvage(
    fs: &dyn FileSystem,
    dir: &Path,
    names: &[String],
    pass: Pass,
    report: &mut RepairReport,
) -> Result<Salvage> {
    let mut s = Salvage::new();
    let mut keep_newest = |key: &[u8], seq: u64, value: Option<&[u8]>| {
        if pass.keeps(key) {
            report.entries_salvaged += 1;
            keep_newest(&mut s, key, seq, value);
        }
    };
    let mut lost = Vec::new();
    let (mut pieces, mut wals) = (0, 0);
    for name in names {
        match parse(name) {
            Some(FileKind::Piece(_)) => {
                pieces += 1;
                let piece = match PieceReader::open(fs, &path(dir, name), ReadMode::Pread) {
                    Ok(p) => p,
                    Err(e) if !e.is_corruption() => return Err(e),
                    Err(e) => {
                        lost.push(format!("{name}: unreadable, all its entries lost: {e}"));
                        continue;
                    }
                };
                let (entries, damage) = piece.salvage()?;
                lost.extend(damage);
                for e in entries {
                    keep_newest(&e.key, e.seq, e.value.as_deref());
                }
            }
            Some(FileKind::Wal(_)) => {
                wals += 1;
                // Read up to the damage, then keep what came before it.
                let mut reader = LogReader::new(fs.open_read(&path(dir, name), ReadMode::Pread)?);
                loop {
                    match reader.next_record() {
                        Ok(Some(rec)) => match WriteBatch::decode(&rec) {
                            Ok((seq, batch)) => {
                                for (i, op) in batch.ops().enumerate() {
                                    let seq = seq + i as u64;
                                    match op {
                                        BatchOp::Put(k, v) => keep_newest(k, seq, Some(v)),
                                        BatchOp::Delete(k) => keep_newest(k, seq, None),
                                    }
                                }
                            }
                            Err(e) => {
                                lost.push(format!("{name}: a batch that does not decode: {e}"))
                            }
                        },
                        Ok(None) => break,
                        Err(e) if !e.is_corruption() => return Err(e),
                        Err(e) => {
                            lost.push(format!("{name}: {e}; the rest of the file is lost"));
                            break;
                        }
                    }
                }
                if let Some(t) = reader.tail_drop() {
                    if t.valid_data_follows {
                        lost.push(format!(
                            "{name}: {} bytes from byte {} ({}), intact records among them",
                            t.dropped_bytes, t.offset, t.reason
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    if pass.reports() {
        report.pieces += pieces;
        report.wals += wals;
        report.lost.extend(lost);
    }
    Ok(s)
}

/// Salvages the files of `dir` into a new database in `new_dir`, the
/// newest live version of every key, in as many passes over hash ranges of
/// the keys as keep each within `compaction_memory_bytes`.
fn build(
    opts: &Options,
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    new_dir: &Path,
    report: &mut RepairReport,
) -> Result<()> {
    let (names, manifest_intact) = files_to_salvage(fs, dir)?;
    if !manifest_intact {
        report.lost.push(
            "the MANIFEST or a TPH head is damaged: every piece and WAL was read, \
             so keys deleted long ago may be back"
                .into(),
        );
    }
    let file_bytes: u64 = names
        .iter()
        .map(|n| fs.file_size(&path(dir, n)))
        .sum::<Result<u64>>()?;
    let budget = opts.compaction_memory_bytes.max(1) as u64;
    let passes = file_bytes
        .saturating_mul(SALVAGE_BYTES_PER_FILE_BYTE)
        .div_ceil(budget)
        .clamp(1, 1 << 32);
    report.passes = passes;
    let opts = Options {
        create_if_missing: true,
        error_if_exists: false,
        file_system: Some(fs.clone()),
        ..opts.clone()
    };
    let db = DB::open(&opts, new_dir)?;
    let no_wal = WriteOptions {
        disable_wal: true,
        ..WriteOptions::default()
    };
    for pass in 0..passes {
        let pass = Pass { pass, passes };
        let salvage = salvage(fs.as_ref(), dir, &names, pass, report)?;
        let mut batch = WriteBatch::new();
        for (k, (_, v)) in salvage {
            if let Some(v) = v {
                batch.put(&k, &v);
                report.keys += 1;
            }
            if batch.size_in_bytes() >= 1 << 20 {
                db.write_opt(std::mem::take(&mut batch), &no_wal)?;
            }
        }
        db.write_opt(batch, &no_wal)?;
    }
    db.flush()?;
    db.wait_for_compactions()?;
    db.close()
}
