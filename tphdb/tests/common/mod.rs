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
