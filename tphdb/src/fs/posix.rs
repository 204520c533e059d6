//! The real file system.

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use super::aligned::{AlignedBuf, DIRECT_IO_ALIGN};
use super::mmap::MmapFile;
use super::{check_range, out_of_bounds, FileSystem, RandomAccessFile, ReadMode, WritableFile};
use crate::error::{Error, Result};
use crate::filename::{parse, FileKind};

/// Files on the operating system's file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct PosixFs;

pub(super) fn io_err<'a>(
    what: &'a str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| Error::io(format!("{what} {}", path.display()), e)
}

impl FileSystem for PosixFs {
    fn open_read(&self, path: &Path, mode: ReadMode) -> Result<Arc<dyn RandomAccessFile>> {
        match mode {
            ReadMode::Mmap => Ok(Arc::new(MmapFile::open(path)?)),
            ReadMode::Pread => {
                let file = File::open(path).map_err(io_err("opening", path))?;
                let len = file.metadata().map_err(io_err("stat of", path))?.len();
                Ok(Arc::new(PreadFile {
                    path: path.to_path_buf(),
                    file,
                    len,
                }))
            }
            ReadMode::Direct => {
                let file = OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECT)
                    .open(path)
                    .map_err(io_err(
                        "opening with O_DIRECT (does the file system support it?)",
                        path,
                    ))?;
                let len = file.metadata().map_err(io_err("stat of", path))?.len();
                Ok(Arc::new(DirectFile {
                    path: path.to_path_buf(),
                    file,
                    len,
                }))
            }
        }
    }

    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        Ok(Box::new(PosixWritable::create(path)?))
    }

    fn link_or_copy(&self, from: &Path, to: &Path) -> Result<()> {
        match fs::hard_link(from, to) {
            Ok(()) => Ok(()),
            // Another file system, or one without links.
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                super::copy_file(self, from, to)
            }
            Err(e) => Err(io_err("linking to", to)(e)),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        fs::rename(from, to).map_err(io_err("renaming", from))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        fs::remove_file(path).map_err(io_err("removing", path))
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(dir).map_err(io_err("listing", dir))? {
            let entry = entry.map_err(io_err("listing", dir))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        fs::create_dir_all(dir).map_err(io_err("creating directory", dir))
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_err("syncing directory", dir))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn file_size(&self, path: &Path) -> Result<u64> {
        Ok(fs::metadata(path).map_err(io_err("stat of", path))?.len())
    }

    fn remove_dir(&self, dir: &Path) -> Result<()> {
        fs::remove_dir(dir).map_err(io_err("removing directory", dir))
    }

    fn lock(&self, path: &Path, exclusive: bool) -> Result<Box<dyn super::FileLock>> {
        use std::os::unix::io::AsRawFd;
        // Readers open the lock file read-only (flock needs no write
        // access), so a database on read-only media opens for reading.
        let create = || {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
        };
        let file = if exclusive {
            create()
        } else {
            File::open(path).or_else(|e| match e.kind() {
                std::io::ErrorKind::NotFound => create(),
                _ => Err(e),
            })
        };
        let file = match file {
            Ok(f) => f,
            // A copy on read-only media without a LOCK file: no writer can
            // open it either.
            Err(e) if !exclusive && e.raw_os_error() == Some(libc::EROFS) => {
                return Ok(Box::new(NoLock));
            }
            Err(e) => {
                return Err(Error::io(
                    format!("opening lock file {}", path.display()),
                    e,
                ))
            }
        };
        let op = if exclusive {
            libc::LOCK_EX
        } else {
            libc::LOCK_SH
        };
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return Err(Error::Busy(format!(
                    "{} is locked by another process{}",
                    path.display(),
                    if exclusive { "" } else { " that writes" }
                )));
            }
            return Err(Error::io(format!("locking {}", path.display()), e));
        }
        Ok(Box::new(PosixLock { _file: file }))
    }
}

/// The lock of a reader of a database without a LOCK file.
#[derive(Debug)]
struct NoLock;

impl super::FileLock for NoLock {}

/// An flock held while the file stays open.
#[derive(Debug)]
struct PosixLock {
    _file: File,
}

impl super::FileLock for PosixLock {}

#[derive(Debug)]
struct PreadFile {
    path: PathBuf,
    file: File,
    len: u64,
}

impl RandomAccessFile for PreadFile {
    fn read_at(&self, offset: u64, len: usize) -> Result<Bytes> {
        check_range(offset, len, self.len).map_err(|e| e.at(self.path.display()))?;
        let mut buf = vec![0u8; len];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(io_err("reading", &self.path))?;
        Ok(Bytes::from(buf))
    }

    fn len(&self) -> u64 {
        self.len
    }
}

#[derive(Debug)]
struct DirectFile {
    path: PathBuf,
    file: File,
    len: u64,
}

impl RandomAccessFile for DirectFile {
    fn read_at(&self, offset: u64, len: usize) -> Result<Bytes> {
        check_range(offset, len, self.len).map_err(|e| e.at(self.path.display()))?;
        if len == 0 {
            return Ok(Bytes::new());
        }
        // O_DIRECT needs aligned offsets, lengths and buffers: read the
        // aligned pages covering the range, in one call.
        let align = DIRECT_IO_ALIGN as u64;
        let start = offset / align * align;
        let end = (offset + len as u64).next_multiple_of(align);
        let mut buf = AlignedBuf::new((end - start) as usize);
        let want = (offset + len as u64 - start) as usize;
        let mut got = 0;
        while got < want {
            // The tail past end-of-file comes back short; that is fine as
            // long as the requested range arrived.
            let n = self
                .file
                .read_at(
                    &mut buf.capacity_mut()[got..(end - start) as usize],
                    start + got as u64,
                )
                .map_err(io_err("reading (O_DIRECT)", &self.path))?;
            if n == 0 {
                return Err(out_of_bounds(offset, len, self.len).at(self.path.display()));
            }
            got += n;
            if got % DIRECT_IO_ALIGN != 0 {
                break;
            }
        }
        if got < want {
            return Err(out_of_bounds(offset, len, self.len).at(self.path.display()));
        }
        buf.set_len(want);
        Ok(Bytes::from_owner(buf).slice((offset - start) as usize..want))
    }

    fn len(&self) -> u64 {
        self.len
    }
}

/// Appends are buffered up to this many bytes before they are written.
pub(crate) const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// A piece file's writeback is started each time this many more bytes of
/// it reached the OS (RocksDB's `bytes_per_sync`). Left to the kernel, a
/// compaction's hundreds of megabytes stayed dirty until its sync, and a
/// flush's sync waited behind them: the flush outlasted the memtable that
/// filled meanwhile, and writes stopped.
const WRITEBACK_BYTES: u64 = 1 << 20;

/// A file written through a buffer of its own, not a `BufWriter`: after a
/// failed write a `BufWriter` keeps the unwritten rest and writes it on the
/// next flush or when dropped, so bytes of a write that returned an error
/// could reach the file later.
#[derive(Debug)]
struct PosixWritable {
    path: PathBuf,
    file: File,
    buf: Vec<u8>,
    /// Bytes handed to the operating system: the file's size.
    written: u64,
    /// A write failed part way; only `truncate` clears this.
    failed: bool,
    /// For a piece file, the bytes whose writeback has been started.
    written_back: Option<u64>,
}

impl PosixWritable {
    fn create(path: &Path) -> Result<PosixWritable> {
        let file = File::create(path).map_err(io_err("creating", path))?;
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let is_piece = matches!(parse(name), Some(FileKind::Piece(_)));
        Ok(PosixWritable {
            path: path.to_path_buf(),
            file,
            buf: Vec::new(),
            written: 0,
            failed: false,
            written_back: is_piece.then_some(0),
        })
    }

    fn check_usable(&self) -> Result<()> {
        if self.failed {
            return Err(Error::io(
                format!(
                    "writing {} after a failed write, before truncating it",
                    self.path.display()
                ),
                std::io::Error::other("file has the remains of a failed write"),
            ));
        }
        Ok(())
    }

    /// Writes `data` at the end of what the OS has, advancing `written` by
    /// what got through even when a later part fails.
    fn write_out(&mut self, data: &[u8]) -> Result<()> {
        let mut done = 0;
        while done < data.len() {
            match self.file.write_at(&data[done..], self.written) {
                Ok(0) => {
                    self.failed = true;
                    return Err(Error::io(
                        format!("writing {}", self.path.display()),
                        std::io::Error::from(std::io::ErrorKind::WriteZero),
                    ));
                }
                Ok(n) => {
                    done += n;
                    self.written += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.failed = true;
                    return Err(Error::io(format!("writing {}", self.path.display()), e));
                }
            }
        }
        self.start_writeback();
        Ok(())
    }

    /// Starts the writeback of what reached the OS since the last start,
    /// once that is [`WRITEBACK_BYTES`], without waiting for it: the sync
    /// that makes the file durable then finds little left to write. Best
    /// effort: that sync reports any error of the writes.
    fn start_writeback(&mut self) {
        let Some(from) = self.written_back else {
            return;
        };
        if self.written - from < WRITEBACK_BYTES {
            return;
        }
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: a plain system call on a descriptor this file owns.
            unsafe {
                libc::sync_file_range(
                    self.file.as_raw_fd(),
                    from as libc::off64_t,
                    (self.written - from) as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
        }
        self.written_back = Some(self.written);
    }

    fn flush_buf(&mut self) -> Result<()> {
        let buf = std::mem::take(&mut self.buf);
        let result = self.write_out(&buf);
        self.buf = buf;
        // After a failure the rest stays buffered for `len`, but the file
        // refuses to write it until truncated.
        if result.is_ok() {
            self.buf.clear();
        }
        result
    }
}

impl WritableFile for PosixWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.check_usable()?;
        if self.buf.len() + data.len() > WRITE_BUFFER_BYTES {
            self.flush_buf()?;
        }
        if data.len() >= WRITE_BUFFER_BYTES {
            return self.write_out(data);
        }
        self.buf.extend_from_slice(data);
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.check_usable()?;
        self.flush_buf()
    }

    fn sync(&mut self) -> Result<()> {
        self.flush()?;
        self.file.sync_data().map_err(io_err("syncing", &self.path))
    }

    fn truncate(&mut self, len: u64) -> Result<()> {
        // `written` counts every byte that reached the file, even of a failed
        // write: past it, only buffered bytes go.
        if len >= self.written {
            self.buf.truncate((len - self.written) as usize);
            self.failed = false;
            return Ok(());
        }
        self.file
            .set_len(len)
            .map_err(io_err("truncating", &self.path))?;
        self.written = len;
        self.written_back = self.written_back.map(|b| b.min(len));
        self.buf.clear();
        self.failed = false;
        Ok(())
    }

    fn len(&self) -> u64 {
        self.written + self.buf.len() as u64
    }
}

impl Drop for PosixWritable {
    fn drop(&mut self) {
        // Best effort, as a `BufWriter` would; never the rest of a failed write.
        if !self.failed {
            let _ = self.flush_buf();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the writeback of a file of `appends` got to.
    fn written_back(path: &Path, appends: &[usize]) -> Option<u64> {
        let mut f = PosixWritable::create(path).unwrap();
        for (i, &n) in appends.iter().enumerate() {
            f.append(&vec![i as u8; n]).unwrap();
        }
        f.sync().unwrap();
        let total: usize = appends.iter().sum();
        assert_eq!(std::fs::read(path).unwrap().len(), total);
        f.written_back
    }

    /// A piece file's writeback is started a megabyte or more at a time as
    /// it is written, from buffered and from large appends; a WAL's never
    /// is (a fill's WALs are deleted before the kernel writes them back).
    #[test]
    fn piece_files_are_written_back_as_they_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let piece = dir.path().join("000007.ph");
        // Written 900 KiB at a time: started at 1800, not at 2400.
        let small = [300 << 10; 8];
        assert_eq!(written_back(&piece, &small), Some(1800 << 10));
        let large = [3 << 20, 10, 2 << 20];
        assert_eq!(written_back(&piece, &large), Some((5 << 20) + 10));
        let wal = dir.path().join("000008.log");
        assert_eq!(written_back(&wal, &small), None);
    }
}
