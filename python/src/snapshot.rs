//! `tphdb.Snapshot`: a frozen view of the database.

use super::*;

/// A frozen view of the database.
#[pyclass(name = "Snapshot", module = "tphdb")]
pub(crate) struct Snapshot {
    /// `None` once closed: the memtables and pieces it pinned are released.
    pub(crate) snap: Mutex<Option<tphdb::Snapshot<'static>>>,
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
