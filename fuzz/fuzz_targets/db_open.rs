//! Recovery from arbitrary files: MANIFEST replay (version edits), WAL
//! replay (record log, write batches) and TPH heads, through a read-only
//! open, then reads and a scan. Errors are fine; panics are not.
//!
//! Input framing: repeated `kind:u8 number:u32 len:u32 bytes[len]`, kind
//! 0 = MANIFEST, 1 = WAL, 2 = piece. CURRENT names the first MANIFEST.
#![no_main]

use std::path::Path;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use tphdb::fs::MemFs;
use tphdb::{IteratorMode, Options, DB};

fuzz_target!(|data: &[u8]| {
    let fs = MemFs::new();
    let dir = Path::new("/db");
    let mut d = data;
    let mut manifest = None;
    while d.len() >= 9 {
        let kind = d[0] % 3;
        let number = u32::from_le_bytes(d[1..5].try_into().unwrap()) % 1000;
        let len = (u32::from_le_bytes(d[5..9].try_into().unwrap()) as usize).min(d.len() - 9);
        let bytes = d[9..9 + len].to_vec();
        d = &d[9 + len..];
        let name = match kind {
            0 => {
                manifest.get_or_insert(number);
                format!("MANIFEST-{number:06}")
            }
            1 => format!("{number:06}.log"),
            _ => format!("{number:06}.ph"),
        };
        fs.write_file(&dir.join(name), bytes);
    }
    let Some(m) = manifest else { return };
    let name = format!("MANIFEST-{m:06}");
    let current = format!("{name}\ncrc32c={:08x}\n", crc32c::crc32c(name.as_bytes()));
    fs.write_file(&dir.join("CURRENT"), current.into_bytes());
    let opts = Options {
        file_system: Some(Arc::new(fs.clone())),
        background_threads: 1,
        ..Options::default()
    };
    if let Ok(db) = DB::open_for_read_only(&opts, dir) {
        for k in [&b"key00001"[..], b"", b"zz"] {
            let _ = db.get(k);
        }
        for item in db.iterator(IteratorMode::Start).take(200) {
            if item.is_err() {
                break;
            }
        }
        for item in db.iterator(IteratorMode::End).take(50) {
            if item.is_err() {
                break;
            }
        }
    }
});
