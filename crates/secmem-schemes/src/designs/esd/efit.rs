//! The ECC-based Fingerprint Index Table (ESD section III-B): a cache in the memory
//! controller of entries `<ECC, Addr_base, Addr_offsets, referH>`, indexed by a line's 64
//! ECC bits, with Least Reference Count Used replacement and a periodic decay (section III-D).
//!
//! * An entry names the physical line (40 bits: Addr_base << 8 | Addr_offsets) that held
//!   content with that ECC when it was inserted, and `referH`, how many writes were
//!   deduplicated to it (8 bits by default). The ECC is a hint: a hit is confirmed by a
//!   byte-by-byte compare read of the line (the design's job).
//! * Organisation: set-associative, the set chosen by a fold of the ECC. Different contents
//!   may share an ECC (the code has 2^56 words per check value), so a set may hold several
//!   entries of one ECC, each a candidate for the compare read. The paper gives the capacity (512 KB) and the entry; hardware of that size is
//!   set-associative, with `design.esd.efit_ways` ways.
//! * LRCU: the victim is the entry with the lowest reference count, the least recently used
//!   among equals, so entries of popular contents stay while lines written once leave first.
//! * Decay: every `decay_interval_writes` writes the table subtracts `decay` from every
//!   entry's count ("a regular refresh ... subtracting a fixed value"), so contents popular
//!   long ago give way. Applied lazily: an entry keeps the decay epoch its count was last
//!   brought up to date at.

/// Bytes of one entry: ECC (8) + Addr_base (4) + Addr_offsets (1) + referH (1).
pub const ENTRY_BYTES: u64 = 14;

/// Physical line of an empty way.
const EMPTY: u64 = u64::MAX;

#[derive(Clone, Copy, Debug)]
struct Way {
    ecc: u64,
    line: u64,
    refer: u8,
    /// Decay epoch `refer` is up to date with.
    epoch: u64,
    /// Access stamp, for LRU among equal counts.
    used: u64,
}

const EMPTY_WAY: Way = Way { ecc: 0, line: EMPTY, refer: 0, epoch: 0, used: 0 };

/// A hit: the line an ECC points at and its reference count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    pub line: u64,
    pub refer: u8,
}

/// Counters of the table's own work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EfitStats {
    pub hits: u64,
    pub misses: u64,
    pub inserts: u64,
    /// Valid entries replaced by LRCU to make room.
    pub evictions: u64,
    /// Entries dropped because their line no longer held their content.
    pub stale_removals: u64,
}

#[derive(Clone)]
pub struct Efit {
    sets: u64,
    ways: usize,
    table: Vec<Way>,
    refer_max: u8,
    decay: u8,
    decay_interval_writes: u64,
    /// LRCU replacement; false: plain LRU (Fig. 18's "without LRCU").
    lrcu: bool,
    writes: u64,
    epoch: u64,
    stamp: u64,
    pub stats: EfitStats,
}

impl Efit {
    /// A table of `entries` entries (rounded down to whole sets of `ways`), with `refer_bits`-bit counts decayed by `decay` every
    /// `decay_interval_writes` writes (0: the table's entry count; `decay` 0: never).
    pub fn new(entries: u64, ways: usize, refer_bits: u32, decay: u8, decay_interval_writes: u64) -> Efit { Self::with_replacement(entries, ways, refer_bits, decay, decay_interval_writes, true) }

    /// [`new`](Self::new) with LRCU (`lrcu`) or plain LRU replacement.
    pub fn with_replacement(entries: u64, ways: usize, refer_bits: u32, decay: u8, decay_interval_writes: u64, lrcu: bool) -> Efit {
        assert!(ways >= 1 && entries >= ways as u64 && (1..=8).contains(&refer_bits));
        let sets = entries / ways as u64;
        // 0: one table's worth of writes.
        let decay_interval_writes = if decay_interval_writes == 0 { sets * ways as u64 } else { decay_interval_writes };
        Efit {
            sets,
            ways,
            table: vec![EMPTY_WAY; sets as usize * ways],
            refer_max: ((1u16 << refer_bits) - 1) as u8,
            decay,
            decay_interval_writes,
            lrcu,
            writes: 0,
            epoch: 0,
            stamp: 0,
            stats: EfitStats::default(),
        }
    }

    /// Entries the table holds (sets x ways).
    pub fn capacity(&self) -> u64 { self.sets * self.ways as u64 }

    /// The largest reference count an entry holds.
    pub fn refer_max(&self) -> u8 { self.refer_max }

    /// The ways of `ecc`'s set: the ECC's halves XOR-folded (each ECC byte is one word's
    /// check bits, so the fold mixes the words in), modulo the sets.
    fn set_range(&self, ecc: u64) -> std::ops::Range<usize> {
        let set = ((ecc ^ (ecc >> 32)) % self.sets) as usize;
        set * self.ways..(set + 1) * self.ways
    }

    /// `w`'s count with the decay since it was last brought up to date.
    fn current(&self, w: &Way) -> u8 {
        let steps = (self.epoch - w.epoch).saturating_mul(u64::from(self.decay));
        w.refer.saturating_sub(steps.min(255) as u8)
    }

    /// Looks `ecc` up: every entry of that ECC in its set (several contents may share an
    /// ECC), the most referenced first, then the most recently used. Each is a use.
    pub fn lookup(&mut self, ecc: u64) -> Vec<Hit> {
        let mut found: Vec<(usize, u8, u64)> = self
            .set_range(ecc)
            .filter(|&i| self.table[i].line != EMPTY && self.table[i].ecc == ecc)
            .map(|i| (i, self.current(&self.table[i]), self.table[i].used))
            .collect();
        if found.is_empty() {
            self.stats.misses += 1;
            return Vec::new();
        }
        self.stats.hits += 1;
        found.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)));
        // Each is used now, in the order found (the first the most recently), so that ties
        // keep their order.
        for &(i, refer, _) in found.iter().rev() {
            self.stamp += 1;
            let w = &mut self.table[i];
            (w.refer, w.epoch, w.used) = (refer, self.epoch, self.stamp);
        }
        found.into_iter().map(|(i, refer, _)| Hit { line: self.table[i].line, refer }).collect()
    }

    fn find(&self, ecc: u64, line: u64) -> Option<usize> { self.set_range(ecc).find(|&i| self.table[i].line == line && self.table[i].ecc == ecc) }

    /// One more write deduplicated to the entry of `ecc` at `line` (saturating at the maximum).
    pub fn add_reference(&mut self, ecc: u64, line: u64) {
        if let Some(i) = self.find(ecc, line) {
            let refer = self.current(&self.table[i]);
            let w = &mut self.table[i];
            (w.refer, w.epoch) = (refer.saturating_add(1).min(self.refer_max), self.epoch);
        }
    }

    /// Drops the entry of `ecc` at `line` (its line no longer holds that content).
    pub fn remove(&mut self, ecc: u64, line: u64) {
        if let Some(i) = self.find(ecc, line) {
            self.stats.stale_removals += 1;
            self.table[i] = EMPTY_WAY;
        }
    }

    /// Records that physical `line` now holds content with `ecc`, count 1, in the LRCU victim's
    /// way of its set (an empty way first).
    pub fn insert(&mut self, ecc: u64, line: u64) {
        self.stamp += 1;
        if let Some(i) = self.find(ecc, line) {
            self.table[i] = Way { ecc, line, refer: 1, epoch: self.epoch, used: self.stamp };
            return;
        }
        self.stats.inserts += 1;
        let range = self.set_range(ecc);
        let victim = range
            .clone()
            .min_by_key(|&i| {
                let w = &self.table[i];
                let count = if self.lrcu { u16::from(self.current(w)) } else { 0 };
                if w.line == EMPTY { (0u16, 0u64) } else { (1 + count, w.used) }
            })
            .expect("a set has ways");
        if self.table[victim].line != EMPTY {
            self.stats.evictions += 1;
        }
        self.table[victim] = Way { ecc, line, refer: 1, epoch: self.epoch, used: self.stamp };
    }

    /// Counts a write toward the decay interval.
    pub fn count_write(&mut self) {
        self.writes += 1;
        if self.decay > 0 && self.writes.is_multiple_of(self.decay_interval_writes) {
            self.epoch += 1;
        }
    }

    /// Valid entries.
    pub fn occupancy(&self) -> u64 { self.table.iter().filter(|w| w.line != EMPTY).count() as u64 }

    /// Empties the table (it is volatile: a crash loses it, and ESD only misses duplicates).
    pub fn clear(&mut self) { self.table.fill(EMPTY_WAY) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-set table: every ECC shares the set.
    fn one_set(ways: usize) -> Efit { Efit::new(ways as u64, ways, 8, 1, 0) }

    fn lines(hits: Vec<Hit>) -> Vec<u64> { hits.into_iter().map(|h| h.line).collect() }

    #[test]
    fn lrcu_evicts_an_entry_referenced_once_before_older_popular_ones() {
        let mut t = one_set(2);
        t.insert(1, 100);
        t.add_reference(1, 100);
        t.add_reference(1, 100); // count 3
        t.insert(2, 200); // count 1, newer
        t.insert(3, 300); // must evict ECC 2 (count 1), not ECC 1 (count 3), though 1 is older
        assert_eq!(t.lookup(1), vec![Hit { line: 100, refer: 3 }]);
        assert!(t.lookup(2).is_empty());
        assert_eq!(t.lookup(3), vec![Hit { line: 300, refer: 1 }]);
        assert_eq!(t.stats.evictions, 1);
    }

    #[test]
    fn among_equal_counts_the_least_recently_used_leaves() {
        let mut t = one_set(2);
        t.insert(1, 100);
        t.insert(2, 200);
        t.lookup(1); // 2 is now the least recently used
        t.insert(3, 300);
        assert!(!t.lookup(1).is_empty() && t.lookup(2).is_empty());
    }

    #[test]
    fn contents_sharing_an_ecc_are_all_candidates_the_most_referenced_first() {
        let mut t = one_set(4);
        t.insert(9, 100);
        t.insert(9, 200);
        t.add_reference(9, 200);
        t.insert(9, 300);
        assert_eq!(lines(t.lookup(9)), vec![200, 300, 100]);
        t.remove(9, 200);
        assert_eq!(lines(t.lookup(9)), vec![300, 100]);
        assert_eq!(t.stats.stale_removals, 1);
    }

    #[test]
    fn the_decay_lowers_every_count_so_a_once_popular_entry_can_leave() {
        let mut t = Efit::new(2, 2, 8, 2, 10);
        t.insert(1, 100);
        for _ in 0..4 {
            t.add_reference(1, 100);
        }
        assert_eq!(t.lookup(1)[0].refer, 5);
        for _ in 0..20 {
            t.count_write(); // two intervals: minus 4
        }
        assert_eq!(t.lookup(1)[0].refer, 1);
        for _ in 0..10 {
            t.count_write();
        }
        assert_eq!(t.lookup(1)[0].refer, 0, "saturates at zero");
        t.insert(2, 200);
        t.insert(3, 300); // ECC 1 (count 0) leaves before ECC 2 (count 1)
        assert!(t.lookup(1).is_empty() && !t.lookup(2).is_empty());
    }

    #[test]
    fn a_count_saturates_at_its_width() {
        let mut t = Efit::new(16, 4, 3, 1, 0);
        t.insert(7, 1);
        for _ in 0..20 {
            t.add_reference(7, 1);
        }
        assert_eq!(t.lookup(7), vec![Hit { line: 1, refer: 7 }]);
        assert_eq!(t.refer_max(), 7);
    }

    #[test]
    fn capacity_is_whole_sets_of_the_ways() {
        // 512 KB of 14 B entries: 37,449 entries -> 2,340 sets of 16.
        let t = Efit::new((512 << 10) / ENTRY_BYTES, 16, 8, 1, 0);
        assert_eq!(t.capacity(), 37_440);
    }

    #[test]
    fn without_lrcu_the_least_recently_used_entry_leaves_whatever_its_count() {
        let mut t = Efit::with_replacement(2, 2, 8, 1, 0, false);
        t.insert(1, 100);
        t.add_reference(1, 100);
        t.insert(2, 200);
        t.insert(3, 300); // LRU: ECC 1 leaves, popular or not
        assert!(t.lookup(1).is_empty() && !t.lookup(2).is_empty());
    }
}
