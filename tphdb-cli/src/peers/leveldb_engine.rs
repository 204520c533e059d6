//! LevelDB through its C API (`leveldb/c.h`), linked to the system
//! library: no compression, an 8 MiB block cache (its default), no Bloom
//! filter (its default), no sync per write.

use std::ffi::{c_char, c_int, c_void, CString};
use std::path::Path;

use tphdb_cli::engines::{EngineConfig, Kv, Result, WriteCounters};

#[repr(C)]
struct LdbT(c_void);
#[repr(C)]
struct LdbOptions(c_void);
#[repr(C)]
struct LdbReadOptions(c_void);
#[repr(C)]
struct LdbWriteOptions(c_void);
#[repr(C)]
struct LdbIterator(c_void);

#[link(name = "leveldb")]
extern "C" {
    fn leveldb_options_create() -> *mut LdbOptions;
    fn leveldb_options_destroy(o: *mut LdbOptions);
    fn leveldb_options_set_create_if_missing(o: *mut LdbOptions, v: u8);
    fn leveldb_options_set_compression(o: *mut LdbOptions, v: c_int);
    fn leveldb_readoptions_create() -> *mut LdbReadOptions;
    fn leveldb_readoptions_destroy(o: *mut LdbReadOptions);
    fn leveldb_writeoptions_create() -> *mut LdbWriteOptions;
    fn leveldb_writeoptions_destroy(o: *mut LdbWriteOptions);
    fn leveldb_open(o: *const LdbOptions, name: *const c_char, err: *mut *mut c_char) -> *mut LdbT;
    fn leveldb_close(db: *mut LdbT);
    fn leveldb_put(
        db: *mut LdbT,
        o: *const LdbWriteOptions,
        k: *const c_char,
        kl: usize,
        v: *const c_char,
        vl: usize,
        err: *mut *mut c_char,
    );
    fn leveldb_delete(
        db: *mut LdbT,
        o: *const LdbWriteOptions,
        k: *const c_char,
        kl: usize,
        err: *mut *mut c_char,
    );
    fn leveldb_get(
        db: *mut LdbT,
        o: *const LdbReadOptions,
        k: *const c_char,
        kl: usize,
        vl: *mut usize,
        err: *mut *mut c_char,
    ) -> *mut c_char;
    fn leveldb_create_iterator(db: *mut LdbT, o: *const LdbReadOptions) -> *mut LdbIterator;
    fn leveldb_iter_destroy(it: *mut LdbIterator);
    fn leveldb_iter_valid(it: *const LdbIterator) -> u8;
    fn leveldb_iter_seek(it: *mut LdbIterator, k: *const c_char, kl: usize);
    fn leveldb_iter_next(it: *mut LdbIterator);
    fn leveldb_iter_value(it: *const LdbIterator, vl: *mut usize) -> *const c_char;
    fn leveldb_iter_get_error(it: *const LdbIterator, err: *mut *mut c_char);
    fn leveldb_property_value(db: *mut LdbT, name: *const c_char) -> *mut c_char;
    fn leveldb_free(p: *mut c_void);
}

/// Turns a LevelDB error out-parameter into a `Result`, freeing it.
fn check(err: *mut c_char) -> Result<()> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: LevelDB sets `err` to a NUL-terminated malloc'd string.
    let msg = unsafe { std::ffi::CStr::from_ptr(err) }
        .to_string_lossy()
        .into_owned();
    unsafe { leveldb_free(err.cast()) };
    Err(format!("leveldb: {msg}").into())
}

pub struct LevelDb {
    db: *mut LdbT,
    read: *mut LdbReadOptions,
    write: *mut LdbWriteOptions,
}

// SAFETY: leveldb_t is safe for concurrent use (LevelDB's threading
// guarantees); the option objects are only read after creation.
unsafe impl Send for LevelDb {}
unsafe impl Sync for LevelDb {}

impl LevelDb {
    pub fn open(dir: &Path, _cfg: &EngineConfig) -> Result<LevelDb> {
        let name = CString::new(dir.to_string_lossy().as_bytes())?;
        let mut err = std::ptr::null_mut();
        // SAFETY: plain C API calls on objects created here.
        unsafe {
            let opts = leveldb_options_create();
            leveldb_options_set_create_if_missing(opts, 1);
            leveldb_options_set_compression(opts, 0);
            let db = leveldb_open(opts, name.as_ptr(), &mut err);
            leveldb_options_destroy(opts);
            check(err)?;
            Ok(LevelDb {
                db,
                read: leveldb_readoptions_create(),
                write: leveldb_writeoptions_create(),
            })
        }
    }
}

impl Drop for LevelDb {
    fn drop(&mut self) {
        // SAFETY: each pointer was created in `open` and is freed once.
        unsafe {
            leveldb_close(self.db);
            leveldb_readoptions_destroy(self.read);
            leveldb_writeoptions_destroy(self.write);
        }
    }
}

impl Kv for LevelDb {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut err = std::ptr::null_mut();
        // SAFETY: the slices outlive the call; LevelDB copies them.
        unsafe {
            leveldb_put(
                self.db,
                self.write,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                &mut err,
            )
        };
        check(err)
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>> {
        let (mut err, mut len) = (std::ptr::null_mut(), 0usize);
        // SAFETY: the returned buffer is malloc'd by LevelDB and freed here.
        let v = unsafe {
            leveldb_get(
                self.db,
                self.read,
                key.as_ptr().cast(),
                key.len(),
                &mut len,
                &mut err,
            )
        };
        check(err)?;
        if v.is_null() {
            return Ok(None);
        }
        unsafe { leveldb_free(v.cast()) };
        Ok(Some(len))
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        let mut err = std::ptr::null_mut();
        // SAFETY: as in `put`.
        unsafe {
            leveldb_delete(
                self.db,
                self.write,
                key.as_ptr().cast(),
                key.len(),
                &mut err,
            )
        };
        check(err)
    }

    fn scan(&self, start: &[u8], n: usize) -> Result<usize> {
        let mut read = 0;
        let mut err = std::ptr::null_mut();
        // SAFETY: the iterator is created, used and destroyed here; value
        // pointers are read before the next move.
        unsafe {
            let it = leveldb_create_iterator(self.db, self.read);
            leveldb_iter_seek(it, start.as_ptr().cast(), start.len());
            while read < n && leveldb_iter_valid(it) != 0 {
                let mut len = 0;
                std::hint::black_box(leveldb_iter_value(it, &mut len));
                read += 1;
                leveldb_iter_next(it);
            }
            leveldb_iter_get_error(it, &mut err);
            leveldb_iter_destroy(it);
        }
        check(err)?;
        Ok(read)
    }

    /// Flushes and compactions, from the "Write(MB)" column of LevelDB's
    /// compaction table (`leveldb.stats`), in whole MB as it prints them.
    fn write_counters(&self) -> Option<WriteCounters> {
        let name = CString::new("leveldb.stats").ok()?;
        // SAFETY: the property string is malloc'd by LevelDB (or null).
        let text = unsafe {
            let p = leveldb_property_value(self.db, name.as_ptr());
            if p.is_null() {
                return None;
            }
            let s = std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned();
            leveldb_free(p.cast());
            s
        };
        let mb: f64 = text
            .lines()
            .filter_map(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                // Level Files Size(MB) Time(sec) Read(MB) Write(MB)
                (cols.len() == 6 && cols[0].parse::<u32>().is_ok())
                    .then(|| cols[5].parse::<f64>().ok())
                    .flatten()
            })
            .sum();
        Some(WriteCounters {
            flush_and_compaction: (mb * 1048576.0) as u64,
            wal: None,
        })
    }

    fn settle(&self) -> Result<()> {
        // The C API can neither flush nor wait for compactions: wait until
        // level 0 is below LevelDB's compaction trigger (4 files).
        let name = CString::new("leveldb.num-files-at-level0")?;
        for _ in 0..600 {
            // SAFETY: the property string is malloc'd by LevelDB (or null).
            let files = unsafe {
                let p = leveldb_property_value(self.db, name.as_ptr());
                if p.is_null() {
                    return Ok(());
                }
                let n = std::ffi::CStr::from_ptr(p)
                    .to_string_lossy()
                    .trim()
                    .parse::<u32>()
                    .unwrap_or(0);
                leveldb_free(p.cast());
                n
            };
            if files < 4 {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Ok(())
    }
}
