//! CPHash: the CompassDB paper's perfect hash (§3.1, §4.1).
//!
//! * Keys (64-bit hashes) are split into segments by their high bits
//!   (§4.1.3) and re-mixed under a seed. Each segment owns its own range of
//!   buckets and of slots, is built independently and in parallel, and is
//!   sized so that its search stays in the CPU cache. As the segments follow
//!   the hash order, so do the slots, a segment at a time: the entries of a
//!   range of hashes (a level's partition, a fold's pass) lie in a range of
//!   slots, so in a range of the piece's blocks. Format version 1 chose the
//!   segment from the mixed hash; its functions are still read.
//! * Within a segment, PTHash's skewed mapping sends 60% of the keys to 30%
//!   of the buckets (equation 2). Buckets are placed largest first.
//! * Each bucket stores one byte: the index of its displacement in a
//!   dictionary of 256 displacements shared by every bucket of the segment
//!   (the paper's parameter reuse taken to its limit: every bucket reuses).
//!   A key's slot is `fastmod(h ^ displacement[p])` over the segment's slots,
//!   Lemire's division-free modular reduction (§4.1.2).
//! * A segment of `n_j` keys gets `ceil(c * n_j)` slots. When the search
//!   fails it is retried with a fresh dictionary and then with more slots
//!   (§4.1.1). When `c` is below the highest load the search handles well
//!   (`MAX_LOAD`), the search runs over a slightly larger space and the few
//!   keys that land past the table are remapped into its free slots, which
//!   is how `c = 1.0` (a minimal perfect hash) works.
//!
//! The serialized layout is in `docs/format.md` ("Perfect hash").

mod build;
mod search;

use super::{seal, unseal, Built, PerfectHash, PhfConfig};
use crate::error::{Error, Result};
use crate::util::codec::{u32_at, Decoder, PutExt};
use crate::util::reduce::{interval_index, mix64, mul_high, FastMod, MIX};
use bytes::Bytes;

const MAGIC: u32 = u32::from_le_bytes(*b"CPH1");
/// Version 3 divides the interval of the keys' hashes into segments;
/// version 2 (still read) divided the whole 64-bit range, so that a piece of
/// a level's partition (an eighth of the range at level 1, a 64th at level
/// 2) had all its keys in an eighth or a 64th of its segments; version 1
/// (still read) chose segments by the mixed hash.
const VERSION: u16 = 3;
/// Header bytes up to version 2; version 3 adds the interval (16 bytes).
const HEADER_BYTES: usize = 56;
const INTERVAL_BYTES: usize = 16;
const SEGMENT_RECORD_BYTES: usize = 16;

/// Hashes below this threshold (60% of the 64-bit range) go to dense buckets.
const DENSE_THRESHOLD: u64 = (0.6 * 18_446_744_073_709_551_616.0) as u64;
/// Fraction of the buckets that are dense.
const DENSE_BUCKET_FRACTION: f64 = 0.3;
/// The highest fraction of its search space a segment fills. Above it the
/// last buckets find no free slots in reasonable time.
const MAX_LOAD: f64 = 0.99;

/// How a function's keys are divided into segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SegmentOrder {
    /// By the high bits of the mixed hash (version 1).
    Mixed,
    /// By where the hash lies from `lo` on: `min(mulhi(h -sat lo, scale),
    /// segments - 1)`, monotone in the hash, so that the slots follow the
    /// hash order a segment at a time. Version 3 sets `lo` to the least
    /// hash built over and `scale` to spread the keys' interval over the
    /// segments; version 2 is `lo = 0, scale = segments`.
    Interval { lo: u64, scale: u64 },
}

impl SegmentOrder {
    /// Segments of equal shares of `lo..=hi` (`segments` of them). The
    /// scale is rounded down, so that `hi` falls in the last segment and not
    /// past it: rounded up, a span just short of 2^64 gave the last segment
    /// twice the share of the others.
    pub(crate) fn over(lo: u64, hi: u64, segments: u64) -> SegmentOrder {
        let span = (hi as u128) - (lo as u128) + 1;
        let scale = (((segments as u128) << 64) / span).min(u64::MAX as u128) as u64;
        SegmentOrder::Interval { lo, scale }
    }

    /// The segment of a key with hash `h` (mixed: `hx`) among `segments`.
    /// Shared by the builder and the query.
    #[inline(always)]
    pub(crate) fn segment_of(self, h: u64, hx: u64, segments: u64) -> u64 {
        match self {
            SegmentOrder::Mixed => mul_high(hx, segments),
            SegmentOrder::Interval { lo, scale } => interval_index(h, lo, scale, segments),
        }
    }
}

/// How the keys of one segment map to buckets and slots. Shared by the
/// builder and the query so that both compute exactly the same function.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    dense_buckets: u64,
    dense_mul: u64,
    sparse_mul: u64,
    /// Over the search space (`internal_slots`), not the table slots.
    fastmod: FastMod,
    /// Selects the displacement dictionary; low 8 bits are zero.
    salt: u64,
}

impl Shape {
    /// `buckets >= 2` and `internal_slots >= 1`.
    pub(crate) fn new(buckets: u32, internal_slots: u32, attempt: u32, seed: u64) -> Shape {
        debug_assert!(buckets >= 2 && internal_slots >= 1);
        let b = buckets as u64;
        let dense = ((b as f64 * DENSE_BUCKET_FRACTION).round() as u64).clamp(1, b - 1);
        Shape {
            dense_buckets: dense,
            dense_mul: (((dense as u128) << 64) / DENSE_THRESHOLD as u128) as u64,
            sparse_mul: ((((b - dense) as u128) << 64) / ((1u128 << 64) - DENSE_THRESHOLD as u128))
                as u64,
            fastmod: FastMod::new(internal_slots as u64),
            salt: mix64(attempt as u64, seed.rotate_left(17)) & !0xff,
        }
    }

    /// The bucket (within the segment) of a key, from the fresh bits `rem`
    /// left over by the segment reduction. Always below `buckets`.
    #[inline(always)]
    pub(crate) fn bucket(&self, rem: u64) -> u64 {
        // Branch-free: which side a key falls on is a coin flip (60/40), so a
        // branch would mispredict on ~40% of queries.
        let sparse = 0u64.wrapping_sub((rem >= DENSE_THRESHOLD) as u64);
        let x = rem - (DENSE_THRESHOLD & sparse);
        let mul = (self.sparse_mul & sparse) | (self.dense_mul & !sparse);
        (self.dense_buckets & sparse) + mul_high(x, mul)
    }

    /// The displacement with dictionary index `pilot`.
    #[inline(always)]
    pub(crate) fn displacement(&self, pilot: u8) -> u64 {
        MIX.wrapping_mul(self.salt | pilot as u64)
    }

    /// The slot (within the segment's search space) of a key.
    #[inline(always)]
    pub(crate) fn slot(&self, hx: u64, displacement: u64) -> u64 {
        self.fastmod.reduce(hx ^ displacement)
    }
}

/// What the query needs of one segment.
#[derive(Clone, Copy, Debug)]
struct Segment {
    shape: Shape,
    bucket_start: u64,
    slot_start: u64,
    /// Table slots this segment owns; search slots at or past it are remapped.
    slots: u64,
    remap_start: u64,
}

/// The per-segment numbers that are serialized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentRecord {
    pub(crate) buckets: u32,
    pub(crate) slots: u32,
    pub(crate) internal_slots: u32,
    pub(crate) attempt: u32,
}

/// A CPHash perfect hash function. See the module documentation.
#[derive(Debug)]
pub struct CpHash {
    n: u64,
    table_size: u64,
    seed: u64,
    order: SegmentOrder,
    records: Vec<SegmentRecord>,
    segments: Vec<Segment>,
    /// One byte per bucket, used in place from the loaded buffer.
    pilots: Bytes,
    /// Little-endian u32 per remapped search slot, used in place.
    remap: Bytes,
}

impl CpHash {
    /// Asks the CPU for the pilot byte [`PerfectHash::slot`] of `hash`
    /// reads: the one random access of a query besides its segment.
    #[inline]
    pub(crate) fn prefetch(&self, hash: u64) {
        if self.segments.is_empty() {
            return;
        }
        let (_, _, bucket) = self.bucket_of(hash);
        if let Some(p) = self.pilots.get(bucket as usize) {
            crate::util::prefetch(p);
        }
    }

    /// The mixed hash of `hash`, its segment and its bucket (across all
    /// segments); the function has at least one segment.
    #[inline(always)]
    fn bucket_of(&self, hash: u64) -> (u64, &Segment, u64) {
        let hx = mix64(hash, self.seed);
        let segments = self.segments.len() as u64;
        // The bucket's bits: what the segment reduction of `hx` leaves.
        let rem = hx.wrapping_mul(segments);
        let seg = &self.segments[self.order.segment_of(hash, hx, segments) as usize];
        (hx, seg, seg.bucket_start + seg.shape.bucket(rem))
    }

    /// Assembles a function from its parts, validating every invariant the
    /// query relies on, so that a function from hostile bytes is memory-safe
    /// and maps every hash below the table size.
    fn from_parts(
        n: u64,
        seed: u64,
        order: SegmentOrder,
        records: Vec<SegmentRecord>,
        pilots: Bytes,
        remap: Bytes,
    ) -> Result<CpHash> {
        let mut segments = Vec::with_capacity(records.len());
        let (mut bucket_start, mut slot_start, mut remap_start) = (0u64, 0u64, 0u64);
        for (i, r) in records.iter().enumerate() {
            if r.buckets < 2 || r.slots < 1 || r.internal_slots < r.slots {
                return Err(Error::corruption(
                    format!("cphash segment {i}"),
                    "buckets >= 2 and 1 <= slots <= internal slots",
                    format!(
                        "buckets {}, slots {}, internal slots {}",
                        r.buckets, r.slots, r.internal_slots
                    ),
                ));
            }
            segments.push(Segment {
                shape: Shape::new(r.buckets, r.internal_slots, r.attempt, seed),
                bucket_start,
                slot_start,
                slots: r.slots as u64,
                remap_start,
            });
            bucket_start += r.buckets as u64;
            slot_start += r.slots as u64;
            remap_start += (r.internal_slots - r.slots) as u64;
        }
        if (records.is_empty()) != (n == 0) || slot_start < n {
            return Err(Error::corruption(
                "cphash header",
                "at least one segment and one slot per key, or neither",
                format!("{n} keys, {} segments, {slot_start} slots", records.len()),
            ));
        }
        if pilots.len() as u64 != bucket_start || remap.len() as u64 != remap_start * 4 {
            return Err(Error::corruption(
                "cphash arrays",
                format!("{bucket_start} pilots and {remap_start} remap entries"),
                format!(
                    "{} pilot bytes and {} remap bytes",
                    pilots.len(),
                    remap.len()
                ),
            ));
        }
        for seg in &segments {
            let end = seg.remap_start + seg.shape.fastmod_divisor() - seg.slots;
            for i in seg.remap_start..end {
                let to = u32_at(&remap, i as usize) as u64;
                if to >= seg.slots {
                    return Err(Error::corruption(
                        format!("cphash remap entry {i}"),
                        format!("a slot below {}", seg.slots),
                        to,
                    ));
                }
            }
        }
        Ok(CpHash {
            n,
            table_size: slot_start,
            seed,
            order,
            records,
            segments,
            pilots,
            remap,
        })
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// How the keys are divided into segments, for `tphdb inspect`.
    pub fn segments_summary(&self) -> String {
        let count = self.segments.len();
        match self.order {
            SegmentOrder::Mixed => format!("segments: {count}, by the mixed hash (version 1)"),
            SegmentOrder::Interval { lo, scale } => {
                let width = (1u128 << 64) / u128::from(scale.max(1));
                format!("segments: {count}, of {width:#x} hashes each from {lo:#018x}")
            }
        }
    }

    /// Number of buckets (one parameter byte each).
    pub fn bucket_count(&self) -> usize {
        self.pilots.len()
    }

    /// Number of search slots past the table that are remapped into it.
    pub fn remapped_slots(&self) -> usize {
        self.remap.len() / 4
    }

    fn encoded_len(&self) -> usize {
        HEADER_BYTES
            + INTERVAL_BYTES
            + self.records.len() * SEGMENT_RECORD_BYTES
            + self.pilots.len()
            + self.remap.len()
            + 8
    }
}

impl Shape {
    fn fastmod_divisor(&self) -> u64 {
        self.fastmod.divisor()
    }
}

impl CpHash {
    fn assemble(out: build::BuildOutput, config: &PhfConfig) -> Result<Built<Self>> {
        let phf = CpHash::from_parts(
            out.n,
            config.seed,
            out.order,
            out.records,
            Bytes::from(out.pilots),
            Bytes::from(out.remap),
        )?;
        Ok(Built {
            phf,
            duplicate_hashes: out.duplicates,
        })
    }
}

impl PerfectHash for CpHash {
    fn build(hashes: &[u64], config: &PhfConfig) -> Result<Built<Self>> {
        config.validate()?;
        Self::assemble(build::build(hashes, config)?, config)
    }

    #[inline]
    fn slot(&self, hash: u64) -> usize {
        if self.segments.is_empty() {
            return 0;
        }
        let (hx, seg, bucket) = self.bucket_of(hash);
        let pilot = self.pilots[bucket as usize];
        let s = seg.shape.slot(hx, seg.shape.displacement(pilot));
        if s < seg.slots {
            (seg.slot_start + s) as usize
        } else {
            let i = (seg.remap_start + s - seg.slots) as usize;
            (seg.slot_start + u32_at(&self.remap, i) as u64) as usize
        }
    }

    fn table_size(&self) -> usize {
        self.table_size as usize
    }

    fn len(&self) -> usize {
        self.n as usize
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.reserve(self.encoded_len());
        out.put_u32(MAGIC);
        // Version 2 is only read: what it divides is written as version 3.
        out.put_u16(match self.order {
            SegmentOrder::Mixed => 1,
            SegmentOrder::Interval { .. } => VERSION,
        });
        out.put_u16(0);
        out.put_u64(self.n);
        out.put_u64(self.table_size);
        out.put_u64(self.seed);
        out.put_u32(self.records.len() as u32);
        out.put_u32(0);
        out.put_u64(self.pilots.len() as u64);
        out.put_u64((self.remap.len() / 4) as u64);
        if let SegmentOrder::Interval { lo, scale } = self.order {
            out.put_u64(lo);
            out.put_u64(scale);
        }
        for r in &self.records {
            out.put_u32(r.buckets);
            out.put_u32(r.slots);
            out.put_u32(r.internal_slots);
            out.put_u32(r.attempt);
        }
        out.extend_from_slice(&self.pilots);
        out.extend_from_slice(&self.remap);
        seal(out, start);
    }

    fn decode(bytes: Bytes) -> Result<Self> {
        decode(bytes).map_err(|e| e.at("cphash"))
    }

    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.records.len()
                * (std::mem::size_of::<SegmentRecord>() + std::mem::size_of::<Segment>())
            + self.pilots.len()
            + self.remap.len()
    }
}

fn decode(bytes: Bytes) -> Result<CpHash> {
    let body_len = unseal(&bytes, HEADER_BYTES + 8, false)?.len();
    let mut d = Decoder::new(&bytes[..body_len], "cphash");
    d.magic_u32(MAGIC)?;
    let version = d.u16()?;
    if !(1..=VERSION).contains(&version) {
        return Err(Error::corruption(
            "format version",
            format!("1 to {VERSION}"),
            version,
        ));
    }
    let _flags = d.u16()?;
    let n = d.u64()?;
    let table_size = d.u64()?;
    let seed = d.u64()?;
    let segment_count = d.u32()? as usize;
    let _reserved = d.u32()?;
    let bucket_count = d.u64()?;
    let remap_count = d.u64()?;
    let order = match version {
        1 => SegmentOrder::Mixed,
        2 => SegmentOrder::Interval {
            lo: 0,
            scale: segment_count as u64,
        },
        _ => SegmentOrder::Interval {
            lo: d.u64()?,
            scale: d.u64()?,
        },
    };
    let records_len = segment_count
        .checked_mul(SEGMENT_RECORD_BYTES)
        .filter(|&l| l <= d.remaining())
        .ok_or_else(|| {
            Error::corruption(
                "segment count",
                format!("at most {} segments", d.remaining() / SEGMENT_RECORD_BYTES),
                segment_count,
            )
        })?;
    let mut rd = Decoder::new(d.bytes(records_len)?, "cphash segments");
    let mut records = Vec::with_capacity(segment_count);
    for _ in 0..segment_count {
        records.push(SegmentRecord {
            buckets: rd.u32()?,
            slots: rd.u32()?,
            internal_slots: rd.u32()?,
            attempt: rd.u32()?,
        });
    }
    let pilots_start = d.position();
    let expected_rest = bucket_count
        .checked_add(remap_count.saturating_mul(4))
        .filter(|&l| l == d.remaining() as u64);
    if expected_rest.is_none() {
        return Err(Error::corruption(
            "array lengths",
            format!("{bucket_count} pilot bytes and {remap_count} remap entries"),
            format!("{} bytes", d.remaining()),
        ));
    }
    let pilots = bytes.slice(pilots_start..pilots_start + bucket_count as usize);
    let remap = bytes.slice(pilots_start + bucket_count as usize..body_len);
    let phf = CpHash::from_parts(n, seed, order, records, pilots, remap)?;
    if phf.table_size != table_size {
        return Err(Error::corruption(
            "table size",
            format!("{} (sum of segment slots)", phf.table_size),
            table_size,
        ));
    }
    Ok(phf)
}

#[cfg(test)]
mod tests;
