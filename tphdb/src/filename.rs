//! Names of the files in a database directory.

use std::path::{Path, PathBuf};

pub(crate) const CURRENT: &str = "CURRENT";
pub(crate) const LOCK: &str = "LOCK";

/// What a file in the database directory is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FileKind {
    Wal(u64),
    Piece(u64),
    Manifest(u64),
    Current,
    Lock,
    Temp,
}

pub(crate) fn wal_name(number: u64) -> String {
    format!("{number:06}.log")
}

pub(crate) fn manifest_name(number: u64) -> String {
    format!("MANIFEST-{number:06}")
}

pub(crate) fn path(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// Classifies a directory entry; `None` for files that are not tphdb's.
pub(crate) fn parse(name: &str) -> Option<FileKind> {
    let number = |s: &str| s.parse::<u64>().ok();
    if name == CURRENT {
        Some(FileKind::Current)
    } else if name == LOCK {
        Some(FileKind::Lock)
    } else if name.ends_with(".tmp") {
        Some(FileKind::Temp)
    } else if let Some(n) = name.strip_prefix("MANIFEST-") {
        number(n).map(FileKind::Manifest)
    } else if let Some(n) = name.strip_suffix(".log") {
        number(n).map(FileKind::Wal)
    } else if let Some(n) = name.strip_suffix(".ph") {
        number(n).map(FileKind::Piece)
    } else {
        None
    }
}

/// Whether `name` is a WAL whose writes are all flushed, as the MANIFEST's
/// `log_number` says: such WALs are deleted, never replayed.
pub(crate) fn is_flushed_wal(name: &str, log_number: u64) -> bool {
    matches!(parse(name), Some(FileKind::Wal(n)) if n < log_number)
}

/// The WALs among `names` whose writes may not be flushed, in the order
/// open replays them.
pub(crate) fn unflushed_wals<'a>(
    names: impl IntoIterator<Item = &'a String>,
    log_number: u64,
) -> Vec<u64> {
    let mut wals: Vec<u64> = names
        .into_iter()
        .filter_map(|n| match parse(n) {
            Some(FileKind::Wal(n)) if n >= log_number => Some(n),
            _ => None,
        })
        .collect();
    wals.sort_unstable();
    wals
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(parse(&wal_name(7)), Some(FileKind::Wal(7)));
        assert_eq!(parse(&manifest_name(12)), Some(FileKind::Manifest(12)));
        assert_eq!(
            parse(&crate::tph::piece_file_name(3)),
            Some(FileKind::Piece(3))
        );
        assert_eq!(parse("CURRENT"), Some(FileKind::Current));
        assert_eq!(parse("CURRENT.tmp"), Some(FileKind::Temp));
        assert_eq!(parse("notes.txt"), None);
        assert_eq!(parse("x.log"), None);
    }
}
