//! Recovery from arbitrary files: MANIFEST replay (version edits), WAL
//! replay (record log, write batches) and TPH heads, through a read-only
//! open, then reads and a scan. Errors are fine; panics are not.
//!
//! Input framing: repeated `kind:u8 number:u32 len:u32 bytes[len]`, kind
//! 0 = MANIFEST, 1 = WAL, 2 = piece. CURRENT names the first MANIFEST.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| tphdb::fuzzing::db_open(data));
