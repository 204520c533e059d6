//! A bound on the files a database keeps open (LevelDB's table cache,
//! `max_open_files`).
//!
//! Each piece holds a file descriptor: for every read with `pread` or
//! `O_DIRECT`, and beside its mapping for what a mapped piece reads into
//! memory of its own ([`OpenFiles::open_mapped`]).
//! [`OpenFiles::open`] hands out files that open on first read and may be
//! closed again when more than the bound are open: the CLOCK algorithm picks
//! a file not read since the hand last passed it. A closed file reopens on
//! its next read. A read in flight keeps its descriptor until it is done.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::Mutex;

use super::{FileSystem, RandomAccessFile, ReadMode};
use crate::error::Result;

/// The files open through one table, at most `capacity` at once.
#[derive(Debug)]
pub(crate) struct OpenFiles {
    capacity: usize,
    /// The open files, in CLOCK order.
    ring: Mutex<VecDeque<Weak<LazyFile>>>,
}

impl OpenFiles {
    pub(crate) fn new(capacity: usize) -> Arc<OpenFiles> {
        Arc::new(OpenFiles {
            capacity: capacity.max(1),
            ring: Mutex::new(VecDeque::new()),
        })
    }

    /// `path`, opened now to learn its length (and check it exists), and
    /// again on demand after the table closes it.
    pub(crate) fn open(
        self: &Arc<Self>,
        fs: &Arc<dyn FileSystem>,
        path: &Path,
        mode: ReadMode,
    ) -> Result<Arc<dyn RandomAccessFile>> {
        let file = fs.open_read(path, mode)?;
        let lazy = Arc::new_cyclic(|me| LazyFile {
            fs: fs.clone(),
            path: path.to_path_buf(),
            mode,
            len: file.len(),
            file: Mutex::new(Some(file)),
            referenced: AtomicBool::new(true),
            table: Arc::downgrade(self),
            me: me.clone(),
        });
        self.admit(Arc::downgrade(&lazy));
        Ok(lazy)
    }

    /// `path` mapped, with a descriptor from this table for
    /// [`RandomAccessFile::read_copy`]: the sections opening reads and the
    /// key hashes and key-order chunks a compaction or a scan reads come
    /// through `pread`, and none of them becomes the process's.
    pub(crate) fn open_mapped(
        self: &Arc<Self>,
        fs: &Arc<dyn FileSystem>,
        path: &Path,
    ) -> Result<Arc<dyn RandomAccessFile>> {
        Ok(Arc::new(MappedFile {
            mapped: fs.open_read(path, ReadMode::Mmap)?,
            copies: self.open(fs, path, ReadMode::Pread)?,
        }))
    }

    /// Counts `file` as open, closing others past the capacity.
    fn admit(&self, file: Weak<LazyFile>) {
        let mut ring = self.ring.lock();
        ring.retain(|f| f.strong_count() > 0);
        let mut budget = 2 * ring.len();
        while ring.len() >= self.capacity && budget > 0 {
            budget -= 1;
            let Some(candidate) = ring.pop_front() else {
                break;
            };
            let Some(candidate) = candidate.upgrade() else {
                continue;
            };
            if candidate.referenced.swap(false, Ordering::Relaxed) {
                ring.push_back(Arc::downgrade(&candidate));
            } else {
                candidate.file.lock().take();
            }
        }
        ring.push_back(file);
    }

    /// Files open now.
    #[cfg(test)]
    pub(crate) fn open_count(&self) -> usize {
        self.ring
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|f| f.file.lock().is_some())
            .count()
    }
}

/// A file the table may close; it reopens on its next read.
#[derive(Debug)]
struct LazyFile {
    fs: Arc<dyn FileSystem>,
    path: PathBuf,
    mode: ReadMode,
    len: u64,
    file: Mutex<Option<Arc<dyn RandomAccessFile>>>,
    /// Read since the CLOCK hand last passed.
    referenced: AtomicBool,
    table: Weak<OpenFiles>,
    me: Weak<LazyFile>,
}

impl LazyFile {
    fn handle(&self) -> Result<Arc<dyn RandomAccessFile>> {
        self.referenced.store(true, Ordering::Relaxed);
        let mut file = self.file.lock();
        if let Some(f) = &*file {
            return Ok(f.clone());
        }
        let f = self.fs.open_read(&self.path, self.mode)?;
        *file = Some(f.clone());
        drop(file);
        if let Some(table) = self.table.upgrade() {
            table.admit(self.me.clone());
        }
        Ok(f)
    }
}

impl RandomAccessFile for LazyFile {
    fn read_at(&self, offset: u64, len: usize) -> Result<Bytes> {
        self.handle()?.read_at(offset, len)
    }

    fn read_copy(&self, offset: u64, len: usize) -> Result<Bytes> {
        self.handle()?.read_copy(offset, len)
    }

    fn len(&self) -> u64 {
        self.len
    }
}

/// A mapped file whose [`RandomAccessFile::read_copy`]s go through a
/// descriptor instead. Through the mapping, what a compaction read stayed
/// mapped in the process until let go of, and each letting go cost every
/// core a TLB flush: 13 to 19 MB of mapped pieces at the 16M x 128-byte
/// fill's peak RSS, with a share's key-order scan letting go of each
/// piece's pages every 64 keys it listed.
#[derive(Debug)]
struct MappedFile {
    mapped: Arc<dyn RandomAccessFile>,
    copies: Arc<dyn RandomAccessFile>,
}

impl RandomAccessFile for MappedFile {
    fn read_at(&self, offset: u64, len: usize) -> Result<Bytes> {
        self.mapped.read_at(offset, len)
    }

    fn read_copy(&self, offset: u64, len: usize) -> Result<Bytes> {
        self.copies.read_copy(offset, len)
    }

    fn done_with(&self, offset: u64, len: usize) {
        self.mapped.done_with(offset, len)
    }

    fn prefetch(&self, offset: u64, len: usize) {
        self.mapped.prefetch(offset, len)
    }

    fn len(&self) -> u64 {
        self.mapped.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::MemFs;

    #[test]
    fn at_most_capacity_files_stay_open_and_closed_ones_reopen() {
        let mem = MemFs::new();
        let fs: Arc<dyn FileSystem> = Arc::new(mem.clone());
        let table = OpenFiles::new(3);
        let files: Vec<Arc<dyn RandomAccessFile>> = (0..10u8)
            .map(|i| {
                let path = PathBuf::from(format!("/f{i}"));
                let mut w = fs.create(&path).unwrap();
                w.append(&[i; 100]).unwrap();
                w.sync().unwrap();
                table.open(&fs, &path, ReadMode::Pread).unwrap()
            })
            .collect();
        assert!(table.open_count() <= 3, "{} open", table.open_count());
        for round in 0..3 {
            for (i, f) in files.iter().enumerate() {
                assert_eq!(f.len(), 100);
                assert_eq!(f.read_at(round, 1).unwrap()[0], i as u8);
                assert!(table.open_count() <= 3, "{} open", table.open_count());
            }
        }
        drop(files);
        assert_eq!(table.open_count(), 0, "dropped files leave the table");
    }
}
