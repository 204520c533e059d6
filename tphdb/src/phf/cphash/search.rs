//! The displacement search of one segment.
//!
//! Buckets are placed largest first. For each bucket the 256 displacements
//! of the dictionary are tried in order, and the first under which all of the
//! bucket's keys land on free, distinct slots is kept. When none is free the
//! bucket takes the displacement whose collisions are cheapest (the sum of the
//! squared sizes of the buckets in the way) and evicts those buckets, which
//! are placed again in turn: hash-and-displace with cuckoo-style eviction,
//! bounded so that a hopeless search fails instead of running forever.

use std::collections::BinaryHeap;

use super::Shape;

const NONE: u32 = u32::MAX;
/// Buckets evicted recently are not evicted again, which breaks short cycles.
const RECENT: usize = 16;

/// Why a search gave up.
#[derive(Debug)]
pub(super) enum SearchError {
    /// A hash occurs more than once in the segment; no function of the hash
    /// can separate the copies.
    Duplicates,
    /// The eviction budget ran out; retry with another dictionary or more slots.
    Exhausted,
}

/// Buffers reused across the segments a thread builds.
#[derive(Default)]
pub(super) struct Scratch {
    bucket_of: Vec<u32>,
    starts: Vec<u32>,
    sorted: Vec<u64>,
    order: Vec<u32>,
    size_counts: Vec<u32>,
    /// One bit per search slot: occupied.
    pub(super) taken: Vec<u64>,
    /// Bucket occupying each search slot, or `NONE`.
    owner: Vec<u32>,
    slots_tmp: Vec<u64>,
}

#[inline(always)]
fn is_taken(taken: &[u64], s: u64) -> bool {
    taken[(s >> 6) as usize] & (1 << (s & 63)) != 0
}

#[inline(always)]
fn set_taken(taken: &mut [u64], s: u64) {
    taken[(s >> 6) as usize] |= 1 << (s & 63);
}

#[inline(always)]
fn clear_taken(taken: &mut [u64], s: u64) {
    taken[(s >> 6) as usize] &= !(1 << (s & 63));
}

/// The space one segment's search works in.
pub(super) struct Space<'a> {
    /// The segment's mixed hashes.
    pub(super) keys: &'a [u64],
    /// The segment count: a key's bucket comes from the low bits of
    /// `hx * segment_mul`, as in the query.
    pub(super) segment_mul: u64,
    pub(super) shape: &'a Shape,
    pub(super) buckets: u32,
    pub(super) internal_slots: u32,
    /// Seeds the choice among equally good evictions.
    pub(super) rng_seed: u64,
}

/// Searches a displacement for every bucket of the segment.
///
/// On success `pilots` holds one byte per bucket and `scratch.taken` marks the
/// occupied search slots.
pub(super) fn search(
    space: &Space<'_>,
    scratch: &mut Scratch,
    pilots: &mut Vec<u8>,
) -> Result<(), SearchError> {
    let Space {
        keys,
        segment_mul,
        shape,
        buckets,
        internal_slots,
        rng_seed,
    } = *space;
    let nb = buckets as usize;
    sort_into_buckets(keys, segment_mul, shape, nb, scratch);
    order_by_size(nb, scratch);

    let Scratch {
        starts,
        sorted,
        order,
        taken,
        owner,
        slots_tmp,
        ..
    } = scratch;
    let starts: &[u32] = starts;
    let sorted: &[u64] = sorted;
    taken.clear();
    taken.resize((internal_slots as usize).div_ceil(64), 0);
    owner.clear();
    owner.resize(internal_slots as usize, NONE);
    pilots.clear();
    pilots.resize(nb, 0);

    let bucket_keys =
        |b: u32| &sorted[starts[b as usize] as usize..starts[b as usize + 1] as usize];
    let bucket_len = |b: u32| (starts[b as usize + 1] - starts[b as usize]) as u64;

    // Healthy searches evict fewer than 1% of the keys; a hopeless one should
    // give up soon and retry with more slots.
    let max_evictions = keys.len() as u64 / 4 + 1024;
    let mut evictions = 0u64;
    let mut rng = fastrand::Rng::with_seed(rng_seed);
    let mut queue: BinaryHeap<(u32, u32)> = BinaryHeap::new();
    let mut recent = [NONE; RECENT];

    for &first in order.iter() {
        if bucket_len(first) == 0 {
            break;
        }
        queue.push((bucket_len(first) as u32, first));
        recent.fill(NONE);
        let mut recent_at = 0;
        recent[0] = first;

        while let Some((_, b)) = queue.pop() {
            let ks = bucket_keys(b);
            if let Some(p) = find_free(shape, ks, taken) {
                pilots[b as usize] = p;
                let d = shape.displacement(p);
                for &hx in ks {
                    owner[shape.slot(hx, d) as usize] = b;
                }
                continue;
            }

            evictions += 1;
            if evictions > max_evictions {
                return Err(SearchError::Exhausted);
            }

            // Cheapest displacement to force: fewest and smallest victims,
            // never a recently placed bucket, never colliding with itself.
            let start = rng.u8(..);
            let mut best: Option<(u64, u8)> = None;
            'pilot: for delta in 0..=255u8 {
                let p = start.wrapping_add(delta);
                let d = shape.displacement(p);
                let mut score = 0u64;
                for &hx in ks {
                    let o = owner[shape.slot(hx, d) as usize];
                    if o == NONE {
                        continue;
                    }
                    if recent.contains(&o) {
                        continue 'pilot;
                    }
                    score += bucket_len(o) * bucket_len(o);
                    if best.is_some_and(|(s, _)| score >= s) {
                        continue 'pilot;
                    }
                }
                slots_tmp.clear();
                slots_tmp.extend(ks.iter().map(|&hx| shape.slot(hx, d)));
                slots_tmp.sort_unstable();
                if slots_tmp.windows(2).any(|w| w[0] == w[1]) {
                    continue;
                }
                best = Some((score, p));
                if score == bucket_len(b) * bucket_len(b) {
                    break;
                }
            }

            let Some((_, p)) = best else {
                return Err(if has_duplicates(ks) {
                    SearchError::Duplicates
                } else {
                    SearchError::Exhausted
                });
            };
            pilots[b as usize] = p;
            let d = shape.displacement(p);
            for &hx in ks {
                let s = shape.slot(hx, d);
                let o = owner[s as usize];
                if o != NONE {
                    debug_assert_ne!(o, b);
                    queue.push((bucket_len(o) as u32, o));
                    let od = shape.displacement(pilots[o as usize]);
                    for &ohx in bucket_keys(o) {
                        let os = shape.slot(ohx, od);
                        owner[os as usize] = NONE;
                        clear_taken(taken, os);
                    }
                }
                owner[s as usize] = b;
                set_taken(taken, s);
            }
            recent_at = (recent_at + 1) % RECENT;
            recent[recent_at] = b;
        }
    }
    Ok(())
}

/// The first displacement under which every key of the bucket lands on a
/// free slot and no two collide; marks those slots taken.
#[inline]
fn find_free(shape: &Shape, keys: &[u64], taken: &mut [u64]) -> Option<u8> {
    'pilot: for p in 0..=255u8 {
        let d = shape.displacement(p);
        // Test all keys before branching: fewer mispredictions than an early exit.
        let mut any = false;
        for &hx in keys {
            any |= is_taken(taken, shape.slot(hx, d));
        }
        if any {
            continue;
        }
        for (i, &hx) in keys.iter().enumerate() {
            let s = shape.slot(hx, d);
            if is_taken(taken, s) {
                // Two keys of this bucket collide: undo and try the next one.
                for &prev in &keys[..i] {
                    clear_taken(taken, shape.slot(prev, d));
                }
                continue 'pilot;
            }
            set_taken(taken, s);
        }
        return Some(p);
    }
    None
}

fn has_duplicates(keys: &[u64]) -> bool {
    let mut v = keys.to_vec();
    v.sort_unstable();
    v.windows(2).any(|w| w[0] == w[1])
}

/// Counting sort of the keys by bucket into `scratch.sorted`, with bucket
/// `b` at `sorted[starts[b]..starts[b + 1]]`.
fn sort_into_buckets(keys: &[u64], segment_mul: u64, shape: &Shape, nb: usize, s: &mut Scratch) {
    s.starts.clear();
    s.starts.resize(nb + 1, 0);
    s.bucket_of.clear();
    s.bucket_of.extend(keys.iter().map(|&hx| {
        let b = shape.bucket(hx.wrapping_mul(segment_mul)) as u32;
        debug_assert!((b as usize) < nb);
        b
    }));
    for &b in &s.bucket_of {
        s.starts[b as usize + 1] += 1;
    }
    for i in 0..nb {
        s.starts[i + 1] += s.starts[i];
    }
    s.sorted.clear();
    s.sorted.resize(keys.len(), 0);
    // Fill from the back of each bucket so `starts` ends up unchanged.
    let mut end: Vec<u32> = s.starts[1..].to_vec();
    for (&hx, &b) in keys.iter().zip(&s.bucket_of).rev() {
        end[b as usize] -= 1;
        s.sorted[end[b as usize] as usize] = hx;
    }
}

/// Bucket ids by non-increasing size into `scratch.order` (counting sort).
fn order_by_size(nb: usize, s: &mut Scratch) {
    let len = |b: usize| (s.starts[b + 1] - s.starts[b]) as usize;
    let max = (0..nb).map(len).max().unwrap_or(0);
    s.size_counts.clear();
    s.size_counts.resize(max + 2, 0);
    for b in 0..nb {
        s.size_counts[max - len(b) + 1] += 1;
    }
    for i in 0..=max {
        s.size_counts[i + 1] += s.size_counts[i];
    }
    s.order.clear();
    s.order.resize(nb, 0);
    for b in 0..nb {
        let k = max - len(b);
        s.order[s.size_counts[k] as usize] = b as u32;
        s.size_counts[k] += 1;
    }
}
