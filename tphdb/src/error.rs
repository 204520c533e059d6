//! The one error type of tphdb.

use std::fmt;
use std::io;

/// Result alias used throughout tphdb.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in tphdb.
///
/// I/O failures are kept apart from corruption: the first may go away on retry,
/// the second means bytes on disk are not what tphdb wrote.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operating system reported an I/O error.
    #[error("I/O error while {context}: {source}")]
    Io {
        /// What tphdb was doing.
        context: String,
        /// The error from the operating system.
        #[source]
        source: io::Error,
    },
    /// Persisted bytes failed a checksum or an invariant.
    #[error("corruption in {location}: {what}: expected {expected}, found {found}")]
    Corruption {
        /// The file (and section) where the problem was found.
        location: String,
        /// Which structure or field is wrong.
        what: String,
        /// What a well-formed file holds there.
        expected: String,
        /// What was actually read.
        found: String,
    },
    /// The caller passed an argument tphdb cannot accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A perfect hash could not be built within its attempt budget.
    #[error("perfect hash construction failed: {0}")]
    PhfBuild(String),
    /// The database was opened with `open_for_read_only`: it takes no
    /// writes.
    #[error("database is read-only: {0}")]
    ReadOnly(String),
    /// Writes stopped after an error whose effect on disk is unknown (a
    /// failed sync: the page cache may have dropped data, so retrying could
    /// lie). Reads go on; reopen the database to write again. The text is
    /// the error that stopped them.
    #[error("writes stopped after an earlier error; reopen the database: {0}")]
    Poisoned(String),
    /// The data is of a format version this build of tphdb does not know
    /// (written by a newer one).
    #[error("unsupported format: {0}")]
    Unsupported(String),
    /// A bug in tphdb: an internal invariant did not hold.
    #[error("internal error (a bug in tphdb): {0}")]
    Internal(String),
    /// Another process (or handle) has the database open.
    #[error("database is in use: {0}")]
    Busy(String),
}

impl Clone for Error {
    fn clone(&self) -> Self {
        match self {
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: io::Error::new(source.kind(), source.to_string()),
            },
            Error::Corruption {
                location,
                what,
                expected,
                found,
            } => Error::Corruption {
                location: location.clone(),
                what: what.clone(),
                expected: expected.clone(),
                found: found.clone(),
            },
            Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
            Error::PhfBuild(m) => Error::PhfBuild(m.clone()),
            Error::ReadOnly(m) => Error::ReadOnly(m.clone()),
            Error::Poisoned(m) => Error::Poisoned(m.clone()),
            Error::Unsupported(m) => Error::Unsupported(m.clone()),
            Error::Internal(m) => Error::Internal(m.clone()),
            Error::Busy(m) => Error::Busy(m.clone()),
        }
    }
}

impl Error {
    /// Builds a [`Error::Corruption`] with no location yet; see [`Error::at`].
    pub fn corruption(
        what: impl Into<String>,
        expected: impl fmt::Display,
        found: impl fmt::Display,
    ) -> Self {
        Error::Corruption {
            location: String::new(),
            what: what.into(),
            expected: expected.to_string(),
            found: found.to_string(),
        }
    }

    /// Builds an [`Error::Io`] that says what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// Prefixes the location of a corruption error (file name, section); other
    /// errors are returned unchanged except that I/O errors gain the context.
    pub fn at(self, location: impl fmt::Display) -> Self {
        match self {
            Error::Corruption {
                location: old,
                what,
                expected,
                found,
            } => Error::Corruption {
                location: if old.is_empty() {
                    location.to_string()
                } else {
                    format!("{location}: {old}")
                },
                what,
                expected,
                found,
            },
            Error::Io { context, source } => Error::Io {
                context: format!("{context} ({location})"),
                source,
            },
            other => other,
        }
    }

    /// True for an I/O error saying the device is full: writes may succeed
    /// again once space is freed.
    pub fn is_no_space(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.kind() == io::ErrorKind::StorageFull)
    }

    /// True for [`Error::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }
}
