//! MANIFEST replay as open does it (CURRENT names the file): records, then
//! version edits, then the recovered structure. Each record that decodes as
//! an edit must survive re-encoding unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tphdb::fuzzing::{read_log, replay_manifest, version_edit_roundtrip};

fuzz_target!(|data: &[u8]| {
    let _ = replay_manifest(data);
    if let Ok(log) = read_log(data) {
        for rec in &log.records {
            assert_ne!(
                version_edit_roundtrip(rec),
                Some(false),
                "edit changed by re-encoding"
            );
        }
    }
});
