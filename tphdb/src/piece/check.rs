//! Whole-file checks and salvage of piece files, for `verify` and `repair`.

use super::entry::Entry;
use super::reader::PieceReader;
use crate::error::{Error, Result};
use crate::hash::{key_hash, key_hash2};

impl PieceReader {
    /// Reads and checks everything in the piece: every block's checksum
    /// and entries, that the perfect hash finds every entry in its slot,
    /// the key-hash section and the key-order index. Returns the number of
    /// entries.
    pub fn verify(&self) -> Result<u64> {
        let props = self.properties();
        let bad = |what: String, expected: String, found: String| {
            Error::corruption(what, expected, found).at(self.name())
        };
        let hashes = self.key_hash_section()?;
        let mut count = 0u64;
        for e in self.iter() {
            let e = e?;
            count += 1;
            let found = self.get(&e.key)?;
            if found.as_ref().map(|f| f.seq) != Some(e.seq) {
                return Err(bad(
                    format!("lookup of a stored key ({} bytes)", e.key.len()),
                    format!("the entry of sequence {}", e.seq),
                    format!("{:?}", found.map(|f| f.seq)),
                ));
            }
            if !hashes.contains(key_hash(&e.key), key_hash2(&e.key)) {
                return Err(bad(
                    "key-hash section".into(),
                    "the hashes of every stored key".into(),
                    "a key missing".into(),
                ));
            }
        }
        if count != props.entry_count || hashes.len() as u64 != count {
            return Err(bad(
                "entry count".into(),
                props.entry_count.to_string(),
                format!("{count} entries, {} key hashes", hashes.len()),
            ));
        }
        let mut cursor = self.sorted_cursor()?;
        cursor.seek_to_first()?;
        let (mut sorted, mut last): (u64, Option<Vec<u8>>) = (0, None);
        while let Some(k) = cursor.key() {
            if last.as_deref().is_some_and(|l| l >= k) {
                return Err(bad(
                    "key-order index".into(),
                    "ascending keys".into(),
                    "a key out of order".into(),
                ));
            }
            last = Some(k.to_vec());
            sorted += 1;
            cursor.move_next()?;
        }
        if sorted != count {
            return Err(bad(
                "key-order index".into(),
                count.to_string(),
                sorted.to_string(),
            ));
        }
        Ok(count)
    }

    /// Every entry of every block that reads back intact, and a description
    /// of each damaged block. I/O errors are returned: they say nothing
    /// about the bytes on disk.
    pub(crate) fn salvage(&self) -> Result<(Vec<Entry>, Vec<String>)> {
        let props = self.properties();
        let (mut entries, mut lost) = (Vec::new(), Vec::new());
        for b in 0..props.block_count {
            let block = match self.read_block(b) {
                Ok(block) => block,
                Err(e) if !e.is_corruption() => return Err(e),
                Err(e) => {
                    lost.push(e.to_string());
                    continue;
                }
            };
            for i in 0..block.slot_count() {
                match block.entry(i, self.entry_layout()) {
                    Ok(Some(e)) => entries.push(e),
                    Ok(None) => {}
                    Err(e) => {
                        lost.push(format!("{} block {b}: {e}", self.name()));
                        break;
                    }
                }
            }
        }
        Ok((entries, lost))
    }
}
