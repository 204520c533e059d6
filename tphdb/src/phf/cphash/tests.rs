use bytes::Bytes;
use proptest::prelude::*;
use xxhash_rust::xxh3::xxh3_64;

use super::CpHash;
use crate::phf::{PerfectHash, PhfConfig};

fn random_hashes(n: usize, seed: u64) -> Vec<u64> {
    let mut rng = fastrand::Rng::with_seed(seed);
    (0..n).map(|_| rng.u64(..)).collect()
}

/// Asserts the perfect-hash contract for `hashes` (assumed distinct).
fn assert_perfect(phf: &CpHash, hashes: &[u64]) {
    assert_eq!(phf.len(), hashes.len());
    let mut seen = vec![false; phf.table_size()];
    for &h in hashes {
        let s = phf.slot(h);
        assert!(
            s < phf.table_size(),
            "slot {s} >= table size {}",
            phf.table_size()
        );
        assert!(!seen[s], "two keys share slot {s}");
        seen[s] = true;
    }
}

fn config(c: f64) -> PhfConfig {
    PhfConfig {
        table_factor: c,
        ..PhfConfig::default()
    }
}

#[test]
fn empty_one_and_two_keys() {
    for c in [1.0, 1.1] {
        for n in 0..=2 {
            let hashes = random_hashes(n, n as u64);
            let built = CpHash::build(&hashes, &config(c)).unwrap();
            assert_perfect(&built.phf, &hashes);
            assert!(built.duplicate_hashes.is_empty());
            if n == 0 {
                assert_eq!(built.phf.table_size(), 0);
            }
        }
    }
}

#[test]
fn table_size_is_c_times_n() {
    let n = 200_000;
    let hashes = random_hashes(n, 1);
    for c in [1.0, 1.05, 1.1, 1.5] {
        let built = CpHash::build(&hashes, &config(c)).unwrap();
        assert_perfect(&built.phf, &hashes);
        let expect = (c * n as f64).ceil() as usize;
        let size = built.phf.table_size();
        // One slot of rounding per segment; growth (§4.1.1) is rare at n = 2e5.
        assert!(
            size >= expect && size <= expect + expect / 50,
            "c={c}: {size} vs {expect}"
        );
        if c == 1.0 {
            assert_eq!(size, n, "c = 1.0 is a minimal perfect hash");
        }
    }
}

#[test]
fn million_keys_in_parallel_and_sequentially_agree() {
    let hashes = random_hashes(1_000_000, 2);
    let cfg = PhfConfig::default();
    let par = CpHash::build(&hashes, &cfg).unwrap().phf;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let seq = pool.install(|| CpHash::build(&hashes, &cfg)).unwrap().phf;
    assert_perfect(&par, &hashes);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    par.encode(&mut a);
    seq.encode(&mut b);
    assert!(a == b, "construction must not depend on the thread count");
    let bits = a.len() as f64 * 8.0 / hashes.len() as f64;
    assert!(bits < 3.0, "{bits} bits/key");
}

/// A streamed build, in batches of segments over several passes of its
/// source, is the same function as a build over all the hashes at once,
/// repeated hashes included.
#[test]
fn repeated_hashes_are_reported_and_the_rest_is_perfect() {
    let mut hashes = random_hashes(10_000, 3);
    let repeated = [hashes[5], hashes[77], hashes[9000]];
    hashes.extend_from_slice(&repeated);
    hashes.push(hashes[5]);
    let built = CpHash::build(&hashes, &PhfConfig::default()).unwrap();
    let mut dups = built.duplicate_hashes.clone();
    dups.sort_unstable();
    let mut expect = repeated.to_vec();
    expect.sort_unstable();
    assert_eq!(dups, expect);
    let mut distinct = hashes.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_perfect(&built.phf, &distinct);
}

#[test]
fn all_hashes_equal_does_not_break_construction() {
    let hashes = vec![42u64; 1000];
    let built = CpHash::build(&hashes, &PhfConfig::default()).unwrap();
    assert_eq!(built.duplicate_hashes, vec![42]);
    assert_perfect(&built.phf, &[42]);
}

#[test]
fn small_segments_and_extreme_lambdas() {
    let hashes = random_hashes(50_000, 4);
    for (c, lambda, seg) in [
        (1.0, 2.0, 1000),
        (1.1, 5.0, 4096),
        (1.5, 6.0, 1 << 20),
        (2.0, 1.0, 10),
    ] {
        let cfg = PhfConfig {
            table_factor: c,
            keys_per_bucket: Some(lambda),
            segment_keys: seg,
            ..PhfConfig::default()
        };
        let built = CpHash::build(&hashes, &cfg).unwrap();
        assert_perfect(&built.phf, &hashes);
    }
}

#[test]
fn invalid_configs_are_rejected() {
    for cfg in [
        PhfConfig {
            table_factor: 0.9,
            ..PhfConfig::default()
        },
        PhfConfig {
            table_factor: f64::NAN,
            ..PhfConfig::default()
        },
        PhfConfig {
            keys_per_bucket: Some(0.5),
            ..PhfConfig::default()
        },
        PhfConfig {
            segment_keys: 0,
            ..PhfConfig::default()
        },
    ] {
        assert!(CpHash::build(&[1, 2, 3], &cfg).is_err());
    }
}

#[test]
fn round_trip_is_exact() {
    let hashes = random_hashes(100_000, 5);
    for c in [1.0, 1.1] {
        let phf = CpHash::build(&hashes, &config(c)).unwrap().phf;
        let mut bytes = Vec::new();
        phf.encode(&mut bytes);
        let loaded = CpHash::decode(Bytes::from(bytes.clone())).unwrap();
        assert_eq!(loaded.table_size(), phf.table_size());
        for &h in &hashes {
            assert_eq!(loaded.slot(h), phf.slot(h));
        }
        let mut again = Vec::new();
        loaded.encode(&mut again);
        assert_eq!(again, bytes);
    }
}

#[test]
fn decode_uses_the_pilot_array_in_place() {
    let hashes = random_hashes(10_000, 6);
    let phf = CpHash::build(&hashes, &PhfConfig::default()).unwrap().phf;
    let mut bytes = Vec::new();
    phf.encode(&mut bytes);
    let buf = Bytes::from(bytes);
    let range = buf.as_ptr_range();
    let loaded = CpHash::decode(buf.clone()).unwrap();
    let pilots = loaded.pilots.as_ptr();
    assert!(range.contains(&pilots), "pilots were copied");
}

fn encoded(n: usize, c: f64) -> Vec<u8> {
    let phf = CpHash::build(&random_hashes(n, 7), &config(c)).unwrap().phf;
    let mut bytes = Vec::new();
    phf.encode(&mut bytes);
    bytes
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = encoded(300, 1.0);
    for len in 0..bytes.len() {
        let r = CpHash::decode(Bytes::copy_from_slice(&bytes[..len]));
        assert!(r.unwrap_err().is_corruption());
    }
}

#[test]
fn every_single_byte_corruption_is_an_error() {
    let bytes = encoded(300, 1.0);
    for i in 0..bytes.len() {
        for x in [0x01u8, 0x80, 0xff] {
            let mut b = bytes.clone();
            b[i] ^= x;
            assert!(
                CpHash::decode(Bytes::from(b)).is_err(),
                "byte {i} ^ {x:#x} accepted"
            );
        }
    }
}

/// Rewrites the trailing checksum so that corrupt fields reach validation.
fn reseal(b: &mut [u8]) {
    let body = b.len() - 8;
    let c = xxh3_64(&b[..body]);
    b[body..].copy_from_slice(&c.to_le_bytes());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_key_sets_are_perfect(
        n in prop_oneof![0usize..4, 4usize..1000, 1000usize..20_000],
        seed in any::<u64>(),
        c in prop_oneof![Just(1.0), Just(1.1), 1.0f64..2.0],
    ) {
        let hashes = random_hashes(n, seed);
        let built = CpHash::build(&hashes, &PhfConfig { table_factor: c, seed, ..PhfConfig::default() })
            .unwrap();
        assert_perfect(&built.phf, &hashes);
    }

    /// With a valid checksum, corrupt fields are caught by validation; a
    /// function that does load is memory-safe and stays below its table size.
    #[test]
    fn resealed_corruption_never_panics(
        pos in any::<prop::sample::Index>(),
        val in any::<u8>(),
        probes in prop::collection::vec(any::<u64>(), 32),
    ) {
        let mut b = encoded(2000, 1.0);
        let i = pos.index(b.len() - 8);
        b[i] = val;
        reseal(&mut b);
        if let Ok(phf) = CpHash::decode(Bytes::from(b)) {
            for h in probes {
                prop_assert!(phf.is_empty() || phf.slot(h) < phf.table_size());
            }
        }
    }
}

/// `b` as docs/format.md states it, written from the text alone: the
/// dense count from an IEEE double product, `T` as a constant, the two
/// multipliers as exact quotients, `mulhi` in 128 bits.
fn spec_bucket(buckets: u32, rem: u64) -> u64 {
    let b = buckets as u128;
    let dense = ((0.3f64 * buckets as f64).round() as u128).clamp(1, b - 1);
    let t: u128 = 0x9999_9999_9999_9800;
    let two64: u128 = 1 << 64;
    let dense_mul = dense * two64 / t;
    let sparse_mul = (b - dense) * two64 / (two64 - t);
    let mulhi = |a: u128, m: u128| (a * m) >> 64;
    let rem = rem as u128;
    (if rem < t {
        mulhi(rem, dense_mul)
    } else {
        dense + mulhi(rem - t, sparse_mul)
    }) as u64
}

/// Regression: docs/format.md stated `T = floor(0.6 * 2^64)` and `b =
/// floor(rem * dense / T)` while the code used the double nearest
/// `0.6 * 2^64` (409 below) and a precomputed multiplier; they disagree on
/// hundreds of values next to bucket boundaries, so a reader written from
/// the spec would send keys to the wrong slot. The spec now states the
/// code's arithmetic (format version 1, which every existing file uses).
#[test]
fn the_bucket_mapping_is_the_one_the_spec_states() {
    let mut rng = fastrand::Rng::with_seed(11);
    let t = 0x9999_9999_9999_9800u64;
    let mut differing = 0;
    for round in 0..2000u32 {
        let buckets = match round % 4 {
            0 => rng.u32(2..64),
            1 => rng.u32(2..1 << 16),
            2 => rng.u32(2..u32::MAX),
            _ => [2, 3, 5, 7, 1 << 16, u32::MAX][rng.usize(..6)],
        };
        let shape = super::Shape::new(buckets, 1 << 20, 0, 1);
        let check = |rem: u64| {
            let got = shape.bucket(rem);
            assert_eq!(
                got,
                spec_bucket(buckets, rem),
                "buckets {buckets}, rem {rem:#x}"
            );
            assert!(got < buckets as u64);
        };
        for rem in [0, 1, t - 1, t, t + 1, u64::MAX, u64::MAX - 1] {
            check(rem);
        }
        // Next to bucket boundaries, where readings of the text differ.
        let b = buckets as u128;
        let dense = ((0.3f64 * buckets as f64).round() as u128).clamp(1, b - 1);
        let dense_mul = dense * (1 << 64) / t as u128;
        for _ in 0..20 {
            let k = rng.u64(1..dense as u64 + 1) as u128;
            let edge = ((k << 64).div_ceil(dense_mul)).min(t as u128 - 1) as u64;
            for rem in edge.saturating_sub(3)..edge.saturating_add(3) {
                check(rem);
                if old_text_bucket(buckets, rem) != spec_bucket(buckets, rem) {
                    differing += 1;
                }
            }
        }
    }
    assert!(
        differing > 100,
        "the old text differs near boundaries: {differing}"
    );
}

/// `b` as docs/format.md used to state it: exact `T`, `floor(rem * dense /
/// T)` (the dense side only).
fn old_text_bucket(buckets: u32, rem: u64) -> u64 {
    let dense = ((0.3f64 * buckets as f64).round() as u128).clamp(1, buckets as u128 - 1);
    let t = (6u128 << 64) / 10;
    (rem as u128 * dense / t) as u64
}

/// Format version 2: the segments follow the hash order, so a range of
/// hashes (a level's partition, a fold's pass) lies in a range of slots,
/// a segment at a time, and reads only that range of a piece's blocks.
#[test]
fn slots_follow_the_hash_order_a_segment_at_a_time() {
    let mut hashes = random_hashes(100_000, 7);
    hashes.sort_unstable();
    let cfg = PhfConfig {
        segment_keys: 1000,
        ..PhfConfig::default()
    };
    let phf = CpHash::build(&hashes, &cfg).unwrap().phf;
    assert_perfect(&phf, &hashes);
    let slots: Vec<usize> = hashes.iter().map(|&h| phf.slot(h)).collect();
    // Of the hashes in the first eighth, the slots all precede the rest's
    // but for the one segment that straddles the boundary.
    let eighth = hashes.partition_point(|&h| h < u64::MAX / 8);
    let straddling = slots[eighth..]
        .iter()
        .filter(|&&s| s < *slots[..eighth].iter().max().unwrap())
        .count();
    assert!(straddling <= 1100, "{straddling} slots out of order");
    // Version 1 (segments by the mixed hash) scatters them over the table.
    let v1 = CpHash::build(
        &hashes,
        &PhfConfig {
            ordered_segments: false,
            ..cfg
        },
    )
    .unwrap()
    .phf;
    let max_first = (0..eighth).map(|i| v1.slot(hashes[i])).max().unwrap();
    assert!(max_first > v1.table_size() * 9 / 10);
}

/// Pieces written before version 2 keep their version-1 functions, which
/// must still be read (and are told apart by the version field alone).
#[test]
fn a_version_1_function_is_read_as_built() {
    let hashes = random_hashes(20_000, 8);
    for ordered in [false, true] {
        let cfg = PhfConfig {
            segment_keys: 4096,
            ordered_segments: ordered,
            ..PhfConfig::default()
        };
        let phf = CpHash::build(&hashes, &cfg).unwrap().phf;
        let mut bytes = Vec::new();
        phf.encode(&mut bytes);
        assert_eq!(
            u16::from_le_bytes([bytes[4], bytes[5]]),
            if ordered { 3 } else { 1 }
        );
        let loaded = CpHash::decode(Bytes::from(bytes)).unwrap();
        assert_perfect(&loaded, &hashes);
        for &h in &hashes {
            assert_eq!(loaded.slot(h), phf.slot(h));
        }
    }
}

/// Regression: version 2 divided the whole 64-bit range into segments, so
/// that a piece of a level's partition (a 64th of the range at level 2)
/// had all its keys in one of its segments, whose search left the cache and
/// whose range reads (a push-down's pass per child, a fold's passes) read
/// the whole piece each. Version 3 divides the keys' own interval.
#[test]
fn a_partitions_keys_spread_over_every_segment() {
    for shift in [0, 3, 6, 12] {
        let base = 5u64 << 58;
        let hashes: Vec<u64> = random_hashes(100_000, 3)
            .into_iter()
            .map(|h| base.wrapping_add(h >> shift))
            .collect();
        let phf = CpHash::build(&hashes, &config(1.1)).unwrap().phf;
        assert_perfect(&phf, &hashes);
        let slots: Vec<u64> = phf.segments.iter().map(|s| s.slots).collect();
        let most = *slots.iter().max().unwrap() as f64;
        let mean = phf.table_size() as f64 / slots.len() as f64;
        assert!(
            slots.len() >= 24 && most < 1.3 * mean,
            "range of 2^{}: {} segments, the largest {most} slots, mean {mean}",
            64 - shift,
            slots.len()
        );
        // The slots follow the hash order, a segment at a time.
        let mut by_hash = hashes.clone();
        by_hash.sort_unstable();
        let seg_of = |h: u64| {
            let s = phf.slot(h) as u64;
            phf.segments
                .iter()
                .position(|g| (g.slot_start..g.slot_start + g.slots).contains(&s))
                .unwrap()
        };
        assert!(by_hash.windows(2).all(|w| seg_of(w[0]) <= seg_of(w[1])));
    }
}
