//! Writing a piece's key-hash section: both hashes of every entry,
//! sorted, which merges stream instead of reading entries.

use rayon::prelude::*;

use super::entry::{EntryShape, PREFETCH_AHEAD};
use super::writer::{Sink, SINK_BUFFER_BYTES};
use crate::error::Result;
use crate::hash::key_hash2;
use crate::util::codec::PutExt;

/// The key-hash section: both hashes of every entry (`hashes[i]` and the
/// `key_hash2` of `entries[i]`), sorted, so that membership is a binary
/// search. Handed to `sink` a buffer at a time.
///
/// The pairs are sorted a range of hashes at a time (hashes are uniform
/// over the piece's range), at most [`HASH_SORT_RANGES`] of them: all of
/// them at once took 16 bytes an entry beside the merge's own list, the
/// largest table of a piece's write. One scan of `hashes` deals the
/// entries' indexes out to their ranges (a counting sort, 5 bytes an
/// entry); a scan of every hash per range was 13% of a flush's CPU at 22
/// ranges.
///
/// The second hashes are computed here, a range at a time, not listed
/// beside the entries: a flush's list of them was 8 bytes an entry for
/// the whole of its blocks' writing (3 MB of a 64 MiB memtable of 128-byte
/// values), against a read of each key again here, prefetched.
pub(super) fn write_key_hashes<E: EntryShape>(
    hashes: &[u64],
    entries: &[E],
    sink: Sink<'_>,
) -> Result<()> {
    debug_assert_eq!(hashes.len(), entries.len());
    let (lo, hi) = hashes
        .iter()
        .fold((u64::MAX, 0), |(lo, hi), &h| (lo.min(h), hi.max(h)));
    let mut writer = PairWriter::new(low_bytes_for(lo, hi, hashes.len()));
    let ranges = (hashes.len() / MIN_RANGE_PAIRS).clamp(1, HASH_SORT_RANGES);
    if ranges == 1 {
        let mut pairs = Vec::new();
        fill_pairs(hashes, entries, hashes.len(), &|k| k, &mut pairs);
        pairs.par_sort_unstable();
        writer.write(pairs.iter().copied(), sink)?;
        return writer.finish(sink);
    }
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
        let run = &order[w[0]..w[1]];
        fill_pairs(hashes, entries, run.len(), &|k| run[k] as usize, &mut pairs);
        pairs.par_sort_unstable();
        writer.write(pairs.iter().copied(), sink)?;
    }
    writer.finish(sink)
}

/// Sets `pairs` to the `len` pairs of the entries `at(0..len)`, their
/// second hashes computed in parallel runs, each prefetching the entries
/// [`PREFETCH_AHEAD`] ahead of it (a flush's keys lie wherever its
/// memtable's arena put them).
fn fill_pairs<E: EntryShape>(
    hashes: &[u64],
    entries: &[E],
    len: usize,
    at: &(dyn Fn(usize) -> usize + Sync),
    pairs: &mut Vec<(u64, u64)>,
) {
    pairs.clear();
    pairs.resize(len, (0, 0));
    pairs
        .par_chunks_mut(PAIRS_PER_TASK)
        .enumerate()
        .for_each(|(t, out)| {
            let first = t * PAIRS_PER_TASK;
            let end = first + out.len();
            for (k, pair) in (first..end).zip(out) {
                if k + PREFETCH_AHEAD < end {
                    entries[at(k + PREFETCH_AHEAD)].prefetch_shape();
                }
                let i = at(k);
                *pair = (hashes[i], key_hash2(entries[i].key()));
            }
        });
}

/// Pairs one parallel task of [`fill_pairs`] makes.
const PAIRS_PER_TASK: usize = 4096;

/// The key-hash section of the pairs `(hashes[i], hashes2[i])`, the
/// `(key_hash, key_hash2)` of every entry already sorted (a push-down's
/// share, `tph::share`), handed to `sink` a buffer at a time.
pub(crate) fn write_sorted_pairs(hashes: &[u64], hashes2: &[u64], sink: Sink<'_>) -> Result<()> {
    debug_assert_eq!(hashes.len(), hashes2.len());
    let (lo, hi) = (hashes.first().copied(), hashes.last().copied());
    let low_bytes = low_bytes_for(lo.unwrap_or(0), hi.unwrap_or(0), hashes.len());
    let mut writer = PairWriter::new(low_bytes);
    writer.write(hashes.iter().copied().zip(hashes2.iter().copied()), sink)?;
    writer.finish(sink)
}

/// The bytes of each hash written whole in a section of `n` hashes from
/// `lo` to `hi`, spread evenly: the fewest expected bytes a pair, each
/// writing the rest of its hash as the step from the one before (about
/// `g / 256^b` for a gap of `g` between hashes, which is near
/// exponential). A piece of 56,000 hashes over an eighth of all of them
/// (gaps of 2^45) takes 5 and steps of one byte: 6.02 bytes a hash, not 8.
pub(crate) fn low_bytes_for(lo: u64, hi: u64, n: usize) -> u8 {
    let gap = hi.saturating_sub(lo) as f64 / n.max(1) as f64;
    let cost = |b: u8| {
        let mean_step = gap / 256f64.powi(i32::from(b));
        // A varint of k+1 bytes or more holds steps of 2^(7k) and up.
        let longer: f64 = (1..10)
            .map(|k| (-(2f64.powi(7 * k)) / mean_step.max(f64::MIN_POSITIVE)).exp())
            .sum();
        f64::from(b) + 1.0 + longer
    };
    (0..=8u8)
        .min_by(|&a, &b| cost(a).total_cmp(&cost(b)))
        .expect("nine candidates")
}

/// Encodes a key-hash section of steps (format 4, see
/// `reader::key_hashes::HashPair::Steps`) a buffer at a time.
pub(crate) struct PairWriter {
    buf: Vec<u8>,
    low_bytes: u8,
    last: (u64, u64),
}

impl PairWriter {
    pub(crate) fn new(low_bytes: u8) -> PairWriter {
        let mut buf = Vec::with_capacity(SINK_BUFFER_BYTES);
        buf.push(low_bytes);
        PairWriter {
            buf,
            low_bytes,
            last: (0, 0),
        }
    }

    /// Encodes the sorted `pairs`, which follow those before, handing
    /// `sink` each full buffer.
    pub(crate) fn write(
        &mut self,
        pairs: impl IntoIterator<Item = (u64, u64)>,
        sink: Sink<'_>,
    ) -> Result<()> {
        let shift = 8 * u32::from(self.low_bytes);
        let high = |h: u64| h.checked_shr(shift).unwrap_or(0);
        for (h, h2) in pairs {
            debug_assert!(self.last <= (h, h2), "pairs out of order");
            debug_assert!(h2 <= u64::from(u32::MAX), "a second hash of 32 bits");
            self.buf.put_varint(high(h) - high(self.last.0));
            self.buf
                .extend_from_slice(&h.to_le_bytes()[..usize::from(self.low_bytes)]);
            self.buf.put_u32(h2 as u32);
            self.last = (h, h2);
            if self.buf.len() + MAX_PAIR_BYTES > SINK_BUFFER_BYTES {
                sink(&self.buf)?;
                self.buf.clear();
            }
        }
        Ok(())
    }

    /// Hands `sink` what is left.
    pub(crate) fn finish(mut self, sink: Sink<'_>) -> Result<()> {
        if !self.buf.is_empty() {
            sink(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}

/// The key-hash section is sorted in at most this many ranges of hashes...
const HASH_SORT_RANGES: usize = 64;
/// ...each of at least this many entries on average.
const MIN_RANGE_PAIRS: usize = 1 << 14;

/// The longest pair of a section of steps: a 10-byte varint, 8 bytes
/// whole and the second hash.
const MAX_PAIR_BYTES: usize = 10 + 8 + 4;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::key_hash;
    use crate::piece::EntryRef;

    /// The key-hash section as one sort of every pair would write it.
    fn hashes_sorted_whole(keys: &[Vec<u8>], hashes: &[u64]) -> Vec<u8> {
        let mut pairs: Vec<(u64, u64)> = keys
            .iter()
            .zip(hashes)
            .map(|(k, &h)| (h, key_hash2(k)))
            .collect();
        pairs.sort_unstable();
        let (h, h2): (Vec<u64>, Vec<u64>) = pairs.into_iter().unzip();
        let mut out = Vec::new();
        write_sorted_pairs(&h, &h2, &mut |b| {
            out.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn the_key_hash_section_sorted_in_ranges_is_one_sort_of_every_pair() {
        // Enough entries for several ranges; hashes confined to a narrow
        // band (a partition's) with repeats, and at both ends of u64.
        let n = 5 * MIN_RANGE_PAIRS + 123;
        let keys: Vec<Vec<u8>> = (0..n).map(|i| format!("k{i}").into_bytes()).collect();
        let entries: Vec<EntryRef<'_>> = keys
            .iter()
            .map(|k| EntryRef {
                key: k,
                value: None,
                seq: 1,
            })
            .collect();
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
            let mut got = Vec::new();
            write_key_hashes(&hashes, &entries, &mut |b| {
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
        let none_entries: [EntryRef<'_>; 0] = [];
        write_key_hashes(&[], &none_entries, &mut |b| {
            none.extend_from_slice(b);
            Ok(())
        })
        .unwrap();
        assert_eq!(none, [0], "a section of no pairs is its header");
    }
}
