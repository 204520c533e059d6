//! Where a merged TPH keeps its global index.

use super::*;
use crate::piece::PieceReader;

/// Bytes of TPH index sections (meta and fuse) in the files on disk.
fn index_section_bytes(h: &Harness) -> u64 {
    let mut bytes = 0;
    for name in h.mem.list(&h.dir).unwrap() {
        let piece = PieceReader::open(&h.mem, &h.dir.join(&name), ReadMode::Pread).unwrap();
        for id in [SECTION_META, SECTION_FUSE] {
            bytes += piece
                .extra_section(id)
                .unwrap()
                .map_or(0, |s| s.len() as u64);
        }
    }
    bytes
}

/// Regression: a merge that kept the base's pieces wrote its global index
/// (over every key of the TPH) into its new data piece, and the next
/// merge's head took over without the old index leaving that piece: a TPH
/// of n pieces kept n indexes on disk, about n/2 times its keys, 217 MB of
/// a 16M x 128-byte load's 2,764. With an index number the index goes
/// into an index-only head, removed with the TPH it indexes.
#[test]
fn merged_data_pieces_keep_no_stale_index() {
    let mut stale = Vec::new();
    for separate_index in [false, true] {
        let mut h = Harness::new(true, 16);
        h.separate_index = separate_index;
        for round in 0..6u32 {
            let batch: BTreeMap<_, _> = (round * 300..(round + 1) * 300)
                .map(|i| (key(i), Some(vec![round as u8; 60])))
                .collect();
            h.merge(&batch);
            h.check();
            h.check_files();
        }
        let tph = h.tph.clone().unwrap();
        assert_eq!(tph.piece_count(), 6);
        let head = PieceReader::open(
            &h.mem,
            &h.dir.join(piece_file_name(tph.head_number())),
            ReadMode::Pread,
        )
        .unwrap();
        let current: u64 = [SECTION_META, SECTION_FUSE]
            .iter()
            .map(|&id| {
                head.extra_section(id)
                    .unwrap()
                    .map_or(0, |s| s.len() as u64)
            })
            .sum();
        stale.push(index_section_bytes(&h) - current);
        assert_eq!(head.is_empty(), separate_index);
    }
    // Five superseded indexes of 300 to 1,500 keys, then none.
    assert!(stale[0] > 4_000, "{stale:?}");
    assert_eq!(stale[1], 0);
}
