//! Split counters (Yan et al., ISCA'06), as used by every design in secmem: one 64 B counter
//! block per 4 KB page holds a 64-bit major counter and 64 minor counters (7 bits each by
//! default; Lelantus shrinks them to 6). A line's encryption counter is (major, minor). A write
//! bumps the line's minor; when the minor would wrap, the major is bumped, every minor of the
//! page is reset, and the page's other lines must be re-encrypted under the new major.
//!
//! Storage is sparse: only pages that were ever written have an entry, so a 32 GiB memory costs
//! memory only for the pages a workload writes.

use crate::addr::{line_in_page, page_of_line, LINES_PER_PAGE};
use rustc_hash::FxHashMap;

/// One page's counters. Minors are stored one per byte for speed; only `minor_bits` are used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterBlock {
    pub major: u64,
    pub minors: [u8; LINES_PER_PAGE as usize],
}

impl Default for CounterBlock {
    fn default() -> Self { CounterBlock { major: 0, minors: [0; 64] } }
}

/// What a write did to its counter.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Bump {
    /// The minor advanced; nothing else changes.
    Minor,
    /// The minor would have wrapped: the major advanced and all minors reset, so the page's
    /// other lines need re-encryption.
    Overflow,
}

impl CounterBlock {
    /// The (major, minor) pair a line is currently encrypted with.
    #[inline]
    pub fn counter_of(&self, idx: usize) -> (u64, u8) { (self.major, self.minors[idx]) }

    /// Advances line `idx`'s counter for a write.
    #[inline]
    pub fn bump(&mut self, idx: usize, minor_bits: u32) -> Bump {
        let max = ((1u32 << minor_bits) - 1) as u8;
        if self.minors[idx] >= max {
            self.major += 1;
            self.minors = [0; 64];
            Bump::Overflow
        } else {
            self.minors[idx] += 1;
            Bump::Minor
        }
    }

    /// Packs into the 64 B on-NVM layout: 64-bit major (LE) then 64 minors of `minor_bits`
    /// bits, bit-packed LSB first. With 7-bit minors this is exactly 8 + 56 = 64 bytes.
    pub fn encode(&self, minor_bits: u32) -> [u8; 64] {
        let mut out = [0u8; 64];
        out[..8].copy_from_slice(&self.major.to_le_bytes());
        let mut bit = 64usize;
        for &m in &self.minors {
            for b in 0..minor_bits as usize {
                if (m >> b) & 1 == 1 {
                    out[(bit + b) / 8] |= 1 << ((bit + b) % 8);
                }
            }
            bit += minor_bits as usize;
        }
        out
    }

    /// Inverse of [`encode`](Self::encode).
    pub fn decode(bytes: &[u8; 64], minor_bits: u32) -> CounterBlock {
        let mut major = [0u8; 8];
        major.copy_from_slice(&bytes[..8]);
        let mut cb = CounterBlock { major: u64::from_le_bytes(major), minors: [0; 64] };
        let mut bit = 64usize;
        for m in cb.minors.iter_mut() {
            for b in 0..minor_bits as usize {
                if (bytes[(bit + b) / 8] >> ((bit + b) % 8)) & 1 == 1 {
                    *m |= 1 << b;
                }
            }
            bit += minor_bits as usize;
        }
        cb
    }
}

/// The current value of every page's counters (the architectural truth, whichever cache or
/// NVM copy holds it). Pages never written are all-zero and take no memory.
#[derive(Default, Clone)]
pub struct CounterStore {
    blocks: FxHashMap<u64, CounterBlock>,
    pub minor_bits: u32,
}

impl CounterStore {
    pub fn new(minor_bits: u32) -> Self { CounterStore { blocks: FxHashMap::default(), minor_bits } }

    /// The counter block of `page` (zero if never written).
    pub fn block(&self, page: u64) -> CounterBlock { self.blocks.get(&page).copied().unwrap_or_default() }

    /// (major, minor) of a data line.
    pub fn counter_of_line(&self, line: u64) -> (u64, u8) {
        self.blocks.get(&page_of_line(line)).map_or((0, 0), |b| b.counter_of(line_in_page(line)))
    }

    /// Bumps a data line's counter for a write.
    #[inline]
    pub fn bump_line(&mut self, line: u64) -> Bump {
        let bits = self.minor_bits;
        self.blocks.entry(page_of_line(line)).or_default().bump(line_in_page(line), bits)
    }

    pub fn block_mut(&mut self, page: u64) -> &mut CounterBlock { self.blocks.entry(page).or_default() }
    pub fn set_block(&mut self, page: u64, b: CounterBlock) { self.blocks.insert(page, b); }
    pub fn pages_touched(&self) -> usize { self.blocks.len() }
    pub fn iter(&self) -> impl Iterator<Item = (&u64, &CounterBlock)> { self.blocks.iter() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seven_bit_minor_overflows_at_exactly_the_128th_write() {
        let mut s = CounterStore::new(7);
        for i in 1..=127 {
            assert_eq!(s.bump_line(5), Bump::Minor, "write {i}");
        }
        assert_eq!(s.counter_of_line(5), (0, 127));
        assert_eq!(s.bump_line(5), Bump::Overflow);
        assert_eq!(s.counter_of_line(5), (1, 0));
    }

    #[test]
    fn six_bit_minor_overflows_at_the_64th_write() {
        let mut b = CounterBlock::default();
        for _ in 0..63 {
            assert_eq!(b.bump(0, 6), Bump::Minor);
        }
        assert_eq!(b.bump(0, 6), Bump::Overflow);
    }

    #[test]
    fn overflow_resets_every_minor_of_the_page() {
        let mut s = CounterStore::new(7);
        s.bump_line(1);
        for _ in 0..128 {
            s.bump_line(0);
        }
        assert_eq!(s.counter_of_line(1), (1, 0));
        assert_eq!(s.counter_of_line(64), (0, 0), "next page untouched");
    }

    #[test]
    fn seven_bit_layout_fills_exactly_64_bytes() {
        let mut b = CounterBlock { major: u64::MAX - 3, minors: [0; 64] };
        b.minors[63] = 127;
        let e = b.encode(7);
        assert_eq!(e[63] & 0xFE, 0xFE, "last minor occupies the top 7 bits of byte 63");
        assert_eq!(CounterBlock::decode(&e, 7), b);
    }

    proptest! {
        #[test]
        fn encode_decode_round_trips(major in any::<u64>(), minors in proptest::collection::vec(0u8..128, 64), bits in 6u32..=7) {
            let mut b = CounterBlock { major, minors: [0; 64] };
            for (i, m) in minors.iter().enumerate() { b.minors[i] = m & ((1 << bits) - 1) as u8; }
            prop_assert_eq!(CounterBlock::decode(&b.encode(bits), bits), b);
        }

        #[test]
        fn a_counter_value_never_repeats_for_a_line(writes in proptest::collection::vec(0usize..4, 1..600)) {
            let mut b = CounterBlock::default();
            let mut seen = std::collections::HashSet::new();
            for idx in writes {
                b.bump(idx, 7);
                prop_assert!(seen.insert((idx, b.counter_of(idx))), "pad reuse at line {}", idx);
            }
        }
    }
}
