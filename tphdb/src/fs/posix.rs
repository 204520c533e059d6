//! The real file system.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use super::aligned::{AlignedBuf, DIRECT_IO_ALIGN};
use super::{out_of_bounds, FileSystem, RandomAccessFile, ReadMode, WritableFile};
use crate::error::{Error, Result};

/// Files on the operating system's file system.
#[derive(Clone, Copy, Debug, Default)]
pub struct PosixFs;

fn io_err<'a>(what: &'a str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |e| Error::io(format!("{what} {}", path.display()), e)
}

impl FileSystem for PosixFs {
    fn open_read(&self, path: &Path, mode: ReadMode) -> Result<Arc<dyn RandomAccessFile>> {
        match mode {
            ReadMode::Mmap => {
                let file = File::open(path).map_err(io_err("opening", path))?;
                let len = file.metadata().map_err(io_err("stat of", path))?.len();
                let bytes = if len == 0 {
                    Bytes::new()
                } else {
                    // SAFETY: tphdb never modifies a file once it is opened for
                    // reading; files are written whole, synced, then opened.
                    let map =
                        unsafe { memmap2::Mmap::map(&file) }.map_err(io_err("mapping", path))?;
                    #[cfg(unix)]
                    let _ = map.advise(memmap2::Advice::Random);
                    Bytes::from_owner(map)
                };
                Ok(Arc::new(MmapFile {
                    path: path.to_path_buf(),
                    bytes,
                }))
            }
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
        let file = File::create(path).map_err(io_err("creating", path))?;
        Ok(Box::new(PosixWritable {
            path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 20, file),
            len: 0,
        }))
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
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io_err("opening lock file", path))?;
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

/// An flock held while the file stays open.
#[derive(Debug)]
struct PosixLock {
    _file: File,
}

impl super::FileLock for PosixLock {}

fn check_range(offset: u64, len: usize, file_len: u64) -> Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= file_len => Ok(()),
        _ => Err(out_of_bounds(offset, len, file_len)),
    }
}

#[derive(Debug)]
struct MmapFile {
    path: PathBuf,
    bytes: Bytes,
}

impl RandomAccessFile for MmapFile {
    fn read_at(&self, offset: u64, len: usize) -> Result<Bytes> {
        check_range(offset, len, self.bytes.len() as u64).map_err(|e| e.at(self.path.display()))?;
        Ok(self.bytes.slice(offset as usize..offset as usize + len))
    }

    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
}

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

#[derive(Debug)]
struct PosixWritable {
    path: PathBuf,
    out: BufWriter<File>,
    len: u64,
}

impl WritableFile for PosixWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.out
            .write_all(data)
            .map_err(io_err("writing", &self.path))?;
        self.len += data.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(io_err("writing", &self.path))
    }

    fn sync(&mut self) -> Result<()> {
        self.flush()?;
        self.out
            .get_ref()
            .sync_data()
            .map_err(io_err("syncing", &self.path))
    }

    fn len(&self) -> u64 {
        self.len
    }
}
