//! A binary min-heap of source indices for k-way merges, ordered by the
//! sources' heads where they lie: the top is replaced in place by its
//! source's next head instead of popped and pushed, and heads are
//! compared, not cloned into the heap.

/// Orders `heap` as a heap, `before(a, b)` saying whether source `a`'s
/// head goes before source `b`'s.
pub(crate) fn heapify(heap: &mut [usize], before: impl Fn(usize, usize) -> bool) {
    for i in (0..heap.len() / 2).rev() {
        sift_down(heap, i, &before);
    }
}

/// Restores the heap order of `heap` below position `at` (see
/// [`heapify`]).
pub(crate) fn sift_down(heap: &mut [usize], mut at: usize, before: impl Fn(usize, usize) -> bool) {
    loop {
        let (left, right) = (2 * at + 1, 2 * at + 2);
        let mut first = at;
        if left < heap.len() && before(heap[left], heap[first]) {
            first = left;
        }
        if right < heap.len() && before(heap[right], heap[first]) {
            first = right;
        }
        if first == at {
            return;
        }
        heap.swap(at, first);
        at = first;
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Taking the top and replacing it by its source's next head
        /// yields every head in order, as a sort of them all does.
        #[test]
        fn a_merge_through_the_heap_is_a_sort(
            mut sources in prop::collection::vec(prop::collection::vec(0u16..500, 0..20), 0..12)
        ) {
            for s in &mut sources {
                s.sort_unstable();
            }
            let mut want: Vec<u16> = sources.iter().flatten().copied().collect();
            want.sort_unstable();
            let mut next = vec![0usize; sources.len()];
            let head = |i: usize, next: &[usize]| sources[i][next[i]];
            let mut heap: Vec<usize> = (0..sources.len()).filter(|&i| !sources[i].is_empty()).collect();
            heapify(&mut heap, |a, b| head(a, &next) < head(b, &next));
            let mut got = Vec::new();
            while let Some(&top) = heap.first() {
                got.push(head(top, &next));
                next[top] += 1;
                if next[top] == sources[top].len() {
                    heap.swap_remove(0);
                }
                sift_down(&mut heap, 0, |a, b| head(a, &next) < head(b, &next));
            }
            prop_assert_eq!(got, want);
        }
    }
}
