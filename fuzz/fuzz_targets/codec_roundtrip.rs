//! Encode then decode: log records, write batches and blocks come back
//! exactly as written, whatever the fuzzer puts in them.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tphdb::fuzzing::{decode_batch, decode_block, encode_batch, encode_block, read_log, write_log};
use tphdb::piece::EntryRef;

#[derive(Arbitrary, Debug)]
struct Input {
    records: Vec<Vec<u8>>,
    /// Repeats of the first record: long records span log blocks.
    repeat: u8,
    seq: u64,
    ops: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    slots: Vec<Option<(Vec<u8>, Option<Vec<u8>>, u64)>>,
    lz4: bool,
}

fuzz_target!(|input: Input| {
    let mut records = input.records;
    if let Some(first) = records.first().cloned() {
        records.push(first.repeat(usize::from(input.repeat) * 64));
    }
    let log = read_log(&write_log(&records).unwrap()).unwrap();
    assert_eq!(log.records, records);
    assert!(log.tail.is_none());

    // A batch's sequence numbers end at most at 2^56 (a decoder refuses
    // more): the round trip holds for every batch a database can write.
    let seq = input.seq % ((1 << 56) - input.ops.len() as u64);
    let (s, ops) = decode_batch(&encode_batch(seq, &input.ops)).unwrap();
    assert_eq!((s, ops), (seq, input.ops));

    if input.slots.is_empty() {
        return;
    }
    let slots: Vec<Option<EntryRef>> = input
        .slots
        .iter()
        .map(|s| {
            s.as_ref().map(|(k, v, seq)| EntryRef {
                key: k,
                value: v.as_deref(),
                seq: *seq,
            })
        })
        .collect();
    let Ok((bytes, raw)) = encode_block(&slots, input.lz4) else {
        return;
    };
    let got = decode_block(&bytes, slots.len(), raw).unwrap();
    assert_eq!(got.len(), slots.len());
    for (g, s) in got.iter().zip(&slots) {
        match (g, s) {
            (None, None) => {}
            (Some(g), Some(s)) => {
                assert_eq!(&g.key[..], s.key);
                assert_eq!(g.value.as_deref(), s.value);
                assert_eq!(g.seq, s.seq);
            }
            _ => panic!("slot occupancy changed"),
        }
    }
});
