//! Piece reader: any file opens or fails cleanly; lookups, slot-order and
//! key-order scans and the whole-piece check of an opened file return
//! entries or errors, never panic.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tphdb::fs::{MemFs, ReadMode};
use tphdb::piece::PieceReader;

fuzz_target!(|data: &[u8]| {
    let fs = MemFs::new();
    let path = Path::new("/f.ph");
    fs.write_file(path, data.to_vec());
    let Ok(r) = PieceReader::open(&fs, path, ReadMode::Pread) else {
        return;
    };
    let mut keys = Vec::new();
    for e in r.iter().take(256) {
        match e {
            Ok(e) => keys.push(e.key),
            Err(_) => break,
        }
    }
    for k in &keys {
        let _ = r.get(k);
    }
    let _ = r.get(b"absent");
    let _ = r.key_hashes();
    // The whole-piece check `tphdb verify` runs: every entry against its
    // lookup, the key hashes and the key order.
    let _ = r.verify();
    if let Ok(mut c) = r.sorted_cursor() {
        if c.seek_to_first().is_ok() {
            for _ in 0..256 {
                // The entry a key chunk leads to (its named slot or the
                // perfect hash's), checked against the key.
                let _ = c.load_entry();
                if !c.valid() || c.move_next().is_err() {
                    break;
                }
            }
        }
        for k in keys.iter().take(8) {
            let _ = c.seek(k);
            let _ = c.seek_for_prev(k);
        }
    }
});
