use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::cursor::Cursor;
use crate::fs::{FileSystem, MemFs, ReadMode};
use crate::hash::test_support::with_hash_bits;
use crate::piece::{BlockCache, PieceOptions};

/// Key -> Some(value) or None (tombstone).
type Model = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

struct Harness {
    fs: Arc<dyn FileSystem>,
    mem: MemFs,
    dir: PathBuf,
    next_number: u64,
    seq: u64,
    tph: Option<Arc<Tph>>,
    model: Model,
    bottom: bool,
    max_pieces: usize,
    push_past_bytes: Option<u64>,
    bottom_pushed_near: Option<u64>,
    /// Passed to merges as `MergeContext::pinned` and `carried_down`.
    pinned: Vec<u64>,
    carried_down: Vec<u64>,
    /// `MergeContext::fold_memory_bytes`: small, folds write in passes.
    fold_memory_bytes: u64,
    options: PieceOptions,
    reads: PieceReads,
    /// `MergeContext::hashes`: the partition the TPH's keys come from.
    hashes: std::ops::RangeInclusive<u64>,
    /// Merges write their index apart, as an index-only head
    /// (`MergeContext::index_number`), as the database's do.
    separate_index: bool,
}

impl Harness {
    fn new(bottom: bool, max_pieces: usize) -> Harness {
        let mem = MemFs::new();
        Harness {
            fs: Arc::new(mem.clone()),
            mem,
            dir: PathBuf::from("/db"),
            next_number: 1,
            seq: 1,
            tph: None,
            model: Model::new(),
            bottom,
            max_pieces,
            push_past_bytes: None,
            bottom_pushed_near: None,
            pinned: Vec::new(),
            carried_down: Vec::new(),
            fold_memory_bytes: u64::MAX,
            options: PieceOptions {
                page_size: 256,
                // Small segments; global indexes are built a few chunks at
                // a time (index_memory_bytes), in several passes over the
                // keys.
                phf: crate::phf::PhfConfig {
                    segment_keys: 64,
                    ..crate::phf::PhfConfig::default()
                },
                ..PieceOptions::default()
            },
            // Small enough that blocks are evicted while the tests run.
            reads: PieceReads {
                mode: ReadMode::Pread,
                cache: Some(Arc::new(BlockCache::new(16 << 10))),
                // Fewer than a TPH's pieces: files close and reopen.
                open_files: Some(crate::fs::OpenFiles::new(2)),
                allow_ptrhash: false,
                global_index_held: Arc::default(),
            },
            hashes: 0..=u64::MAX,
            separate_index: false,
        }
    }

    fn merge(&mut self, ops: &BTreeMap<Vec<u8>, Option<Vec<u8>>>) -> MergeStats {
        let delta: Vec<DeltaEntry> = ops
            .iter()
            .map(|(k, v)| {
                self.seq += 1;
                DeltaEntry::copy_of(k, v.as_deref(), self.seq)
            })
            .collect();
        for (k, v) in ops {
            self.model.insert(k.clone(), v.clone());
        }
        let empty = ops.is_empty();
        self.merge_written(Written::held(delta), &[], empty)
    }

    /// Merges `delta`, read again from `inputs` where held by shape; the
    /// caller keeps the model. `empty`: the delta is empty.
    fn merge_written(
        &mut self,
        delta: Vec<Written>,
        inputs: &[Arc<Tph>],
        empty: bool,
    ) -> MergeStats {
        let outcome = self.try_merge(delta, inputs).unwrap();
        self.take(outcome, empty)
    }

    fn try_merge(&mut self, delta: Vec<Written>, inputs: &[Arc<Tph>]) -> Result<MergeOutcome> {
        let outcome = merge(&self.context(inputs), self.tph.as_deref(), delta);
        self.next_number += 1 + u64::from(self.separate_index);
        outcome
    }

    /// What a merge into the harness's TPH is handed.
    fn context<'a>(&'a self, inputs: &'a [Arc<Tph>]) -> MergeContext<'a> {
        MergeContext {
            fs: &self.fs,
            dir: &self.dir,
            reads: &self.reads,
            piece_options: &self.options,
            sig_bits: 8,
            field_bits: None,
            level: 1,
            partition: 0,
            bottom: self.bottom,
            max_pieces: self.max_pieces,
            push_past_bytes: self.push_past_bytes,
            bottom_pushed_near: self.bottom_pushed_near,
            min_live_ratio: 0.2,
            gc_input_bytes: None,
            fold_memory_bytes: self.fold_memory_bytes,
            new_number: self.next_number,
            index_number: self.separate_index.then_some(self.next_number + 1),
            index_memory_bytes: 128 * crate::phf::fuse::BUILD_BYTES_PER_KEY,
            job_memory: None,
            hashes: self.hashes.clone(),
            pinned: &self.pinned,
            inputs,
            carried_down: &self.carried_down,
            below: None,
        }
    }

    /// The TPH `outcome` leaves.
    fn take(&mut self, outcome: MergeOutcome, empty: bool) -> MergeStats {
        match outcome {
            MergeOutcome::Unchanged => {
                assert!(empty);
                MergeStats::default()
            }
            MergeOutcome::Emptied { obsolete, stats } => {
                obsolete.iter().for_each(|p| p.mark_obsolete());
                self.tph = None;
                stats
            }
            MergeOutcome::Replaced {
                tph,
                obsolete,
                stats,
            } => {
                obsolete.iter().for_each(|p| p.mark_obsolete());
                // Above the bottom, or at a bottom that may deepen, up to
                // four times max_pieces.
                let limit = match (self.push_past_bytes, self.bottom_pushed_near) {
                    (None, None) => self.max_pieces,
                    _ => self.max_pieces * 4,
                };
                // Pinned pieces stay past max_pieces.
                let limit = limit.max(self.pinned.len() + 1);
                assert!(tph.piece_count() <= limit);
                self.tph = Some(Arc::from(tph));
                stats
            }
        }
    }

    fn check(&self) {
        let Some(tph) = &self.tph else {
            for v in self.model.values() {
                assert!(v.is_none() && self.bottom, "a value was lost");
            }
            return;
        };
        self.check_tph(tph);
        // Reopening from the head piece gives the same TPH.
        let mut open = HashMap::new();
        let again = Arc::new(
            Tph::open(
                &self.fs,
                &self.dir,
                tph.head_number(),
                &ReadMode::Pread.into(),
                &mut open,
            )
            .unwrap(),
        );
        assert_eq!(again.piece_numbers(), tph.piece_numbers());
        self.check_tph(&again);
        passes::check_hash_ranges(tph);
    }

    fn check_tph(&self, tph: &Arc<Tph>) {
        for (k, v) in &self.model {
            let got = tph
                .get_counted(k, key_hash(k), &mut Default::default())
                .unwrap();
            match v {
                Some(v) => assert_eq!(
                    got.and_then(|e| e.value).as_deref(),
                    Some(&v[..]),
                    "key {k:?}"
                ),
                None if self.bottom => assert!(got.is_none_or(|e| e.value.is_none())),
                None => assert!(
                    got.is_some_and(|e| e.value.is_none()),
                    "tombstone of {k:?} lost"
                ),
            }
        }
        for absent in [b"absent".to_vec(), vec![0xff; 3], vec![]] {
            if !self.model.contains_key(&absent) {
                assert!(tph
                    .get_counted(&absent, key_hash(&absent), &mut Default::default())
                    .unwrap()
                    .is_none());
            }
        }
        let live = tph.live_entries().unwrap();
        let expect: Vec<(Vec<u8>, Option<Vec<u8>>)> = self
            .model
            .iter()
            .filter(|(k, v)| v.is_some() || live.iter().any(|e| e.key() == &k[..]))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let got: Vec<(Vec<u8>, Option<Vec<u8>>)> = live
            .iter()
            .map(|e| (e.key().to_vec(), e.value().map(<[u8]>::to_vec)))
            .collect();
        assert_eq!(got, expect);
        if !self.bottom {
            assert_eq!(
                live.len(),
                self.model.len(),
                "non-bottom TPHs keep every tombstone"
            );
        }
        let mut c = TphCursor::new(tph, false).unwrap();
        c.seek_to_first().unwrap();
        for (k, v) in &got {
            assert_eq!(c.key(), &k[..]);
            assert_eq!(c.value_ref().load(c.key()).unwrap().map(|v| v.to_vec()), *v);
            assert_eq!(c.is_tombstone(), v.is_none());
            c.next().unwrap();
        }
        assert!(!c.valid());
        c.seek_to_last().unwrap();
        for (k, _) in got.iter().rev() {
            assert_eq!(c.key(), &k[..]);
            c.prev().unwrap();
        }
        assert!(!c.valid());
    }

    /// Files on disk are exactly those the current TPH reads.
    fn check_files(&self) {
        let on_disk: Vec<String> = self.mem.list(&self.dir).unwrap();
        let mut want: Vec<String> = match &self.tph {
            Some(t) => t.files().map(|p| piece_file_name(p.number())).collect(),
            None => Vec::new(),
        };
        want.sort();
        assert_eq!(on_disk, want);
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn ops_strategy() -> impl Strategy<Value = Vec<BTreeMap<Vec<u8>, Option<Vec<u8>>>>> {
    let op = (
        0u32..300,
        prop::option::weighted(0.8, prop::collection::vec(any::<u8>(), 0..40)),
    );
    let batch = prop::collection::vec(op, 0..80)
        .prop_map(|v| v.into_iter().map(|(k, val)| (key(k), val)).collect());
    prop::collection::vec(batch, 1..14)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn merges_match_a_model(
        batches in ops_strategy(),
        bottom in any::<bool>(),
        max_pieces in prop_oneof![Just(1usize), Just(2), Just(4), Just(16)],
        fold_memory_bytes in prop_oneof![Just(u64::MAX), Just(1u64), Just(8 << 10)],
        separate_index in any::<bool>(),
    ) {
        let mut h = Harness::new(bottom, max_pieces);
        h.separate_index = separate_index;
        h.fold_memory_bytes = fold_memory_bytes;
        for b in &batches {
            h.merge(b);
            h.check();
            h.check_files();
        }
    }
}

/// With key hashes narrowed to 6 bits, nearly every key shares its hash with
/// others: piece overflow slots, TPH exceptions and repeated hashes in the
/// perfect hash are all exercised.
#[test]
fn colliding_hashes_stay_exact() {
    with_hash_bits(6, || {
        let mut rng = fastrand::Rng::with_seed(3);
        for (bottom, max_pieces, fold_memory_bytes) in [
            (false, 4, u64::MAX),
            (true, 2, u64::MAX),
            (true, 16, u64::MAX),
            (true, 2, 1),
        ] {
            let mut h = Harness::new(bottom, max_pieces);
            h.fold_memory_bytes = fold_memory_bytes;
            for round in 0..12 {
                let mut ops = BTreeMap::new();
                for _ in 0..rng.usize(1..60) {
                    let v = (rng.u8(..5) != 0).then(|| vec![round as u8; rng.usize(0..10)]);
                    ops.insert(key(rng.u32(0..200)), v);
                }
                h.merge(&ops);
                h.check();
                h.check_files();
            }
            let tph = h.tph.as_ref().unwrap();
            assert!(
                !tph.index.exceptions.is_empty(),
                "the test must create exceptions"
            );
        }
    });
}

#[test]
fn insert_only_merges_keep_old_pieces_and_write_only_the_delta() {
    let mut h = Harness::new(true, 16);
    let first: BTreeMap<_, _> = (0..1000).map(|i| (key(i), Some(vec![1u8; 100]))).collect();
    let s1 = h.merge(&first);
    let second: BTreeMap<_, _> = (1000..1100)
        .map(|i| (key(i), Some(vec![2u8; 100])))
        .collect();
    let s2 = h.merge(&second);
    h.check();
    // The second merge writes its 100 entries, not the first 1000 again.
    assert_eq!(s2.entries_written, 100);
    assert!(s2.bytes_written() * 5 < s1.bytes_written(), "{s1:?} {s2:?}");
    assert_eq!(h.tph.as_ref().unwrap().piece_count(), 2);
}

#[test]
fn a_tph_above_the_bottom_puts_off_its_folds_until_its_push_down() {
    let batch = |round: u32, size: u32| -> Model {
        (round * size..round * size + size)
            .map(|i| (key(i), Some(vec![1u8; 100])))
            .collect()
    };
    // Threshold 350 entries (about 113 bytes each), batches of 100: four
    // fill it, so the TPH keeps four pieces below it although max_pieces
    // is 2, and from the fourth batch on it is due and keeps up to 4 x 2.
    let mut h = Harness::new(false, 2);
    h.push_past_bytes = Some(350 * 113);
    let mut counts = Vec::new();
    let mut folded = Vec::new();
    for round in 0..12 {
        folded.push(h.merge(&batch(round, 100)).fold_bytes_written);
        counts.push(h.tph.as_ref().unwrap().piece_count());
    }
    h.check();
    assert_eq!(counts[..8], [1, 2, 3, 4, 5, 6, 7, 8], "{counts:?}");
    assert!(counts[8..].iter().all(|&c| c == 8), "{counts:?}");
    assert_eq!(folded[..8], [0; 8], "{folded:?}");
    assert!(folded[8..].iter().all(|&f| f > 0), "{folded:?}");
    // Smaller batches: still no more than 4 x 2 pieces, before or after.
    // Before it is due, each merge at the limit folds one piece, as the
    // count needs. Regression: the ninth folded all eight pieces of like
    // size (size tiers, as at the bottom), so that a small-memory server's
    // level-1 TPHs folded 40 pieces at a time, in 34 passes, just before
    // their push-downs rewrote them.
    let mut h = Harness::new(false, 2);
    h.push_past_bytes = Some(350 * 113);
    let mut counts = Vec::new();
    let mut folded = Vec::new();
    for round in 0..20 {
        folded.push(h.merge(&batch(round, 25)).pieces_folded);
        counts.push(h.tph.as_ref().unwrap().piece_count());
    }
    assert!(counts.iter().all(|&c| c <= 8), "{counts:?}");
    assert_eq!(counts[..9], [1, 2, 3, 4, 5, 6, 7, 8, 8], "{counts:?}");
    assert!(folded[8..].iter().all(|&f| f == 1), "{folded:?}");
    h.check();
    // At the bottom (no threshold), the TPH folds to stay at two pieces.
    let mut h = Harness::new(false, 2);
    for round in 0..12 {
        h.merge(&batch(round, 100));
        assert!(h.tph.as_ref().unwrap().piece_count() <= 2);
    }
    h.check();
}

#[test]
fn overwriting_every_key_of_a_piece_drops_it() {
    let mut h = Harness::new(true, 16);
    let a: BTreeMap<_, _> = (0..100).map(|i| (key(i), Some(b"a".to_vec()))).collect();
    let b: BTreeMap<_, _> = (100..200).map(|i| (key(i), Some(b"b".to_vec()))).collect();
    h.merge(&a);
    h.merge(&b);
    let first_piece = h.tph.as_ref().unwrap().piece_numbers()[0];
    let a2: BTreeMap<_, _> = (0..100).map(|i| (key(i), Some(b"c".to_vec()))).collect();
    let s = h.merge(&a2);
    assert_eq!(s.pieces_dropped, 1);
    assert!(!h
        .tph
        .as_ref()
        .unwrap()
        .piece_numbers()
        .contains(&first_piece));
    h.check();
    h.check_files();
}

#[test]
fn bottom_tombstones_disappear_once_nothing_older_remains() {
    let mut h = Harness::new(true, 16);
    let a: BTreeMap<_, _> = (0..50).map(|i| (key(i), Some(b"a".to_vec()))).collect();
    h.merge(&a);
    // Deleting keys that exist keeps tombstones while the old piece lives.
    let del: BTreeMap<_, _> = (0..10).map(|i| (key(i), None)).collect();
    h.merge(&del);
    assert_eq!(h.tph.as_ref().unwrap().live_count(), 50);
    // Deleting keys never written drops the tombstones at once.
    let ghost: BTreeMap<_, _> = (500..510).map(|i| (key(i), None)).collect();
    let s = h.merge(&ghost);
    assert_eq!(s.tombstones_dropped, 10);
    // Deleting everything: the old pieces die and the TPH empties.
    let all: BTreeMap<_, _> = (0..50).map(|i| (key(i), None)).collect();
    h.merge(&all);
    h.check();
    h.check_files();
    assert!(h.tph.is_none(), "{:?}", h.tph);
}

/// A fold writes carried values beside tombstones into one piece; once
/// those values are deleted too, the piece's garbage is its value bytes,
/// not the half of its data that its dead share of entries suggests.
#[test]
fn garbage_counts_the_dead_values_beside_tombstones() {
    let mut h = Harness::new(false, 1);
    let value = vec![b'v'; 1000];
    let values: BTreeMap<_, _> = (0..200).map(|i| (key(i), Some(value.clone()))).collect();
    h.merge(&values);
    let first: BTreeMap<_, _> = (0..100).map(|i| (key(i), None)).collect();
    h.merge(&first);
    let g = h.tph.as_ref().unwrap().garbage();
    assert_eq!((g.live_entries, g.live_tombstones), (200, 100));
    assert_eq!(g.dead_bytes, 0, "{g:?}");
    h.max_pieces = 2;
    let rest: BTreeMap<_, _> = (100..200).map(|i| (key(i), None)).collect();
    h.merge(&rest);
    h.check();
    let tph = h.tph.as_ref().unwrap();
    assert_eq!(tph.piece_count(), 2);
    let g = tph.garbage();
    assert_eq!((g.live_entries, g.live_tombstones), (200, 200));
    assert!(g.dead_bytes >= 100 * 1000, "{g:?}");
    assert!(
        g.dead_bytes + g.live_tombstone_bytes <= g.data_bytes,
        "{g:?}"
    );
    assert!(g.live_tombstone_bytes * 10 < g.data_bytes, "{g:?}");
}

#[test]
fn single_tier_rewrites_everything_into_one_piece() {
    let mut h = Harness::new(true, 1);
    for round in 0..5u32 {
        let ops: BTreeMap<_, _> = (round * 10..round * 10 + 30)
            .map(|i| (key(i), Some(vec![round as u8])))
            .collect();
        h.merge(&ops);
        assert_eq!(h.tph.as_ref().unwrap().piece_count(), 1);
        h.check();
        h.check_files();
    }
}

#[test]
fn a_damaged_head_fails_to_open() {
    let mut h = Harness::new(false, 4);
    let a: BTreeMap<_, _> = (0..100).map(|i| (key(i), Some(b"v".to_vec()))).collect();
    h.merge(&a);
    let head = h.tph.as_ref().unwrap().head_number();
    let path: PathBuf = h.dir.join(piece_file_name(head));
    let good = h.mem.read_file(&path).unwrap();
    let mut failures = 0;
    // Flip one byte in each of many positions of the index sections.
    for i in (good.len() / 2..good.len()).step_by(7) {
        let mut bad = good.clone();
        bad[i] ^= 0x41;
        h.mem.write_file(&path, bad);
        let mut open = HashMap::new();
        if Tph::open(
            &h.fs,
            Path::new("/db"),
            head,
            &ReadMode::Pread.into(),
            &mut open,
        )
        .is_err()
        {
            failures += 1;
        }
    }
    assert!(failures > 0);
    h.mem.write_file(&path, good);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Merges go on into a TPH while a push-down carries its pieces down:
    /// they fold none of them, and a pinned piece leaves only once every
    /// entry of it is replaced. At the push-down's end the carried pieces
    /// leave whole, and what stays is exactly what was merged in meanwhile.
    #[test]
    fn a_push_down_leaves_what_was_merged_in_while_it_ran(
        before in ops_strategy(),
        during in ops_strategy(),
        max_pieces in prop_oneof![Just(1usize), Just(2), Just(4)],
    ) {
        let mut h = Harness::new(false, max_pieces);
        for b in &before {
            h.merge(b);
        }
        let source = h.tph.clone();
        h.pinned = source.as_ref().map_or(Vec::new(), |t| t.piece_numbers());
        let mut newer = Model::new();
        for b in &during {
            h.merge(b);
            newer.extend(b.iter().map(|(k, v)| (k.clone(), v.clone())));
            h.check();
            let (Some(source), Some(now)) = (&source, &h.tph) else {
                continue;
            };
            let kept = now.piece_numbers();
            for p in source.pieces.iter().filter(|p| !kept.contains(&p.number())) {
                for e in p.iter() {
                    let e = e.unwrap();
                    let newest = now
                        .get_counted(&e.key, key_hash(&e.key), &mut Default::default())
                        .unwrap()
                        .unwrap();
                    prop_assert!(newest.seq > e.seq, "piece {} was folded", p.number());
                }
            }
        }
        h.carried_down = std::mem::take(&mut h.pinned);
        h.pinned = h.tph.as_ref().map_or(Vec::new(), |t| t.piece_numbers());
        h.model = newer;
        h.merge(&Model::new());
        h.check();
        if let Some(t) = &h.tph {
            prop_assert_eq!(t.verify(1).unwrap().0, h.model.len() as u64);
            for n in &h.carried_down {
                prop_assert!(!t.piece_numbers().contains(n));
            }
        }
        drop(source);
        h.check_files();
    }
}

mod fold;
mod index_head;
mod passes;
mod share;
mod verify;
