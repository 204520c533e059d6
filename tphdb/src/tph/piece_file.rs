//! Piece files as the TPHs of a database share them, and how they are
//! read.

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::Result;
use crate::fs::{FileSystem, OpenFiles, ReadMode};
use crate::piece::{BlockCache, PieceReader};

/// File name of piece `number`.
pub(crate) fn piece_file_name(number: u64) -> String {
    format!("{number:06}.ph")
}

/// An open piece file shared by the TPH versions that reference it. Once
/// marked obsolete, the file is deleted when the last reference goes.
pub(crate) struct PieceFile {
    number: u64,
    reader: PieceReader,
    path: PathBuf,
    fs: Arc<dyn FileSystem>,
    obsolete: AtomicBool,
}

impl std::fmt::Debug for PieceFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PieceFile")
            .field("number", &self.number)
            .finish_non_exhaustive()
    }
}

/// How a database reads its pieces: the read mode, the block cache when
/// there is one, and the bound on open files (for the modes that keep a
/// descriptor per piece).
#[derive(Clone, Debug)]
pub(crate) struct PieceReads {
    pub(crate) mode: ReadMode,
    pub(crate) cache: Option<Arc<BlockCache>>,
    pub(crate) open_files: Option<Arc<OpenFiles>>,
    /// Read PtrHash pieces (only when the user chose PtrHash).
    pub(crate) allow_ptrhash: bool,
    /// Global index bytes of every TPH of the database alive: the current
    /// version's, and those that running jobs, snapshots and iterators
    /// still hold (see [`Tph`]'s drop).
    pub(crate) global_index_held: Arc<AtomicU64>,
}

impl From<ReadMode> for PieceReads {
    fn from(mode: ReadMode) -> PieceReads {
        PieceReads {
            mode,
            cache: None,
            open_files: None,
            allow_ptrhash: false,
            global_index_held: Arc::default(),
        }
    }
}

impl PieceFile {
    pub(crate) fn open(
        fs: &Arc<dyn FileSystem>,
        dir: &Path,
        number: u64,
        reads: &PieceReads,
    ) -> Result<Arc<PieceFile>> {
        let path = dir.join(piece_file_name(number));
        let file = match &reads.open_files {
            Some(table) if reads.mode == ReadMode::Mmap => table.open_mapped(fs, &path)?,
            Some(table) => table.open(fs, &path, reads.mode)?,
            None => fs.open_read(&path, reads.mode)?,
        };
        let mut reader =
            PieceReader::from_file(file, path.display().to_string(), reads.allow_ptrhash)?;
        if let Some(cache) = &reads.cache {
            // Mapped pieces have the page cache for their blocks.
            let cache_blocks = reads.mode != ReadMode::Mmap;
            reader = reader.with_block_cache(cache.clone(), number, cache_blocks);
        }
        Ok(Arc::new(PieceFile {
            number,
            reader,
            path,
            fs: fs.clone(),
            obsolete: AtomicBool::new(false),
        }))
    }

    pub(crate) fn number(&self) -> u64 {
        self.number
    }

    /// The file is no longer part of the current version; delete it when
    /// nothing reads it any more.
    pub(crate) fn mark_obsolete(&self) {
        self.obsolete.store(true, Ordering::Release);
    }
}

impl Deref for PieceFile {
    type Target = PieceReader;
    fn deref(&self) -> &PieceReader {
        &self.reader
    }
}

impl Drop for PieceFile {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            // Best effort: a file left behind is found and removed at open.
            let _ = self.fs.remove(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::{mapped_resident_bytes, PosixFs};
    use crate::piece::{write_piece, EntryRef, PieceOptions};

    /// Regression: a database's mapped pieces served the key hashes and
    /// key-order chunks compactions and scans read from the mapping, and
    /// what they read stayed mapped in the process until let go of (a
    /// share's key-order scan held 2 to 6 MB of its source's pages). They
    /// now read those through a descriptor from the open-files table; gets
    /// and passes over blocks still read the mapping.
    #[test]
    fn key_hashes_and_key_order_of_a_mapped_piece_are_read_without_mapping_it() {
        let dir = tempfile::tempdir().unwrap();
        let keys: Vec<[u8; 4]> = (0..50_000u32).map(u32::to_be_bytes).collect();
        let entries: Vec<EntryRef<'_>> = keys
            .iter()
            .map(|k| EntryRef {
                key: k,
                value: Some(&[7u8; 100]),
                seq: 1,
            })
            .collect();
        let fs: Arc<dyn FileSystem> = Arc::new(PosixFs);
        let path = dir.path().join(piece_file_name(5));
        write_piece(fs.as_ref(), &path, &entries, &PieceOptions::default()).unwrap();
        let table = OpenFiles::new(4);
        let reads = PieceReads {
            open_files: Some(table.clone()),
            ..PieceReads::from(ReadMode::Mmap)
        };
        let piece = PieceFile::open(&fs, dir.path(), 5, &reads).unwrap();
        let mut hashes = 0;
        piece.for_each_key_hash(|_, _| hashes += 1).unwrap();
        let mut cursor = piece.sorted_cursor().unwrap();
        cursor.seek_to_first().unwrap();
        let mut in_order = Vec::new();
        while let Some(k) = cursor.key() {
            in_order.push(<[u8; 4]>::try_from(k).unwrap());
            cursor.move_next().unwrap();
        }
        assert_eq!(hashes, entries.len());
        assert_eq!(in_order, keys);
        assert_eq!(mapped_resident_bytes(&path), 0);
        assert_eq!(table.open_count(), 1, "the descriptor is the table's");
        assert_eq!(
            piece.get(&keys[77]).unwrap().unwrap().value.unwrap()[..],
            [7u8; 100]
        );
        assert!(mapped_resident_bytes(&path) > 0, "a get reads the mapping");
    }
}
