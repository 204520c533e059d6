//! The `tphdb` Python module: bytes in, bytes out; the GIL is released
//! for every call into the engine; errors are exceptions whose class tells
//! corruption, I/O, a busy database and the rest apart. `tphdb.pyi` is the
//! typed surface.

use std::sync::{Mutex, RwLock, RwLockReadGuard};

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

create_exception!(tphdb, Error, PyException, "Any error tphdb reports.");
create_exception!(
    tphdb,
    CorruptionError,
    Error,
    "Bytes on disk are not what tphdb wrote."
);
create_exception!(
    tphdb,
    IoError,
    Error,
    "The operating system reported an I/O error."
);
create_exception!(
    tphdb,
    BusyError,
    Error,
    "Another process or handle has the database open."
);
create_exception!(
    tphdb,
    ReadOnlyError,
    Error,
    "The database was opened read-only."
);
create_exception!(
    tphdb,
    InvalidArgumentError,
    Error,
    "An argument tphdb cannot accept."
);
create_exception!(
    tphdb,
    WritesStoppedError,
    Error,
    "Writes stopped after an error whose effect on disk is unknown; reopen to write again."
);
create_exception!(
    tphdb,
    ClosedError,
    Error,
    "The database (or snapshot) is closed."
);

fn to_py(e: tphdb::Error) -> PyErr {
    let text = e.to_string();
    match e {
        tphdb::Error::Io { .. } => IoError::new_err(text),
        tphdb::Error::Corruption { .. } => CorruptionError::new_err(text),
        tphdb::Error::Busy(_) => BusyError::new_err(text),
        tphdb::Error::ReadOnly(_) => ReadOnlyError::new_err(text),
        tphdb::Error::InvalidArgument(_) => InvalidArgumentError::new_err(text),
        tphdb::Error::Poisoned(_) => WritesStoppedError::new_err(text),
        _ => Error::new_err(text),
    }
}

fn closed() -> PyErr {
    ClosedError::new_err("the database is closed")
}

fn write_options(sync: bool) -> tphdb::WriteOptions {
    tphdb::WriteOptions {
        sync,
        ..Default::default()
    }
}

/// Options from `DB(...)`'s keyword arguments.
#[allow(clippy::too_many_arguments)]
fn options(
    create_if_missing: bool,
    write_buffer_size: Option<usize>,
    memory_budget: Option<usize>,
    sync: Option<&Bound<'_, PyAny>>,
    one_level: bool,
    read_mode: Option<&str>,
    block_cache_size: Option<usize>,
    compression: Option<&str>,
    background_threads: Option<usize>,
) -> PyResult<tphdb::Options> {
    let mut o = tphdb::Options {
        create_if_missing,
        one_level,
        memory_budget_bytes: memory_budget,
        ..tphdb::Options::default()
    };
    if let Some(n) = write_buffer_size {
        o.write_buffer_bytes = n;
    }
    if let Some(n) = block_cache_size {
        o.block_cache_bytes = n;
    }
    if let Some(n) = background_threads {
        o.background_threads = n;
    }
    if let Some(s) = sync {
        o.sync_policy = if let Ok(ms) = s.extract::<u64>() {
            tphdb::SyncPolicy::IntervalMs(ms)
        } else {
            match s.extract::<String>()?.as_str() {
                "always" => tphdb::SyncPolicy::EveryWrite,
                "never" => tphdb::SyncPolicy::Never,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "sync must be 'always', 'never' or milliseconds, not {other:?}"
                    )))
                }
            }
        };
    }
    if let Some(m) = read_mode {
        o.read_mode = named_choice(
            "read_mode",
            m,
            &[
                ("mmap", tphdb::ReadMode::Mmap),
                ("pread", tphdb::ReadMode::Pread),
                ("direct", tphdb::ReadMode::Direct),
            ],
        )?;
    }
    if let Some(c) = compression {
        o.compression = named_choice(
            "compression",
            c,
            &[
                ("none", tphdb::Compression::None),
                ("lz4", tphdb::Compression::Lz4),
            ],
        )?;
    }
    Ok(o)
}

/// An open database. Keys and values are `bytes`.
#[pyclass(name = "DB", module = "tphdb")]
struct Db {
    /// `None` once closed; calls hold the read lock, `close` the write lock.
    db: RwLock<Option<tphdb::DB>>,
    path: String,
}

impl Db {
    fn apply(&self, py: Python<'_>, batch: tphdb::WriteBatch, sync: bool) -> PyResult<()> {
        self.run(py, move |db| db.write_opt(batch, &write_options(sync)))
    }

    fn handle(&self) -> PyResult<RwLockReadGuard<'_, Option<tphdb::DB>>> {
        let guard = self
            .db
            .read()
            .map_err(|_| Error::new_err("a lock was poisoned"))?;
        if guard.is_none() {
            return Err(closed());
        }
        Ok(guard)
    }

    /// Runs `f` on the database with the GIL released.
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&tphdb::DB) -> tphdb::Result<T> + Send,
    ) -> PyResult<T> {
        let guard = self.handle()?;
        let db = guard.as_ref().ok_or_else(closed)?;
        py.allow_threads(|| f(db)).map_err(to_py)
    }
}

fn bytes_or_none(py: Python<'_>, v: Option<Vec<u8>>) -> Option<Py<PyBytes>> {
    v.map(|v| PyBytes::new(py, &v).unbind())
}

#[pymethods]
impl Db {
    /// Opens (or creates) the database in `path`.
    #[new]
    #[pyo3(signature = (
        path, *, read_only=false, create_if_missing=true, write_buffer_size=None,
        memory_budget=None, sync=None, one_level=false, read_mode=None,
        block_cache_size=None, compression=None, background_threads=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: std::path::PathBuf,
        read_only: bool,
        create_if_missing: bool,
        write_buffer_size: Option<usize>,
        memory_budget: Option<usize>,
        sync: Option<&Bound<'_, PyAny>>,
        one_level: bool,
        read_mode: Option<&str>,
        block_cache_size: Option<usize>,
        compression: Option<&str>,
        background_threads: Option<usize>,
    ) -> PyResult<Db> {
        let opts = options(
            create_if_missing,
            write_buffer_size,
            memory_budget,
            sync,
            one_level,
            read_mode,
            block_cache_size,
            compression,
            background_threads,
        )?;
        let p = path.clone();
        let db = py
            .allow_threads(move || {
                if read_only {
                    tphdb::DB::open_for_read_only(&opts, &p)
                } else {
                    tphdb::DB::open(&opts, &p)
                }
            })
            .map_err(to_py)?;
        Ok(Db {
            db: RwLock::new(Some(db)),
            path: path.display().to_string(),
        })
    }

    /// The value of `key`, or `default` if it is missing.
    #[pyo3(signature = (key, default=None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &[u8],
        default: Option<PyObject>,
    ) -> PyResult<Option<PyObject>> {
        match self.run(py, |db| db.get(key))? {
            Some(v) => Ok(Some(PyBytes::new(py, &v).into_any().unbind())),
            None => Ok(default),
        }
    }

    /// Sets `key` to `value`; with `sync=True` it is on the device before
    /// this returns.
    #[pyo3(signature = (key, value, sync=false))]
    fn put(&self, py: Python<'_>, key: &[u8], value: &[u8], sync: bool) -> PyResult<()> {
        self.run(py, |db| db.put_opt(key, value, &write_options(sync)))
    }

    /// Removes `key` (nothing happens if it is missing).
    #[pyo3(signature = (key, sync=false))]
    fn delete(&self, py: Python<'_>, key: &[u8], sync: bool) -> PyResult<()> {
        self.run(py, |db| db.delete_opt(key, &write_options(sync)))
    }

    fn __getitem__(&self, py: Python<'_>, key: &[u8]) -> PyResult<Py<PyBytes>> {
        bytes_or_none(py, self.run(py, |db| db.get(key))?)
            .ok_or_else(|| PyKeyError::new_err(PyBytes::new(py, key).unbind()))
    }

    fn __setitem__(&self, py: Python<'_>, key: &[u8], value: &[u8]) -> PyResult<()> {
        self.put(py, key, value, false)
    }

    /// Deleting a missing key is not an error (as in RocksDB).
    fn __delitem__(&self, py: Python<'_>, key: &[u8]) -> PyResult<()> {
        self.delete(py, key, false)
    }

    fn __contains__(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        Ok(self.run(py, |db| db.get_pinned(key))?.is_some())
    }

    /// Keys in order.
    fn __iter__(&self, py: Python<'_>) -> PyResult<Scan> {
        let guard = self.handle()?;
        let db = guard.as_ref().ok_or_else(closed)?;
        let it = py.allow_threads(|| db.raw_iterator_unbound(None, None));
        Ok(Scan::new(it, false, true))
    }

    /// A batch whose puts and deletes apply atomically when the `with`
    /// block ends without an exception (or with `DB.write`).
    #[pyo3(signature = (sync=false))]
    fn write_batch(slf: Py<Self>, sync: bool) -> Batch {
        Batch {
            batch: Mutex::new(tphdb::WriteBatch::new()),
            db: Some(slf),
            sync,
        }
    }

    /// Applies `batch` atomically.
    #[pyo3(signature = (batch, sync=false))]
    fn write(&self, py: Python<'_>, batch: PyRef<'_, Batch>, sync: bool) -> PyResult<()> {
        let b = batch.lock()?.clone();
        self.apply(py, b, sync)
    }

    /// `(key, value)` pairs in key order (descending with `reverse`) from
    /// `start` (inclusive) to `stop` (exclusive), both in key order, and
    /// only keys beginning with `prefix`; from `snapshot` if given.
    #[pyo3(signature = (start=None, stop=None, reverse=false, prefix=None, snapshot=None, keys_only=false))]
    #[allow(clippy::too_many_arguments)]
    fn iterate(
        &self,
        py: Python<'_>,
        start: Option<Vec<u8>>,
        stop: Option<Vec<u8>>,
        reverse: bool,
        prefix: Option<Vec<u8>>,
        snapshot: Option<PyRef<'_, Snapshot>>,
        keys_only: bool,
    ) -> PyResult<Scan> {
        let (lower, upper) = tphdb::prefix_bounds(start, stop, prefix.as_deref());
        let it = match snapshot {
            Some(s) => {
                let guard = s
                    .snap
                    .lock()
                    .map_err(|_| Error::new_err("a lock was poisoned"))?;
                let snap = guard.as_ref().ok_or_else(closed)?;
                snap.raw_iterator_unbound(lower, upper)
            }
            None => {
                let guard = self.handle()?;
                let db = guard.as_ref().ok_or_else(closed)?;
                py.allow_threads(|| db.raw_iterator_unbound(lower, upper))
            }
        };
        Ok(Scan::new(it, reverse, keys_only))
    }

    /// A consistent view that later writes do not change.
    fn snapshot(&self) -> PyResult<Snapshot> {
        let guard = self.handle()?;
        let db = guard.as_ref().ok_or_else(closed)?;
        Ok(Snapshot {
            snap: Mutex::new(Some(db.snapshot_unbound())),
        })
    }

    /// Loads `(key, value)` pairs in any order without the WAL (a later
    /// value of a key wins); returns how many were read.
    fn ingest(&self, py: Python<'_>, entries: &Bound<'_, PyAny>) -> PyResult<u64> {
        let guard = self.handle()?;
        let db = guard.as_ref().ok_or_else(closed)?;
        let mut loader = db.bulk_loader();
        for item in entries.try_iter()? {
            let (k, v): (Vec<u8>, Vec<u8>) = item?.extract()?;
            // Most puts only buffer; the GIL is released for the chunk
            // writes inside when they wait.
            py.allow_threads(|| loader.put(&k, &v)).map_err(to_py)?;
        }
        let report = py.allow_threads(|| loader.finish()).map_err(to_py)?;
        Ok(report.entries)
    }

    /// Flushes the memtables to disk and waits for it.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |db| db.flush())
    }

    /// Compacts everything into the bottom level.
    fn compact(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |db| db.compact_range(None, None))
    }

    /// Waits until no flush or compaction is running or due.
    fn wait_for_compactions(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |db| db.wait_for_compactions())
    }

    /// A consistent copy of the open database in the new directory `path`.
    fn checkpoint(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        self.run(py, move |db| db.checkpoint(&path))
    }

    /// A named property (`tphdb.stats`, `tphdb.estimate-num-keys`, ...).
    fn property(&self, py: Python<'_>, name: &str) -> PyResult<Option<String>> {
        self.run(py, |db| db.property_value(name))
    }

    /// Statistics as a dict of numbers.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.run(py, |db| Ok(db.stats()))?;
        let d = PyDict::new(py);
        macro_rules! put {
            ($($field:ident),*) => { $( d.set_item(stringify!($field), s.$field)?; )* };
        }
        put!(
            writes,
            user_bytes_written,
            disk_bytes_written,
            disk_bytes_read,
            write_amplification,
            wal_amplification,
            read_amplification,
            gets,
            get_hits,
            get_block_reads,
            reads_per_get,
            block_cache_hits,
            block_cache_misses,
            block_cache_bytes,
            block_cache_capacity,
            wal_bytes,
            wal_syncs,
            index_memory_bytes,
            index_bytes_per_key,
            memtable_bytes,
            immutable_memtables,
            pinned_memtable_bytes,
            flushes,
            flush_micros,
            compactions,
            compaction_micros,
            stall_micros,
            open_micros
        );
        d.set_item("levels", s.levels.len())?;
        Ok(d)
    }

    /// The database directory.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// True once `close` ran.
    #[getter]
    fn closed(&self) -> bool {
        self.db.read().map(|g| g.is_none()).unwrap_or(true)
    }

    /// Waits for background work, syncs the WAL and releases the database.
    /// Closing twice is allowed.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        // Waits for calls in other threads to finish.
        let taken = py
            .allow_threads(|| self.db.write().map(|mut g| g.take()).map_err(|_| ()))
            .map_err(|()| Error::new_err("a lock was poisoned"))?;
        match taken {
            Some(db) => py.allow_threads(move || db.close()).map_err(to_py),
            None => Ok(()),
        }
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("tphdb.DB({:?})", self.path)
    }
}

/// Puts and deletes applied together.
#[pyclass(name = "WriteBatch", module = "tphdb")]
struct Batch {
    batch: Mutex<tphdb::WriteBatch>,
    /// The database a `with` block applies it to.
    db: Option<Py<Db>>,
    sync: bool,
}

impl Batch {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, tphdb::WriteBatch>> {
        self.batch
            .lock()
            .map_err(|_| Error::new_err("a lock was poisoned"))
    }
}

#[pymethods]
impl Batch {
    #[new]
    fn new() -> Batch {
        Batch {
            batch: Mutex::new(tphdb::WriteBatch::new()),
            db: None,
            sync: false,
        }
    }

    fn put(&self, key: &[u8], value: &[u8]) -> PyResult<()> {
        self.lock()?.put(key, value);
        Ok(())
    }

    fn delete(&self, key: &[u8]) -> PyResult<()> {
        self.lock()?.delete(key);
        Ok(())
    }

    fn clear(&self) -> PyResult<()> {
        *self.lock()? = tphdb::WriteBatch::new();
        Ok(())
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.lock()?.len())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Applies the batch if the block ended without an exception.
    #[pyo3(signature = (exc_type, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some_and(|t| !t.is_none()) {
            return Ok(false);
        }
        let db = self
            .db
            .as_ref()
            .ok_or_else(|| PyTypeError::new_err("use DB.write_batch() as a context manager"))?;
        let batch = self.lock()?.clone();
        db.borrow(py).apply(py, batch, self.sync)?;
        Ok(false)
    }
}

/// A frozen view of the database.
#[pyclass(name = "Snapshot", module = "tphdb")]
struct Snapshot {
    /// `None` once closed: the memtables and pieces it pinned are released.
    snap: Mutex<Option<tphdb::Snapshot<'static>>>,
}

impl Snapshot {
    fn get_raw(&self, py: Python<'_>, key: &[u8]) -> PyResult<Option<Vec<u8>>> {
        let guard = self
            .snap
            .lock()
            .map_err(|_| Error::new_err("a lock was poisoned"))?;
        let snap = guard.as_ref().ok_or_else(closed)?;
        py.allow_threads(|| snap.get(key)).map_err(to_py)
    }
}

#[pymethods]
impl Snapshot {
    #[pyo3(signature = (key, default=None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &[u8],
        default: Option<PyObject>,
    ) -> PyResult<Option<PyObject>> {
        match self.get_raw(py, key)? {
            Some(v) => Ok(Some(PyBytes::new(py, &v).into_any().unbind())),
            None => Ok(default),
        }
    }

    fn __getitem__(&self, py: Python<'_>, key: &[u8]) -> PyResult<Py<PyBytes>> {
        bytes_or_none(py, self.get_raw(py, key)?)
            .ok_or_else(|| PyKeyError::new_err(PyBytes::new(py, key).unbind()))
    }

    fn __contains__(&self, py: Python<'_>, key: &[u8]) -> PyResult<bool> {
        Ok(self.get_raw(py, key)?.is_some())
    }

    /// As `DB.iterate`, over the snapshot.
    #[pyo3(signature = (start=None, stop=None, reverse=false, prefix=None, keys_only=false))]
    fn iterate(
        &self,
        start: Option<Vec<u8>>,
        stop: Option<Vec<u8>>,
        reverse: bool,
        prefix: Option<Vec<u8>>,
        keys_only: bool,
    ) -> PyResult<Scan> {
        let (lower, upper) = tphdb::prefix_bounds(start, stop, prefix.as_deref());
        let guard = self
            .snap
            .lock()
            .map_err(|_| Error::new_err("a lock was poisoned"))?;
        let snap = guard.as_ref().ok_or_else(closed)?;
        Ok(Scan::new(
            snap.raw_iterator_unbound(lower, upper),
            reverse,
            keys_only,
        ))
    }

    /// Releases what the snapshot pins.
    fn close(&self) -> PyResult<()> {
        self.snap
            .lock()
            .map_err(|_| Error::new_err("a lock was poisoned"))?
            .take();
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }
}

/// Entries of a scan, as `(key, value)` tuples (or keys).
#[pyclass(name = "Iterator", module = "tphdb")]
struct Scan {
    state: Mutex<ScanState>,
    keys_only: bool,
}

/// Entries a scan read ahead, in batches, so that the GIL is released once
/// per batch rather than once per entry.
struct ScanState {
    it: tphdb::DBRawIterator<'static>,
    reverse: bool,
    /// Not yet positioned: the first batch seeks.
    started: bool,
    ahead: std::collections::VecDeque<(bytes::Bytes, bytes::Bytes)>,
}

/// Entries read per release of the GIL.
const SCAN_BATCH: usize = 256;

impl ScanState {
    fn step(&mut self) {
        match (std::mem::replace(&mut self.started, true), self.reverse) {
            (false, false) => self.it.seek_to_first(),
            (false, true) => self.it.seek_to_last(),
            (true, false) => self.it.next(),
            (true, true) => self.it.prev(),
        }
    }

    /// Reads up to a batch of entries ahead; an error comes only once the
    /// entries before it are handed out.
    fn fill(&mut self) -> tphdb::Result<()> {
        while self.ahead.len() < SCAN_BATCH {
            self.step();
            self.it.status()?;
            let Some(k) = self.it.key() else { break };
            let v = self.it.value().unwrap_or_default();
            self.ahead.push_back((
                bytes::Bytes::copy_from_slice(k),
                bytes::Bytes::copy_from_slice(v),
            ));
        }
        Ok(())
    }
}

impl Scan {
    fn new(it: tphdb::DBRawIterator<'static>, reverse: bool, keys_only: bool) -> Scan {
        Scan {
            state: Mutex::new(ScanState {
                it,
                reverse,
                started: false,
                ahead: std::collections::VecDeque::new(),
            }),
            keys_only,
        }
    }
}

#[pymethods]
impl Scan {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyObject>> {
        let mut guard = self
            .state
            .lock()
            .map_err(|_| Error::new_err("a lock was poisoned"))?;
        let state: &mut ScanState = &mut guard;
        if state.ahead.is_empty() {
            let filled = py.allow_threads(|| state.fill());
            if state.ahead.is_empty() {
                filled.map_err(to_py)?;
            }
        }
        let Some((k, v)) = state.ahead.pop_front() else {
            return Ok(None);
        };
        let key = PyBytes::new(py, &k);
        if self.keys_only {
            return Ok(Some(key.into_any().unbind()));
        }
        let pair = (key, PyBytes::new(py, &v));
        Ok(Some(pair.into_pyobject(py)?.into_any().unbind()))
    }
}

#[pymodule]
#[pyo3(name = "tphdb")]
fn tphdb_module(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Db>()?;
    m.add_class::<Batch>()?;
    m.add_class::<Snapshot>()?;
    m.add_class::<Scan>()?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("CorruptionError", py.get_type::<CorruptionError>())?;
    m.add("IoError", py.get_type::<IoError>())?;
    m.add("BusyError", py.get_type::<BusyError>())?;
    m.add("ReadOnlyError", py.get_type::<ReadOnlyError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add("WritesStoppedError", py.get_type::<WritesStoppedError>())?;
    m.add("ClosedError", py.get_type::<ClosedError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// The value named `given` among `choices`, or a `ValueError` naming them
/// all: "read_mode must be 'mmap', 'pread' or 'direct', not 'x'".
fn named_choice<T: Copy>(option: &str, given: &str, choices: &[(&str, T)]) -> PyResult<T> {
    if let Some(&(_, v)) = choices.iter().find(|(name, _)| *name == given) {
        return Ok(v);
    }
    let names: Vec<String> = choices.iter().map(|(n, _)| format!("'{n}'")).collect();
    let listed = match names.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    Err(PyValueError::new_err(format!(
        "{option} must be {listed}, not {given:?}"
    )))
}
