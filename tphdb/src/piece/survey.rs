//! One pass over the entries a piece is written from, before it is
//! planned: the writer's checks and the counts its properties record. A
//! flush's entries point into the memtable's arena, so each pass over them
//! in key order misses the cache at every entry; these took six passes.
//! (The key-hash section's second hashes were computed here too, and held
//! until that section; they are computed for it now, see
//! `hash_section::write_key_hashes`.)

use rayon::prelude::*;

use bytes::Bytes;

use super::entry::{check_lengths, prefetch_ahead, EntryShape};
use super::entry_layout::{entry_tag, EntryLayout, SeqCoding};
use super::format::MAX_KEY_PREFIX;
use crate::error::Result;
use crate::util::codec::varint_len;

/// Entries one parallel task surveys.
const CHUNK: usize = 1 << 14;

/// What a pass over a piece's entries finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Survey {
    /// Sum of the entries' lengths encoded as before format 6 (a varint
    /// tag and sequence number): what estimates of memory count.
    pub(crate) encoded_bytes: usize,
    /// Sum of each entry's key and value bytes, and of their squares.
    body_bytes: u64,
    body_squares: u128,
    /// Sum of the entries' tags' bytes, and of the squares of their key
    /// and value bytes with the tag: for a layout with tags.
    tag_bytes: u64,
    tagged_squares: u128,
    /// The shortest and longest key (`usize::MAX` and 0 when none).
    min_key_len: usize,
    max_key_len: usize,
    pub(super) key_bytes: u64,
    /// Bytes of the values, tombstones counting none.
    pub(super) value_bytes: u64,
    pub(super) tombstones: u64,
    /// 0 when there are no entries.
    pub(super) min_seq: u64,
    pub(super) max_seq: u64,
    /// Whether the keys strictly ascend (distinct and sorted).
    pub(super) in_key_order: bool,
    /// Whether a key was counted, and the longest prefix (of at most
    /// [`MAX_KEY_PREFIX`] bytes) that every key counted starts with.
    keyed: bool,
    prefix_len: u8,
    prefix: [u8; MAX_KEY_PREFIX],
}

impl Survey {
    pub(crate) const EMPTY: Survey = Survey {
        encoded_bytes: 0,
        body_bytes: 0,
        body_squares: 0,
        tag_bytes: 0,
        tagged_squares: 0,
        min_key_len: usize::MAX,
        max_key_len: 0,
        key_bytes: 0,
        value_bytes: 0,
        tombstones: 0,
        min_seq: u64::MAX,
        max_seq: 0,
        in_key_order: true,
        keyed: false,
        prefix_len: 0,
        prefix: [0; MAX_KEY_PREFIX],
    };

    /// Counts `e`, refusing a key or value past the format's limits. The
    /// order is not looked at: a survey counted this way leaves
    /// `in_key_order` as it was.
    pub(crate) fn add<E: EntryShape>(&mut self, e: &E) -> Result<()> {
        let (key, value) = (e.key(), e.value_len());
        check_lengths(key.len(), value)?;
        self.encoded_bytes += e.encoded_len();
        let body = (key.len() + value.unwrap_or(0)) as u64;
        let tag = varint_len(entry_tag(key.len(), value.is_none())) as u64;
        self.body_bytes += body;
        self.body_squares += body as u128 * body as u128;
        self.tag_bytes += tag;
        self.tagged_squares += (body + tag) as u128 * (body + tag) as u128;
        self.min_key_len = self.min_key_len.min(key.len());
        self.max_key_len = self.max_key_len.max(key.len());
        self.key_bytes += key.len() as u64;
        self.value_bytes += value.unwrap_or(0) as u64;
        self.tombstones += u64::from(value.is_none());
        self.min_seq = self.min_seq.min(e.seq());
        self.max_seq = self.max_seq.max(e.seq());
        self.share_prefix(key);
        Ok(())
    }

    /// The prefix every key counted starts with (at most
    /// [`MAX_KEY_PREFIX`] bytes), which the piece leaves out of its
    /// entries.
    pub(crate) fn key_prefix(&self) -> &[u8] {
        &self.prefix[..self.prefix_len as usize]
    }

    /// Cuts the shared prefix to `len` bytes; the bytes past it are
    /// zeros, so that surveys of the same keys are equal.
    fn shorten_prefix(&mut self, len: usize) {
        self.prefix[len..self.prefix_len as usize].fill(0);
        self.prefix_len = len as u8;
    }

    /// Shortens the shared prefix to what `key` starts with too.
    fn share_prefix(&mut self, key: &[u8]) {
        if self.keyed {
            self.shorten_prefix(common_prefix_len(self.key_prefix(), key));
        } else {
            let n = key.len().min(MAX_KEY_PREFIX);
            self.prefix[..n].copy_from_slice(&key[..n]);
            self.prefix_len = n as u8;
            self.keyed = true;
        }
    }

    /// The survey of the entries counted, `n` of them: an empty one's
    /// sequence numbers are 0.
    pub(crate) fn finished(mut self, n: usize) -> Survey {
        if n == 0 {
            self.min_seq = 0;
        }
        self
    }

    fn merge(self, o: Survey) -> Survey {
        let mut prefixed = if self.keyed { self } else { o };
        if self.keyed && o.keyed {
            prefixed.shorten_prefix(common_prefix_len(self.key_prefix(), o.key_prefix()));
        }
        Survey {
            keyed: prefixed.keyed,
            prefix_len: prefixed.prefix_len,
            prefix: prefixed.prefix,
            encoded_bytes: self.encoded_bytes + o.encoded_bytes,
            body_bytes: self.body_bytes + o.body_bytes,
            body_squares: self.body_squares + o.body_squares,
            tag_bytes: self.tag_bytes + o.tag_bytes,
            tagged_squares: self.tagged_squares + o.tagged_squares,
            min_key_len: self.min_key_len.min(o.min_key_len),
            max_key_len: self.max_key_len.max(o.max_key_len),
            key_bytes: self.key_bytes + o.key_bytes,
            value_bytes: self.value_bytes + o.value_bytes,
            tombstones: self.tombstones + o.tombstones,
            min_seq: self.min_seq.min(o.min_seq),
            max_seq: self.max_seq.max(o.max_seq),
            in_key_order: self.in_key_order && o.in_key_order,
        }
    }

    /// How the piece lays out its entries (format 6): without the prefix
    /// every key shares, sequence numbers in the fewest bytes that span
    /// the piece's, and no tag when all are puts of keys of one length.
    pub(crate) fn entry_layout(&self) -> EntryLayout {
        EntryLayout {
            key_prefix: Bytes::copy_from_slice(self.key_prefix()),
            seq: self.seq_coding(),
            stored_key_len: self.untagged_key_len(),
        }
    }

    fn seq_coding(&self) -> SeqCoding {
        SeqCoding::fixed(self.min_seq.min(self.max_seq), self.max_seq)
    }

    /// The length of every key as stored when the entries need no tag:
    /// all puts, keys of one length, and none of no bytes (an entry of no
    /// bytes would read as an empty slot, so a piece of one key, all of it
    /// the prefix, and one sequence number keeps its tags).
    fn untagged_key_len(&self) -> Option<u32> {
        let stored = self.max_key_len.saturating_sub(self.prefix_len as usize);
        let untagged = self.keyed
            && self.min_key_len == self.max_key_len
            && self.tombstones == 0
            && (stored > 0 || self.seq_coding().bytes() > 0);
        untagged.then_some(stored as u32)
    }

    /// Bytes the `n` entries take in the piece as
    /// [`Survey::entry_layout`] lays them out, and the sum of their
    /// squares (exact but where leaving the prefix out makes a key's
    /// length one varint byte shorter).
    fn stored_lengths(&self, n: usize) -> (u128, u128) {
        let (sum, squares) = match self.untagged_key_len() {
            Some(_) => (self.body_bytes, self.body_squares),
            None => (self.body_bytes + self.tag_bytes, self.tagged_squares),
        };
        // Each entry's length moves by c: sum((l + c)^2) = squares + 2 c
        // sum + n c^2.
        let (n, sum, squares) = (n as i128, sum as i128, squares as i128);
        let c = self.seq_coding().bytes() as i128 - self.prefix_len as i128;
        let stored = (sum + n * c).max(0);
        let squares = (squares + 2 * c * sum + n * c * c).max(0);
        (stored as u128, squares as u128)
    }

    /// Average bytes of the `n` entries as the piece stores them (at
    /// least 1).
    pub(super) fn average_stored_bytes(&self, n: usize) -> usize {
        (self.stored_lengths(n).0 as usize)
            .div_ceil(n.max(1))
            .max(1)
    }

    /// Whether the `n` entries' stored lengths are even: their standard
    /// deviation at most a sixteenth of their mean.
    pub(super) fn lengths_are_even(&self, n: usize) -> bool {
        let (sum, squares) = self.stored_lengths(n);
        // n^2 variance = n * squares - sum^2, against (sum / 16)^2.
        match (n as u128).checked_mul(squares) {
            Some(scaled) => scaled.saturating_sub(sum * sum).saturating_mul(256) <= sum * sum,
            None => false,
        }
    }
}

/// Bytes `a` and `b` start with alike.
fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Surveys `entries`, refusing keys and values past the format's limits.
pub(super) fn survey<E: EntryShape>(entries: &[E]) -> Result<Survey> {
    survey_in_chunks(entries, CHUNK)
}

fn survey_in_chunks<E: EntryShape>(entries: &[E], chunk: usize) -> Result<Survey> {
    let total = entries
        .par_chunks(chunk)
        .enumerate()
        .map(|(c, run)| {
            let mut s = Survey::EMPTY;
            // Each run also compares its first key with the key before it.
            let mut prev = (c > 0).then(|| entries[c * chunk - 1].key());
            for (i, e) in run.iter().enumerate() {
                prefetch_ahead(run, i);
                s.add(e)?;
                let key = e.key();
                s.in_key_order &= prev.is_none_or(|p| p < key);
                prev = Some(key);
            }
            Ok(s)
        })
        .try_reduce(|| Survey::EMPTY, |a, b| Ok(a.merge(b)))?;
    Ok(total.finished(entries.len()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::piece::{EntryRef, MAX_KEY_BYTES};

    /// The survey, each figure counted on its own.
    fn counted(entries: &[EntryRef<'_>]) -> Survey {
        let body = |e: &EntryRef<'_>| e.key.len() + e.value.map_or(0, <[u8]>::len);
        let tag = |e: &EntryRef<'_>| varint_len(entry_tag(e.key.len(), e.value.is_none()));
        // The longest start of the first key that every key has.
        let first = entries.first().map_or(&[][..], |e| e.key);
        let shared = (0..=first.len().min(MAX_KEY_PREFIX))
            .rev()
            .find(|&p| entries.iter().all(|e| e.key.get(..p) == Some(&first[..p])))
            .unwrap_or(0);
        let mut prefix = [0; MAX_KEY_PREFIX];
        prefix[..shared].copy_from_slice(&first[..shared]);
        Survey {
            keyed: !entries.is_empty(),
            prefix_len: shared as u8,
            prefix,
            encoded_bytes: entries.iter().map(|e| e.encoded_len()).sum(),
            body_bytes: entries.iter().map(|e| body(e) as u64).sum(),
            body_squares: entries.iter().map(|e| (body(e) as u128).pow(2)).sum(),
            tag_bytes: entries.iter().map(|e| tag(e) as u64).sum(),
            tagged_squares: entries
                .iter()
                .map(|e| ((body(e) + tag(e)) as u128).pow(2))
                .sum(),
            min_key_len: entries
                .iter()
                .map(|e| e.key.len())
                .min()
                .unwrap_or(usize::MAX),
            max_key_len: entries.iter().map(|e| e.key.len()).max().unwrap_or(0),
            key_bytes: entries.iter().map(|e| e.key.len() as u64).sum(),
            value_bytes: entries
                .iter()
                .map(|e| e.value.map_or(0, <[u8]>::len) as u64)
                .sum(),
            tombstones: entries.iter().filter(|e| e.value.is_none()).count() as u64,
            min_seq: entries.iter().map(|e| e.seq).min().unwrap_or(0),
            max_seq: entries.iter().map(|e| e.seq).max().unwrap_or(0),
            in_key_order: entries.windows(2).all(|w| w[0].key < w[1].key),
        }
    }

    proptest! {
        /// Whatever the chunks, the survey counts what one pass of each
        /// figure does; keys out of order or repeated across a chunk's
        /// edge are seen too; so is the prefix the keys share, short of
        /// the keys or past the longest one a piece leaves out.
        #[test]
        fn a_survey_counts_what_separate_passes_do(
            rows in prop::collection::vec(
                (prop::collection::vec(0u8..4, 0..4), prop::option::of(0usize..300), 0u64..1 << 40),
                0..200,
            ),
            lead in prop::collection::vec(0u8..2, 0..80),
            sort in any::<bool>(),
            chunk in 1usize..40,
        ) {
            let mut rows = rows;
            for r in &mut rows {
                r.0.splice(0..0, lead.iter().copied());
            }
            if sort {
                rows.sort();
                rows.dedup_by(|a, b| a.0 == b.0);
            }
            let values: Vec<Option<Vec<u8>>> =
                rows.iter().map(|r| r.1.map(|n| vec![7u8; n])).collect();
            let entries: Vec<EntryRef<'_>> = rows
                .iter()
                .zip(&values)
                .map(|(r, v)| EntryRef { key: &r.0, value: v.as_deref(), seq: r.2 })
                .collect();
            let got = survey_in_chunks(&entries, chunk).unwrap();
            prop_assert_eq!(got, counted(&entries));
        }
    }

    /// Entries go without tags only when all are puts of keys of one
    /// length, and never when one could be empty: a piece of one key,
    /// all of it the prefix, with one sequence number (an empty value
    /// would leave an empty slot; `colliding_hashes_stay_exact` met one).
    #[test]
    fn entries_go_without_tags_only_when_none_can_be_empty() {
        let put = |key: &'static [u8], seq| EntryRef {
            key,
            value: Some(b""),
            seq,
        };
        let layout = |entries: &[EntryRef<'_>]| survey(entries).unwrap().entry_layout();
        let two = layout(&[put(b"key1", 5), put(b"key2", 5)]);
        assert_eq!(
            (&two.key_prefix[..], two.stored_key_len),
            (&b"key"[..], Some(1))
        );
        assert_eq!(two.seq, SeqCoding::fixed(5, 5));
        let one = layout(&[put(b"key1", 5)]);
        assert_eq!(
            (&one.key_prefix[..], one.stored_key_len),
            (&b"key1"[..], None)
        );
        let one_of_two_numbers = layout(&[put(b"key1", 5), put(b"key1", 300)]);
        assert_eq!(one_of_two_numbers.stored_key_len, Some(0));
        let uneven = layout(&[put(b"key1", 5), put(b"key22", 5)]);
        assert_eq!(uneven.stored_key_len, None);
        let mut tombstone = put(b"key2", 5);
        tombstone.value = None;
        assert_eq!(layout(&[put(b"key1", 5), tombstone]).stored_key_len, None);
    }

    #[test]
    fn a_key_past_the_limit_is_refused() {
        let long = vec![1u8; MAX_KEY_BYTES + 1];
        let entries = [
            EntryRef {
                key: b"a",
                value: Some(b"v"),
                seq: 1,
            },
            EntryRef {
                key: &long,
                value: None,
                seq: 2,
            },
        ];
        assert!(survey(&entries).is_err());
        assert!(survey(&entries[..1]).is_ok());
    }

    /// Entries of about one size get a minimal perfect hash (every slot
    /// full, blocks of `k` entries), others the configured table.
    #[test]
    fn even_entries_get_a_minimal_table_uneven_ones_the_configured_one() {
        use crate::fs::MemFs;
        use crate::piece::{write_piece, PieceOptions};
        let keys: Vec<Vec<u8>> = (0..20_000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let table = |value_len: &dyn Fn(usize) -> usize| {
            let values: Vec<Vec<u8>> = (0..keys.len()).map(|i| vec![1; value_len(i)]).collect();
            let entries: Vec<EntryRef<'_>> = keys
                .iter()
                .zip(&values)
                .map(|(k, v)| EntryRef {
                    key: k,
                    value: Some(v),
                    seq: 9,
                })
                .collect();
            let s = survey(&entries).unwrap();
            let fs = MemFs::new();
            let p = std::path::Path::new("/p.ph");
            let props = write_piece(&fs, p, &entries, &PieceOptions::default()).unwrap();
            (s.lengths_are_even(entries.len()), props.table_size)
        };
        // 1 KiB, and a tenth of them 100 bytes longer: deviation 30 of 1,040.
        assert_eq!(table(&|_| 1024), (true, 20_000));
        assert!(table(&|i| 1024 + (i % 10 == 0) as usize * 100).0);
        // Values of 0 to 2 KiB.
        let (even, slots) = table(&|i| i * 7919 % 2048);
        assert!(!even && slots >= 21_000, "{slots} slots");
    }
}
