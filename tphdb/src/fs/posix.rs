//! The real file system.

use std::fs::{self, File, OpenOptions};
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
            file,
            buf: Vec::new(),
            written: 0,
            failed: false,
        }))
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

fn check_range(offset: u64, len: usize, file_len: u64) -> Result<()> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= file_len => Ok(()),
        _ => Err(out_of_bounds(offset, len, file_len)),
    }
}

/// The system's page size.
/// Bytes of the file at `path` that this process holds resident through
/// its mappings (Linux's `/proc/self/smaps`; 0 where there is none). For
/// tests and diagnostics: a mapped piece should hold only the pages a
/// read is using.
pub fn mapped_resident_bytes(path: &Path) -> u64 {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps") else {
        return 0;
    };
    let name = path.to_string_lossy();
    let (mut ours, mut kb) = (false, 0u64);
    for line in smaps.lines() {
        let range = line.split_whitespace().next().unwrap_or("");
        let header =
            range.contains('-') && range.split('-').all(|h| u64::from_str_radix(h, 16).is_ok());
        if header {
            ours = line.ends_with(name.as_ref());
        } else if let Some(v) = line.strip_prefix("Rss:").filter(|_| ours) {
            kb += v
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap_or(0);
        }
    }
    kb * 1024
}

fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    })
}

#[derive(Debug)]
struct MmapFile {
    path: PathBuf,
    bytes: Bytes,
}

impl MmapFile {
    /// Starts reading `[offset, offset + len)` into the page cache, in
    /// large requests, without waiting. The mapping is advised random (a
    /// get touches one block), so touching a range the cache does not hold
    /// read it a 4 KiB page fault at a time: compactions scanning pieces of
    /// a database larger than the page cache read at about 37 MB/s in
    /// 9,500 requests a second, and the settle after a 16M-key overwrite
    /// took 383 s.
    fn read_ahead(&self, offset: usize, len: usize) {
        let page = page_size();
        let start = offset / page * page;
        let end = (offset + len).min(self.bytes.len());
        // SAFETY: `[start, end)` lies within this file's mapping (`start` is
        // rounded down to a page boundary, which the mapping starts on).
        // WILLNEED only schedules reads of the file's pages; it changes no
        // memory this process can see.
        unsafe {
            libc::madvise(
                self.bytes.as_ptr().add(start) as *mut libc::c_void,
                end - start,
                libc::MADV_WILLNEED,
            );
        }
    }
}

/// Reads through a mapping at least this long ask the kernel to read their
/// pages ahead.
const READ_AHEAD_BYTES: usize = 64 << 10;

impl RandomAccessFile for MmapFile {
    fn read_at(&self, offset: u64, len: usize) -> Result<Bytes> {
        check_range(offset, len, self.bytes.len() as u64).map_err(|e| e.at(self.path.display()))?;
        if len >= READ_AHEAD_BYTES {
            self.read_ahead(offset as usize, len);
        }
        Ok(self.bytes.slice(offset as usize..offset as usize + len))
    }

    fn done_with(&self, offset: u64, len: usize) {
        let page = page_size();
        let start = (offset as usize).next_multiple_of(page);
        let end = (offset as usize + len).min(self.bytes.len());
        // The file's last page is the mapping's too, whatever lies past the
        // end of the file in it.
        let end = if end == self.bytes.len() {
            end.next_multiple_of(page)
        } else {
            end / page * page
        };
        if start < end {
            // SAFETY: the range lies within this file's mapping (its start is
            // page-aligned, and so are `start` and `end`; the mapping spans
            // whole pages, the last one included). The mapping is a
            // read-only shared one: dropping its pages loses nothing, and any
            // later access reads them from the file again.
            unsafe {
                libc::madvise(
                    self.bytes.as_ptr().add(start) as *mut libc::c_void,
                    end - start,
                    libc::MADV_DONTNEED,
                );
            }
        }
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

/// Appends are buffered up to this many bytes before they are written.
const WRITE_BUFFER_BYTES: usize = 1 << 20;

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
}

impl PosixWritable {
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
        Ok(())
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

    /// Resident bytes of the mapping that holds `addr`, from smaps.
    fn mapping_rss(addr: usize) -> usize {
        let smaps = fs::read_to_string("/proc/self/smaps").unwrap();
        let mut in_mapping = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        in_mapping = (lo..hi).contains(&addr);
                        continue;
                    }
                }
            }
            if in_mapping {
                if let Some(kb) = line.strip_prefix("Rss:") {
                    return kb
                        .trim()
                        .trim_end_matches(" kB")
                        .trim()
                        .parse::<usize>()
                        .unwrap()
                        << 10;
                }
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    /// Regression: a compaction reading whole pieces through their mappings
    /// kept every page it read resident in the process (600 of 1,150 MB of
    /// peak RSS in a 4M x 1 KiB fill); `done_with` lets go of them.
    #[test]
    fn a_mapped_range_read_once_leaves_the_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        fs::write(&path, &data).unwrap();
        let file = PosixFs.open_read(&path, ReadMode::Mmap).unwrap();
        let all = file.read_at(0, data.len()).unwrap();
        assert!(all[..] == data[..]);
        let addr = all.as_ptr() as usize;
        assert!(mapping_rss(addr) >= 7 << 20, "read pages are resident");
        file.done_with(0, data.len());
        assert!(mapping_rss(addr) < 1 << 20, "pages dropped");
        // What was returned, and later reads, still see the file.
        assert!(all[..] == data[..]);
        assert!(file.read_at(12345, 100).unwrap()[..] == data[12345..12445]);
    }

    /// Pages of `path` in the page cache, in its first `len` bytes.
    fn cached_pages(path: &Path, len: usize) -> usize {
        let file = File::open(path).unwrap();
        // SAFETY: a read-only mapping of a file nothing modifies.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        let mut resident = vec![0u8; len.div_ceil(page_size())];
        // SAFETY: the mapping spans at least `len` bytes; `resident` has a
        // byte per page of them.
        let rc = unsafe {
            libc::mincore(
                map.as_ptr() as *mut libc::c_void,
                len,
                resident.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0);
        resident.iter().filter(|&&r| r & 1 == 1).count()
    }

    /// Regression: a large read through a mapping (a compaction scanning a
    /// piece) read the pages it touched one 4 KiB fault at a time, the
    /// mapping being advised random: 37 MB/s once a database outgrew the
    /// page cache. Its pages are now read ahead as soon as it is asked for.
    #[test]
    fn a_large_mapped_read_reads_its_pages_ahead() {
        use std::os::unix::io::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let len = 4 << 20;
        fs::write(&path, vec![7u8; 2 * len]).unwrap();
        let f = File::open(&path).unwrap();
        f.sync_all().unwrap();
        // SAFETY: plain system call on an open descriptor.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if cached_pages(&path, len) > len / page_size() / 4 {
            eprintln!("skipped: this file system keeps the file in memory");
            return;
        }
        let file = PosixFs.open_read(&path, ReadMode::Mmap).unwrap();
        let _range = file.read_at(0, len).unwrap();
        // Nothing touched the range: only read-ahead brings it in.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut cached = cached_pages(&path, len);
        while cached < len / page_size() * 9 / 10 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            cached = cached_pages(&path, len);
        }
        assert!(
            cached >= len / page_size() * 9 / 10,
            "{cached} of {} pages read",
            len / page_size()
        );
    }
}
