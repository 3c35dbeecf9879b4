//! Split counters (Yan et al., ISCA'06), as used by every design in secmem: one 64 B counter
//! block per 4 KB page holds a 64-bit major counter and 64 minor counters (7 bits each by
//! default; the Lelantus design shrinks them to 6 to make room for its CoW fields). A line's encryption counter is (major, minor). A write
//! bumps the line's minor; when the minor would wrap, the major is bumped, every minor of the
//! page is reset, and the page's other lines must be re-encrypted under the new major.
//!
//! Storage is sparse: only pages that were ever written have an entry, so a 32 GiB memory costs
//! memory only for the pages a workload writes.

use crate::addr::{line_in_page, page_of_line, LINES_PER_PAGE};

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
        let mask = (1u64 << minor_bits) - 1;
        // Accumulate minors into a bit buffer and spill whole bytes.
        let (mut acc, mut nbits, mut pos) = (0u64, 0u32, 8usize);
        for &m in &self.minors {
            acc |= (m as u64 & mask) << nbits;
            nbits += minor_bits;
            while nbits >= 8 {
                out[pos] = acc as u8;
                acc >>= 8;
                nbits -= 8;
                pos += 1;
            }
        }
        if nbits > 0 {
            out[pos] = acc as u8;
        }
        out
    }

    /// Inverse of [`encode`](Self::encode).
    pub fn decode(bytes: &[u8; 64], minor_bits: u32) -> CounterBlock {
        let mut cb = CounterBlock { major: u64::from_le_bytes(bytes[..8].try_into().unwrap()), minors: [0; 64] };
        let mask = (1u64 << minor_bits) - 1;
        let (mut acc, mut nbits, mut pos) = (0u64, 0u32, 8usize);
        for m in cb.minors.iter_mut() {
            while nbits < minor_bits {
                acc |= (bytes[pos] as u64) << nbits;
                nbits += 8;
                pos += 1;
            }
            *m = (acc & mask) as u8;
            acc >>= minor_bits;
            nbits -= minor_bits;
        }
        cb
    }

    /// The (major, minor) of line `idx` straight from the encoded bytes, without decoding the
    /// whole block (the read path of functional mode uses the verified bytes themselves).
    pub fn decode_one(bytes: &[u8; 64], idx: usize, minor_bits: u32) -> (u64, u8) {
        let major = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        let first = 64 + idx * minor_bits as usize;
        // A minor spans at most two bytes: read 16 bits and mask.
        let lo = bytes[first / 8] as u16;
        let hi = if first / 8 + 1 < 64 { bytes[first / 8 + 1] as u16 } else { 0 };
        let minor = (((hi << 8) | lo) >> (first % 8)) & ((1u16 << minor_bits) - 1);
        (major, minor as u8)
    }

}

/// The current value of every page's counters (the architectural truth, whichever cache or
/// NVM copy holds it), one block per page of the memory, indexed directly by page number.
///
/// The array is allocated zeroed (`alloc_zeroed`, i.e. anonymous pages the OS commits only
/// when first written), so a 32 GiB memory reserves 8 Mi blocks of address space but costs
/// host memory only for the pages a workload writes — and no hashing on the hot path.
pub struct CounterStore {
    blocks: ZeroedBlocks,
    touched: u64,
    /// Per huge-page region of the array: blocks written for the first time, or
    /// `COLLAPSED`. Host memory only (see `first_touch`).
    region_touches: Vec<u32>,
    pub minor_bits: u32,
}

/// `n` counter blocks in zeroed, lazily committed host memory (see [`crate::hostmem`]).
struct ZeroedBlocks(crate::hostmem::ZeroedSlice<CounterBlock>);

impl ZeroedBlocks {
    fn new(n: usize) -> ZeroedBlocks {
        // SAFETY: CounterBlock is plain integers, for which all-zero bytes are a valid value
        // (major 0, minors 0), and needs no drop.
        ZeroedBlocks(unsafe { crate::hostmem::ZeroedSlice::new(n) })
    }
}

/// Blocks in one huge-page region of the array (the last one may hold fewer).
const BLOCKS_PER_REGION: u64 = (crate::hostmem::HUGE_BYTES / std::mem::size_of::<CounterBlock>()) as u64;
/// A region is offered for collapsing into a huge page each time another sixteenth of its
/// blocks has been written for the first time.
const COLLAPSE_STEP: u32 = (BLOCKS_PER_REGION / 16) as u32;
/// `region_touches` value of a region already collapsed.
const COLLAPSED: u32 = u32::MAX;

impl CounterStore {
    /// Counters for `pages` pages, all zero.
    pub fn new(minor_bits: u32, pages: u64) -> Self {
        let blocks = ZeroedBlocks::new(pages as usize);
        let regions = if blocks.0.is_mapped() { pages.div_ceil(BLOCKS_PER_REGION) as usize + 1 } else { 0 };
        CounterStore { blocks, touched: 0, region_touches: vec![0; regions], minor_bits }
    }

    /// The counter block of `page`.
    #[inline]
    pub fn block(&self, page: u64) -> CounterBlock { self.blocks.0[page as usize] }

    /// (major, minor) of a data line.
    #[inline]
    pub fn counter_of_line(&self, line: u64) -> (u64, u8) {
        self.blocks.0[page_of_line(line) as usize].counter_of(line_in_page(line))
    }

    /// Bumps a data line's counter for a write.
    #[inline]
    pub fn bump_line(&mut self, line: u64) -> Bump {
        let bits = self.minor_bits;
        let page = page_of_line(line) as usize;
        let b = &mut self.blocks.0[page];
        if b.major == 0 && b.minors == [0; 64] {
            self.touched += 1;
            self.first_touch(page);
        }
        self.blocks.0[page].bump(line_in_page(line), bits)
    }

    /// Host memory only: once a sixteenth, an eighth, ... of a huge-page region's blocks have
    /// been written, offers the region for collapsing into a huge page, which happens only
    /// when it is almost entirely resident already (dense random traffic) — so TLB misses
    /// drop without making a sparse store dense.
    #[cold]
    #[inline(never)]
    fn first_touch(&mut self, page: usize) {
        let region = page * std::mem::size_of::<CounterBlock>() / crate::hostmem::HUGE_BYTES;
        let Some(n) = self.region_touches.get_mut(region) else { return };
        if *n == COLLAPSED {
            return;
        }
        *n += 1;
        if (*n).is_multiple_of(COLLAPSE_STEP) && self.blocks.0.collapse_if_resident(page) {
            *n = COLLAPSED;
        }
    }

    /// Hints the host CPU to bring `line`'s counter block into its caches (trace look-ahead).
    #[inline]
    pub fn prefetch_line(&self, line: u64) {
        #[cfg(target_arch = "x86_64")]
        if let Some(b) = self.blocks.0.get(page_of_line(line) as usize) {
            // SAFETY: prefetch of a valid reference has no effect on program state.
            // A 72-byte block spans two host cache lines.
            unsafe {
                let p = b as *const CounterBlock as *const i8;
                std::arch::x86_64::_mm_prefetch(p, std::arch::x86_64::_MM_HINT_T0);
                std::arch::x86_64::_mm_prefetch(p.add(std::mem::size_of::<CounterBlock>() - 1), std::arch::x86_64::_MM_HINT_T0);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = line;
    }

    pub fn block_mut(&mut self, page: u64) -> &mut CounterBlock { &mut self.blocks.0[page as usize] }
    pub fn set_block(&mut self, page: u64, b: CounterBlock) { self.blocks.0[page as usize] = b; }
    /// Pages whose counters were ever bumped from all-zero.
    pub fn pages_touched(&self) -> u64 { self.touched }
    pub fn pages(&self) -> u64 { self.blocks.0.len() as u64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seven_bit_minor_overflows_at_exactly_the_128th_write() {
        let mut s = CounterStore::new(7, 16);
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
        let mut s = CounterStore::new(7, 16);
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
            let e = b.encode(bits);
            prop_assert_eq!(CounterBlock::decode(&e, bits), b);
            for i in 0..64 {
                prop_assert_eq!(CounterBlock::decode_one(&e, i, bits), b.counter_of(i));
            }
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
