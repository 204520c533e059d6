//! The unit tests' allocator: the system's, counting the heap each thread
//! holds, so that a test can bound what a function holds on its thread
//! while other tests run beside it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct PerThread;

#[global_allocator]
static ALLOCATOR: PerThread = PerThread;

thread_local! {
    // Constant-initialised and without destructors: reading them allocates
    // nothing, so the allocator can.
    static HELD: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(bytes: isize) {
    // `try_with`: a thread being torn down still frees.
    let _ = HELD.try_with(|held| {
        let now = held.get() + bytes;
        held.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: forwards every call to the system allocator; only counts.
unsafe impl GlobalAlloc for PerThread {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// `f`'s result and the most heap this thread held during `f` above what
/// it held when `f` began (the result included).
pub(crate) fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let start = HELD.with(Cell::get);
    PEAK.with(|peak| peak.set(start));
    let r = f();
    let peak = PEAK.with(Cell::get);
    (r, (peak - start).max(0) as usize)
}
