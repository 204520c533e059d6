//! Reading files through mappings: zero-copy reads, pages read ahead for
//! large reads and let go of when a reader is done with them.

use std::fs::File;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::posix::io_err;
use super::{check_range, RandomAccessFile};
use crate::error::Result;
use crate::util::prefetch;

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

/// The system's page size.
pub(crate) fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    })
}

/// A file read through a shared, read-only mapping.
#[derive(Debug)]
pub(super) struct MmapFile {
    path: PathBuf,
    bytes: Bytes,
}

impl MmapFile {
    /// Maps the file at `path`, advised random: a get reads one block.
    pub(super) fn open(path: &Path) -> Result<MmapFile> {
        let file = File::open(path).map_err(io_err("opening", path))?;
        let len = file.metadata().map_err(io_err("stat of", path))?.len();
        let bytes = if len == 0 {
            Bytes::new()
        } else {
            // SAFETY: tphdb never modifies a file once it is opened for
            // reading; files are written whole, synced, then opened.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io_err("mapping", path))?;
            let _ = map.advise(memmap2::Advice::Random);
            Bytes::from_owner(map)
        };
        Ok(MmapFile {
            path: path.to_path_buf(),
            bytes,
        })
    }

    /// Starts reading `[offset, offset + len)` into the page cache, in
    /// large requests, without waiting. The mapping is advised random (a
    /// get touches one block), so touching a range the cache does not hold
    /// read it a 4 KiB page fault at a time: compactions scanning pieces of
    /// a database larger than the page cache read at about 37 MB/s in
    /// 9,500 requests a second, and the settle after a 16M-key overwrite
    /// took 383 s.
    fn read_ahead(&self, offset: usize, len: usize) {
        let start = offset / page_size() * page_size();
        let end = (offset + len).min(self.bytes.len());
        // WILLNEED only schedules reads of the file's pages; it changes no
        // memory this process can see.
        self.advise(start, end, libc::MADV_WILLNEED);
    }

    /// Gives the kernel `advice` for the pages of `[start, end)` of the
    /// mapping (none if `start >= end`); `start` is page-aligned, `end`
    /// within the mapping's pages.
    fn advise(&self, start: usize, end: usize, advice: libc::c_int) {
        debug_assert!(start % page_size() == 0);
        debug_assert!(end <= self.bytes.len().next_multiple_of(page_size()));
        if start < end {
            // SAFETY: the range lies within this file's mapping, which
            // starts on a page boundary and spans whole pages, the last one
            // included. It is a read-only shared mapping: no advice given
            // here loses data, and any later access reads the file again.
            unsafe {
                libc::madvise(
                    self.bytes.as_ptr().add(start) as *mut libc::c_void,
                    end - start,
                    advice,
                );
            }
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

    /// A copy out of the mapping: its pages stay mapped until
    /// [`RandomAccessFile::done_with`]. A database reads its pieces'
    /// copies through a descriptor instead (`OpenFiles::open_mapped`).
    fn read_copy(&self, offset: u64, len: usize) -> Result<Bytes> {
        Ok(Bytes::copy_from_slice(&self.read_at(offset, len)?))
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
        self.advise(start, end, libc::MADV_DONTNEED);
    }

    fn prefetch(&self, offset: u64, len: usize) {
        let Some(range) = (offset as usize)
            .checked_add(len)
            .map(|end| offset as usize..end)
        else {
            return;
        };
        let Some(bytes) = self.bytes.get(range) else {
            return;
        };
        // Past a few lines the CPU's own prefetcher follows the read.
        const LINE: usize = 64;
        const MOST_LINES: usize = 32;
        for at in (0..bytes.len()).step_by(LINE).take(MOST_LINES) {
            prefetch(bytes[at..].as_ptr());
        }
        if let Some(last) = bytes.last() {
            // A block is checked from its trailer first.
            prefetch(last);
        }
    }

    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::fs::{FileSystem, PosixFs, ReadMode};

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

    /// A prefetch is a hint: any range, in the file or past its end (a
    /// block offset from a damaged index), neither fails nor changes what
    /// reads return.
    #[test]
    fn prefetching_any_range_is_harmless() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        fs::write(&path, &data).unwrap();
        let file = PosixFs.open_read(&path, ReadMode::Mmap).unwrap();
        for (offset, len) in [
            (0, 10_000),
            (0, 0),
            (9_990, 100),
            (20_000, 10),
            (u64::MAX, 10),
            (5, usize::MAX),
        ] {
            file.prefetch(offset, len);
        }
        assert!(file.read_at(0, data.len()).unwrap()[..] == data[..]);
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
