//! WAL replay as open does it: records, then write batches, then the
//! memtable. Errors are fine; panics are not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tphdb::fuzzing::replay_wal;

fuzz_target!(|data: &[u8]| {
    let _ = replay_wal(data);
});
