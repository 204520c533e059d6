//! Versions: which TPHs make up the database at a point in time.
//!
//! Level 0 holds flushed TPHs, newest first, each over the whole key space.
//! Level `i >= 1` is split into `fanout^i` TPHs over equal ranges of the
//! 32-bit search key (paper §3.4): a key is in exactly one TPH per level,
//! and the TPH at `(i, p)` covers exactly the TPHs `(i + 1, p * fanout ..
//! p * fanout + fanout)` below it. `depth` is the bottom level.

mod edit;
mod set;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub(crate) use edit::{Layout, VersionEdit};
pub(crate) use set::{decode_current, encode_current, write_manifest, RecoveredState, VersionSet};

use crate::error::{Error, Result};
use crate::hash::partition_of;
use crate::piece::{Entry, ReadCount};
use crate::tph::{PieceFile, Tph};

/// Deepest level a database may have.
pub(crate) const MAX_DEPTH: u32 = 16;

/// Whether `fanout^depth` hash ranges fit the 32-bit search keys that
/// `partition_of` divides.
pub(crate) fn partitions_fit(fanout: u64, depth: u32) -> bool {
    fanout.checked_pow(depth).is_some_and(|p| p <= 1 << 32)
}

/// An immutable set of TPHs. Readers hold one while they read.
#[derive(Debug)]
pub(crate) struct Version {
    pub(crate) layout: Layout,
    pub(crate) depth: u32,
    /// Newest first.
    pub(crate) l0: Vec<Arc<Tph>>,
    /// `levels[i - 1]` is level `i`, by partition.
    pub(crate) levels: Vec<BTreeMap<u64, Arc<Tph>>>,
}

impl Version {
    pub(crate) fn empty(layout: Layout) -> Version {
        Version {
            layout,
            depth: 1,
            l0: Vec::new(),
            levels: vec![BTreeMap::new()],
        }
    }

    /// Number of partitions of level `level >= 1` (at most 2^32: see
    /// [`partitions_fit`]).
    pub(crate) fn partitions(&self, level: u32) -> u64 {
        self.layout.fanout.saturating_pow(level)
    }

    pub(crate) fn tph(&self, level: u32, partition: u64) -> Option<&Arc<Tph>> {
        self.levels.get(level as usize - 1)?.get(&partition)
    }

    /// The TPH of level `level >= 1` whose partition holds hash `h`, if any.
    pub(crate) fn tph_of(&self, level: u32, h: u64) -> Option<&Arc<Tph>> {
        self.tph(level, partition_of(h, self.partitions(level)))
    }

    /// The newest version of `key` (hash `h`) in the TPHs, if any.
    pub(crate) fn get(&self, key: &[u8], h: u64, count: &mut ReadCount) -> Result<Option<Entry>> {
        for tph in &self.l0 {
            if let Some(e) = tph.get_counted(key, h, count)? {
                return Ok(Some(e));
            }
        }
        for level in 1..=self.depth {
            if let Some(tph) = self.tph_of(level, h) {
                if let Some(e) = tph.get_counted(key, h, count)? {
                    return Ok(Some(e));
                }
            }
        }
        Ok(None)
    }

    /// [`Version::get`] of several keys side by side: `keys[i]` (hash
    /// `hashes[i]`) for each `i` of `pending`, its result stored in
    /// `found[i]`. The TPHs are asked in the order a get asks them; at each,
    /// the keys' global-index cells are prefetched, then their pieces'
    /// perfect-hash memory, then their blocks, a key at a time at each
    /// step, so that the cache misses of different keys overlap instead of
    /// following one another. Each key then reads exactly what
    /// [`Version::get`] reads.
    pub(crate) fn get_many(
        &self,
        keys: &[&[u8]],
        hashes: &[u64],
        mut pending: Vec<usize>,
        found: &mut [Option<Result<Option<Entry>>>],
        count: &mut ReadCount,
    ) {
        let mut step = |pending: &mut Vec<usize>, tphs: Vec<Option<&Arc<Tph>>>| {
            for (&i, t) in pending.iter().zip(&tphs) {
                if let Some(t) = t {
                    t.prefetch_route(hashes[i]);
                }
            }
            let pieces: Vec<Option<&PieceFile>> = pending
                .iter()
                .zip(&tphs)
                .map(|(&i, t)| {
                    let piece = t.and_then(|t| t.piece_for(keys[i], hashes[i]));
                    if let Some(p) = piece {
                        p.prefetch_slot(hashes[i]);
                    }
                    piece
                })
                .collect();
            for (&i, p) in pending.iter().zip(&pieces) {
                if let Some(p) = p {
                    p.prefetch_block(hashes[i]);
                }
            }
            for (&i, p) in pending.iter().zip(&pieces) {
                if let Some(p) = p {
                    match p.get_counted(keys[i], hashes[i], count) {
                        Ok(None) => {}
                        r => found[i] = Some(r),
                    }
                }
            }
            pending.retain(|&i| found[i].is_none());
        };
        for tph in &self.l0 {
            if pending.is_empty() {
                return;
            }
            let tphs = vec![Some(tph); pending.len()];
            step(&mut pending, tphs);
        }
        for level in 1..=self.depth {
            if pending.is_empty() {
                return;
            }
            let tphs = pending
                .iter()
                .map(|&i| self.tph_of(level, hashes[i]))
                .collect();
            step(&mut pending, tphs);
        }
        for i in pending {
            found[i] = Some(Ok(None));
        }
    }

    /// Whether a level below `level` holds `key` (hash `h`), as the global
    /// indexes say: no read, and a signature match of another key passes.
    pub(crate) fn holds_below(&self, level: u32, key: &[u8], h: u64) -> bool {
        (level + 1..=self.depth).any(|l| self.tph_of(l, h).is_some_and(|t| t.routes(key, h)))
    }

    /// Every TPH, level 0 first.
    pub(crate) fn tphs(&self) -> impl Iterator<Item = &Arc<Tph>> {
        self.l0
            .iter()
            .chain(self.levels.iter().flat_map(|l| l.values()))
    }

    /// The version after `edit`; `new_tphs` holds the TPHs the edit adds,
    /// by head number.
    pub(crate) fn apply(
        &self,
        edit: &VersionEdit,
        new_tphs: &HashMap<u64, Arc<Tph>>,
    ) -> Result<Version> {
        let find = |head: u64| {
            new_tphs
                .get(&head)
                .cloned()
                .ok_or_else(|| Error::Internal(format!("edit adds TPH {head} without opening it")))
        };
        let mut v = Version {
            layout: self.layout,
            depth: edit.depth.unwrap_or(self.depth),
            l0: self.l0.clone(),
            levels: self.levels.clone(),
        };
        v.l0.retain(|t| !edit.remove_l0.contains(&t.head_number()));
        for &head in &edit.add_l0 {
            v.l0.insert(0, find(head)?);
        }
        while v.levels.len() < v.depth as usize {
            v.levels.push(BTreeMap::new());
        }
        for &(level, partition) in &edit.remove {
            v.levels[level as usize - 1].remove(&partition);
        }
        for &(level, partition, head) in &edit.set {
            if level == 0 || level > v.depth {
                return Err(Error::Internal(format!(
                    "edit sets level {level} of {}",
                    v.depth
                )));
            }
            v.levels[level as usize - 1].insert(partition, find(head)?);
        }
        v.debug_check_shape();
        Ok(v)
    }

    /// Asserts (in debug builds) what decode-time checks cannot see of a
    /// version built in memory: one map per level down to the depth, every
    /// TPH at its own level and in its level's partition range, level-0
    /// TPHs at level 0.
    pub(crate) fn debug_check_shape(&self) {
        debug_assert_eq!(self.levels.len(), self.depth as usize);
        debug_assert!(self.l0.iter().all(|t| t.level() == 0));
        for (i, level) in self.levels.iter().enumerate() {
            let l = i as u32 + 1;
            debug_assert!(level
                .iter()
                .all(|(&p, t)| p < self.partitions(l) && (t.level(), t.partition()) == (l, p)));
        }
    }

    /// An edit that recreates this version from nothing.
    pub(crate) fn snapshot_edit(&self) -> VersionEdit {
        VersionEdit {
            layout: Some(self.layout),
            depth: Some(self.depth),
            add_l0: self.l0.iter().rev().map(|t| t.head_number()).collect(),
            set: self
                .levels
                .iter()
                .enumerate()
                .flat_map(|(i, l)| {
                    l.iter()
                        .map(move |(&p, t)| (i as u32 + 1, p, t.head_number()))
                })
                .collect(),
            ..VersionEdit::default()
        }
    }

    /// Piece files the version reads.
    pub(crate) fn live_files(&self) -> std::collections::HashSet<u64> {
        self.tphs()
            .flat_map(|t| t.files().map(|p| p.number()))
            .collect()
    }
}
