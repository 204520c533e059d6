//! Where a read found what it returned: for diagnosing a wrong read (the
//! stress test prints it beside a failure).

use super::read::Snapshot;
use crate::hash::key_hash;
use crate::piece::ReadCount;

/// A value or tombstone as a line of text: its sequence number and its
/// first bytes, escaped.
fn shown(seq: u64, value: Option<&[u8]>) -> String {
    match value {
        Some(v) => {
            let head = &v[..v.len().min(24)];
            format!("seq {seq} {:?}", head.escape_ascii().to_string())
        }
        None => format!("seq {seq} tombstone"),
    }
}

impl Snapshot<'_> {
    /// What each memtable and TPH of the snapshot holds for `key`, newest
    /// first, a line each: the version a read at the snapshot's sequence
    /// number finds there, the newest there at any sequence number, and,
    /// for a TPH, every version its pieces hold (read whole, not through the
    /// global index). Slow; for diagnostics only.
    #[doc(hidden)]
    pub fn explain(&self, key: impl AsRef<[u8]>) -> Vec<String> {
        let key = key.as_ref();
        let h = key_hash(key);
        let sv = &self.sv;
        let mut lines = vec![format!("snapshot at seq {}", self.seq)];
        for (i, m) in std::iter::once(&sv.mem).chain(&sv.imms).enumerate() {
            let at = m.get(key, h, self.seq);
            let newest = m.get(key, h, u64::MAX);
            lines.push(format!(
                "memtable {i} (wal {}{}): at snapshot {:?}, newest {:?}",
                m.wal_number(),
                if m.is_spilled() { ", spilled" } else { "" },
                at.map(|v| shown(v.seq, v.value.as_deref())),
                newest.map(|v| shown(v.seq, v.value.as_deref())),
            ));
        }
        let v = &sv.version;
        let l0 = v.l0.iter().map(|t| (0, t));
        let levels = (1..=v.depth).filter_map(|l| v.tph_of(l, h).map(|t| (l, t)));
        for (level, t) in l0.chain(levels) {
            let found = t.get_counted(key, h, &mut ReadCount::default());
            let mut held = Vec::new();
            for (i, p) in t.pieces().iter().enumerate() {
                for e in p.iter() {
                    match e {
                        Ok(e) if &e.key[..] == key => {
                            held.push(format!("piece {i}: {}", shown(e.seq, e.value.as_deref())))
                        }
                        Ok(_) => {}
                        Err(e) => held.push(format!("piece {i}: {e}")),
                    }
                }
            }
            lines.push(format!(
                "level {level} TPH {}: index finds {:?}; pieces hold {held:?}",
                t.head_number(),
                found.map(|e| e.map(|e| shown(e.seq, e.value.as_deref()))),
            ));
        }
        lines
    }
}
