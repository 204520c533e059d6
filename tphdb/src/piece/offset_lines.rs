//! Block offsets in memory as lines: a line through each group of
//! [`GROUP`] offsets and each offset's distance above it in a few bits.
//!
//! Blocks of one piece hold the same number of slots, so where entries are
//! of similar size their lengths barely vary and the offsets lie close to a
//! straight line: at 1 KiB values (three slots a block, 16-byte quanta) the
//! distances take 2 or 3 bits, where Elias-Fano takes `2 + log2(average
//! block)` bits whatever the spread (9 to 10 bits a block there). Where
//! sizes vary widely the lines cost more than Elias-Fano, so the reader
//! keeps whichever of the two is smaller (`block_index`); both are only in
//! memory, not part of the format.

use crate::util::bits::{bits_for, field, BitPacker, MAX_FIELD_BITS};

/// Offsets per line. At 64 a line's header (17 bytes) costs about 2 bits an
/// offset; a larger group costs less there but spreads wider around its line
/// when block sizes vary.
const GROUP: usize = 64;
/// Fractional bits of a line's step.
const STEP_FRACTION: u32 = 8;

/// A line through one group: offset `j` of the group is `base + (j * step >>
/// STEP_FRACTION) + distance_j`.
#[derive(Clone, Copy, Debug)]
struct Line {
    base: u64,
    step: u32,
    /// First bit of the group's distances in `bits`.
    at: u32,
}

/// Non-decreasing `u64` values, one line a group.
#[derive(Debug)]
pub(crate) struct OffsetLines {
    lines: Vec<Line>,
    widths: Vec<u8>,
    /// Packed distances, 8 bytes of padding at the end.
    bits: Vec<u8>,
}

impl OffsetLines {
    /// Codes `values` (non-decreasing; the caller has checked) or returns
    /// `None` where a line cannot: a step past 24 bits, a distance past
    /// [`MAX_FIELD_BITS`] bits or more bits than a `u32` counts.
    pub(crate) fn new(values: &[u64]) -> Option<OffsetLines> {
        let mut lines = Vec::with_capacity(values.len().div_ceil(GROUP));
        let mut widths = Vec::with_capacity(lines.capacity());
        let mut fields = Vec::with_capacity(GROUP);
        let mut packed = BitPacker::default();
        for group in values.chunks(GROUP) {
            let first = group[0];
            let span = group[group.len() - 1] - first;
            if span >= 1 << (64 - STEP_FRACTION - 1) {
                return None;
            }
            let step = match group.len() as u64 - 1 {
                0 => 0,
                gaps => ((span << STEP_FRACTION) + gaps / 2) / gaps,
            };
            if step > u32::MAX as u64 {
                return None;
            }
            fields.clear();
            fields.extend(
                group
                    .iter()
                    .enumerate()
                    .map(|(j, &v)| v as i128 - first as i128 - on_line(j, step as u32) as i128),
            );
            let lowest = fields.iter().copied().min().expect("a value");
            let highest = fields.iter().copied().max().expect("a value") - lowest;
            let width = bits_for(highest as u64);
            if width > MAX_FIELD_BITS || packed.bits() > u32::MAX as u64 {
                return None;
            }
            lines.push(Line {
                base: (first as i128 + lowest) as u64,
                step: step as u32,
                at: packed.bits() as u32,
            });
            widths.push(width as u8);
            for &f in &fields {
                packed.push((f - lowest) as u64, width);
            }
        }
        if packed.bits() > u32::MAX as u64 {
            return None;
        }
        Some(OffsetLines {
            lines,
            widths,
            bits: packed.finish(),
        })
    }

    /// Value `i < len()`.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> u64 {
        let (g, j) = (i / GROUP, i % GROUP);
        let line = self.lines[g];
        let width = u32::from(self.widths[g]);
        let distance = field(
            &self.bits,
            u64::from(line.at) + j as u64 * u64::from(width),
            width,
        );
        line.base
            .wrapping_add(on_line(j, line.step))
            .wrapping_add(distance)
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.lines.capacity() * std::mem::size_of::<Line>()
            + self.widths.capacity()
            + self.bits.capacity()
            + std::mem::size_of::<Self>()
    }
}

/// Height of the line `j` offsets after a group's first.
#[inline(always)]
fn on_line(j: usize, step: u32) -> u64 {
    (j as u64 * step as u64) >> STEP_FRACTION
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trips(values: &[u64]) -> OffsetLines {
        let lines = OffsetLines::new(values).expect("codable");
        for (i, &v) in values.iter().enumerate() {
            assert_eq!(lines.get(i), v, "value {i}");
        }
        lines
    }

    #[test]
    fn blocks_of_nearly_equal_size_cost_a_few_bits_each() {
        // Three 1 KiB entries a block in 16-byte quanta, a byte more or less
        // of sequence number moving a block by a quantum now and then.
        let mut v = vec![0u64];
        for i in 0..30_000u64 {
            let last = *v.last().unwrap();
            v.push(last + 195 + u64::from(i % 7 == 0) + u64::from(i % 13 == 0));
        }
        let bits = round_trips(&v).memory_bytes() as f64 * 8.0 / v.len() as f64;
        assert!(bits < 5.0, "{bits} bits a block");
    }

    #[test]
    fn a_value_far_off_its_line_widens_only_its_group() {
        let mut v: Vec<u64> = (0..10_000u64).map(|i| i * 1000).collect();
        for x in &mut v[5_000..] {
            *x += 1 << 20;
        }
        let lines = round_trips(&v);
        let wide = lines.widths.iter().filter(|&&w| w > 0).count();
        assert_eq!(wide, 1, "{:?}", lines.widths);
    }

    #[test]
    fn steps_past_24_bits_are_left_to_elias_fano() {
        assert!(OffsetLines::new(&[0, 1 << 40]).is_none());
        assert!(OffsetLines::new(&[0, u64::MAX]).is_none());
        assert!(OffsetLines::new(&[1, 2, u64::MAX - 1]).is_none());
        assert!(OffsetLines::new(&[0, 1 << 23]).is_some());
    }

    #[test]
    fn one_value_and_equal_values_round_trip() {
        round_trips(&[7]);
        round_trips(&[5; 200]);
        round_trips(&[0, 0, 0, 1 << 20, 1 << 20]);
    }

    proptest! {
        #[test]
        fn any_non_decreasing_sequence_round_trips(
            start in 0u64..1 << 40,
            gaps in proptest::collection::vec(0u64..100_000, 1..600),
        ) {
            let mut v = vec![start];
            for g in gaps {
                let last = *v.last().unwrap();
                v.push(last + g);
            }
            round_trips(&v);
        }
    }
}
