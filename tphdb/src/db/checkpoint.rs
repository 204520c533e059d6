//! Checkpoints: a consistent copy of an open database, made of hard links
//! to its pieces and a MANIFEST of its own.

use std::path::{Path, PathBuf};

use super::Inner;
use crate::error::{Error, Result};
use crate::filename::path;
use crate::tph::piece_file_name;
use crate::version::{write_manifest, Version};

impl Inner {
    pub(crate) fn checkpoint(self: &std::sync::Arc<Self>, target: &Path) -> Result<()> {
        if self.read_only {
            return Err(Error::ReadOnly(
                "a checkpoint flushes the memtables; open the database for writing".into(),
            ));
        }
        if self.fs.exists(target) {
            return Err(Error::InvalidArgument(format!(
                "checkpoint directory {} already exists",
                target.display()
            )));
        }
        // Every write acknowledged before now is then in a piece: the copy
        // needs no WAL.
        self.flush()?;
        // The version pins its pieces: none is deleted while it is held.
        let (version, manifest_number, next_file, last_seq) = {
            let mut st = self.state.lock();
            let vs = st
                .versions
                .writable()
                .ok_or_else(|| Error::Internal("a writable database without versions".into()))?;
            let number = vs.new_file_number();
            (vs.current.clone(), number, number + 1, vs.last_seq)
        };
        // Built under a temporary name and renamed into place: a failed
        // checkpoint leaves no directory that looks like a database.
        let staging = staging_dir(target)?;
        if self.fs.exists(&staging) {
            for name in self.fs.list(&staging)? {
                self.fs.remove(&path(&staging, &name))?;
            }
            self.fs.remove_dir(&staging)?;
        }
        self.fs.create_dir_all(&staging)?;
        self.fill(&staging, &version, manifest_number, next_file, last_seq)?;
        self.fs.rename(&staging, target)?;
        if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
            self.fs.sync_dir(parent)?;
        }
        Ok(())
    }

    /// Links `version`'s pieces into `target` and writes a MANIFEST and
    /// CURRENT naming them.
    fn fill(
        &self,
        target: &Path,
        version: &Version,
        manifest_number: u64,
        next_file: u64,
        last_seq: u64,
    ) -> Result<()> {
        for tph in version.tphs() {
            for file in tph.files() {
                let name = piece_file_name(file.number());
                self.fs
                    .link_or_copy(&path(&self.dir, &name), &path(target, &name))?;
            }
        }
        self.fs.sync_dir(target)?;
        // No WAL in the copy: every WAL number it could find is replayed
        // from `next_file` on.
        write_manifest(
            self.fs.as_ref(),
            target,
            manifest_number,
            version,
            next_file,
            next_file,
            last_seq,
        )?;
        Ok(())
    }
}

/// `target` with `.tmp` appended to its last component.
fn staging_dir(target: &Path) -> Result<PathBuf> {
    let name = target.file_name().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "checkpoint directory {} has no name",
            target.display()
        ))
    })?;
    let mut staging = name.to_os_string();
    staging.push(".tmp");
    Ok(target.with_file_name(staging))
}
