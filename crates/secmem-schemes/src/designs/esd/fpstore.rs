//! The full fingerprint store of ESD's baselines (Table II's Dedup_SHA1 and DeWrite): the
//! fingerprint of every unique line in NVM, with a controller cache in front (section II-B,
//! Fig. 10's full deduplication).
//!
//! The store is a hash table in a design region above the tree: buckets of 64 B, each holding
//! `per_bucket` entries of a fingerprint and a 5 B line address (DeWrite's 16 B entries, four
//! to a bucket; Dedup_SHA1's 20 B SHA-1 in 32 B entries, two to a bucket). A fingerprint's
//! bucket is its hash modulo the buckets. A lookup whose bucket is not cached reads it from
//! NVM (the "fingerprint NVM_lookup" the paper measures); inserting or removing an entry
//! dirties its bucket, written back when the cache evicts it. The table's contents are kept
//! by the design; its NVM traffic is timed on the device.

use crate::controller::ops::McOps;
use rustc_hash::FxHashMap;
use secmem_core::cache::{Replacement, SetAssocCache};
use secmem_core::Cycle;
use secmem_media::TrafficClass;

/// A fingerprint (SHA-1's 20 bytes, or a CRC-32 in the first 4).
pub type Fp = [u8; 20];

/// Counters of the store's traffic (its cache's hits and misses are the cache's own; each
/// miss reads a bucket from NVM).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FpStats {
    /// Buckets written back to NVM.
    pub nvm_writes: u64,
}

#[derive(Clone)]
pub struct FpStore {
    /// Fingerprint -> the physical line that holds that content.
    by_fp: FxHashMap<Fp, u64>,
    /// Physical line -> its fingerprint (so a line rewritten or freed leaves the table).
    fp_of: FxHashMap<u64, Fp>,
    cache: SetAssocCache,
    base: u64,
    buckets: u64,
    latency: Cycle,
    pub stats: FpStats,
}

impl FpStore {
    /// A store of `buckets` buckets at device address `base`, with a cache of `cache_lines`
    /// buckets of `ways` ways and hit latency `latency`.
    pub fn new(base: u64, buckets: u64, cache_lines: u64, ways: usize, latency: Cycle) -> FpStore {
        FpStore {
            by_fp: FxHashMap::default(),
            fp_of: FxHashMap::default(),
            cache: SetAssocCache::with_geometry((cache_lines / ways as u64).max(1), ways, Replacement::Lru),
            base,
            buckets: buckets.max(1),
            latency,
            stats: FpStats::default(),
        }
    }

    fn bucket(&self, fp: &Fp) -> u64 {
        let h = u64::from_le_bytes(fp[..8].try_into().expect("8 bytes")) ^ u64::from_le_bytes(fp[8..16].try_into().expect("8 bytes"));
        // A CRC fills only the low 32 bits: mix before the modulo.
        h.wrapping_mul(0x9E37_79B9_7F4A_7C15) % self.buckets
    }

    /// Brings `fp`'s bucket into the cache (`write`: dirty); returns when it is usable.
    fn access(&mut self, mc: &mut McOps, fp: &Fp, write: bool, now: Cycle) -> Cycle {
        let b = self.bucket(fp);
        if self.cache.lookup(b, write).is_some() {
            return now + self.latency;
        }
        let at = mc.device_read(self.base + b * 64, TrafficClass::Design, now);
        let (_, victim) = self.cache.fill(b, write);
        if let Some(v) = victim.filter(|v| v.dirty) {
            self.stats.nvm_writes += 1;
            mc.device_write(self.base + v.line * 64, TrafficClass::Design, at);
        }
        at + self.latency
    }

    /// Looks `fp` up (full deduplication: in NVM when its bucket is not cached). Returns the
    /// line holding that content, if any, and when the lookup is done.
    pub fn lookup(&mut self, mc: &mut McOps, fp: &Fp, now: Cycle) -> (Option<u64>, Cycle) {
        let t = self.access(mc, fp, false, now);
        (self.by_fp.get(fp).copied(), t)
    }

    /// Physical `line` now holds content `fp` (a unique write): its old fingerprint's entry
    /// leaves, the new one enters. Returns when both buckets are updated in the cache.
    pub fn record(&mut self, mc: &mut McOps, line: u64, fp: Fp, now: Cycle) -> Cycle {
        let mut t = now;
        if let Some(old) = self.fp_of.get(&line).copied() {
            t = t.max(self.forget(mc, line, &old, now));
        }
        t = t.max(self.access(mc, &fp, true, now));
        self.by_fp.insert(fp, line);
        self.fp_of.insert(line, fp);
        t
    }

    /// Physical `line` no longer holds data (no logical line maps to it): its entry leaves.
    pub fn release(&mut self, mc: &mut McOps, line: u64, now: Cycle) -> Cycle {
        match self.fp_of.remove(&line) {
            Some(old) => self.forget(mc, line, &old, now),
            None => now,
        }
    }

    fn forget(&mut self, mc: &mut McOps, line: u64, fp: &Fp, now: Cycle) -> Cycle {
        if self.by_fp.get(fp) == Some(&line) {
            self.by_fp.remove(fp);
        }
        self.access(mc, fp, true, now)
    }

    /// Power loss: the cache's buckets are gone. The table is a hint (a line written without a
    /// match is written as unique), so it restarts empty; the mappings are the AMT's.
    pub fn crash(&mut self) {
        self.cache.clear();
        self.by_fp.clear();
        self.fp_of.clear();
    }

    /// Forgets the cache's buckets (clean, after [`flush`](Self::flush)).
    pub fn drop_cache(&mut self) { self.cache.clear() }

    /// Writes every dirty bucket back (a clean shutdown).
    pub fn flush(&mut self, mc: &mut McOps, now: Cycle) -> Cycle {
        let dirty: Vec<(u64, usize)> = self.cache.valid_lines().filter(|&(_, d, _)| d).map(|(l, _, s)| (l, s)).collect();
        let mut done = now;
        for (b, slot) in dirty {
            self.cache.set_dirty(slot, false);
            self.stats.nvm_writes += 1;
            done = done.max(mc.device_write(self.base + b * 64, TrafficClass::Design, now));
        }
        done
    }

    /// Fingerprints in the store.
    pub fn len(&self) -> u64 { self.by_fp.len() as u64 }

    pub fn is_empty(&self) -> bool { self.by_fp.is_empty() }

    /// The fingerprint cache's lookups (each miss read a bucket from NVM).
    pub fn cache_stats(&self) -> secmem_core::cache::CacheStats { self.cache.stats }
}
