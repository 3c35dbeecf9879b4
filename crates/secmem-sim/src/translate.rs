//! Virtual-to-physical translation for traces of real programs.
//!
//! A trace captured from a program (valgrind lackey, a binary or text trace marked virtual)
//! carries the program's virtual addresses: a stack near 2^47, libraries and heaps scattered
//! over the address space. Before such records reach the caches, a [`Translator`] maps each
//! virtual page to a physical frame on first touch, as a kernel's demand paging does, and the
//! engine simulates the physical lines. Physical traces (Ramulator, DRAMSim3, memory-level,
//! the synthetic workloads) are not translated.
//!
//! * **Pages**: 4 KB or 2 MB (`translation.page_size`).
//! * **Placement** (`translation.placement`): `random` (the default) takes any free frame,
//!   drawn with a seed derived from `run.seed`, as physical memory is after some uptime:
//!   fragmented, so neighbouring virtual pages rarely share a DRAM row, a counter block's
//!   neighbourhood or a tree node; `sequential` gives frames in first-touch order.
//! * **Frames**: the data memory less the lines any registered design keeps records in at the
//!   top (`DesignEntry::data_lines_reserved`, as the OS model reserves them), so a trace lands
//!   in the same frames whichever design runs it. A program that touches more pages than that
//!   stops the run with an error naming the trace and both sizes.
//! * **Processes**: records carry no process id, so a trace is one address space (lackey and
//!   ChampSim traces are one process each).
//! * **Page-table walks** are not simulated: translation adds no memory traffic and no
//!   latency (a TLB that always hits). A walk's accesses would be four reads of page-table
//!   lines per TLB miss; with the hit rates of the traces secmem runs they are a small share
//!   of memory traffic, and which lines they touch depends on a page-table layout the trace
//!   does not record.

use rustc_hash::FxHashMap;
use secmem_core::{config_enum, config_section};

config_enum! {
    /// Whether a trace's addresses are virtual.
    pub enum AddressSpace {
        Auto => "auto": "as the trace says: lackey traces and binary or text traces marked virtual are translated, every other trace and the synthetic workload are physical",
        Virtual => "virtual": "translate every address (the synthetic workload too: its addresses are then virtual pages placed by translation.placement)",
        Physical => "physical": "addresses are physical; nothing is translated"
    }
}

config_enum! {
    /// The page size of translation.
    pub enum TranslationPageSize {
        Small => "4k": "4 KB pages",
        Huge => "2m": "2 MB pages (transparent huge pages)"
    }
}

config_enum! {
    /// Where a newly touched page is placed.
    pub enum Placement {
        Random => "random": "any free frame, drawn with a seed derived from run.seed (fragmented memory after uptime)",
        Sequential => "sequential": "frames in first-touch order, from the bottom of memory"
    }
}

config_section! {
    /// Virtual-to-physical translation of traces of real programs.
    pub struct TranslationConfig {
        addresses: AddressSpace = AddressSpace::Auto => "auto (as the trace says), virtual or physical; the resolved config of a run says which was used";
        page_size: TranslationPageSize = TranslationPageSize::Small => "Page size: 4k or 2m";
        placement: Placement = Placement::Random => "random (seeded from run.seed) or sequential frame placement on first touch";
    }
}

impl TranslationPageSize {
    pub fn bytes(self) -> u64 {
        match self {
            TranslationPageSize::Small => 4096,
            TranslationPageSize::Huge => 2 << 20,
        }
    }
}

/// Maps virtual pages to physical frames on first touch (see the module documentation).
#[derive(Clone, Debug)]
pub struct Translator {
    page_shift: u32,
    /// Frames that may be handed out: `0..frames`.
    frames: u64,
    placement: Placement,
    /// Virtual page -> frame.
    map: PageMap,
    /// Recent translations, direct-mapped by virtual page (`(vpn, frame)`, `u64::MAX`: empty):
    /// the host's TLB. The engine translates a record when it enters the look-ahead window
    /// and again when it is stepped; the second finds it here, not in `map`.
    recent: Box<[(u64, u64); RECENT]>,
    /// Random placement: a Fisher-Yates shuffle of `0..frames` drawn lazily, one step per
    /// page mapped; `moved[j]` is the frame now at position `j` when it is not `j` itself.
    moved: FxHashMap<u64, u64>,
    rng: u64,
}

/// Entries of [`Translator`]'s recent-translation table: far more than the 16 records of the
/// engine's look-ahead window, so that their pages seldom evict each other.
const RECENT: usize = 256;

/// A translation that cannot be done: every frame is mapped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfFrames {
    pub pages_mapped: u64,
    pub page_bytes: u64,
    pub memory_bytes: u64,
}

impl std::fmt::Display for OutOfFrames {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the program touches more than the {} bytes of memory it can be given ({} pages of {} bytes mapped, all frames in use): raise memory.capacity_gib",
            self.memory_bytes, self.pages_mapped, self.page_bytes
        )
    }
}

impl Translator {
    /// A translator over `memory_bytes` of frames (whole pages only), seeded with `seed`.
    pub fn new(cfg: &TranslationConfig, memory_bytes: u64, seed: u64) -> Translator {
        let page = cfg.page_size.bytes();
        Translator {
            page_shift: page.trailing_zeros(),
            frames: memory_bytes / page,
            placement: cfg.placement,
            map: PageMap::new(),
            recent: Box::new([(u64::MAX, 0); RECENT]),
            moved: FxHashMap::default(),
            // Its own stream: the same seed gives the workload generator another.
            rng: seed ^ 0x7472_616e_736c_6174,
        }
    }

    pub fn page_bytes(&self) -> u64 { 1 << self.page_shift }

    /// Pages mapped so far.
    pub fn pages_mapped(&self) -> u64 { self.map.len as u64 }

    /// Asks the host CPU to fetch the page-map slot of virtual `addr`, for a translation a
    /// few records later (the engine's look-ahead). Changes nothing.
    #[inline(always)]
    pub fn prefetch(&self, addr: u64) { self.map.prefetch(addr >> self.page_shift) }

    /// The physical address of virtual `addr`, mapping its page if this is its first touch.
    #[inline]
    pub fn translate(&mut self, addr: u64) -> Result<u64, OutOfFrames> {
        let vpn = addr >> self.page_shift;
        let offset = addr & ((1 << self.page_shift) - 1);
        let slot = Self::recent_slot(vpn);
        let frame = match self.recent[slot] {
            (v, f) if v == vpn => f,
            _ => {
                let f = match self.map.get(vpn) {
                    Some(f) => f,
                    None => {
                        let f = self.next_frame()?;
                        self.map.insert(vpn, f);
                        f
                    }
                };
                self.recent[slot] = (vpn, f);
                f
            }
        };
        Ok((frame << self.page_shift) | offset)
    }

    #[inline(always)]
    fn recent_slot(vpn: u64) -> usize { (vpn.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - RECENT.trailing_zeros())) as usize }

    /// The physical address of virtual `addr` if its page is mapped; maps nothing.
    #[inline]
    pub fn peek(&self, addr: u64) -> Option<u64> {
        let vpn = addr >> self.page_shift;
        let frame = match self.recent[Self::recent_slot(vpn)] {
            (v, f) if v == vpn => f,
            _ => self.map.get(vpn)?,
        };
        Some((frame << self.page_shift) | (addr & ((1 << self.page_shift) - 1)))
    }

    /// The frame for the next page mapped.
    fn next_frame(&mut self) -> Result<u64, OutOfFrames> {
        let k = self.map.len as u64;
        if k >= self.frames {
            return Err(OutOfFrames { pages_mapped: k, page_bytes: self.page_bytes(), memory_bytes: self.frames << self.page_shift });
        }
        Ok(match self.placement {
            Placement::Sequential => k,
            Placement::Random => {
                // Step k of a Fisher-Yates shuffle: swap position k with a position drawn
                // from k..frames, and hand out what lands at k.
                let j = k + self.draw(self.frames - k);
                let at_j = self.moved.get(&j).copied().unwrap_or(j);
                let at_k = self.moved.get(&k).copied().unwrap_or(k);
                self.moved.insert(j, at_k);
                self.moved.remove(&k);
                at_j
            }
        })
    }

    /// A number in `0..n` (SplitMix64, then Lemire's multiply-shift; the bias is below
    /// n / 2^64, far under a part in 10^9 for any memory here).
    fn draw(&mut self, n: u64) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((u128::from(z) * u128::from(n)) >> 64) as u64
    }
}

/// Virtual page -> frame: open addressing with linear probing over a power-of-two table kept
/// at most half full, so that the slot a page lands in is known from its number alone and
/// can be fetched ahead ([`PageMap::prefetch`]); a general hash map offers no such hint, and
/// on a random trace over gigabytes every lookup missed the host caches.
#[derive(Clone, Debug)]
struct PageMap {
    /// `(vpn + 1, frame)`; a key of 0 is an empty slot.
    slots: Vec<(u64, u64)>,
    len: usize,
}

impl PageMap {
    fn new() -> PageMap { PageMap { slots: vec![(0, 0); 1 << 10], len: 0 } }

    #[inline(always)]
    fn home(&self, vpn: u64) -> usize {
        // Fibonacci hashing: neighbouring pages land far apart, so a run of them never probes long.
        (vpn.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - self.slots.len().trailing_zeros())) as usize
    }

    #[inline]
    fn get(&self, vpn: u64) -> Option<u64> {
        let mask = self.slots.len() - 1;
        let mut i = self.home(vpn);
        loop {
            let (k, f) = self.slots[i];
            if k == vpn + 1 {
                return Some(f);
            }
            if k == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// Maps `vpn` (not mapped yet) to `frame`.
    fn insert(&mut self, vpn: u64, frame: u64) {
        if (self.len + 1) * 2 > self.slots.len() {
            let grown = vec![(0, 0); self.slots.len() * 2];
            let old = std::mem::replace(&mut self.slots, grown);
            self.len = 0;
            for (k, f) in old.into_iter().filter(|&(k, _)| k != 0) {
                self.insert(k - 1, f);
            }
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(vpn);
        while self.slots[i].0 != 0 {
            i = (i + 1) & mask;
        }
        self.slots[i] = (vpn + 1, frame);
        self.len += 1;
    }

    #[inline(always)]
    fn prefetch(&self, vpn: u64) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch of an address inside `slots` (`home` is below its length); it
        // reads nothing and cannot fault.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch(self.slots.as_ptr().add(self.home(vpn)) as *const i8, _MM_HINT_T0);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = vpn;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(page_size: TranslationPageSize, placement: Placement) -> TranslationConfig {
        TranslationConfig { addresses: AddressSpace::Virtual, page_size, placement }
    }

    #[test]
    fn a_page_keeps_its_frame_and_its_offset_survives() {
        let mut t = Translator::new(&cfg(TranslationPageSize::Small, Placement::Random), 1 << 30, 1);
        let a = t.translate(0x7fff_0000_1234).unwrap();
        assert_eq!(a & 0xfff, 0x234);
        assert_eq!(t.translate(0x7fff_0000_1ff8).unwrap(), (a & !0xfff) | 0xff8);
        assert!(a < 1 << 30);
        assert_eq!(t.pages_mapped(), 1);
    }

    #[test]
    fn the_page_map_finds_every_page_it_mapped_across_growth_and_no_other() {
        let mut m = PageMap::new();
        let pages: Vec<u64> = (0..5000u64).map(|i| i.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 28).collect();
        for (f, &p) in pages.iter().enumerate() {
            m.insert(p, f as u64);
        }
        assert_eq!(m.len, 5000);
        assert!(m.slots.len() >= 10_000, "kept at most half full");
        for (f, &p) in pages.iter().enumerate() {
            assert_eq!(m.get(p), Some(f as u64), "page {p:#x}");
        }
        assert_eq!(m.get(u64::MAX - 7), None);
        // Page 0 (the first of `pages`) and the largest page are keys like any other.
        m.insert(u64::MAX - 1, 10);
        assert_eq!((m.get(0), m.get(u64::MAX - 1)), (Some(0), Some(10)));
    }

    #[test]
    fn peeking_translates_mapped_pages_and_maps_nothing() {
        let mut t = Translator::new(&cfg(TranslationPageSize::Small, Placement::Sequential), 1 << 30, 1);
        assert_eq!(t.peek(0x7000_0000_0010), None);
        assert_eq!(t.pages_mapped(), 0);
        let a = t.translate(0x7000_0000_0010).unwrap();
        t.translate(0x1000).unwrap();
        assert_eq!(t.peek(0x7000_0000_0ff0), Some((a & !0xfff) | 0xff0));
        assert_eq!(t.pages_mapped(), 2);
    }

    #[test]
    fn sequential_placement_hands_out_frames_in_first_touch_order() {
        let mut t = Translator::new(&cfg(TranslationPageSize::Huge, Placement::Sequential), 8 << 20, 1);
        assert_eq!(t.translate(0x5555_0000_0000).unwrap(), 0);
        assert_eq!(t.translate(0x7ffd_f000_0010).unwrap(), (2 << 20) | 0x10);
        assert_eq!(t.translate(0x5555_0000_0040).unwrap(), 0x40);
    }

    #[test]
    fn random_placement_is_a_permutation_of_every_frame_and_the_seed_decides_it() {
        let frames = 1000u64;
        let place = |seed| {
            let mut t = Translator::new(&cfg(TranslationPageSize::Small, Placement::Random), frames * 4096, seed);
            (0..frames).map(|p| t.translate(p << 12).unwrap() >> 12).collect::<Vec<_>>()
        };
        let a = place(1);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..frames).collect::<Vec<_>>(), "every frame exactly once");
        assert_eq!(a, place(1), "same seed, same placement");
        assert_ne!(a, place(2), "another seed, another placement");
        // Fragmented: consecutive virtual pages are rarely neighbours in memory.
        let adjacent = a.windows(2).filter(|w| w[1] == w[0] + 1).count();
        assert!(adjacent < 10, "{adjacent} of {frames} consecutive pages stayed adjacent");
    }

    #[test]
    fn a_footprint_larger_than_memory_is_an_error_naming_both_sizes() {
        let mut t = Translator::new(&cfg(TranslationPageSize::Small, Placement::Random), 4 * 4096, 1);
        for p in 0..4u64 {
            t.translate(p << 12).unwrap();
        }
        let e = t.translate(4 << 12).unwrap_err();
        assert_eq!(e, OutOfFrames { pages_mapped: 4, page_bytes: 4096, memory_bytes: 4 * 4096 });
        assert!(e.to_string().contains("16384 bytes") && e.to_string().contains("memory.capacity_gib"), "{e}");
        // Pages already mapped still translate.
        assert!(t.translate(3 << 12).is_ok());
    }
}
