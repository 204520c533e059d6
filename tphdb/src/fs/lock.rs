//! In-process lock table, for file systems without real file locks.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::FileLock;
use crate::error::{Error, Result};

/// Shared (count > 0) or exclusive (count = -1) holders of each path.
#[derive(Clone, Debug, Default)]
pub struct LockTable {
    held: Arc<Mutex<HashMap<PathBuf, i64>>>,
}

impl LockTable {
    /// Takes a lock on `path`, failing at once if it conflicts.
    pub fn lock(&self, path: &Path, exclusive: bool) -> Result<Box<dyn FileLock>> {
        let mut held = self.held.lock().expect("lock table");
        let count = held.entry(path.to_path_buf()).or_insert(0);
        if *count < 0 || (exclusive && *count > 0) {
            return Err(Error::Busy(format!("{} is locked", path.display())));
        }
        *count = if exclusive { -1 } else { *count + 1 };
        Ok(Box::new(TableLock {
            table: self.clone(),
            path: path.to_path_buf(),
            exclusive,
        }))
    }
}

#[derive(Debug)]
struct TableLock {
    table: LockTable,
    path: PathBuf,
    exclusive: bool,
}

impl FileLock for TableLock {}

impl Drop for TableLock {
    fn drop(&mut self) {
        let mut held = self.table.held.lock().expect("lock table");
        if let Some(c) = held.get_mut(&self.path) {
            *c = if self.exclusive { 0 } else { *c - 1 };
            if *c == 0 {
                held.remove(&self.path);
            }
        }
    }
}
