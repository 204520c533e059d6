//! The files of a [`FaultFs`]: reads see what the inode holds, appends and
//! syncs go through its fault rules.

use std::io;
use std::path::PathBuf;

use bytes::Bytes;

use super::{io_error, FaultFs, OpKind};
use crate::error::{Error, Result};
use crate::fs::{out_of_bounds, RandomAccessFile, WritableFile};

pub(super) struct FaultFile {
    pub(super) fs: FaultFs,
    pub(super) path: PathBuf,
    pub(super) data: Bytes,
}

impl std::fmt::Debug for FaultFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultFile")
            .field("path", &self.path)
            .finish()
    }
}

impl RandomAccessFile for FaultFile {
    fn read_at(&self, offset: u64, len: usize) -> Result<Bytes> {
        {
            let mut s = self.fs.lock();
            self.fs.op(&mut s, OpKind::Read, &self.path)?;
        }
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.data.len() as u64 => {
                Ok(self.data.slice(offset as usize..end as usize))
            }
            _ => Err(out_of_bounds(offset, len, self.data.len() as u64).at(self.path.display())),
        }
    }

    fn len(&self) -> u64 {
        self.data.len() as u64
    }
}

pub(super) struct FaultWritable {
    pub(super) fs: FaultFs,
    pub(super) path: PathBuf,
    pub(super) id: usize,
    pub(super) len: u64,
}

impl std::fmt::Debug for FaultWritable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultWritable")
            .field("path", &self.path)
            .finish()
    }
}

impl WritableFile for FaultWritable {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        let mut s = self.fs.lock();
        // A failure may leave part of the data written, as a `write` that
        // ran out of space part way does.
        let (written, result) = match self.fs.op(&mut s, OpKind::Write, &self.path) {
            Err(e) if s.dead => return Err(e),
            Err(e) => ((s.torn_appends as usize) * data.len() / 2, Err(e)),
            Ok(()) => {
                let room = s
                    .capacity
                    .map_or(u64::MAX, |cap| cap.saturating_sub(FaultFs::total_bytes(&s)));
                if room < data.len() as u64 {
                    let full = io_error(io::ErrorKind::StorageFull, "appending to", &self.path);
                    (room as usize, Err(full))
                } else {
                    (data.len(), Ok(()))
                }
            }
        };
        if written > 0 {
            let inode = &mut s.inodes[self.id];
            inode.data.extend_from_slice(&data[..written]);
            inode.appends.push(inode.data.len());
            self.len += written as u64;
        }
        result
    }

    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        let mut s = self.fs.lock();
        self.fs.op(&mut s, OpKind::Sync, &self.path)?;
        let inode = &mut s.inodes[self.id];
        inode.synced = inode.data.len();
        inode.appends.clear();
        Ok(())
    }

    fn truncate(&mut self, len: u64) -> Result<()> {
        let mut s = self.fs.lock();
        self.fs.op(&mut s, OpKind::Truncate, &self.path)?;
        let inode = &mut s.inodes[self.id];
        let len = len as usize;
        if len < inode.synced {
            return Err(Error::InvalidArgument(format!(
                "FaultFs models truncating unsynced bytes only: {} to {len} bytes with {} synced",
                self.path.display(),
                inode.synced
            )));
        }
        if len < inode.data.len() {
            inode.data.truncate(len);
            inode.appends.retain(|&end| end < len);
            if len > inode.synced {
                inode.appends.push(len);
            }
        }
        self.len = inode.data.len() as u64;
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}
