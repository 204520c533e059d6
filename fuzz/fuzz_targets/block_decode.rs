//! A piece block from arbitrary bytes: the checksum, the offset table, LZ4
//! and every entry are checked. Errors are fine; panics are not.
//!
//! Input: `count:u8 max_raw:u16` then the block.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tphdb::fuzzing::decode_block;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let count = usize::from(data[0]).max(1);
    let max_raw = usize::from(u16::from_le_bytes([data[1], data[2]])) * 16;
    let _ = decode_block(&data[3..], count, max_raw);
});
