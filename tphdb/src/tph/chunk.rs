//! Shared chunks of memory that the entries flushes and compactions hold
//! point into: a frozen memtable's arena block, a merge's copies
//! ([`super::copies::Copies`]) or a bulk load's buffer. An entry refers to
//! its key and value by chunk and offset, 12 bytes, where a [`Bytes`] took
//! 32: a merge holds millions of them.

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;
use std::sync::Arc;

use bytes::Bytes;

/// Memory keys and values lie in, freed with the last entry referring to
/// it.
pub(crate) struct Chunk {
    ptr: NonNull<u8>,
    len: usize,
    /// What keeps shared memory alive (never read: `ptr` points into it);
    /// `None` for a buffer of the chunk's own (see [`Chunk::buffer`]),
    /// freed on drop.
    shared: Option<Bytes>,
}

// SAFETY: a chunk is plain memory. What an entry refers to is written
// before the entry is made and never again; a buffer's writer writes only
// bytes no entry refers to yet.
unsafe impl Send for Chunk {}
// SAFETY: see `Send`.
unsafe impl Sync for Chunk {}

impl Chunk {
    /// `bytes`, all written, as a chunk.
    pub(crate) fn shared(bytes: Bytes) -> Arc<Chunk> {
        Arc::new(Chunk {
            // A `Bytes` is never null, even empty.
            ptr: NonNull::new(bytes.as_ptr() as *mut u8).expect("a Bytes' pointer"),
            len: bytes.len(),
            shared: Some(bytes),
        })
    }

    /// A zeroed chunk of `len` bytes (at least one) to copy into
    /// ([`Chunk::write`]).
    pub(crate) fn buffer(len: usize) -> Arc<Chunk> {
        let layout = Layout::array::<u8>(len.max(1)).expect("a chunk's layout");
        // SAFETY: the layout is nonzero in size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(ptr) else {
            handle_alloc_error(layout);
        };
        Arc::new(Chunk {
            ptr,
            len: layout.size(),
            shared: None,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The address of the chunk's first byte.
    pub(crate) fn first_addr(&self) -> usize {
        self.ptr.as_ptr().addr()
    }

    /// The offset of `s` in the chunk, if it lies in it.
    pub(crate) fn offset_of(&self, s: &[u8]) -> Option<u32> {
        let off = s.as_ptr().addr().checked_sub(self.first_addr())?;
        (off + s.len() <= self.len)
            .then(|| u32::try_from(off).ok())
            .flatten()
    }

    /// Copies `src` to `at` of a buffer chunk.
    ///
    /// # Safety
    /// The chunk was made by [`Chunk::buffer`], and no entry refers to
    /// bytes that `at..at + src.len()` overlaps.
    pub(crate) unsafe fn write(&self, at: usize, src: &[u8]) {
        assert!(self.shared.is_none() && at + src.len() <= self.len);
        // SAFETY: in bounds (checked), and the caller promises that nobody
        // reads these bytes meanwhile; the pointer came from the allocator
        // with write access.
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(at), src.len());
        }
    }

    /// `len` bytes at `at`.
    ///
    /// # Panics
    /// If they pass the chunk's end.
    #[inline]
    pub(crate) fn slice(&self, at: usize, len: usize) -> &[u8] {
        assert!(at + len <= self.len, "a slice past its chunk's end");
        // SAFETY: in bounds (checked); every entry's bytes were written
        // before the entry was made, and are never written again.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(at), len) }
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        if self.shared.is_none() {
            let layout = Layout::array::<u8>(self.len).expect("a chunk's layout");
            // SAFETY: allocated by `Chunk::buffer` with this layout.
            unsafe { dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

impl std::fmt::Debug for Chunk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chunk").field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_read_back_from_shared_bytes_and_from_a_buffer() {
        let shared = Chunk::shared(Bytes::from_static(b"keyvalue"));
        assert_eq!(
            (shared.slice(0, 3), shared.slice(3, 5)),
            (&b"key"[..], &b"value"[..])
        );
        assert_eq!(shared.offset_of(shared.slice(3, 5)), Some(3));
        assert_eq!(shared.offset_of(b"elsewhere"), None);

        let buffer = Chunk::buffer(64);
        // SAFETY: a buffer chunk nobody refers to yet.
        unsafe { buffer.write(8, b"keyvalue") };
        assert_eq!(buffer.slice(8, 8), b"keyvalue");
        assert_eq!(buffer.slice(0, 8), [0; 8]);
    }

    #[test]
    #[should_panic(expected = "past its chunk's end")]
    fn a_slice_past_its_chunk_panics_rather_than_reading_past_it() {
        let _ = Chunk::shared(Bytes::from_static(b"key")).slice(1, 3);
    }
}
