//! A piece's key-hash section: what a TPH's global index is built from,
//! read without the keys and values.

use super::PieceReader;
use crate::error::{Error, Result};
use crate::hash::narrow_hash2;
use crate::piece::format::{Section, SectionId};
use crate::util::checksum_matches;
use crate::util::codec::{u32_at, u64_at, Decoder};

/// [`PieceReader::for_each_key_hash`] reads the key hashes this many bytes
/// at a time.
const HASH_CHUNK_BYTES: u64 = 48 << 10;
/// The byte before a section of steps' pairs.
const STEPS_HEADER_BYTES: usize = 1;
/// The longest varint of a u64.
const MAX_VARINT_BYTES: usize = 10;

/// The key hashes read are let go of (see `RandomAccessFile::done_with`)
/// this many bytes at a time, and at the end of each call. Each release
/// costs every core a TLB flush: a call per chunk read took 2.5% of the
/// server's CPU under a SET load.
const HASH_RELEASE_BYTES: u64 = 2 << 20;

impl PieceReader {
    /// The 64-bit key hash of every entry, ascending; what a TPH's global
    /// index can be rebuilt from without reading keys or values.
    pub fn key_hashes(&self) -> Result<Vec<u64>> {
        Ok(self.key_hash_section()?.iter().map(|(h, _)| h).collect())
    }

    /// The verified key-hash section: `(key_hash, key_hash2)` of every entry,
    /// ascending, in memory (16 bytes an entry: for whole-file checks).
    pub(crate) fn key_hash_section(&self) -> Result<HashSection> {
        // A pair takes at least 5 bytes: the file bounds what is reserved.
        let most = self.props.entry_count.min(self.key_hash_bytes() / 5);
        let mut pairs = Vec::with_capacity(most as usize);
        self.for_each_key_hash(|h, h2| pairs.push((h, h2)))?;
        Ok(HashSection { pairs })
    }

    /// How this piece's key-hash section stores a pair.
    pub(crate) fn key_hash_pair(&self) -> HashPair {
        match self.format_version {
            1 | 2 => HashPair::Wide,
            3 => HashPair::Narrow,
            _ => HashPair::Steps,
        }
    }

    /// Bytes of the key-hash section: what a pass over all of it reads.
    pub(crate) fn key_hash_bytes(&self) -> u64 {
        self.hash_section().map_or(0, |s| s.len)
    }

    fn hash_section(&self) -> Option<&Section> {
        self.sections
            .iter()
            .find(|s| s.id == SectionId::Hashes as u32)
    }

    /// Calls `f` with `(key_hash, key_hash2)` of every entry, ascending,
    /// reading the key-hash section in chunks of [`HASH_CHUNK_BYTES`]: the
    /// memory it takes does not grow with the piece. Order and count are
    /// checked as it goes, the section's checksum at the end: on an error
    /// `f` may have seen entries of a damaged section, and the caller must
    /// discard what it made of them.
    pub(crate) fn for_each_key_hash(&self, f: impl FnMut(u64, u64)) -> Result<()> {
        self.key_hashes_through(&mut KeyHashCursor::default(), u64::MAX, f)
            .map(|_| ())
    }

    /// Calls `f` with the pairs after `cursor` whose hash is at most
    /// `last`, ascending, and moves `cursor` past them: passes over
    /// ascending intervals of hashes read the section once between them
    /// instead of once each. The checksum covers what the calls read
    /// together, and is checked by the call that reaches the end; until
    /// then (as for [`PieceReader::for_each_key_hash`]) `f` may have seen
    /// pairs of a damaged section. Returns the bytes of pairs read.
    ///
    /// The file's mapped pages are let go of when it returns, however it
    /// returns. Passes over ranges of hashes read a section a part at a
    /// time, and a merge's passes read every piece's: held until the end
    /// of each section, a level-1 TPH's sections took 1.5 MB a piece, 26
    /// MB at the 16M x 128-byte fill's high-water mark. Each pass also
    /// maps pages before where it starts reading (the kernel maps around
    /// what is read), which a release of what it read alone left.
    pub(crate) fn key_hashes_through(
        &self,
        cursor: &mut KeyHashCursor,
        last: u64,
        f: impl FnMut(u64, u64),
    ) -> Result<u64> {
        let result = self.read_key_hashes_through(cursor, last, f);
        self.release_mapped_pages();
        cursor.released = cursor.at;
        result
    }

    /// [`PieceReader::key_hashes_through`] but for letting go of the
    /// pages at the end; those read are let go of every
    /// [`HASH_RELEASE_BYTES`].
    fn read_key_hashes_through(
        &self,
        cursor: &mut KeyHashCursor,
        last: u64,
        mut f: impl FnMut(u64, u64),
    ) -> Result<u64> {
        let section = *self
            .hash_section()
            .expect("decode_directory checked that every required section exists");
        let count = self.props.entry_count;
        let bad = |what: String| {
            Error::corruption("key hashes", format!("{count} ascending hash pairs"), what)
                .at(&self.name)
        };
        let pair = self.key_hash_pair();
        if let Some(width) = pair.fixed_bytes() {
            if section.len != count * width {
                return Err(bad(format!("{} bytes", section.len)));
            }
        }
        if cursor.checked {
            return Ok(0);
        }
        let from = cursor.at;
        if pair == HashPair::Steps && cursor.at == 0 {
            let header =
                self.read_range(section.offset, STEPS_HEADER_BYTES.min(section.len as usize))?;
            cursor.low_bytes = match header.first() {
                Some(&b) if b <= 8 => b,
                other => return Err(bad(format!("low bytes {other:?}"))),
            };
            cursor.crc = crc32c::crc32c(&header);
            cursor.at = header.len() as u64;
        }
        let mut stopped = false;
        while cursor.at < section.len && !stopped {
            // Less than a chunk is read past the last pair wanted.
            let n = (section.len - cursor.at).min(HASH_CHUNK_BYTES) as usize;
            let at_end = cursor.at + n as u64 == section.len;
            let chunk = self.read_range(section.offset + cursor.at, n)?;
            let mut used = 0;
            while used < n {
                let Some((hashes, len)) = pair
                    .decode(&chunk[used..], cursor.prev.0, cursor.low_bytes)
                    .map_err(|e| bad(e.to_string()))?
                else {
                    if at_end {
                        return Err(bad(format!(
                            "a pair cut off at byte {}",
                            cursor.at + used as u64
                        )));
                    }
                    break;
                };
                if hashes.0 > last {
                    stopped = true;
                    break;
                }
                if hashes < cursor.prev || cursor.pairs == count {
                    return Err(bad(format!(
                        "{hashes:?} after {:?}, pair {}",
                        cursor.prev, cursor.pairs
                    )));
                }
                cursor.prev = hashes;
                cursor.pairs += 1;
                f(hashes.0, hashes.1);
                used += len;
            }
            cursor.crc = crc32c::crc32c_append(cursor.crc, &chunk[..used]);
            cursor.at += used as u64;
            if cursor.at - cursor.released >= HASH_RELEASE_BYTES {
                let from = cursor.released;
                self.file
                    .done_with(section.offset + from, (cursor.at - from) as usize);
                cursor.released = cursor.at;
            }
        }
        if cursor.at == section.len {
            if cursor.pairs != count {
                return Err(bad(format!("{} pairs", cursor.pairs)));
            }
            if !checksum_matches(section.crc, cursor.crc) {
                return Err(Error::corruption(
                    "key hashes section checksum",
                    format!("{:#010x}", section.crc),
                    format!("{:#010x}", cursor.crc),
                )
                .at(&self.name));
            }
            cursor.checked = true;
        }
        Ok(cursor.at - from)
    }
}

/// Where [`PieceReader::key_hashes_through`] left off in a key-hash
/// section: the bytes read, their checksum so far and the last pair.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeyHashCursor {
    at: u64,
    /// The section's bytes before this were let go of.
    released: u64,
    crc: u32,
    prev: (u64, u64),
    /// Pairs read.
    pairs: u64,
    /// Of a section of steps: the bytes of each hash written whole.
    low_bytes: u8,
    /// The whole section was read and its checksum matched.
    checked: bool,
}

impl KeyHashCursor {
    /// Whether the calls so far read the whole section and found its
    /// checksum right.
    pub(crate) fn is_done(&self) -> bool {
        self.checked
    }
}

/// How a key-hash section stores a pair `(key_hash, key_hash2)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HashPair {
    /// Format 1 and 2: `h:u64, h2:u64`, the second hash 64 bits wide (its
    /// high half is the key's [`crate::hash::key_hash2`]).
    Wide,
    /// Format 3: `h:u64, h2:u32`.
    Narrow,
    /// Format 4: after a byte `b` (at most 8), `step:varint,
    /// low:u(8b), h2:u32`: `h` is `high << 8b | low`, where `high` is
    /// the previous pair's plus `step` (0 before the first pair).
    Steps,
}

impl HashPair {
    /// Bytes of a pair, if all pairs take the same.
    pub(crate) fn fixed_bytes(self) -> Option<u64> {
        match self {
            HashPair::Wide => Some(16),
            HashPair::Narrow => Some(12),
            HashPair::Steps => None,
        }
    }

    /// The pair at the start of `b` and its length, or `None` if `b` ends
    /// before it does; `prev_h` is the pair before's hash (0 before the
    /// first), `low_bytes` a section of steps' header.
    fn decode(self, b: &[u8], prev_h: u64, low_bytes: u8) -> Result<Option<((u64, u64), usize)>> {
        let pair = match self {
            HashPair::Wide if b.len() >= 16 => ((u64_at(b, 0), narrow_hash2(u64_at(b, 1))), 16),
            HashPair::Narrow if b.len() >= 12 => ((u64_at(b, 0), u64::from(u32_at(b, 2))), 12),
            HashPair::Steps => return decode_step(b, prev_h, low_bytes),
            _ => return Ok(None),
        };
        Ok(Some(pair))
    }
}

/// A pair of a section of steps (see [`HashPair::Steps`]).
fn decode_step(b: &[u8], prev_h: u64, low_bytes: u8) -> Result<Option<((u64, u64), usize)>> {
    let shift = 8 * u32::from(low_bytes);
    let mut d = Decoder::new(b, "key hash step");
    let Ok(step) = d.varint() else {
        // Cut off, or ten bytes that are no varint: the caller tells them
        // apart by whether the section goes on.
        return if b.len() >= MAX_VARINT_BYTES {
            Err(Error::corruption(
                "key hash step",
                "a varint",
                "more than ten bytes",
            ))
        } else {
            Ok(None)
        };
    };
    let (Ok(low), Ok(h2)) = (d.bytes(usize::from(low_bytes)), d.bytes(4)) else {
        return Ok(None);
    };
    let high = prev_h.checked_shr(shift).unwrap_or(0);
    let high = high
        .checked_add(step)
        .filter(|&h| shift == 0 || h >> (64 - shift) == 0)
        .ok_or_else(|| {
            Error::corruption(
                "key hash step",
                "a 64-bit hash",
                format!("a step of {step}"),
            )
        })?;
    let mut low_word = [0u8; 8];
    low_word[..low.len()].copy_from_slice(low);
    let h = high.checked_shl(shift).unwrap_or(0) | u64::from_le_bytes(low_word);
    Ok(Some(((h, u64::from(u32_at(h2, 0))), d.position())))
}

/// `(key_hash, key_hash2)` of every entry of a piece, ascending.
#[derive(Clone, Debug)]
pub(crate) struct HashSection {
    pairs: Vec<(u64, u64)>,
}

impl HashSection {
    pub(crate) fn len(&self) -> usize {
        self.pairs.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.pairs.iter().copied()
    }

    /// Whether some entry has exactly these two hashes.
    pub(crate) fn contains(&self, h: u64, h2: u64) -> bool {
        self.pairs.binary_search(&(h, h2)).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::fs::{mapped_resident_bytes, PosixFs, ReadMode};
    use crate::piece::{write_piece, EntryRef, PieceOptions};

    /// A piece of the keys `0..n` (big-endian) with `value` each, written
    /// in `dir` and opened mapped.
    fn mapped_piece(dir: &Path, n: u32, value: Option<&[u8]>) -> (PathBuf, PieceReader) {
        let path = dir.join("hashes.ph");
        let keys: Vec<[u8; 4]> = (0..n).map(u32::to_be_bytes).collect();
        let entries: Vec<EntryRef<'_>> = keys
            .iter()
            .map(|k| EntryRef {
                key: k,
                value,
                seq: 1,
            })
            .collect();
        write_piece(&PosixFs, &path, &entries, &PieceOptions::default()).unwrap();
        let r = PieceReader::open(&PosixFs, &path, ReadMode::Mmap).unwrap();
        (path, r)
    }

    /// A section of steps of `pairs` with `low_bytes` bytes whole.
    fn steps(low_bytes: u8, pairs: &[(u64, u64)]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut sink = |b: &[u8]| {
            out.extend_from_slice(b);
            Ok(())
        };
        let mut w = crate::piece::hash_section::PairWriter::new(low_bytes);
        w.write(pairs.iter().copied(), &mut sink).unwrap();
        w.finish(&mut sink).unwrap();
        out
    }

    /// The pairs of a section of steps, read as a piece's reader does.
    fn read_steps(section: &[u8]) -> Result<Vec<(u64, u64)>> {
        let low_bytes = section[0];
        let (mut at, mut prev, mut pairs) = (1, 0, Vec::new());
        while at < section.len() {
            let Some((pair, len)) = HashPair::Steps.decode(&section[at..], prev, low_bytes)? else {
                return Err(Error::corruption("pair", "whole", "cut off"));
            };
            pairs.push(pair);
            prev = pair.0;
            at += len;
        }
        Ok(pairs)
    }

    #[test]
    fn steps_of_every_width_read_back() {
        let mut pairs = vec![(0, 0), (0, 7), (1, 0), (255, 1), (256, 2), (1 << 40, 3)];
        pairs.extend((0..200u64).map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 1, i)));
        pairs.extend([
            (u64::MAX - 1, 0),
            (u64::MAX, u64::from(u32::MAX)),
            (u64::MAX, u64::from(u32::MAX)),
        ]);
        pairs.sort_unstable();
        for low_bytes in 0..=8 {
            let section = steps(low_bytes, &pairs);
            assert_eq!(
                read_steps(&section).unwrap(),
                pairs,
                "{low_bytes} bytes whole"
            );
        }
        // Gaps of 2^45 over 2^16 hashes: 5 bytes whole and steps of one byte.
        let spread: Vec<(u64, u64)> = (0..1u64 << 16)
            .map(|i| ((i << 45) | (i * 7919 % 1000), 0))
            .collect();
        let b = crate::piece::hash_section::low_bytes_for(
            spread[0].0,
            spread[spread.len() - 1].0,
            spread.len(),
        );
        assert_eq!(b, 5);
        let bytes = steps(b, &spread).len() as f64 / spread.len() as f64;
        assert!((10.0..10.1).contains(&bytes), "{bytes} bytes a pair");
    }

    #[test]
    fn a_step_past_64_bits_or_a_varint_too_long_is_an_error() {
        // High part at its most, then one more: past 64 bits.
        let mut section = steps(6, &[(u64::MAX, 1)]);
        section.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]);
        assert!(read_steps(&section).is_err());
        // With all 8 bytes whole a step must be 0.
        let mut section = steps(8, &[(5, 1)]);
        section.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]);
        assert!(read_steps(&section).is_err());
        let eleven = [0x80u8; 11];
        assert!(HashPair::Steps.decode(&eleven, 0, 0).is_err());
        // Cut off: the caller reads on, or finds the section ends.
        assert_eq!(HashPair::Steps.decode(&[0x80, 0x80], 0, 0).unwrap(), None);
        assert_eq!(HashPair::Steps.decode(&[1, 9, 9], 0, 2).unwrap(), None);
    }

    #[test]
    fn reading_every_key_hash_leaves_no_mapped_page_resident() {
        let dir = tempfile::tempdir().unwrap();
        let (path, r) = mapped_piece(dir.path(), 100_000, Some(b"value"));
        let mut n = 0;
        r.for_each_key_hash(|_, _| n += 1).unwrap();
        assert_eq!(n, 100_000);
        assert_eq!(mapped_resident_bytes(&path), 0);
    }

    /// Eight passes over the key hashes of a mapped piece of `n` keys, as
    /// a push-down's: the pairs read, and the most of the file held
    /// mapped after a pass.
    fn eight_passes(n: u32) -> (u32, u64) {
        let dir = tempfile::tempdir().unwrap();
        let (path, r) = mapped_piece(dir.path(), n, None);
        let mut cursor = KeyHashCursor::default();
        let (mut read, mut most) = (0, 0);
        for pass in 1..=8u64 {
            let last = if pass == 8 { u64::MAX } else { pass << 61 };
            r.key_hashes_through(&mut cursor, last, |_, _| read += 1)
                .unwrap();
            most = most.max(mapped_resident_bytes(&path));
        }
        assert!(cursor.is_done());
        assert_eq!(mapped_resident_bytes(&path), 0);
        (read, most)
    }

    #[test]
    fn passes_over_the_key_hashes_let_go_of_what_they_read() {
        // A 6.4 MB section.
        let (read, most) = eight_passes(400_000);
        assert_eq!(read, 400_000);
        assert_eq!(most, 0, "bytes held after a pass");
    }

    /// Regression: a section shorter than a release's worth (a level-1
    /// piece's, 1.5 MB) stayed mapped through every pass of a merge until
    /// its end: 1.5 MB a piece of every TPH whose index was being built.
    #[test]
    fn a_pass_over_a_small_section_lets_go_of_what_it_read() {
        let (read, most) = eight_passes(90_000);
        assert_eq!(read, 90_000);
        assert_eq!(most, 0, "bytes of a 1.44 MB section held after a pass");
    }
}
