//! What several integration tests share.

use tphdb::Options;

/// Small memtables and TPHs of four children: a few MB of data make
/// several levels, and level 0 compacts at its second TPH.
#[allow(dead_code)] // not every test binary uses it
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

/// Writes `tphs` level-0 TPHs of `per_tph` keys each (`key(i)`,
/// `value(i)`) into a database at `dir` opened with `opts`, whose level-0
/// trigger must let them wait, and closes it: the next open with a lower
/// trigger merges them as one compaction.
#[allow(dead_code)] // not every test binary uses it
pub fn write_level0<K: AsRef<[u8]>>(
    dir: &std::path::Path,
    opts: &Options,
    (tphs, per_tph): (u32, u32),
    key: impl Fn(u32) -> K,
    value: impl Fn(u32) -> Vec<u8>,
) {
    let db = tphdb::DB::open(opts, dir).unwrap();
    for t in 0..tphs {
        for i in t * per_tph..(t + 1) * per_tph {
            db.put(key(i), value(i)).unwrap();
        }
        db.flush().unwrap();
    }
    assert_eq!(db.stats().levels[0].tphs, u64::from(tphs));
}

/// An iterator's entries as owned pairs; any error fails the test.
#[allow(dead_code)] // not every test binary iterates
pub fn collect(
    it: impl Iterator<Item = tphdb::Result<(bytes::Bytes, bytes::Bytes)>>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    it.map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .collect()
}
