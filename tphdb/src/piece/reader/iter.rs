//! Reading a piece's entries whole: in slot (storage) order with large
//! sequential reads, or in key order through its sorted index.

use bytes::Bytes;

use super::PieceReader;
use crate::error::Result;
use crate::piece::block::Block;
use crate::piece::entry::Entry;
use crate::piece::sorted::SortedCursor;

/// Slot-order iteration reads this many bytes of blocks per call.
const SCAN_READ_BYTES: usize = 1 << 20;

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
        let bytes = r.file.read_at(start, len).map_err(|e| e.at(&r.name))?;
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
                    match block.entry(i) {
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
