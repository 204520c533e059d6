//! The record log reader (WAL and MANIFEST framing) over arbitrary bytes:
//! errors and dropped tails are fine; panics, hangs and records that were
//! never written are not. Re-writing the records it returned and reading
//! them back gives the same records.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tphdb::fuzzing::{read_log, write_log};

fuzz_target!(|data: &[u8]| {
    let Ok(log) = read_log(data) else { return };
    let total: usize = log.records.iter().map(Vec::len).sum();
    assert!(total <= data.len(), "records longer than the file");
    if let Some((offset, _)) = log.tail {
        assert!(offset <= data.len() as u64);
    }
    let again = read_log(&write_log(&log.records).unwrap()).unwrap();
    assert_eq!(again.records, log.records);
    assert!(again.tail.is_none());
});
