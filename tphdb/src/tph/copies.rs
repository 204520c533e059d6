//! Keys and values a merge copies out of read buffers, packed end to end
//! into shared chunks.
//!
//! A merge holds the entries it read until it has written them; copying
//! each key and value into an allocation of its own costs the allocator's
//! header and rounding on every one (a 20-byte key takes 32 bytes, a
//! 128-byte value 144) and two allocations per entry. Packed, an entry
//! takes its bytes and a share of one chunk's header, and a chunk is
//! freed when the last entry copied into it is.

use bytes::{Bytes, BytesMut};

/// Chunks are allocated this large; a larger entry gets a chunk of its own.
const CHUNK_BYTES: usize = 256 << 10;

/// Where a merge's copies go; copies outlive it.
#[derive(Default)]
pub(crate) struct Copies {
    chunk: BytesMut,
}

impl Copies {
    /// `key`, then `value`, copied next to each other.
    pub(crate) fn entry(&mut self, key: &[u8], value: Option<&[u8]>) -> Bytes {
        let value_len = value.map_or(0, <[u8]>::len);
        self.copy(key.len() + value_len, |c| {
            c.extend_from_slice(key);
            if let Some(v) = value {
                c.extend_from_slice(v);
            }
        })
    }

    /// A copy of `bytes`.
    pub(crate) fn bytes(&mut self, bytes: &[u8]) -> Bytes {
        self.copy(bytes.len(), |c| c.extend_from_slice(bytes))
    }

    fn copy(&mut self, len: usize, fill: impl FnOnce(&mut BytesMut)) -> Bytes {
        if len == 0 {
            return Bytes::new();
        }
        if self.chunk.capacity() - self.chunk.len() < len {
            // The chunk's tail is left unused: the entries copied into the
            // chunk so far share it and free it with the last of them.
            self.chunk = BytesMut::with_capacity(len.max(CHUNK_BYTES));
        }
        fill(&mut self.chunk);
        debug_assert_eq!(self.chunk.len(), len);
        self.chunk.split().freeze()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_hold_their_bytes_across_chunks() {
        let mut c = Copies::default();
        let mut kept = Vec::new();
        for i in 0..2000usize {
            let key = format!("key{i:06}").into_bytes();
            let value = (i % 3 != 0).then(|| vec![i as u8; i * 7 % 700]);
            let both = c.entry(&key, value.as_deref());
            kept.push(([key, value.unwrap_or_default()].concat(), both));
        }
        let big = vec![9u8; CHUNK_BYTES + 1];
        assert_eq!(c.entry(b"big", Some(&big)), [&b"big"[..], &big].concat());
        for (want, both) in kept {
            assert_eq!(both, want);
        }
        assert_eq!(c.bytes(b"xyz"), Bytes::from_static(b"xyz"));
        assert_eq!(c.entry(b"", Some(b"")), Bytes::new());
    }

    #[test]
    fn copies_share_one_chunk_until_it_fills() {
        let mut c = Copies::default();
        let a = c.entry(b"a", Some(&[1; 100]));
        let b = c.entry(b"b", Some(&[2; 100]));
        // Adjacent in the same allocation: no header between them.
        assert_eq!(b.as_ptr().addr(), a.as_ptr().addr() + 101);
    }
}
