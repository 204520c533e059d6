//! The record log shared by the WAL and the MANIFEST (LevelDB's log format).
//!
//! A log is a sequence of 32 KiB blocks. A record is split into fragments
//! that never cross a block boundary; each fragment has a 7-byte header:
//!
//! ```text
//! crc:u32 (masked CRC32C of type and data) | len:u16 | type:u8 | data[len]
//! ```
//!
//! `type` is FULL (1), or FIRST (2), MIDDLE (3)... LAST (4) for a record
//! split across blocks. A block tail shorter than a header is zero-filled.
//! Appends are the only writes, so a crash leaves at worst a torn suffix;
//! [`LogReader`] stops at the first fragment that does not check out and
//! reports how many bytes it dropped.

mod reader;
mod writer;

pub(crate) use reader::{LogReader, TailDrop};
pub(crate) use writer::LogWriter;

pub(crate) const BLOCK_SIZE: usize = 32 * 1024;
pub(crate) const HEADER_SIZE: usize = 7;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum FragmentType {
    Full = 1,
    First = 2,
    Middle = 3,
    Last = 4,
}

impl FragmentType {
    fn from_u8(t: u8) -> Option<Self> {
        Some(match t {
            1 => FragmentType::Full,
            2 => FragmentType::First,
            3 => FragmentType::Middle,
            4 => FragmentType::Last,
            _ => return None,
        })
    }
}

const MASK_DELTA: u32 = 0xa282_ead8;

/// Masks a CRC so that CRCs of data that itself holds CRCs stay strong.
pub(crate) fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

fn fragment_crc(t: FragmentType, data: &[u8]) -> u32 {
    mask_crc(crc32c::crc32c_append(crc32c::crc32c(&[t as u8]), data))
}

#[cfg(test)]
mod tests;
