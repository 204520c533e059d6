//! A report of a piece's layout for `tphdb inspect piece`: what
//! RocksDB's `sst_dump` shows of a table.

use std::fmt::Write as _;

use super::format::{Footer, SectionId, FOOTER_BYTES};
use super::PieceReader;
use crate::error::Result;

/// Section names beyond the piece's own: a TPH head's index.
fn section_name(id: u32) -> String {
    let own = SectionId::ALL.iter().find(|s| **s as u32 == id);
    match (own, id) {
        (Some(s), _) => s.name().to_string(),
        (None, 16) => "TPH meta".into(),
        (None, 17) => "TPH perfect hash".into(),
        (None, 18) => "TPH slots".into(),
        (None, 20) => "TPH exceptions".into(),
        (None, 21) => "TPH fuse".into(),
        (None, _) => "unknown".into(),
    }
}

impl PieceReader {
    /// The footer, section directory, properties, perfect hash and blocks
    /// (the first `blocks` of them one by one, then a size summary), as
    /// text. Reads the footer again; every checksum is checked on the way.
    pub fn inspect(&self, blocks: u64) -> Result<String> {
        let mut out = String::new();
        let len = self.file_bytes();
        let footer_at = len.saturating_sub(FOOTER_BYTES as u64);
        let footer = Footer::decode(&self.read_range(footer_at, FOOTER_BYTES)?)?;
        let w = &mut out;
        // Writing to a String cannot fail.
        let _ = writeln!(w, "piece {} ({len} bytes)", self.name());
        let _ = writeln!(
            w,
            "footer: at {footer_at}, format version {}, section directory \
             {} bytes at {} (crc32c {:#010x})",
            footer.version, footer.dir_len, footer.dir_offset, footer.dir_crc
        );
        let _ = writeln!(w, "sections:");
        for s in &self.sections {
            let _ = writeln!(
                w,
                "  {:>3} {:<18} offset {:>12} length {:>10} crc32c {:#010x}",
                s.id,
                section_name(s.id),
                s.offset,
                s.len,
                s.crc
            );
        }
        if let Some(meta) = self.extra_section(crate::tph::SECTION_META)? {
            let m = crate::tph::TphMeta::decode(&meta)?;
            let pieces: Vec<String> = m
                .pieces
                .iter()
                .map(|p| format!("{} ({} live, {} shadowed)", p.number, p.live, p.shadowed))
                .collect();
            let _ = writeln!(
                w,
                "TPH head: level {} partition {}, {}-bit signatures, {} pieces oldest first: {}",
                m.level,
                m.partition,
                m.sig_bits,
                m.pieces.len(),
                pieces.join(", ")
            );
            if let Some(fuse) = self.extra_section(crate::tph::SECTION_FUSE)? {
                let fuse = crate::phf::fuse::Fuse::decode(fuse)?;
                let _ = writeln!(
                    w,
                    "global index: fuse (section version {}) over {} keys, {}-bit fields, \
                     {} bytes in memory ({:.2} bits per key)",
                    fuse.section_version(),
                    fuse.len(),
                    fuse.value_bits(),
                    fuse.memory_bytes(),
                    fuse.memory_bytes() as f64 * 8.0 / fuse.len().max(1) as f64
                );
            }
        }
        let p = self.properties();
        let _ = writeln!(w, "properties:");
        let _ = writeln!(
            w,
            "  entries {} (tombstones {}), key bytes {}, value bytes {}",
            p.entry_count, p.tombstone_count, p.key_bytes, p.value_bytes
        );
        let layout = self.entry_layout();
        let _ = writeln!(
            w,
            "  sequence numbers {}..={}, {}",
            p.min_seq,
            p.max_seq,
            match layout.seq {
                crate::piece::SeqCoding::Varint => "varints".to_string(),
                crate::piece::SeqCoding::Fixed { bytes, .. } =>
                    format!("each as its distance from the smallest in {bytes} byte(s)"),
            }
        );
        let _ = writeln!(
            w,
            "  entry tags: {}",
            match layout.stored_key_len {
                Some(n) => format!("none (every entry a put of a key of {n} bytes as stored)"),
                None => "a varint an entry (key length, tombstone)".to_string(),
            }
        );
        let _ = writeln!(
            w,
            "  slots {} + {} overflow, {} per block (page size {}), compression {:?}",
            p.table_size, p.overflow_count, p.slots_per_block, p.page_size, p.compression
        );
        let _ = writeln!(w, "  key hash seed {:#018x}", p.key_hash_seed);
        let _ = writeln!(
            w,
            "  key prefix {} bytes, left out of every entry: {:?}",
            self.key_prefix().len(),
            String::from_utf8_lossy(self.key_prefix())
        );
        let phf = &self.phf;
        let keys = phf.len().max(1) as f64;
        let _ = writeln!(
            w,
            "perfect hash: {}, {} keys in {} slots (load {:.3}), {} bytes in memory \
             ({:.2} bits per key)",
            phf.kind().name(),
            phf.len(),
            phf.table_size(),
            phf.len() as f64 / phf.table_size().max(1) as f64,
            phf.memory_bytes(),
            phf.memory_bytes() as f64 * 8.0 / keys
        );
        if let crate::phf::Phf::CpHash(c) = phf {
            let _ = writeln!(w, "  {}", c.segments_summary());
        }
        let _ = writeln!(
            w,
            "block index: {} segments, {} bytes in memory",
            self.segment_count(),
            self.blocks.memory_bytes()
        );
        let count = p.block_count;
        let (mut min, mut max, mut total) = (u64::MAX, 0u64, 0u64);
        let _ = writeln!(w, "blocks: {count}, {} data bytes", p.data_bytes);
        for b in 0..count {
            let (offset, bytes) = self.blocks.block(b);
            let bytes = bytes as u64;
            (min, max, total) = (min.min(bytes), max.max(bytes), total + bytes);
            if b < blocks {
                let block = self.read_block(b)?;
                let _ = writeln!(
                    w,
                    "  block {b:>8}: offset {offset:>12} length {bytes:>8} ({} bytes decoded, {} entries)",
                    block.raw_len(),
                    (0..block.slot_count())
                        .filter(|&i| matches!(block.entry(i, self.entry_layout()), Ok(Some(_))))
                        .count()
                );
            }
        }
        if count > 0 {
            let _ = writeln!(
                w,
                "  block bytes: min {min}, mean {:.1}, max {max}",
                total as f64 / count as f64
            );
        }
        Ok(out)
    }
}
