//! Appending records to a log.

use super::{fragment_crc, FragmentType, BLOCK_SIZE, HEADER_SIZE};
use crate::error::{Error, Result};
use crate::fs::WritableFile;

/// Appends records to a log file.
#[derive(Debug)]
pub(crate) struct LogWriter {
    file: Box<dyn WritableFile>,
    /// Where the next record starts within its block.
    block_offset: usize,
    buf: Vec<u8>,
    /// A failed record could not be cut off: the log may end in part of it,
    /// and no record may follow.
    torn: bool,
}

impl LogWriter {
    /// Writes to `file`, which holds `existing_len` bytes of log already.
    pub(crate) fn new(file: Box<dyn WritableFile>, existing_len: u64) -> Self {
        LogWriter {
            file,
            block_offset: (existing_len % BLOCK_SIZE as u64) as usize,
            buf: Vec::new(),
            torn: false,
        }
    }

    /// Appends one record and hands it to the operating system. On failure
    /// the file is cut back to where the record began, so the log still
    /// ends in a whole record and the next one is framed where it really
    /// starts; if even that fails, the log is torn (see
    /// [`LogWriter::ends_cleanly`]) and takes no more records.
    pub(crate) fn add_record(&mut self, data: &[u8]) -> Result<()> {
        if self.torn {
            return Err(Error::io(
                "appending to a log that may end in part of a failed record",
                std::io::Error::other("log torn by an earlier failure"),
            ));
        }
        let block_offset = self.frame(data);
        let start = self.file.len();
        let written = self.file.append(&self.buf).and_then(|()| self.file.flush());
        match written {
            Ok(()) => {
                self.block_offset = block_offset;
                Ok(())
            }
            Err(e) => {
                if self.file.truncate(start).is_err() {
                    self.torn = true;
                }
                Err(e)
            }
        }
    }

    /// Frames `data` into `buf` as fragments, starting at `block_offset`;
    /// returns the block offset after it.
    fn frame(&mut self, mut data: &[u8]) -> usize {
        self.buf.clear();
        let mut block_offset = self.block_offset;
        let mut first = true;
        loop {
            let left = BLOCK_SIZE - block_offset;
            if left < HEADER_SIZE {
                self.buf.extend(std::iter::repeat_n(0u8, left));
                block_offset = 0;
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
            block_offset += HEADER_SIZE + n;
            data = rest;
            first = false;
            if last {
                return block_offset;
            }
        }
    }

    /// False once a failed record could not be cut off: the log may end in
    /// part of it, so what follows it on disk is unknown.
    pub(crate) fn ends_cleanly(&self) -> bool {
        !self.torn
    }

    /// Makes appended records durable.
    pub(crate) fn sync(&mut self) -> Result<()> {
        if self.torn {
            return Err(Error::io(
                "syncing a log that may end in part of a failed record",
                std::io::Error::other("log torn by an earlier failure"),
            ));
        }
        self.file.sync()
    }

    /// Bytes in the log file.
    pub(crate) fn len(&self) -> u64 {
        self.file.len()
    }
}
