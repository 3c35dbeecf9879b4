//! A set-associative cache of 64 B lines: real sets, real ways, real victims.
//!
//! One type serves the L1/L2/LLC data caches and the counter/MAC/tree metadata caches of the
//! memory controller. It stores tags (line indices), dirty bits and replacement state in flat
//! arrays (one row of `ways` per set) so a lookup touches one or two host cache lines. Line
//! *contents* are kept only when asked (`with_data`), for functional mode and for traces that
//! carry data.

use crate::config_enum;
use crate::config_section;
use crate::error::{ensure, ConfigError};

config_enum! {
    /// Victim selection within a set.
    pub enum Replacement {
        Lru => "lru": "least recently used way is evicted",
        Fifo => "fifo": "oldest filled way is evicted",
        Random => "random": "a pseudo-random way is evicted (seeded, deterministic)"
    }
}

config_section! {
    /// One cache: geometry, latency and policies.
    pub struct CacheConfig {
        size_kib: u64 = 64 => "Capacity in KiB (64 B lines)";
        ways: u32 = 8 => "Associativity (ways per set); ways * 64 B * sets = size";
        latency_cycles: u64 = 2 => "Hit latency in CPU cycles";
        replacement: Replacement = Replacement::Lru => "Replacement policy: lru, fifo or random";
    }
}

impl CacheConfig {
    pub fn new(size_kib: u64, ways: u32, latency_cycles: u64) -> Self {
        CacheConfig { size_kib, ways, latency_cycles, ..Default::default() }
    }
    pub fn lines(&self) -> u64 { self.size_kib * 1024 / 64 }
    pub fn sets(&self) -> u64 { self.lines() / self.ways.max(1) as u64 }

    /// Rejects geometries no cache can have, naming `path.field`.
    pub fn validate(&self, path: &str) -> Result<(), ConfigError> {
        ensure(self.size_kib > 0, &format!("{path}.size_kib"), || "must be > 0".into())?;
        ensure(self.size_kib <= MAX_CACHE_KIB, &format!("{path}.size_kib"), || {
            format!("{} KiB is larger than the {} KiB (4 GiB) secmem simulates", self.size_kib, MAX_CACHE_KIB)
        })?;
        ensure(self.ways <= 4096, &format!("{path}.ways"), || format!("must be <= 4096, got {}", self.ways))?;
        ensure(self.ways > 0, &format!("{path}.ways"), || "must be > 0".into())?;
        crate::error::ensure_latency_cycles(self.latency_cycles, &format!("{path}.latency_cycles"))?;
        let lines = self.lines();
        ensure((self.size_kib * 1024).is_multiple_of(64) && lines >= self.ways as u64, &format!("{path}.size_kib"), || {
            format!("{} KiB holds {} lines, fewer than one set of {} ways", self.size_kib, lines, self.ways)
        })?;
        ensure(lines.is_multiple_of(self.ways as u64), &format!("{path}.ways"), || {
            format!("{} lines do not divide into sets of {} ways", lines, self.ways)
        })?;
        Ok(())
    }
}

/// Largest simulated cache (4 GiB): beyond this the tag arrays would not fit a host.
pub const MAX_CACHE_KIB: u64 = 4 << 20;

/// Tag value of an empty way.
const INVALID: u64 = u64::MAX >> 1;
/// The dirty bit is kept in the tag word's top bit (line indices are < 2^58), so a lookup
/// and a dirty check touch the same host cache line.
const DIRTY: u64 = 1 << 63;

/// A line pushed out of the cache to make room.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Victim {
    pub line: u64,
    pub dirty: bool,
    /// Slot it occupied (its data, if kept, is still readable there until overwritten).
    pub slot: usize,
}

/// Hit/miss/eviction counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub dirty_evictions: u64,
}

impl CacheStats {
    pub fn hit_rate(&self) -> f64 {
        let total = self.hits + self.misses;
        if total == 0 { 0.0 } else { self.hits as f64 / total as f64 }
    }
    pub fn since(&self, s: &CacheStats) -> CacheStats {
        CacheStats {
            hits: self.hits - s.hits,
            misses: self.misses - s.misses,
            evictions: self.evictions - s.evictions,
            dirty_evictions: self.dirty_evictions - s.dirty_evictions,
        }
    }
}

#[derive(Clone)]
pub struct SetAssocCache {
    ways: usize,
    sets: u64,
    /// `sets - 1` if `sets` is a power of two (a line's set is its low bits), else
    /// [`NO_SET_MASK`] (its set is the line modulo `sets`). A plain word, not an `Option`:
    /// one load and compare on every lookup instead of two.
    set_mask: u64,
    search: Search,
    /// `tags[set * ways + way]` = line index | DIRTY, or INVALID.
    tags: Vec<u64>,
    /// Per slot, when `ways` is a multiple of 8: a one-byte fingerprint of its line
    /// ([`fingerprint`]), 0 if empty, so that a lookup compares eight ways per word and reads
    /// only the tags whose fingerprint matches. Empty otherwise.
    fps: Vec<u8>,
    /// Recency order of each set: a list of its ways whose head is the most recently used
    /// (LRU) or filled (FIFO) way and whose tail is the next victim. Empty ways are kept at
    /// the tail, so a fill takes the tail whatever the associativity, and a hit moves its way
    /// to the head.
    order: Order,
    rng_state: u64,
    replacement: Replacement,
    data: Option<Vec<Line>>,
    pub stats: CacheStats,
    /// The line of the most recent hit or fill and its slot, or `INVALID`: its way is the head
    /// of its set's recency order (any later hit or fill in that set would have replaced this
    /// memo), so looking it up again needs no search and no reordering — the same result as
    /// the full lookup, for every replacement policy. Streams that touch one metadata block
    /// many times in a row (sequential traffic: 64 lines per counter block) hit it.
    last: (u64, usize),
}

const NIL: u16 = u16::MAX;

/// A line's 64 B content, aligned to a host cache line: a `Vec<[u8; 64]>` is only as aligned
/// as the allocator makes it (16 B), so most slots straddled two host cache lines, and an
/// access (or a prefetch of the slot's first byte) brought in only half of one.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// The recency lists of every set, in one of two exact representations of the same list.
#[derive(Clone)]
enum Order {
    /// Up to 16 ways: each set's list in one word, as 4-bit way numbers from the head (bits
    /// 0..4) to the tail (nibble `ways - 1`); unused nibbles above hold 0xF. Moving a way is
    /// a few word operations, and a set's whole order is 8 bytes.
    /// `list` is the mask of the `ways` used nibbles and `tail_shift` the tail nibble's bit
    /// offset, both fixed by `ways` and kept so that a fill does not recompute them.
    Packed { words: Vec<u64>, ways: u32, list: u64, tail_shift: u32 },
    /// More ways: a doubly linked list of ways per set (u16 links; `ways` <= 65535), O(1) per
    /// move.
    Linked { next: Vec<u16>, prev: Vec<u16>, head: Vec<u16>, tail: Vec<u16> },
}

const NIBBLE_ONES: u64 = 0x1111_1111_1111_1111;
const BYTE_ONES: u64 = 0x0101_0101_0101_0101;

/// A line's one-byte fingerprint: seven bits of a multiplicative hash, top bit set (never 0,
/// the empty way's).
#[inline(always)]
fn fingerprint(line: u64) -> u8 { ((line.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 57) as u8) | 0x80 }

/// Bit `w` set for each way `w` of `fps` (8 or 16 fingerprints, one set's) equal to `fp`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn fingerprint_matches<const WAYS: usize>(fps: &[u8; WAYS], fp: u8) -> u32 {
    use std::arch::x86_64::{__m128i, _mm_cmpeq_epi8, _mm_loadl_epi64, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8};
    const { assert!(WAYS == 8 || WAYS == 16, "fingerprint_matches on 8 or 16 ways") };
    // SAFETY: SSE2 is part of x86_64. The loads read exactly `WAYS` bytes (16, or 8 with
    // `_mm_loadl_epi64`, which zeroes the upper half; a fingerprint is never 0, so those
    // lanes never match).
    unsafe {
        let v = if WAYS == 16 {
            _mm_loadu_si128(fps.as_ptr() as *const __m128i)
        } else {
            _mm_loadl_epi64(fps.as_ptr() as *const __m128i)
        };
        _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(fp as i8))) as u32
    }
}

/// How [`SetAssocCache::find`] searches a set, fixed by the associativity when the cache is
/// built, so that a lookup takes one `match` instead of testing on every call whether
/// fingerprints are kept and how many ways there are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Search {
    /// No fingerprints (the associativity is not a multiple of 8): compare every tag.
    Tags,
    /// Two ways (Horus Table I's L1): both tags compared, without the loop of `Tags`.
    Two,
    /// 8 ways (x86_64): one SSE2 compare of the set's fingerprints.
    Sse8,
    /// 16 ways (x86_64): the same.
    Sse16,
    /// Other multiples of 8 (and 8 or 16 elsewhere): the fingerprints eight to a word.
    Words,
}

impl Search {
    fn for_ways(ways: usize) -> Search {
        match ways {
            2 => Search::Two,
            8 if cfg!(target_arch = "x86_64") => Search::Sse8,
            16 if cfg!(target_arch = "x86_64") => Search::Sse16,
            w if w.is_multiple_of(8) => Search::Words,
            _ => Search::Tags,
        }
    }
}

/// [`SetAssocCache::set_mask`] of a cache whose number of sets is not a power of two.
const NO_SET_MASK: u64 = u64::MAX;

/// Mask of nibbles `0..n` (n <= 16).
#[inline(always)]
fn nibbles_below(n: u32) -> u64 { (!0u64).checked_shl(4 * n).map_or(!0, |m| !m) }

/// Position (from the head) of way `w` in a packed list; `w` must be in it.
#[inline(always)]
fn packed_pos(word: u64, w: u32) -> u32 {
    let x = word ^ (w as u64).wrapping_mul(NIBBLE_ONES);
    // The lowest zero nibble of x is exact (borrows only create false positives above it).
    let z = x.wrapping_sub(NIBBLE_ONES) & !x & (NIBBLE_ONES << 3);
    z.trailing_zeros() / 4
}

/// Word `set` of a packed order, unchecked. Every caller's set comes from
/// [`SetAssocCache::set_of`] or from a slot already read (`slot / ways`), so it is below
/// `sets`, the number of words: the bounds check, on every hit and fill, would never fail.
#[inline(always)]
fn packed_word(words: &[u64], set: usize) -> u64 {
    debug_assert!(set < words.len());
    // SAFETY: `set < words.len()`, as above.
    unsafe { *words.get_unchecked(set) }
}

/// [`packed_word`], to update.
#[inline(always)]
fn packed_word_mut(words: &mut [u64], set: usize) -> &mut u64 {
    debug_assert!(set < words.len());
    // SAFETY: as in `packed_word`.
    unsafe { words.get_unchecked_mut(set) }
}

/// The `N` items of one set in a per-slot array: slots `base..base + N`.
///
/// # Safety
/// `base + N <= v.len()`: `base` is `set * ways` with `set < sets`, `N == ways`, and `v` holds
/// one item per slot (`sets * ways`).
#[inline(always)]
unsafe fn set_ways<T, const N: usize>(v: &[T], base: usize) -> &[T; N] {
    debug_assert!(base + N <= v.len());
    // SAFETY: the range is in bounds (the caller's promise), and `[T; N]` has `T`'s alignment.
    unsafe { &*(v.as_ptr().add(base) as *const [T; N]) }
}

impl Order {
    fn new(sets: usize, ways: usize) -> Order { Self::with_packing(sets, ways, ways <= 16) }

    fn with_packing(sets: usize, ways: usize, packed: bool) -> Order {
        if packed {
            assert!(ways <= 16, "a packed order holds at most 16 ways");
            // Head = way ways-1 ... tail = way 0, so ways fill 0, 1, 2, ...
            let mut word = 0u64;
            for k in 0..16u32 {
                let nib = if (k as usize) < ways { (ways - 1 - k as usize) as u64 } else { 0xF };
                word |= nib << (4 * k);
            }
            let ways = ways as u32;
            return Order::Packed { words: vec![word; sets], ways, list: nibbles_below(ways), tail_shift: 4 * (ways - 1) };
        }
        let n = sets * ways;
        let mut next = vec![NIL; n];
        let mut prev = vec![NIL; n];
        for set in 0..sets {
            let base = set * ways;
            for w in 0..ways {
                // head = ways-1 ... tail = 0; next points towards the tail.
                next[base + w] = if w == 0 { NIL } else { (w - 1) as u16 };
                prev[base + w] = if w + 1 == ways { NIL } else { (w + 1) as u16 };
            }
        }
        Order::Linked { next, prev, head: vec![(ways - 1) as u16; sets], tail: vec![0; sets] }
    }

    /// The tail (next victim) of `set`.
    #[inline(always)]
    fn tail(&self, set: usize) -> usize {
        match self {
            Order::Packed { words, tail_shift, .. } => ((packed_word(words, set) >> tail_shift) & 0xF) as usize,
            Order::Linked { tail, .. } => tail[set] as usize,
        }
    }

    /// Moves way `w` of `set` (`base` = its first slot) to the head.
    #[inline(always)]
    fn move_to_head(&mut self, set: usize, base: usize, w: u16) {
        match self {
            Order::Packed { words, .. } => {
                let word = packed_word(words, set);
                let p = packed_pos(word, w as u32);
                let below = nibbles_below(p);
                let above = !nibbles_below(p + 1);
                *packed_word_mut(words, set) = (word & above) | ((word & below) << 4) | w as u64;
            }
            Order::Linked { next, prev, head, tail } => {
                if head[set] != w {
                    Self::unlink(next, prev, head, tail, set, base, w);
                    let h = head[set];
                    prev[base + w as usize] = NIL;
                    next[base + w as usize] = h;
                    if h == NIL { tail[set] = w } else { prev[base + h as usize] = w }
                    head[set] = w;
                }
            }
        }
    }

    /// The way nearest the tail of `set` (`base` = its first slot) among `ways` (the least
    /// recently used of them under LRU).
    fn last_among(&self, set: usize, base: usize, n_ways: usize, ways: &std::ops::Range<usize>) -> usize {
        match self {
            Order::Packed { words, .. } => {
                let word = packed_word(words, set);
                (0..n_ways).rev().map(|p| ((word >> (4 * p)) & 0xF) as usize).find(|w| ways.contains(w)).expect("a non-empty way range")
            }
            Order::Linked { prev, tail, .. } => {
                let mut w = tail[set];
                while !ways.contains(&(w as usize)) {
                    w = prev[base + w as usize];
                }
                w as usize
            }
        }
    }

    /// Moves the tail way `w` of `set` to the head (a fill).
    #[inline(always)]
    fn tail_to_head(&mut self, set: usize, base: usize, w: u16) {
        match self {
            Order::Packed { words, list, .. } => {
                let word = packed_word(words, set);
                *packed_word_mut(words, set) = (word & !*list) | ((word << 4) & *list) | w as u64;
            }
            Order::Linked { .. } => self.move_to_head(set, base, w),
        }
    }

    /// Moves way `w` of `set` to the tail (an invalidation: the empty way is the next victim).
    #[inline]
    fn move_to_tail(&mut self, set: usize, base: usize, w: u16) {
        match self {
            Order::Packed { words, ways, .. } => {
                let word = packed_word(words, set);
                let p = packed_pos(word, w as u32);
                let t = *ways - 1;
                let mid = (word & nibbles_below(t + 1) & !nibbles_below(p + 1)) >> 4;
                *packed_word_mut(words, set) = (word & nibbles_below(p)) | mid | ((w as u64) << (4 * t)) | (word & !nibbles_below(t + 1));
            }
            Order::Linked { next, prev, head, tail } => {
                Self::unlink(next, prev, head, tail, set, base, w);
                let t = tail[set];
                next[base + w as usize] = NIL;
                prev[base + w as usize] = t;
                if t == NIL { head[set] = w } else { next[base + t as usize] = w }
                tail[set] = w;
            }
        }
    }

    #[inline(always)]
    fn unlink(next: &mut [u16], prev: &mut [u16], head: &mut [u16], tail: &mut [u16], set: usize, base: usize, w: u16) {
        let (p, n) = (prev[base + w as usize], next[base + w as usize]);
        if p == NIL { head[set] = n } else { next[base + p as usize] = n }
        if n == NIL { tail[set] = p } else { prev[base + n as usize] = p }
    }

    /// Hints the host CPU to fetch `set`'s order.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn prefetch(&self, set: usize, base: usize) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: prefetching an in-bounds address has no effect on program state.
        unsafe {
            match self {
                Order::Packed { words, .. } => _mm_prefetch(words.as_ptr().add(set) as *const i8, _MM_HINT_T0),
                Order::Linked { next, prev, head, tail } => {
                    _mm_prefetch(next.as_ptr().add(base) as *const i8, _MM_HINT_T0);
                    _mm_prefetch(prev.as_ptr().add(base) as *const i8, _MM_HINT_T0);
                    _mm_prefetch(head.as_ptr().add(set) as *const i8, _MM_HINT_T0);
                    _mm_prefetch(tail.as_ptr().add(set) as *const i8, _MM_HINT_T0);
                }
            }
        }
    }
}

impl SetAssocCache {
    /// Builds a cache; the config must have passed `validate`.
    pub fn new(cfg: &CacheConfig) -> Self {
        Self::with_geometry(cfg.sets(), cfg.ways as usize, cfg.replacement)
    }

    /// Builds a cache of exactly `sets` x `ways` lines (tests use sub-KiB geometries).
    pub fn with_geometry(sets: u64, ways: usize, replacement: Replacement) -> Self {
        assert!(ways >= 1 && ways < NIL as usize, "associativity must be 1..65535");
        let n = sets as usize * ways;
        let search = Search::for_ways(ways);
        SetAssocCache {
            ways,
            sets,
            set_mask: if sets.is_power_of_two() { sets - 1 } else { NO_SET_MASK },
            search,
            tags: vec![INVALID; n],
            // Every search but the plain tag compare reads fingerprints.
            fps: if matches!(search, Search::Tags | Search::Two) { Vec::new() } else { vec![0; n] },
            order: Order::new(sets as usize, ways),
            rng_state: 0x9E37_79B9_7F4A_7C15,
            last: (INVALID, 0),
            replacement,
            data: None,
            stats: CacheStats::default(),
        }
    }

    /// Also keep the 64 B content of every line.
    pub fn with_data(mut self) -> Self {
        // A 16 MiB LLC's content is touched at a random slot by every fill: huge pages keep
        // those accesses within the host TLB's reach. The advice goes on the still untouched
        // allocation, so that filling it with zeros faults huge pages in (`vec![..; n]` of
        // arrays writes every element, which would fault 4 KiB pages first).
        let mut data = Vec::with_capacity(self.tags.len());
        crate::hostmem::advise_huge_pages(data.spare_capacity_mut());
        data.resize(self.tags.len(), Line([0u8; 64]));
        self.data = Some(data);
        self
    }

    pub fn ways(&self) -> usize { self.ways }
    pub fn sets(&self) -> u64 { self.sets }
    pub fn capacity_lines(&self) -> usize { self.tags.len() }

    #[inline]
    fn set_of(&self, line: u64) -> usize {
        if self.set_mask != NO_SET_MASK {
            (line & self.set_mask) as usize
        } else {
            (line % self.sets) as usize
        }
    }

    #[inline(always)]
    fn find(&self, line: u64) -> Option<usize> {
        let base = self.set_of(line) * self.ways;
        self.way_of(base, line).map(|w| base + w)
    }

    /// The way of the set starting at slot `base` that holds `line`. Common associativities
    /// compare every way without branches (a hit's way is unpredictable); a line is in at
    /// most one way, so this is the first match.
    #[inline(always)]
    fn way_of(&self, base: usize, line: u64) -> Option<usize> {
        match self.search {
            Search::Tags => self.tags[base..base + self.ways].iter().position(|&t| t & !DIRTY == line),
            Search::Two => {
                // SAFETY: `base` is `set * ways` for a set below `sets` and `ways == 2` (see
                // `set_ways`).
                let [a, b] = *unsafe { set_ways::<u64, 2>(&self.tags, base) };
                if a & !DIRTY == line {
                    Some(0)
                } else {
                    (b & !DIRTY == line).then_some(1)
                }
            }
            // 8 and 16 ways (every preset's metadata caches, L2 and LLC): one SSE2 byte compare
            // gives every candidate way as a bit, with no loop over words. Every candidate's
            // tag is checked, so the result is exact.
            #[cfg(target_arch = "x86_64")]
            Search::Sse8 => self.way_by_sse::<8>(base, line),
            #[cfg(target_arch = "x86_64")]
            Search::Sse16 => self.way_by_sse::<16>(base, line),
            #[cfg(not(target_arch = "x86_64"))]
            Search::Sse8 | Search::Sse16 => unreachable!("SSE2 search chosen off x86_64"),
            Search::Words => self.way_by_words(base, line),
        }
    }

    /// [`way_of`](Self::way_of) for a set of `WAYS` (8 or 16) fingerprinted ways.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn way_by_sse<const WAYS: usize>(&self, base: usize, line: u64) -> Option<usize> {
        // SAFETY: `base` is `set * ways` for a set below `sets` (see `set_ways`), and this search
        // is chosen only when `ways == WAYS` and fingerprints are kept (`fps` as long as `tags`).
        let (fps, tags) = unsafe { (set_ways::<u8, WAYS>(&self.fps, base), set_ways::<u64, WAYS>(&self.tags, base)) };
        let mut m = fingerprint_matches(fps, fingerprint(line));
        while m != 0 {
            let w = m.trailing_zeros() as usize;
            if tags[w] & !DIRTY == line {
                return Some(w);
            }
            m &= m - 1;
        }
        None
    }

    /// [`way_of`](Self::way_of) for any multiple of 8 ways: eight fingerprints per word. A
    /// zero byte of `x` is a candidate way. The lowest zero byte is always found, borrows
    /// may add false candidates above it; every candidate's tag is checked, so the result
    /// is exact.
    #[inline(always)]
    fn way_by_words(&self, base: usize, line: u64) -> Option<usize> {
        let fps = &self.fps[base..base + self.ways];
        let tags = &self.tags[base..base + self.ways];
        let probe = (fingerprint(line) as u64).wrapping_mul(BYTE_ONES);
        for (chunk, word) in fps.chunks_exact(8).enumerate() {
            let x = u64::from_le_bytes(word.try_into().expect("8 bytes")) ^ probe;
            let mut m = x.wrapping_sub(BYTE_ONES) & !x & (BYTE_ONES << 7);
            while m != 0 {
                let w = chunk * 8 + (m.trailing_zeros() / 8) as usize;
                if tags[w] & !DIRTY == line {
                    return Some(w);
                }
                m &= m - 1;
            }
        }
        None
    }

    /// Hints the host CPU to bring `line`'s set into its caches (trace look-ahead): what
    /// [`prefetch_present`](Self::prefetch_present) fetches, plus the recency order, which the
    /// hit or fill will update.
    #[inline]
    pub fn prefetch(&self, line: u64) {
        let set = self.set_of(line);
        let base = set * self.ways;
        self.prefetch_fps_and_tags(base);
        #[cfg(target_arch = "x86_64")]
        self.order.prefetch(set, base);
    }

    /// Hints the host CPU to fetch what a probe of `line` reads when the line is present: the
    /// set's fingerprints and tags, not the recency order (a probe or a dirty-bit change does
    /// not touch it, unlike [`prefetch`](Self::prefetch)'s lookup or fill).
    #[inline]
    pub fn prefetch_present(&self, line: u64) { self.prefetch_fps_and_tags(self.set_of(line) * self.ways) }

    /// The fingerprints and every host cache line of the tags (a 16-way set spans two) of the
    /// set whose first slot is `base`.
    #[inline(always)]
    fn prefetch_fps_and_tags(&self, base: usize) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `base` is a set's first slot, in bounds of `fps` (when kept) and of `tags`
        // with all `ways` slots after it; a prefetch has no effect on program state.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            if !self.fps.is_empty() {
                _mm_prefetch(self.fps.as_ptr().add(base) as *const i8, _MM_HINT_T0);
            }
            let tags = self.tags.as_ptr().add(base) as *const i8;
            let mut off = 0;
            while off < self.ways * 8 {
                _mm_prefetch(tags.add(off), _MM_HINT_T0);
                off += 64;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = base;
    }

    /// Hints the host CPU to fetch what a probe or an invalidation of `line` reads when the
    /// line is absent: the set's fingerprints (its tags in a cache without them). For a look-up
    /// expected to miss, where [`prefetch`](Self::prefetch) would also fetch tags and recency
    /// order that only a hit touches.
    #[inline]
    pub fn prefetch_probe(&self, line: u64) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: prefetching an in-bounds address has no effect on program state.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let base = self.set_of(line) * self.ways;
            if self.fps.is_empty() {
                _mm_prefetch(self.tags.as_ptr().add(base) as *const i8, _MM_HINT_T0);
            } else {
                _mm_prefetch(self.fps.as_ptr().add(base) as *const i8, _MM_HINT_T0);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = line;
    }

    /// Hints the host CPU to fetch the content slot an access to `line` would use now: its
    /// own if cached, else the next victim's (which a fill reads out before overwriting it).
    /// Only for caches that keep content; reads the set's tags, so it belongs to a late
    /// look-ahead stage, after [`prefetch`](Self::prefetch). Changes no simulated state.
    #[inline]
    pub fn prefetch_data(&self, line: u64) {
        #[cfg(target_arch = "x86_64")]
        if let Some(d) = self.data.as_ref() {
            let slot = self.find(line).unwrap_or_else(|| {
                let set = self.set_of(line);
                set * self.ways + self.order.tail(set)
            });
            // SAFETY: `slot` is in bounds; a prefetch has no effect on program state.
            unsafe {
                use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                _mm_prefetch(d.as_ptr().add(slot) as *const i8, _MM_HINT_T0);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = line;
    }

    /// The line a fill into `line`'s set would evict now, with its dirty bit (exact for LRU
    /// and FIFO, the usual victim for random replacement), or None if that way is empty. A
    /// host look-ahead uses it to prefetch the state the eviction will touch. (Always
    /// inlined: as a call, 1 M calls in 500 K random records, it cost a third more.)
    #[inline(always)]
    pub fn next_victim(&self, line: u64) -> Option<(u64, bool)> {
        let set = self.set_of(line);
        let t = self.tags[set * self.ways + self.order.tail(set)];
        (t != INVALID).then_some((t & !DIRTY, t & DIRTY != 0))
    }

    /// The tag of `slot`, unchecked: for internal callers whose slot is `set * ways + way`
    /// with `set` from [`set_of`](Self::set_of) (below `sets`) and `way` below `ways`, or a slot
    /// a search just returned, so always below `tags.len()` (`sets * ways`).
    #[inline(always)]
    fn tag_mut(&mut self, slot: usize) -> &mut u64 {
        debug_assert!(slot < self.tags.len());
        // SAFETY: `slot < tags.len()`, as above.
        unsafe { self.tags.get_unchecked_mut(slot) }
    }

    /// Moves way `w` of `set` to the most-recent end of the set.
    #[inline]
    fn touch(&mut self, set: usize, w: u16) { self.order.move_to_head(set, set * self.ways, w) }

    /// Looks up `line` without changing any state. The line of the most recent hit or fill
    /// (`last`) needs no search: functional mode reads or changes the payload of the block it
    /// has just looked up or filled.
    #[inline]
    pub fn probe(&self, line: u64) -> Option<usize> {
        if line == self.last.0 {
            return Some(self.last.1);
        }
        self.find(line)
    }

    /// The first step of [`lookup`](Self::lookup) alone: whether `line` is the line of the most
    /// recent hit or fill, which needs no search (it is already the most recent in its set);
    /// if so, counts a hit and sets dirty if `write`, as `lookup` would. False changes nothing.
    /// For callers that answer that case inline and call out for the rest.
    #[inline(always)]
    pub fn lookup_last(&mut self, line: u64, write: bool) -> bool {
        if line != self.last.0 {
            return false;
        }
        self.stats.hits += 1;
        if write {
            self.tags[self.last.1] |= DIRTY;
        }
        true
    }

    /// The line and slot of the most recent hit or fill (`INVALID` if none), for a caller to
    /// keep as a hint for [`lookup_at`](Self::lookup_at) once another line has taken its place.
    #[inline(always)]
    pub fn last_hit(&self) -> (u64, usize) { self.last }

    /// [`lookup`](Self::lookup) of `line` given `slot`, where it was seen before: if it is still
    /// there, the same hit as `lookup` (replacement state, dirty if `write`, count, memo)
    /// without searching its set, and true. Otherwise false, and nothing changes (the caller
    /// looks it up). A line is in at most one slot, so a matching tag is proof enough.
    #[inline(always)]
    pub fn lookup_at(&mut self, slot: usize, line: u64, write: bool) -> bool {
        match self.tags.get(slot) {
            Some(&t) if t & !DIRTY == line => {}
            _ => return false,
        }
        let set = self.set_of(line);
        let base = set * self.ways;
        debug_assert!((base..base + self.ways).contains(&slot), "a line's slot lies in its set");
        self.stats.hits += 1;
        if self.replacement == Replacement::Lru {
            self.touch(set, (slot - base) as u16);
        }
        if write {
            self.tags[slot] |= DIRTY;
        }
        self.last = (line, slot);
        true
    }

    /// Looks up `line`; on a hit updates replacement state, sets dirty if `write`, counts a hit.
    /// On a miss counts a miss and changes nothing else (the caller decides whether to fill).
    #[inline(always)]
    pub fn lookup(&mut self, line: u64, write: bool) -> Option<usize> {
        if self.lookup_last(line, write) {
            return Some(self.last.1);
        }
        let set = self.set_of(line);
        let base = set * self.ways;
        match self.way_of(base, line) {
            Some(w) => {
                self.stats.hits += 1;
                if self.replacement == Replacement::Lru {
                    self.touch(set, w as u16);
                }
                if write {
                    *self.tag_mut(base + w) |= DIRTY;
                }
                self.last = (line, base + w);
                Some(base + w)
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    /// Fills `line` (which must be absent) and returns its slot and the victim, if a valid line
    /// had to leave.
    #[inline(always)]
    pub fn fill(&mut self, line: u64, dirty: bool) -> (usize, Option<Victim>) {
        debug_assert!(self.find(line).is_none(), "fill of a line already present");
        let set = self.set_of(line);
        let base = set * self.ways;
        let tail = self.order.tail(set);
        // Empty ways sit at the tail, so the tail is the victim under LRU and FIFO, and under
        // random replacement while the set has an empty way. That common case takes one
        // branch here and none on whether the victim is the tail.
        if self.replacement != Replacement::Random || self.tags[base + tail] == INVALID {
            return self.fill_way(line, dirty, set, base, tail, true);
        }
        let way = self.random_below(self.ways);
        self.fill_way(line, dirty, set, base, way, way == tail)
    }

    /// A pseudo-random number below `n` for random replacement: xorshift64*, deterministic,
    /// no seed needed beyond the fixed start state.
    #[inline]
    fn random_below(&mut self, n: usize) -> usize {
        let mut x = self.rng_state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng_state = x;
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize
    }

    /// [`fill`](Self::fill) into one of `ways` only (a way partition): the victim is the least
    /// recently used (or first-in) line of those ways, or a random one of them under random
    /// replacement. `line` must be absent.
    pub fn fill_within(&mut self, line: u64, dirty: bool, ways: std::ops::Range<usize>) -> (usize, Option<Victim>) {
        debug_assert!(self.find(line).is_none(), "fill of a line already present");
        assert!(!ways.is_empty() && ways.end <= self.ways, "way range {ways:?} outside 0..{}", self.ways);
        let set = self.set_of(line);
        let base = set * self.ways;
        let tail = self.order.tail(set);
        let empty = ways.clone().find(|&w| self.tags[base + w] == INVALID);
        let way = match (empty, self.replacement) {
            (Some(w), _) => w,
            (None, Replacement::Random) => ways.start + self.random_below(ways.len()),
            (None, _) => self.order.last_among(set, base, self.ways, &ways),
        };
        self.fill_way(line, dirty, set, base, way, way == tail)
    }

    /// [`fill`](Self::fill) once the victim way is chosen (`at_tail`: it is the set's tail).
    #[inline(always)]
    fn fill_way(&mut self, line: u64, dirty: bool, set: usize, base: usize, way: usize, at_tail: bool) -> (usize, Option<Victim>) {
        let slot = base + way;
        let old = self.tags[slot];
        let victim = (old != INVALID).then(|| {
            let dirty = old & DIRTY != 0;
            self.stats.evictions += 1;
            if dirty {
                self.stats.dirty_evictions += 1;
            }
            Victim { line: old & !DIRTY, dirty, slot }
        });
        self.tags[slot] = if dirty { line | DIRTY } else { line };
        if let Some(f) = self.fps.get_mut(slot) {
            *f = fingerprint(line);
        }
        if at_tail {
            self.order.tail_to_head(set, base, way as u16);
        } else {
            self.touch(set, way as u16);
        }
        self.last = (line, slot);
        (slot, victim)
    }

    /// Removes `line` if present; returns whether it was dirty (and its slot for reading data).
    #[inline(always)]
    pub fn invalidate(&mut self, line: u64) -> Option<(bool, usize)> {
        let slot = self.find(line)?;
        if slot == self.last.1 {
            // Its way moves to the tail: no longer the head the memo stands for.
            self.last = (INVALID, 0);
        }
        let d = self.tags[slot] & DIRTY != 0;
        self.tags[slot] = INVALID;
        if let Some(f) = self.fps.get_mut(slot) {
            *f = 0;
        }
        // An empty way is the next victim.
        let set = slot / self.ways;
        let base = set * self.ways;
        self.order.move_to_tail(set, base, (slot - base) as u16);
        Some((d, slot))
    }

    #[inline]
    pub fn is_dirty(&self, slot: usize) -> bool { self.tags[slot] & DIRTY != 0 && self.tags[slot] != INVALID }
    #[inline]
    pub fn set_dirty(&mut self, slot: usize, dirty: bool) {
        debug_assert!(self.tags[slot] != INVALID);
        if dirty { self.tags[slot] |= DIRTY } else { self.tags[slot] &= !DIRTY }
    }

    pub fn data(&self, slot: usize) -> Option<&[u8; 64]> { self.data.as_ref().map(|d| &d[slot].0) }
    pub fn data_mut(&mut self, slot: usize) -> Option<&mut [u8; 64]> { self.data.as_mut().map(|d| &mut d[slot].0) }

    /// Every valid line as (line, dirty, slot), in slot order (set by set).
    pub fn valid_lines(&self) -> impl Iterator<Item = (u64, bool, usize)> + '_ {
        self.tags
            .iter()
            .enumerate()
            .filter(|(_, &t)| t != INVALID)
            .map(|(s, &t)| (t & !DIRTY, t & DIRTY != 0, s))
    }

    pub fn dirty_count(&self) -> usize { self.tags.iter().filter(|&&t| t != INVALID && t & DIRTY != 0).count() }

    /// Drops every line (a crash, for a volatile cache).
    pub fn clear(&mut self) {
        let fresh = Self::with_geometry(self.sets, self.ways, self.replacement);
        self.tags = fresh.tags;
        self.fps = fresh.fps;
        self.order = fresh.order;
        self.last = (INVALID, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(ways: u32, sets: u64, r: Replacement) -> SetAssocCache {
        SetAssocCache::with_geometry(sets, ways as usize, r)
    }

    #[test]
    fn geometry_of_table_i_llc() {
        let c = CacheConfig::new(16 * 1024, 16, 32);
        assert_eq!(c.lines(), 262_144);
        assert_eq!(c.sets(), 16_384);
        c.validate("llc").unwrap();
    }

    #[test]
    fn cache_smaller_than_one_set_is_rejected_naming_the_field() {
        let e = CacheConfig::new(1, 32, 1).validate("l1").unwrap_err(); // 16 lines < 32 ways
        assert_eq!(e.field, "l1.size_kib");
        let e = CacheConfig::new(64, 0, 1).validate("l2").unwrap_err();
        assert_eq!(e.field, "l2.ways");
        let e = CacheConfig::new(3, 5, 1).validate("llc").unwrap_err(); // 48 lines, 5 ways
        assert_eq!(e.field, "llc.ways");
    }

    #[test]
    fn a_zero_size_or_zero_way_cache_is_rejected_as_not_positive() {
        // Checked first, so the message says what is wrong rather than a later geometry check's.
        let e = CacheConfig::new(0, 8, 1).validate("l1").unwrap_err();
        assert_eq!((e.field.as_str(), e.message.as_str()), ("l1.size_kib", "must be > 0"));
        let e = CacheConfig::new(64, 0, 1).validate("l2").unwrap_err();
        assert_eq!((e.field.as_str(), e.message.as_str()), ("l2.ways", "must be > 0"));
        CacheConfig::new(1, 16, 1).validate("l1").unwrap();
    }

    #[test]
    fn set_dirty_and_is_dirty_track_one_slots_dirty_bit_and_keep_its_line() {
        let mut c = tiny(4, 1, Replacement::Lru);
        let (a, _) = c.fill(5, false);
        let (b, _) = c.fill(6, true);
        let empty = (0..4).find(|&s| s != a && s != b).unwrap();
        assert_eq!((c.is_dirty(a), c.is_dirty(b), c.is_dirty(empty)), (false, true, false));
        c.set_dirty(a, true);
        c.set_dirty(b, false);
        assert_eq!((c.is_dirty(a), c.is_dirty(b)), (true, false));
        assert_eq!((c.probe(5), c.probe(6)), (Some(a), Some(b)), "the dirty bit leaves the tag alone");
        let mut lines: Vec<_> = c.valid_lines().map(|(l, d, _)| (l, d)).collect();
        lines.sort_unstable();
        assert_eq!(lines, vec![(5, true), (6, false)]);
    }

    #[test]
    fn every_set_is_used_whether_or_not_the_number_of_sets_is_a_power_of_two() {
        // A line's set is the line modulo the number of sets: consecutive lines fill every
        // slot before any is evicted (a mask of the wrong width would crowd some sets).
        for (sets, ways) in [(3u64, 2usize), (12, 8), (24, 16), (5, 3), (8, 8), (16, 16)] {
            let mut c = SetAssocCache::with_geometry(sets, ways, Replacement::Lru);
            let slots = sets * ways as u64;
            for line in 0..slots {
                assert!(c.fill(line, false).1.is_none(), "{sets} sets x {ways} ways: line {line} evicted a line");
            }
            for line in 0..slots {
                assert_eq!(c.probe(line).map(|s| s / ways), Some((line % sets) as usize), "{sets} sets x {ways} ways: line {line}");
            }
        }
    }

    #[test]
    fn random_replacement_victims_are_pinned() {
        // The xorshift64* sequence decides every random-replacement figure: pinned so that a
        // change of the generator shows up here, not as drifting results.
        let mut c = tiny(4, 1, Replacement::Random);
        let victims: Vec<u64> = (0..16u64).filter_map(|l| c.fill(l, false).1.map(|v| v.line)).collect();
        assert_eq!(victims, [2, 3, 0, 1, 7, 4, 8, 6, 11, 10, 9, 13]);
    }

    #[test]
    fn lru_evicts_the_least_recently_used_way() {
        let mut c = tiny(2, 1, Replacement::Lru);
        assert!(c.lookup(1, false).is_none());
        c.fill(1, false);
        c.fill(2, true);
        assert!(c.lookup(1, false).is_some()); // 1 is now most recent
        let (_, v) = c.fill(3, false);
        assert_eq!(v, Some(Victim { line: 2, dirty: true, slot: v.unwrap().slot }));
        assert_eq!(c.stats.dirty_evictions, 1);
        assert_eq!((c.stats.hits, c.stats.misses), (1, 1));
    }

    #[test]
    fn fifo_ignores_hits_when_choosing_a_victim() {
        let mut c = tiny(2, 1, Replacement::Fifo);
        c.fill(1, false);
        c.fill(2, false);
        c.lookup(1, false);
        let (_, v) = c.fill(3, false);
        assert_eq!(v.unwrap().line, 1);
    }

    #[test]
    fn lines_map_to_sets_by_low_bits() {
        let mut c = tiny(1, 4, Replacement::Lru);
        c.fill(0, false);
        c.fill(1, false);
        c.fill(2, false);
        c.fill(3, false);
        // 4 conflicts only with 0.
        let (_, v) = c.fill(4, false);
        assert_eq!(v.unwrap().line, 0);
        assert!(c.probe(1).is_some());
    }

    #[test]
    fn write_hit_sets_dirty_and_invalidate_reports_it() {
        let mut c = tiny(4, 2, Replacement::Lru);
        c.fill(8, false);
        c.lookup(8, true);
        assert_eq!(c.dirty_count(), 1);
        assert_eq!(c.invalidate(8).map(|x| x.0), Some(true));
        assert!(c.probe(8).is_none());
        assert_eq!(c.invalidate(8), None);
    }

    #[test]
    fn data_is_kept_per_slot_when_asked() {
        let mut c = tiny(2, 1, Replacement::Lru).with_data();
        let (s, _) = c.fill(5, true);
        c.data_mut(s).unwrap()[0] = 0xAB;
        assert_eq!(c.data(c.probe(5).unwrap()).unwrap()[0], 0xAB);
        // Each slot is one host cache line.
        assert!((0..c.capacity_lines()).all(|s| (c.data(s).unwrap().as_ptr() as usize).is_multiple_of(64)));
    }

    #[test]
    fn invalidated_way_is_refilled_before_any_valid_line_is_evicted() {
        let mut c = tiny(4, 1, Replacement::Lru);
        for l in 0..4 {
            c.fill(l, false);
        }
        c.invalidate(2);
        let (_, v) = c.fill(9, false);
        assert_eq!(v, None);
        let (_, v) = c.fill(10, false);
        assert_eq!(v.unwrap().line, 0, "LRU order of the rest is kept");
    }

    #[test]
    fn clear_empties_the_cache_and_restarts_the_fill_order() {
        let mut c = tiny(2, 2, Replacement::Lru);
        c.fill(0, true);
        c.fill(2, true);
        c.clear();
        assert_eq!(c.valid_lines().count(), 0);
        let (slot, v) = c.fill(4, false);
        assert_eq!((slot, v), (0, None));
    }

    proptest::proptest! {
        /// The packed recency order (<= 16 ways) is the linked one, operation by operation.
        #[test]
        fn packed_and_linked_orders_choose_the_same_victims(
            ways in proptest::sample::select(vec![1usize, 2, 3, 4, 5, 7, 8, 8, 16, 16]),
            sets in 1u64..4,
            repl in 0u8..3,
            ops in proptest::collection::vec((0u8..4, 0u64..64), 1..400),
        ) {
            let r = [Replacement::Lru, Replacement::Fifo, Replacement::Random][repl as usize];
            let packed = SetAssocCache::with_geometry(sets, ways, r);
            let mut linked = packed.clone();
            linked.order = Order::with_packing(sets as usize, ways, false);
            let mut packed = packed;
            let is_packed = matches!(packed.order, Order::Packed { .. });
            proptest::prop_assert!(is_packed);
            for (op, line) in ops {
                match op {
                    0 | 1 => proptest::prop_assert_eq!(packed.lookup(line, op == 1), linked.lookup(line, op == 1)),
                    2 => {
                        if packed.probe(line).is_none() {
                            proptest::prop_assert_eq!(packed.fill(line, line % 3 == 0), linked.fill(line, line % 3 == 0));
                        }
                    }
                    _ => proptest::prop_assert_eq!(packed.invalidate(line), linked.invalidate(line)),
                }
                for set in 0..sets as usize {
                    proptest::prop_assert_eq!(packed.order.tail(set), linked.order.tail(set));
                }
                proptest::prop_assert_eq!(packed.next_victim(line), linked.next_victim(line));
            }
            proptest::prop_assert_eq!(&packed.tags, &linked.tags);
            // Fingerprint lookups (ways a multiple of 8) and the two-way compare find exactly what
            // a scan of the tags does.
            for line in 0..64u64 {
                let base = packed.set_of(line) * ways;
                let naive = packed.tags[base..base + ways].iter().position(|&t| t & !DIRTY == line).map(|w| base + w);
                proptest::prop_assert_eq!(packed.probe(line), naive);
            }
        }
    }

    proptest::proptest! {
        /// `next_victim` is a promise about the next fill: for LRU and FIFO, the line and dirty
        /// bit it names are exactly what a fill into that set evicts, and None exactly when
        /// the fill finds an empty way. (Only the host look-ahead uses it today, so a wrong
        /// answer would change no result and no other test would notice.)
        #[test]
        fn next_victim_names_the_line_the_next_fill_evicts(
            ways in proptest::sample::select(vec![1usize, 2, 3, 4, 8, 16, 32]),
            sets in 1u64..4,
            fifo in proptest::bool::ANY,
            ops in proptest::collection::vec((0u8..4, 0u64..48), 1..400),
        ) {
            let r = if fifo { Replacement::Fifo } else { Replacement::Lru };
            let mut c = SetAssocCache::with_geometry(sets, ways, r);
            for (op, line) in ops {
                match op {
                    0 | 1 => { c.lookup(line, op == 1); }
                    2 => {
                        if c.probe(line).is_none() {
                            let promised = c.next_victim(line);
                            let (_, victim) = c.fill(line, line % 3 == 0);
                            proptest::prop_assert_eq!(promised, victim.map(|v| (v.line, v.dirty)));
                        }
                    }
                    _ => { c.invalidate(line); }
                }
            }
        }
    }

    proptest::proptest! {
        /// The repeat-lookup memo changes nothing: a cache that uses it and one that always
        /// searches (its memo wiped before every operation) agree on every hit, victim, dirty
        /// bit, recency order and count, whatever the policy and the mix of operations.
        #[test]
        fn the_last_line_memo_gives_what_a_full_lookup_gives(
            ways in proptest::sample::select(vec![1usize, 2, 4, 8, 16, 32]),
            sets in 1u64..4,
            repl in 0u8..3,
            ops in proptest::collection::vec((0u8..5, 0u64..24), 1..400),
        ) {
            let r = [Replacement::Lru, Replacement::Fifo, Replacement::Random][repl as usize];
            let mut memo = SetAssocCache::with_geometry(sets, ways, r);
            let mut full = memo.clone();
            for (op, line) in ops {
                full.last = (INVALID, 0);
                match op {
                    // Lookups come twice as often, and a line often repeats, so the memo is hit.
                    0 | 1 | 4 => proptest::prop_assert_eq!(memo.lookup(line, op == 1), full.lookup(line, op == 1)),
                    2 => {
                        if memo.probe(line).is_none() {
                            proptest::prop_assert_eq!(memo.fill(line, line % 3 == 0), full.fill(line, line % 3 == 0));
                        }
                    }
                    _ => proptest::prop_assert_eq!(memo.invalidate(line), full.invalidate(line)),
                }
                for set in 0..sets as usize {
                    proptest::prop_assert_eq!(memo.order.tail(set), full.order.tail(set));
                }
                // A probe through the memo finds what a search of the set finds.
                full.last = (INVALID, 0);
                for l in [line, line ^ 1] {
                    proptest::prop_assert_eq!(memo.probe(l), full.probe(l));
                }
            }
            same_state(&memo, &full)?;
        }

        /// A slot kept from `last_hit` is only a hint: while its line is still there,
        /// `lookup_at` gives the same hit as a search; once the line has moved or left, it
        /// returns false and changes nothing, and the lookup that follows finds what a search
        /// finds. Checked against a cache that always searches.
        #[test]
        fn a_lookup_at_a_kept_slot_gives_what_a_full_lookup_gives(
            ways in proptest::sample::select(vec![1usize, 2, 4, 8, 16]),
            sets in 1u64..4,
            repl in 0u8..3,
            ops in proptest::collection::vec((0u8..4, 0u64..24), 1..400),
        ) {
            let r = [Replacement::Lru, Replacement::Fifo, Replacement::Random][repl as usize];
            let mut hinted = SetAssocCache::with_geometry(sets, ways, r);
            let mut full = hinted.clone();
            let mut kept: Vec<(u64, usize)> = Vec::new();
            for (op, line) in ops {
                full.last = (INVALID, 0);
                match op {
                    0 | 1 => {
                        let write = op == 1;
                        // The latest hint kept for this line, however stale.
                        let hint = kept.iter().rev().find(|h| h.0 == line).copied();
                        let got = match hint {
                            Some((_, slot)) if hinted.lookup_at(slot, line, write) => Some(slot),
                            _ => hinted.lookup(line, write),
                        };
                        proptest::prop_assert_eq!(got, full.lookup(line, write));
                    }
                    2 => {
                        if hinted.probe(line).is_none() {
                            proptest::prop_assert_eq!(hinted.fill(line, line % 3 == 0), full.fill(line, line % 3 == 0));
                        }
                    }
                    _ => proptest::prop_assert_eq!(hinted.invalidate(line), full.invalidate(line)),
                }
                kept.push(hinted.last_hit());
                for set in 0..sets as usize {
                    proptest::prop_assert_eq!(hinted.order.tail(set), full.order.tail(set));
                }
            }
            same_state(&hinted, &full)?;
        }
    }

    /// What a memo or a hint must leave exactly as a search would: every tag and dirty bit,
    /// the counts and the recency order.
    fn same_state(a: &SetAssocCache, b: &SetAssocCache) -> Result<(), proptest::test_runner::TestCaseError> {
        proptest::prop_assert_eq!(&a.tags, &b.tags);
        proptest::prop_assert_eq!(a.stats, b.stats);
        if let (Order::Packed { words: x, .. }, Order::Packed { words: y, .. }) = (&a.order, &b.order) {
            proptest::prop_assert_eq!(x, y);
        }
        Ok(())
    }

    #[test]
    fn a_lookup_at_a_slot_whose_line_has_left_changes_nothing() {
        let mut c = tiny(2, 1, Replacement::Lru);
        c.fill(7, false);
        let (line, slot) = c.last_hit();
        assert_eq!(line, 7);
        c.fill(8, false);
        c.fill(9, true); // evicts 7 (LRU) into its slot
        let before = (c.tags.clone(), c.stats);
        assert!(!c.lookup_at(slot, 7, true), "7 is gone; 9 holds its slot");
        assert_eq!((c.tags.clone(), c.stats), before);
        assert!(c.lookup_at(slot, 9, false), "9 is where 7 was");
        assert_eq!(c.stats.hits, before.1.hits + 1);
    }

    #[test]
    fn random_replacement_is_deterministic() {
        let run = || {
            let mut c = tiny(4, 1, Replacement::Random);
            (0..100u64).filter_map(|l| c.fill(l, false).1.map(|v| v.line)).collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn cache_stats_since_subtracts_the_warm_up_snapshot_field_by_field() {
        let end = CacheStats { hits: 100, misses: 40, evictions: 30, dirty_evictions: 12 };
        let warm = CacheStats { hits: 10, misses: 4, evictions: 3, dirty_evictions: 2 };
        assert_eq!(end.since(&warm), CacheStats { hits: 90, misses: 36, evictions: 27, dirty_evictions: 10 });
        assert_eq!(end.since(&warm).hit_rate(), 90.0 / 126.0);
    }

    #[test]
    fn capacity_is_sets_times_ways() {
        let c = tiny(4, 3, Replacement::Lru);
        assert_eq!((c.sets(), c.ways(), c.capacity_lines()), (3, 4, 12));
    }

    #[test]
    fn a_line_sharing_its_fingerprint_with_an_older_way_is_still_found() {
        // One set of 8, 16 or 32 ways (the two compare paths); the second line has the
        // first's one-byte fingerprint, so the probe must look past a matching fingerprint
        // whose tag differs. A third fill moves the last-line memo off the twin.
        let twin = (1..).find(|&l| fingerprint(l) == fingerprint(0)).unwrap();
        let other = (1..).find(|&l| fingerprint(l) != fingerprint(0)).unwrap();
        for ways in [8, 16, 32] {
            for r in [Replacement::Lru, Replacement::Fifo, Replacement::Random] {
                let mut c = tiny(ways, 1, r);
                c.fill(0, false);
                c.fill(twin, true);
                c.fill(other, false);
                assert_eq!(c.probe(twin), Some(1), "{ways} ways, {r:?}");
                assert_eq!(c.probe(0), Some(0), "{ways} ways, {r:?}");
                assert_eq!(c.lookup(twin, false), Some(1), "{ways} ways, {r:?}");
                assert!(c.probe(twin + 1).is_none(), "{ways} ways, {r:?}");
            }
        }
    }

    #[test]
    fn random_replacement_picks_victims_over_every_way_not_in_fill_order() {
        let mut c = tiny(4, 1, Replacement::Random);
        for l in 0..4 {
            assert!(c.fill(l, false).1.is_none(), "empty ways are used first");
        }
        let mut victims = Vec::new();
        for l in 4..404 {
            victims.push(c.fill(l, false).1.expect("a full set evicts").line);
        }
        // FIFO would evict 0, 1, 2, ... in turn.
        assert_ne!(victims[..8], (0..8).collect::<Vec<u64>>()[..]);
        let mut per_way = [0u32; 4];
        let mut slot_of = std::collections::HashMap::new();
        let mut c = tiny(4, 1, Replacement::Random);
        for l in 0..404u64 {
            let (slot, v) = c.fill(l, false);
            if let Some(v) = v {
                per_way[slot_of[&v.line]] += 1;
            }
            slot_of.insert(l, slot);
        }
        assert!(per_way.iter().all(|&n| n > 50), "{per_way:?}");
    }

    #[test]
    fn a_fill_within_a_way_range_evicts_only_from_those_ways() {
        for ways in [4usize, 20] {
            // One set: every line maps to it.
            let mut c = tiny(ways as u32, 1, Replacement::Lru);
            for l in 0..ways as u64 {
                c.fill_within(100 + l, false, 0..ways);
            }
            // Lines 100 and 101 are the oldest; filling into ways 2.. must evict 102, the
            // oldest line of those ways, and keep 100 and 101.
            let (slot, victim) = c.fill_within(999, false, 2..ways);
            assert_eq!(victim.map(|v| v.line), Some(102), "{ways} ways");
            assert!(slot >= 2 && slot < ways);
            assert!(c.find(100).is_some() && c.find(101).is_some());
            // Touching 103 leaves the oldest of ways 2.. as 104 with 20 ways; with 4, ways 2 and
            // 3 hold only 999 and 103, so 999 goes.
            c.lookup(103, false);
            let oldest = if ways > 4 { 104 } else { 999 };
            assert_eq!(c.fill_within(998, false, 2..ways).1.map(|v| v.line), Some(oldest), "{ways} ways");
        }
    }

    #[test]
    fn victims_and_invalidations_report_clean_lines_clean_and_count_only_dirty_evictions() {
        let mut c = tiny(2, 1, Replacement::Lru);
        c.fill(1, false);
        c.fill(2, true);
        let v = c.fill(3, false).1.unwrap();
        assert_eq!((v.line, v.dirty), (1, false));
        let v = c.fill(4, false).1.unwrap();
        assert_eq!((v.line, v.dirty), (2, true));
        assert_eq!((c.stats.evictions, c.stats.dirty_evictions), (2, 1));
        assert_eq!(c.invalidate(3).map(|x| x.0), Some(false), "a clean line leaves clean");
        c.lookup(4, true);
        assert_eq!(c.invalidate(4).map(|x| x.0), Some(true), "a written line leaves dirty");
        assert_eq!(c.invalidate(4), None);
    }
}
