//! A piece's key-hash section: what a TPH's global index is built from,
//! read without the keys and values.

use bytes::Bytes;

use super::PieceReader;
use crate::error::{Error, Result};
use crate::hash::narrow_hash2;
use crate::piece::format::SectionId;
use crate::util::checksum_matches;
use crate::util::codec::{u32_at, u64_at};

/// [`PieceReader::for_each_key_hash`] reads the key hashes this many pairs
/// at a time (48 KiB or 64 KiB).
const HASH_CHUNK_PAIRS: u64 = 4 << 10;

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
    /// ascending.
    pub(crate) fn key_hash_section(&self) -> Result<HashSection> {
        let b = self.section(SectionId::Hashes)?;
        let s = HashSection {
            bytes: b,
            pair: self.key_hash_pair(),
        };
        let n = s.len();
        let sorted = (1..n).all(|i| s.get(i - 1) <= s.get(i));
        if s.bytes.len() as u64 != self.props.entry_count * s.pair.bytes() || !sorted {
            return Err(Error::corruption(
                "key hashes",
                format!("{} ascending hash pairs", self.props.entry_count),
                format!("{} bytes, sorted: {sorted}", s.bytes.len()),
            )
            .at(&self.name));
        }
        Ok(s)
    }

    /// How this piece's key-hash section stores a pair.
    pub(crate) fn key_hash_pair(&self) -> HashPair {
        if self.format_version >= 3 {
            HashPair::Narrow
        } else {
            HashPair::Wide
        }
    }

    /// Bytes of the key-hash section: what a pass over all of it reads.
    pub(crate) fn key_hash_bytes(&self) -> u64 {
        self.props.entry_count * self.key_hash_pair().bytes()
    }

    /// Calls `f` with `(key_hash, key_hash2)` of every entry, ascending,
    /// reading the key-hash section in chunks of [`HASH_CHUNK_PAIRS`]: the
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
        let section = self
            .sections
            .iter()
            .find(|s| s.id == SectionId::Hashes as u32)
            .expect("decode_directory checked that every required section exists");
        let bad = |what: String| {
            Error::corruption(
                "key hashes",
                format!("{} ascending hash pairs", self.props.entry_count),
                what,
            )
            .at(&self.name)
        };
        let pair = self.key_hash_pair();
        let width = pair.bytes();
        if section.len != self.props.entry_count * width {
            return Err(bad(format!("{} bytes", section.len)));
        }
        if cursor.checked {
            return Ok(0);
        }
        let from = cursor.at;
        while cursor.at < section.len {
            // Less than a chunk is read past the last pair wanted.
            let n = (section.len - cursor.at).min(HASH_CHUNK_PAIRS * width) as usize;
            let chunk = self.read_range(section.offset + cursor.at, n)?;
            let mut used = 0;
            while used < n {
                let hashes = pair.decode(&chunk[used..]);
                if hashes.0 > last {
                    break;
                }
                if hashes < cursor.prev {
                    return Err(bad(format!("{hashes:?} after {:?}", cursor.prev)));
                }
                cursor.prev = hashes;
                f(hashes.0, hashes.1);
                used += width as usize;
            }
            cursor.crc = crc32c::crc32c_append(cursor.crc, &chunk[..used]);
            cursor.at += used as u64;
            if cursor.at - cursor.released >= HASH_RELEASE_BYTES {
                let from = cursor.released;
                self.file
                    .done_with(section.offset + from, (cursor.at - from) as usize);
                cursor.released = cursor.at;
            }
            if used < n {
                break;
            }
        }
        if cursor.at == section.len {
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
}

impl HashPair {
    /// Bytes of a pair.
    pub(crate) fn bytes(self) -> u64 {
        match self {
            HashPair::Wide => 16,
            HashPair::Narrow => 12,
        }
    }

    /// The pair at the start of `b`, which holds at least one.
    fn decode(self, b: &[u8]) -> (u64, u64) {
        let h2 = match self {
            HashPair::Wide => narrow_hash2(u64_at(b, 1)),
            HashPair::Narrow => u64::from(u32_at(b, 2)),
        };
        (u64_at(b, 0), h2)
    }
}

/// `(key_hash, key_hash2)` of every entry of a piece, ascending.
#[derive(Clone, Debug)]
pub(crate) struct HashSection {
    bytes: Bytes,
    pair: HashPair,
}

impl HashSection {
    pub(crate) fn len(&self) -> usize {
        self.bytes.len() / self.pair.bytes() as usize
    }

    pub(crate) fn get(&self, i: usize) -> (u64, u64) {
        let width = self.pair.bytes() as usize;
        self.pair.decode(&self.bytes[i * width..])
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }

    /// Whether some entry has exactly these two hashes.
    pub(crate) fn contains(&self, h: u64, h2: u64) -> bool {
        let i = self.lower_bound((h, h2));
        i < self.len() && self.get(i) == (h, h2)
    }

    fn lower_bound(&self, x: (u64, u64)) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.get(mid) < x {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
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
