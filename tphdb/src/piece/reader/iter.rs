//! Reading a piece's entries whole: in slot (storage) order with large
//! sequential reads, or in key order through its sorted index.

use std::ops::RangeInclusive;

use bytes::Bytes;

use super::{KeyHashCursor, PieceReader};
use crate::error::{Error, Result};
use crate::piece::block::Block;
use crate::piece::entry::{Entry, EntryRef};
use crate::piece::sorted::SortedCursor;

/// Slot-order iteration reads this many bytes of blocks per call.
const SCAN_READ_BYTES: usize = 1 << 20;

/// A read of a hash range lets go of the pages it mapped this many bytes
/// of the file at a time.
const RELEASE_BYTES: u64 = 8 << 20;

impl PieceReader {
    /// Every entry, in slot (storage) order, reading blocks sequentially in
    /// large batches.
    pub fn iter(&self) -> PieceIter<'_> {
        PieceIter {
            reader: self,
            next_block: 0,
            pending: Vec::new(),
            block: None,
            slot: 0,
            window: None,
        }
    }

    /// A cursor over the entries in key order (bytewise), with seeks.
    pub fn sorted_cursor(&self) -> Result<SortedCursor<&PieceReader>> {
        SortedCursor::new(self)
    }
}

/// Iterator over a piece's entries in slot order; see [`PieceReader::iter`].
pub struct PieceIter<'a> {
    reader: &'a PieceReader,
    next_block: u64,
    /// Read but not yet decoded blocks, front first.
    pending: Vec<(u64, Bytes)>,
    block: Option<Block>,
    slot: usize,
    /// The file range last read, let go of when the next is read: a scan
    /// reads each block once.
    window: Option<(u64, usize)>,
}

impl Drop for PieceIter<'_> {
    fn drop(&mut self) {
        // Each window was let go of as the next was read; this also drops
        // the pages the kernel mapped around them.
        self.reader.release_mapped_pages();
    }
}

impl PieceIter<'_> {
    fn fill(&mut self) -> Result<()> {
        let r = self.reader;
        let count = r.props.block_count;
        let first = self.next_block;
        if let Some((start, len)) = self.window.take() {
            r.file.done_with(start, len);
        }
        let mut last = first + 1;
        while last < count && r.blocks.range(first, last + 1).1 <= SCAN_READ_BYTES {
            last += 1;
        }
        let (start, len) = r.blocks.range(first, last);
        let bytes = r.read_blocks(start, len)?;
        self.window = Some((start, len));
        for b in (first..last).rev() {
            let (off, len) = r.blocks.block(b);
            let at = (off - start) as usize;
            self.pending.push((b, bytes.slice(at..at + len)));
        }
        self.next_block = last;
        Ok(())
    }
}

impl Iterator for PieceIter<'_> {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        loop {
            if let Some(block) = &self.block {
                while self.slot < block.slot_count() {
                    let i = self.slot;
                    self.slot += 1;
                    match block.entry(i, self.reader.entry_layout()) {
                        Ok(Some(e)) => return Some(Ok(e)),
                        Ok(None) => {}
                        Err(e) => {
                            self.block = None;
                            self.next_block = self.reader.props.block_count;
                            return Some(Err(e.at(&self.reader.name)));
                        }
                    }
                }
            }
            if self.pending.is_empty() {
                if self.next_block >= self.reader.props.block_count {
                    return None;
                }
                if let Err(e) = self.fill() {
                    self.next_block = self.reader.props.block_count;
                    return Some(Err(e));
                }
            }
            let (b, bytes) = self.pending.pop().expect("filled above");
            match self.reader.decode_block(b, bytes) {
                Ok(block) => {
                    self.block = Some(block);
                    self.slot = 0;
                }
                Err(e) => {
                    self.pending.clear();
                    self.next_block = self.reader.props.block_count;
                    return Some(Err(e));
                }
            }
        }
    }
}

impl PieceReader {
    /// Calls `f` with every entry whose key hash lies in `hashes`, in slot
    /// order, reading only the blocks that hold one (see
    /// [`PieceReader::read_slots`]). The slots come from the key-hash
    /// section, through the perfect hash and the overflow list: a compaction
    /// pass over a few of a level's partitions reads the rest of the piece
    /// not at all when a block holds a few large entries, and decodes none of
    /// it in any case. The section is read on from `cursor` through the
    /// range's end, so that passes over ascending ranges read it once
    /// between them (its checksum is checked by the one that reaches its
    /// end; see [`PieceReader::key_hashes_through`]). Returns the bytes of
    /// blocks read and of key hashes read.
    ///
    /// An entry whose hash the section lists but whose slot holds another
    /// key (damage the checksums missed) is passed on as it is: callers
    /// check the hashes of what they get, and count it.
    pub(crate) fn for_each_entry_in_hash_range(
        &self,
        cursor: &mut KeyHashCursor,
        hashes: RangeInclusive<u64>,
        mut f: impl FnMut(EntryRef<'_>),
    ) -> Result<(u64, u64)> {
        if self.phf.is_empty() {
            return Ok((0, 0));
        }
        let mut slots: Vec<u64> = Vec::new();
        let mut last = None;
        let hash_bytes = self.key_hashes_through(cursor, *hashes.end(), |h, _| {
            // Entries sharing a hash share its table slot; the others are
            // in overflow slots, added below.
            if hashes.contains(&h) && last != Some(h) {
                slots.push(self.phf.slot(h) as u64);
                last = Some(h);
            }
        })?;
        slots.extend(self.overflow_slots(hashes));
        Ok((self.read_slots_of(slots, &mut f)?, hash_bytes))
    }

    /// Calls `f`, in slot order, with the entries in the slots where the
    /// keys of `hashes` would be, through the perfect hash and the overflow
    /// list, reading only the blocks that hold those slots: a fold's pass
    /// reads again the entries its run of the new piece holds, not the
    /// whole piece. A slot may hold another key than the one wanted (the
    /// perfect hash maps any hash to some slot): callers check the hashes
    /// of what they get. Returns the bytes of blocks read.
    pub(crate) fn for_each_entry_with_hashes(
        &self,
        hashes: &[u64],
        mut f: impl FnMut(EntryRef<'_>),
    ) -> Result<u64> {
        if self.phf.is_empty() {
            return Ok(0);
        }
        let mut slots: Vec<u64> = Vec::with_capacity(hashes.len());
        for &h in hashes {
            slots.push(self.phf.slot(h) as u64);
            slots.extend(self.overflow_slots(h..=h));
        }
        self.read_slots_of(slots, &mut f)
    }

    /// The overflow slots of the entries whose hash lies in `hashes`.
    fn overflow_slots(&self, hashes: RangeInclusive<u64>) -> impl Iterator<Item = u64> + '_ {
        let from = self.overflow.partition_point(|&(h, _)| h < *hashes.start());
        self.overflow[from..]
            .iter()
            .take_while(move |&&(h, _)| h <= *hashes.end())
            .map(|&(_, s)| s as u64)
    }

    /// [`PieceReader::read_slots`] of `slots` in any order, letting go of
    /// the mapped pages after.
    fn read_slots_of(&self, mut slots: Vec<u64>, f: &mut impl FnMut(EntryRef<'_>)) -> Result<u64> {
        slots.sort_unstable();
        slots.dedup();
        let result = self.read_slots(&slots, f);
        self.release_mapped_pages();
        result
    }

    /// Reads the entries in `slots` (ascending, distinct) a window of at
    /// most [`SCAN_READ_BYTES`] at a time: the window in one read when its
    /// wanted blocks make up a quarter of it or more (a large read, which
    /// the file reads ahead), else each wanted block on its own.
    fn read_slots(&self, slots: &[u64], f: &mut impl FnMut(EntryRef<'_>)) -> Result<u64> {
        let mut read = 0;
        // The key of an entry, when the piece leaves its prefix out.
        let mut key = Vec::new();
        // Pages of the file up to here have been let go of.
        let mut released = 0;
        let mut i = 0;
        while i < slots.len() {
            let first = self.block_of(slots[i]).0;
            let (mut end, mut last, mut wanted) = (i, first, 0);
            while end < slots.len() {
                let b = self.block_of(slots[end]).0;
                if b >= self.props.block_count {
                    return Err(Error::corruption(
                        "slot",
                        format!("below {}", self.props.total_slots()),
                        slots[end],
                    )
                    .at(&self.name));
                }
                if b > last && self.blocks.range(first, b + 1).1 > SCAN_READ_BYTES {
                    break;
                }
                if b > last || end == i {
                    wanted += self.blocks.block(b).1;
                }
                last = b;
                end += 1;
            }
            let (start, len) = self.blocks.range(first, last + 1);
            let window = (wanted * 4 >= len)
                .then(|| self.read_blocks(start, len))
                .transpose()?;
            read += if window.is_some() { len } else { wanted } as u64;
            let mut decoded: Option<(u64, Block)> = None;
            for &slot in &slots[i..end] {
                let (b, at) = self.block_of(slot);
                if decoded.as_ref().is_none_or(|(d, _)| *d != b) {
                    let (off, blen) = self.blocks.block(b);
                    let bytes = match &window {
                        Some(w) => {
                            let from = (off - start) as usize;
                            w.slice(from..from + blen)
                        }
                        None => self.read_blocks(off, blen)?,
                    };
                    decoded = Some((b, self.decode_block(b, bytes)?));
                }
                let (_, block) = decoded.as_ref().expect("decoded above");
                let entry = block
                    .entry_ref(at, &self.layout, &mut key)
                    .map_err(|e| e.at(format_args!("{} slot {slot}", self.name)))?;
                if let Some(e) = entry {
                    f(e);
                }
            }
            // Letting go of pages costs every core a TLB flush: a call per
            // window of a block or two took a sixth of the CPU of a
            // 16M-key overwrite.
            let window_end = start + len as u64;
            if window_end - released >= RELEASE_BYTES {
                self.file
                    .done_with(released, (window_end - released) as usize);
                released = window_end;
            }
            i = end;
        }
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::fs::MemFs;
    use crate::hash::key_hash;
    use crate::piece::{write_piece_hashed, EntryRef, PieceOptions};

    #[test]
    fn entries_with_given_hashes_are_read_from_their_blocks_alone() {
        let fs = MemFs::new();
        let keys: Vec<Vec<u8>> = (0..3000u32).map(|i| i.to_be_bytes().to_vec()).collect();
        let value = vec![5u8; 700];
        let entries: Vec<EntryRef<'_>> = keys
            .iter()
            .map(|k| EntryRef {
                key: k,
                value: Some(&value),
                seq: 1,
            })
            .collect();
        // Every hundredth key shares the hash of the key before it: those
        // are in overflow slots.
        let mut hashes: Vec<u64> = keys.iter().map(|k| key_hash(k)).collect();
        for i in (100..hashes.len()).step_by(100) {
            hashes[i] = hashes[i - 1];
        }
        let path = Path::new("/hashes.ph");
        let props =
            write_piece_hashed(&fs, path, &entries, &hashes, &PieceOptions::default()).unwrap();
        assert_eq!(props.overflow_count, 29);
        let r = PieceReader::open(&fs, path, crate::fs::ReadMode::Pread).unwrap();

        // One key in a hundred, and both keys of every shared hash.
        let wanted: Vec<usize> = (0..keys.len())
            .filter(|i| matches!(i % 100, 37 | 99 | 0))
            .collect();
        let mut want: Vec<u64> = wanted.iter().map(|&i| hashes[i]).collect();
        want.sort_unstable();
        want.dedup();
        let mut got = Vec::new();
        let read = r
            .for_each_entry_with_hashes(&want, |e| got.push(e.key.to_vec()))
            .unwrap();
        for &i in &wanted {
            assert!(got.contains(&keys[i]), "key {i} not read");
        }
        for i in (100..keys.len()).step_by(100) {
            assert!(got.contains(&keys[i]), "overflow key {i} not read");
        }
        // Five entries a block: 3% of the keys are in at most 15% of the
        // blocks, too few for a window read (see `read_slots`).
        assert!(
            read * 6 < props.data_bytes,
            "{read} of {} bytes read",
            props.data_bytes
        );
        assert_eq!(r.for_each_entry_with_hashes(&[], |_| panic!()).unwrap(), 0);
    }
}
