//! The `tphdb` Python module: bytes in, bytes out; the GIL is released
//! for every call into the engine; errors are exceptions whose class tells
//! corruption, I/O, a busy database and the rest apart. `tphdb.pyi` is the
//! typed surface.

mod batch;
mod db;
mod scan;
mod snapshot;

use std::sync::{Mutex, RwLock, RwLockReadGuard};

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use batch::Batch;
use db::Db;
use scan::Scan;
use snapshot::Snapshot;

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

fn bytes_or_none(py: Python<'_>, v: Option<Vec<u8>>) -> Option<Py<PyBytes>> {
    v.map(|v| PyBytes::new(py, &v).unbind())
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
