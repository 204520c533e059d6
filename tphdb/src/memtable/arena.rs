//! The memtable's arena: entries are bump-allocated in blocks mapped from
//! the kernel that live as long as the list. A frozen list shares its
//! blocks as chunks ([`crate::tph::chunk`]: a flush hands out keys and
//! values without copying) or moves them to a file (`SkipList::spill`).

#[cfg(miri)]
use std::alloc::{alloc, dealloc};
use std::alloc::{handle_alloc_error, Layout};
use std::ptr::{self, NonNull};
use std::sync::Arc;

use bytes::Bytes;

use crate::tph::chunk::Chunk;

/// Arena blocks are allocated this large; entries over a quarter of it get a
/// block of their own so that a big value wastes no block tail. One huge
/// page (x86-64, most arm64): see [`Block::new`].
pub(super) const BLOCK_BYTES: usize = 2 << 20;
pub(super) const ALIGN: usize = 8;

/// A block of arena memory, freed when the list and every [`Chunk`] taken
/// from a frozen list are gone.
///
/// Blocks are mapped from the kernel, not taken from the allocator: glibc
/// raises its mmap threshold to the size of a freed mapped chunk, after
/// which every 1 MiB block came from its heaps and, freed, stayed resident.
/// A 256 MiB `readwhilewriting` was killed for it; with the threshold held
/// still it peaked at 176 MB.
struct Block {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: a block is plain memory; who may write it is the arena's rule.
unsafe impl Send for Block {}
// SAFETY: see `Send`.
unsafe impl Sync for Block {}

impl Block {
    /// `bytes` (nonzero) of zeroed, 8-aligned memory. A `huge` block
    /// (of [`BLOCK_BYTES`], a power of two) is aligned to its size and
    /// asks for a transparent huge page: a skiplist search steps to nodes
    /// anywhere in the memtable, and with 4 KiB pages nearly every step
    /// also missed the TLB (a 64 MiB memtable spans 16,384 pages), and
    /// filling a block took 512 page faults instead of one.
    fn new(bytes: usize, huge: bool) -> Block {
        let layout = Layout::from_size_align(bytes, ALIGN).expect("block layout");
        #[cfg(not(miri))]
        let p = if huge { map_huge(bytes) } else { map(bytes) };
        #[cfg(miri)]
        let _ = huge;
        #[cfg(miri)]
        // SAFETY: `bytes` is nonzero.
        let p = unsafe { alloc(layout) };
        match NonNull::new(p) {
            Some(ptr) => Block { ptr, layout },
            None => handle_alloc_error(layout),
        }
    }
}

/// A fresh anonymous mapping of `bytes`, or null.
#[cfg(not(miri))]
fn map(bytes: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping takes no pointer arguments.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        ptr::null_mut()
    } else {
        p as *mut u8
    }
}

/// [`map`], aligned to `bytes` (a power of two) and, on Linux, advised to
/// be backed by transparent huge pages: the kernel only backs an aligned
/// range with one. Without the advice (other systems, or huge pages
/// turned off) it is a plain mapping.
#[cfg(not(miri))]
fn map_huge(bytes: usize) -> *mut u8 {
    debug_assert!(bytes.is_power_of_two());
    let span = bytes * 2;
    let p = map(span);
    if p.is_null() {
        return p;
    }
    let head = p.addr().next_multiple_of(bytes) - p.addr();
    let start = p.wrapping_add(head);
    // SAFETY: the head and the tail are parts of the mapping just made
    // that nothing points into; `start..start + bytes` stays mapped.
    unsafe {
        if head > 0 {
            libc::munmap(p as *mut libc::c_void, head);
        }
        if span - head - bytes > 0 {
            libc::munmap(start.add(bytes) as *mut libc::c_void, span - head - bytes);
        }
        // A hint: refused, the block is made of small pages.
        #[cfg(target_os = "linux")]
        libc::madvise(start as *mut libc::c_void, bytes, libc::MADV_HUGEPAGE);
    }
    start
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: made by `Block::new` with this layout; dropped once, when
        // the last `Arc` goes.
        unsafe {
            #[cfg(not(miri))]
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.layout.size());
            #[cfg(miri)]
            dealloc(self.ptr.as_ptr(), self.layout);
        }
    }
}

/// The written prefix of a block, as the owner of a [`Bytes`].
struct WrittenBlock {
    block: Arc<Block>,
    len: usize,
}

impl AsRef<[u8]> for WrittenBlock {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the first `len` bytes were all written (padding included)
        // and, the list being frozen, are never written again.
        unsafe { std::slice::from_raw_parts(self.block.ptr.as_ptr(), self.len) }
    }
}

/// Bump allocation in blocks that live as long as the list.
pub(super) struct Arena {
    /// Each block and how much of it is written.
    blocks: Vec<(Arc<Block>, usize)>,
    cursor: *mut u8,
    remaining: usize,
    /// Whether blocks of [`BLOCK_BYTES`] ask for a huge page.
    huge_pages: bool,
}

impl Arena {
    pub(super) fn new(huge_pages: bool) -> Arena {
        Arena {
            blocks: Vec::new(),
            cursor: ptr::null_mut(),
            remaining: 0,
            huge_pages,
        }
    }

    /// `bytes` (a multiple of [`ALIGN`]) of 8-aligned memory, and what it
    /// cost: the bytes themselves, plus the tail of a block left behind.
    pub(super) fn alloc(&mut self, bytes: usize) -> (*mut u8, usize) {
        debug_assert_eq!(bytes % ALIGN, 0);
        if bytes > BLOCK_BYTES / 4 {
            let p = self.new_block(bytes);
            // Its own block, put before the current one, which stays last.
            let own = self.blocks.pop().expect("just pushed");
            let at = self.blocks.len().saturating_sub(1);
            self.blocks.insert(at, (own.0, bytes));
            return (p, bytes);
        }
        let mut cost = bytes;
        if self.remaining < bytes {
            cost += self.remaining;
            self.cursor = self.new_block(BLOCK_BYTES);
            self.remaining = BLOCK_BYTES;
        }
        let p = self.cursor;
        // SAFETY: `bytes <= remaining`, so this stays inside the block.
        self.cursor = unsafe { p.add(bytes) };
        self.remaining -= bytes;
        self.blocks.last_mut().expect("a current block").1 += bytes;
        (p, cost)
    }

    fn new_block(&mut self, bytes: usize) -> *mut u8 {
        let block = Block::new(bytes, self.huge_pages && bytes == BLOCK_BYTES);
        let p = block.ptr.as_ptr();
        self.blocks.push((Arc::new(block), 0));
        p
    }

    /// Gives the kernel back the current block's pages past what is
    /// written, once nothing more will be: a block backed by a huge page
    /// is resident whole from its first write.
    pub(super) fn release_tail(&mut self) {
        #[cfg(all(target_os = "linux", not(miri)))]
        if !self.cursor.is_null() {
            let page = crate::fs::page_size();
            let start = self.cursor.addr().next_multiple_of(page);
            let end = self.cursor.addr() + self.remaining;
            if end > start {
                // SAFETY: `start..end` is the current block's unwritten
                // tail, whole pages nothing points into; read again it
                // would be zero, as it is now.
                unsafe {
                    libc::madvise(
                        self.cursor.with_addr(start) as *mut libc::c_void,
                        end - start,
                        libc::MADV_DONTNEED,
                    );
                }
            }
        }
        self.remaining = 0;
    }

    /// The written blocks as chunks, by address.
    pub(super) fn share(&self) -> FrozenArena {
        let mut blocks: Vec<Arc<Chunk>> = self
            .blocks
            .iter()
            .filter(|(_, len)| *len > 0)
            .map(|(block, len)| {
                Chunk::shared(Bytes::from_owner(WrittenBlock {
                    block: block.clone(),
                    len: *len,
                }))
            })
            .collect();
        blocks.sort_unstable_by_key(|b| b.first_addr());
        FrozenArena { blocks }
    }

    /// Copies each written block into `file` and maps the copy over the
    /// block, at the same address; returns the bytes moved.
    ///
    /// # Safety
    /// Nobody writes the arena any more.
    #[cfg(all(target_os = "linux", not(miri)))]
    pub(super) unsafe fn spill(&self, file: &std::fs::File) -> std::io::Result<u64> {
        use std::os::unix::fs::FileExt;
        let page = crate::fs::page_size();
        // Blocks are page-aligned mappings, so whole pages of each are
        // inside it; past the written prefix they are zero.
        let spans: Vec<(*mut u8, usize)> = self
            .blocks
            .iter()
            .filter(|(_, len)| *len > 0)
            .map(|(block, len)| (block.ptr.as_ptr(), len.next_multiple_of(page)))
            .collect();
        // Everything is copied before anything is remapped, so a failed
        // write leaves the list as it was.
        let mut offset = 0u64;
        for &(ptr, len) in &spans {
            // SAFETY: the span is inside the block's mapping (see above),
            // and nobody writes it (the caller's promise).
            let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
            file.write_all_at(bytes, offset)?;
            offset += len as u64;
        }
        let mut offset = 0u64;
        for &(ptr, len) in &spans {
            // SAFETY: `ptr..ptr + len` is a span of this arena's blocks,
            // which live as long as the arena, and `file` holds their exact
            // bytes at `offset`.
            unsafe { map_over(ptr, len, file, offset)? };
            offset += len as u64;
        }
        Ok(offset)
    }
}

/// The arena of a frozen list as chunks, so that its entries can be
/// handed out without copying.
pub(crate) struct FrozenArena {
    /// Each block's written bytes, by address.
    blocks: Vec<Arc<Chunk>>,
}

impl FrozenArena {
    /// `s`, bytes of the frozen list (an entry's key and value), as the
    /// chunk it lies in and its offset there.
    ///
    /// # Panics
    /// If `s` is not in the arena.
    pub(crate) fn share(&self, s: &[u8]) -> (Arc<Chunk>, u32) {
        let block = self.block_of(s);
        let off = block.offset_of(s).expect("a slice of the arena");
        (block.clone(), off)
    }

    fn block_of(&self, s: &[u8]) -> &Arc<Chunk> {
        let addr = s.as_ptr().addr();
        let i = self.blocks.partition_point(|b| b.first_addr() <= addr);
        &self.blocks[i.checked_sub(1).expect("a slice of the arena")]
    }
}

/// Replaces the memory at `target..target + len` by a private mapping of
/// `file` at `offset`, atomically for other threads: the range is mapped
/// first elsewhere, then moved over the target in one `mremap`, which
/// refuses before unmapping anything for what can be foreseen (too many
/// mappings). Threads reading the range meanwhile see the old page or the
/// new one, which hold the same bytes.
///
/// # Safety
/// `target` is page-aligned, the range is mapped memory nobody writes, and
/// `file` holds its exact bytes at `offset` (page-aligned).
#[cfg(all(target_os = "linux", not(miri)))]
unsafe fn map_over(
    target: *mut u8,
    len: usize,
    file: &std::fs::File,
    offset: u64,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a new mapping at an address the kernel picks touches no
    // memory of ours.
    let fresh = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE,
            file.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if fresh == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fresh` is our mapping of `len` bytes, and the caller
    // vouches that the target range may be replaced by identical bytes.
    let moved = unsafe {
        libc::mremap(
            fresh,
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            target as *mut libc::c_void,
        )
    };
    if moved != libc::MAP_FAILED {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    // SAFETY: `fresh` is still ours, and nothing points into it.
    unsafe { libc::munmap(fresh, len) };
    // A failure after the target was unmapped would leave readers pointing
    // at nothing; `mincore` fails on an unmapped range.
    let page = crate::fs::page_size();
    let mut resident = vec![0u8; len.div_ceil(page)];
    // SAFETY: `resident` has a byte per page of the range.
    let mapped = unsafe { libc::mincore(target as *mut libc::c_void, len, resident.as_mut_ptr()) };
    if mapped != 0 {
        eprintln!("tphdb: memtable memory lost while moving it to a file: {e}");
        std::process::abort();
    }
    Err(e)
}

#[cfg(all(test, target_os = "linux", not(miri)))]
mod tests {
    use super::*;

    /// Which pages of `len` bytes at `p` (page-aligned) are resident.
    fn resident(p: *mut u8, len: usize, page: usize) -> Vec<bool> {
        let mut v = vec![0u8; len.div_ceil(page)];
        // SAFETY: the range is mapped; `v` has a byte per page.
        let r = unsafe { libc::mincore(p as *mut libc::c_void, len, v.as_mut_ptr()) };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
        v.into_iter().map(|b| b & 1 == 1).collect()
    }

    /// Regression: blocks became huge pages, resident whole from their
    /// first write, and a frozen memtable's last block kept its unwritten
    /// tail in memory (a memtable moved to a file as well).
    #[test]
    fn freezing_gives_back_the_unwritten_tail_of_the_last_block() {
        let page = crate::fs::page_size();
        let mut a = Arena::new(true);
        let written = 3 * page + 8;
        let (p, _) = a.alloc(written);
        // SAFETY: all of the block is mapped and nothing else uses it: the
        // tail too is made resident, as a huge page would be.
        unsafe { p.write_bytes(7, BLOCK_BYTES) };
        assert!(resident(p, BLOCK_BYTES, page).iter().all(|&r| r));
        a.release_tail();
        let pages = resident(p, BLOCK_BYTES, page);
        let kept = written.div_ceil(page);
        assert!(pages[..kept].iter().all(|&r| r));
        assert!(pages[kept..].iter().all(|&r| !r));
        // SAFETY: the written bytes are still mapped and untouched.
        assert!(unsafe { std::slice::from_raw_parts(p, written) }
            .iter()
            .all(|&b| b == 7));
    }

    /// The kernel backs only an aligned range with a huge page.
    #[test]
    fn huge_page_blocks_are_aligned_to_their_size() {
        let mut a = Arena::new(true);
        for _ in 0..3 {
            let (first, _) = a.alloc(BLOCK_BYTES / 4);
            assert_eq!(first.addr() % BLOCK_BYTES, 0);
            for _ in 0..3 {
                a.alloc(BLOCK_BYTES / 4);
            }
        }
        assert_eq!(a.blocks.len(), 3);
    }
}
