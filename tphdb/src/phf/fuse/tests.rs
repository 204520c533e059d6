//! Fuse builds, lookups and the decoder against damage.
use super::*;

/// A fuse over `pairs` (hash, value).
fn build(pairs: &[(u64, u64)], bits: u32) -> Result<BuiltFuse> {
    let hashes: Vec<u64> = pairs.iter().map(|p| p.0).collect();
    Fuse::build(&hashes, bits, 1, &|_, i| pairs[i as usize].1)
}

fn pairs(n: u64, bits: u32, salt: u64) -> Vec<(u64, u64)> {
    (0..n)
        .map(|i| {
            let h = mix64(i, salt);
            (h, mix64(h, 7) & ((1 << bits) - 1))
        })
        .collect()
}

#[test]
fn every_key_gets_its_value() {
    for n in [0u64, 1, 2, 3, 4, 5, 10, 100, 1000, 10_000, 300_000] {
        for bits in [1, 12, 56] {
            let p = pairs(n, bits, n);
            let b = build(&p, bits).unwrap();
            assert!(b.duplicate_hashes.is_empty());
            assert_eq!(b.fuse.len(), n);
            for &(h, v) in &p {
                assert_eq!(b.fuse.get(h), v, "n {n} bits {bits}");
            }
        }
    }
}

#[test]
fn a_fuse_of_chunks_near_the_largest_takes_about_1_1_cells_a_key() {
    let p = pairs(1_000_000, 12, 3);
    let f = build(&p, 12).unwrap().fuse;
    assert_eq!(f.chunks.len(), 4);
    let bits_per_key = f.memory_bytes() as f64 * 8.0 / 1e6;
    assert!(bits_per_key < 12.0 * 1.11, "{bits_per_key} bits a key");
    let p = pairs(100_000, 12, 3);
    let f = build(&p, 12).unwrap().fuse;
    let bits_per_key = f.memory_bytes() as f64 * 8.0 / 1e5;
    assert!(bits_per_key < 12.0 * 1.14, "{bits_per_key} bits a key");
}

#[test]
fn repeated_hashes_are_reported_and_the_rest_still_map() {
    let mut p = pairs(5000, 10, 9);
    p.push((p[10].0, 3));
    p.push((p[20].0, 4));
    p.push((p[20].0, 5));
    let b = build(&p, 10).unwrap();
    let mut want = vec![p[10].0, p[20].0];
    want.sort_unstable();
    assert_eq!(b.duplicate_hashes, want);
    assert_eq!(b.fuse.len(), 5000);
    for &(h, v) in &p[..5000] {
        if !want.contains(&h) {
            assert_eq!(b.fuse.get(h), v);
        }
    }
}

#[test]
fn a_batched_build_holds_chunks_and_gives_every_value() {
    let p = pairs(50_000, 13, 5);
    let batched = Fuse::build_streamed(
        p.len() as u64,
        13,
        1,
        0..=u64::MAX,
        &mut |_, f: &mut dyn FnMut(u64, u32)| {
            (0..p.len()).for_each(|i| f(p[i].0, i as u32));
            Ok(())
        },
        &|_, i| p[i as usize].1,
        4000,
    )
    .unwrap()
    .fuse;
    assert!(
        batched.chunks.len() >= 12,
        "{} chunks",
        batched.chunks.len()
    );
    for &(h, v) in &p {
        assert_eq!(batched.get(h), v);
    }
}

#[test]
fn a_source_that_disagrees_with_its_count_or_width_is_refused() {
    let p = pairs(100, 8, 1);
    let mut src = |_, f: &mut dyn FnMut(u64, u32)| {
        (0..p.len()).for_each(|i| f(p[i].0, i as u32));
        Ok(())
    };
    let all = 0..=u64::MAX;
    assert!(Fuse::build_streamed(101, 8, 1, all.clone(), &mut src, &|_, _| 0, 10).is_err());
    assert!(Fuse::build_streamed(100, 57, 1, all, &mut src, &|_, _| 0, 1000).is_err());
    assert!(build(&p, 7).is_err());
}

#[test]
fn it_round_trips_and_rejects_damage_without_panicking() {
    let p = pairs(3000, 11, 2);
    let f = build(&p, 11).unwrap().fuse;
    let mut enc = Vec::new();
    f.encode(&mut enc);
    let back = Fuse::decode(Bytes::from(enc.clone())).unwrap();
    for &(h, v) in &p {
        assert_eq!(back.get(h), v);
    }
    for len in 0..enc.len() {
        assert!(Fuse::decode(Bytes::copy_from_slice(&enc[..len])).is_err());
    }
    // A damaged header is refused or, if consistent, still only reads
    // inside its cells.
    for at in 0..40.min(enc.len()) {
        let mut bad = enc.clone();
        bad[at] ^= 0x5a;
        if let Ok(f) = Fuse::decode(Bytes::from(bad)) {
            for &(h, _) in p.iter().take(100) {
                f.get(h);
            }
        }
    }
    let mut empty = Vec::new();
    build(&[], 9).unwrap().fuse.encode(&mut empty);
    let e = Fuse::decode(Bytes::from(empty)).unwrap();
    assert_eq!(e.get(12345), 0);
}

#[test]
fn a_build_serializes_in_place_what_encode_writes() {
    for (n, chunk_keys) in [
        (0, 100),
        (1, 100),
        (3000, 100_000),
        (3000, 700),
        (20_000, 1500),
    ] {
        let p = pairs(n, 13, 3);
        let mut src = |hashes: RangeInclusive<u64>, f: &mut dyn FnMut(u64, u32)| {
            (0..p.len())
                .filter(|&i| hashes.contains(&p[i].0))
                .for_each(|i| f(p[i].0, i as u32));
            Ok(())
        };
        let value = |_, i: u32| p[i as usize].1;
        let all = 0..=u64::MAX;
        let built = Fuse::build_streamed(n, 13, 5, all, &mut src, &value, chunk_keys).unwrap();
        let mut enc = Vec::new();
        built.fuse.encode(&mut enc);
        assert_eq!(
            &built.section()[..],
            &enc[..],
            "{n} keys, chunks of {chunk_keys}"
        );
        // The cells were packed in the section, not copied into it.
        let header = enc.len() - built.fuse.cells.len();
        assert_eq!(
            built.section()[header..].as_ptr(),
            built.fuse.cells.as_ptr()
        );
        let back = Fuse::decode(built.section()).unwrap();
        for &(h, v) in &p {
            assert_eq!(back.get(h), v);
        }
    }
}

#[test]
fn interval_chunks_give_back_the_partition_they_divide() {
    use crate::hash::hashes_of_partitions;
    for partitions in [1u64, 8, 64, 4096] {
        for p in [0, partitions / 2, partitions - 1] {
            let hashes = hashes_of_partitions(p..p + 1, partitions);
            for count in [1u64, 3, 16, 61] {
                let chunking = Chunking::over(&hashes, count);
                assert_eq!(
                    chunking.hashes(count),
                    Some(hashes.clone()),
                    "{p} of {partitions}, {count} chunks"
                );
            }
        }
    }
    // A partition of ten: short at the end by less than a scale'th.
    let hashes = hashes_of_partitions(3..4, 10);
    let span = |r: &RangeInclusive<u64>| r.end() - r.start() + 1;
    let got = Chunking::over(&hashes, 1).hashes(1).unwrap();
    assert_eq!(got.start(), hashes.start());
    assert!(got.end() <= hashes.end() && span(&got) > span(&hashes) / 11 * 10);
    assert_eq!(Chunking::Mixed { seed: 1 }.hashes(4), None);
}

use proptest::prelude::*;

proptest! {
    /// Any multiset of hashes, values of any width, built whole or in
    /// batches: every hash given once gets its value back, and the ones
    /// given more than once are exactly the duplicates reported.
    #[test]
    fn every_distinct_hash_gets_its_value(
        hashes in proptest::collection::vec(0u64..5000, 0..3000),
        bits in 1u32..=56,
        batch in 1usize..4000,
    ) {
        use std::collections::BTreeMap;
        let mask = (1u64 << bits) - 1;
        let pairs: Vec<(u64, u64)> = hashes
            .iter()
            .map(|&h| (mix64(h, 3), mix64(h, 4) & mask))
            .collect();
        let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
        for &(h, _) in &pairs {
            *seen.entry(h).or_default() += 1;
        }
        let built = Fuse::build_streamed(
            pairs.len() as u64,
            bits,
            9,
            0..=u64::MAX,
            &mut |_, f: &mut dyn FnMut(u64, u32)| {
                (0..pairs.len()).for_each(|i| f(pairs[i].0, i as u32));
                Ok(())
            },
            &|_, i| pairs[i as usize].1,
            batch,
        )
        .unwrap();
        let repeated: Vec<u64> = seen.iter().filter(|e| *e.1 > 1).map(|e| *e.0).collect();
        prop_assert_eq!(&built.duplicate_hashes, &repeated);
        prop_assert_eq!(built.fuse.len(), seen.len() as u64);
        for &(h, v) in &pairs {
            if seen[&h] == 1 {
                prop_assert_eq!(built.fuse.get(h), v);
            }
        }
    }
}

/// Chunks divide the given interval of hashes: a source may yield only a
/// batch's interval, keys spread over that interval make even chunks, and
/// keys outside it (or a source that yields everything) still map.
#[test]
fn chunks_are_intervals_of_the_hashes_given() {
    let lo = 3u64 << 60;
    let span = 1u64 << 58;
    let mut p: Vec<(u64, u64)> = (0..60_000u64)
        .map(|i| (lo + mix64(i, 5) % span, mix64(i, 6) & 0x3ff))
        .collect();
    p.sort_unstable();
    p.dedup_by_key(|x| x.0);
    let asked = std::cell::RefCell::new(Vec::new());
    let build = |filter: bool, hashes: RangeInclusive<u64>| {
        Fuse::build_streamed(
            p.len() as u64,
            10,
            1,
            hashes,
            &mut |interval: RangeInclusive<u64>, f: &mut dyn FnMut(u64, u32)| {
                asked.borrow_mut().push(interval.clone());
                for (i, &(h, _)) in p.iter().enumerate() {
                    if !filter || interval.contains(&h) {
                        f(h, i as u32);
                    }
                }
                Ok(())
            },
            &|_, i| p[i as usize].1,
            5000,
        )
        .unwrap()
        .fuse
    };
    let filtered = build(true, lo..=lo + (span - 1));
    let intervals = asked.take();
    assert!(intervals.len() >= 10, "{} passes", intervals.len());
    assert_eq!(*intervals[0].start(), 0);
    assert_eq!(*intervals.last().unwrap().end(), u64::MAX);
    for w in intervals.windows(2) {
        assert_eq!(*w[0].end() + 1, *w[1].start());
    }
    let unfiltered = build(false, lo..=lo + (span - 1));
    let (mut a, mut b) = (Vec::new(), Vec::new());
    filtered.encode(&mut a);
    unfiltered.encode(&mut b);
    assert!(a == b, "a filtering source builds the same function");
    for &(h, v) in &p {
        assert_eq!(filtered.get(h), v);
    }
    // Even chunks: none more than twice the average.
    let most = filtered.chunks.iter().map(Chunk::cells).max().unwrap();
    let average =
        filtered.chunks.iter().map(Chunk::cells).sum::<u64>() / filtered.chunks.len() as u64;
    assert!(
        most < 2 * average,
        "{most} cells in a chunk, {average} on average"
    );
    // A range the keys do not fit: uneven chunks, every value still right.
    let skewed = build(true, 0..=lo);
    for &(h, v) in &p {
        assert_eq!(skewed.get(h), v);
    }
}

/// Version-1 sections (chunks by mixed hash) still decode and answer.
#[test]
fn a_version_1_section_decodes() {
    let p = pairs(2000, 9, 4);
    let f = build(&p, 9).unwrap().fuse;
    let v1 = Fuse {
        chunking: Chunking::Mixed { seed: 77 },
        value_bits: f.value_bits,
        keys: f.keys,
        chunks: f.chunks.clone(),
        cells: f.cells.clone(),
    };
    let mut enc = Vec::new();
    v1.encode(&mut enc);
    assert_eq!(u32::from_le_bytes(enc[..4].try_into().unwrap()), 1);
    let back = Fuse::decode(Bytes::from(enc)).unwrap();
    assert_eq!(back.chunking, Chunking::Mixed { seed: 77 });
    // One chunk: the chunking does not change which cells a key reads.
    assert_eq!(f.chunks.len(), 1);
    for &(h, v) in &p {
        assert_eq!(back.get(h), v);
    }
}

/// Regression: a build's memory was counted as `BUILD_BYTES_PER_KEY` for
/// every key of its batch budget (524,288 keys at the defaults, 16.8 MB)
/// while a batch holds only the whole chunks that fit it: one of 2^18
/// keys at most there, about half the count.
#[test]
fn a_build_counts_the_chunks_its_batch_holds() {
    use super::keys_held;
    // Two million keys in 8 chunks of 250,001: one a batch of 524,288.
    let held = keys_held(2_000_000, 1 << 19);
    assert_eq!(held, 250_001 + 250_001 / 16);
    // Chunks capped by a small batch: one chunk of about the batch.
    let held = keys_held(1000, 128);
    assert!((128..=2 * 133).contains(&held), "{held}");
    // All keys in one chunk, and nothing for none.
    assert!((100..=110).contains(&keys_held(100, 1 << 20)));
    assert_eq!(keys_held(0, 1 << 20), 0);
    // Batches of several chunks where they fit.
    let held = keys_held(1 << 20, 4 << 20);
    assert!(
        (1 << 20..=(1 << 20) * 17 / 16 + 64).contains(&held),
        "{held}"
    );
}
