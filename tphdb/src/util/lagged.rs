//! A stream handed on a few items behind: a lookup prefetched as each item
//! arrives is made when the item comes out, so that the cache misses of
//! the lookups in between overlap instead of following one another.

/// Items handed back `LAG` pushes after they came in, in order.
pub(crate) struct Lagged<T, const LAG: usize> {
    ring: [T; LAG],
    pushed: usize,
}

impl<T: Copy + Default, const LAG: usize> Lagged<T, LAG> {
    pub(crate) fn new() -> Lagged<T, LAG> {
        Lagged {
            ring: [T::default(); LAG],
            pushed: 0,
        }
    }

    /// Takes `item`, and hands back the one taken `LAG` pushes before it.
    #[inline]
    pub(crate) fn push(&mut self, item: T) -> Option<T> {
        let slot = &mut self.ring[self.pushed % LAG];
        let out = (self.pushed >= LAG).then_some(*slot);
        *slot = item;
        self.pushed += 1;
        out
    }

    /// The items not handed back yet, oldest first.
    pub(crate) fn rest(self) -> impl Iterator<Item = T> {
        let Lagged { ring, pushed } = self;
        (pushed.saturating_sub(LAG)..pushed).map(move |k| ring[k % LAG])
    }
}

#[cfg(test)]
mod tests {
    use super::Lagged;

    #[test]
    fn hands_every_item_back_once_in_order() {
        for n in [0usize, 1, 3, 4, 5, 17] {
            let mut lagged = Lagged::<usize, 4>::new();
            let mut out: Vec<usize> = (0..n).filter_map(|i| lagged.push(i)).collect();
            assert_eq!(out.len(), n.saturating_sub(4), "{n} pushed");
            out.extend(lagged.rest());
            assert_eq!(out, (0..n).collect::<Vec<_>>());
        }
    }
}
