//! Write batches: several puts and deletes applied atomically.
//!
//! The encoding is also the WAL record payload:
//!
//! ```text
//! seq:u64 count:u32 op*
//! op := 0:u8 key_len:varint key value_len:varint value     (put)
//!     | 1:u8 key_len:varint key                             (delete)
//! ```
//! `seq` is the sequence number of the first op; op `i` gets `seq + i`.

use crate::error::{Error, Result};
use crate::piece::check_limits;
use crate::util::codec::{Decoder, PutExt};

const HEADER: usize = 12;

/// Largest sequence number a database may reach (2^56: ample for any
/// write rate, and far from overflow in sequence arithmetic).
pub(crate) const MAX_SEQUENCE: u64 = 1 << 56;
const OP_PUT: u8 = 0;
const OP_DELETE: u8 = 1;

/// A group of puts and deletes that become visible together and are
/// recovered together or not at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteBatch {
    rep: Vec<u8>,
    count: u32,
}

impl Default for WriteBatch {
    fn default() -> Self {
        WriteBatch::new()
    }
}

/// One operation of a batch, borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BatchOp<'a> {
    Put(&'a [u8], &'a [u8]),
    Delete(&'a [u8]),
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> WriteBatch {
        WriteBatch {
            rep: vec![0; HEADER],
            count: 0,
        }
    }

    /// Adds a put of `value` under `key`.
    pub fn put(&mut self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) {
        let (key, value) = (key.as_ref(), value.as_ref());
        self.rep.push(OP_PUT);
        self.rep.put_varint(key.len() as u64);
        self.rep.extend_from_slice(key);
        self.rep.put_varint(value.len() as u64);
        self.rep.extend_from_slice(value);
        self.count += 1;
    }

    /// Adds a delete of `key`.
    pub fn delete(&mut self, key: impl AsRef<[u8]>) {
        let key = key.as_ref();
        self.rep.push(OP_DELETE);
        self.rep.put_varint(key.len() as u64);
        self.rep.extend_from_slice(key);
        self.count += 1;
    }

    /// Number of operations.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when the batch holds no operation.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Removes every operation.
    pub fn clear(&mut self) {
        self.rep.truncate(HEADER);
        self.count = 0;
    }

    /// Size of the encoded batch in bytes.
    pub fn size_in_bytes(&self) -> usize {
        self.rep.len()
    }

    /// Appends the operations of `other`.
    pub(crate) fn append(&mut self, other: &WriteBatch) {
        self.rep.extend_from_slice(&other.rep[HEADER..]);
        self.count += other.count;
    }

    /// Stamps the first sequence number and returns the encoded batch.
    pub(crate) fn encode_with_seq(&mut self, seq: u64) -> &[u8] {
        self.rep[..8].copy_from_slice(&seq.to_le_bytes());
        self.rep[8..12].copy_from_slice(&self.count.to_le_bytes());
        &self.rep
    }

    /// Rejects keys and values over the limits before anything is logged.
    pub(crate) fn validate(&self) -> Result<()> {
        for op in self.ops() {
            match op {
                BatchOp::Put(k, v) => check_limits(k, Some(v))?,
                BatchOp::Delete(k) => check_limits(k, None)?,
            }
        }
        Ok(())
    }

    /// The operations, in order. The batch was built by this type, so its
    /// encoding is well formed.
    pub(crate) fn ops(&self) -> impl Iterator<Item = BatchOp<'_>> {
        OpIter {
            d: Decoder::new(&self.rep[HEADER..], "write batch"),
            left: self.count,
        }
        .map(|op| op.expect("a batch built in memory is well formed"))
    }

    /// Decodes a batch read from the WAL: `(first seq, batch)`.
    pub(crate) fn decode(rep: &[u8]) -> Result<(u64, WriteBatch)> {
        let mut d = Decoder::new(rep, "write batch");
        let seq = d.u64()?;
        let count = d.u32()?;
        if seq
            .checked_add(count.into())
            .is_none_or(|end| end > MAX_SEQUENCE)
        {
            return Err(Error::corruption(
                "write batch sequence numbers",
                format!("at most {MAX_SEQUENCE}"),
                format!("{seq} + {count}"),
            ));
        }
        let mut ops = OpIter {
            d: Decoder::new(&rep[HEADER..], "write batch"),
            left: count,
        };
        for op in ops.by_ref() {
            op?;
        }
        ops.d.finish()?;
        Ok((
            seq,
            WriteBatch {
                rep: rep.to_vec(),
                count,
            },
        ))
    }
}

struct OpIter<'a> {
    d: Decoder<'a>,
    left: u32,
}

impl<'a> Iterator for OpIter<'a> {
    type Item = Result<BatchOp<'a>>;

    fn next(&mut self) -> Option<Result<BatchOp<'a>>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        Some(self.decode_op())
    }
}

impl<'a> OpIter<'a> {
    fn decode_op(&mut self) -> Result<BatchOp<'a>> {
        let kind = self.d.u8()?;
        let key_len = self.d.varint()?;
        let key = self
            .d
            .bytes(usize::try_from(key_len).unwrap_or(usize::MAX))?;
        match kind {
            OP_PUT => {
                let value_len = self.d.varint()?;
                let value = self
                    .d
                    .bytes(usize::try_from(value_len).unwrap_or(usize::MAX))?;
                Ok(BatchOp::Put(key, value))
            }
            OP_DELETE => Ok(BatchOp::Delete(key)),
            k => Err(Error::corruption(
                "write batch op",
                "0 (put) or 1 (delete)",
                k,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip() {
        let mut b = WriteBatch::new();
        b.put(b"k1", b"v1");
        b.delete(b"k2");
        b.put(b"", b"");
        let mut other = WriteBatch::new();
        other.put(b"k3", vec![7u8; 300]);
        b.append(&other);
        assert_eq!(b.len(), 4);
        let enc = b.encode_with_seq(42).to_vec();
        let (seq, d) = WriteBatch::decode(&enc).unwrap();
        assert_eq!(seq, 42);
        let ops: Vec<_> = d.ops().collect();
        assert_eq!(ops[0], BatchOp::Put(b"k1", b"v1"));
        assert_eq!(ops[1], BatchOp::Delete(b"k2"));
        assert_eq!(ops[2], BatchOp::Put(b"", b""));
        assert_eq!(ops[3], BatchOp::Put(b"k3", &[7u8; 300]));
    }

    #[test]
    fn damaged_encodings_are_errors() {
        let mut b = WriteBatch::new();
        b.put(b"key", b"value");
        b.delete(b"gone");
        let enc = b.encode_with_seq(1).to_vec();
        for len in 0..enc.len() {
            assert!(WriteBatch::decode(&enc[..len]).is_err());
        }
        let mut extra = enc.clone();
        extra.push(0);
        assert!(WriteBatch::decode(&extra).is_err());
        let mut bad_kind = enc.clone();
        bad_kind[HEADER] = 9;
        assert!(WriteBatch::decode(&bad_kind).is_err());
    }
}
