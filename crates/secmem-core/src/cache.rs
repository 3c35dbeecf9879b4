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

/// Tag value of an empty way.
/// Largest simulated cache (4 GiB): beyond this the tag arrays would not fit a host.
pub const MAX_CACHE_KIB: u64 = 4 << 20;

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
    set_mask: Option<u64>,
    /// `tags[set * ways + way]` = line index | DIRTY, or INVALID.
    tags: Vec<u64>,
    /// Recency order of each set as a doubly linked list of ways (u16 links; `ways` <= 65535):
    /// the head is the most recently used (LRU) or filled (FIFO) way, the tail the next
    /// victim. Empty ways are kept at the tail, so a fill takes the tail in O(1) whatever the
    /// associativity, and a hit moves its way to the head in O(1).
    next: Vec<u16>,
    prev: Vec<u16>,
    head: Vec<u16>,
    tail: Vec<u16>,
    rng_state: u64,
    replacement: Replacement,
    data: Option<Vec<[u8; 64]>>,
    pub stats: CacheStats,
}

const NIL: u16 = u16::MAX;

impl SetAssocCache {
    /// Builds a cache; the config must have passed `validate`.
    pub fn new(cfg: &CacheConfig) -> Self {
        Self::with_geometry(cfg.sets(), cfg.ways as usize, cfg.replacement)
    }

    /// Builds a cache of exactly `sets` x `ways` lines (tests use sub-KiB geometries).
    pub fn with_geometry(sets: u64, ways: usize, replacement: Replacement) -> Self {
        assert!(ways >= 1 && ways < NIL as usize, "associativity must be 1..65535");
        let n = sets as usize * ways;
        // Initial order per set: way 0 at the tail, so ways fill 0, 1, 2, ...
        let mut next = vec![NIL; n];
        let mut prev = vec![NIL; n];
        for set in 0..sets as usize {
            let base = set * ways;
            for w in 0..ways {
                // head = ways-1 ... tail = 0; next points towards the tail.
                next[base + w] = if w == 0 { NIL } else { (w - 1) as u16 };
                prev[base + w] = if w + 1 == ways { NIL } else { (w + 1) as u16 };
            }
        }
        SetAssocCache {
            ways,
            sets,
            set_mask: sets.is_power_of_two().then(|| sets - 1),
            tags: vec![INVALID; n],
            next,
            prev,
            head: vec![(ways - 1) as u16; sets as usize],
            tail: vec![0; sets as usize],
            rng_state: 0x9E37_79B9_7F4A_7C15,
            replacement,
            data: None,
            stats: CacheStats::default(),
        }
    }

    /// Also keep the 64 B content of every line.
    pub fn with_data(mut self) -> Self {
        self.data = Some(vec![[0u8; 64]; self.tags.len()]);
        self
    }

    pub fn ways(&self) -> usize { self.ways }
    pub fn sets(&self) -> u64 { self.sets }
    pub fn capacity_lines(&self) -> usize { self.tags.len() }
    pub fn keeps_data(&self) -> bool { self.data.is_some() }

    #[inline]
    fn set_of(&self, line: u64) -> usize {
        match self.set_mask {
            Some(m) => (line & m) as usize,
            None => (line % self.sets) as usize,
        }
    }

    #[inline]
    fn find(&self, line: u64) -> Option<usize> {
        let base = self.set_of(line) * self.ways;
        self.tags[base..base + self.ways].iter().position(|&t| t & !DIRTY == line).map(|w| base + w)
    }

    /// Hints the host CPU to bring `line`'s set into its caches (trace look-ahead).
    #[inline]
    pub fn prefetch(&self, line: u64) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: prefetching an in-bounds address has no effect on program state.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let set = self.set_of(line);
            let base = set * self.ways;
            // Every host cache line of the set's tags (a 16-way set spans two).
            let tags = self.tags.as_ptr().add(base) as *const i8;
            let mut off = 0;
            while off < self.ways * 8 {
                _mm_prefetch(tags.add(off), _MM_HINT_T0);
                off += 64;
            }
            // The recency links and the set's head/tail, which the hit or fill will update.
            _mm_prefetch(self.next.as_ptr().add(base) as *const i8, _MM_HINT_T0);
            _mm_prefetch(self.prev.as_ptr().add(base) as *const i8, _MM_HINT_T0);
            _mm_prefetch(self.head.as_ptr().add(set) as *const i8, _MM_HINT_T0);
            _mm_prefetch(self.tail.as_ptr().add(set) as *const i8, _MM_HINT_T0);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = line;
    }

    /// The line a fill into `line`'s set would evict now, with its dirty bit (exact for LRU
    /// and FIFO, the usual victim for random replacement), or None if that way is empty. A
    /// host look-ahead uses it to prefetch the state the eviction will touch.
    #[inline]
    pub fn next_victim(&self, line: u64) -> Option<(u64, bool)> {
        let set = self.set_of(line);
        let t = self.tags[set * self.ways + self.tail[set] as usize];
        (t != INVALID).then_some((t & !DIRTY, t & DIRTY != 0))
    }

    #[inline]
    fn unlink(&mut self, set: usize, base: usize, w: u16) {
        let (p, n) = (self.prev[base + w as usize], self.next[base + w as usize]);
        if p == NIL { self.head[set] = n } else { self.next[base + p as usize] = n }
        if n == NIL { self.tail[set] = p } else { self.prev[base + n as usize] = p }
    }

    #[inline]
    fn push_head(&mut self, set: usize, base: usize, w: u16) {
        let h = self.head[set];
        self.prev[base + w as usize] = NIL;
        self.next[base + w as usize] = h;
        if h == NIL { self.tail[set] = w } else { self.prev[base + h as usize] = w }
        self.head[set] = w;
    }

    #[inline]
    fn push_tail(&mut self, set: usize, base: usize, w: u16) {
        let t = self.tail[set];
        self.next[base + w as usize] = NIL;
        self.prev[base + w as usize] = t;
        if t == NIL { self.head[set] = w } else { self.next[base + t as usize] = w }
        self.tail[set] = w;
    }

    /// Moves way `w` of `set` to the most-recent end of the set.
    #[inline]
    fn touch(&mut self, set: usize, w: u16) {
        if self.head[set] != w {
            let base = set * self.ways;
            self.unlink(set, base, w);
            self.push_head(set, base, w);
        }
    }

    /// Looks up `line` without changing any state.
    #[inline]
    pub fn probe(&self, line: u64) -> Option<usize> { self.find(line) }

    /// Looks up `line`; on a hit updates replacement state, sets dirty if `write`, counts a hit.
    /// On a miss counts a miss and changes nothing else (the caller decides whether to fill).
    #[inline]
    pub fn lookup(&mut self, line: u64, write: bool) -> Option<usize> {
        let set = self.set_of(line);
        let base = set * self.ways;
        match self.tags[base..base + self.ways].iter().position(|&t| t & !DIRTY == line) {
            Some(w) => {
                self.stats.hits += 1;
                if self.replacement == Replacement::Lru {
                    self.touch(set, w as u16);
                }
                if write {
                    self.tags[base + w] |= DIRTY;
                }
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
    #[inline]
    pub fn fill(&mut self, line: u64, dirty: bool) -> (usize, Option<Victim>) {
        debug_assert!(self.find(line).is_none(), "fill of a line already present");
        let set = self.set_of(line);
        let base = set * self.ways;
        let tail = self.tail[set] as usize;
        let way = match self.replacement {
            // Empty ways sit at the tail, so the tail is the right victim for both.
            Replacement::Lru | Replacement::Fifo => tail,
            Replacement::Random => {
                if self.tags[base + tail] == INVALID {
                    tail
                } else {
                    // xorshift64*: deterministic, no seed needed beyond the fixed start state.
                    let mut x = self.rng_state;
                    x ^= x >> 12;
                    x ^= x << 25;
                    x ^= x >> 27;
                    self.rng_state = x;
                    (x.wrapping_mul(0x2545_F491_4F6C_DD1D) % self.ways as u64) as usize
                }
            }
        };
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
        self.touch(set, way as u16);
        (slot, victim)
    }

    /// Removes `line` if present; returns whether it was dirty (and its slot for reading data).
    pub fn invalidate(&mut self, line: u64) -> Option<(bool, usize)> {
        let slot = self.find(line)?;
        let d = self.tags[slot] & DIRTY != 0;
        self.tags[slot] = INVALID;
        // An empty way is the next victim.
        let set = slot / self.ways;
        let base = set * self.ways;
        self.unlink(set, base, (slot - base) as u16);
        self.push_tail(set, base, (slot - base) as u16);
        Some((d, slot))
    }

    #[inline]
    pub fn is_dirty(&self, slot: usize) -> bool { self.tags[slot] & DIRTY != 0 && self.tags[slot] != INVALID }
    #[inline]
    pub fn set_dirty(&mut self, slot: usize, dirty: bool) {
        debug_assert!(self.tags[slot] != INVALID);
        if dirty { self.tags[slot] |= DIRTY } else { self.tags[slot] &= !DIRTY }
    }
    #[inline]
    pub fn line_at(&self, slot: usize) -> Option<u64> {
        let t = self.tags[slot];
        (t != INVALID).then_some(t & !DIRTY)
    }

    pub fn data(&self, slot: usize) -> Option<&[u8; 64]> { self.data.as_ref().map(|d| &d[slot]) }
    pub fn data_mut(&mut self, slot: usize) -> Option<&mut [u8; 64]> { self.data.as_mut().map(|d| &mut d[slot]) }

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
        self.next = fresh.next;
        self.prev = fresh.prev;
        self.head = fresh.head;
        self.tail = fresh.tail;
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

    #[test]
    fn random_replacement_is_deterministic() {
        let run = || {
            let mut c = tiny(4, 1, Replacement::Random);
            (0..100u64).filter_map(|l| c.fill(l, false).1.map(|v| v.line)).collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }
}
