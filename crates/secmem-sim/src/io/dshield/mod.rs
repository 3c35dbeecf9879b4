//! D-Shield's storage metadata (HPCA'23, section V-B2 and Fig. 6): what the DMA Interception
//! Engine (DIE) must read, write and compute for each data I/O.
//!
//! * **Fused CMAC blocks.** One 512 B block per 32 data blocks (512 B sectors): a 64-bit major
//!   counter, 32 38-bit minor counters and 32 88-bit MACs (8 + 152 + 352 = 512 B). They fill
//!   1/32 of the data's size: 3.125% of the drive.
//! * **A Merkle tree over the counters** (Bonsai: the MACs need none). A leaf is the 8 B hash
//!   of one CMAC block's counters (its major and 32 minors, 160 B); a 512 B tree node holds 64
//!   such hashes; levels go up to one node, whose hash the DIE keeps on chip (the root). About
//!   0.05% of the drive.
//! * **Two on-chip caches** of 256 KB, 8 ways (Table I): one of CMAC blocks, one of tree nodes,
//!   both write-back. A node in the cache has been verified, so a walk stops at the first
//!   cached ancestor.
//! * **Updates are lazy**, as the memory side's `tree.update = lazy`: a write changes its CMAC
//!   block in the cache; when a dirty block leaves the cache it is written to the drive and its
//!   hash goes into its parent node (fetched and verified if absent), which becomes dirty in
//!   turn. (The paper leaves the update policy unstated; lazy is the secure-memory baseline it
//!   builds on, its references 10 and 56.)
//! * **Cryptography** runs on the memory controller's engine (the DIE delegates it): per 512 B
//!   data block, 8 pads of 64 B (40 cycles each) and one 512 B GHASH MAC (320 cycles); per
//!   tree node verified or updated, one 512 B hash (320 cycles); per CMAC block's counters
//!   hashed into the tree, 160 B: three 64 B operations.
//! * **Minor overflow** (section V): a 38-bit minor that would wrap bumps the block's major
//!   and resets its 32 minors, so the 32 data blocks it covers are read, re-encrypted and
//!   written back.
//!
//! * **D-Shield-Pro** (section VII, Fig. 12): a direct-mapped cache of CMAC blocks in host
//!   memory (`nvme-create-fused-cache`; 128 MB by default) behind the on-chip one, with an
//!   on-chip directory of what it holds. An on-chip miss that the directory finds is loaded
//!   from memory (8 lines through the secure memory controller, so verified by the memory's
//!   tree: no storage tree walk); otherwise from the drive. Each on-chip entry has a 5-bit
//!   *Useful* count, up on each read of its data blocks and down on each write; a block
//!   leaving the on-chip cache with a non-zero count goes into the memory cache. Dirty blocks
//!   are written to the drive as they leave (write-through), so a memory-cache block is always
//!   the drive's and is dropped without a write-back. Pro builds on D-Shield-Hyb ([`hyb`]), as
//!   in the paper.
//!
//! The metadata lives in its own namespace (`nvme-create-mdns`); [`Geometry`], the Region
//! Table, places each data namespace's metadata there: CMAC blocks first, then the tree level by
//! level from the leaves' parents up.

pub mod bytes;
pub mod campaign;
pub mod hyb;
pub mod regions;

use bytes::{Block, Bytes, Detected};
use rustc_hash::FxHashMap;
use secmem_core::cache::{Replacement, SetAssocCache};
pub use regions::Geometry;

/// Data blocks (512 B sectors) per CMAC block.
pub const BLOCKS_PER_CMAC: u64 = 32;
/// Child hashes per 512 B tree node (8 B each).
pub const TREE_ARITY: u64 = 64;
/// Bytes of one CMAC block's counters: a 64-bit major and 32 38-bit minors.
pub const COUNTER_BYTES: u64 = 8 + 32 * 38 / 8;

/// A metadata block of [`Geometry`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MetaBlock {
    Cmac(u64),
    /// A tree node: its level (1 = the CMAC blocks' parents) and index in the level.
    Node(u32, u64),
}

/// What one data I/O costs the DIE beyond the data itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetaWork {
    /// Metadata blocks to read from the drive (through the hidden metadata queue pair) before
    /// the data can be verified or encrypted; all their addresses are known at once, so they
    /// may be read in parallel.
    pub reads: Vec<MetaBlock>,
    /// Metadata blocks written back to the drive (dirty blocks leaving the caches).
    pub writes: Vec<MetaBlock>,
    /// Data blocks re-encrypted after a minor overflow: read, re-encrypted and written again.
    pub reencrypted_blocks: Vec<u64>,
    /// D-Shield-Pro: slots of the in-memory CMAC cache loaded (waited for) and filled.
    pub memory_loads: Vec<u64>,
    pub memory_fills: Vec<u64>,
    /// 64 B operations of the memory controller's engine: pads, counter hashes.
    pub ops_64b: u64,
    /// 512 B hashes: data MACs, tree nodes verified or updated.
    pub hashes_512b: u64,
}

impl MetaWork {
    /// `other`'s work after this one's.
    fn add(&mut self, other: MetaWork) {
        self.reads.extend(other.reads);
        self.writes.extend(other.writes);
        self.reencrypted_blocks.extend(other.reencrypted_blocks);
        self.memory_loads.extend(other.memory_loads);
        self.memory_fills.extend(other.memory_fills);
        self.ops_64b += other.ops_64b;
        self.hashes_512b += other.hashes_512b;
    }

}

/// Operations one step of the DIE asks of the engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct EngineWork {
    ops_64b: u64,
    hashes_512b: u64,
}

impl EngineWork {
    /// What `sectors` sectors cost the engine themselves: 8 pads and a MAC each.
    fn of_sectors(sectors: u64) -> EngineWork { EngineWork { ops_64b: 8 * sectors, hashes_512b: sectors } }
}

impl std::ops::AddAssign for EngineWork {
    fn add_assign(&mut self, o: EngineWork) {
        self.ops_64b += o.ops_64b;
        self.hashes_512b += o.hashes_512b;
    }
}

impl std::ops::SubAssign for EngineWork {
    fn sub_assign(&mut self, o: EngineWork) {
        self.ops_64b -= o.ops_64b;
        self.hashes_512b -= o.hashes_512b;
    }
}

impl From<&MetaWork> for EngineWork {
    fn from(w: &MetaWork) -> EngineWork { EngineWork { ops_64b: w.ops_64b, hashes_512b: w.hashes_512b } }
}

/// The DIE's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DieStats {
    pub cmac_hits: u64,
    pub cmac_misses: u64,
    pub node_hits: u64,
    pub node_misses: u64,
    pub metadata_reads: u64,
    pub metadata_writes: u64,
    pub minor_overflows: u64,
    pub reencrypted_blocks: u64,
    /// D-Shield-Pro: on-chip misses found in the memory cache, and not.
    pub memory_cache_hits: u64,
    pub memory_cache_misses: u64,
    pub memory_cache_fills: u64,
}

/// D-Shield-Pro's in-memory CMAC cache: direct-mapped, its directory on chip.
#[derive(Clone)]
struct MemoryCache {
    /// The CMAC block in each slot (`u64::MAX`: empty). The on-chip directory.
    directory: Vec<u64>,
    /// The 5-bit Useful count of each CMAC block in the on-chip cache.
    useful: FxHashMap<u64, u8>,
}

/// The Useful count's ceiling (5 bits).
const USEFUL_MAX: u8 = 31;

/// The DIE's metadata state: the two caches and the counters of every CMAC block written.
#[derive(Clone)]
pub struct Metadata {
    pub geometry: Geometry,
    cmac_cache: SetAssocCache,
    node_cache: SetAssocCache,
    /// Minor counters of each CMAC block written (sparse: blocks never written are all zero).
    minors: FxHashMap<u64, [u64; BLOCKS_PER_CMAC as usize]>,
    minor_max: u64,
    memory_cache: Option<MemoryCache>,
    /// Functional mode: the drive's bytes and the caches' content.
    fx: Option<Box<Bytes>>,
    pub stats: DieStats,
}

/// Node cache keys: the level in the top byte, the index below (levels fit, indices are < 2^56).
fn node_key(level: u32, i: u64) -> u64 { (u64::from(level) << 56) | i }

/// The node a [`node_key`] names.
fn node_of_key(key: u64) -> MetaBlock { MetaBlock::Node((key >> 56) as u32, key & ((1 << 56) - 1)) }

impl Metadata {
    /// The namespaces of `geometry`, with caches of `cache_kib` each (`ways` ways of 512 B
    /// blocks, shared by every namespace) and `minor_bits`-bit minor counters.
    pub fn new(geometry: Geometry, cache_kib: u64, ways: usize, minor_bits: u32) -> Metadata {
        let blocks = (cache_kib * 1024 / 512).max(ways as u64);
        let sets = (blocks / ways as u64).max(1);
        Metadata {
            geometry,
            cmac_cache: SetAssocCache::with_geometry(sets, ways, Replacement::Lru),
            node_cache: SetAssocCache::with_geometry(sets, ways, Replacement::Lru),
            minors: FxHashMap::default(),
            minor_max: if minor_bits >= 64 { u64::MAX } else { (1u64 << minor_bits) - 1 },
            memory_cache: None,
            fx: None,
            stats: DieStats::default(),
        }
    }

    /// Functional mode: real bytes under `keys`, on a drive that starts empty.
    pub fn with_bytes(mut self, keys: secmem_crypto::storage::StorageKeys) -> Metadata {
        self.fx = Some(Box::new(Bytes::new(keys)));
        self
    }

    pub fn bytes(&self) -> Option<&Bytes> { self.fx.as_deref() }
    pub fn bytes_mut(&mut self) -> Option<&mut Bytes> { self.fx.as_deref_mut() }

    /// D-Shield-Pro: a memory cache of `slots` CMAC blocks (empty, as after a namespace format).
    pub fn with_memory_cache(mut self, slots: u64) -> Metadata {
        self.memory_cache = Some(MemoryCache { directory: vec![u64::MAX; slots as usize], useful: FxHashMap::default() });
        self
    }

    /// Counts a read (+1) or write (-1) of a CMAC block's data in its Useful count.
    fn useful(&mut self, c: u64, read: bool) {
        if let Some(m) = self.memory_cache.as_mut() {
            let u = m.useful.entry(c).or_insert(0);
            *u = if read { (*u + 1).min(USEFUL_MAX) } else { u.saturating_sub(1) };
        }
    }

    /// A read of `n` data blocks from `first`: their CMAC blocks (and the tree path that
    /// verifies each fetched one), then each block's MAC checked and decrypted.
    pub fn read(&mut self, first: u64, n: u64) -> MetaWork { self.read_impl(first, n, None) }

    /// A write of `n` data blocks from `first`: their CMAC blocks, a minor increment each (an
    /// overflow re-encrypts the block's 32), then each block encrypted and its MAC computed.
    pub fn write(&mut self, first: u64, n: u64) -> MetaWork { self.write_impl(first, n, None).0 }

    /// Functional mode: [`Metadata::read`] with the blocks' plaintext into `out` (`n` blocks),
    /// or the first verification failure.
    pub fn read_bytes(&mut self, first: u64, out: &mut [Block]) -> Result<MetaWork, Detected> {
        let w = self.read_impl(first, out.len() as u64, Some(out));
        self.take_failure().map_or(Ok(w), Err)
    }

    /// Functional mode: [`Metadata::write`] of `plain`; returns the ciphertexts to put on the
    /// drive (the caller stores them, so that a crash can fall between), or the first
    /// verification failure (of a block re-encrypted after an overflow, or of metadata).
    pub fn write_bytes(&mut self, first: u64, plain: &[Block]) -> Result<(MetaWork, Vec<Block>), Detected> {
        let (w, ct) = self.write_impl(first, plain.len() as u64, Some(plain));
        self.take_failure().map_or(Ok((w, ct)), Err)
    }

    fn take_failure(&mut self) -> Option<Detected> { self.fx.as_mut().and_then(|f| f.failure.take()) }

    /// The data blocks of `first..first + n` under CMAC block `c`.
    fn in_group(c: u64, first: u64, n: u64) -> std::ops::Range<u64> { first.max(c * BLOCKS_PER_CMAC)..(first + n).min((c + 1) * BLOCKS_PER_CMAC) }

    fn read_impl(&mut self, first: u64, n: u64, mut out: Option<&mut [Block]>) -> MetaWork {
        let mut w = MetaWork::default();
        for c in self.cmac_range(first, n) {
            self.need_cmac(c, false, &mut w);
            self.useful(c, true);
            if let (Some(fx), Some(out)) = (self.fx.as_mut(), out.as_mut()) {
                for s in Self::in_group(c, first, n) {
                    fx.read_block(s, &mut out[(s - first) as usize]);
                }
            }
        }
        w.ops_64b += 8 * n;
        w.hashes_512b += n;
        w
    }

    fn write_impl(&mut self, first: u64, n: u64, plain: Option<&[Block]>) -> (MetaWork, Vec<Block>) {
        let mut w = MetaWork::default();
        let mut ct = Vec::with_capacity(if plain.is_some() { n as usize } else { 0 });
        for c in self.cmac_range(first, n) {
            self.need_cmac(c, true, &mut w);
            self.useful(c, false);
            for s in Self::in_group(c, first, n) {
                let minors = self.minors.entry(c).or_insert([0; BLOCKS_PER_CMAC as usize]);
                let k = (s % BLOCKS_PER_CMAC) as usize;
                // An overflow moves the major counter on; every other block of the group (up to
                // the namespace's end) is encrypted anew.
                let reencrypted: Option<Vec<u64>> = (minors[k] == self.minor_max).then(|| {
                    *minors = [0; BLOCKS_PER_CMAC as usize];
                    let base = c * BLOCKS_PER_CMAC;
                    let end = self.geometry.data_end_of(s);
                    (base..base + BLOCKS_PER_CMAC).filter(|&b| b != s && b < end).collect()
                });
                minors[k] += 1;
                if let Some(others) = &reencrypted {
                    self.stats.minor_overflows += 1;
                    w.reencrypted_blocks.extend(others);
                }
                if let (Some(fx), Some(plain)) = (self.fx.as_mut(), plain) {
                    ct.push(fx.write_block(s, &plain[(s - first) as usize], reencrypted.as_deref()));
                }
            }
        }
        let re = w.reencrypted_blocks.len() as u64;
        self.stats.reencrypted_blocks += re;
        // Each written block, and each re-encrypted one: decrypted (re-encryption only), padded
        // and MACed.
        w.ops_64b += 8 * n + 16 * re;
        w.hashes_512b += n + 2 * re;
        (w, ct)
    }

    fn cmac_range(&self, first: u64, n: u64) -> std::ops::RangeInclusive<u64> { self.geometry.cmac_of(first)..=self.geometry.cmac_of(first + n.max(1) - 1) }

    /// CMAC block `c` in the cache (a write marks it dirty): on a miss it is read and its
    /// counters' hash verified against its parent, which must be in the cache or be read in
    /// turn, up to a cached node or the on-chip top.
    fn need_cmac(&mut self, c: u64, write: bool, w: &mut MetaWork) {
        if self.cmac_cache.lookup(c, write).is_some() {
            self.stats.cmac_hits += 1;
            return;
        }
        self.stats.cmac_misses += 1;
        let in_memory = self.memory_cache.as_ref().map(|m| {
            let slot = c % m.directory.len() as u64;
            (slot, m.directory[slot as usize] == c)
        });
        match in_memory {
            Some((slot, true)) => {
                // Verified by the memory's own protection as it is loaded.
                self.stats.memory_cache_hits += 1;
                w.memory_loads.push(slot);
                if let Some(fx) = self.fx.as_mut() {
                    fx.load_from_memory(c, slot);
                }
            }
            Some((_, false)) => {
                self.stats.memory_cache_misses += 1;
                self.fetch(MetaBlock::Cmac(c), w);
            }
            None => self.fetch(MetaBlock::Cmac(c), w),
        }
        let (_, victim) = self.cmac_cache.fill(c, write);
        if let Some(v) = victim {
            if let Some(m) = self.memory_cache.as_mut() {
                // Into the memory cache if it was useful, over whatever held the slot (the
                // drive has every block the memory cache holds); a changed block the memory
                // cache holds is refreshed there too, so that it never serves a stale copy.
                let slot = v.line % m.directory.len() as u64;
                let held_stale = v.dirty && m.directory[slot as usize] == v.line;
                if m.useful.remove(&v.line).unwrap_or(0) > 0 || held_stale {
                    m.directory[slot as usize] = v.line;
                    self.stats.memory_cache_fills += 1;
                    w.memory_fills.push(slot);
                    if let Some(fx) = self.fx.as_mut() {
                        fx.fill_memory(v.line, slot);
                    }
                }
            }
            self.leave(MetaBlock::Cmac(v.line), v.dirty, w);
        }
    }

    /// A block leaves its cache: written back if dirty; its bytes leave the chip before the
    /// write-back's own walk, which may fetch it again (from the drive, where it now is).
    fn leave(&mut self, b: MetaBlock, dirty: bool, w: &mut MetaWork) {
        if dirty {
            self.write_back(b, true, w);
        } else if let Some(fx) = self.fx.as_mut() {
            fx.evict(b);
        }
    }

    /// Reads `b` and verifies it: a CMAC block's counters (three 64 B operations), a node (one
    /// 512 B hash), against a parent that is cached, read here, or the top.
    fn fetch(&mut self, b: MetaBlock, w: &mut MetaWork) {
        w.reads.push(b);
        self.stats.metadata_reads += 1;
        match b {
            MetaBlock::Cmac(_) => w.ops_64b += COUNTER_BYTES.div_ceil(64),
            MetaBlock::Node(..) => w.hashes_512b += 1,
        }
        if let Some(p) = self.geometry.parent(b) {
            self.ensure_node(p, false, w);
        }
        if let Some(fx) = self.fx.as_mut() {
            fx.load(&self.geometry, b);
        }
    }

    /// [`Metadata::need_node`] until `p` is present: write-backs that filling it sets off can
    /// cascade through its set and evict it again (with few ways), and its child needs it.
    fn ensure_node(&mut self, p: MetaBlock, write: bool, w: &mut MetaWork) {
        let MetaBlock::Node(level, i) = p else { unreachable!("a parent is a node") };
        loop {
            self.need_node(p, write, w);
            if self.geometry.is_top(p) || self.node_cache.probe(node_key(level, i)).is_some() {
                return;
            }
        }
    }

    /// Tree node `p` in the cache (on-chip top: always), dirty if `write`.
    fn need_node(&mut self, p: MetaBlock, write: bool, w: &mut MetaWork) {
        let MetaBlock::Node(level, i) = p else { unreachable!("a parent is a node") };
        if self.geometry.is_top(p) {
            return; // on chip
        }
        let key = node_key(level, i);
        if self.node_cache.lookup(key, write).is_some() {
            self.stats.node_hits += 1;
            return;
        }
        self.stats.node_misses += 1;
        self.fetch(p, w);
        if let Some(slot) = self.node_cache.probe(key) {
            // The walk above it evicted a dirty child of `p`, whose write-back brought `p` in.
            if write {
                self.node_cache.set_dirty(slot, true);
            }
            return;
        }
        let (_, victim) = self.node_cache.fill(key, write);
        if let Some(v) = victim {
            self.leave(node_of_key(v.line), v.dirty, w);
        }
    }

    /// A dirty block leaves its cache: written to the drive, its new hash put into its parent
    /// (one 512 B hash over the parent's new content), which becomes dirty.
    fn write_back(&mut self, b: MetaBlock, leaving: bool, w: &mut MetaWork) {
        w.writes.push(b);
        self.stats.metadata_writes += 1;
        if let MetaBlock::Cmac(_) = b {
            w.ops_64b += COUNTER_BYTES.div_ceil(64);
        }
        if let Some(fx) = self.fx.as_mut() {
            fx.store(&self.geometry, b, leaving);
        }
        if let Some(p) = self.geometry.parent(b) {
            self.ensure_node(p, true, w);
            w.hashes_512b += 1;
            if let Some(fx) = self.fx.as_mut() {
                // The hash of the latest copy written: the walk that brought the parent in may
                // have fetched `b` again, changed it and written it back.
                fx.set_parent_entry(&self.geometry, b);
            }
        }
    }

    /// Every dirty block written back, CMAC blocks first and then the tree level by level
    /// upwards, so the drive and the on-chip top agree (a clean shutdown, or the paper's eADR
    /// drain of the DIE's metadata). The blocks stay cached, clean.
    pub fn flush(&mut self) -> MetaWork {
        let mut w = MetaWork::default();
        let dirty: Vec<_> = self.cmac_cache.valid_lines().filter(|l| l.1).map(|l| l.0).collect();
        for c in dirty {
            if let Some(slot) = self.cmac_cache.probe(c).filter(|&s| self.cmac_cache.is_dirty(s)) {
                self.cmac_cache.set_dirty(slot, false);
                self.write_back(MetaBlock::Cmac(c), false, &mut w);
            }
        }
        for level in 1..self.geometry.top_level() {
            let dirty: Vec<_> = self.node_cache.valid_lines().filter(|l| l.1 && matches!(node_of_key(l.0), MetaBlock::Node(lv, _) if lv == level)).map(|l| l.0).collect();
            for key in dirty {
                if let Some(slot) = self.node_cache.probe(key).filter(|&s| self.node_cache.is_dirty(s)) {
                    self.node_cache.set_dirty(slot, false);
                    self.write_back(node_of_key(key), false, &mut w);
                }
            }
        }
        w
    }

    /// The on-chip caches emptied, dirty content lost (a power failure without a drain; after
    /// [`Metadata::flush`], a cold restart). The top node stays: it is the root of trust.
    /// (Only after this may a flushed D-Shield-Pro run on: a flush leaves the memory cache's
    /// copies of the blocks it wrote stale, and an empty directory forgets them.)
    pub fn drop_caches(&mut self) {
        self.cmac_cache.clear();
        self.node_cache.clear();
        if let Some(m) = self.memory_cache.as_mut() {
            // D-Shield-Pro's directory is on chip too: the memory cache starts empty.
            m.directory.fill(u64::MAX);
            m.useful.clear();
        }
        if let Some(fx) = self.fx.as_mut() {
            fx.drop_cached();
        }
    }

    /// Functional mode's invariants against the caches' bookkeeping (tests; see
    /// [`bytes::Bytes`]).
    #[cfg(test)]
    pub(crate) fn check(&self) -> Result<(), String> {
        let fx = self.fx.as_ref().ok_or("not in functional mode")?;
        let dirty = |b: MetaBlock| match b {
            MetaBlock::Cmac(c) => self.cmac_cache.probe(c).map(|s| self.cmac_cache.is_dirty(s)),
            MetaBlock::Node(l, i) => self.node_cache.probe(node_key(l, i)).map(|s| self.node_cache.is_dirty(s)),
        };
        fx.check_consistency(&self.geometry, &dirty)?;
        let nodes = self.node_cache.valid_lines().map(|l| node_of_key(l.0));
        match nodes.chain(self.cmac_cache.valid_lines().map(|l| MetaBlock::Cmac(l.0))).find(|&b| fx.cached(b).is_none()) {
            Some(b) => Err(format!("{b:?} is cached without its bytes")),
            None => Ok(()),
        }
    }

    /// Dirty metadata blocks held in the two caches.
    pub fn dirty_blocks(&self) -> usize { self.cmac_cache.dirty_count() + self.node_cache.dirty_count() }
}

/// The DMA Interception Engine on the host's I/O path (Fig. 8): for each application I/O it
/// starts the metadata reads as soon as the I/O's addresses pass it (the submission), holds
/// each of the I/O's commands where its data passes the DMA path, and lets it go once the
/// metadata is in and the memory controller's engine has verified and decrypted (reads) or
/// encrypted and MACed (writes) its sectors; a read's completion entry and MSI come after.
/// The engine is the memory controller's ([`secmem_schemes::controller::engine`]): the DIE's
/// operations queue there with the memory side's own pads, MACs and hashes.
pub struct Die {
    pub meta: Metadata,
    /// D-Shield-Pro: the host-memory line where the in-memory CMAC cache starts (512 B slots).
    memory_cache_line: u64,
    op_64b_cycles: u64,
    hash_512b_cycles: u64,
    /// What the engine ran for the DIE: 64 B operations and 512 B hashes.
    pub engine_ops_64b: u64,
    pub engine_hashes_512b: u64,
    slots: Vec<SlotState>,
    /// D-Shield-Hyb: the protection-domain vectors, shared with the host's DMA path.
    pub hyb: Option<std::rc::Rc<std::cell::RefCell<hyb::ProtectionDomains>>>,
    /// Functional mode: each write's data, and what each read must return.
    pub oracle: Option<Oracle>,
}

/// Functional `secmem io`: the data the application writes (seeded, per block and version) and
/// a count of the blocks read back, decrypted, verified and compared.
#[derive(Default)]
pub struct Oracle {
    seed: u64,
    /// Writes of each block so far (its data is a function of the block, the version and the seed).
    versions: FxHashMap<u64, u32>,
    pub blocks_written: u64,
    pub blocks_verified: u64,
}

impl Oracle {
    pub fn new(seed: u64) -> Oracle { Oracle { seed, ..Oracle::default() } }

    /// Block `s`'s data at `version` (0: never written, zeros).
    fn data(&self, s: u64, version: u32) -> Block {
        use rand::{RngCore, SeedableRng};
        let mut b = [0u8; 512];
        if version > 0 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(self.seed ^ s.rotate_left(20) ^ u64::from(version).rotate_left(52));
            rng.fill_bytes(&mut b);
        }
        b
    }
}

#[derive(Clone, Default)]
struct SlotState {
    /// Metadata reads outstanding, and when the last one arrived.
    pending_reads: u32,
    ready_at: u64,
    /// Engine work of the I/O's metadata (counter and tree hashes, re-encryption), run with
    /// its first command released.
    metadata_work: EngineWork,
    /// Whether each sector of a released command is decrypted or encrypted and MACed then
    /// (false: all its work is in `metadata_work`).
    sector_work: bool,
    /// Its commands at the hold: id, arrival, sectors.
    held: Vec<(usize, u64, u64)>,
}

impl Die {
    /// `memory_cache_line`: where D-Shield-Pro's in-memory cache lies (unused without one).
    pub fn new(meta: Metadata, op_64b_cycles: u64, hash_512b_cycles: u64, slots: usize, memory_cache_line: u64) -> Die {
        Die { meta, memory_cache_line, op_64b_cycles, hash_512b_cycles, engine_ops_64b: 0, engine_hashes_512b: 0, slots: vec![SlotState::default(); slots], oracle: None, hyb: None }
    }

    /// Application slot `slot` submits an I/O of `n` sectors from `first` at `at`, its buffer
    /// at host line `buf_line`: its metadata reads go out on the hidden queue pair (and any
    /// dirty blocks they displace are written back). `core` is the thread whose queues the
    /// hidden commands' entries share. Returns whether the I/O's commands wait at the DIE
    /// (D-Shield-Hyb's reads do not).
    #[allow(clippy::too_many_arguments)] // the I/O's fields, its buffer, core and time
    pub fn begin(&mut self, host: &mut super::host::Host, slot_of_io: usize, write: bool, first: u64, n: u64, buf_line: u64, core: u32, at: u64) -> Result<bool, crate::run::SimError> {
        use super::host::Owner;
        let (work, held, sector_work) = match (self.hyb.clone(), self.oracle.as_mut()) {
            (None, None) if write => (self.meta.write(first, n), true, true),
            (None, None) => (self.meta.read(first, n), true, true),
            (None, Some(o)) => (Self::with_bytes(&mut self.meta, o, write, first, n)?, true, true),
            (Some(h), _) if write => {
                // Each sector by where its lines are: unchanged, from another sector, or memory's.
                let mut w = MetaWork::default();
                for k in 0..n {
                    let s = first + k;
                    let source = h.borrow_mut().source(s, buf_line + 8 * k);
                    match source {
                        hyb::SectorSource::Unchanged => {}
                        hyb::SectorSource::Storage { from, .. } => {
                            w.add(self.meta.read(from, 1));
                            w.add(self.meta.write(s, 1));
                        }
                        hyb::SectorSource::Memory => w.add(self.meta.write(s, 1)),
                    }
                }
                (w, true, false)
            }
            (Some(h), _) => {
                // The data goes to memory as it is; its metadata is fetched and verified now,
                // for the processor's read, which checks and decrypts the sectors.
                let mut w = self.meta.read(first, n);
                w.ops_64b -= 8 * n;
                w.hashes_512b -= n;
                h.borrow_mut().stats.deferred_sector_checks += n;
                (w, false, false)
            }
        };
        if !held {
            self.run_unheld(host, &work, core, at)?;
            return Ok(false);
        }
        self.engine_ops_64b += work.ops_64b;
        self.engine_hashes_512b += work.hashes_512b;
        let s = &mut self.slots[slot_of_io];
        s.pending_reads = work.reads.len() as u32;
        s.sector_work = sector_work;
        s.metadata_work = EngineWork::from(&work);
        if sector_work {
            // Each sector's 8 pads and MAC go with its command.
            s.metadata_work -= EngineWork::of_sectors(n);
        }
        self.issue_hidden(host, &work.reads, Owner::DieRead(slot_of_io), false, core, at)?;
        self.slots[slot_of_io].ready_at = self.issue_side_work(host, &work, core, at)?;
        Ok(true)
    }

    /// Hidden commands for `blocks`, for `owner`.
    fn issue_hidden(&self, host: &mut super::host::Host, blocks: &[MetaBlock], owner: super::host::Owner, write: bool, core: u32, at: u64) -> Result<(), crate::run::SimError> {
        for b in blocks {
            host.issue(super::host::Cmd::hidden(owner, write, self.meta.geometry.sector_of(*b) * 512, 512, core), at)?;
        }
        Ok(())
    }

    /// What `work` asks of the drive and of memory beside its metadata reads: dirty blocks
    /// written back, D-Shield-Pro's memory-cache loads (8 lines through the secure memory
    /// controller, which decrypts and verifies them) and fills, and the blocks re-encrypted
    /// after a minor overflow (read and written again; their engine work is in the work's
    /// cycles). Only the loads are waited for: returns when the last is in (`at` if none).
    fn issue_side_work(&self, host: &mut super::host::Host, work: &MetaWork, core: u32, at: u64) -> Result<u64, crate::run::SimError> {
        use super::host::{Cmd, Owner};
        self.issue_hidden(host, &work.writes, Owner::DieWrite, true, core, at)?;
        let mut loaded = at;
        for &slot in &work.memory_loads {
            for k in 0..8 {
                loaded = loaded.max(host.mem(self.memory_cache_line + slot * 8 + k, false, at)?);
            }
        }
        for &slot in &work.memory_fills {
            for k in 0..8 {
                host.mem(self.memory_cache_line + slot * 8 + k, true, at)?;
            }
        }
        for &blk in &work.reencrypted_blocks {
            host.issue(Cmd::hidden(Owner::DieWrite, false, blk * 512, 512, core), at)?;
            host.issue(Cmd::hidden(Owner::DieWrite, true, blk * 512, 512, core), at)?;
        }
        Ok(loaded)
    }

    /// Work nothing is held for (D-Shield-Hyb): its metadata reads go out unawaited, and the
    /// engine runs it once what it loads from memory is in. When the engine is done.
    fn run_unheld(&mut self, host: &mut super::host::Host, work: &MetaWork, core: u32, at: u64) -> Result<u64, crate::run::SimError> {
        self.engine_ops_64b += work.ops_64b;
        self.engine_hashes_512b += work.hashes_512b;
        self.issue_hidden(host, &work.reads, super::host::Owner::DieFetch, false, core, at)?;
        let loaded = self.issue_side_work(host, work, core, at)?;
        Ok(self.run_on_engine(host, EngineWork::from(work), loaded))
    }

    /// Functional mode: the I/O's blocks encrypted and put on the drive (writes), or read from
    /// it, verified, decrypted and compared with what was written (reads). The bytes move when
    /// the DIE sees the I/O, so later I/Os see them whatever the drive's timing.
    fn with_bytes(meta: &mut Metadata, o: &mut Oracle, write: bool, first: u64, n: u64) -> Result<MetaWork, crate::run::SimError> {
        let fail = |message: String| crate::run::SimError::Integrity { trace: "io".into(), message };
        if write {
            let plain: Vec<Block> = (first..first + n)
                .map(|s| {
                    let v = o.versions.entry(s).or_insert(0);
                    *v += 1;
                    let v = *v;
                    o.data(s, v)
                })
                .collect();
            let (w, ct) = meta.write_bytes(first, &plain).map_err(|d| fail(d.to_string()))?;
            let fx = meta.bytes_mut().expect("functional");
            for (k, c) in ct.iter().enumerate() {
                fx.drive.write(first + k as u64, c);
            }
            o.blocks_written += n;
            Ok(w)
        } else {
            let mut out = vec![[0u8; 512]; n as usize];
            let w = meta.read_bytes(first, &mut out).map_err(|d| fail(d.to_string()))?;
            for (k, b) in out.iter().enumerate() {
                let s = first + k as u64;
                if *b != o.data(s, o.versions.get(&s).copied().unwrap_or(0)) {
                    return Err(fail(format!("block {s} decrypted and verified to other data than was written")));
                }
            }
            o.blocks_verified += n;
            Ok(w)
        }
    }

    /// D-Shield-Hyb: the processor reads storage-domain sector `sector` at `at`; the engine
    /// checks and decrypts it with its CMAC block (fetched again if it left the cache: those
    /// reads go out, and the check is not held for them, a simplification). When it is done.
    pub fn processor_check(&mut self, host: &mut super::host::Host, sector: u64, core: u32, at: u64) -> Result<u64, crate::run::SimError> {
        let w = self.meta.read(sector, 1);
        if let Some(h) = &self.hyb {
            h.borrow_mut().stats.processor_checked_sectors += 1;
        }
        self.run_unheld(host, &w, core, at)
    }

    /// Runs `work` on the memory controller's engine from `ready`: the 512 B hashes (data MACs
    /// and tree nodes, each checked against what is already trusted, so independent) and the
    /// 64 B operations (pads, counter hashes) issued back to back. When the last is done.
    fn run_on_engine(&self, host: &mut super::host::Host, work: EngineWork, ready: u64) -> u64 {
        use secmem_core::time::Cycle;
        let engine = host.crypto_engine();
        let hashed = engine.run_many(Cycle(ready), work.hashes_512b, 8, Cycle(self.hash_512b_cycles));
        let padded = engine.run_many(Cycle(ready), work.ops_64b, 1, Cycle(self.op_64b_cycles));
        hashed.max(padded).0
    }

    /// One of `slot`'s metadata reads arrived at `at`.
    pub fn metadata_arrived(&mut self, host: &mut super::host::Host, slot: usize, at: u64) {
        let s = &mut self.slots[slot];
        s.pending_reads -= 1;
        s.ready_at = s.ready_at.max(at);
        self.release_ready(host, slot);
    }

    /// Command `id` of `slot`, `sectors` long, reached the hold at `at`.
    pub fn held(&mut self, host: &mut super::host::Host, slot: usize, id: usize, sectors: u64, at: u64) {
        self.slots[slot].held.push((id, at, sectors));
        self.release_ready(host, slot);
    }

    fn release_ready(&mut self, host: &mut super::host::Host, slot: usize) {
        if self.slots[slot].pending_reads > 0 {
            return;
        }
        // Taken out (and put back empty, keeping its allocation) while the engine is borrowed.
        let mut held = std::mem::take(&mut self.slots[slot].held);
        for (id, at, sectors) in held.drain(..) {
            let s = &mut self.slots[slot];
            let mut work = std::mem::take(&mut s.metadata_work);
            if s.sector_work {
                work += EngineWork::of_sectors(sectors);
            }
            let ready = at.max(s.ready_at);
            let done = self.run_on_engine(host, work, ready);
            host.release(id, done);
        }
        self.slots[slot].held = held;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB_SECTORS: u64 = (1 << 30) / 512;

    #[test]
    fn the_metadata_takes_the_papers_share_of_a_512_gb_drive() {
        let g = Geometry::new(512 * GIB_SECTORS);
        let (cmac, tree) = g.overhead();
        // Section VIII: 3.12% for the CMAC blocks, under 0.06% for the tree, under 3.14% in all.
        assert!((cmac - 1.0 / 32.0).abs() < 1e-12, "{cmac}");
        assert!(tree < 0.0006 && tree > 0.0004, "{tree}");
        assert!(cmac + tree < 0.0318);
        // 2^25 CMAC blocks under a 64-ary tree: levels of 2^19, 2^13, 2^7, 2, 1 nodes.
        assert_eq!(g.regions[0].tree_nodes, vec![1 << 19, 1 << 13, 1 << 7, 2, 1]);
        assert_eq!(COUNTER_BYTES + 32 * 11, 512, "a major, 32 minors and 32 88-bit MACs fill one block");
    }

    #[test]
    fn metadata_blocks_lie_after_the_data_without_overlapping() {
        let g = Geometry::new(GIB_SECTORS);
        let r = &g.regions[0];
        let last_cmac = g.sector_of(MetaBlock::Cmac(r.cmac_blocks - 1));
        assert_eq!(g.sector_of(MetaBlock::Cmac(0)), GIB_SECTORS);
        assert_eq!(g.sector_of(MetaBlock::Node(1, 0)), last_cmac + 1);
        let l1 = r.tree_nodes[0];
        assert_eq!(g.sector_of(MetaBlock::Node(2, 0)), g.sector_of(MetaBlock::Node(1, l1 - 1)) + 1);
        assert_eq!(g.parent(MetaBlock::Cmac(130)), Some(MetaBlock::Node(1, 2)));
        assert_eq!(g.parent(MetaBlock::Node(g.top_level(), 0)), None);
        for b in [MetaBlock::Cmac(0), MetaBlock::Cmac(r.cmac_blocks - 1), MetaBlock::Node(1, 0), MetaBlock::Node(2, 3)] {
            assert_eq!(g.block_at(g.sector_of(b)), Some(b));
        }
        assert_eq!(g.block_at(5), None);
    }

    #[test]
    fn a_cold_read_walks_to_the_top_and_a_second_read_of_the_block_hits() {
        let mut m = Metadata::new(Geometry::new(GIB_SECTORS), 256, 8, 38);
        let levels = m.geometry.top_level() as usize; // the top node is on chip
        let w = m.read(0, 8);
        assert_eq!(w.reads.len(), 1 + (levels - 1), "the CMAC block and every stored node above it: {:?}", w.reads);
        assert_eq!(w.reads[0], MetaBlock::Cmac(0));
        // 8 blocks: 64 pads and 8 MACs; the counters' hash (3 ops) and one hash per node read.
        assert_eq!((w.ops_64b, w.hashes_512b), (64 + 3, 8 + (levels as u64 - 1)));
        let again = m.read(8, 8);
        assert!(again.reads.is_empty() && again.writes.is_empty());
        // A neighbour CMAC block shares its level-1 node: one read.
        assert_eq!(m.read(32, 1).reads, vec![MetaBlock::Cmac(1)]);
        assert_eq!((m.stats.cmac_hits, m.stats.cmac_misses), (1, 2));
    }

    #[test]
    fn dirty_blocks_are_written_back_when_they_leave_and_dirty_their_parent() {
        // A cache of 8 blocks (4 KiB, 8 ways: one set): the ninth written block evicts the first.
        let mut m = Metadata::new(Geometry::new(GIB_SECTORS), 4, 8, 38);
        let mut writes = Vec::new();
        for c in 0..9 {
            writes.extend(m.write(c * BLOCKS_PER_CMAC, 1).writes);
        }
        assert_eq!(writes, vec![MetaBlock::Cmac(0)]);
        assert_eq!(m.stats.metadata_writes, 1);
        assert!(m.dirty_blocks() > 8, "eight dirty CMAC blocks and their dirty parent");
    }

    #[test]
    fn pro_keeps_read_blocks_in_memory_and_never_serves_a_stale_copy() {
        // On chip: 8 blocks in one set; in memory: 1024 slots.
        let mut m = Metadata::new(Geometry::new(GIB_SECTORS), 4, 8, 38).with_memory_cache(1024);
        for c in 0..9 {
            m.read(c * BLOCKS_PER_CMAC, 1); // the ninth evicts block 0, read once: Useful 1
        }
        assert_eq!(m.stats.memory_cache_fills, 1);
        let w = m.read(0, 1); // back from memory: no drive read, no tree walk
        assert_eq!((w.memory_loads.clone(), w.reads.len()), (vec![0], 0));
        // Written on chip (Useful back to 0), then evicted dirty: written to the drive and
        // refreshed in memory, though no longer useful.
        m.write(0, 1);
        let mut filled = Vec::new();
        for c in 9..17 {
            filled.extend(m.write(c * BLOCKS_PER_CMAC, 1).memory_fills);
        }
        assert!(filled.contains(&0), "block 0's slot refreshed: {filled:?}");
        // A block never read (Useful 0) and clean does not go to memory.
        let mut n = Metadata::new(Geometry::new(GIB_SECTORS), 4, 8, 38).with_memory_cache(1024);
        for c in 0..9 {
            n.write(c * BLOCKS_PER_CMAC, 1);
        }
        assert_eq!(n.stats.memory_cache_fills, 0);
    }

    #[test]
    fn a_minor_overflow_moves_the_major_and_reencrypts_the_32_blocks() {
        let mut m = Metadata::new(Geometry::new(GIB_SECTORS), 256, 8, 2); // minors wrap after 3 writes
        for _ in 0..3 {
            assert!(m.write(5, 1).reencrypted_blocks.is_empty());
        }
        let w = m.write(5, 1);
        assert_eq!(w.reencrypted_blocks.len(), 31);
        assert!(!w.reencrypted_blocks.contains(&5) && w.reencrypted_blocks.iter().all(|&b| b < 32));
        assert_eq!(m.stats.minor_overflows, 1);
        // 38-bit minors (the paper's) do not overflow in a simulation's lifetime.
        let mut real = Metadata::new(Geometry::new(GIB_SECTORS), 256, 8, 38);
        assert!((0..1000).all(|_| real.write(5, 1).reencrypted_blocks.is_empty()));
    }
}
