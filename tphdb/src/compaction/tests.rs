//! The picker's choices on hand-made shapes.

use std::collections::BTreeMap;

use super::shape::TphSize;
use super::*;
use crate::tph::Garbage;

fn policy() -> Policy {
    Policy {
        one_level: false,
        l0_compaction_trigger: 4,
        tph_target_bytes: 100,
        max_levels: 4,
        l0_slowdown_trigger: 8,
        job_input_bytes: 1000,
        background_threads: 2,
        gc_dead_ratio: 0.5,
        max_garbage_ratio: 1.0,
    }
}

fn tph(head: u64, live_data_bytes: u64) -> TphSize {
    TphSize {
        head,
        live_data_bytes,
        merge_bytes: live_data_bytes * 2,
        garbage: Garbage {
            data_bytes: live_data_bytes,
            live_entries: live_data_bytes / 10,
            ..Garbage::default()
        },
    }
}

/// Fanout 2, depth 2: `l0` TPHs of 10 bytes, and level 1 as given.
fn shape(l0: usize, level1: &[(u64, u64)]) -> Shape {
    Shape {
        fanout: 2,
        depth: 2,
        l0: (0..l0 as u64).rev().map(|h| tph(100 + h, 10)).collect(),
        levels: vec![
            level1.iter().map(|&(p, b)| (p, tph(p + 1, b))).collect(),
            BTreeMap::new(),
        ],
    }
}

#[test]
fn flushes_come_first_and_one_at_a_time() {
    let s = shape(5, &[]);
    let mut running = Running::default();
    assert_eq!(pick(&s, 1, &running, &policy()), Some(Work::Flush));
    running.start(&Work::Flush, &s, &policy());
    assert!(matches!(
        pick(&s, 1, &running, &policy()),
        Some(Work::L0ToL1(_))
    ));
    running.finish(&Work::Flush, 2, &policy());
    assert_eq!(running, Running::default());
}

#[test]
fn level0_compacts_its_oldest_tphs_within_the_memory_bound() {
    let s = shape(5, &[]);
    let p = policy();
    // Oldest first: heads 100, 101, ... (each merge 20 bytes).
    assert_eq!(
        pick(&s, 0, &Running::default(), &p),
        Some(Work::L0ToL1(vec![100, 101, 102, 103, 104]))
    );
    // Two passes (fanout 2) of 23 bytes hold two merges of 20.
    let tight = Policy {
        job_input_bytes: 23,
        ..p
    };
    assert_eq!(
        pick(&s, 0, &Running::default(), &tight),
        Some(Work::L0ToL1(vec![100, 101]))
    );
    // At least one, however large.
    let tiny = Policy {
        job_input_bytes: 1,
        ..p
    };
    assert_eq!(
        pick(&s, 0, &Running::default(), &tiny),
        Some(Work::L0ToL1(vec![100]))
    );
    assert_eq!(pick(&shape(3, &[]), 0, &Running::default(), &p), None);
}

#[test]
fn push_downs_wait_for_what_owns_their_tphs() {
    let p = policy();
    let s = shape(0, &[(0, 500), (1, 50)]);
    let id = TphId {
        level: 1,
        partition: 0,
    };
    assert_eq!(
        pick(&s, 0, &Running::default(), &p),
        Some(Work::PushDown(id))
    );
    let mut running = Running::default();
    running.start(&Work::PushDown(id), &s, &p);
    assert_eq!(running.tphs.len(), 2, "its two children");
    assert!(running.pushing.contains(&id));
    assert_eq!(pick(&s, 0, &running, &p), None);
    // A level-0 compaction merges into level 1 while the push-down runs
    // (keeping the pieces it carries)...
    let with_l0 = shape(8, &[(0, 150)]);
    let l0 = pick(&with_l0, 0, &running, &p).unwrap();
    assert!(matches!(l0, Work::L0ToL1(_)));
    running.start(&l0, &with_l0, &p);
    // ...and the push-down, done with its children, waits for it to end
    // before it takes its TPH back.
    assert!(!running.take_source(id));
    running.finish(&l0, 2, &p);
    assert!(running.take_source(id));
    assert!(running.level1_busy());
    assert_eq!(pick(&with_l0, 0, &running, &p), None);
    running.finish(&Work::PushDown(id), 2, &p);
    assert_eq!(running.tphs.len(), 0);
    // A push-down out of level 1 does not start while level 0 merges in.
    running.start(&l0, &with_l0, &p);
    assert_eq!(pick(&shape(0, &[(0, 500)]), 0, &running, &p), None);
}

#[test]
fn level0_and_push_downs_out_of_level1_take_turns() {
    let p = policy();
    let s = shape(4, &[(0, 150), (1, 120), (2, 90)]);
    let pushed = |partition| {
        Some(Work::PushDown(TphId {
            level: 1,
            partition,
        }))
    };
    // Two push-downs (one per thread), the largest first, then level 0.
    let mut running = Running::default();
    assert_eq!(pick(&s, 0, &running, &p), pushed(0));
    running.start(&pushed(0).unwrap(), &s, &p);
    let s = shape(4, &[(1, 120), (2, 90)]);
    assert_eq!(pick(&s, 0, &running, &p), pushed(1));
    running.start(&pushed(1).unwrap(), &s, &p);
    running.finish(&pushed(0).unwrap(), 2, &p);
    running.finish(&pushed(1).unwrap(), 2, &p);
    let s = shape(4, &[(0, 110), (2, 90)]);
    let l0 = pick(&s, 0, &running, &p).unwrap();
    assert!(matches!(l0, Work::L0ToL1(_)));
    running.start(&l0, &s, &p);
    running.finish(&l0, 2, &p);
    assert_eq!(pick(&s, 0, &running, &p), pushed(0));
    // While one push-down runs, another starts only in its turn: with two
    // started since the last level-0 compaction, level 0 goes next,
    // beside the push-down still running.
    let mut two = Running::default();
    for partition in [0, 1] {
        two.start(
            &pushed(partition).unwrap(),
            &shape(4, &[(0, 150), (1, 120)]),
            &p,
        );
    }
    two.finish(&pushed(0).unwrap(), 2, &p);
    assert!(matches!(
        pick(&shape(4, &[(0, 150)]), 0, &two, &p),
        Some(Work::L0ToL1(_))
    ));
    // From the slowdown trigger on, one push-down goes before each
    // level-0 compaction (none went, and a level 0 that stayed past the
    // trigger for a whole load never let level 1 be pushed down).
    let backlog = shape(8, &[(0, 150), (1, 120)]);
    let mut one = Running::default();
    assert_eq!(pick(&backlog, 0, &one, &p), pushed(0));
    one.start(&pushed(0).unwrap(), &backlog, &p);
    assert!(matches!(
        pick(&shape(8, &[(1, 120)]), 0, &one, &p),
        Some(Work::L0ToL1(_))
    ));
    // Without level 0 due, push-downs run whatever the count.
    running.level1_pushes_since_merge = 5;
    assert_eq!(pick(&shape(3, &[(0, 150)]), 0, &running, &p), pushed(0));
}

#[test]
fn siblings_come_due_between_half_and_all_of_the_target() {
    let t: Vec<u64> = (0..8).map(|p| push_down_threshold(256, 8, p)).collect();
    assert_eq!(t, [144, 160, 176, 192, 208, 224, 240, 256]);
    // By place among siblings, at every level.
    assert_eq!(push_down_threshold(256, 8, 8), t[0]);
    assert_eq!(push_down_threshold(256, 8, 63), t[7]);
    // With fanout 2 (the tests' shapes): 75 and 100.
    assert_eq!(push_down_threshold(100, 2, 0), 75);
    assert_eq!(push_down_threshold(100, 2, 1), 100);
}

#[test]
fn one_level_writes_slow_once_a_memtable_waits_or_more_is_due_than_a_turn_takes() {
    assert_eq!(one_level_backlog(0, 0, 2), None);
    assert_eq!(one_level_backlog(0, 2, 2), None);
    assert_eq!(one_level_backlog(0, 3, 2), Some(3));
    assert_eq!(one_level_backlog(1, 0, 2), Some(1));
    assert_eq!(one_level_backlog(1, 2, 2), Some(3));
}

#[test]
fn a_one_level_flush_owns_level1() {
    let p = Policy {
        one_level: true,
        ..policy()
    };
    let s = Shape {
        depth: 1,
        ..shape(0, &[(0, 500)])
    };
    let mut running = Running::default();
    running.start(&Work::Flush, &s, &p);
    assert!(running.level1_busy());
    running.finish(&Work::Flush, 2, &p);
    assert_eq!(running, Running::default());
    // Level 1 is the bottom: nothing to push down.
    assert_eq!(pick(&s, 0, &running, &p), None);
}

#[test]
fn one_level_flushes_and_push_downs_out_of_level1_take_turns() {
    let p = Policy {
        one_level: true,
        background_threads: 1,
        ..policy()
    };
    // Level 1 over a bottom level, both of its TPHs past their target.
    let s = shape(0, &[(0, 500), (1, 500)]);
    let mut running = Running::default();
    let first = pick(&s, 0, &running, &p).unwrap();
    assert!(matches!(first, Work::PushDown(TphId { level: 1, .. })));
    running.start(&first, &s, &p);
    // Its one thread busy, the pool starts nothing more; a waiting
    // memtable flushes beside it, on a thread of its own.
    assert_eq!(pick(&s, 0, &running, &p), None);
    assert_eq!(pick(&s, 1, &running, &p), Some(Work::Flush));
    running.start(&Work::Flush, &s, &p);
    assert_eq!(pick(&s, 1, &running, &p), None);
    // The first push-down's end waits for the flush, without its thread.
    let Work::PushDown(id) = first else {
        unreachable!()
    };
    assert!(!running.take_source(id));
    running.park(id);
    assert!(running.thread_free(&p));
    assert!(!running.resume(id, &p));
    running.finish(&Work::Flush, 2, &p);
    assert!(running.resume(id, &p));
    assert!(!running.thread_free(&p));
    // While it ends, no flush starts; after the flush, a push-down has
    // its turn again, though another memtable waits: starving them let
    // level 1 grow with the database.
    assert_eq!(pick(&s, 1, &running, &p), None);
    running.finish(&first, 2, &p);
    let second = pick(&s, 1, &running, &p).unwrap();
    assert!(matches!(second, Work::PushDown(TphId { level: 1, .. })));
    running.start(&second, &s, &p);
    assert_eq!(pick(&s, 1, &running, &p), Some(Work::Flush));
    running.start(&Work::Flush, &s, &p);
    running.finish(&second, 2, &p);
    running.finish(&Work::Flush, 2, &p);
    assert_eq!(running, Running::default());
}

/// A level-1 push-down whose turn it is but that has no thread to start
/// on does not hold a one-level flush back. It did: the picker chose the
/// push-down, the caller had no thread for it, and memtables waited 0.7 s
/// for one (a 16M-key fill's slowest second fell to 0.15 of the median).
#[test]
fn a_push_down_with_no_thread_does_not_hold_a_flush_back() {
    let p = Policy {
        one_level: true,
        ..policy()
    };
    let s = Shape {
        fanout: 4,
        ..shape(0, &[(0, 500), (1, 500), (2, 500)])
    };
    let mut running = Running::default();
    let push = |running: &Running| match pick(&s, 0, running, &p) {
        Some(w @ Work::PushDown(TphId { level: 1, .. })) => w,
        other => panic!("not a level-1 push-down: {other:?}"),
    };
    let a = push(&running);
    running.start(&a, &s, &p);
    running.start(&Work::Flush, &s, &p);
    running.finish(&Work::Flush, 4, &p);
    let b = push(&running);
    running.start(&b, &s, &p);
    // Both threads push; the turn is a push-down's, but it has no thread.
    assert!(!running.thread_free(&p));
    assert_eq!(pick(&s, 1, &running, &p), Some(Work::Flush));
    // With a thread free, the push-down goes first, as its turn says.
    running.finish(&b, 4, &p);
    assert!(matches!(
        pick(&s, 1, &running, &p),
        Some(Work::PushDown(TphId { level: 1, .. }))
    ));
}

/// `tph(head, live)` with `dead` more bytes of replaced entries and
/// `tombstones` of its live keys (of `live / 10`) tombstones.
fn with_garbage(head: u64, live: u64, dead: u64, tombstones: u64) -> TphSize {
    let mut t = tph(head, live);
    t.garbage.data_bytes += dead;
    t.garbage.dead_bytes = dead;
    t.garbage.live_tombstones = tombstones;
    t.garbage.live_tombstone_bytes = tombstones;
    t
}

#[test]
fn garbage_is_collected_once_nothing_else_is_due() {
    let p = policy();
    let mut s = shape(0, &[(0, 50)]);
    // Level 2 (the bottom): 60 of 100 bytes dead.
    s.levels[1].insert(1, with_garbage(7, 40, 60, 0));
    let gc = Some(Work::Gc(TphId {
        level: 2,
        partition: 1,
    }));
    assert_eq!(pick(&s, 0, &Running::default(), &p), gc);
    // Below the ratio: nothing to do.
    s.levels[1].insert(1, with_garbage(7, 60, 40, 0));
    assert_eq!(pick(&s, 0, &Running::default(), &p), None);
    // At the bottom, live tombstones are garbage too.
    s.levels[1].insert(1, with_garbage(7, 60, 40, 20));
    assert_eq!(pick(&s, 0, &Running::default(), &p), gc);

    // A waiting flush, a level 0 that is due and a push-down go first.
    assert_eq!(pick(&s, 1, &Running::default(), &p), Some(Work::Flush));
    let mut running = Running::default();
    running.start(&Work::Flush, &s, &p);
    assert_eq!(pick(&s, 1, &running, &p), gc, "the flush runs");
    let mut due = s.clone();
    due.l0 = shape(4, &[]).l0;
    assert!(matches!(
        pick(&due, 0, &Running::default(), &p),
        Some(Work::L0ToL1(_))
    ));
    running.all_of_level1 = true;
    assert_eq!(pick(&due, 0, &running, &p), None, "level 0 waits");
    s.levels[0].insert(0, tph(1, 150));
    assert!(matches!(
        pick(&s, 0, &Running::default(), &p),
        Some(Work::PushDown(TphId { level: 1, .. }))
    ));

    // One fold at a time, and never of a TPH a job owns.
    s.levels[0].insert(0, tph(1, 50));
    let mut running = Running::default();
    let work = pick(&s, 0, &running, &p).unwrap();
    running.start(&work, &s, &p);
    s.levels[1].insert(0, with_garbage(8, 10, 90, 0));
    assert_eq!(pick(&s, 0, &running, &p), None);
    running.finish(&work, 2, &p);
    assert_eq!(running, Running::default());
    running.start(
        &Work::PushDown(TphId {
            level: 1,
            partition: 0,
        }),
        &s,
        &p,
    );
    assert_eq!(pick(&s, 0, &running, &p), None, "both are children");
    // The most garbage goes first.
    assert_eq!(
        pick(&s, 0, &Running::default(), &p),
        Some(Work::Gc(TphId {
            level: 2,
            partition: 0
        }))
    );
    // Off at a ratio of one.
    let off = Policy {
        gc_dead_ratio: 1.0,
        ..p
    };
    assert_eq!(pick(&s, 0, &Running::default(), &off), None);
}

#[test]
fn the_whole_database_holds_at_most_max_garbage_ratio() {
    let p = Policy {
        max_garbage_ratio: 0.2,
        ..policy()
    };
    // Two bottom TPHs below `gc_dead_ratio`: 30 and 40 of 100 bytes.
    let mut s = shape(0, &[(0, 50), (1, 50)]);
    s.levels[1].insert(0, with_garbage(7, 70, 30, 0));
    s.levels[1].insert(1, with_garbage(8, 60, 40, 0));
    // 70 of 300 bytes: past 0.2, the larger share goes first.
    let second = Some(Work::Gc(TphId {
        level: 2,
        partition: 1,
    }));
    assert_eq!(pick(&s, 0, &Running::default(), &p), second);
    // Off at a ratio of one: each TPH is below its own threshold.
    let off = Policy {
        max_garbage_ratio: 1.0,
        ..p
    };
    assert_eq!(pick(&s, 0, &Running::default(), &off), None);
    // Once it is folded, 30 of 260 bytes are garbage: under the bound.
    s.levels[1].insert(1, with_garbage(9, 60, 0, 0));
    assert_eq!(pick(&s, 0, &Running::default(), &p), None);
    // Level 1 counts towards the whole, with its own garbage.
    s.levels[0].insert(0, with_garbage(1, 40, 5, 1));
    s.levels[1].insert(1, with_garbage(9, 60, 40, 0));
    assert_eq!(pick(&s, 0, &Running::default(), &p), second);
    // The bound never starts a fold ahead of other work.
    assert_eq!(pick(&s, 1, &Running::default(), &p), Some(Work::Flush));
}

#[test]
fn a_tph_hiding_versions_below_goes_down_past_max_garbage_ratio() {
    let p = Policy {
        max_garbage_ratio: 0.2,
        ..policy()
    };
    // Level 1's TPH 0 hides 40 bytes of the 100 at the bottom; the bottom
    // holds 10 dead bytes of its own.
    let mut s = shape(0, &[(0, 50), (1, 20)]);
    s.levels[0].get_mut(&0).unwrap().garbage.shadowed_bytes = 40;
    s.levels[1].insert(0, with_garbage(7, 90, 10, 0));
    // 50 of 170 bytes: past 0.2; its share (0.8) beats the fold's (0.1).
    let push = Some(Work::PushDown(TphId {
        level: 1,
        partition: 0,
    }));
    assert_eq!(pick(&s, 0, &Running::default(), &p), push);
    // Under the bound, hidden versions alone start nothing, however large
    // a share of the TPH they are.
    let off = Policy {
        max_garbage_ratio: 0.3,
        ..p
    };
    assert_eq!(pick(&s, 0, &Running::default(), &off), None);
    // At the bottom nothing lies below to hide.
    s.levels[0].get_mut(&0).unwrap().garbage.shadowed_bytes = 0;
    s.levels[1].get_mut(&0).unwrap().garbage.shadowed_bytes = 40;
    assert_eq!(pick(&s, 0, &Running::default(), &p), None);
}

#[test]
fn tombstones_go_down_early_to_meet_what_they_delete() {
    let p = policy();
    // Above the bottom, tombstones hide what lies below: not garbage.
    let mut s = shape(0, &[(0, 50)]);
    s.levels[0].insert(0, with_garbage(1, 50, 0, 2));
    assert_eq!(pick(&s, 0, &Running::default(), &p), None);
    // Mostly tombstones (of 5 live keys): pushed down.
    s.levels[0].insert(0, with_garbage(1, 50, 0, 3));
    let push = Some(Work::PushDown(TphId {
        level: 1,
        partition: 0,
    }));
    assert_eq!(pick(&s, 0, &Running::default(), &p), push);
    // A level 0 of mostly tombstones compacts below its trigger, first.
    s.l0 = vec![tph(101, 10), tph(100, 10)];
    assert_eq!(pick(&s, 0, &Running::default(), &p), push);
    s.l0[0] = with_garbage(101, 10, 0, 1);
    assert_eq!(
        pick(&s, 0, &Running::default(), &p),
        Some(Work::L0ToL1(vec![100, 101]))
    );
}

#[test]
fn push_downs_below_level1_leave_a_thread_to_the_levels_above() {
    let p = policy();
    // Depth 3: the old bottom (level 2) all due, far past its thresholds,
    // and one level-1 TPH just past its own.
    let mut s = shape(0, &[(0, 110)]);
    s.depth = 3;
    s.levels[1] = (0..4).map(|i| (i, tph(10 + i, 300))).collect();
    s.levels.push(BTreeMap::new());
    let at = |level, partition| TphId { level, partition };
    let mut running = Running::default();
    let first = pick(&s, 0, &running, &p).unwrap();
    assert!(matches!(first, Work::PushDown(id) if id.level == 2));
    running.start(&first, &s, &p);
    // The other thread goes to level 1, not to a second level-2 TPH...
    let second = pick(&s, 0, &running, &p);
    assert_eq!(second, Some(Work::PushDown(at(1, 0))));
    // ...but with nothing due above level 2 (a flush, level 0, level 1),
    // it may push level 2 too...
    let mut calm = s.clone();
    calm.levels[0] = BTreeMap::new();
    assert!(matches!(
        pick(&calm, 0, &running, &p),
        Some(Work::PushDown(id)) if id.level == 2
    ));
    // ...but not while a memtable waits.
    assert_eq!(pick(&calm, 1, &running, &p), Some(Work::Flush));
    let mut flushing = running.clone();
    flushing.start(&Work::Flush, &s, &p);
    assert_eq!(pick(&calm, 1, &flushing, &p), None);
    // The other thread goes to level 0 past the slowdown trigger, once
    // level 1 has had its one turn.
    let mut with_l0 = s.clone();
    with_l0.l0 = shape(8, &[]).l0;
    let mut level1_had_its_turn = running.clone();
    level1_had_its_turn.level1_pushes_since_merge = 1;
    assert!(matches!(
        pick(&with_l0, 0, &level1_had_its_turn, &p),
        Some(Work::L0ToL1(_))
    ));
    // With three threads, two may go below level 1.
    let three = Policy {
        background_threads: 3,
        ..p
    };
    assert!(matches!(
        pick(&s, 0, &running, &three),
        Some(Work::PushDown(id)) if id.level == 2
    ));
    running.finish(&first, 2, &p);
    assert!(matches!(
        pick(&s, 0, &running, &p),
        Some(Work::PushDown(id)) if id.level == 2
    ));
}

#[test]
fn the_bottom_deepens_once_its_tphs_average_past_the_target_or_one_level_has_one_due() {
    let p = policy();
    // Depth 2 over fanout 2: 4 bottom partitions of target 100, so
    // deepening starts past 4 * 100 bytes, however they are spread.
    let mut s = shape(0, &[]);
    s.levels[1] = (0..4).map(|i| (i, tph(i, 100))).collect();
    assert!(!should_deepen(&s, &p));
    s.levels[1].insert(0, tph(0, 20));
    s.levels[1].insert(3, tph(3, 181));
    assert!(should_deepen(&s, &p));
    assert!(should_deepen(&s, &p));
    assert!(!should_deepen(&s, &Policy { max_levels: 2, ..p }));
    // One-level mode: level 1 and one level below it, no more.
    let one_level = Policy {
        one_level: true,
        ..p
    };
    assert!(!should_deepen(&s, &one_level));
    // It deepens as soon as one TPH passes its push-down threshold (75
    // and 100 bytes), before the average reaches the target.
    let mut s1 = shape(0, &[(0, 70), (1, 90)]);
    s1.depth = 1;
    assert!(!should_deepen(&s1, &one_level));
    s1.levels[0].insert(0, tph(0, 76));
    s1.levels[0].insert(1, tph(1, 10));
    assert!(should_deepen(&s1, &one_level));
    assert!(!should_deepen(&s1, &p));
    assert!(!should_deepen(
        &s1,
        &Policy {
            max_levels: 1,
            ..one_level
        }
    ));
}
