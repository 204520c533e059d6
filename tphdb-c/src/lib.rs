//! The C API of tphdb: opaque handles, byte strings with lengths, errors
//! through `char **errptr` (RocksDB's `c.h` conventions). Every entry point
//! catches panics, so none unwinds into C. The header is
//! `include/tphdb.h`, generated from this file by cbindgen.
#![allow(clippy::missing_safety_doc)]
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::ptr;

use tphdb::{DBRawIterator, Error, Options, SyncPolicy, WriteBatch, WriteOptions, DB};

/// An open database.
pub struct tphdb_t {
    db: DB,
}

/// Options for tphdb_open; tphdb_options_create gives the defaults.
pub struct tphdb_options_t {
    opts: Options,
}

/// Puts and deletes applied together by tphdb_write.
pub struct tphdb_writebatch_t {
    batch: WriteBatch,
}

/// A cursor over the database as it was when the iterator was made.
pub struct tphdb_iterator_t {
    it: DBRawIterator<'static>,
}

fn message(e: &Error) -> String {
    let kind = match e {
        Error::Io { .. } => "IO error",
        Error::Corruption { .. } => "Corruption",
        Error::InvalidArgument(_) => "Invalid argument",
        Error::ReadOnly(_) => "Read-only",
        Error::Poisoned(_) => "Writes stopped",
        Error::Unsupported(_) => "Unsupported",
        Error::Busy(_) => "Busy",
        _ => "Error",
    };
    format!("{kind}: {e}")
}

/// A copy of `bytes` in memory from `malloc`, NUL-terminated (the NUL is
/// not counted in the length).
fn malloc_copy(bytes: &[u8]) -> *mut c_char {
    // SAFETY: a fresh allocation of len + 1 bytes, filled before use.
    unsafe {
        let p = libc::malloc(bytes.len() + 1) as *mut u8;
        if p.is_null() {
            return ptr::null_mut();
        }
        ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
        *p.add(bytes.len()) = 0;
        p as *mut c_char
    }
}

unsafe fn set_error(errptr: *mut *mut c_char, text: &str) {
    if errptr.is_null() {
        return;
    }
    if !(*errptr).is_null() {
        libc::free(*errptr as *mut c_void);
    }
    *errptr = malloc_copy(text.as_bytes());
}

/// Runs `f`, turning an error or a panic into `*errptr` and `fallback`.
unsafe fn guard<T>(
    errptr: *mut *mut c_char,
    fallback: T,
    f: impl FnOnce() -> Result<T, Error>,
) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            set_error(errptr, &message(&e));
            fallback
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            set_error(errptr, &format!("Internal: a panic in tphdb: {what}"));
            fallback
        }
    }
}

/// Runs `f` where no error is reported, swallowing a panic.
fn quiet(f: impl FnOnce()) {
    let _ = catch_unwind(AssertUnwindSafe(f));
}

unsafe fn bytes<'a>(p: *const c_char, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(p as *const u8, len)
    }
}

unsafe fn path_arg(p: *const c_char) -> Result<PathBuf, Error> {
    if p.is_null() {
        return Err(Error::InvalidArgument("a NULL path".into()));
    }
    let s = CStr::from_ptr(p)
        .to_str()
        .map_err(|_| Error::InvalidArgument("the path is not UTF-8".into()))?;
    Ok(PathBuf::from(s))
}

fn null_handle() -> Error {
    Error::InvalidArgument("a NULL handle".into())
}

/// Frees memory tphdb returned: values, properties and error messages.
#[no_mangle]
pub unsafe extern "C" fn tphdb_free(ptr: *mut c_void) {
    libc::free(ptr);
}

/// Default options: 64 MiB memtables, no sync but on request (a process
/// crash loses nothing, an OS crash the unsynced tail), mmap reads.
#[no_mangle]
pub extern "C" fn tphdb_options_create() -> *mut tphdb_options_t {
    Box::into_raw(Box::new(tphdb_options_t {
        opts: Options::default(),
    }))
}

#[no_mangle]
pub unsafe extern "C" fn tphdb_options_destroy(options: *mut tphdb_options_t) {
    if !options.is_null() {
        drop(Box::from_raw(options));
    }
}

/// Bytes of one memtable (RocksDB's write_buffer_size).
#[no_mangle]
pub unsafe extern "C" fn tphdb_options_set_write_buffer_size(
    options: *mut tphdb_options_t,
    bytes: usize,
) {
    if let Some(o) = options.as_mut() {
        o.opts.write_buffer_bytes = bytes;
    }
}

/// One bound for the memory the engine holds, split among memtables,
/// caches and compactions (0: no overall bound).
#[no_mangle]
pub unsafe extern "C" fn tphdb_options_set_memory_budget(
    options: *mut tphdb_options_t,
    bytes: u64,
) {
    if let Some(o) = options.as_mut() {
        o.opts.memory_budget_bytes = (bytes > 0).then_some(bytes as usize);
    }
}

/// When the WAL is synced: 0 never (the OS decides), 1 after every write,
/// N > 1 every N milliseconds.
#[no_mangle]
pub unsafe extern "C" fn tphdb_options_set_sync_interval_ms(
    options: *mut tphdb_options_t,
    ms: u32,
) {
    if let Some(o) = options.as_mut() {
        o.opts.sync_policy = match ms {
            0 => SyncPolicy::Never,
            1 => SyncPolicy::EveryWrite,
            n => SyncPolicy::IntervalMs(n.into()),
        };
    }
}

/// One-level mode: flushes merge straight into one level of TPHs.
#[no_mangle]
pub unsafe extern "C" fn tphdb_options_set_one_level(options: *mut tphdb_options_t, on: c_int) {
    if let Some(o) = options.as_mut() {
        o.opts.one_level = on != 0;
    }
}

unsafe fn open_with(
    options: *const tphdb_options_t,
    path: *const c_char,
    errptr: *mut *mut c_char,
    read_only: bool,
) -> *mut tphdb_t {
    guard(errptr, ptr::null_mut(), || {
        let path = path_arg(path)?;
        let default = Options::default();
        let opts = options.as_ref().map_or(&default, |o| &o.opts);
        let db = if read_only {
            DB::open_for_read_only(opts, path)?
        } else {
            DB::open(opts, path)?
        };
        Ok(Box::into_raw(Box::new(tphdb_t { db })))
    })
}

/// Opens (or creates) the database in `path`; NULL options mean the
/// defaults. Returns NULL and sets *errptr on failure.
#[no_mangle]
pub unsafe extern "C" fn tphdb_open(
    options: *const tphdb_options_t,
    path: *const c_char,
    errptr: *mut *mut c_char,
) -> *mut tphdb_t {
    open_with(options, path, errptr, false)
}

/// Opens an existing database for reading; many processes may at once.
#[no_mangle]
pub unsafe extern "C" fn tphdb_open_for_read_only(
    options: *const tphdb_options_t,
    path: *const c_char,
    errptr: *mut *mut c_char,
) -> *mut tphdb_t {
    open_with(options, path, errptr, true)
}

/// Waits for background work, syncs the WAL and frees the handle; reports
/// an error that stopped writes earlier. The handle is freed either way.
#[no_mangle]
pub unsafe extern "C" fn tphdb_close(db: *mut tphdb_t, errptr: *mut *mut c_char) {
    if db.is_null() {
        return;
    }
    let db = Box::from_raw(db);
    guard(errptr, (), || db.db.close());
}

unsafe fn with_db<T>(
    db: *const tphdb_t,
    errptr: *mut *mut c_char,
    fallback: T,
    f: impl FnOnce(&DB) -> Result<T, Error>,
) -> T {
    guard(errptr, fallback, || {
        let db = db.as_ref().ok_or_else(null_handle)?;
        f(&db.db)
    })
}

fn write_options(sync: c_int) -> WriteOptions {
    WriteOptions {
        sync: sync != 0,
        ..WriteOptions::default()
    }
}

/// Sets a key; with `sync` non-zero the write is on the device before this
/// returns.
#[no_mangle]
pub unsafe extern "C" fn tphdb_put(
    db: *mut tphdb_t,
    key: *const c_char,
    key_len: usize,
    value: *const c_char,
    value_len: usize,
    sync: c_int,
    errptr: *mut *mut c_char,
) {
    with_db(db, errptr, (), |db| {
        db.put_opt(
            bytes(key, key_len),
            bytes(value, value_len),
            &write_options(sync),
        )
    })
}

/// Removes a key.
#[no_mangle]
pub unsafe extern "C" fn tphdb_delete(
    db: *mut tphdb_t,
    key: *const c_char,
    key_len: usize,
    sync: c_int,
    errptr: *mut *mut c_char,
) {
    with_db(db, errptr, (), |db| {
        db.delete_opt(bytes(key, key_len), &write_options(sync))
    })
}

/// The value of a key, or NULL if it is missing (or on error, with
/// *errptr set). The value is NUL-terminated for convenience; `*value_len`
/// is its length without the NUL. Free it with tphdb_free.
#[no_mangle]
pub unsafe extern "C" fn tphdb_get(
    db: *mut tphdb_t,
    key: *const c_char,
    key_len: usize,
    value_len: *mut usize,
    errptr: *mut *mut c_char,
) -> *mut c_char {
    with_db(db, errptr, ptr::null_mut(), |db| {
        let Some(v) = db.get_pinned(bytes(key, key_len))? else {
            return Ok(ptr::null_mut());
        };
        if let Some(len) = value_len.as_mut() {
            *len = v.len();
        }
        Ok(malloc_copy(&v))
    })
}

/// An empty write batch.
#[no_mangle]
pub extern "C" fn tphdb_writebatch_create() -> *mut tphdb_writebatch_t {
    Box::into_raw(Box::new(tphdb_writebatch_t {
        batch: WriteBatch::new(),
    }))
}

#[no_mangle]
pub unsafe extern "C" fn tphdb_writebatch_destroy(batch: *mut tphdb_writebatch_t) {
    if !batch.is_null() {
        drop(Box::from_raw(batch));
    }
}

#[no_mangle]
pub unsafe extern "C" fn tphdb_writebatch_put(
    batch: *mut tphdb_writebatch_t,
    key: *const c_char,
    key_len: usize,
    value: *const c_char,
    value_len: usize,
) {
    if let Some(b) = batch.as_mut() {
        quiet(|| b.batch.put(bytes(key, key_len), bytes(value, value_len)));
    }
}

#[no_mangle]
pub unsafe extern "C" fn tphdb_writebatch_delete(
    batch: *mut tphdb_writebatch_t,
    key: *const c_char,
    key_len: usize,
) {
    if let Some(b) = batch.as_mut() {
        quiet(|| b.batch.delete(bytes(key, key_len)));
    }
}

/// Operations in the batch.
#[no_mangle]
pub unsafe extern "C" fn tphdb_writebatch_count(batch: *const tphdb_writebatch_t) -> usize {
    batch.as_ref().map_or(0, |b| b.batch.len())
}

#[no_mangle]
pub unsafe extern "C" fn tphdb_writebatch_clear(batch: *mut tphdb_writebatch_t) {
    if let Some(b) = batch.as_mut() {
        b.batch = WriteBatch::new();
    }
}

/// Applies the batch atomically. The batch is left as it was.
#[no_mangle]
pub unsafe extern "C" fn tphdb_write(
    db: *mut tphdb_t,
    batch: *const tphdb_writebatch_t,
    sync: c_int,
    errptr: *mut *mut c_char,
) {
    with_db(db, errptr, (), |db| {
        let b = batch.as_ref().ok_or_else(null_handle)?;
        db.write_opt(b.batch.clone(), &write_options(sync))
    })
}

/// Flushes the memtables to TPHs and waits for it.
#[no_mangle]
pub unsafe extern "C" fn tphdb_flush(db: *mut tphdb_t, errptr: *mut *mut c_char) {
    with_db(db, errptr, (), |db| db.flush())
}

/// Compacts everything into the bottom level.
#[no_mangle]
pub unsafe extern "C" fn tphdb_compact(db: *mut tphdb_t, errptr: *mut *mut c_char) {
    with_db(db, errptr, (), |db| db.compact_range(None, None))
}

/// A consistent copy of the open database in the new directory `path`.
#[no_mangle]
pub unsafe extern "C" fn tphdb_checkpoint(
    db: *mut tphdb_t,
    path: *const c_char,
    errptr: *mut *mut c_char,
) {
    with_db(db, errptr, (), |db| db.checkpoint(path_arg(path)?))
}

/// A named property ("tphdb.stats", "tphdb.estimate-num-keys", ...), or
/// NULL if there is none. Free it with tphdb_free.
#[no_mangle]
pub unsafe extern "C" fn tphdb_property_value(
    db: *mut tphdb_t,
    name: *const c_char,
) -> *mut c_char {
    with_db(db, ptr::null_mut(), ptr::null_mut(), |db| {
        if name.is_null() {
            return Ok(ptr::null_mut());
        }
        let name = CStr::from_ptr(name).to_string_lossy();
        Ok(db
            .property_value(&name)?
            .map_or(ptr::null_mut(), |v| malloc_copy(v.as_bytes())))
    })
}

/// An iterator over the database as it is now, not positioned: call a
/// seek first. It stays valid after the database is closed.
#[no_mangle]
pub unsafe extern "C" fn tphdb_create_iterator(db: *mut tphdb_t) -> *mut tphdb_iterator_t {
    with_db(db, ptr::null_mut(), ptr::null_mut(), |db| {
        Ok(Box::into_raw(Box::new(tphdb_iterator_t {
            it: db.raw_iterator_unbound(None, None),
        })))
    })
}

#[no_mangle]
pub unsafe extern "C" fn tphdb_iter_destroy(iter: *mut tphdb_iterator_t) {
    if !iter.is_null() {
        drop(Box::from_raw(iter));
    }
}

unsafe fn with_iter(iter: *mut tphdb_iterator_t, f: impl FnOnce(&mut DBRawIterator<'static>)) {
    if let Some(i) = iter.as_mut() {
        quiet(|| f(&mut i.it));
    }
}

#[no_mangle]
pub unsafe extern "C" fn tphdb_iter_seek_to_first(iter: *mut tphdb_iterator_t) {
    with_iter(iter, |i| i.seek_to_first());
}

#[no_mangle]
pub unsafe extern "C" fn tphdb_iter_seek_to_last(iter: *mut tphdb_iterator_t) {
    with_iter(iter, |i| i.seek_to_last());
}

/// Positions at the first key at or after `key`.
#[no_mangle]
pub unsafe extern "C" fn tphdb_iter_seek(
    iter: *mut tphdb_iterator_t,
    key: *const c_char,
    key_len: usize,
) {
    with_iter(iter, |i| i.seek(bytes(key, key_len)));
}

/// Positions at the last key at or before `key`.
#[no_mangle]
pub unsafe extern "C" fn tphdb_iter_seek_for_prev(
    iter: *mut tphdb_iterator_t,
    key: *const c_char,
    key_len: usize,
) {
    with_iter(iter, |i| i.seek_for_prev(bytes(key, key_len)));
}

#[no_mangle]
pub unsafe extern "C" fn tphdb_iter_next(iter: *mut tphdb_iterator_t) {
    with_iter(iter, |i| i.next());
}

#[no_mangle]
pub unsafe extern "C" fn tphdb_iter_prev(iter: *mut tphdb_iterator_t) {
    with_iter(iter, |i| i.prev());
}

/// Non-zero while the iterator is on an entry.
#[no_mangle]
pub unsafe extern "C" fn tphdb_iter_valid(iter: *const tphdb_iterator_t) -> c_int {
    iter.as_ref().map_or(0, |i| c_int::from(i.it.valid()))
}

/// The current key, owned by the iterator until it moves.
#[no_mangle]
pub unsafe extern "C" fn tphdb_iter_key(
    iter: *const tphdb_iterator_t,
    len: *mut usize,
) -> *const c_char {
    let key = iter.as_ref().and_then(|i| i.it.key());
    slice_out(key, len)
}

/// The current value, owned by the iterator until it moves.
#[no_mangle]
pub unsafe extern "C" fn tphdb_iter_value(
    iter: *const tphdb_iterator_t,
    len: *mut usize,
) -> *const c_char {
    let value = iter.as_ref().and_then(|i| i.it.value());
    slice_out(value, len)
}

unsafe fn slice_out(s: Option<&[u8]>, len: *mut usize) -> *const c_char {
    if let Some(l) = len.as_mut() {
        *l = s.map_or(0, <[u8]>::len);
    }
    s.map_or(ptr::null(), |s| s.as_ptr() as *const c_char)
}

/// Sets *errptr if the iterator stopped on an error (it is then not
/// valid).
#[no_mangle]
pub unsafe extern "C" fn tphdb_iter_get_error(
    iter: *const tphdb_iterator_t,
    errptr: *mut *mut c_char,
) {
    guard(errptr, (), || {
        iter.as_ref().ok_or_else(null_handle)?.it.status()
    });
}
