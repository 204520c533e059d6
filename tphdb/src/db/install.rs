//! Installing a job's result: the MANIFEST edit that makes it durable and
//! current, and the deletions it makes safe.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Inner, State};
use crate::error::{Error, Result};
use crate::filename::{is_flushed_wal, path};
use crate::memtable::MemTable;
use crate::tph::{MergeOutcome, MergeStats, PieceFile, Tph};
use crate::version::VersionEdit;

/// What a job changes, before it is applied.
#[derive(Default)]
pub(super) struct Change {
    pub(super) edit: VersionEdit,
    pub(super) new_tphs: HashMap<u64, Arc<Tph>>,
    obsolete: Vec<Arc<PieceFile>>,
    pub(super) stats: MergeStats,
}

impl Change {
    /// Records the outcome of merging into `(level, partition)`.
    pub(super) fn add(&mut self, level: u32, partition: u64, outcome: MergeOutcome) {
        let (obsolete, stats) = match outcome {
            MergeOutcome::Unchanged => return,
            MergeOutcome::Emptied { obsolete, stats } => {
                self.edit.remove.push((level, partition));
                (obsolete, stats)
            }
            MergeOutcome::Replaced {
                tph,
                obsolete,
                stats,
            } => {
                self.edit.set.push((level, partition, tph.head_number()));
                self.new_tphs.insert(tph.head_number(), Arc::from(tph));
                (obsolete, stats)
            }
        };
        self.obsolete.extend(obsolete);
        self.stats.add(&stats);
    }

    /// Adds what another merge of the same job changed (other partitions,
    /// or only its statistics once installed).
    pub(super) fn absorb(&mut self, other: Change) {
        debug_assert!(other.edit.add_l0.is_empty() && other.edit.remove_l0.is_empty());
        self.edit.set.extend(other.edit.set);
        self.edit.remove.extend(other.edit.remove);
        self.new_tphs.extend(other.new_tphs);
        self.obsolete.extend(other.obsolete);
        self.stats.add(&other.stats);
    }

    /// Whether applying it would change the version.
    pub(super) fn changes_version(&self) -> bool {
        self.edit != VersionEdit::default()
    }

    /// Every file of a TPH that leaves the version.
    pub(super) fn retire(&mut self, tph: &Tph) {
        self.obsolete.extend(tph.files().cloned());
    }
}

/// Deletes the head pieces a failed job wrote for TPHs it never installed.
pub(super) fn discard(change: &Change) {
    for t in change.new_tphs.values() {
        for f in t.files() {
            if f.number() == t.head_number() {
                f.mark_obsolete();
            }
        }
    }
}

impl Inner {
    /// After a failed MANIFEST edit: a full disk that left the MANIFEST as
    /// it was is retried later; anything else stops writes.
    pub(super) fn edit_failed(&self, st: &mut State, e: &Error) {
        let clean = st.versions.writable().is_some_and(|v| v.accepts_edits());
        if !(e.is_no_space() && clean) {
            self.poison(st, e);
        }
    }

    /// Makes a job's result durable and current; retires what it replaced.
    pub(super) fn apply(&self, mut change: Change, flushed: &[Arc<MemTable>]) -> Result<()> {
        let mut st = self.state.lock();
        if let Some(e) = &st.bg_error {
            discard(&change);
            return Err(Error::Poisoned(e.clone()));
        }
        if !flushed.is_empty() {
            let remaining = st
                .imms
                .iter()
                .filter(|m| !flushed.iter().any(|f| Arc::ptr_eq(f, m)))
                .map(|m| m.wal_number());
            change.edit.log_number =
                Some(remaining.chain([st.mem.wal_number()]).min().unwrap_or(0));
        }
        let visible = self.visible_seq.load(Ordering::Acquire);
        let vs = st
            .versions
            .writable()
            .expect("jobs run only on writable databases");
        vs.last_seq = vs.last_seq.max(visible);
        // The new pieces' directory entries must be durable before the
        // MANIFEST names them.
        if let Err(e) = self.fs.sync_dir(&self.dir) {
            discard(&change);
            self.poison(&mut st, &e);
            return Err(e);
        }
        // From here on the edit may reach the disk even if this fails: its
        // files stay (unused ones are removed at the next open).
        let edit = std::mem::take(&mut change.edit);
        let vs = st
            .versions
            .writable()
            .expect("jobs run only on writable databases");
        if let Err(e) = vs.log_and_apply(edit, &change.new_tphs) {
            if vs.accepts_edits() {
                // The MANIFEST is as it was: the new files are garbage.
                discard(&change);
            }
            self.edit_failed(&mut st, &e);
            return Err(e);
        }
        let log_number = vs.log_number;
        self.wals_flushed_below.store(log_number, Ordering::Release);
        let done = std::mem::replace(
            &mut st.deferred,
            super::Deferred {
                pieces: std::mem::take(&mut change.obsolete),
                wals_below: (!flushed.is_empty()).then_some(log_number),
            },
        );
        self.carry_out(&mut st, done);
        if !flushed.is_empty() {
            st.imms
                .retain(|m| !flushed.iter().any(|f| Arc::ptr_eq(f, m)));
            let mut retired = self.flushed_memtables.lock();
            retired.retain(|m| m.strong_count() > 0);
            retired.extend(flushed.iter().map(Arc::downgrade));
        }
        self.install_super_version(&st);
        Ok(())
    }

    /// Once the background is idle, makes the deferred deletions happen
    /// with an empty edit: otherwise the last job's inputs would stay on
    /// disk until the next job, doubling the space a settled database
    /// takes. A failure leaves them deferred (they are removed at the
    /// next open at the latest).
    pub(super) fn release_deferred(&self, st: &mut State) {
        if st.deferred.is_empty()
            || st.bg_error.is_some()
            || self.shutting_down.load(Ordering::Acquire)
        {
            return;
        }
        let Some(vs) = st.versions.writable() else {
            return;
        };
        if let Err(e) = vs.log_and_apply(VersionEdit::default(), &HashMap::new()) {
            // Out of space, as for a job: nothing changed, and the next
            // edit will try again.
            self.edit_failed(st, &e);
            return;
        }
        let done = std::mem::take(&mut st.deferred);
        self.carry_out(st, done);
    }

    /// Deletes what an edit, now durable, made obsolete (pieces once their
    /// last reader lets go), once CURRENT records the MANIFEST's length (see
    /// `VersionSet::record_manifest_length`). If that fails the files stay
    /// (the next open removes them).
    fn carry_out(&self, st: &mut State, done: super::Deferred) {
        let Some(vs) = st.versions.writable() else {
            return;
        };
        if vs.record_manifest_length().is_err() {
            return;
        }
        for f in &done.pieces {
            f.mark_obsolete();
        }
        if let Some(n) = done.wals_below {
            self.delete_wals_below(n);
        }
    }

    /// Deletes WAL files whose memtables are all flushed.
    fn delete_wals_below(&self, log_number: u64) {
        if let Ok(names) = self.fs.list(&self.dir) {
            for name in names.iter().filter(|n| is_flushed_wal(n, log_number)) {
                let _ = self.fs.remove(&path(&self.dir, name));
            }
        }
    }
}
