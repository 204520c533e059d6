//! A fault-injecting, crash-simulating in-memory file system, for tests.
//!
//! It models what a disk promises and nothing more:
//!
//! * A file is an inode: the bytes synced so far, then the appends since the
//!   last sync. A simulated crash keeps each unsynced append, zeroes it (a
//!   hole), or garbles one 512-byte sector of it, and may cut the file after
//!   any of them.
//! * Directory entries (creations, renames, removals) are durable only once
//!   the directory is synced; a crash reverts to the last synced listing.
//! * The Nth operation of chosen kinds (optionally only on files whose name
//!   contains a pattern) can fail, once or from then on, with any
//!   `io::ErrorKind` (`StorageFull` for ENOSPC); a capacity makes appends
//!   past it fail with ENOSPC after writing what fits, as a real disk does.
//!   With torn appends on, a failing append first writes half its bytes:
//!   the partial `write` a buffered writer can leave behind.
//! * Truncation cuts unsynced bytes only; synced ones stay (tphdb truncates
//!   only to drop the tail of a failed append).
//! * A crash can be armed at the Nth sync: the image is taken just before
//!   that sync would have taken effect, and every later operation fails, as
//!   if the process were gone.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use super::{FileLock, FileSystem, LockTable, RandomAccessFile, ReadMode, WritableFile};
use crate::error::{Error, Result};

mod files;

use files::{FaultFile, FaultWritable};

/// Kinds of operations a fault can target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Appending to a file.
    Write,
    /// Syncing a file or a directory.
    Sync,
    /// Renaming.
    Rename,
    /// Reading from an open file.
    Read,
    /// Opening a file for reading.
    Open,
    /// Creating a file.
    Create,
    /// Removing a file.
    Remove,
    /// Truncating a file being written.
    Truncate,
}

#[derive(Clone, Debug, Default)]
struct Inode {
    data: Vec<u8>,
    synced: usize,
    /// Ends of the unsynced appends, in order (each starts where the
    /// previous one ended, the first at `synced`).
    appends: Vec<usize>,
}

#[derive(Clone, Debug)]
struct FailRule {
    kinds: Vec<OpKind>,
    /// Fail the `at`-th matching operation (0-based)...
    at: u64,
    /// ...and this many matching ones after it.
    more: u64,
    error: io::ErrorKind,
    /// Only operations on files whose name contains this.
    name_part: Option<String>,
}

impl FailRule {
    fn matches(&self, kind: OpKind, path: &Path) -> bool {
        self.kinds.contains(&kind)
            && self.name_part.as_ref().is_none_or(|part| {
                path.file_name()
                    .is_some_and(|n| n.to_string_lossy().contains(part.as_str()))
            })
    }
}

#[derive(Default)]
struct State {
    inodes: Vec<Inode>,
    names: BTreeMap<PathBuf, usize>,
    durable_names: BTreeMap<PathBuf, usize>,
    ops: u64,
    syncs: u64,
    matched: u64,
    fail: Option<FailRule>,
    capacity: Option<u64>,
    torn_appends: bool,
    crash_at_sync: Option<u64>,
    crash_seed: u64,
    image: Option<FaultFs>,
    dead: bool,
}

/// See the module documentation. Clones share the same files.
#[derive(Clone, Default)]
pub struct FaultFs {
    state: Arc<Mutex<State>>,
    locks: LockTable,
}

impl std::fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FaultFs")
    }
}

fn io_error(kind: io::ErrorKind, what: &str, path: &Path) -> Error {
    Error::io(
        format!("{what} {} (injected)", path.display()),
        io::Error::from(kind),
    )
}

impl FaultFs {
    /// An empty file system without faults.
    pub fn new() -> FaultFs {
        FaultFs::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fails the `n`-th (0-based) operation of one of `kinds` from now on
    /// (and all later ones when `persistent`) with `error`.
    pub fn fail_nth(&self, kinds: &[OpKind], n: u64, persistent: bool, error: io::ErrorKind) {
        let more = if persistent { u64::MAX } else { 0 };
        self.set_rule(kinds, None, n, more, error);
    }

    /// Fails `count` operations of one of `kinds` from the `n`-th (0-based)
    /// on: a disk that is full for a while.
    pub fn fail_n_from(&self, kinds: &[OpKind], n: u64, count: u64, error: io::ErrorKind) {
        self.set_rule(kinds, None, n, count.saturating_sub(1), error);
    }

    /// [`FaultFs::fail_nth`], counting only operations on files whose name
    /// contains `part` (such as `"MANIFEST-"`, `".log"` or `".ph"`).
    pub fn fail_nth_named(
        &self,
        part: &str,
        kinds: &[OpKind],
        n: u64,
        persistent: bool,
        error: io::ErrorKind,
    ) {
        let more = if persistent { u64::MAX } else { 0 };
        self.set_rule(kinds, Some(part.to_string()), n, more, error);
    }

    fn set_rule(
        &self,
        kinds: &[OpKind],
        name_part: Option<String>,
        n: u64,
        more: u64,
        error: io::ErrorKind,
    ) {
        let mut s = self.lock();
        s.matched = 0;
        s.fail = Some(FailRule {
            kinds: kinds.to_vec(),
            at: n,
            more,
            error,
            name_part,
        });
    }

    /// When on, an append failed by a rule first writes the first half of
    /// its bytes (appends failed by the capacity always write what fits).
    pub fn set_torn_appends(&self, on: bool) {
        self.lock().torn_appends = on;
    }

    /// Removes the fault rule and the capacity limit.
    pub fn clear_faults(&self) {
        let mut s = self.lock();
        s.fail = None;
        s.capacity = None;
    }

    /// Appends that would bring the total size past `bytes` fail with
    /// ENOSPC (`None`: unlimited).
    pub fn set_capacity(&self, bytes: Option<u64>) {
        self.lock().capacity = bytes;
    }

    /// Operations performed so far (all kinds).
    pub fn op_count(&self) -> u64 {
        self.lock().ops
    }

    /// Operations the fault rule has counted so far (matching its kinds
    /// and name), whether or not they failed.
    pub fn matched_count(&self) -> u64 {
        self.lock().matched
    }

    /// Syncs (of files and directories) performed so far.
    pub fn sync_count(&self) -> u64 {
        self.lock().syncs
    }

    /// Arms a crash at the `n`-th (0-based) sync from the start: the image
    /// is taken just before that sync takes effect (see [`FaultFs::crash_image`])
    /// and every operation after it fails.
    pub fn crash_at_sync(&self, n: u64, seed: u64) {
        let mut s = self.lock();
        s.crash_at_sync = Some(n);
        s.crash_seed = seed;
    }

    /// The image of the armed crash, once it happened.
    pub fn crash_image(&self) -> Option<FaultFs> {
        self.lock().image.clone()
    }

    /// A copy of the files as they are now, everything durable: what a
    /// clean shutdown followed by syncing everything would leave.
    pub fn snapshot(&self) -> FaultFs {
        let s = self.lock();
        let mut out = State::default();
        for (path, &id) in &s.names {
            let data = s.inodes[id].data.clone();
            out.inodes.push(Inode {
                synced: data.len(),
                data,
                appends: Vec::new(),
            });
            out.names.insert(path.clone(), out.inodes.len() - 1);
        }
        out.durable_names = out.names.clone();
        FaultFs {
            state: Arc::new(Mutex::new(out)),
            locks: LockTable::default(),
        }
    }

    /// What a crash right now would leave on disk, with the fate of each
    /// unsynced write drawn from `seed`.
    pub fn crash(&self, seed: u64) -> FaultFs {
        image(&self.lock(), seed)
    }

    /// Counts an operation and applies faults; `Err` when it must fail.
    fn op(&self, s: &mut State, kind: OpKind, path: &Path) -> Result<()> {
        if s.dead {
            return Err(io_error(
                io::ErrorKind::BrokenPipe,
                "after the simulated crash:",
                path,
            ));
        }
        s.ops += 1;
        if kind == OpKind::Sync {
            if s.crash_at_sync == Some(s.syncs) {
                let img = image(s, s.crash_seed);
                s.image = Some(img);
                s.dead = true;
                return Err(io_error(
                    io::ErrorKind::BrokenPipe,
                    "crash at sync of",
                    path,
                ));
            }
            s.syncs += 1;
        }
        if let Some(rule) = &s.fail {
            if rule.matches(kind, path) {
                let i = s.matched;
                s.matched += 1;
                if i >= rule.at && i - rule.at <= rule.more {
                    return Err(io_error(rule.error, &format!("{kind:?} of"), path));
                }
            }
        }
        Ok(())
    }

    fn total_bytes(s: &State) -> u64 {
        s.names
            .values()
            .map(|&i| s.inodes[i].data.len() as u64)
            .sum()
    }
}

/// The durable state with random fates for unsynced writes.
fn image(s: &State, seed: u64) -> FaultFs {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut out = State::default();
    for (path, &id) in &s.durable_names {
        let inode = &s.inodes[id];
        let mut data = inode.data[..inode.synced].to_vec();
        let mut start = inode.synced;
        for &end in &inode.appends {
            let write = &inode.data[start..end];
            match rng.u8(..100) {
                // The file ends before this write.
                0..=24 => break,
                25..=39 => data.extend(std::iter::repeat_n(0u8, write.len())),
                40..=54 => {
                    let at = data.len();
                    data.extend_from_slice(write);
                    // Garble the unsynced part of one 512-byte sector.
                    let sector = (at + rng.usize(..write.len().max(1))) / 512 * 512;
                    for b in data
                        .iter_mut()
                        .take((sector + 512).min(at + write.len()))
                        .skip(sector.max(at))
                    {
                        *b = rng.u8(..);
                    }
                }
                _ => data.extend_from_slice(write),
            }
            start = end;
        }
        let id = out.inodes.len();
        out.inodes.push(Inode {
            synced: data.len(),
            data,
            appends: Vec::new(),
        });
        out.names.insert(path.clone(), id);
    }
    out.durable_names = out.names.clone();
    FaultFs {
        state: Arc::new(Mutex::new(out)),
        locks: LockTable::default(),
    }
}

impl FileSystem for FaultFs {
    fn open_read(&self, path: &Path, _mode: ReadMode) -> Result<Arc<dyn RandomAccessFile>> {
        let mut s = self.lock();
        self.op(&mut s, OpKind::Open, path)?;
        let &id = s
            .names
            .get(path)
            .ok_or_else(|| io_error(io::ErrorKind::NotFound, "opening", path))?;
        Ok(Arc::new(FaultFile {
            fs: self.clone(),
            path: path.to_path_buf(),
            data: Bytes::from(s.inodes[id].data.clone()),
        }))
    }

    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let mut s = self.lock();
        self.op(&mut s, OpKind::Create, path)?;
        let id = s.inodes.len();
        s.inodes.push(Inode::default());
        s.names.insert(path.to_path_buf(), id);
        Ok(Box::new(FaultWritable {
            fs: self.clone(),
            path: path.to_path_buf(),
            id,
            len: 0,
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut s = self.lock();
        self.op(&mut s, OpKind::Rename, from)?;
        // Directories are implied by the files under them.
        if super::rename_entries(&mut s.names, from, to) == 0 {
            return Err(io_error(io::ErrorKind::NotFound, "renaming", from));
        }
        Ok(())
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut s = self.lock();
        self.op(&mut s, OpKind::Remove, path)?;
        s.names
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| io_error(io::ErrorKind::NotFound, "removing", path))
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let s = self.lock();
        if s.dead {
            return Err(io_error(
                io::ErrorKind::BrokenPipe,
                "after the simulated crash: listing",
                dir,
            ));
        }
        Ok(s.names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect())
    }

    fn create_dir_all(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let mut s = self.lock();
        self.op(&mut s, OpKind::Sync, dir)?;
        s.durable_names = s.names.clone();
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        self.lock().names.keys().any(|p| p.starts_with(path))
    }

    fn file_size(&self, path: &Path) -> Result<u64> {
        let s = self.lock();
        let &id = s
            .names
            .get(path)
            .ok_or_else(|| io_error(io::ErrorKind::NotFound, "stat of", path))?;
        Ok(s.inodes[id].data.len() as u64)
    }

    fn remove_dir(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }

    fn lock(&self, path: &Path, exclusive: bool) -> Result<Box<dyn FileLock>> {
        self.locks.lock(path, exclusive)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(fs: &FaultFs, path: &str, chunks: &[&[u8]], sync_after: usize) {
        let mut f = fs.create(Path::new(path)).unwrap();
        for (i, c) in chunks.iter().enumerate() {
            f.append(c).unwrap();
            if i + 1 == sync_after {
                f.sync().unwrap();
            }
        }
    }

    #[test]
    fn synced_data_and_synced_names_survive_a_crash() {
        let fs = FaultFs::new();
        write(&fs, "/d/a", &[b"hello", b" world"], 1);
        fs.sync_dir(Path::new("/d")).unwrap();
        write(&fs, "/d/b", &[b"unsynced entry"], 1);
        for seed in 0..50 {
            let img = fs.crash(seed);
            let a = img.open_read(Path::new("/d/a"), ReadMode::Pread).unwrap();
            let a = a.read_at(0, a.len() as usize).unwrap();
            assert!(a.starts_with(b"hello") && a.len() <= 11);
            assert!(
                !img.exists(Path::new("/d/b")),
                "an entry not covered by a directory sync"
            );
        }
        // Some seed keeps, some drops, some garbles the unsynced tail.
        let tails: std::collections::HashSet<Vec<u8>> = (0..200)
            .map(|seed| {
                let img = fs.crash(seed);
                let f = img.open_read(Path::new("/d/a"), ReadMode::Pread).unwrap();
                f.read_at(0, f.len() as usize).unwrap().to_vec()
            })
            .collect();
        assert!(tails.contains(&b"hello world"[..]) && tails.contains(&b"hello"[..]));
        assert!(tails.contains(&b"hello\0\0\0\0\0\0"[..]));
        assert!(tails.len() > 3, "garbled variants");
    }

    #[test]
    fn renames_revert_without_a_directory_sync() {
        let fs = FaultFs::new();
        write(&fs, "/d/tmp", &[b"x"], 1);
        fs.sync_dir(Path::new("/d")).unwrap();
        fs.rename(Path::new("/d/tmp"), Path::new("/d/final"))
            .unwrap();
        let img = fs.crash(1);
        assert!(img.exists(Path::new("/d/tmp")) && !img.exists(Path::new("/d/final")));
        fs.sync_dir(Path::new("/d")).unwrap();
        assert!(fs.crash(1).exists(Path::new("/d/final")));
    }

    #[test]
    fn faults_and_capacity() {
        let fs = FaultFs::new();
        fs.fail_nth(&[OpKind::Sync], 1, false, io::ErrorKind::Other);
        let mut f = fs.create(Path::new("/f")).unwrap();
        f.sync().unwrap();
        assert!(f.sync().is_err());
        f.sync().unwrap();
        fs.fail_nth(&[OpKind::Write], 0, true, io::ErrorKind::Other);
        assert!(f.append(b"a").is_err() && f.append(b"b").is_err());
        fs.clear_faults();
        fs.set_capacity(Some(10));
        f.append(b"0123456789").unwrap();
        let e = f.append(b"x").unwrap_err();
        assert!(
            matches!(&e, Error::Io { source, .. } if source.kind() == io::ErrorKind::StorageFull),
            "{e}"
        );
    }

    #[test]
    fn an_armed_crash_stops_everything_after_its_image() {
        let fs = FaultFs::new();
        fs.crash_at_sync(1, 7);
        let mut f = fs.create(Path::new("/f")).unwrap();
        f.append(b"first").unwrap();
        f.sync().unwrap();
        fs.sync_dir(Path::new("/")).unwrap_err();
        assert!(f.append(b"more").is_err());
        let img = fs.crash_image().unwrap();
        assert!(
            !img.exists(Path::new("/f")),
            "the directory sync never happened"
        );
    }
}
