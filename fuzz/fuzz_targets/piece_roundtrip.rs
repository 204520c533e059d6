//! Encode then decode: whatever entries and options the fuzzer picks, the
//! piece returns exactly what was written, by key, by slot and in key order.
#![no_main]

use std::collections::BTreeMap;
use std::path::Path;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tphdb::fs::{MemFs, ReadMode};
use tphdb::phf::{PhfConfig, PhfKind};
use tphdb::piece::{write_piece, Compression, EntryRef, PieceOptions, PieceReader};

#[derive(Arbitrary, Debug)]
struct Input {
    entries: Vec<(Vec<u8>, Option<Vec<u8>>, u64)>,
    page_size: u16,
    lz4: bool,
    align: bool,
    ptr_hash: bool,
    minimal: bool,
}

fuzz_target!(|input: Input| {
    let model: BTreeMap<Vec<u8>, (Option<Vec<u8>>, u64)> = input
        .entries
        .into_iter()
        .map(|(k, v, s)| (k, (v, s)))
        .collect();
    let entries: Vec<EntryRef> = model
        .iter()
        .map(|(k, (v, s))| EntryRef {
            key: k,
            value: v.as_deref(),
            seq: *s,
        })
        .collect();
    let opts = PieceOptions {
        page_size: input.page_size.max(1) as usize,
        compression: if input.lz4 {
            Compression::Lz4
        } else {
            Compression::None
        },
        align_blocks: input.align,
        phf_kind: if input.ptr_hash {
            PhfKind::PtrHash
        } else {
            PhfKind::CpHash
        },
        phf: PhfConfig {
            table_factor: if input.minimal { 1.0 } else { 1.1 },
            ..PhfConfig::default()
        },
        ..PieceOptions::default()
    };
    let fs = MemFs::new();
    let path = Path::new("/r.ph");
    write_piece(&fs, path, &entries, &opts).expect("write");
    let r = PieceReader::open_with(&fs, path, ReadMode::Pread, input.ptr_hash).expect("open");
    for (k, (v, s)) in &model {
        let e = r.get(k).expect("get").expect("present");
        assert_eq!(e.value.as_deref(), v.as_deref());
        assert_eq!(e.seq, *s);
    }
    assert_eq!(r.iter().count(), model.len());
    let mut c = r.sorted_cursor().expect("sorted");
    c.seek_to_first().expect("seek");
    for k in model.keys() {
        assert_eq!(c.key(), Some(&k[..]));
        assert_eq!(
            &c.load_entry().expect("load").expect("entry").key[..],
            &k[..]
        );
        c.move_next().expect("next");
    }
    assert!(!c.valid());
});
