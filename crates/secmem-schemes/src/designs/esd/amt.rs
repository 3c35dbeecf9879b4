//! The Address Mapping Table (ESD section III-B): for every line the core addresses (its
//! "init address"), the physical line that holds its content, stored in NVM with its hot
//! lines in a controller cache (`design.esd.amt_cache_bytes`).
//!
//! Layout. The AMT lives in the top of the data region, one 8 B entry per data line, 8 per
//! 64 B line, so it is read and written through the secure data path: encrypted, MACed and
//! covered by the counter tree like data. A tampered, replayed or spliced AMT line fails its
//! MAC or tree check when it is fetched, so a mapping the controller uses is one it wrote.
//! Entry `i` is one word:
//!
//! ```text
//! bits  0..40  target: the physical line logical line i maps to (Addr_base << 8 | Addr_offsets)
//! bit  40      valid: logical line i has been written (unwritten lines read as zeros)
//! bits 48..64  refs: how many logical lines map to physical line i
//! ```
//!
//! Entry `i` thus holds both logical line i's mapping and physical line i's reference count:
//! a deduplicated write changes the writer's entry, the new target's and the old target's.
//!
//! Placement. A logical line's own line (its home) is where it is first written when that
//! line is free; a physical line is free when no logical line maps to it. A logical line whose
//! home is shared (another line was deduplicated to the content there) is written elsewhere:
//! to the next free line below the AMT, scanning down. Lines in the AMT's own range are never
//! given out, so a logical line whose home is there is always placed elsewhere.

use crate::controller::functional::IntegrityError;
use crate::controller::ops::McOps;
use rustc_hash::FxHashMap;
use secmem_core::cache::{Replacement, SetAssocCache};
use secmem_core::Cycle;

/// Bytes of an entry, and entries per 64 B AMT line.
pub const ENTRY_BYTES: u64 = 8;
pub const PER_LINE: u64 = 64 / ENTRY_BYTES;
const TARGET_MASK: u64 = (1 << 40) - 1;
const VALID: u64 = 1 << 40;
const REFS_SHIFT: u32 = 48;
/// The most logical lines one physical line may be shared by (the refs field's width).
pub const MAX_REFS: u64 = u16::MAX as u64;

/// First AMT line of a data region of `data_lines` lines.
pub fn base(data_lines: u64) -> u64 { data_lines - data_lines.div_ceil(PER_LINE) }

/// Counters of the table's traffic (its cache's hits and misses are the cache's own; each
/// miss reads an AMT line from NVM).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AmtStats {
    /// AMT lines written to NVM (dirty evictions, write-through, flush).
    pub line_writes: u64,
    /// Unique writes placed on a line other than their home or current line.
    pub relocations: u64,
}

#[derive(Clone)]
pub struct Amt {
    data_lines: u64,
    base: u64,
    /// Every entry that is not all zeros: NVM's AMT as the controller last wrote it, with the
    /// cache's newer lines over it.
    entries: FxHashMap<u64, u64>,
    cache: SetAssocCache,
    latency: Cycle,
    /// Strict metadata persistence: a changed AMT line is written through at once.
    strict: bool,
    /// AMT lines changed by the operation under way (written through at its end when strict).
    changed: Vec<u64>,
    /// Where the scan for a free line resumes (downwards from the AMT).
    cursor: u64,
    pub stats: AmtStats,
}

impl Amt {
    /// The AMT of `data_lines` data lines with a cache of `cache_lines` lines of `ways` ways and
    /// a hit latency of `latency`.
    pub fn new(data_lines: u64, cache_lines: u64, ways: usize, latency: Cycle, strict: bool) -> Amt {
        let base = base(data_lines);
        Amt {
            data_lines,
            base,
            entries: FxHashMap::default(),
            cache: SetAssocCache::with_geometry((cache_lines / ways as u64).max(1), ways, Replacement::Lru),
            latency,
            strict,
            changed: Vec::new(),
            cursor: base,
            stats: AmtStats::default(),
        }
    }

    /// First line of the AMT (lines below it are the ones given to data).
    pub fn base(&self) -> u64 { self.base }

    /// The AMT line holding entry `index`.
    pub fn line_of(&self, index: u64) -> u64 { self.base + index / PER_LINE }

    fn word(&self, index: u64) -> u64 { self.entries.get(&index).copied().unwrap_or(0) }

    fn set_word(&mut self, index: u64, w: u64) {
        if w == 0 { self.entries.remove(&index) } else { self.entries.insert(index, w) };
        let line = self.line_of(index);
        if !self.changed.contains(&line) {
            self.changed.push(line);
        }
    }

    /// Where logical line `index` is held, if it has been written.
    pub fn mapping(&self, index: u64) -> Option<u64> {
        let w = self.word(index);
        (w & VALID != 0).then_some(w & TARGET_MASK)
    }

    /// How many logical lines map to physical line `line`.
    pub fn refs(&self, line: u64) -> u64 { self.word(line) >> REFS_SHIFT }

    /// Maps logical line `index` to physical `target` (None: unwritten).
    pub fn set_mapping(&mut self, index: u64, target: Option<u64>) {
        let refs = self.word(index) & !(VALID | TARGET_MASK);
        let w = refs | target.map_or(0, |t| VALID | (t & TARGET_MASK));
        self.set_word(index, w);
    }

    fn set_refs(&mut self, line: u64, refs: u64) {
        debug_assert!(refs <= MAX_REFS);
        let w = (self.word(line) & (VALID | TARGET_MASK)) | refs << REFS_SHIFT;
        self.set_word(line, w);
    }

    /// One more logical line maps to `line`.
    pub fn add_ref(&mut self, line: u64) { self.set_refs(line, self.refs(line) + 1) }

    /// One logical line fewer maps to `line`.
    pub fn drop_ref(&mut self, line: u64) {
        let r = self.refs(line);
        debug_assert!(r > 0, "line {line} has no reference to drop");
        self.set_refs(line, r.saturating_sub(1));
    }

    /// A free line for a unique write of logical line `home`: `home` itself if it is free and
    /// below the AMT, else the next free line scanning down from the last one given out.
    /// None when every data line is in use.
    pub fn allocate(&mut self, home: u64) -> Option<u64> {
        if home < self.base && self.refs(home) == 0 {
            return Some(home);
        }
        for _ in 0..self.base {
            self.cursor = if self.cursor == 0 { self.base - 1 } else { self.cursor - 1 };
            if self.refs(self.cursor) == 0 && self.cursor != home {
                self.stats.relocations += 1;
                return Some(self.cursor);
            }
        }
        None
    }

    /// The plaintext of AMT line `line`: its 8 entries, little-endian.
    pub fn line_bytes(&self, line: u64) -> [u8; 64] {
        let mut out = [0u8; 64];
        let first = (line - self.base) * PER_LINE;
        for k in 0..PER_LINE {
            out[8 * k as usize..8 * k as usize + 8].copy_from_slice(&self.word(first + k).to_le_bytes());
        }
        out
    }

    /// Takes AMT line `line`'s entries from its plaintext (recovery).
    fn load_line(&mut self, line: u64, bytes: &[u8; 64]) {
        let first = (line - self.base) * PER_LINE;
        for k in 0..PER_LINE {
            let w = u64::from_le_bytes(bytes[8 * k as usize..8 * k as usize + 8].try_into().expect("8 bytes"));
            if w == 0 { self.entries.remove(&(first + k)) } else { self.entries.insert(first + k, w) };
        }
    }

    /// Brings entry `index`'s AMT line into the cache (a write marks it dirty); returns when
    /// the entry is usable. A miss reads the line through the secure data path, and writes
    /// back a dirty victim.
    pub fn access(&mut self, mc: &mut McOps, index: u64, write: bool, now: Cycle) -> Result<Cycle, IntegrityError> {
        let line = self.line_of(index);
        // Under strict persistence changed lines are written through, so none stays dirty.
        let dirty = write && !self.strict;
        if self.cache.lookup(line, dirty).is_some() {
            return Ok(now + self.latency);
        }
        let (at, plain) = mc.read_line(line, now)?;
        if let Some(p) = plain {
            debug_assert_eq!(p, self.line_bytes(line), "AMT line {line} in NVM differs from the controller's copy");
        }
        let (_, victim) = self.cache.fill(line, dirty);
        let mut done = at + self.latency;
        if let Some(v) = victim.filter(|v| v.dirty) {
            done = done.max(self.write_line(mc, v.line, at)?);
        }
        Ok(done)
    }

    /// Entry `index`, looked up earlier in the same operation, is about to change: its line is
    /// marked dirty where it is cached (no second lookup), or fetched again if a fetch since
    /// evicted it.
    pub fn change_looked_up(&mut self, mc: &mut McOps, index: u64, now: Cycle) -> Result<Cycle, IntegrityError> {
        match self.cache.probe(self.line_of(index)) {
            Some(slot) => {
                if !self.strict {
                    self.cache.set_dirty(slot, true);
                }
                Ok(now)
            }
            None => self.access(mc, index, true, now),
        }
    }

    fn write_line(&mut self, mc: &mut McOps, line: u64, now: Cycle) -> Result<Cycle, IntegrityError> {
        self.stats.line_writes += 1;
        let bytes = mc.is_functional().then(|| self.line_bytes(line));
        mc.write_line(line, bytes.as_ref(), now)
    }

    /// Ends an operation: under strict persistence every AMT line it changed is written
    /// through (returns when they are persistent); otherwise they stay dirty in the cache.
    pub fn commit(&mut self, mc: &mut McOps, now: Cycle) -> Result<Cycle, IntegrityError> {
        let changed = std::mem::take(&mut self.changed);
        let mut done = now;
        if self.strict {
            for &line in &changed {
                done = done.max(self.write_line(mc, line, now)?);
            }
        }
        self.changed = changed;
        self.changed.clear();
        Ok(done)
    }

    /// Writes every dirty cached AMT line back (a clean shutdown).
    pub fn flush(&mut self, mc: &mut McOps, now: Cycle) -> Result<Cycle, IntegrityError> {
        let dirty: Vec<(u64, usize)> = self.cache.valid_lines().filter(|&(_, d, _)| d).map(|(l, _, s)| (l, s)).collect();
        let mut done = now;
        for (line, slot) in dirty {
            self.cache.set_dirty(slot, false);
            done = done.max(self.write_line(mc, line, now)?);
        }
        Ok(done)
    }

    /// A written logical line whose entry is in AMT line `line`, if any.
    pub fn mapped_index_in(&self, line: u64) -> Option<u64> {
        let first = (line - self.base) * PER_LINE;
        (first..first + PER_LINE).find(|&i| self.mapping(i).is_some())
    }

    /// Forgets the cache's lines, which must be clean (after [`flush`](Self::flush)), so that
    /// the next lookups fetch and verify them from NVM.
    pub fn drop_cache(&mut self) {
        debug_assert!(self.cache.valid_lines().all(|(_, d, _)| !d), "dropping dirty AMT lines");
        self.cache.clear();
    }

    /// Power loss without a battery: the cache is gone, and with it the entries only it held.
    /// Recovery ([`rebuild`](Self::rebuild)) reads the AMT back from NVM.
    pub fn crash(&mut self) {
        self.cache.clear();
        self.entries.clear();
        self.changed.clear();
        self.cursor = self.base;
    }

    /// Recovery: reads every AMT line NVM holds through the secure read path (a tampered line
    /// fails its check here) and takes its entries. Functional mode only.
    pub fn rebuild(&mut self, mc: &mut McOps, now: Cycle) -> Result<(Cycle, u64), IntegrityError> {
        let lines = mc.functional().expect("recovery runs in functional mode").image.lines_in(self.base, self.data_lines);
        let mut done = now;
        for &line in &lines {
            let (at, plain) = mc.read_line(line, now)?;
            self.load_line(line, &plain.expect("functional"));
            done = done.max(at);
        }
        Ok((done, lines.len() as u64))
    }

    /// The AMT cache's lookups (each miss read an AMT line from NVM).
    pub fn cache_stats(&self) -> secmem_core::cache::CacheStats { self.cache.stats }

    /// Logical lines written (valid entries).
    pub fn mapped_lines(&self) -> u64 { self.entries.values().filter(|w| *w & VALID != 0).count() as u64 }

    /// Physical lines in use (referenced by at least one logical line).
    pub fn used_lines(&self) -> u64 { self.entries.values().filter(|w| *w >> REFS_SHIFT != 0).count() as u64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn amt() -> Amt { Amt::new(1024, 16, 4, Cycle(2), false) }

    #[test]
    fn the_amt_takes_the_top_eighth_of_the_data_lines_and_a_line_holds_eight_entries() {
        let a = amt();
        assert_eq!(a.base(), 1024 - 128);
        assert_eq!((a.line_of(0), a.line_of(7), a.line_of(8), a.line_of(1023)), (896, 896, 897, 1023));
    }

    #[test]
    fn an_entry_holds_a_mapping_and_a_reference_count_independently_and_encodes_to_its_line() {
        let mut a = amt();
        a.set_mapping(3, Some(500));
        a.add_ref(3);
        a.add_ref(3);
        a.set_mapping(3, Some(501));
        assert_eq!((a.mapping(3), a.refs(3)), (Some(501), 2));
        a.drop_ref(3);
        assert_eq!((a.mapping(3), a.refs(3)), (Some(501), 1));
        let bytes = a.line_bytes(896);
        let w = u64::from_le_bytes(bytes[24..32].try_into().unwrap());
        assert_eq!(w, 501 | VALID | 1 << REFS_SHIFT);
        let mut b = amt();
        b.load_line(896, &bytes);
        assert_eq!((b.mapping(3), b.refs(3), b.mapping(2)), (Some(501), 1, None));
    }

    #[test]
    fn a_free_home_is_taken_first_then_free_lines_below_the_amt_scanning_down() {
        let mut a = amt();
        assert_eq!(a.allocate(10), Some(10));
        a.add_ref(10);
        // Home 10 is shared: the scan starts below the AMT and skips lines in use.
        a.add_ref(895);
        assert_eq!(a.allocate(10), Some(894));
        // A home inside the AMT is never given out.
        assert_eq!(a.allocate(900), Some(893));
        assert_eq!(a.stats.relocations, 2);
    }

    #[test]
    fn allocation_fails_only_when_every_data_line_is_in_use() {
        let mut a = Amt::new(16, 4, 4, Cycle(2), false);
        for l in 0..a.base() {
            a.add_ref(l);
        }
        assert_eq!(a.allocate(0), None);
        a.drop_ref(5);
        assert_eq!(a.allocate(0), Some(5));
    }
}
