//! Heap buffers aligned for `O_DIRECT`.

use std::alloc::{alloc_zeroed, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

/// Alignment of direct I/O buffers, offsets and lengths: the largest logical
/// block size in common use.
pub(crate) const DIRECT_IO_ALIGN: usize = 4096;

/// A zeroed, `DIRECT_IO_ALIGN`-aligned byte buffer.
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
    /// Bytes that hold data (at most the capacity).
    len: usize,
}

// SAFETY: the buffer is uniquely owned heap memory, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared references only read it, like a Vec<u8>'s.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of `capacity` bytes (rounded up to the alignment).
    pub(crate) fn new(capacity: usize) -> AlignedBuf {
        let size = capacity.max(1).next_multiple_of(DIRECT_IO_ALIGN);
        let layout = Layout::from_size_align(size, DIRECT_IO_ALIGN).expect("valid layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let Some(ptr) = NonNull::new(ptr) else {
            handle_alloc_error(layout)
        };
        AlignedBuf {
            ptr,
            layout,
            len: 0,
        }
    }

    pub(crate) fn capacity_mut(&mut self) -> &mut [u8] {
        // SAFETY: the allocation is `layout.size()` initialized (zeroed) bytes.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }

    pub(crate) fn set_len(&mut self, len: usize) {
        assert!(len <= self.layout.size());
        self.len = len;
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len` bytes of the allocation are initialized.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}
