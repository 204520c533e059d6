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
            // A mapped file keeps no descriptor.
            Some(table) if reads.mode != ReadMode::Mmap => table.open(fs, &path, reads.mode)?,
            _ => fs.open_read(&path, reads.mode)?,
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
