//! The L1 / L2 / LLC cache hierarchy in front of the memory controller.
//!
//! Write-back, write-allocate, LRU (or as configured) at every level. Dirty L1 victims are
//! written into L2, dirty L2 victims into the LLC; what leaves the LLC dirty is what the
//! memory controller sees as a write, and LLC misses are what it sees as reads. With an
//! inclusive LLC, an LLC victim is back-invalidated from L1 and L2 (a dirty upper copy makes
//! the write-back dirty). Line contents move with the lines when the hierarchy tracks data.

use secmem_core::cache::{CacheConfig, CacheStats, SetAssocCache, Victim};
use secmem_core::Cycle;

/// Where an access was satisfied.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    L1,
    L2,
    Llc,
    Memory,
}

/// A line leaving the hierarchy dirty, with its content when data is tracked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Writeback {
    pub line: u64,
    pub data: Option<[u8; 64]>,
}

pub struct Hierarchy {
    pub l1: SetAssocCache,
    pub l2: SetAssocCache,
    pub llc: SetAssocCache,
    pub inclusive: bool,
    /// Cumulative hit latency to reach each level: [L1, L1+L2, L1+L2+LLC].
    pub path_latency: [Cycle; 3],
    track_data: bool,
    /// Dirty lines pushed out of the LLC by the last operations; the caller sends them to the
    /// memory controller and clears the list.
    pub writebacks: Vec<Writeback>,
}

/// Fills `line` into `cache` with content `data`; returns the victim with *its* content, read
/// before the slot is overwritten.
fn fill_with(cache: &mut SetAssocCache, line: u64, dirty: bool, data: Option<[u8; 64]>) -> Option<(u64, bool, Option<[u8; 64]>)> {
    let (slot, victim) = cache.fill(line, dirty);
    let out = victim.map(|v| (v.line, v.dirty, cache.data(v.slot).copied()));
    if let (Some(d), Some(dst)) = (data, cache.data_mut(slot)) {
        *dst = d;
    }
    out
}

impl Hierarchy {
    pub fn new(l1: &CacheConfig, l2: &CacheConfig, llc: &CacheConfig, inclusive: bool, track_data: bool) -> Self {
        let mk = |c: &CacheConfig| {
            let cache = SetAssocCache::new(c);
            if track_data { cache.with_data() } else { cache }
        };
        let a = Cycle(l1.latency_cycles);
        let b = a + Cycle(l2.latency_cycles);
        let c = b + Cycle(llc.latency_cycles);
        Hierarchy {
            l1: mk(l1),
            l2: mk(l2),
            llc: mk(llc),
            inclusive,
            path_latency: [a, b, c],
            track_data,
            writebacks: Vec::with_capacity(4),
        }
    }

    pub fn tracks_data(&self) -> bool { self.track_data }

    /// A load (`write == false`) or store of `line`. `store_data` is the line's new content
    /// (tracked-data mode). Returns where the access hit; on `Level::Memory` the caller gets
    /// the line's content from the memory controller and installs it with
    /// [`set_filled_data`](Self::set_filled_data) (tracked-data mode).
    pub fn access(&mut self, line: u64, write: bool, store_data: Option<&[u8; 64]>) -> Level {
        if !self.track_data {
            return self.access_untracked(line, write);
        }
        if let Some(slot) = self.l1.lookup(line, write) {
            if let (Some(d), Some(dst)) = (store_data, self.l1.data_mut(slot)) {
                *dst = *d;
            }
            return Level::L1;
        }
        let mut content = None;
        let level = if let Some(slot) = self.l2.lookup(line, false) {
            content = self.l2.data(slot).copied();
            Level::L2
        } else if let Some(slot) = self.llc.lookup(line, false) {
            content = self.llc.data(slot).copied();
            Level::Llc
        } else {
            Level::Memory
        };
        if level == Level::Memory {
            if let Some((vl, vd, vdata)) = fill_with(&mut self.llc, line, false, content) {
                self.llc_victim(vl, vd, vdata);
            }
        }
        if level >= Level::Llc {
            if let Some((vl, true, vdata)) = fill_with(&mut self.l2, line, false, content) {
                self.write_into_llc(vl, vdata);
            }
        }
        if let Some((vl, true, vdata)) = fill_with(&mut self.l1, line, write, store_data.copied().or(content)) {
            self.write_into_l2(vl, vdata);
        }
        level
    }

    /// [`access`](Self::access) when no contents are tracked: the same lookups, fills and
    /// victims in the same order, without carrying `Option<[u8; 64]>` contents around.
    #[inline]
    fn access_untracked(&mut self, line: u64, write: bool) -> Level {
        if self.l1.lookup(line, write).is_some() {
            return Level::L1;
        }
        let level = if self.l2.lookup(line, false).is_some() {
            Level::L2
        } else if self.llc.lookup(line, false).is_some() {
            Level::Llc
        } else {
            Level::Memory
        };
        if level == Level::Memory {
            if let (_, Some(v)) = self.llc.fill(line, false) {
                self.llc_victim_untracked(v.line, v.dirty);
            }
        }
        if level >= Level::Llc {
            if let (_, Some(Victim { line: vl, dirty: true, .. })) = self.l2.fill(line, false) {
                self.write_into_llc_untracked(vl);
            }
        }
        if let (_, Some(Victim { line: vl, dirty: true, .. })) = self.l1.fill(line, write) {
            // write_into_l2, untracked.
            match self.l2.probe(vl) {
                Some(slot) => self.l2.set_dirty(slot, true),
                None => {
                    if let (_, Some(Victim { line: v2, dirty: true, .. })) = self.l2.fill(vl, true) {
                        self.write_into_llc_untracked(v2);
                    }
                }
            }
        }
        level
    }

    // Always inlined, as is `llc_victim_untracked`: as calls they cost a frame of saved
    // registers on most misses (callgrind: 1% of a sequential run's host instructions).
    #[inline(always)]
    fn write_into_llc_untracked(&mut self, line: u64) {
        match self.llc.probe(line) {
            Some(slot) => self.llc.set_dirty(slot, true),
            None => {
                if let (_, Some(v)) = self.llc.fill(line, true) {
                    self.llc_victim_untracked(v.line, v.dirty);
                }
            }
        }
    }

    #[inline(always)]
    fn llc_victim_untracked(&mut self, line: u64, dirty: bool) {
        let mut dirty = dirty;
        if self.inclusive {
            if let Some((d2, _)) = self.l2.invalidate(line) {
                dirty |= d2;
            }
            if let Some((d1, _)) = self.l1.invalidate(line) {
                dirty |= d1;
            }
        }
        if dirty {
            self.writebacks.push(Writeback { line, data: None });
        }
    }

    fn write_into_l2(&mut self, line: u64, data: Option<[u8; 64]>) {
        if let Some(slot) = self.l2.probe(line) {
            self.l2.set_dirty(slot, true);
            if let (Some(d), Some(dst)) = (data, self.l2.data_mut(slot)) {
                *dst = d;
            }
            return;
        }
        if let Some((vl, true, vdata)) = fill_with(&mut self.l2, line, true, data) {
            self.write_into_llc(vl, vdata);
        }
    }

    fn write_into_llc(&mut self, line: u64, data: Option<[u8; 64]>) {
        if let Some(slot) = self.llc.probe(line) {
            self.llc.set_dirty(slot, true);
            if let (Some(d), Some(dst)) = (data, self.llc.data_mut(slot)) {
                *dst = d;
            }
            return;
        }
        if let Some((vl, vd, vdata)) = fill_with(&mut self.llc, line, true, data) {
            self.llc_victim(vl, vd, vdata);
        }
    }

    /// Handles a line that left the LLC (with its LLC content).
    fn llc_victim(&mut self, line: u64, dirty: bool, data: Option<[u8; 64]>) {
        let mut dirty = dirty;
        let mut data = data;
        if self.inclusive {
            // The freshest copy is the highest-level dirty one.
            if let Some((d2, s2)) = self.l2.invalidate(line) {
                if d2 {
                    dirty = true;
                    data = self.l2.data(s2).copied().or(data);
                }
            }
            if let Some((d1, s1)) = self.l1.invalidate(line) {
                if d1 {
                    dirty = true;
                    data = self.l1.data(s1).copied().or(data);
                }
            }
        }
        if dirty {
            self.writebacks.push(Writeback { line, data });
        }
    }

    /// Sets the content of a line just filled from memory (functional mode: the plaintext
    /// arrives from the controller after the fill). The L1 copy keeps a store's own data.
    pub fn set_filled_data(&mut self, line: u64, data: &[u8; 64], l1_has_store: bool) {
        for cache in [&mut self.llc, &mut self.l2] {
            if let Some(slot) = cache.probe(line) {
                if let Some(d) = cache.data_mut(slot) {
                    *d = *data;
                }
            }
        }
        if !l1_has_store {
            if let Some(slot) = self.l1.probe(line) {
                if let Some(d) = self.l1.data_mut(slot) {
                    *d = *data;
                }
            }
        }
    }

    /// Writes `line` back to memory if any level holds it dirty (clwb): the line stays cached,
    /// clean. Returns the write-back, if there was one.
    pub fn flush_line(&mut self, line: u64) -> Option<Writeback> {
        // The uppermost copy is the freshest (stores write L1); after the write-back every level
        // must hold that content, or a later clean eviction of the upper copy would uncover a
        // stale lower one.
        let mut dirty = false;
        let mut data = None;
        for cache in [&mut self.l1, &mut self.l2, &mut self.llc] {
            if let Some(slot) = cache.probe(line) {
                if data.is_none() {
                    data = cache.data(slot).copied();
                }
                if cache.is_dirty(slot) {
                    dirty = true;
                    cache.set_dirty(slot, false);
                }
            }
        }
        if let Some(d) = data {
            for cache in [&mut self.l2, &mut self.llc] {
                if let Some(slot) = cache.probe(line) {
                    if let Some(dst) = cache.data_mut(slot) {
                        *dst = d;
                    }
                }
            }
        }
        dirty.then_some(Writeback { line, data })
    }

    /// The most recent content of a cached line (tracked-data mode).
    pub fn cached_data(&self, line: u64) -> Option<[u8; 64]> {
        for cache in [&self.l1, &self.l2, &self.llc] {
            if let Some(slot) = cache.probe(line) {
                return cache.data(slot).copied();
            }
        }
        None
    }

    /// Every line dirty somewhere in the hierarchy, once, with its freshest data.
    pub fn dirty_lines(&self) -> Vec<Writeback> { self.dirty_lines_with_level().into_iter().map(|(wb, _)| wb).collect() }

    /// Like [`dirty_lines`](Self::dirty_lines), with the level the freshest copy is read from
    /// (what an eADR flush reads out).
    pub fn dirty_lines_with_level(&self) -> Vec<(Writeback, Level)> {
        let mut seen = rustc_hash::FxHashSet::default();
        let mut out = Vec::new();
        for (cache, level) in [(&self.l1, Level::L1), (&self.l2, Level::L2), (&self.llc, Level::Llc)] {
            for (line, dirty, slot) in cache.valid_lines() {
                if dirty && seen.insert(line) {
                    out.push((Writeback { line, data: cache.data(slot).copied() }, level));
                }
            }
        }
        out
    }

    /// Puts a line back into the LLC as dirty (recovery of a drained hierarchy, Horus IV-C 3);
    /// a dirty line it displaces joins `writebacks`.
    pub fn restore_dirty(&mut self, line: u64, data: Option<[u8; 64]>) { self.write_into_llc(line, data); }

    pub fn stats(&self) -> [CacheStats; 3] { [self.l1.stats, self.l2.stats, self.llc.stats] }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 1 KiB direct-mapped-ish caches small enough to force evictions by hand.
    fn tiny(inclusive: bool, data: bool) -> Hierarchy {
        Hierarchy::new(
            &CacheConfig::new(1, 16, 2),  // 16 lines, 1 set
            &CacheConfig::new(2, 32, 10), // 32 lines, 1 set
            &CacheConfig::new(4, 64, 30), // 64 lines, 1 set
            inclusive,
            data,
        )
    }

    #[test]
    fn a_flushed_line_reads_its_new_content_after_the_l1_copy_is_evicted() {
        let mut h = tiny(true, true);
        assert_eq!(h.access(7, false, None), Level::Memory);
        h.set_filled_data(7, &[1; 64], false);
        h.access(7, true, Some(&[2; 64]));
        assert_eq!(h.flush_line(7).unwrap().data, Some([2; 64]));
        // Sixteen other lines push 7 out of the 16-line L1, clean: nothing is written back.
        for l in 100..116 {
            h.access(l, false, None);
        }
        assert!(h.l1.probe(7).is_none());
        assert_eq!(h.cached_data(7), Some([2; 64]), "L2 must hold the flushed content, not the fill");
    }

    #[test]
    fn first_access_goes_to_memory_then_hits_in_l1() {
        let mut h = tiny(true, false);
        assert_eq!(h.access(7, false, None), Level::Memory);
        assert_eq!(h.access(7, true, None), Level::L1);
        assert_eq!(h.path_latency, [Cycle(2), Cycle(12), Cycle(42)]);
    }

    #[test]
    fn l1_victim_is_found_in_l2() {
        let mut h = tiny(true, false);
        for l in 0..17 {
            h.access(l, false, None);
        }
        // line 0 left L1 (16 lines) but is in L2.
        assert_eq!(h.access(0, false, None), Level::L2);
    }

    #[test]
    fn dirty_lines_reach_memory_only_when_they_leave_the_llc() {
        let mut h = tiny(true, false);
        h.access(0, true, None);
        for l in 1..64 {
            h.access(l, false, None);
        }
        assert!(h.writebacks.is_empty(), "64 lines fit in the LLC");
        h.access(64, false, None); // evicts LRU line 0 from the LLC
        assert_eq!(h.writebacks, vec![Writeback { line: 0, data: None }]);
    }

    #[test]
    fn inclusive_llc_back_invalidates_a_dirty_l1_copy() {
        let mut h = tiny(true, false);
        h.access(0, true, None);
        // Keep line 0 hot in L1 while streaming 64 other lines through the LLC.
        for l in 1..64 {
            h.access(l, false, None);
            h.access(0, false, None);
        }
        h.access(64, false, None);
        // LLC LRU never saw the L1 hits, so line 0 is its victim; its dirty L1 copy goes too.
        assert_eq!(h.writebacks.iter().filter(|w| w.line == 0).count(), 1);
        assert!(h.l1.probe(0).is_none());
    }

    #[test]
    fn non_inclusive_llc_keeps_upper_copies() {
        let mut h = tiny(false, false);
        h.access(0, false, None);
        for l in 1..=64 {
            h.access(l, false, None);
            h.access(0, false, None);
        }
        assert!(h.l1.probe(0).is_some());
    }

    #[test]
    fn data_moves_with_lines_and_flush_returns_the_freshest_copy() {
        let mut h = tiny(true, true);
        h.access(3, false, None);
        h.set_filled_data(3, &[3; 64], false);
        assert_eq!(h.cached_data(3), Some([3; 64]));
        h.access(3, true, Some(&[9; 64]));
        let wb = h.flush_line(3).unwrap();
        assert_eq!(wb.data, Some([9; 64]));
        assert!(h.flush_line(3).is_none(), "clean after flush");
        assert_eq!(h.dirty_lines().len(), 0);
    }

    #[test]
    fn a_hierarchy_built_without_contents_says_so_and_drops_store_data() {
        // The OS model asks `tracks_data` whether its kernel copies should carry bytes.
        assert!(tiny(true, true).tracks_data());
        let mut h = tiny(true, false);
        assert!(!h.tracks_data());
        h.access(7, true, Some(&[5; 64]));
        assert_eq!(h.cached_data(7), None, "no level keeps bytes");
        assert_eq!(h.flush_line(7), Some(Writeback { line: 7, data: None }));
    }

    #[test]
    fn dirty_lines_name_each_dirty_line_once_with_its_uppermost_dirty_copy() {
        let mut h = tiny(true, true);
        h.access(0, true, Some(&[1; 64]));
        h.set_filled_data(0, &[9; 64], true);
        // Sixteen more lines push line 0 out of the 16-line L1: its dirty copy is written into L2.
        for l in 1..=16 {
            h.access(l, false, None);
        }
        // A second store hits L2 and fills L1 dirty: L1 [2], L2 [1] (dirty), LLC [9] (clean).
        assert_eq!(h.access(0, true, Some(&[2; 64])), Level::L2);
        assert!(h.l2.is_dirty(h.l2.probe(0).unwrap()));
        h.restore_dirty(200, Some([7; 64]));
        let l1_copy = Writeback { line: 0, data: Some([2; 64]) };
        let restored = Writeback { line: 200, data: Some([7; 64]) };
        assert_eq!(h.dirty_lines_with_level(), vec![(l1_copy.clone(), Level::L1), (restored.clone(), Level::Llc)]);
        assert_eq!(h.dirty_lines(), vec![l1_copy, restored]);
    }

    #[test]
    fn a_restored_line_sits_dirty_in_the_llc_only_and_its_victim_goes_to_memory() {
        let mut h = tiny(true, true);
        h.access(0, true, Some(&[0xAA; 64]));
        // 63 more lines fill the 64-line LLC; line 0's dirty copy has moved down to the LLC
        // (out of L1 at line 16, out of L2 at line 32) and is the LLC's LRU line.
        for l in 1..64 {
            h.access(l, false, None);
        }
        assert!(h.writebacks.is_empty());
        h.restore_dirty(500, Some([7; 64]));
        assert_eq!(h.writebacks, vec![Writeback { line: 0, data: Some([0xAA; 64]) }]);
        assert!(h.l1.probe(500).is_none() && h.l2.probe(500).is_none());
        assert!(h.llc.is_dirty(h.llc.probe(500).unwrap()));
        assert_eq!(h.access(500, false, None), Level::Llc);
        assert_eq!(h.cached_data(500), Some([7; 64]));
    }

    #[test]
    fn an_inclusive_llc_victim_writes_back_its_dirty_l1_content_not_the_stale_llc_copy() {
        let mut h = tiny(true, true);
        h.access(0, true, Some(&[0xAB; 64]));
        h.set_filled_data(0, &[9; 64], true);
        // Line 0 stays hot in L1 (dirty, [0xAB]) while 63 lines fill the LLC around its clean
        // [9] copy; L1 hits never reach the LLC's LRU, so line 64 evicts line 0 from the LLC.
        for l in 1..64 {
            h.access(l, false, None);
            h.access(0, false, None);
        }
        assert!(h.writebacks.is_empty());
        h.access(64, false, None);
        assert_eq!(h.writebacks, vec![Writeback { line: 0, data: Some([0xAB; 64]) }]);
        assert!(h.l1.probe(0).is_none());
    }

    #[test]
    fn a_line_read_from_memory_keeps_its_content_in_l2_after_leaving_l1() {
        let mut h = tiny(true, true);
        assert_eq!(h.access(8, false, None), Level::Memory);
        h.set_filled_data(8, &[3; 64], false);
        for l in 100..116 {
            h.access(l, false, None);
        }
        assert!(h.l1.probe(8).is_none());
        assert_eq!(h.access(8, false, None), Level::L2);
        assert_eq!(h.cached_data(8), Some([3; 64]));
    }

    #[test]
    fn a_dirty_l1_victim_that_l2_dropped_is_filled_into_l2_dirty() {
        let mut h = tiny(true, true);
        h.access(0, true, Some(&[0xAB; 64]));
        // Hot in L1 while 32 lines pass through the 32-line L2: its clean L2 copy leaves.
        for l in 1..=32 {
            h.access(l, false, None);
            h.access(0, false, None);
        }
        assert!(h.l2.probe(0).is_none());
        // Sixteen new lines push it out of L1: it must come back into L2, dirty.
        for l in 33..=48 {
            h.access(l, false, None);
        }
        assert!(h.l1.probe(0).is_none());
        assert_eq!(h.dirty_lines_with_level(), vec![(Writeback { line: 0, data: Some([0xAB; 64]) }, Level::L2)]);
    }

    #[test]
    fn a_dirty_line_the_lower_levels_dropped_still_reaches_memory_without_inclusion() {
        for track_data in [false, true] {
            let mut h = tiny(false, track_data);
            h.access(0, true, Some(&[0xAB; 64]));
            // Hot in L1 while 64 lines pass through L2 and the LLC: both drop their clean copies
            // (a non-inclusive LLC does not back-invalidate L1).
            for l in 1..=64 {
                h.access(l, false, None);
                h.access(0, false, None);
            }
            assert!(h.l2.probe(0).is_none() && h.llc.probe(0).is_none() && h.writebacks.is_empty());
            // Untouched from here, the dirty line leaves L1 within 16 new lines, L2 within 32
            // more (into the LLC, dirty) and the LLC within 64 more: 112 in all.
            for l in 65..=(64 + 112) {
                h.access(l, false, None);
            }
            let data = track_data.then_some([0xAB; 64]);
            assert_eq!(h.writebacks, vec![Writeback { line: 0, data }], "track_data = {track_data}");
            assert!(h.dirty_lines().is_empty());
        }
    }

    #[test]
    fn evicted_dirty_data_reaches_the_writeback() {
        let mut h = tiny(true, true);
        h.access(0, true, Some(&[0xAA; 64]));
        for l in 1..=64 {
            h.access(l, false, None);
        }
        assert_eq!(h.writebacks[0], Writeback { line: 0, data: Some([0xAA; 64]) });
    }
}
