//! Memory a job holds, counted in a gauge for as long as a guard lives.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Bytes added to a gauge (the database's job memory) while this lives.
pub(crate) struct HeldBytes<'a> {
    gauge: &'a AtomicU64,
    bytes: u64,
}

impl<'a> HeldBytes<'a> {
    pub(crate) fn on(gauge: &'a AtomicU64, bytes: u64) -> Self {
        gauge.fetch_add(bytes, Relaxed);
        HeldBytes { gauge, bytes }
    }
}

impl Drop for HeldBytes<'_> {
    fn drop(&mut self) {
        self.gauge.fetch_sub(self.bytes, Relaxed);
    }
}
