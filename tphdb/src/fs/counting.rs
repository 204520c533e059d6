//! A file-system wrapper that counts reads and writes.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;

use super::{FileSystem, RandomAccessFile, ReadMode, WritableFile};
use crate::error::Result;

/// Totals of the I/O done through a [`CountingFs`].
#[derive(Debug, Default)]
pub struct IoCounts {
    /// `read_at` calls.
    pub reads: AtomicU64,
    /// Bytes returned by `read_at`.
    pub bytes_read: AtomicU64,
    /// Bytes appended to writable files.
    pub bytes_written: AtomicU64,
    /// `sync` calls on files and directories.
    pub syncs: AtomicU64,
}

impl IoCounts {
    /// `(reads, bytes read)` so far.
    pub fn read_totals(&self) -> (u64, u64) {
        (self.reads.load(Relaxed), self.bytes_read.load(Relaxed))
    }
}

/// Wraps a file system and counts the I/O done through it.
#[derive(Debug, Clone)]
pub struct CountingFs<F> {
    inner: F,
    counts: Arc<IoCounts>,
}

impl<F: FileSystem> CountingFs<F> {
    /// Wraps `inner` with zeroed counters.
    pub fn new(inner: F) -> Self {
        CountingFs {
            inner,
            counts: Arc::new(IoCounts::default()),
        }
    }

    /// The shared counters.
    pub fn counts(&self) -> &Arc<IoCounts> {
        &self.counts
    }
}

impl<F: FileSystem + ?Sized> CountingFs<Arc<F>> {
    /// Wraps a shared file system.
    pub fn shared(inner: Arc<F>) -> Self {
        CountingFs {
            inner,
            counts: Arc::new(IoCounts::default()),
        }
    }
}

impl<F: FileSystem + ?Sized> FileSystem for Arc<F> {
    fn open_read(&self, path: &Path, mode: ReadMode) -> Result<Arc<dyn RandomAccessFile>> {
        (**self).open_read(path, mode)
    }
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        (**self).create(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        (**self).rename(from, to)
    }
    fn remove(&self, path: &Path) -> Result<()> {
        (**self).remove(path)
    }
    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        (**self).list(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        (**self).create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> Result<()> {
        (**self).sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        (**self).exists(path)
    }
    fn file_size(&self, path: &Path) -> Result<u64> {
        (**self).file_size(path)
    }
    fn remove_dir(&self, dir: &Path) -> Result<()> {
        (**self).remove_dir(dir)
    }
    fn lock(&self, path: &Path, exclusive: bool) -> Result<Box<dyn super::FileLock>> {
        (**self).lock(path, exclusive)
    }
    fn link_or_copy(&self, from: &Path, to: &Path) -> Result<()> {
        (**self).link_or_copy(from, to)
    }
}

impl<F: FileSystem> FileSystem for CountingFs<F> {
    fn open_read(&self, path: &Path, mode: ReadMode) -> Result<Arc<dyn RandomAccessFile>> {
        Ok(Arc::new(CountingFile {
            inner: self.inner.open_read(path, mode)?,
            counts: self.counts.clone(),
        }))
    }

    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        Ok(Box::new(CountingWritable {
            inner: self.inner.create(path)?,
            counts: self.counts.clone(),
        }))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.rename(from, to)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        self.inner.remove(path)
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        self.inner.list(dir)
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        self.inner.create_dir_all(dir)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        self.counts.syncs.fetch_add(1, Relaxed);
        self.inner.sync_dir(dir)
    }

    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }

    fn file_size(&self, path: &Path) -> Result<u64> {
        self.inner.file_size(path)
    }

    fn remove_dir(&self, dir: &Path) -> Result<()> {
        self.inner.remove_dir(dir)
    }

    fn lock(&self, path: &Path, exclusive: bool) -> Result<Box<dyn super::FileLock>> {
        self.inner.lock(path, exclusive)
    }

    /// A link writes nothing; a copy's writes are not the database's own.
    fn link_or_copy(&self, from: &Path, to: &Path) -> Result<()> {
        self.inner.link_or_copy(from, to)
    }
}

#[derive(Debug)]
struct CountingFile {
    inner: Arc<dyn RandomAccessFile>,
    counts: Arc<IoCounts>,
}

impl RandomAccessFile for CountingFile {
    fn read_at(&self, offset: u64, len: usize) -> Result<Bytes> {
        self.counts.reads.fetch_add(1, Relaxed);
        self.counts.bytes_read.fetch_add(len as u64, Relaxed);
        self.inner.read_at(offset, len)
    }

    fn read_copy(&self, offset: u64, len: usize) -> Result<Bytes> {
        self.counts.reads.fetch_add(1, Relaxed);
        self.counts.bytes_read.fetch_add(len as u64, Relaxed);
        self.inner.read_copy(offset, len)
    }

    fn done_with(&self, offset: u64, len: usize) {
        self.inner.done_with(offset, len)
    }

    fn prefetch(&self, offset: u64, len: usize) {
        self.inner.prefetch(offset, len)
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }
}

#[derive(Debug)]
struct CountingWritable {
    inner: Box<dyn WritableFile>,
    counts: Arc<IoCounts>,
}

impl WritableFile for CountingWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.counts
            .bytes_written
            .fetch_add(data.len() as u64, Relaxed);
        self.inner.append(data)
    }

    fn flush(&mut self) -> Result<()> {
        self.inner.flush()
    }

    fn sync(&mut self) -> Result<()> {
        self.counts.syncs.fetch_add(1, Relaxed);
        self.inner.sync()
    }

    fn truncate(&mut self, len: u64) -> Result<()> {
        self.inner.truncate(len)
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }
}
