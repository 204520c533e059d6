//! `tphdb.Iterator`: the entries of a scan, read ahead in batches.

use super::*;

/// Entries of a scan, as `(key, value)` tuples (or keys).
#[pyclass(name = "Iterator", module = "tphdb")]
pub(crate) struct Scan {
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
    pub(crate) fn new(it: tphdb::DBRawIterator<'static>, reverse: bool, keys_only: bool) -> Scan {
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
