//! Parallel construction of a [`CpHash`](super::CpHash).

use std::cell::RefCell;
use std::collections::HashSet;

use rayon::prelude::*;

use super::search::{search, Scratch, SearchError, Space};
use super::{SegmentOrder, SegmentRecord, Shape, MAX_LOAD};
use crate::error::{Error, Result};
use crate::phf::{split_repeats, PhfConfig};
use crate::util::reduce::mix64;

/// Attempts per segment: the first ones change only the dictionary, later
/// ones also grow the segment's slots (paper §4.1.1), by 5%, 10%, 20%, ...
/// so that even a far too large `keys_per_bucket` ends in a valid table.
const MAX_ATTEMPTS: u32 = 10;
const SAME_SIZE_ATTEMPTS: u32 = 2;
const FIRST_GROWTH: f64 = 0.05;

thread_local! {
    // Reused across builds: the search buffers are a few hundred KiB per
    // segment and page-faulting them in anew costs more than the search.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

pub(super) struct BuildOutput {
    pub(super) n: u64,
    pub(super) order: SegmentOrder,
    pub(super) records: Vec<SegmentRecord>,
    pub(super) pilots: Vec<u8>,
    /// Little-endian u32 per remapped search slot.
    pub(super) remap: Vec<u8>,
    pub(super) duplicates: Vec<u64>,
}

struct SegmentOut {
    record: SegmentRecord,
    keys: u64,
    pilots: Vec<u8>,
    remap: Vec<u32>,
    duplicates: Vec<u64>,
}

/// Keys per bucket when the config leaves it open: the fuller the table, the
/// fewer keys per bucket the search can afford.
fn default_keys_per_bucket(table_factor: f64) -> f64 {
    if table_factor < 1.0 / MAX_LOAD + 1e-9 {
        3.0
    } else if table_factor < 1.05 {
        3.3
    } else {
        3.7
    }
}

pub(super) fn build(hashes: &[u64], config: &PhfConfig) -> Result<BuildOutput> {
    if hashes.is_empty() {
        return Ok(BuildOutput {
            n: 0,
            order: segment_order(hashes, config, 0),
            records: Vec::new(),
            pilots: Vec::new(),
            remap: Vec::new(),
            duplicates: Vec::new(),
        });
    }
    if hashes.len() as u64 > u32::MAX as u64 * 64 {
        return Err(Error::InvalidArgument(format!(
            "perfect hash over {} keys exceeds the limit of 2^38",
            hashes.len()
        )));
    }
    let segments = hashes.len().div_ceil(config.segment_keys) as u64;
    let lambda = config
        .keys_per_bucket
        .unwrap_or_else(|| default_keys_per_bucket(config.table_factor));
    let order = segment_order(hashes, config, segments);
    let (mixed, starts) = partition(hashes, config.seed, order, segments);

    let outs: Vec<Result<SegmentOut>> = (0..segments as usize)
        .into_par_iter()
        .map(|j| {
            let keys = &mixed[starts[j]..starts[j + 1]];
            SCRATCH.with_borrow_mut(|scratch| {
                build_segment(keys, j as u64, segments, lambda, config, scratch)
            })
        })
        .collect();

    let mut out = BuildOutput::with_segments(segments, order);
    let mut mixed_duplicates = HashSet::new();
    for seg in outs {
        out.append(seg?, &mut mixed_duplicates);
    }
    if !mixed_duplicates.is_empty() {
        // Report the caller's hashes, not the mixed ones.
        for &h in hashes {
            if mixed_duplicates.remove(&mix64(h, config.seed)) {
                out.duplicates.push(h);
            }
        }
    }
    Ok(out)
}

impl BuildOutput {
    fn with_segments(segments: u64, order: SegmentOrder) -> BuildOutput {
        BuildOutput {
            n: 0,
            order,
            records: Vec::with_capacity(segments as usize),
            pilots: Vec::new(),
            remap: Vec::new(),
            duplicates: Vec::new(),
        }
    }

    /// Adds the next segment; its repeated hashes (mixed) go to `duplicates`.
    fn append(&mut self, seg: SegmentOut, duplicates: &mut HashSet<u64>) {
        self.n += seg.keys;
        self.records.push(seg.record);
        self.pilots.extend_from_slice(&seg.pilots);
        for r in seg.remap {
            self.remap.extend_from_slice(&r.to_le_bytes());
        }
        duplicates.extend(seg.duplicates);
    }
}

fn build_segment(
    keys: &[u64],
    index: u64,
    segments: u64,
    lambda: f64,
    config: &PhfConfig,
    scratch: &mut Scratch,
) -> Result<SegmentOut> {
    let input = keys;
    let mut deduplicated: Option<Vec<u64>> = None;
    let mut duplicates = Vec::new();
    let n = keys.len() as u64;
    let buckets = ((n as f64 / lambda).ceil() as u32).max(2);
    let mut pilots = Vec::new();
    let mut attempt = 0;
    loop {
        let keys: &[u64] = deduplicated.as_deref().unwrap_or(input);
        let n = keys.len() as u64;
        let table_slots = ((n as f64 * config.table_factor).ceil() as u64).max(1);
        let search_slots = table_slots.max((n as f64 / MAX_LOAD).ceil() as u64);
        let grown = grow(search_slots, attempt);
        // Grow the table itself unless the table was meant to be fuller than
        // the search can go; then only the search space grows (and is remapped).
        let table_slots = if table_slots == search_slots {
            grown
        } else {
            table_slots
        };
        let (slots, internal) = (to_u32(table_slots)?, to_u32(grown)?);
        let shape = Shape::new(buckets, internal, attempt, config.seed);
        let rng_seed = config.seed ^ index.rotate_left(32) ^ attempt as u64;
        let space = Space {
            keys,
            segment_mul: segments,
            shape: &shape,
            buckets,
            internal_slots: internal,
            rng_seed,
        };
        match search(&space, scratch, &mut pilots) {
            Ok(()) => {
                return Ok(SegmentOut {
                    record: SegmentRecord {
                        buckets,
                        slots,
                        internal_slots: internal,
                        attempt,
                    },
                    keys: n,
                    pilots,
                    remap: remap_overflow(&scratch.taken, slots, internal),
                    duplicates,
                });
            }
            Err(SearchError::Duplicates) => {
                // Keep one copy of each repeated hash and search again; the
                // attempt is not spent, the input was at fault. Other buckets
                // may hold repeats the search had not reached: collect all.
                let (v, repeats) = split_repeats(keys);
                duplicates.extend(repeats);
                deduplicated = Some(v);
            }
            Err(SearchError::Exhausted) => {
                attempt += 1;
                if attempt == MAX_ATTEMPTS {
                    return Err(Error::PhfBuild(format!(
                        "segment {index} ({n} keys) found no displacements after {MAX_ATTEMPTS} \
                         attempts; lower keys_per_bucket or raise table_factor"
                    )));
                }
            }
        }
    }
}

fn grow(slots: u64, attempt: u32) -> u64 {
    if attempt < SAME_SIZE_ATTEMPTS {
        return slots;
    }
    let factor = 1.0 + FIRST_GROWTH * f64::powi(2.0, (attempt - SAME_SIZE_ATTEMPTS) as i32);
    (slots as f64 * factor).ceil() as u64
}

fn to_u32(x: u64) -> Result<u32> {
    u32::try_from(x).map_err(|_| Error::InvalidArgument(format!("segment of {x} slots")))
}

/// For each search slot at or past `slots`, a free table slot below `slots`
/// for the key there (unused entries hold 0). There are always enough free
/// slots: the segment has no more keys than table slots.
fn remap_overflow(taken: &[u64], slots: u32, internal: u32) -> Vec<u32> {
    let is_taken = |s: u32| taken[(s >> 6) as usize] & (1 << (s & 63)) != 0;
    let mut free = (0..slots).filter(|&s| !is_taken(s));
    (slots..internal)
        .map(|s| {
            if is_taken(s) {
                free.next()
                    .expect("a free table slot for every overflowing key")
            } else {
                0
            }
        })
        .collect()
}

/// How `segments` segments divide `hashes`: by the mixed hash unless
/// `ordered_segments`, else `hash_range` (or the least to the greatest
/// hash) in equal shares; an empty function records no interval.
fn segment_order(hashes: &[u64], config: &PhfConfig, segments: u64) -> SegmentOrder {
    if !config.ordered_segments {
        return SegmentOrder::Mixed;
    }
    if hashes.is_empty() {
        return SegmentOrder::Interval { lo: 0, scale: 0 };
    }
    let (lo, hi) = config.hash_range.unwrap_or_else(|| {
        hashes
            .par_iter()
            .fold(|| (u64::MAX, 0), |(lo, hi), &h| (lo.min(h), hi.max(h)))
            .reduce(|| (u64::MAX, 0), |a, b| (a.0.min(b.0), a.1.max(b.1)))
    });
    SegmentOrder::over(lo, hi, segments)
}

/// Mixes every hash under the seed and groups them by segment (`order`),
/// in parallel. Returns the mixed hashes and each segment's start.
fn partition(
    hashes: &[u64],
    seed: u64,
    order: SegmentOrder,
    segments: u64,
) -> (Vec<u64>, Vec<usize>) {
    let segment = |h: u64, hx: u64| order.segment_of(h, hx, segments) as usize;
    let m = segments as usize;
    let chunk = hashes
        .len()
        .div_ceil(rayon::current_num_threads() * 4)
        .max(1 << 14);
    let counts: Vec<Vec<usize>> = hashes
        .par_chunks(chunk)
        .map(|c| {
            let mut counts = vec![0usize; m];
            for &h in c {
                counts[segment(h, mix64(h, seed))] += 1;
            }
            counts
        })
        .collect();
    // Each chunk writes its share of each segment at its own offset.
    let mut starts = vec![0usize; m + 1];
    let mut offsets = vec![vec![0usize; m]; counts.len()];
    let mut at = 0;
    for j in 0..m {
        starts[j] = at;
        for (c, chunk_counts) in counts.iter().enumerate() {
            offsets[c][j] = at;
            at += chunk_counts[j];
        }
    }
    starts[m] = at;
    let mut out = vec![0u64; hashes.len()];
    let out_ptr = SharedMut(out.as_mut_ptr());
    hashes
        .par_chunks(chunk)
        .zip(offsets.into_par_iter())
        .for_each(|(c, mut offs)| {
            let out_ptr = &out_ptr;
            for &h in c {
                let hx = mix64(h, seed);
                let j = segment(h, hx);
                // SAFETY: the offsets of different chunks and segments are
                // disjoint ranges of `out`, and each stays within its range
                // because it advances once per key counted for it above.
                unsafe { *out_ptr.0.add(offs[j]) = hx };
                offs[j] += 1;
            }
        });
    (out, starts)
}

/// A raw pointer that several threads write through at disjoint indices.
struct SharedMut(*mut u64);
// SAFETY: only used by `partition`, whose writers never touch the same index.
unsafe impl Sync for SharedMut {}
