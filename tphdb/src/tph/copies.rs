//! Keys and values a merge copies out of read buffers, packed end to end
//! into shared chunks ([`super::chunk::Chunk`]).
//!
//! A merge holds the entries it read until it has written them; copying
//! each key and value into an allocation of its own costs the allocator's
//! header and rounding on every one (a 20-byte key takes 32 bytes, a
//! 128-byte value 144) and two allocations per entry. Packed, an entry
//! takes its bytes and a share of one chunk's allocation, and a chunk is
//! freed when the last entry copied into it is.

use std::sync::Arc;

use super::chunk::Chunk;

/// Chunks are allocated this large; a larger entry gets a chunk of its own.
const CHUNK_BYTES: usize = 256 << 10;

/// Where a merge's copies go; copies outlive it.
#[derive(Default)]
pub(crate) struct Copies {
    chunk: Option<Arc<Chunk>>,
    /// Bytes of `chunk` written.
    used: usize,
}

impl Copies {
    /// `key`, then `value`, copied next to each other: the chunk and the
    /// key's offset in it.
    pub(crate) fn entry(&mut self, key: &[u8], value: Option<&[u8]>) -> (Arc<Chunk>, u32) {
        self.copy(&[key, value.unwrap_or_default()])
    }

    /// A copy of `key` alone.
    pub(crate) fn key(&mut self, key: &[u8]) -> (Arc<Chunk>, u32) {
        self.copy(&[key])
    }

    fn copy(&mut self, parts: &[&[u8]]) -> (Arc<Chunk>, u32) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let chunk = match &self.chunk {
            Some(c) if c.len() - self.used >= len => c.clone(),
            // The chunk's tail is left unused: the entries copied into the
            // chunk so far share it and free it with the last of them.
            _ => {
                let c = Chunk::buffer(len.max(CHUNK_BYTES));
                self.chunk = Some(c.clone());
                self.used = 0;
                c
            }
        };
        let at = self.used;
        for p in parts {
            // SAFETY: a buffer chunk (made above), written only here and
            // only past what entries refer to.
            unsafe { chunk.write(self.used, p) };
            self.used += p.len();
        }
        let off = u32::try_from(at).expect("a chunk of at most 4 GiB");
        (chunk, off)
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
            let both = [key.clone(), value.clone().unwrap_or_default()].concat();
            kept.push((both, c.entry(&key, value.as_deref())));
        }
        let big = vec![9u8; CHUNK_BYTES + 1];
        let (chunk, off) = c.entry(b"big", Some(&big));
        assert_eq!(chunk.slice(off as usize + 3, big.len()), &big[..]);
        for (want, (chunk, off)) in kept {
            assert_eq!(chunk.slice(off as usize, want.len()), &want[..]);
        }
        let (chunk, off) = c.key(b"xyz");
        assert_eq!(chunk.slice(off as usize, 3), b"xyz");
        let (chunk, off) = c.entry(b"", Some(b""));
        assert_eq!(chunk.slice(off as usize, 0), b"");
    }

    #[test]
    fn copies_share_one_chunk_until_it_fills() {
        let mut c = Copies::default();
        let (a, at_a) = c.entry(b"a", Some(&[1; 100]));
        let (b, at_b) = c.entry(b"b", Some(&[2; 100]));
        // Adjacent in the same allocation: no header between them.
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(at_b, at_a + 101);
    }
}
