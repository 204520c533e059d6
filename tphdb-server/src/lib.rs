//! `tphdb-server`: the Redis protocol (RESP2 and RESP3) over a tphdb
//! database, so that any Redis client can use it. See `docs/server.md`.

mod commands;
pub mod glob;
mod info;
pub mod resp;
pub mod server;

pub use server::{run, serve, Config, Fsync};
