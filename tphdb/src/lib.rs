//! tphdb: an embedded key-value store whose tables are two-tier perfect hash
//! tables (the CompassDB design): a point lookup is two in-memory probes and
//! one disk read.
#![warn(missing_docs)]

mod error;
pub mod fs;
pub mod hash;
pub mod phf;
pub mod piece;
mod util;

pub use error::{Error, Result};
