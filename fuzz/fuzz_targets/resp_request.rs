//! The server's request parser on arbitrary bytes: never a panic, and
//! feeding the bytes in two pieces parses the same requests as feeding them
//! whole (a partial request consumes nothing).
//!
//! Input: `cut:u16` then the bytes a client sends.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use tphdb_server::resp::{parse, Limits};

fn all(chunks: &[&[u8]], limits: &Limits) -> Vec<Result<Vec<Vec<u8>>, String>> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for chunk in chunks {
        buf.extend_from_slice(chunk);
        loop {
            match parse(&mut buf, limits) {
                Ok(Some(req)) => out.push(Ok(req.iter().map(|a| a.to_vec()).collect())),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(e.0));
                    return out;
                }
            }
        }
    }
    out
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let cut = usize::from(u16::from_le_bytes([data[0], data[1]]));
    let data = &data[2..];
    let limits = Limits {
        max_bulk_bytes: 4096,
        max_request_bytes: 8192,
        max_args: 64,
    };
    let whole = all(&[data], &limits);
    let cut = cut.min(data.len());
    let split = all(&[&data[..cut], &data[cut..]], &limits);
    assert_eq!(whole, split);
});
