//! Fuse loader (a TPH head's global index): any input loads or fails
//! cleanly, and a loaded fuse answers any hash with a value of its width.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use tphdb::phf::fuse::Fuse;

fuzz_target!(|data: &[u8]| {
    if let Ok(fuse) = Fuse::decode(Bytes::copy_from_slice(data)) {
        let mut h = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..64 {
            h = h.wrapping_mul(0x5851_f42d_4c95_7f2d).wrapping_add(1);
            assert!(fuse.get(h) < 1 << fuse.value_bits());
        }
    }
});
