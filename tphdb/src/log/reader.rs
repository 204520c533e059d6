//! Reading records back from a log.

use std::sync::Arc;

use super::{fragment_crc, FragmentType, BLOCK_SIZE, HEADER_SIZE};
use crate::error::Result;
use crate::fs::RandomAccessFile;

/// Why and where a log stopped early.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TailDrop {
    /// Offset of the first byte not returned as part of a record.
    pub(crate) offset: u64,
    /// Bytes from `offset` to the end of the file.
    pub(crate) dropped_bytes: u64,
    /// What was wrong there.
    pub(crate) reason: String,
    /// A fragment with a correct checksum starts in a later block: more
    /// than a torn tail was damaged.
    pub(crate) valid_data_follows: bool,
}

/// The type and length of a fragment with a correct checksum at `pos` of
/// `block`, if there is one.
fn fragment_at(block: &[u8], pos: usize) -> Option<(FragmentType, usize)> {
    let h = block.get(pos..pos + HEADER_SIZE)?;
    let crc = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let len = u16::from_le_bytes([h[4], h[5]]) as usize;
    let t = FragmentType::from_u8(h[6])?;
    let data = block.get(pos + HEADER_SIZE..pos + HEADER_SIZE + len)?;
    (crc == fragment_crc(t, data) && !(crc == 0 && len == 0)).then_some((t, len))
}

/// Whether a record's first fragment (FULL or FIRST) with a correct checksum
/// begins at `pos`. A MIDDLE or LAST fragment may be the surviving rest of
/// the torn record itself, which says nothing of records written after it.
fn record_start_at(block: &[u8], pos: usize) -> bool {
    matches!(
        fragment_at(block, pos),
        Some((FragmentType::Full | FragmentType::First, _))
    )
}

/// Whether a record starts in `block`, following its fragments from the
/// block start: a MIDDLE or LAST fragment there is stepped over.
fn record_start_in_block(block: &[u8]) -> bool {
    let mut pos = 0;
    while let Some((t, len)) = fragment_at(block, pos) {
        if matches!(t, FragmentType::Full | FragmentType::First) {
            return true;
        }
        pos += HEADER_SIZE + len;
    }
    false
}

/// Reads the records of a log file front to back.
pub(crate) struct LogReader {
    file: Arc<dyn RandomAccessFile>,
    len: u64,
    /// Start of the current block and the block itself.
    block_start: u64,
    block: Vec<u8>,
    pos: usize,
    /// Offset where the record being assembled began.
    record_start: u64,
    tail: Option<TailDrop>,
}

impl LogReader {
    pub(crate) fn new(file: Arc<dyn RandomAccessFile>) -> Self {
        let len = file.len();
        LogReader {
            file,
            len,
            block_start: 0,
            block: Vec::new(),
            pos: 0,
            record_start: 0,
            tail: None,
        }
    }

    /// Set once reading stopped before the end of the file.
    pub(crate) fn tail_drop(&self) -> Option<&TailDrop> {
        self.tail.as_ref()
    }

    fn stop(&mut self, reason: impl Into<String>) -> Result<Option<Vec<u8>>> {
        let valid_data_follows = self.valid_fragment_after_damage()?;
        self.tail = Some(TailDrop {
            offset: self.record_start,
            dropped_bytes: self.len - self.record_start,
            reason: reason.into(),
            valid_data_follows,
        });
        Ok(None)
    }

    /// Whether a record with a correct first fragment starts anywhere after
    /// the damaged one: at any later byte of the current block (the damaged
    /// header may hide where the next fragment starts), or in any later
    /// block, whose fragments can be followed from its start (fragments
    /// never cross blocks).
    fn valid_fragment_after_damage(&self) -> Result<bool> {
        let damaged = self.pos.min(self.block.len());
        if (damaged + 1..self.block.len()).any(|pos| record_start_at(&self.block, pos)) {
            return Ok(true);
        }
        let mut at = self.block_start + self.block.len() as u64;
        while at < self.len {
            let n = (self.len - at).min(BLOCK_SIZE as u64) as usize;
            if record_start_in_block(&self.file.read_at(at, n)?) {
                return Ok(true);
            }
            at += n as u64;
        }
        Ok(false)
    }

    /// The next record; `None` at the end of the log or at the first damaged
    /// fragment (see [`LogReader::tail_drop`]). I/O errors are returned.
    pub(crate) fn next_record(&mut self) -> Result<Option<Vec<u8>>> {
        if self.tail.is_some() {
            return Ok(None);
        }
        let mut record = Vec::new();
        let mut in_record = false;
        loop {
            if self.block.len() - self.pos < HEADER_SIZE {
                // The rest of this block is padding; move to the next one.
                if self.pos < self.block.len() && self.block[self.pos..].iter().any(|&b| b != 0) {
                    if !in_record {
                        // The damage starts here, not at the last record.
                        self.record_start = self.block_start + self.pos as u64;
                    }
                    return self.stop("non-zero block padding");
                }
                let next = self.block_start + self.block.len() as u64;
                if next >= self.len {
                    if in_record {
                        return self.stop("record cut off at the end of the log");
                    }
                    return Ok(None);
                }
                let n = (self.len - next).min(BLOCK_SIZE as u64) as usize;
                self.block = self.file.read_at(next, n)?.to_vec();
                self.block_start = next;
                self.pos = 0;
                continue;
            }
            if !in_record {
                self.record_start = self.block_start + self.pos as u64;
            }
            let h = &self.block[self.pos..self.pos + HEADER_SIZE];
            let crc = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
            let len = u16::from_le_bytes([h[4], h[5]]) as usize;
            let t = h[6];
            if crc == 0 && len == 0 && t == 0 {
                // Zeros where a header should be: preallocated or torn space.
                return self.stop("zeroed fragment header");
            }
            if self.pos + HEADER_SIZE + len > self.block.len() {
                return self.stop(format!("fragment of {len} bytes past the end of its block"));
            }
            let data = &self.block[self.pos + HEADER_SIZE..self.pos + HEADER_SIZE + len];
            let Some(t) = FragmentType::from_u8(t) else {
                return self.stop(format!("unknown fragment type {t}"));
            };
            if !crate::util::checksum_matches(crc, fragment_crc(t, data)) {
                return self.stop("fragment checksum mismatch");
            }
            match (t, in_record) {
                (FragmentType::Full, false) => {
                    record.extend_from_slice(data);
                    self.pos += HEADER_SIZE + len;
                    return Ok(Some(record));
                }
                (FragmentType::First, false) => in_record = true,
                (FragmentType::Middle, true) => {}
                (FragmentType::Last, true) => {
                    record.extend_from_slice(data);
                    self.pos += HEADER_SIZE + len;
                    return Ok(Some(record));
                }
                (t, _) => return self.stop(format!("fragment {t:?} out of order")),
            }
            record.extend_from_slice(data);
            self.pos += HEADER_SIZE + len;
        }
    }
}
