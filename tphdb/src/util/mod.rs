//! Small helpers shared by the on-disk formats.

pub(crate) mod bits;
pub(crate) mod codec;
#[cfg(test)]
pub(crate) mod heap;
pub(crate) mod held;
pub(crate) mod lagged;
pub(crate) mod min_heap;
pub(crate) mod reduce;

/// True when a stored checksum matches the computed one. Fuzz builds
/// (`cfg(fuzzing)`, set by cargo-fuzz) accept any checksum so that the
/// fuzzer reaches the structural checks behind it; they never ship.
#[inline]
pub(crate) fn checksum_matches<T: PartialEq>(stored: T, actual: T) -> bool {
    cfg!(fuzzing) || stored == actual
}

/// Asks the CPU to bring the cache line at `p` in; never faults.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it does not dereference or fault.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
