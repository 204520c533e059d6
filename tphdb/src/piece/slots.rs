//! Which entry each slot of a piece being written holds.

use super::writer::NONE;
use crate::error::{Error, Result};
use crate::phf::Phf;
use crate::util::codec::PutExt;

/// Which entry each slot holds. Keys that share a 64-bit hash share a slot,
/// so all but the first go to overflow slots past the table.
pub(super) struct SlotLayout {
    pub(super) table_size: usize,
    /// Entry index per slot (`NONE`: empty), the overflow slots last.
    pub(super) by_slot: Vec<u32>,
    /// Entries in the overflow slots, in slot order.
    pub(super) overflow: Vec<u32>,
}

impl SlotLayout {
    pub(super) fn new(phf: &Phf, hashes: &[u64]) -> Result<SlotLayout> {
        let table_size = phf.table_size();
        let mut by_slot = vec![NONE; table_size];
        let mut overflow: Vec<u32> = Vec::new();
        for (i, &h) in hashes.iter().enumerate() {
            let s = phf.slot(h);
            if by_slot[s] == NONE {
                by_slot[s] = i as u32;
            } else if hashes[by_slot[s] as usize] == h {
                overflow.push(i as u32);
            } else {
                return Err(Error::PhfBuild(format!(
                    "hashes {:#x} and {h:#x} share slot {s}",
                    hashes[by_slot[s] as usize]
                )));
            }
        }
        by_slot.extend_from_slice(&overflow);
        Ok(SlotLayout {
            table_size,
            by_slot,
            overflow,
        })
    }

    /// The slot of each of `entries` entries.
    pub(super) fn into_slot_of(self, entries: usize) -> Vec<u32> {
        let mut slot_of = vec![0u32; entries];
        for (s, &i) in self.by_slot.iter().enumerate() {
            if i != NONE {
                slot_of[i as usize] = s as u32;
            }
        }
        slot_of
    }

    /// The overflow section: `(hash, slot)` of every overflow entry, sorted.
    pub(super) fn encode_overflow(&self, hashes: &[u64]) -> Vec<u8> {
        let mut overflow_slots: Vec<(u64, u32)> = self
            .overflow
            .iter()
            .enumerate()
            .map(|(j, &i)| (hashes[i as usize], (self.table_size + j) as u32))
            .collect();
        overflow_slots.sort_unstable();
        let mut buf = Vec::with_capacity(overflow_slots.len() * 12);
        for (h, s) in overflow_slots {
            buf.put_u64(h);
            buf.put_u32(s);
        }
        buf
    }
}
