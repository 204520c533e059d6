//! `tphdb.DB`: an open database.

use super::*;

/// An open database. Keys and values are `bytes`.
#[pyclass(name = "DB", module = "tphdb")]
pub(crate) struct Db {
    /// `None` once closed; calls hold the read lock, `close` the write lock.
    db: RwLock<Option<tphdb::DB>>,
    path: String,
}

impl Db {
    pub(crate) fn apply(
        &self,
        py: Python<'_>,
        batch: tphdb::WriteBatch,
        sync: bool,
    ) -> PyResult<()> {
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
            job_memory_bytes,
            flushes,
            flush_micros,
            slowest_flush_micros,
            compactions,
            compaction_micros,
            stall_micros,
            memtable_stall_micros,
            level0_stall_micros,
            paced_level0_micros,
            paced_level0_compaction_micros,
            paced_memtable_micros,
            paced_one_level_micros,
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
