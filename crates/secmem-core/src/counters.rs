//! Split counters (Yan et al., ISCA'06), as used by every design in secmem: one 64 B counter
//! block per 4 KB page holds a 64-bit major counter and 64 minor counters (7 bits each by
//! default; the Lelantus design shrinks them to 6 to make room for its CoW fields). A line's encryption counter is (major, minor). A write
//! bumps the line's minor; when the minor would wrap, the major is bumped, every minor of the
//! page is reset, and the page's other lines must be re-encrypted under the new major.
//!
//! Storage is sparse: only pages that were ever written have an entry, so a 32 GiB memory costs
//! memory only for the pages a workload writes.
//!
//! Counters start at zero, or ([`InitialCounters::Random`]) at a seeded pseudo-random value
//! per page, as Lelantus' evaluation does to model counter overflow (section V-A): a system
//! that has run for a while has minors anywhere in their range, so a line's first overflow
//! comes after `2^bits - 1 - init` writes, not `2^bits - 1`. A page's initial block is a pure
//! function of (seed, page), derived when first needed, so the store stays sparse.

use crate::addr::{line_in_page, page_of_line, LINES_PER_PAGE};
use crate::hostmem::ZeroedSlice;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

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

/// The value every counter block holds at boot (`security.counter_init`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum InitialCounters {
    /// Major 0 and every minor 0.
    #[default]
    Zero,
    /// Major 0 and every minor drawn uniformly from `0..2^minor_bits`: page `p`'s minors are
    /// the first 64 bytes of ChaCha8 stream `p` under a key made from `seed`, each masked to
    /// `minor_bits` (a power-of-two range, so masking keeps them uniform). The major stays 0:
    /// overflow depends only on the minors, a fresh major after an overflow or a page command
    /// is still `old + 1` (so no pad repeats), and Lelantus' 63-bit major with its CoW flag in
    /// the top bit cannot be reached.
    Random { seed: u64 },
}

/// Domain label of the initial-counter key, so the stream never coincides with another use of
/// the same run seed (workload, harness choices).
const INIT_KEY_LABEL: &[u8; 24] = b"secmem counter init v1\0\0";

impl InitialCounters {
    /// Page `page`'s counter block at boot, for `minor_bits`-bit minors.
    pub fn block(&self, page: u64, minor_bits: u32) -> CounterBlock {
        match *self {
            InitialCounters::Zero => CounterBlock::default(),
            InitialCounters::Random { seed } => {
                let mut key = [0u8; 32];
                key[..8].copy_from_slice(&seed.to_le_bytes());
                key[8..].copy_from_slice(INIT_KEY_LABEL);
                let mut rng = ChaCha8Rng::from_seed(key);
                rng.set_stream(page);
                let mut minors = [0u8; LINES_PER_PAGE as usize];
                rng.fill_bytes(&mut minors);
                let mask = ((1u32 << minor_bits) - 1) as u8;
                for m in minors.iter_mut() {
                    *m &= mask;
                }
                CounterBlock { major: 0, minors }
            }
        }
    }

    pub fn is_zero(&self) -> bool { *self == InitialCounters::Zero }
}

impl CounterBlock {
    /// Major 0 and every minor 0 (a zero-initialised block never written).
    #[inline]
    pub fn is_zero(&self) -> bool { self.major == 0 && self.minors == [0; 64] }

    /// The (major, minor) pair a line is currently encrypted with.
    #[inline]
    pub fn counter_of(&self, idx: usize) -> (u64, u8) { (self.major, self.minors[idx]) }

    /// Advances line `idx`'s counter for a write.
    #[inline]
    pub fn bump(&mut self, idx: usize, minor_bits: u32) -> Bump { bump_minor(&mut self.major, &mut self.minors, idx, minor_bits) }

    /// Packs into the 64 B on-NVM layout: 64-bit major (LE) then 64 minors of `minor_bits`
    /// bits, bit-packed LSB first. With 7-bit minors this is exactly 8 + 56 = 64 bytes; wider
    /// minors do not fit, so callers keep 8-bit minors (counting mode only) out of here.
    pub fn encode(&self, minor_bits: u32) -> [u8; 64] {
        debug_assert!(minor_bits <= 7, "{minor_bits}-bit minors do not fit a 64 B counter block");
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

    /// Writes `minor` as minor `idx` of an encoded block, in place: the bytes
    /// [`encode`](Self::encode) gives for the block with that one minor changed. A write
    /// bumps one minor; re-encoding all 64 for it was 2-3% of a functional run.
    pub fn encode_one(bytes: &mut [u8; 64], idx: usize, minor: u8, minor_bits: u32) {
        debug_assert!(minor_bits <= 7 && idx < 64);
        let first = 64 + idx * minor_bits as usize;
        let (byte, shift) = (first / 8, first % 8);
        // A minor spans at most two bytes (its bits end by bit 511, so a second byte exists
        // whenever it is needed).
        let mask = ((1u16 << minor_bits) - 1) << shift;
        let hi = if byte + 1 < 64 { bytes[byte + 1] as u16 } else { 0 };
        let word = ((hi << 8) | bytes[byte] as u16) & !mask | ((minor as u16) << shift) & mask;
        bytes[byte] = word as u8;
        if byte + 1 < 64 {
            bytes[byte + 1] = (word >> 8) as u8;
        }
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
/// NVM copy holds it), indexed directly by page number.
///
/// A page's minors and its major live in two arrays, not in one [`CounterBlock`]: the 64
/// minors are exactly one 64 B host cache line (both arrays start on one), so a write's bump,
/// and the look-ahead's prefetch for it, touch one line. A 72 B block spans two. The major is
/// read only by a page's first write (is the page still all zero?), an overflow and the
/// readers of a whole counter.
///
/// The arrays are allocated zeroed (anonymous pages the OS commits only when first written),
/// so a 32 GiB memory reserves 8 Mi pages' worth of address space but costs host memory only
/// for the pages a workload writes — and no hashing on the hot path.
///
/// A bitmap says which pages may hold their own value; reads of the others derive the initial
/// value without touching the arrays.
/// - With random initial counters a zeroed slot cannot stand for the initial value, so the
///   bitmap has one bit per page (also lazily committed: 1 MiB of address space for 32 GiB);
///   a page is materialised from [`InitialCounters::block`] the first time it is bumped or
///   set.
/// - With zero initial counters it has one bit per 64 pages, the pages whose minors share one
///   4 KiB host page (16 KiB for 32 GiB, so it stays in the host's L1). The bit is set, and
///   the host page written, when the first of them is bumped or set. That is for the host
///   kernel: a read of a never-written anonymous page maps the shared zero page, and the
///   first write to it then replaces that mapping, which must flush the TLB of every host
///   CPU running the process. With two host threads (a functional run) each such flush was an
///   inter-processor interrupt, about 2% of the run's samples on the sending side alone.
///   Written first, the page is simply allocated.
pub struct CounterStore {
    /// Per page, its 64 minors.
    minors: ZeroedSlice<[u8; LINES_PER_PAGE as usize]>,
    /// Per page, its major.
    majors: ZeroedSlice<u64>,
    init: InitialCounters,
    /// Bit `g` set once a page of group `g` (pages `g << group_shift ..`) was materialised.
    materialised: ZeroedSlice<u64>,
    /// log2 of the pages per bit of `materialised`: 0 under random init, 6 under zero init.
    group_shift: u32,
    touched: u64,
    /// Per huge-page region of the minors array: pages written for the first time, or
    /// `COLLAPSED`. Host memory only (see `first_touch`).
    region_touches: Vec<u32>,
    pub minor_bits: u32,
}

/// Pages in one huge-page region of the minors array (the last one may hold fewer): 64 B per
/// page divides 2 MiB, so each region is exactly one huge page of the array.
const PAGES_PER_REGION: u64 = (crate::hostmem::HUGE_BYTES / LINES_PER_PAGE as usize) as u64;
/// A region is offered for collapsing into a huge page each time another sixteenth of its
/// pages has been written for the first time.
const COLLAPSE_STEP: u32 = (PAGES_PER_REGION / 16) as u32;
/// `region_touches` value of a region already collapsed.
const COLLAPSED: u32 = u32::MAX;
/// Zero init: log2 of the pages per bit of the materialised bitmap, the 64 pages whose 64 B
/// minors fill one 4 KiB host page.
const ZERO_INIT_GROUP_SHIFT: u32 = 6;

/// The largest value a `minor_bits`-bit minor holds; a write to a minor there overflows.
#[inline]
fn minor_max(minor_bits: u32) -> u8 { ((1u32 << minor_bits) - 1) as u8 }

/// Advances minor `idx` of a page for a write: [`CounterBlock::bump`] on the two halves of a
/// block, wherever they are stored.
#[inline]
fn bump_minor(major: &mut u64, minors: &mut [u8; LINES_PER_PAGE as usize], idx: usize, minor_bits: u32) -> Bump {
    if minors[idx] >= minor_max(minor_bits) {
        *major += 1;
        *minors = [0; LINES_PER_PAGE as usize];
        Bump::Overflow
    } else {
        minors[idx] += 1;
        Bump::Minor
    }
}

impl CounterStore {
    /// Counters for `pages` pages, all zero.
    pub fn new(minor_bits: u32, pages: u64) -> Self { Self::with_init(minor_bits, pages, InitialCounters::Zero) }

    /// Counters for `pages` pages, each starting at `init`'s value for it.
    pub fn with_init(minor_bits: u32, pages: u64, init: InitialCounters) -> Self {
        // SAFETY: all-zero bytes are valid minors, majors and bitmap words (plain integers,
        // no drop): major 0 and minors 0, no page materialised yet.
        let (minors, majors) = unsafe { (ZeroedSlice::new(pages as usize), ZeroedSlice::new(pages as usize)) };
        let regions = if minors.is_mapped() { pages.div_ceil(PAGES_PER_REGION) as usize + 1 } else { 0 };
        let group_shift = if init.is_zero() { ZERO_INIT_GROUP_SHIFT } else { 0 };
        let groups = pages.div_ceil(1 << group_shift);
        // SAFETY: as above.
        let materialised = unsafe { ZeroedSlice::new(groups.div_ceil(64) as usize) };
        CounterStore { minors, majors, init, materialised, group_shift, touched: 0, region_touches: vec![0; regions], minor_bits }
    }

    /// How the counters started (a fresh store after a crash starts the same way).
    pub fn init(&self) -> InitialCounters { self.init }

    /// Page `page`'s counter block at boot.
    pub fn initial_block(&self, page: u64) -> CounterBlock { self.init.block(page, self.minor_bits) }

    /// Whether `page`'s block may hold its own value (else it is still the initial one, derived
    /// on demand). Under zero init, whether any page of its group was bumped or set.
    #[inline]
    fn is_materialised(&self, page: u64) -> bool {
        let group = page >> self.group_shift;
        self.materialised[(group / 64) as usize] & (1 << (group % 64)) != 0
    }

    /// Whether `page`'s block is not stored but derived from the initial counters.
    #[inline]
    fn is_derived(&self, page: u64) -> bool { !self.is_materialised(page) }

    /// The block stored for `page`.
    #[inline]
    fn stored(&self, page: usize) -> CounterBlock { CounterBlock { major: self.majors[page], minors: self.minors[page] } }

    #[inline]
    fn store(&mut self, page: usize, b: CounterBlock) {
        self.majors[page] = b.major;
        self.minors[page] = b.minors;
    }

    /// Whether the block stored for `page` is all zero. The minors come first: they are one
    /// line, and a page with a non-zero minor never needs its major read.
    #[inline]
    fn stored_is_zero(&self, page: usize) -> bool { self.minors[page] == [0; LINES_PER_PAGE as usize] && self.majors[page] == 0 }

    /// The counter block of `page`.
    #[inline]
    pub fn block(&self, page: u64) -> CounterBlock {
        if self.is_derived(page) {
            return self.initial_block(page);
        }
        self.stored(page as usize)
    }

    /// (major, minor) of a data line.
    #[inline]
    pub fn counter_of_line(&self, line: u64) -> (u64, u8) {
        let page = page_of_line(line);
        if self.is_derived(page) {
            return self.initial_block(page).counter_of(line_in_page(line));
        }
        (self.majors[page as usize], self.minors[page as usize][line_in_page(line)])
    }

    /// Bumps a data line's counter for a write.
    #[inline]
    pub fn bump_line(&mut self, line: u64) -> Bump {
        if self.bump_line_keeping_old(line).is_some() { Bump::Overflow } else { Bump::Minor }
    }

    /// Bumps a data line's counter for a write, as [`bump_line`](Self::bump_line); on an
    /// overflow, returns the page's block from before it (the counters its other lines are
    /// still encrypted under), else `None`. Only an overflow copies the block.
    #[inline]
    pub fn bump_line_keeping_old(&mut self, line: u64) -> Option<CounterBlock> {
        let bits = self.minor_bits;
        let (page, idx) = (page_of_line(line) as usize, line_in_page(line));
        if !self.is_materialised(page as u64) {
            self.materialise(page, true);
        } else if self.group_shift != 0 && self.stored_is_zero(page) {
            // Zero init: the first write to another page of a materialised group.
            self.touched += 1;
            self.first_touch(page);
        }
        let old = (self.minors[page][idx] >= minor_max(bits)).then(|| self.stored(page));
        bump_minor(&mut self.majors[page], &mut self.minors[page], idx, bits);
        old
    }

    /// Marks `page`'s group materialised and stores its initial block (under zero init, writes
    /// the zero minors of the group's host page before anything reads them: see the type's
    /// notes); `first_write` counts the page as touched, as a first bump from zero does.
    #[cold]
    #[inline(never)]
    fn materialise(&mut self, page: usize, first_write: bool) {
        let group = page >> self.group_shift;
        self.materialised[group / 64] |= 1 << (group % 64);
        if self.group_shift == 0 {
            let b = self.init.block(page as u64, self.minor_bits);
            self.store(page, b);
        } else {
            // Volatile, so that the compiler keeps this store of zeros over zeros. The majors
            // are left alone: they are read before an overflow first writes them, and
            // overflows are rare.
            if let Some(m) = self.minors.get_mut(group << self.group_shift) {
                // SAFETY: `m` is a valid, aligned, exclusive reference.
                unsafe { std::ptr::write_volatile(m, [0; LINES_PER_PAGE as usize]) };
            }
        }
        if first_write {
            self.touched += 1;
        }
        self.first_touch(page);
    }

    /// Host memory only: once a sixteenth, an eighth, ... of a huge-page region's pages have
    /// been written, offers the region of the minors array for collapsing into a huge page,
    /// which happens only when it is almost entirely resident already (dense random traffic)
    /// — so TLB misses drop without making a sparse store dense. (The majors array is read on
    /// first writes and written on overflows only, so it stays on small pages.)
    #[cold]
    #[inline(never)]
    fn first_touch(&mut self, page: usize) {
        let region = page / PAGES_PER_REGION as usize;
        let Some(n) = self.region_touches.get_mut(region) else { return };
        if *n == COLLAPSED {
            return;
        }
        *n += 1;
        if (*n).is_multiple_of(COLLAPSE_STEP) && self.minors.collapse_if_resident(page) {
            *n = COLLAPSED;
        }
    }

    /// Hints the host CPU to bring `line`'s minors, the one line a write's bump touches, into
    /// its caches (trace look-ahead).
    #[inline]
    pub fn prefetch_line(&self, line: u64) {
        #[cfg(target_arch = "x86_64")]
        if let Some(m) = self.minors.get(page_of_line(line) as usize) {
            // SAFETY: prefetch of a valid reference has no effect on program state.
            unsafe { std::arch::x86_64::_mm_prefetch(m.as_ptr() as *const i8, std::arch::x86_64::_MM_HINT_T0) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = line;
    }

    pub fn set_block(&mut self, page: u64, b: CounterBlock) {
        if !self.is_materialised(page) {
            self.materialise(page as usize, false);
        } else if self.group_shift != 0 && self.stored_is_zero(page as usize) {
            // Zero init: the first store to another page of a materialised group.
            self.first_touch(page as usize);
        }
        self.store(page as usize, b);
    }

    /// Every page whose block holds its own value (bumped or set since boot; under random
    /// init, materialised), ascending, with the block. Scans only the groups of the
    /// materialised bitmap some block was stored in: for a crash in counting mode, which keeps
    /// them as the persisted counters recovery reads back.
    pub fn changed_blocks(&self) -> Vec<(u64, CounterBlock)> {
        let pages = self.minors.len() as u64;
        let mut out = Vec::new();
        for (w, &word) in self.materialised.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let group = w as u64 * 64 + u64::from(bits.trailing_zeros());
                bits &= bits - 1;
                for p in group << self.group_shift..((group + 1) << self.group_shift).min(pages) {
                    // Under zero init, a page of a materialised group not written yet is still
                    // at its initial value.
                    if self.group_shift == 0 || !self.stored_is_zero(p as usize) {
                        out.push((p, self.stored(p as usize)));
                    }
                }
            }
        }
        out
    }
    /// Pages whose counters were ever bumped from their initial value.
    pub fn pages_touched(&self) -> u64 { self.touched }
    /// Random init: pages whose block was materialised (bumped or set at least once); with
    /// zero init, 0 (nothing to materialise). Scans the bitmap: for tests and reports.
    pub fn pages_materialised(&self) -> u64 {
        if self.group_shift != 0 {
            return 0;
        }
        self.materialised.iter().map(|w| w.count_ones() as u64).sum()
    }
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

    #[test]
    fn a_zero_initialised_store_keeps_no_bitmap_and_lists_only_non_zero_blocks() {
        assert!(InitialCounters::Zero.is_zero() && !InitialCounters::Random { seed: 0 }.is_zero());
        let mut s = CounterStore::new(7, 16);
        s.bump_line(3 * 64 + 5);
        s.set_block(7, CounterBlock::default());
        s.set_block(9, CounterBlock { major: 2, minors: [0; 64] });
        // Nothing is materialised under zero init; a block set back to all zeros is not a change.
        assert_eq!((s.pages_materialised(), s.pages_touched()), (0, 1));
        assert_eq!(s.changed_blocks().iter().map(|x| x.0).collect::<Vec<_>>(), vec![3, 9]);
    }

    #[test]
    fn an_overflowing_bump_returns_the_block_from_before_it_and_counts_no_second_first_touch() {
        let mut s = CounterStore::new(3, 4);
        s.bump_line(64 + 5);
        for i in 1..=7 {
            assert_eq!(s.bump_line_keeping_old(64 + 2), None, "write {i} of a 3-bit minor");
        }
        let old = s.bump_line_keeping_old(64 + 2).expect("the eighth write of a 3-bit minor overflows");
        assert_eq!((old.counter_of(2), old.counter_of(5), old.counter_of(6)), ((0, 7), (0, 1), (0, 0)));
        assert_eq!(s.block(1), CounterBlock { major: 1, minors: [0; 64] });
        // After the overflow every minor is zero again but the major is not: not a first touch.
        s.bump_line(64 + 9);
        assert_eq!(s.pages_touched(), 1);
        assert_eq!(s.changed_blocks().iter().map(|x| x.0).collect::<Vec<_>>(), vec![1]);
        // Random init: the block from before is the derived initial one with the line's minor
        // run up to its maximum.
        let mut r = CounterStore::with_init(7, 4, InitialCounters::Random { seed: 5 });
        let init = r.initial_block(2);
        for _ in init.minors[3]..127 {
            assert_eq!(r.bump_line_keeping_old(2 * 64 + 3), None);
        }
        let mut want = init;
        want.minors[3] = 127;
        assert_eq!(r.bump_line_keeping_old(2 * 64 + 3), Some(want));
        assert_eq!(r.counter_of_line(2 * 64 + 3), (init.major + 1, 0));
    }

    #[test]
    fn encode_keeps_only_the_low_minor_bits_of_each_minor() {
        // A minor wider than `minor_bits` (an 8-bit counting-mode value) must not spill its top
        // bit into its neighbour's field.
        let mut b = CounterBlock { major: 5, minors: [0; 64] };
        b.minors[0] = 0xFF;
        b.minors[10] = 0xC1;
        let d = CounterBlock::decode(&b.encode(7), 7);
        assert_eq!((d.major, d.minors[0], d.minors[1], d.minors[10], d.minors[11]), (5, 0x7F, 0, 0x41, 0));
        assert_eq!(b.encode(7)[8..10], [0x7F, 0x00]);
    }

    const SEED_A: InitialCounters = InitialCounters::Random { seed: 1 };

    #[test]
    fn the_same_seed_gives_the_same_initial_counters_and_another_seed_different_ones() {
        let (a, b) = (CounterStore::with_init(7, 64, SEED_A), CounterStore::with_init(7, 64, SEED_A));
        let other = CounterStore::with_init(7, 64, InitialCounters::Random { seed: 2 });
        for page in 0..64 {
            assert_eq!(a.block(page), b.block(page), "page {page}");
            assert_eq!(a.block(page).major, 0, "the major is not randomised");
            assert!(a.block(page).minors.iter().all(|&m| m < 128));
        }
        assert!((0..64).any(|p| a.block(p) != other.block(p)), "seed 2 gives other counters");
        assert_ne!(a.block(0), a.block(1), "each page has its own stream");
        // Over 64 pages x 64 minors the values cover the whole 7-bit range, both ends included.
        let all: Vec<u8> = (0..64).flat_map(|p| a.block(p).minors).collect();
        assert_eq!((all.iter().min(), all.iter().max()), (Some(&0), Some(&127)));
        // A fresh store after a crash starts from the same values.
        assert_eq!(CounterStore::with_init(7, 64, a.init()).block(9), a.block(9));
        assert_eq!(CounterStore::new(7, 64).block(9), CounterBlock::default(), "zero init");
    }

    #[test]
    fn a_randomly_initialised_seven_bit_minor_overflows_after_exactly_127_minus_init_writes() {
        let mut s = CounterStore::with_init(7, 16, SEED_A);
        // Hand-worked on the line whose initial minor is lowest and one whose is highest: the
        // (127 - init)-th write leaves it at 127, the next one overflows.
        for line in [(0..64u64).min_by_key(|&l| s.counter_of_line(l).1).unwrap(), (0..64u64).max_by_key(|&l| s.counter_of_line(l).1).unwrap()] {
            let mut s2 = CounterStore::with_init(7, 16, SEED_A);
            let init = s2.counter_of_line(line).1;
            for i in 1..=(127 - init) {
                assert_eq!(s2.bump_line(line), Bump::Minor, "line {line} (init {init}), write {i}");
            }
            assert_eq!(s2.counter_of_line(line), (0, 127));
            assert_eq!(s2.bump_line(line), Bump::Overflow, "line {line}: write {} overflows", 128 - init);
            assert_eq!(s2.counter_of_line(line), (1, 0));
        }
        // An initial minor of 127 overflows on the very first write.
        let page = (0..16).find(|&p| s.block(p).minors.contains(&127)).expect("some of 1024 minors is 127");
        let idx = s.block(page).minors.iter().position(|&m| m == 127).unwrap();
        assert_eq!(s.bump_line(page * 64 + idx as u64), Bump::Overflow);
    }

    #[test]
    fn seed_1_page_0_line_0_starts_at_65_and_overflows_on_its_63rd_write() {
        // Pinned: a change of the derivation changes every random-init figure.
        let mut s = CounterStore::with_init(7, 1, SEED_A);
        assert_eq!(s.block(0).minors[..4], [65, 76, 56, 63]);
        // 127 - 65 = 62 writes bring it to 127; the 63rd overflows.
        for _ in 0..62 {
            assert_eq!(s.bump_line(0), Bump::Minor);
        }
        assert_eq!(s.counter_of_line(0), (0, 127));
        assert_eq!(s.bump_line(0), Bump::Overflow);
        assert_eq!(s.block(0), CounterBlock { major: 1, minors: [0; 64] }, "the major advances, every minor resets");
    }

    #[test]
    fn random_initial_counters_materialise_only_the_pages_written() {
        let mut s = CounterStore::with_init(7, 1 << 20, SEED_A);
        for p in (0..1 << 20).step_by(4099) {
            let _ = s.block(p);
            let _ = s.counter_of_line(p * 64 + 3);
        }
        assert_eq!(s.pages_materialised(), 0, "reads derive the initial value without storing it");
        let written = [5u64, 77, 900_001, 1_000_000];
        for &p in &written {
            let before = s.block(p);
            s.bump_line(p * 64 + 1);
            s.bump_line(p * 64 + 1);
            let after = s.block(p);
            assert_eq!(after.minors[2..], before.minors[2..], "other minors keep their initial value");
        }
        s.set_block(6, CounterBlock { major: 3, minors: [1; 64] });
        assert_eq!(s.block(6).major, 3);
        assert_eq!((s.pages_materialised(), s.pages_touched()), (5, 4), "4 written + 1 set; touched counts writes");
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
        fn encoding_one_minor_in_place_gives_the_bytes_of_encoding_the_changed_block(
            major in any::<u64>(), minors in proptest::collection::vec(any::<u8>(), 64),
            idx in 0usize..64, new in any::<u8>(), bits in 1u32..=7,
        ) {
            let mask = ((1u16 << bits) - 1) as u8;
            let mut b = CounterBlock { major, minors: [0; 64] };
            for (i, m) in minors.iter().enumerate() { b.minors[i] = m & mask; }
            let mut bytes = b.encode(bits);
            CounterBlock::encode_one(&mut bytes, idx, new, bits);
            b.minors[idx] = new & mask;
            prop_assert_eq!(bytes, b.encode(bits));
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

    #[test]
    fn reading_counters_of_never_written_pages_leaves_their_host_memory_unmapped_until_a_write() {
        // 2^20 pages: 64 MiB of minors, in a mapping of their own. The 64 pages of a group
        // share one 4 KiB host page of minors; a read of one mapped the kernel's zero page
        // there, and the first write then had to flush every host CPU's TLB.
        let mut s = CounterStore::new(7, 1 << 20);
        let page = 5 * 64 + 3;
        let line = page * LINES_PER_PAGE + 9;
        let Some(mapped) = s.minors.is_page_mapped(page as usize) else { return }; // not Linux
        assert!(!mapped);
        assert_eq!(s.counter_of_line(line), (0, 0));
        assert_eq!(s.block(page + 1), CounterBlock::default());
        assert_eq!(s.minors.is_page_mapped(page as usize), Some(false), "reads of an unwritten group touch nothing");
        s.bump_line(line);
        assert_eq!(s.minors.is_page_mapped(page as usize), Some(true));
        assert_eq!((s.counter_of_line(line), s.counter_of_line(line + 1)), ((0, 1), (0, 0)));
        assert_eq!(s.block(page - 3), CounterBlock::default(), "another page of the written group");
        s.bump_line((page - 3) * LINES_PER_PAGE);
        assert_eq!(s.pages_touched(), 2);
        assert_eq!(s.changed_blocks().iter().map(|b| b.0).collect::<Vec<_>>(), [page - 3, page]);
        assert_eq!(s.minors.is_page_mapped(page as usize + 64), Some(false), "the next group's host page");
    }

    #[test]
    fn changed_blocks_lists_every_written_page_of_a_large_store() {
        // 2^20 pages: a store in its own huge-page mapping, where only the groups some block
        // was stored in are scanned. (Pages near the start of a late huge-page region were once
        // filed under the region before and skipped, when regions were what was scanned.)
        let pages = 1u64 << 20;
        let mut s = CounterStore::new(7, pages);
        assert!(s.minors.is_mapped(), "the test needs the sparse store");
        for p in [291_270, 200_000, pages - 1] {
            s.bump_line(p * 64);
        }
        s.set_block(500_000, CounterBlock { major: 3, ..CounterBlock::default() });
        let got: Vec<u64> = s.changed_blocks().iter().map(|x| x.0).collect();
        assert_eq!(got, vec![200_000, 291_270, 500_000, pages - 1]);
        // Every region's first page, the last page before it, and one in the middle.
        let mut s = CounterStore::new(7, pages);
        let mut want = Vec::new();
        for r in 1..pages / PAGES_PER_REGION {
            for p in [r * PAGES_PER_REGION - 1, r * PAGES_PER_REGION, r * PAGES_PER_REGION + PAGES_PER_REGION / 2] {
                s.bump_line(p * 64);
                want.push(p);
            }
        }
        want.sort_unstable();
        assert_eq!(s.changed_blocks().iter().map(|x| x.0).collect::<Vec<_>>(), want);
    }
}
