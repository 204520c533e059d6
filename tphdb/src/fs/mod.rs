//! The file-system interface every file access in tphdb goes through.
//!
//! [`PosixFs`] is the real one (with three read paths: memory-mapped,
//! positioned reads through the page cache, and `O_DIRECT`), [`MemFs`] keeps
//! files in memory, [`CountingFs`] wraps either and counts operations, and
//! [`FaultFs`] simulates crashes and failing disks for tests.
//! Tests swap in these (and a fault-injecting one) to count I/Os and to
//! simulate crashes and failing disks deterministically.

mod aligned;
mod counting;
mod fault;
mod lock;
mod mem;
mod mmap;
mod open_files;
mod posix;

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use crate::error::Result;
pub(crate) use mmap::page_size;

#[doc(hidden)]
pub use counting::{CountingFs, IoCounts};
pub use fault::{FaultFs, OpKind};
#[doc(hidden)]
pub use lock::LockTable;
pub use mem::MemFs;
pub use mmap::mapped_resident_bytes;
pub(crate) use open_files::OpenFiles;
pub use posix::PosixFs;
pub(crate) use posix::WRITE_BUFFER_BYTES;

/// How an immutable file is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReadMode {
    /// Map the file; a read is a page-cache hit or a page fault. Pogreb
    /// measured mmap about twice as fast as read calls for lookups. A
    /// database's pieces read what they keep apart or read once (sections,
    /// key hashes, key-order chunks) through a descriptor
    /// ([`RandomAccessFile::read_copy`]).
    #[default]
    Mmap,
    /// `pread` through the page cache.
    Pread,
    /// `pread` with `O_DIRECT`, bypassing the page cache with aligned
    /// buffers: every read reaches the device (the paper's setting).
    Direct,
}

impl ReadMode {
    /// Name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            ReadMode::Mmap => "mmap",
            ReadMode::Pread => "pread",
            ReadMode::Direct => "direct",
        }
    }
}

/// Operations on a directory tree of files.
pub trait FileSystem: Send + Sync + Debug {
    /// Opens an existing file for random reads.
    fn open_read(&self, path: &Path, mode: ReadMode) -> Result<Arc<dyn RandomAccessFile>>;
    /// Creates (or truncates) a file for appending.
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>>;
    /// Atomically replaces `to` with `from`.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Deletes a file.
    fn remove(&self, path: &Path) -> Result<()>;
    /// Names of the entries of a directory.
    fn list(&self, dir: &Path) -> Result<Vec<String>>;
    /// Creates a directory and its parents.
    fn create_dir_all(&self, dir: &Path) -> Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> Result<()>;
    /// True when the path exists.
    fn exists(&self, path: &Path) -> bool;
    /// Size of a file in bytes.
    fn file_size(&self, path: &Path) -> Result<u64>;
    /// Removes an empty directory.
    fn remove_dir(&self, dir: &Path) -> Result<()>;
    /// Locks `path` (created if missing) against other processes: exclusive
    /// for a writer, shared for readers. Released when the guard drops.
    fn lock(&self, path: &Path, exclusive: bool) -> Result<Box<dyn FileLock>>;
    /// Gives the immutable file `from` a second name `to`: a hard link where
    /// the file system can make one, otherwise a synced copy. The caller
    /// syncs `to`'s directory.
    fn link_or_copy(&self, from: &Path, to: &Path) -> Result<()> {
        copy_file(self, from, to)
    }
}

/// Renames the file `from`, or every file under the directory `from`, in
/// a map of the in-memory file systems; returns how many moved.
pub(crate) fn rename_entries<V>(
    names: &mut std::collections::BTreeMap<std::path::PathBuf, V>,
    from: &Path,
    to: &Path,
) -> usize {
    let moving: Vec<std::path::PathBuf> = names
        .keys()
        .filter(|p| p.starts_with(from))
        .cloned()
        .collect();
    for old in &moving {
        let rest = old.strip_prefix(from).expect("filtered by prefix");
        let new = if rest.as_os_str().is_empty() {
            to.to_path_buf()
        } else {
            to.join(rest)
        };
        if let Some(v) = names.remove(old) {
            names.insert(new, v);
        }
    }
    moving.len()
}

/// Copies `from` to a new file `to` in 1 MiB reads and syncs it.
pub(crate) fn copy_file<F: FileSystem + ?Sized>(fs: &F, from: &Path, to: &Path) -> Result<()> {
    const CHUNK: u64 = 1 << 20;
    let src = fs.open_read(from, ReadMode::Pread)?;
    let mut dst = fs.create(to)?;
    let mut offset = 0;
    while offset < src.len() {
        let len = CHUNK.min(src.len() - offset);
        dst.append(&src.read_at(offset, len as usize)?)?;
        offset += len;
    }
    dst.sync()
}

/// A held file lock.
pub trait FileLock: Send + Sync + Debug {}

/// An immutable file read at arbitrary offsets; safe to share across threads.
pub trait RandomAccessFile: Send + Sync + Debug {
    /// Reads exactly `len` bytes at `offset`. Reading past the end is an
    /// error. The result may share memory with the file's mapping.
    fn read_at(&self, offset: u64, len: usize) -> Result<Bytes>;
    /// Reads like [`RandomAccessFile::read_at`], into memory that shares
    /// nothing with a mapping of the file: for what is kept apart from the
    /// file or read once (sections, key hashes, key-order chunks). A
    /// database's mapped pieces read these through a
    /// descriptor, so that they never become pages of the process: the page
    /// cache holds them, as it holds a `pread`'s. Files that copy anyway
    /// just read.
    fn read_copy(&self, offset: u64, len: usize) -> Result<Bytes> {
        self.read_at(offset, len)
    }
    /// A hint that `len` bytes at `offset` were read once, front to back,
    /// and are not needed again soon: a mapped file lets go of their pages
    /// (they stay in the page cache, and a later read faults them back in),
    /// so that a compaction reading whole files through the mapping does
    /// not hold them all in the process. Bytes already returned stay valid.
    fn done_with(&self, offset: u64, len: usize) {
        let _ = (offset, len);
    }
    /// A hint that `len` bytes at `offset` will be read soon: a mapped file
    /// asks the CPU to bring them into its cache, so that a batch of gets
    /// waits for its blocks' memory side by side. Nothing else does
    /// anything; it never fails.
    fn prefetch(&self, offset: u64, len: usize) {
        let _ = (offset, len);
    }
    /// Size of the file in bytes.
    fn len(&self) -> u64;
    /// True for an empty file.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file being written front to back.
///
/// After a failed `append` or `flush`, some of the bytes may have reached the
/// file: until [`WritableFile::truncate`] succeeds, every further append,
/// flush and sync fails, so that the rest of a failed write can never reach
/// the file later (on a later flush, or when the file is dropped).
pub trait WritableFile: Send + Debug {
    /// Appends bytes (possibly buffered in the process).
    fn append(&mut self, data: &[u8]) -> Result<()>;
    /// Hands buffered bytes to the operating system.
    fn flush(&mut self) -> Result<()>;
    /// Makes everything appended so far durable.
    fn sync(&mut self) -> Result<()>;
    /// Cuts the file to its first `len` bytes (no more than [`WritableFile::len`]),
    /// dropping buffered bytes past them; appends continue from there. Used
    /// to drop the remains of a failed append.
    fn truncate(&mut self, len: u64) -> Result<()>;
    /// Bytes appended so far.
    fn len(&self) -> u64;
    /// True when nothing was appended.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The error for a read that does not fit in the file.
pub(crate) fn out_of_bounds(offset: u64, len: usize, file_len: u64) -> crate::Error {
    crate::Error::corruption(
        format!("read of {len} bytes at offset {offset}"),
        format!("a range within the file's {file_len} bytes"),
        "a range past the end",
    )
}

/// Checks that a read of `len` bytes at `offset` fits in a file of
/// `file_len` bytes.
pub(crate) fn check_range(offset: u64, len: usize, file_len: u64) -> Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= file_len => Ok(()),
        _ => Err(out_of_bounds(offset, len, file_len)),
    }
}

/// Reads the whole file at `path`.
#[doc(hidden)]
pub fn read_all(fs: &dyn FileSystem, path: &Path) -> Result<Bytes> {
    let f = fs.open_read(path, ReadMode::Pread)?;
    f.read_at(0, f.len() as usize)
}
