//! `tphdb load`'s line reader (dumps and plain lines) on arbitrary bytes:
//! never a panic; every entry it accepts, written back with the writer in
//! the same encoding, reads back the same; and any input it accepts whole
//! as a dump is refused once cut short before its trailer.
//!
//! Input: `encoding:u8` then the bytes of the input.
#![no_main]

use libfuzzer_sys::fuzz_target;

// The reader lives in the command-line binary, which has no library.
#[path = "../../tphdb-cli/src/lines.rs"]
#[allow(dead_code)]
mod lines;

use lines::{Encoding, LineReader, LineWriter};

fn read_all(input: &[u8], encoding: Encoding) -> Result<Vec<lines::Entry>, String> {
    let mut r = LineReader::new(input, encoding);
    let mut out = Vec::new();
    while let Some(e) = r.next_entry()? {
        out.push(e);
    }
    Ok(out)
}

fuzz_target!(|data: &[u8]| {
    let Some((&tag, input)) = data.split_first() else {
        return;
    };
    let encoding = if tag % 2 == 0 { Encoding::Escaped } else { Encoding::Hex };
    let Ok(entries) = read_all(input, encoding) else {
        return;
    };
    let mut w = LineWriter::new(Vec::new(), encoding);
    w.header().unwrap();
    for (k, v) in &entries {
        w.entry(k, Some(v)).unwrap();
    }
    w.trailer().unwrap();
    let dump = w.into_inner();
    assert_eq!(read_all(&dump, Encoding::Hex).unwrap(), entries);
    let trailer_start = dump[..dump.len() - 1].iter().rposition(|&b| b == b'\n').unwrap() + 1;
    let cut = trailer_start * usize::from(tag) / 255;
    assert!(read_all(&dump[..cut], encoding).is_err() || cut == 0);
});
