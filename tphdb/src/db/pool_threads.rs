//! Closing a database returns once its pools' threads are gone. A rayon
//! pool dropped tells its threads to end and returns at once, so a closed
//! database's threads outlived it (LeakSanitizer saw their state as leaked
//! after each input of the `db_open` fuzz target); RocksDB's close likewise
//! joins its background threads. The pools' threads are spawned here, and
//! joined once the pools are dropped.

use std::cell::Cell;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

thread_local! {
    /// Whether this thread belongs to a database's pool: it cannot join
    /// itself.
    static ON_A_POOL: Cell<bool> = const { Cell::new(false) };
}

/// The threads a database's pools have spawned.
#[derive(Default)]
pub(crate) struct PoolThreads {
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl PoolThreads {
    /// Spawns a pool's thread (a rayon `spawn_handler`).
    pub(crate) fn spawn(&self, thread: rayon::ThreadBuilder) -> std::io::Result<()> {
        let mut b = std::thread::Builder::new();
        if let Some(name) = thread.name() {
            b = b.name(name.to_owned());
        }
        if let Some(size) = thread.stack_size() {
            b = b.stack_size(size);
        }
        let handle = b.spawn(move || {
            ON_A_POOL.with(|on| on.set(true));
            thread.run();
        })?;
        self.handles.lock().push(handle);
        Ok(())
    }
}

/// Declared after the pools in [`super::Inner`], so dropped after them:
/// joins their threads, which end once they see their pool dropped.
pub(crate) struct EndOfPools(pub(crate) Arc<PoolThreads>);

impl Drop for EndOfPools {
    fn drop(&mut self) {
        if ON_A_POOL.with(Cell::get) {
            return;
        }
        for handle in std::mem::take(&mut *self.0.handles.lock()) {
            let _ = handle.join();
        }
    }
}
