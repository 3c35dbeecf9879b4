//! The secure memory controller: the substrate every design runs on.
//!
//! It sits between the LLC and the device. For every data line it keeps a split counter
//! (encryption), a 64-bit MAC (integrity) and, over the counter blocks, a Bonsai Merkle Tree
//! (freshness) whose root is an on-chip register. Counter blocks, MAC blocks and tree nodes are
//! cached in three set-associative metadata caches; misses fetch from the device, and counter
//! and tree-node fetches are verified up the tree until the first cached (already verified)
//! ancestor or the root.
//!
//! Timing: each operation takes the cycle it arrives at and returns the cycle it completes.
//! Metadata fetches along a path are issued together (their addresses are known up front) and
//! verified in parallel, so a path costs one device round trip plus one hash; the pad is
//! generated as soon as the counter is available, in parallel with the data fetch when the
//! counter hits. Write-backs of evicted metadata are issued at the time of the access that
//! evicted them: they cost no latency to that access but occupy banks and queues, so they
//! slow whatever follows — which is how metadata traffic competes with data traffic.
//!
//! Designs (crate::design) call these building blocks; `read_line` / `write_line` are the
//! baseline paths.

use crate::config::{MetadataCachesConfig, MetadataPersistence, SecurityConfig, TreeConfig, TreeUpdate};
use secmem_core::addr::{line_in_page, page_of_line, LINES_PER_PAGE, LINE_SHIFT};
use secmem_core::cache::{CacheStats, SetAssocCache};
use secmem_core::counters::{Bump, CounterStore};
use secmem_core::error::ConfigError;
use secmem_core::stats::Histogram;
use secmem_core::tree::SecureLayout;
use secmem_core::Cycle;
use secmem_media::{AccessKind, MediaStats, MemRequest, MemoryPort, TrafficClass};
use serde::Serialize;

/// MAC and hash computations, by purpose (Horus Fig. 13 splits them the same way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MacOps {
    /// MACs computed over data written (ciphertext, address, counter).
    pub data_write: u64,
    /// MACs recomputed to verify data read.
    pub data_verify: u64,
    /// Hashes that verify a fetched counter block or tree node against its parent.
    pub tree_verify: u64,
    /// Hashes that update a parent (lazily on eviction, eagerly on every write).
    pub tree_update: u64,
    /// MACs of lines re-encrypted after a minor-counter overflow.
    pub reencrypt: u64,
    /// Design-specific MACs (vault MACs, dedup fingerprints, ...).
    pub design: u64,
}

impl MacOps {
    pub fn total(&self) -> u64 {
        self.data_write + self.data_verify + self.tree_verify + self.tree_update + self.reencrypt + self.design
    }
}

/// AES pad generations, by purpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AesOps {
    pub data_encrypt: u64,
    pub data_decrypt: u64,
    /// Decrypt + encrypt of lines re-encrypted after a minor overflow (2 per line).
    pub reencrypt: u64,
    pub design: u64,
}

impl AesOps {
    pub fn total(&self) -> u64 { self.data_encrypt + self.data_decrypt + self.reencrypt + self.design }
}

/// Plain counters of the controller; every field subtracts for warm-up removal.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct McStats {
    /// Data-line reads requested by the LLC (misses).
    pub data_reads: u64,
    /// Data-line writes requested by the LLC (dirty evictions, flushes, write-throughs).
    pub data_writes: u64,
    pub mac_ops: MacOps,
    pub aes_ops: AesOps,
    /// Minor-counter overflows (each re-encrypts a page).
    pub counter_overflows: u64,
    /// Lines re-encrypted because of overflows.
    pub reencrypted_lines: u64,
    /// Root register updates.
    pub root_updates: u64,
    pub counter_cache: CacheStats,
    pub mac_cache: CacheStats,
    pub tree_cache: CacheStats,
    /// Data read latency at the controller (arrival to plaintext available), cycles.
    #[serde(skip)]
    pub read_latency: Histogram,
    /// Data write latency at the controller (arrival to persistent), cycles.
    #[serde(skip)]
    pub write_latency: Histogram,
}

impl McStats {
    pub fn since(&self, s: &McStats) -> McStats {
        let m = |a: &MacOps, b: &MacOps| MacOps {
            data_write: a.data_write - b.data_write,
            data_verify: a.data_verify - b.data_verify,
            tree_verify: a.tree_verify - b.tree_verify,
            tree_update: a.tree_update - b.tree_update,
            reencrypt: a.reencrypt - b.reencrypt,
            design: a.design - b.design,
        };
        let a = |a: &AesOps, b: &AesOps| AesOps {
            data_encrypt: a.data_encrypt - b.data_encrypt,
            data_decrypt: a.data_decrypt - b.data_decrypt,
            reencrypt: a.reencrypt - b.reencrypt,
            design: a.design - b.design,
        };
        McStats {
            data_reads: self.data_reads - s.data_reads,
            data_writes: self.data_writes - s.data_writes,
            mac_ops: m(&self.mac_ops, &s.mac_ops),
            aes_ops: a(&self.aes_ops, &s.aes_ops),
            counter_overflows: self.counter_overflows - s.counter_overflows,
            reencrypted_lines: self.reencrypted_lines - s.reencrypted_lines,
            root_updates: self.root_updates - s.root_updates,
            counter_cache: self.counter_cache.since(&s.counter_cache),
            mac_cache: self.mac_cache.since(&s.mac_cache),
            tree_cache: self.tree_cache.since(&s.tree_cache),
            read_latency: self.read_latency.since(&s.read_latency),
            write_latency: self.write_latency.since(&s.write_latency),
        }
    }
}

/// Which metadata structure a block belongs to.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Meta {
    /// Tree level 0: a counter block (index = page).
    Counter,
    /// A stored tree node at level >= 1.
    Tree,
    Mac,
}

/// Parameters resolved once from the config sections.
#[derive(Clone, Debug)]
pub struct McParams {
    pub secure: bool,
    pub minor_bits: u32,
    pub aes: Cycle,
    pub mac: Cycle,
    pub hash: Cycle,
    pub verify_on_critical_path: bool,
    pub update: TreeUpdate,
    pub strict: bool,
    pub counter_hit: Cycle,
    pub mac_hit: Cycle,
    pub tree_hit: Cycle,
}

pub struct SecureMc {
    pub media: Box<dyn MemoryPort>,
    pub layout: SecureLayout,
    pub counters: CounterStore,
    pub counter_cache: SetAssocCache,
    pub mac_cache: SetAssocCache,
    pub tree_cache: SetAssocCache,
    pub p: McParams,
    pub stats: McStats,
    /// Dirty metadata pushed out of a cache, waiting for write-back (and, with lazy update,
    /// for its parent to absorb its new hash). Processed after each operation, so evictions
    /// caused while handling an eviction are handled too, without recursion.
    evictions: Vec<(Meta, u64)>,
}

impl SecureMc {
    /// Builds the controller over `media`, for `data_bytes` of protected memory.
    pub fn new(
        security: &SecurityConfig,
        tree: &TreeConfig,
        caches: &MetadataCachesConfig,
        data_bytes: u64,
        media: Box<dyn MemoryPort>,
    ) -> Result<SecureMc, ConfigError> {
        let layout = SecureLayout::new(data_bytes, tree.arity, security.mac_bits)?;
        let strict = security.metadata_persistence == MetadataPersistence::Strict;
        if strict && tree.update != TreeUpdate::Eager {
            return Err(ConfigError::new(
                "security.metadata_persistence",
                "strict persistence needs tree.update = \"eager\" (a lazily updated root is stale after a crash)",
            ));
        }
        Ok(SecureMc {
            media,
            counters: CounterStore::new(security.minor_counter_bits, layout.counter_blocks),
            counter_cache: SetAssocCache::new(&caches.counter),
            mac_cache: SetAssocCache::new(&caches.mac),
            tree_cache: SetAssocCache::new(&caches.tree),
            p: McParams {
                secure: security.enabled,
                minor_bits: security.minor_counter_bits,
                aes: Cycle(security.aes_latency_cycles),
                mac: Cycle(security.mac_latency_cycles),
                hash: Cycle(security.hash_latency_cycles),
                verify_on_critical_path: security.verify_on_critical_path,
                update: tree.update,
                strict,
                counter_hit: Cycle(caches.counter.latency_cycles),
                mac_hit: Cycle(caches.mac.latency_cycles),
                tree_hit: Cycle(caches.tree.latency_cycles),
            },
            layout,
            stats: McStats::default(),
            evictions: Vec::with_capacity(16),
        })
    }

    /// A snapshot of all stats (controller + caches), for warm-up subtraction and reports.
    pub fn snapshot(&self) -> (McStats, MediaStats) {
        let mut s = self.stats.clone();
        s.counter_cache = self.counter_cache.stats;
        s.mac_cache = self.mac_cache.stats;
        s.tree_cache = self.tree_cache.stats;
        (s, self.media.stats().clone())
    }

    // ---------------------------------------------------------------- device access

    #[inline]
    pub fn device_read(&mut self, addr: u64, class: TrafficClass, at: Cycle) -> Cycle {
        self.media.access(MemRequest { addr, kind: AccessKind::Read, class, issue: at })
    }

    #[inline]
    pub fn device_write(&mut self, addr: u64, class: TrafficClass, at: Cycle) -> Cycle {
        self.media.access(MemRequest { addr, kind: AccessKind::Write, class, issue: at })
    }

    // ---------------------------------------------------------------- metadata blocks

    #[inline]
    fn block_addr(&self, level: usize, index: u64) -> u64 {
        if level == 0 { self.layout.counter_addr(index) } else { self.layout.tree.node_addr(level, index) }
    }

    /// (level, index) of a tree-cache key (a stored node's device line number).
    fn tree_key_to_node(&self, key: u64) -> (usize, u64) {
        let addr = key << LINE_SHIFT;
        let t = &self.layout.tree;
        for level in (1..t.root_level()).rev() {
            if addr >= t.base[level] {
                return (level, (addr - t.base[level]) >> LINE_SHIFT);
            }
        }
        unreachable!("tree key {key:#x} below the tree region")
    }

    /// Makes counter block (level 0) or tree node (level >= 1) `index` available on chip,
    /// fetching it and every uncached ancestor and verifying them against their parents.
    /// `dirty` marks the block modified. Returns the cycle it is available and verified.
    pub fn ensure_block(&mut self, level: usize, index: u64, dirty: bool, now: Cycle) -> Cycle {
        let root = self.layout.tree.root_level();
        if level >= root {
            return now; // the root is an on-chip register
        }
        let key = self.block_addr(level, index) >> LINE_SHIFT;
        let (cache, hit_lat) = if level == 0 {
            (&mut self.counter_cache, self.p.counter_hit)
        } else {
            (&mut self.tree_cache, self.p.tree_hit)
        };
        if cache.lookup(key, dirty).is_some() {
            return now + hit_lat;
        }
        // Miss: fetch this block and walk up until a cached ancestor (already verified) or the
        // root. All fetches issue at once; each fetched block is then hashed and compared with
        // its parent's entry, in parallel.
        let mut ready = now;
        let (mut lvl, mut idx) = (level, index);
        let mut fetched = 0u64;
        loop {
            let addr = self.block_addr(lvl, idx);
            let class = if lvl == 0 { TrafficClass::Counter } else { TrafficClass::Tree };
            ready = ready.max(self.device_read(addr, class, now));
            self.fill_meta(if lvl == 0 { Meta::Counter } else { Meta::Tree }, addr >> LINE_SHIFT, lvl == level && dirty);
            fetched += 1;
            let (plvl, pidx) = self.layout.tree.parent(lvl, idx);
            if plvl >= root {
                break;
            }
            let pkey = self.block_addr(plvl, pidx) >> LINE_SHIFT;
            if self.tree_cache.lookup(pkey, false).is_some() {
                break;
            }
            lvl = plvl;
            idx = pidx;
        }
        self.stats.mac_ops.tree_verify += fetched;
        ready + self.p.hash
    }

    /// Makes the MAC block holding `line`'s MAC available. MAC blocks need no tree: a stale
    /// or forged MAC fails against the (tree-verified) counter. Returns the ready cycle.
    pub fn ensure_mac(&mut self, line: u64, dirty: bool, now: Cycle) -> Cycle {
        let (addr, _) = self.layout.mac_addr(line);
        let key = addr >> LINE_SHIFT;
        if self.mac_cache.lookup(key, dirty).is_some() {
            return now + self.p.mac_hit;
        }
        let t = self.device_read(addr, TrafficClass::Mac, now);
        self.fill_meta(Meta::Mac, key, dirty);
        t
    }

    fn fill_meta(&mut self, kind: Meta, key: u64, dirty: bool) {
        let cache = match kind {
            Meta::Counter => &mut self.counter_cache,
            Meta::Tree => &mut self.tree_cache,
            Meta::Mac => &mut self.mac_cache,
        };
        let (_, victim) = cache.fill(key, dirty);
        if let Some(v) = victim {
            if v.dirty {
                self.evictions.push((kind, v.line));
            }
        }
    }

    /// Writes back every queued dirty metadata eviction. With lazy update, an evicted counter
    /// block or node also updates its parent's hash entry (fetching and verifying the parent
    /// if it is not cached), which may evict more.
    pub fn process_evictions(&mut self, now: Cycle) {
        while let Some((kind, key)) = self.evictions.pop() {
            let addr = key << LINE_SHIFT;
            match kind {
                Meta::Mac => {
                    self.device_write(addr, TrafficClass::Mac, now);
                }
                Meta::Counter | Meta::Tree => {
                    let class = if kind == Meta::Counter { TrafficClass::Counter } else { TrafficClass::Tree };
                    self.device_write(addr, class, now);
                    if self.p.update == TreeUpdate::Lazy {
                        let (level, index) = if kind == Meta::Counter {
                            (0, (addr - self.layout.counter_base) >> LINE_SHIFT)
                        } else {
                            self.tree_key_to_node(key)
                        };
                        self.update_parent(level, index, now);
                    }
                }
            }
        }
    }

    /// Recomputes the hash of block (level, index) into its parent (one hash), marking the
    /// parent dirty, or updating the root register.
    fn update_parent(&mut self, level: usize, index: u64, now: Cycle) -> Cycle {
        let (plvl, pidx) = self.layout.tree.parent(level, index);
        self.stats.mac_ops.tree_update += 1;
        if plvl >= self.layout.tree.root_level() {
            self.stats.root_updates += 1;
            return now + self.p.hash;
        }
        let t = self.ensure_block(plvl, pidx, true, now);
        t + self.p.hash
    }

    /// Eager update: recompute every hash from the counter block of `page` to the root.
    /// Returns when the root is updated (hashes are sequential up the path).
    fn eager_path_update(&mut self, page: u64, now: Cycle) -> Cycle {
        let (mut level, mut index) = (0usize, page);
        let mut t = now;
        let root = self.layout.tree.root_level();
        loop {
            let (plvl, pidx) = self.layout.tree.parent(level, index);
            self.stats.mac_ops.tree_update += 1;
            if plvl >= root {
                self.stats.root_updates += 1;
                return t + self.p.hash;
            }
            let avail = self.ensure_block(plvl, pidx, true, now);
            t = t.max(avail) + self.p.hash;
            if self.p.strict {
                let addr = self.layout.tree.node_addr(plvl, pidx);
                t = t.max(self.device_write(addr, TrafficClass::Tree, t));
                if let Some(slot) = self.tree_cache.probe(addr >> LINE_SHIFT) {
                    self.tree_cache.set_dirty(slot, false);
                }
            }
            level = plvl;
            index = pidx;
        }
    }

    // ---------------------------------------------------------------- baseline data paths

    /// Baseline read of data `line` arriving at `now`: returns when the plaintext is usable.
    pub fn read_line(&mut self, line: u64, now: Cycle) -> Cycle {
        self.stats.data_reads += 1;
        let data_addr = line << LINE_SHIFT;
        let data_at = self.device_read(data_addr, TrafficClass::Data, now);
        if !self.p.secure {
            self.stats.read_latency.record((data_at - now).0);
            return data_at;
        }
        let ctr_at = self.ensure_block(0, page_of_line(line), false, now);
        let mac_at = self.ensure_mac(line, false, now);
        self.process_evictions(now);
        self.stats.aes_ops.data_decrypt += 1;
        self.stats.mac_ops.data_verify += 1;
        // Pad generation starts when the counter is known; XOR when both pad and data are in.
        let plain_at = data_at.max(ctr_at + self.p.aes) + Cycle(1);
        let verified_at = data_at.max(mac_at) + self.p.mac;
        let done = if self.p.verify_on_critical_path { plain_at.max(verified_at) } else { plain_at };
        self.stats.read_latency.record((done - now).0);
        done
    }

    /// Baseline write of data `line` (an LLC write-back) arriving at `now`: returns when the
    /// write is persistent (data, and with strict persistence all its metadata).
    pub fn write_line(&mut self, line: u64, now: Cycle) -> Cycle {
        self.stats.data_writes += 1;
        let data_addr = line << LINE_SHIFT;
        if !self.p.secure {
            let done = self.device_write(data_addr, TrafficClass::Data, now);
            self.stats.write_latency.record((done - now).0);
            return done;
        }
        let page = page_of_line(line);
        let ctr_at = self.ensure_block(0, page, true, now);
        let mut reenc_done = now;
        if self.counters.bump_line(line) == Bump::Overflow {
            reenc_done = self.reencrypt_page(page, line_in_page(line), ctr_at);
        }
        self.stats.aes_ops.data_encrypt += 1;
        self.stats.mac_ops.data_write += 1;
        let cipher_at = ctr_at + self.p.aes + Cycle(1);
        let mac_at = self.ensure_mac(line, true, now).max(cipher_at) + self.p.mac;
        let mut done = self.device_write(data_addr, TrafficClass::Data, mac_at).max(reenc_done);
        match self.p.update {
            TreeUpdate::Lazy => {}
            TreeUpdate::Eager => done = done.max(self.eager_path_update(page, ctr_at)),
        }
        if self.p.strict {
            done = done.max(self.persist_metadata_of(line, mac_at));
        }
        self.process_evictions(now);
        self.stats.write_latency.record((done - now).0);
        done
    }

    /// Strict persistence: write the counter block and MAC block of `line` through to NVM and
    /// leave their cached copies clean.
    fn persist_metadata_of(&mut self, line: u64, at: Cycle) -> Cycle {
        let caddr = self.layout.counter_addr(page_of_line(line));
        let (maddr, _) = self.layout.mac_addr(line);
        let t1 = self.device_write(caddr, TrafficClass::Counter, at);
        let t2 = self.device_write(maddr, TrafficClass::Mac, at);
        if let Some(s) = self.counter_cache.probe(caddr >> LINE_SHIFT) {
            self.counter_cache.set_dirty(s, false);
        }
        if let Some(s) = self.mac_cache.probe(maddr >> LINE_SHIFT) {
            self.mac_cache.set_dirty(s, false);
        }
        t1.max(t2)
    }

    /// Re-encrypts the other 63 lines of `page` after its major counter advanced: each is read,
    /// decrypted with the old counter, encrypted with the new one, re-MACed and written back.
    /// (The line being written is encrypted by the write itself, so the page's 64 lines are
    /// all rewritten.)
    fn reencrypt_page(&mut self, page: u64, written_idx: usize, at: Cycle) -> Cycle {
        self.stats.counter_overflows += 1;
        let mut done = at;
        let first_line = page * LINES_PER_PAGE;
        for i in 0..LINES_PER_PAGE as usize {
            if i == written_idx {
                continue;
            }
            let line = first_line + i as u64;
            let addr = line << LINE_SHIFT;
            let r = self.device_read(addr, TrafficClass::Reencrypt, at);
            let mac_at = self.ensure_mac(line, true, at);
            let ready = r.max(at) + self.p.aes + self.p.mac;
            done = done.max(self.device_write(addr, TrafficClass::Reencrypt, ready.max(mac_at)));
            self.stats.reencrypted_lines += 1;
            self.stats.aes_ops.reencrypt += 2;
            self.stats.mac_ops.reencrypt += 1;
        }
        done
    }

    /// Writes every dirty metadata block back to NVM (lazy: with parent updates, so the root
    /// ends up consistent), e.g. at the end of a run or in a design's drain. Returns when the
    /// last write is persistent.
    pub fn flush_metadata(&mut self, now: Cycle) -> Cycle {
        // Counters first, then tree levels bottom-up, so each parent absorbs its children
        // before it is itself written. A parent fetched on the way may evict a dirty block of a
        // level already done, so passes repeat until no counter or node is dirty.
        let mut done = now;
        for _pass in 0..64 {
            let dirty_counters: Vec<u64> = self.counter_cache.valid_lines().filter(|x| x.1).map(|x| x.0).collect();
            let mut any = !dirty_counters.is_empty();
            for key in dirty_counters {
                self.counter_cache.invalidate(key);
                self.evictions.push((Meta::Counter, key));
            }
            self.process_evictions(now);
            for level in 1..self.layout.tree.root_level() {
                let dirty: Vec<u64> = self
                    .tree_cache
                    .valid_lines()
                    .filter(|&(k, d, _)| d && self.tree_key_to_node(k).0 == level)
                    .map(|x| x.0)
                    .collect();
                any |= !dirty.is_empty();
                for key in dirty {
                    self.tree_cache.invalidate(key);
                    self.evictions.push((Meta::Tree, key));
                }
                self.process_evictions(now);
            }
            if !any {
                break;
            }
        }
        let dirty_macs: Vec<u64> = self.mac_cache.valid_lines().filter(|x| x.1).map(|x| x.0).collect();
        for key in dirty_macs {
            self.mac_cache.invalidate(key);
            done = done.max(self.device_write(key << LINE_SHIFT, TrafficClass::Mac, now));
        }
        done.max(self.media.drain(now))
    }
}
