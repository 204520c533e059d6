//! The memtable's skiplist: entries packed into an arena, one writer at a
//! time, any number of lock-free readers (the design of LevelDB's and
//! RocksDB's memtable skiplists).
//!
//! An entry is a single allocation in the arena:
//!
//! ```text
//! next[height-1] .. next[1] | next[0] seq key_len value_len | key | value
//!                             ^ a node pointer points here
//! ```
//!
//! so an entry costs its key and value plus 24 bytes, 8 per level above the
//! first (a third of a level on average) and padding to 8 bytes. Nodes are
//! never moved or freed before the list is dropped, which is what lets
//! readers follow pointers without locks: a node is fully written before the
//! release store that links it in, and readers load links with acquire.

use std::cmp::Ordering;
use std::ptr::{self, NonNull};
use std::sync::atomic::{
    AtomicPtr, AtomicUsize, Ordering::Acquire, Ordering::Relaxed, Ordering::Release,
};

use parking_lot::Mutex;

use super::arena::{Arena, FrozenArena, ALIGN};

/// Tallest node. With a branching factor of 4, twelve levels keep searches
/// logarithmic up to 4^12 = 16M entries, far more than a memtable holds.
/// How many searches of a batch run side by side: enough to keep the
/// core's outstanding cache misses busy, and a bound on the memory they
/// take (a node per level each).
const SEARCHES_AT_ONCE: usize = 32;

/// An entry to insert: key, sequence number and value (`None`: a delete).
pub(crate) type NewEntry<'a> = (&'a [u8], u64, Option<&'a [u8]>);

pub(crate) const MAX_HEIGHT: usize = 12;
const BRANCHING: u32 = 4;

/// `value_len` of a delete.
const TOMBSTONE: u32 = u32::MAX;

/// Bytes of a node from `next[0]` to the key.
const HEADER_BYTES: usize = 8 + 8 + 4 + 4;
const LINK_BYTES: usize = std::mem::size_of::<AtomicPtr<u8>>();

/// What only the one writer touches.
struct Writer {
    arena: Arena,
    rng: fastrand::Rng,
    /// Set by [`SkipList::freeze`]: no entry may be added any more.
    frozen: bool,
    /// Set by [`SkipList::spill`]: the written blocks are file pages.
    spilled: bool,
}

/// A sorted multiset of (key ascending, seq descending) entries, so that the
/// newest version of a key comes first.
pub(crate) struct SkipList {
    /// A node of full height with no key: the list's first links.
    head: *mut u8,
    height: AtomicUsize,
    len: AtomicUsize,
    /// Arena bytes handed out, block tails left behind included.
    memory: AtomicUsize,
    writer: Mutex<Writer>,
}

// SAFETY: the raw pointers point into the arena the list owns; nodes are
// immutable once linked, links are atomics, and the arena is only touched
// under the writer lock. So the list may move between and be shared by
// threads like any `Sync` collection.
unsafe impl Send for SkipList {}
// SAFETY: see `Send`.
unsafe impl Sync for SkipList {}

impl std::fmt::Debug for SkipList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkipList")
            .field("len", &self.len())
            .field("memory_bytes", &self.memory_bytes())
            .finish()
    }
}

/// Where a node sits in a list, kept by cursors between calls: see
/// [`SkipList::entry_at`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Position(NonNull<u8>);

// SAFETY: a position is an address; reading through it is guarded by
// `entry_at`'s contract.
unsafe impl Send for Position {}
// SAFETY: see `Send`.
unsafe impl Sync for Position {}

/// An entry of a list, borrowed from it.
#[derive(Clone, Copy)]
pub(crate) struct Entry<'a> {
    node: NonNull<u8>,
    _list: std::marker::PhantomData<&'a SkipList>,
}

// SAFETY: an entry only reads a linked node, which is never written again
// and lives as long as the list it borrows ('a); the list is `Sync`.
unsafe impl Send for Entry<'_> {}
// SAFETY: see `Send`.
unsafe impl Sync for Entry<'_> {}

impl<'a> Entry<'a> {
    fn new(node: *mut u8) -> Option<Entry<'a>> {
        NonNull::new(node).map(|node| Entry {
            node,
            _list: std::marker::PhantomData,
        })
    }

    fn field<T: Copy>(&self, offset: usize) -> T {
        // SAFETY: header fields are written before the node is linked and
        // never change; offsets are within the header.
        unsafe { ptr::read_unaligned(self.node.as_ptr().add(offset) as *const T) }
    }

    pub(crate) fn seq(&self) -> u64 {
        self.field(LINK_BYTES)
    }

    /// Asks the CPU for the node's header and the start of its key.
    #[inline]
    pub(crate) fn prefetch(&self) {
        crate::util::prefetch(self.node.as_ptr().wrapping_add(LINK_BYTES));
    }

    fn key_len(&self) -> usize {
        self.field::<u32>(LINK_BYTES + 8) as usize
    }

    fn value_len(&self) -> u32 {
        self.field(LINK_BYTES + 12)
    }

    pub(crate) fn key(&self) -> &'a [u8] {
        // SAFETY: the key was copied in after the header before the node
        // was linked; it lives as long as the list ('a).
        unsafe { std::slice::from_raw_parts(self.node.as_ptr().add(HEADER_BYTES), self.key_len()) }
    }

    /// The key, then the value (nothing, for a delete).
    pub(crate) fn key_and_value(&self) -> &'a [u8] {
        let value_len = self.value().map_or(0, <[u8]>::len);
        // SAFETY: as for the key; the value follows it.
        unsafe {
            std::slice::from_raw_parts(
                self.node.as_ptr().add(HEADER_BYTES),
                self.key_len() + value_len,
            )
        }
    }

    /// The value, `None` for a delete.
    pub(crate) fn value(&self) -> Option<&'a [u8]> {
        let len = self.value_len();
        (len != TOMBSTONE).then(|| {
            // SAFETY: as for the key; the value follows it.
            unsafe {
                std::slice::from_raw_parts(
                    self.node.as_ptr().add(HEADER_BYTES + self.key_len()),
                    len as usize,
                )
            }
        })
    }

    pub(crate) fn next(&self) -> Option<Entry<'a>> {
        // SAFETY: a linked node has at least level 0.
        Entry::new(unsafe { link(self.node.as_ptr(), 0) }.load(Acquire))
    }

    pub(crate) fn position(&self) -> Position {
        Position(self.node)
    }

    /// Order of this entry against (key, seq).
    fn cmp_to(&self, key: &[u8], seq: u64) -> Ordering {
        self.key().cmp(key).then(seq.cmp(&self.seq()))
    }
}

/// The link of `node` at `level`.
///
/// # Safety
/// `node` is a node of a live list (or its head) taller than `level`.
unsafe fn link<'a>(node: *mut u8, level: usize) -> &'a AtomicPtr<u8> {
    // SAFETY: levels above 0 sit below `next[0]` in the same allocation.
    unsafe { &*(node.sub(level * LINK_BYTES) as *const AtomicPtr<u8>) }
}

impl SkipList {
    /// An empty list, in blocks backed by huge pages if `huge_pages`.
    pub(crate) fn new(huge_pages: bool) -> SkipList {
        let mut arena = Arena::new(huge_pages);
        let (head, cost) = new_node(&mut arena, MAX_HEIGHT, b"", 0, None);
        SkipList {
            head,
            height: AtomicUsize::new(1),
            len: AtomicUsize::new(0),
            memory: AtomicUsize::new(cost),
            writer: Mutex::new(Writer {
                arena,
                rng: fastrand::Rng::with_seed(0x5eed),
                frozen: false,
                spilled: false,
            }),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len.load(Acquire)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Arena bytes in use: what the entries really cost.
    pub(crate) fn memory_bytes(&self) -> usize {
        self.memory.load(Relaxed)
    }

    /// Adds an entry (`value` `None` for a delete). Writers take turns;
    /// readers are never blocked.
    ///
    /// # Panics
    /// If the list is frozen.
    pub(crate) fn insert(&self, key: &[u8], seq: u64, value: Option<&[u8]>) {
        let mut w = self.writer.lock();
        assert!(!w.frozen, "insert into a frozen memtable");
        let height = random_height(&mut w.rng);
        let mut prev = [self.head; MAX_HEIGHT];
        let top = self.height.load(Relaxed);
        let mut x = self.head;
        for level in (0..top).rev() {
            x = self.last_before(x, level, key, seq).0;
            prev[level] = x;
        }
        let (node, cost) = new_node(&mut w.arena, height, key, seq, value);
        if height > top {
            // Readers that see the old height start lower: still correct.
            self.height.store(height, Relaxed);
        }
        for (level, p) in prev.iter().enumerate().take(height) {
            // SAFETY: `p` is the head or a linked node taller than `level`
            // (it was reached at `level`); `node` has `height` levels.
            unsafe {
                let next = link(*p, level).load(Relaxed);
                link(node, level).store(next, Relaxed);
                link(*p, level).store(node, Release);
            }
        }
        self.memory.fetch_add(cost, Relaxed);
        self.len.fetch_add(1, Release);
    }

    /// Adds a batch of entries under one turn of the writer lock. Their
    /// searches run side by side, a step of each in turn, with the node each
    /// steps to next prefetched first, so that their cache misses overlap;
    /// then each is linked in, walking right from where its search ended
    /// past entries of the batch linked before it.
    ///
    /// # Panics
    /// If the list is frozen.
    pub(crate) fn insert_all(&self, entries: &[NewEntry<'_>]) {
        let mut w = self.writer.lock();
        assert!(!w.frozen, "insert into a frozen memtable");
        for chunk in entries.chunks(SEARCHES_AT_ONCE) {
            self.insert_chunk(&mut w, chunk);
        }
    }

    /// [`SkipList::insert_all`] for at most [`SEARCHES_AT_ONCE`] entries.
    fn insert_chunk(&self, w: &mut Writer, entries: &[NewEntry<'_>]) {
        let top = self.height.load(Relaxed);
        // found[i * MAX_HEIGHT + level]: the last node before entry i at
        // `level`, in the list as it was.
        let mut found = vec![self.head; entries.len() * MAX_HEIGHT];
        let mut at = vec![self.head; entries.len()];
        let mut searching: Vec<usize> = Vec::with_capacity(entries.len());
        for level in (0..top).rev() {
            searching.clear();
            searching.extend(0..entries.len());
            while !searching.is_empty() {
                for &i in &searching {
                    // SAFETY: `at[i]` is the head or a node reached at `level`.
                    prefetch(unsafe { link(at[i], level) }.load(Acquire));
                }
                searching.retain(|&i| {
                    let (key, seq, _) = entries[i];
                    // SAFETY: as above.
                    let next = unsafe { link(at[i], level) }.load(Acquire);
                    match Entry::new(next) {
                        Some(e) if e.cmp_to(key, seq) == Ordering::Less => {
                            at[i] = next;
                            true
                        }
                        _ => {
                            found[i * MAX_HEIGHT + level] = at[i];
                            false
                        }
                    }
                });
            }
        }
        let mut cost_sum = 0;
        for (i, &(key, seq, value)) in entries.iter().enumerate() {
            let height = random_height(&mut w.rng);
            let (node, cost) = new_node(&mut w.arena, height, key, seq, value);
            if height > self.height.load(Relaxed) {
                self.height.store(height, Relaxed);
            }
            for level in 0..height {
                // Nodes linked since the search (this batch's) may lie
                // between where it ended and the entry; above the old
                // height the search never ran, and starts at the head.
                let (p, _) = self.last_before(found[i * MAX_HEIGHT + level], level, key, seq);
                // SAFETY: as in `insert`: `p` is the head or a linked node
                // taller than `level`; `node` has `height` levels.
                unsafe {
                    let next = link(p, level).load(Relaxed);
                    link(node, level).store(next, Relaxed);
                    link(p, level).store(node, Release);
                }
            }
            cost_sum += cost;
            self.len.fetch_add(1, Release);
        }
        self.memory.fetch_add(cost_sum, Relaxed);
    }

    /// From `x` (ordered before (key, seq)), the last node at `level`
    /// ordered before (key, seq), and the node its link pointed to when
    /// read: the first at or after (key, seq), or null. Read again, the
    /// link may point to a node linked since, ordered before (key, seq) as
    /// well.
    fn last_before(
        &self,
        mut x: *mut u8,
        level: usize,
        key: &[u8],
        seq: u64,
    ) -> (*mut u8, *mut u8) {
        loop {
            // SAFETY: `x` is the head or a node reached at `level`.
            let next = unsafe { link(x, level) }.load(Acquire);
            match Entry::new(next) {
                Some(e) if e.cmp_to(key, seq) == Ordering::Less => x = next,
                _ => return (x, next),
            }
        }
    }

    /// The last node ordered before (key, seq), or the head, and the first
    /// at or after it (see [`SkipList::last_before`]).
    fn find_less(&self, key: &[u8], seq: u64) -> (*mut u8, *mut u8) {
        let mut x = self.head;
        for level in (1..self.height.load(Relaxed)).rev() {
            x = self.last_before(x, level, key, seq).0;
        }
        self.last_before(x, 0, key, seq)
    }

    /// The first entry at or after (key, seq).
    pub(crate) fn seek(&self, key: &[u8], seq: u64) -> Option<Entry<'_>> {
        // The successor `find_less` saw, not the link read again: a node
        // linked in between would be ordered before (key, seq).
        Entry::new(self.find_less(key, seq).1)
    }

    /// The first entry whose key is above `key`.
    pub(crate) fn seek_after(&self, key: &[u8]) -> Option<Entry<'_>> {
        // (key, 0) is the last position `key` can have.
        let mut e = self.seek(key, 0);
        while let Some(x) = e.filter(|x| x.key() == key) {
            e = x.next();
        }
        e
    }

    /// The last entry whose key is below `key`.
    pub(crate) fn last_below(&self, key: &[u8]) -> Option<Entry<'_>> {
        self.entry_unless_head(self.find_less(key, u64::MAX).0)
    }

    /// The last entry.
    pub(crate) fn last(&self) -> Option<Entry<'_>> {
        let mut x = self.head;
        for level in (0..self.height.load(Relaxed)).rev() {
            loop {
                // SAFETY: `x` is the head or a node reached at `level`.
                let next = unsafe { link(x, level) }.load(Acquire);
                if next.is_null() {
                    break;
                }
                x = next;
            }
        }
        self.entry_unless_head(x)
    }

    /// The first entry.
    pub(crate) fn first(&self) -> Option<Entry<'_>> {
        // SAFETY: the head has every level.
        Entry::new(unsafe { link(self.head, 0) }.load(Acquire))
    }

    fn entry_unless_head(&self, x: *mut u8) -> Option<Entry<'_>> {
        if x == self.head {
            None
        } else {
            Entry::new(x)
        }
    }

    /// Ends insertion for good and shares the arena: what a flush takes its
    /// keys and values from.
    pub(crate) fn freeze(&self) -> FrozenArena {
        let mut w = self.writer.lock();
        w.frozen = true;
        w.arena.release_tail();
        w.arena.share()
    }

    /// Moves the frozen list's memory into `file`: each written block is
    /// copied there and the copy mapped over the block, at the same address.
    /// Every pointer into the list (readers', and [`Bytes`](bytes::Bytes) handed out)
    /// stays valid and sees the same bytes, but the pages are now clean file
    /// pages the kernel may drop and read back, not memory the process
    /// holds. Returns the bytes moved (0 if they were already).
    ///
    /// # Panics
    /// If the list is not frozen.
    #[cfg(all(target_os = "linux", not(miri)))]
    pub(crate) fn spill(&self, file: &std::fs::File) -> std::io::Result<u64> {
        let mut w = self.writer.lock();
        assert!(w.frozen, "spill of a memtable still written");
        if w.spilled {
            return Ok(0);
        }
        // SAFETY: a frozen list's memory is never written again.
        let moved = unsafe { w.arena.spill(file)? };
        w.spilled = true;
        Ok(moved)
    }

    /// Without mappings to swap, memory stays where it is.
    #[cfg(not(all(target_os = "linux", not(miri))))]
    pub(crate) fn spill(&self, _file: &std::fs::File) -> std::io::Result<u64> {
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }

    /// Whether [`SkipList::spill`] moved the list to a file.
    pub(crate) fn is_spilled(&self) -> bool {
        self.writer.lock().spilled
    }

    /// The entry at a position taken from an entry of this list.
    ///
    /// # Safety
    /// `pos` came from [`Entry::position`] on an entry of `self`.
    pub(crate) unsafe fn entry_at(&self, pos: Position) -> Entry<'_> {
        Entry {
            node: pos.0,
            _list: std::marker::PhantomData,
        }
    }
}

/// Asks for the cache line of `node`'s header (where a search reads its
/// link and key) without waiting for it.
#[inline]
fn prefetch(node: *mut u8) {
    // Not under Miri, which does not model the intrinsic; a prefetch
    // changes no result.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch is a hint; it reads nothing and faults on no
    // address, null included.
    unsafe {
        std::arch::x86_64::_mm_prefetch(node as *const i8, std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = node;
}

/// A height with P(h) = (1/4)^(h-1) * 3/4, capped at [`MAX_HEIGHT`].
fn random_height(rng: &mut fastrand::Rng) -> usize {
    let mut height = 1;
    while height < MAX_HEIGHT && rng.u32(..BRANCHING) == 0 {
        height += 1;
    }
    height
}

/// Allocates and fills a node with null links; returns it and its cost.
fn new_node(
    arena: &mut Arena,
    height: usize,
    key: &[u8],
    seq: u64,
    value: Option<&[u8]>,
) -> (*mut u8, usize) {
    let key_len = u32::try_from(key.len()).expect("keys are limited to 1 MiB");
    let value_len = match value {
        Some(v) => {
            let len = u32::try_from(v.len()).expect("values are limited to 1 GiB");
            assert!(len != TOMBSTONE);
            len
        }
        None => TOMBSTONE,
    };
    let links = (height - 1) * LINK_BYTES;
    let bytes = links + HEADER_BYTES + key.len() + value.map_or(0, <[u8]>::len);
    let padded = bytes.next_multiple_of(ALIGN);
    let (p, cost) = arena.alloc(padded);
    // SAFETY: `p` has `bytes` writable bytes, 8-aligned; `links` is a
    // multiple of 8, so every link is aligned.
    unsafe {
        let node = p.add(links);
        for level in 0..height {
            (node.sub(level * LINK_BYTES) as *mut AtomicPtr<u8>)
                .write(AtomicPtr::new(ptr::null_mut()));
        }
        let mut q = node.add(LINK_BYTES);
        ptr::write_unaligned(q as *mut u64, seq);
        q = q.add(8);
        ptr::write_unaligned(q as *mut u32, key_len);
        q = q.add(4);
        ptr::write_unaligned(q as *mut u32, value_len);
        q = q.add(4);
        ptr::copy_nonoverlapping(key.as_ptr(), q, key.len());
        if let Some(v) = value {
            ptr::copy_nonoverlapping(v.as_ptr(), q.add(key.len()), v.len());
        }
        // A frozen arena is shared as initialized bytes.
        ptr::write_bytes(p.add(bytes), 0, padded - bytes);
        (node, cost)
    }
}

#[cfg(test)]
mod tests;
mod walk;
