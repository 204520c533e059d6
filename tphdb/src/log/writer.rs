//! Appending records to a log.

use super::{fragment_crc, FragmentType, BLOCK_SIZE, HEADER_SIZE};
use crate::error::Result;
use crate::fs::WritableFile;

/// Appends records to a log file.
#[derive(Debug)]
pub(crate) struct LogWriter {
    file: Box<dyn WritableFile>,
    block_offset: usize,
    buf: Vec<u8>,
}

impl LogWriter {
    /// Writes to `file`, which holds `existing_len` bytes of log already.
    pub(crate) fn new(file: Box<dyn WritableFile>, existing_len: u64) -> Self {
        LogWriter {
            file,
            block_offset: (existing_len % BLOCK_SIZE as u64) as usize,
            buf: Vec::new(),
        }
    }

    /// Appends one record (buffered until [`LogWriter::flush`] or
    /// [`LogWriter::sync`]).
    pub(crate) fn add_record(&mut self, mut data: &[u8]) -> Result<()> {
        self.buf.clear();
        let mut first = true;
        loop {
            let left = BLOCK_SIZE - self.block_offset;
            if left < HEADER_SIZE {
                self.buf.extend(std::iter::repeat_n(0u8, left));
                self.block_offset = 0;
                continue;
            }
            let avail = left - HEADER_SIZE;
            let n = data.len().min(avail);
            let last = n == data.len();
            let t = match (first, last) {
                (true, true) => FragmentType::Full,
                (true, false) => FragmentType::First,
                (false, false) => FragmentType::Middle,
                (false, true) => FragmentType::Last,
            };
            let (frag, rest) = data.split_at(n);
            self.buf
                .extend_from_slice(&fragment_crc(t, frag).to_le_bytes());
            self.buf.extend_from_slice(&(n as u16).to_le_bytes());
            self.buf.push(t as u8);
            self.buf.extend_from_slice(frag);
            self.block_offset += HEADER_SIZE + n;
            data = rest;
            first = false;
            if last {
                break;
            }
        }
        self.file.append(&self.buf)
    }

    /// Hands appended records to the operating system.
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.file.flush()
    }

    /// Makes appended records durable.
    pub(crate) fn sync(&mut self) -> Result<()> {
        self.file.sync()
    }

    /// Bytes in the log file.
    pub(crate) fn len(&self) -> u64 {
        self.file.len()
    }
}
