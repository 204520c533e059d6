//! `tphdb.WriteBatch`: puts and deletes applied together.

use super::*;

/// Puts and deletes applied together.
#[pyclass(name = "WriteBatch", module = "tphdb")]
pub(crate) struct Batch {
    pub(crate) batch: Mutex<tphdb::WriteBatch>,
    /// The database a `with` block applies it to.
    pub(crate) db: Option<Py<Db>>,
    pub(crate) sync: bool,
}

impl Batch {
    pub(crate) fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, tphdb::WriteBatch>> {
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
