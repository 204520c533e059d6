//! What several integration tests share.

use tphdb::Options;

/// Small memtables and TPHs of four children: a few MB of data make
/// several levels, and level 0 compacts at its second TPH.
pub fn small() -> Options {
    Options {
        write_buffer_bytes: 256 << 10,
        tph_target_bytes: 256 << 10,
        fanout: 4,
        l0_compaction_trigger: 2,
        ..Options::default()
    }
}

/// Key `i` of a sequence spread over the key space: consecutive `i` land
/// in unrelated partitions.
#[allow(dead_code)] // not every test binary uses it
pub fn spread_key(i: u64) -> [u8; 8] {
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes()
}

/// An iterator's entries as owned pairs; any error fails the test.
#[allow(dead_code)] // not every test binary iterates
pub fn collect(
    it: impl Iterator<Item = tphdb::Result<(bytes::Bytes, bytes::Bytes)>>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    it.map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .collect()
}
