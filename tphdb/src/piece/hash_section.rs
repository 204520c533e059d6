//! Writing a piece's key-hash section: both hashes of every entry,
//! sorted, which merges stream instead of reading entries.

use rayon::prelude::*;

use super::writer::{Sink, SINK_BUFFER_BYTES};
use crate::error::Result;
use crate::util::codec::PutExt;

/// The key-hash section: both hashes of every entry (`hashes[i]` and
/// `hashes2[i]` of entry `i`), sorted, so that membership is a binary
/// search. Handed to `sink` a buffer at a time.
///
/// The pairs are sorted a range of hashes at a time (hashes are uniform
/// over the piece's range), at most [`HASH_SORT_RANGES`] of them: all of
/// them at once took 16 bytes an entry beside the merge's own list, the
/// largest table of a piece's write. One scan of `hashes` deals the
/// entries' indexes out to their ranges (a counting sort, 5 bytes an
/// entry); a scan of every hash per range was 13% of a flush's CPU at 22
/// ranges.
pub(super) fn write_key_hashes(hashes: &[u64], hashes2: &[u64], sink: Sink<'_>) -> Result<()> {
    debug_assert_eq!(hashes.len(), hashes2.len());
    let mut buf = Vec::with_capacity(SINK_BUFFER_BYTES);
    let ranges = (hashes.len() / MIN_RANGE_PAIRS).clamp(1, HASH_SORT_RANGES);
    if ranges == 1 {
        let mut pairs: Vec<(u64, u64)> = hashes
            .iter()
            .copied()
            .zip(hashes2.iter().copied())
            .collect();
        pairs.par_sort_unstable();
        return write_pairs(&pairs, &mut buf, sink);
    }
    let (lo, hi) = hashes
        .iter()
        .fold((u64::MAX, 0), |(lo, hi), &h| (lo.min(h), hi.max(h)));
    // Equal intervals of `width` from `lo`; at least two ranges, so the
    // width fits 64 bits even when the hashes span all of them.
    let width = ((u128::from(hi - lo) + 1).div_ceil(ranges as u128)) as u64;
    let range_of: Vec<u8> = hashes.iter().map(|&h| ((h - lo) / width) as u8).collect();
    let mut starts = vec![0usize; ranges + 1];
    for &r in &range_of {
        starts[usize::from(r) + 1] += 1;
    }
    for r in 0..ranges {
        starts[r + 1] += starts[r];
    }
    let mut next = starts.clone();
    let mut order = vec![0u32; hashes.len()];
    for (i, &r) in range_of.iter().enumerate() {
        let at = &mut next[usize::from(r)];
        order[*at] = i as u32;
        *at += 1;
    }
    drop(range_of);
    let largest = starts.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let mut pairs: Vec<(u64, u64)> = Vec::with_capacity(largest);
    for w in starts.windows(2) {
        pairs.clear();
        pairs.extend(
            order[w[0]..w[1]]
                .iter()
                .map(|&i| (hashes[i as usize], hashes2[i as usize])),
        );
        pairs.par_sort_unstable();
        write_pairs(&pairs, &mut buf, sink)?;
    }
    Ok(())
}

/// The key-hash section of `pairs`, `(key_hash, key_hash2)` of every
/// entry already sorted (a push-down's share, `tph::share`), handed to
/// `sink` a buffer at a time.
pub(crate) fn write_sorted_pairs(pairs: &[(u64, u64)], sink: Sink<'_>) -> Result<()> {
    write_pairs(pairs, &mut Vec::with_capacity(SINK_BUFFER_BYTES), sink)
}

/// Hands `sink` the sorted `pairs`, encoded in `buf` a buffer at a time.
fn write_pairs(pairs: &[(u64, u64)], buf: &mut Vec<u8>, sink: Sink<'_>) -> Result<()> {
    debug_assert!(pairs.windows(2).all(|w| w[0] <= w[1]));
    for pairs in pairs.chunks(SINK_BUFFER_BYTES / 16) {
        buf.clear();
        for &(h, h2) in pairs {
            buf.put_u64(h);
            buf.put_u64(h2);
        }
        sink(buf)?;
    }
    Ok(())
}

/// The key-hash section is sorted in at most this many ranges of hashes...
const HASH_SORT_RANGES: usize = 64;
/// ...each of at least this many entries on average.
const MIN_RANGE_PAIRS: usize = 1 << 14;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::{key_hash, key_hash2};

    /// The key-hash section as one sort of every pair would write it.
    fn hashes_sorted_whole(keys: &[Vec<u8>], hashes: &[u64]) -> Vec<u8> {
        let mut pairs: Vec<(u64, u64)> = keys
            .iter()
            .zip(hashes)
            .map(|(k, &h)| (h, key_hash2(k)))
            .collect();
        pairs.sort_unstable();
        let mut out = Vec::new();
        for (h, h2) in pairs {
            out.put_u64(h);
            out.put_u64(h2);
        }
        out
    }

    #[test]
    fn the_key_hash_section_sorted_in_ranges_is_one_sort_of_every_pair() {
        // Enough entries for several ranges; hashes confined to a narrow
        // band (a partition's) with repeats, and at both ends of u64.
        let n = 5 * MIN_RANGE_PAIRS + 123;
        let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("k{i}").into_bytes()).collect();
        let bands: [(u64, u64); 4] = [
            (1 << 40, 1 << 20),
            (0, 1 << 24),
            (u64::MAX - (1 << 30), 1 << 30),
            (0, u64::MAX),
        ];
        for (base, width) in bands {
            let mut hashes: Vec<u64> = keys.iter().map(|k| base + key_hash(k) % width).collect();
            hashes[10] = hashes[n - 10];
            hashes[n / 2] = base;
            hashes[n / 3] = base + (width - 1);
            let hashes2: Vec<u64> = keys.iter().map(|k| key_hash2(k)).collect();
            let mut got = Vec::new();
            write_key_hashes(&hashes, &hashes2, &mut |b| {
                got.extend_from_slice(b);
                Ok(())
            })
            .unwrap();
            assert_eq!(
                got,
                hashes_sorted_whole(&keys, &hashes),
                "band at {base:#x}"
            );
        }
        let mut none = Vec::new();
        write_key_hashes(&[], &[], &mut |b| {
            none.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert!(none.is_empty());
    }
}
