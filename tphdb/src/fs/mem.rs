//! An in-memory file system for tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::{out_of_bounds, FileSystem, RandomAccessFile, ReadMode, WritableFile};
use crate::error::{Error, Result};

type Files = Arc<Mutex<BTreeMap<PathBuf, Arc<Mutex<Vec<u8>>>>>>;

/// Files kept in memory. Clones share the same files.
#[derive(Clone, Debug, Default)]
pub struct MemFs {
    files: Files,
    locks: super::LockTable,
}

fn not_found(path: &Path) -> Error {
    Error::io(
        format!("opening {}", path.display()),
        std::io::Error::from(std::io::ErrorKind::NotFound),
    )
}

impl MemFs {
    /// An empty file system.
    pub fn new() -> MemFs {
        MemFs::default()
    }

    fn get(&self, path: &Path) -> Result<Arc<Mutex<Vec<u8>>>> {
        let files = self.files.lock().expect("memfs lock");
        files.get(path).cloned().ok_or_else(|| not_found(path))
    }

    /// Replaces a file's contents (tests use it to corrupt files).
    pub fn write_file(&self, path: &Path, data: Vec<u8>) {
        let mut files = self.files.lock().expect("memfs lock");
        files.insert(path.to_path_buf(), Arc::new(Mutex::new(data)));
    }

    /// A copy of a file's contents.
    pub fn read_file(&self, path: &Path) -> Result<Vec<u8>> {
        Ok(self.get(path)?.lock().expect("memfs lock").clone())
    }
}

impl FileSystem for MemFs {
    fn open_read(&self, path: &Path, _mode: ReadMode) -> Result<Arc<dyn RandomAccessFile>> {
        // Readers see the file as it is when opened, like an immutable file.
        let data = Bytes::from(self.get(path)?.lock().expect("memfs lock").clone());
        Ok(Arc::new(MemFile {
            path: path.to_path_buf(),
            data,
        }))
    }

    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let data = Arc::new(Mutex::new(Vec::new()));
        self.files
            .lock()
            .expect("memfs lock")
            .insert(path.to_path_buf(), data.clone());
        Ok(Box::new(MemWritable { data, len: 0 }))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut files = self.files.lock().expect("memfs lock");
        // Directories are implied by the files under them.
        if super::rename_entries(&mut files, from, to) == 0 {
            return Err(not_found(from));
        }
        Ok(())
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut files = self.files.lock().expect("memfs lock");
        files
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| not_found(path))
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let files = self.files.lock().expect("memfs lock");
        Ok(files
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect())
    }

    fn create_dir_all(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }

    fn sync_dir(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }

    fn exists(&self, path: &Path) -> bool {
        let files = self.files.lock().expect("memfs lock");
        files.keys().any(|p| p.starts_with(path))
    }

    fn file_size(&self, path: &Path) -> Result<u64> {
        Ok(self.get(path)?.lock().expect("memfs lock").len() as u64)
    }

    fn remove_dir(&self, _dir: &Path) -> Result<()> {
        Ok(())
    }

    fn lock(&self, path: &Path, exclusive: bool) -> Result<Box<dyn super::FileLock>> {
        self.locks.lock(path, exclusive)
    }
}

#[derive(Debug)]
struct MemFile {
    path: PathBuf,
    data: Bytes,
}

impl RandomAccessFile for MemFile {
    fn read_at(&self, offset: u64, len: usize) -> Result<Bytes> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.data.len() as u64 => {
                Ok(self.data.slice(offset as usize..end as usize))
            }
            _ => Err(out_of_bounds(offset, len, self.data.len() as u64).at(self.path.display())),
        }
    }

    fn len(&self) -> u64 {
        self.data.len() as u64
    }
}

#[derive(Debug)]
struct MemWritable {
    data: Arc<Mutex<Vec<u8>>>,
    len: u64,
}

impl WritableFile for MemWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.data
            .lock()
            .expect("memfs lock")
            .extend_from_slice(data);
        self.len += data.len() as u64;
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        Ok(())
    }

    fn truncate(&mut self, len: u64) -> Result<()> {
        let mut data = self.data.lock().expect("memfs lock");
        data.truncate(len as usize);
        self.len = data.len() as u64;
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}
