//! The `ptr_hash` crate's PtrHash behind [`PerfectHash`], as a stand-in for
//! CPHash. It is serialized with epserde and loaded with `read_mem`, which
//! copies the bytes once into 64-byte-aligned memory and then uses its
//! arrays in place.
//!
//! PtrHash runs at its own default load of 99% (`table_factor` does not
//! apply): its table has about `n / 0.99` slots and is not minimal.
//!
//! epserde trusts its input, so the serialized form is wrapped with a length
//! header and an xxh3 checksum and nothing is handed to epserde unverified.
//! A file crafted with a valid checksum can still break this backend; CPHash,
//! which validates every field, is the default for that reason too.

use bytes::Bytes;
use epserde::deser::{Deserialize, MemCase};
use epserde::ser::Serialize;
use ptr_hash::bucket_fn::Linear;
use ptr_hash::hash::StrongerIntHash;
use ptr_hash::{PtrHash, PtrHashParams};

use super::{seal, split_repeats, unseal, Built, PerfectHash, PhfConfig};
use crate::error::{Error, Result};
use crate::util::codec::{Decoder, PutExt};

/// Multi-part (parallel construction), non-minimal PtrHash over u64 hashes.
type Inner = PtrHash<u64, Linear, Vec<u32>, StrongerIntHash, Vec<u8>, false, false>;

const MAGIC: u32 = u32::from_le_bytes(*b"PTR1");

enum Repr {
    Built(Box<Inner>),
    Loaded(Box<MemCase<Inner>>),
}

/// PtrHash (the `ptr_hash` crate) as a [`PerfectHash`].
pub struct PtrHashPhf {
    n: usize,
    table_size: usize,
    repr: Repr,
    serialized_len: usize,
}

impl std::fmt::Debug for PtrHashPhf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtrHashPhf")
            .field("n", &self.n)
            .field("table_size", &self.table_size)
            .finish_non_exhaustive()
    }
}

fn serialize(inner: &Inner) -> Vec<u8> {
    let mut out = Vec::new();
    // SAFETY: serializing a fully built value into a Vec.
    unsafe { inner.serialize(&mut out) }.expect("serializing into a Vec cannot fail");
    out
}

impl PerfectHash for PtrHashPhf {
    fn build(hashes: &[u64], config: &PhfConfig) -> Result<Built<Self>> {
        config.validate()?;
        // PtrHash's own defaults (alpha 0.99, lambda 3.0): its part sizing
        // degenerates at other loads for some key counts, so `table_factor`
        // does not apply and its table is always about n / 0.99 slots.
        let params = PtrHashParams {
            lambda: config.keys_per_bucket.unwrap_or(3.0),
            ..PtrHashParams::default_fast()
        };
        let (inner, n, duplicate_hashes) = match Inner::try_new(hashes, params) {
            Some(inner) => (inner, hashes.len(), Vec::new()),
            None => {
                // PtrHash gives up on repeated hashes; drop the repeats and retry.
                let (v, dups) = split_repeats(hashes);
                let inner = Inner::try_new(&v, params).ok_or_else(|| {
                    Error::PhfBuild(format!("ptr_hash failed on {} keys", v.len()))
                })?;
                (inner, v.len(), dups)
            }
        };
        let table_size = if n == 0 { 0 } else { inner.max_index() };
        let serialized_len = serialize(&inner).len();
        Ok(Built {
            phf: PtrHashPhf {
                n,
                table_size,
                repr: Repr::Built(Box::new(inner)),
                serialized_len,
            },
            duplicate_hashes,
        })
    }

    #[inline]
    fn slot(&self, hash: u64) -> usize {
        if self.n == 0 {
            return 0;
        }
        match &self.repr {
            Repr::Built(p) => p.index(&hash),
            Repr::Loaded(p) => p.uncase().index(&hash),
        }
    }

    fn table_size(&self) -> usize {
        self.table_size
    }

    fn len(&self) -> usize {
        self.n
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let body = match &self.repr {
            Repr::Built(p) => serialize(p),
            Repr::Loaded(p) => {
                let mut v = Vec::new();
                // SAFETY: serializing a value that was deserialized and verified.
                unsafe { p.uncase().serialize(&mut v) }.expect("serializing into a Vec");
                v
            }
        };
        let start = out.len();
        out.put_u32(MAGIC);
        out.put_u64(self.n as u64);
        out.put_u64(self.table_size as u64);
        out.put_u64(body.len() as u64);
        out.extend_from_slice(&body);
        seal(out, start);
    }

    fn decode(bytes: Bytes) -> Result<Self> {
        decode(&bytes).map_err(|e| e.at("ptr_hash"))
    }

    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.serialized_len
    }
}

fn decode(bytes: &[u8]) -> Result<PtrHashPhf> {
    // Strict even in fuzz builds: epserde must only see bytes we wrote.
    let body_len = unseal(bytes, 36, true)?.len();
    let mut d = Decoder::new(&bytes[..body_len], "ptr_hash");
    d.magic_u32(MAGIC)?;
    let n = d.u64()? as usize;
    let table_size = d.u64()? as usize;
    let len = d.u64()? as usize;
    let body = d.bytes(len)?;
    d.finish()?;
    // SAFETY: the bytes are exactly what `encode` wrote, as the checksum shows.
    let case = unsafe { Inner::read_mem(body, body.len()) }
        .map_err(|e| Error::corruption("epserde body", "a serialized PtrHash", e))?;
    if n > 0 && case.uncase().max_index() != table_size {
        return Err(Error::corruption(
            "table size",
            table_size,
            case.uncase().max_index(),
        ));
    }
    Ok(PtrHashPhf {
        n,
        table_size,
        repr: Repr::Loaded(Box::new(case)),
        serialized_len: len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phf::{Phf, PhfKind};

    fn random_hashes(n: usize, seed: u64) -> Vec<u64> {
        let mut rng = fastrand::Rng::with_seed(seed);
        (0..n).map(|_| rng.u64(..)).collect()
    }

    fn assert_perfect(phf: &Phf, hashes: &[u64]) {
        let mut seen = vec![false; phf.table_size()];
        for &h in hashes {
            let s = phf.slot(h);
            assert!(s < phf.table_size() && !seen[s]);
            seen[s] = true;
        }
    }

    #[test]
    fn both_kinds_build_round_trip_and_report_duplicates() {
        for kind in [PhfKind::CpHash, PhfKind::PtrHash] {
            for n in [0, 1, 2, 1000, 100_000] {
                let mut hashes = random_hashes(n, n as u64);
                let built = Phf::build(kind, &hashes, &PhfConfig::default()).unwrap();
                assert_eq!(built.phf.len(), n);
                assert_perfect(&built.phf, &hashes);
                let mut bytes = Vec::new();
                built.phf.encode(&mut bytes);
                let loaded = Phf::decode_with(Bytes::from(bytes), true).unwrap();
                assert_eq!(loaded.kind(), kind);
                assert_eq!(loaded.table_size(), built.phf.table_size());
                for &h in &hashes {
                    assert_eq!(loaded.slot(h), built.phf.slot(h));
                }
                if n >= 2 {
                    hashes.push(hashes[0]);
                    let built = Phf::build(kind, &hashes, &PhfConfig::default()).unwrap();
                    assert_eq!(built.duplicate_hashes, vec![hashes[0]]);
                    assert_eq!(built.phf.len(), n);
                    assert_perfect(&built.phf, &hashes[..n]);
                }
            }
        }
    }

    #[test]
    fn corrupt_or_truncated_ptr_hash_is_an_error() {
        let built = PtrHashPhf::build(&random_hashes(500, 3), &PhfConfig::default()).unwrap();
        let mut bytes = Vec::new();
        built.phf.encode(&mut bytes);
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x40;
            assert!(PtrHashPhf::decode(Bytes::from(b)).is_err());
            assert!(PtrHashPhf::decode(Bytes::copy_from_slice(&bytes[..i])).is_err());
        }
        assert!(Phf::decode(Bytes::from_static(&[9, 1, 2])).is_err());
        assert!(Phf::decode(Bytes::new()).is_err());
    }
}
