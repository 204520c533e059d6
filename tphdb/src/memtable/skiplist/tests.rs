use super::*;
use crate::memtable::arena::BLOCK_BYTES;
use std::collections::BTreeMap;
use std::sync::Arc;

fn collect(list: &SkipList) -> Vec<(Vec<u8>, u64, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    let mut e = list.first();
    while let Some(x) = e {
        out.push((x.key().to_vec(), x.seq(), x.value().map(<[u8]>::to_vec)));
        e = x.next();
    }
    out
}

#[test]
fn orders_by_key_then_newest_first() {
    let list = SkipList::new(true);
    assert!(list.first().is_none() && list.last().is_none());
    list.insert(b"b", 1, Some(b"b1"));
    list.insert(b"a", 2, None);
    list.insert(b"b", 3, Some(b""));
    list.insert(b"", 4, Some(b"empty key"));
    assert_eq!(
        collect(&list),
        vec![
            (b"".to_vec(), 4, Some(b"empty key".to_vec())),
            (b"a".to_vec(), 2, None),
            (b"b".to_vec(), 3, Some(vec![])),
            (b"b".to_vec(), 1, Some(b"b1".to_vec())),
        ]
    );
    assert_eq!(list.seek(b"b", 2).map(|e| e.seq()), Some(1));
    assert_eq!(list.seek(b"b", 9).map(|e| e.seq()), Some(3));
    assert!(list.seek(b"b", 0).is_none());
    assert_eq!(list.seek_after(b"a").map(|e| e.key()), Some(&b"b"[..]));
    assert!(list.seek_after(b"b").is_none());
    assert_eq!(list.last_below(b"b").map(|e| e.key()), Some(&b"a"[..]));
    assert!(list.last_below(b"").is_none());
    assert_eq!(list.last().map(|e| e.seq()), Some(1));
    assert_eq!(list.len(), 4);
}

#[test]
fn matches_a_sorted_model_and_charges_what_it_allocates() {
    let list = SkipList::new(true);
    let mut model = BTreeMap::new();
    let mut rng = fastrand::Rng::with_seed(7);
    let mut user = 0;
    let n = if cfg!(miri) { 400 } else { 20_000 };
    for seq in 1..n {
        let key = rng.u32(..5000).to_be_bytes().to_vec();
        // Now and then a value big enough for a block of its own.
        let value_len = if rng.u32(..500) == 0 {
            BLOCK_BYTES / 4 + 1000
        } else {
            rng.usize(..200)
        };
        let value = (rng.u32(..10) != 0).then(|| vec![seq as u8; value_len]);
        user += key.len() + value.as_ref().map_or(0, Vec::len);
        list.insert(&key, seq, value.as_deref());
        model.insert((key, std::cmp::Reverse(seq)), value);
    }
    let want: Vec<_> = model.into_iter().map(|((k, s), v)| (k, s.0, v)).collect();
    assert_eq!(collect(&list), want);
    // Every entry costs its bytes plus at most 24 + links + padding, and
    // the block tails left behind are small.
    let overhead = list.memory_bytes() - user;
    assert!(overhead < want.len() * 48, "{overhead} bytes over {user}");
    assert!(overhead > want.len() * 24, "{overhead} bytes over {user}");
}

#[test]
fn a_frozen_list_shares_keys_and_values_that_outlive_it() {
    let list = SkipList::new(true);
    let big = vec![9u8; BLOCK_BYTES / 2];
    list.insert(b"k1", 1, Some(b"v1"));
    list.insert(b"k2", 2, Some(&big));
    list.insert(b"k3", 3, None);
    list.insert(b"k4", 4, Some(b""));
    let arena = list.freeze();
    let mut shared = Vec::new();
    let mut e = list.first();
    while let Some(x) = e {
        let (chunk, off) = arena.share(x.key_and_value());
        shared.push((chunk, off, x.key().len(), x.value().map(<[u8]>::len)));
        e = x.next();
    }
    let inserted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        list.insert(b"k5", 5, None);
    }));
    assert!(inserted.is_err(), "a frozen list takes no insert");
    drop(arena);
    drop(list);
    let want: Vec<(&[u8], Option<&[u8]>)> = vec![
        (b"k1", Some(b"v1")),
        (b"k2", Some(&big)),
        (b"k3", None),
        (b"k4", Some(b"")),
    ];
    let got: Vec<(&[u8], Option<&[u8]>)> = shared
        .iter()
        .map(|(chunk, off, key_len, value_len)| {
            let at = *off as usize;
            let value = value_len.map(|n| chunk.slice(at + key_len, n));
            (chunk.slice(at, *key_len), value)
        })
        .collect();
    assert_eq!(got, want);
}

/// Whether the page at `addr` is mapped from a file, by
/// `/proc/self/maps` (an inode other than 0).
#[cfg(all(target_os = "linux", not(miri)))]
fn file_backed(addr: usize) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (lo, hi) = f[0].split_once('-').unwrap();
        let lo = usize::from_str_radix(lo, 16).unwrap();
        let hi = usize::from_str_radix(hi, 16).unwrap();
        (lo..hi).contains(&addr) && f[4] != "0"
    })
}

#[test]
#[cfg(all(target_os = "linux", not(miri)))]
fn a_spilled_list_reads_the_same_from_file_pages_while_readers_run() {
    const N: u64 = 40_000;
    let list = Arc::new(SkipList::new(true));
    let big = vec![7u8; BLOCK_BYTES / 2 + 3];
    for i in 0..N {
        let key = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 24).to_be_bytes();
        list.insert(&key, i + 1, Some(&key));
    }
    list.insert(b"big", N + 1, Some(&big));
    let arena = list.freeze();
    let big_value = list.seek(b"big", u64::MAX).unwrap().value().unwrap();
    let (big_chunk, big_at) = arena.share(big_value);
    let shared_big = big_chunk.slice(big_at as usize, big.len());
    let want = collect(&list);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (list, stop) = (list.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut passes = 0;
                while !stop.load(Relaxed) || passes == 0 {
                    let mut e = list.first();
                    let mut n = 0;
                    while let Some(x) = e {
                        if x.key() != b"big" {
                            assert_eq!(x.value(), Some(x.key()));
                        }
                        n += 1;
                        e = x.next();
                    }
                    assert_eq!(n, N + 1);
                    passes += 1;
                }
            })
        })
        .collect();
    let file = tempfile::tempfile().unwrap();
    assert!(!file_backed(list.head.addr()));
    let moved = list.spill(&file).unwrap();
    assert!(moved as usize >= list.memory_bytes() / 2, "{moved}");
    assert!(list.is_spilled());
    assert!(
        file_backed(list.head.addr()),
        "the head's block maps the file"
    );
    assert!(
        file_backed(shared_big.as_ptr().addr()),
        "so does a big value's own block"
    );
    assert_eq!(
        list.spill(&file).unwrap(),
        0,
        "a second spill moves nothing"
    );
    stop.store(true, Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    drop(file);
    assert_eq!(collect(&list), want);
    drop(arena);
    drop(list);
    assert_eq!(shared_big, &big[..], "a shared value outlives the list");
}

#[test]
fn readers_see_a_consistent_list_while_a_writer_inserts() {
    const N: u64 = if cfg!(miri) { 300 } else { 50_000 };
    let list = Arc::new(SkipList::new(true));
    let writer = {
        let list = list.clone();
        std::thread::spawn(move || {
            for i in 0..N {
                let key = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40).to_be_bytes();
                list.insert(&key, i + 1, Some(&key));
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let list = list.clone();
            std::thread::spawn(move || {
                while list.len() < N as usize {
                    let mut prev: Option<(Vec<u8>, u64)> = None;
                    let mut e = list.first();
                    while let Some(x) = e {
                        assert_eq!(x.value(), Some(x.key()));
                        if let Some((k, s)) = &prev {
                            assert!(
                                (&k[..], std::cmp::Reverse(*s))
                                    < (x.key(), std::cmp::Reverse(x.seq()))
                            );
                        }
                        prev = Some((x.key().to_vec(), x.seq()));
                        e = x.next();
                    }
                }
            })
        })
        .collect();
    writer.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(collect(&list).len(), N as usize);
}

/// Every level of `list`, walked from the head, is in the list's order,
/// and each level holds the nodes of the one above it.
fn check_levels(list: &SkipList) {
    let mut above: Option<Vec<*mut u8>> = None;
    for level in (0..MAX_HEIGHT).rev() {
        let mut nodes = Vec::new();
        // SAFETY: the head has every level.
        let mut x = unsafe { link(list.head, level) }.load(Acquire);
        while let Some(e) = Entry::new(x) {
            if let Some(&p) = nodes.last() {
                let prev = Entry::new(p).unwrap();
                assert_eq!(
                    prev.cmp_to(e.key(), e.seq()),
                    Ordering::Less,
                    "level {level}"
                );
            }
            nodes.push(x);
            // SAFETY: `x` was reached at `level`.
            x = unsafe { link(x, level) }.load(Acquire);
        }
        if let Some(above) = &above {
            assert!(above.iter().all(|n| nodes.contains(n)), "level {level}");
        }
        above = Some(nodes);
    }
}

/// Batches whose searches run side by side make the list that inserting
/// their entries one by one makes: several versions of a key within a
/// batch, empty values and deletes included.
#[test]
fn batches_searched_side_by_side_make_the_list_single_inserts_make() {
    let (single, batched) = (SkipList::new(true), SkipList::new(true));
    let mut rng = fastrand::Rng::with_seed(11);
    let mut seq = 0;
    let rounds = if cfg!(miri) { 10 } else { 1000 };
    for _ in 0..rounds {
        let batch: Vec<(Vec<u8>, u64, Option<Vec<u8>>)> = (0..rng.usize(1..80))
            .map(|_| {
                seq += 1;
                let value = (rng.u8(..8) != 0).then(|| vec![seq as u8; rng.usize(..20)]);
                (rng.u32(..3000).to_be_bytes().to_vec(), seq, value)
            })
            .collect();
        for (k, s, v) in &batch {
            single.insert(k, *s, v.as_deref());
        }
        let entries: Vec<NewEntry<'_>> = batch
            .iter()
            .map(|(k, s, v)| (&k[..], *s, v.as_deref()))
            .collect();
        batched.insert_all(&entries);
    }
    assert_eq!(collect(&batched), collect(&single));
    assert_eq!(batched.len(), single.len());
    check_levels(&batched);
    for _ in 0..2000 {
        let key = rng.u32(..3100).to_be_bytes();
        let at = rng.u64(..seq + 2);
        let found = |l: &SkipList| l.seek(&key, at).map(|e| (e.key().to_vec(), e.seq()));
        assert_eq!(found(&batched), found(&single));
    }
}

/// Regression: `seek` walked to the last node before its target, then read
/// that node's level-0 link again to return the node after it. A node
/// linked into that gap in between (ordered before the target, so not the
/// answer) was returned instead, and a get of a key in the memtable fell
/// through to an older version in the TPHs (found by `tphdb stress`). The
/// writer here links every node right before the key sought.
#[test]
fn a_seek_is_not_misled_by_a_node_linked_right_before_its_target() {
    const N: u64 = if cfg!(miri) { 300 } else { 300_000 };
    let list = Arc::new(SkipList::new(true));
    list.insert(b"z", 1, Some(b"z"));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (list, done) = (list.clone(), done.clone());
        std::thread::spawn(move || {
            let mut misses = 0u64;
            while !done.load(Relaxed) {
                for _ in 0..64 {
                    let e = list.seek(b"z", u64::MAX);
                    misses += u64::from(e.is_none_or(|e| e.key() != b"z"));
                }
            }
            misses
        })
    };
    for i in 0..N {
        // Ascending keys, all below "z": each lands right before it.
        let key = format!("y{i:010}");
        list.insert(key.as_bytes(), i + 2, None);
    }
    done.store(true, Relaxed);
    assert_eq!(reader.join().unwrap(), 0, "seeks of \"z\" that missed it");
}

#[test]
fn runs_walked_side_by_side_list_the_newest_version_of_each_key_in_order() {
    // The iterator's answer: the first entry of each key along level 0.
    fn newest_one_by_one(list: &SkipList) -> Vec<(Vec<u8>, u64)> {
        let mut out: Vec<(Vec<u8>, u64)> = Vec::new();
        let mut e = list.first();
        while let Some(x) = e {
            if out.last().is_none_or(|(k, _)| k != x.key()) {
                out.push((x.key().to_vec(), x.seq()));
            }
            e = x.next();
        }
        out
    }
    let listed = |list: &SkipList| -> Vec<(Vec<u8>, u64)> {
        let mut got = Vec::new();
        list.for_each_newest(|e| got.push((e.key().to_vec(), e.seq())));
        assert_eq!(got, newest_one_by_one(list));
        got
    };
    assert!(listed(&SkipList::new(false)).is_empty());
    // From one entry (no level above 0) to lists of thousands of runs,
    // with keys of many versions, whose versions straddle runs.
    let mut rng = fastrand::Rng::with_seed(11);
    let sizes: &[usize] = if cfg!(miri) {
        &[1, 2, 40]
    } else {
        &[1, 2, 40, 1000, 50_000]
    };
    for &n in sizes {
        let list = SkipList::new(false);
        for seq in 1..=n as u64 {
            let key = rng.u32(..(n as u32 / 3).max(1)).to_be_bytes();
            list.insert(&key, seq, (seq % 7 != 0).then_some(&b"v"[..]));
        }
        let got = listed(&list);
        assert!(got.windows(2).all(|w| w[0].0 < w[1].0), "{n} entries");
    }
}
