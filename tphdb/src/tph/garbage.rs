//! What a TPH holds besides live values, estimated from its pieces'
//! properties and live counts: the bytes a GC fold, or a push-down and a
//! fold below, may free.

/// What a TPH holds besides live values: the bytes a GC fold may free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Garbage {
    /// Data bytes of every stored entry, live or not.
    pub(crate) data_bytes: u64,
    /// Data bytes of entries a newer one replaced.
    pub(crate) dead_bytes: u64,
    /// Live keys, tombstones included.
    pub(crate) live_entries: u64,
    /// Live keys whose newest version is a tombstone. Above the bottom they
    /// hide older versions below; at the bottom they only hide the dead
    /// entries of older pieces of the TPH, and a fold of every piece
    /// drops them.
    pub(crate) live_tombstones: u64,
    /// Data bytes of the live tombstones.
    pub(crate) live_tombstone_bytes: u64,
    /// Data bytes, estimated, of the versions in lower levels that live
    /// entries hide (see [`super::meta::MetaPiece::shadowed`]): garbage that only a
    /// push-down (and then a fold below) frees.
    pub(crate) shadowed_bytes: u64,
}

impl Garbage {
    pub(super) fn add(&mut self, o: &Garbage) {
        self.data_bytes += o.data_bytes;
        self.dead_bytes += o.dead_bytes;
        self.live_entries += o.live_entries;
        self.live_tombstones += o.live_tombstones;
        self.live_tombstone_bytes += o.live_tombstone_bytes;
        self.shadowed_bytes += o.shadowed_bytes;
    }

    /// Whether some entry was replaced.
    pub(crate) fn has_dead(&self, stored_entries: u64) -> bool {
        self.live_entries < stored_entries
    }

    /// Bytes a fold of every piece frees: dead entries, and at the bottom
    /// (`bottom`) also live tombstones, which hide nothing below.
    pub(crate) fn foldable_bytes(&self, bottom: bool) -> u64 {
        self.dead_bytes + if bottom { self.live_tombstone_bytes } else { 0 }
    }

    /// Bytes of the versions below that live entries hide, which a
    /// push-down and then a fold below free: none at the bottom.
    pub(crate) fn hidden_bytes(&self, bottom: bool) -> u64 {
        if bottom {
            0
        } else {
            self.shadowed_bytes
        }
    }

    /// Bytes that count towards `Options::max_garbage_ratio`: what a fold
    /// frees and what a push-down then frees below.
    pub(crate) fn collectable_bytes(&self, bottom: bool) -> u64 {
        self.foldable_bytes(bottom) + self.hidden_bytes(bottom)
    }
}

/// The garbage of a piece with `live` live entries, estimated from its
/// properties: which entries are live is not recorded, only how many.
/// Taking the tombstones to be the live ones first errs towards
/// collecting: deletes replace values, and a piece a fold wrote holds
/// carried values beside tombstones. Counted pro rata, such a piece hid
/// most of its dead bytes once its values were deleted too. The piece's
/// entries leave out a key prefix of `key_prefix_len` bytes.
pub(super) fn piece_garbage(
    props: &crate::piece::PieceProperties,
    key_prefix_len: usize,
    live: u64,
) -> Garbage {
    let entries = props.entry_count.max(1);
    let key_bytes = props
        .key_bytes
        .saturating_sub(props.entry_count * key_prefix_len as u64);
    let tombstones = props.tombstone_count.min(entries);
    let live = live.min(entries);
    let live_tombstones = tombstones.min(live);
    let live_values = live - live_tombstones;
    // An entry's bytes: its key and value bytes, plus an equal share of
    // the rest of the data region (headers, slots, padding).
    let overhead = props
        .data_bytes
        .saturating_sub(key_bytes + props.value_bytes) as f64
        / entries as f64;
    let key = key_bytes as f64 / entries as f64;
    let value = props.value_bytes as f64 / (entries - tombstones).max(1) as f64;
    let tombstone_bytes = live_tombstones as f64 * (key + overhead);
    let live_bytes = tombstone_bytes + live_values as f64 * (key + value + overhead);
    // Exactly none when nothing was replaced: a GC fold is due only where
    // it has a piece to fold.
    let dead_bytes = if live == entries {
        0
    } else {
        props.data_bytes.saturating_sub(live_bytes.round() as u64)
    };
    Garbage {
        data_bytes: props.data_bytes,
        dead_bytes,
        live_entries: live,
        live_tombstones,
        live_tombstone_bytes: (tombstone_bytes as u64).min(props.data_bytes),
        shadowed_bytes: 0,
    }
}

/// Of a piece's `shadowed` entries, those still live, estimated pro rata
/// to its `live` share: the entries of its own whose keys hide a version
/// in a level below.
pub(super) fn live_shadowed(
    props: &crate::piece::PieceProperties,
    live: u64,
    shadowed: u64,
) -> u64 {
    let entries = props.entry_count.max(1);
    (u128::from(shadowed.min(entries)) * u128::from(live.min(entries)) / u128::from(entries)) as u64
}
