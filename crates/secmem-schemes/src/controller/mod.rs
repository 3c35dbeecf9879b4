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
//! Designs ([`crate::designs`]) call these building blocks; `read_line` / `write_line` are the
//! baseline paths.
//!
//! The shared parts beside it: [`functional`] (keys, the sparse NVM image, the root register,
//! integrity errors), [`nvm_image`] (how the image is stored), [`image_file`] (saved images),
//! [`recovery`] (rebuilding and verifying the tree after a crash), [`eadr`] (the drain
//! machinery every design's eADR drain uses) and [`cache_tree`] (the small tree that protects
//! a saved metadata cache).

pub mod cache_tree;
pub mod eadr;
pub mod engine;
pub mod functional;
pub mod image_file;
pub mod nvm_image;
pub mod ops;
pub mod recovery;
pub mod tree_update;

use crate::config::{MetadataCachesConfig, MetadataPersistence, SecurityConfig, TreeConfig, TreeUpdate};
use crate::controller::functional::{Functional, IntegrityError, NvmImage};
use crate::controller::nvm_image::SharedHomes;
use crate::controller::tree_update::{TreeUpdateStrategy, Updater};
use secmem_core::counters::CounterBlock;
use rustc_hash::FxHashMap;
use secmem_crypto::{node_entry, set_node_entry};
use secmem_core::addr::{line_in_page, page_of_line, LINES_PER_PAGE, LINE_SHIFT};
use secmem_core::cache::{CacheStats, SetAssocCache};
use secmem_core::counters::CounterStore;
use secmem_core::error::ConfigError;
use secmem_core::stats::Histogram;
use secmem_core::tree::{SecureLayout, TreeGeometry};
use secmem_core::Cycle;
use secmem_media::{Media, MediaStats, MemoryPort, TrafficClass};
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
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
pub enum MetaKind {
    /// Tree level 0: a counter block (index = page).
    Counter,
    /// A stored tree node at level >= 1.
    Tree,
    Mac,
}

/// The tree cache's way partition under `metadata_cache.tree_organisation = per-level`: the
/// node levels below the root (1 ..= root - 1) share the ways equally, the lowest levels (the
/// widest) taking one more each until the remainder is used. Empty when the cache is shared.
fn tree_way_partition(caches: &crate::config::MetadataCachesConfig, layout: &SecureLayout) -> Result<Vec<std::ops::Range<usize>>, ConfigError> {
    use crate::config::TreeCacheOrganisation;
    if caches.tree_organisation == TreeCacheOrganisation::Shared {
        return Ok(Vec::new());
    }
    let levels = layout.tree.root_level().saturating_sub(1).max(1);
    let ways = caches.tree.ways as usize;
    if ways < levels {
        return Err(ConfigError::new(
            "metadata_cache.tree_organisation",
            format!("per-level needs a way for each of the tree's {levels} node levels below the root; metadata_cache.tree.ways is {ways}"),
        ));
    }
    let (share, extra) = (ways / levels, ways % levels);
    let mut out = vec![0..0; levels + 1];
    let mut next = 0;
    for (level, range) in out.iter_mut().enumerate().skip(1) {
        let n = share + usize::from(level <= extra);
        *range = next..next + n;
        next += n;
    }
    Ok(out)
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
    /// Whether a parent fetched for a write-back is verified up its path.
    pub verify_parent_on_write_back: bool,
    pub strict: bool,
    pub counter_hit: Cycle,
    pub mac_hit: Cycle,
    pub tree_hit: Cycle,
}

pub struct SecureMc {
    /// The crypto engine every pad, MAC and hash below runs on, and whatever the controller
    /// does for a unit that delegates crypto to it (D-Shield's DIE).
    pub engine: engine::CryptoEngine,
    /// The device. An enum rather than `Box<dyn MemoryPort>` so that the PCM access path,
    /// taken ~11 times per secure request, is a direct call (see [`Media`]); any other device
    /// plugs in as `Media::Other`.
    pub media: Media,
    pub layout: SecureLayout,
    pub counters: CounterStore,
    pub counter_cache: SetAssocCache,
    pub mac_cache: SetAssocCache,
    pub tree_cache: SetAssocCache,
    /// `metadata_cache.tree_organisation = per-level`: each node level's ways in the tree
    /// cache (index: level; empty when shared).
    tree_ways_of_level: Vec<std::ops::Range<usize>>,
    pub p: McParams,
    pub stats: McStats,
    /// Dirty metadata pushed out of a cache, waiting for write-back (and, with lazy update,
    /// for its parent to absorb its new hash): the controller's write-back buffer. Processed
    /// after each operation, so evictions caused while handling an eviction are handled too,
    /// without recursion. A miss on a block still in this buffer takes it back from here.
    evictions: Vec<Evicted>,
    /// Functional mode: the bytes (image, payloads, root register) and the crypto.
    pub func: Option<Box<Functional>>,
    /// Reused buffer of the blocks one tree walk fetched (functional mode).
    chain_buf: Vec<(usize, u64, [u8; 64], u64)>,
    /// The counter block and the MAC block their caches looked up before the latest one, and
    /// the slot each was in: a hint ([`SetAssocCache::lookup_at`]) for core-level traffic,
    /// where a run of fills alternates with the LLC's write-backs of lines far behind them, so
    /// that each keeps finding its own block without a search. Speed only.
    counter_before: (u64, usize),
    mac_before: (u64, usize),
    /// Counting mode, after a crash: the counter blocks that had been stored (what NVM holds
    /// in functional mode), for recovery to read back and count (`recovery::rebuild_and_verify`).
    pub crashed_counters: Vec<(u64, secmem_core::counters::CounterBlock)>,
    /// Tree levels (from the counters up, all below the root) whose image lines host
    /// look-aheads prefetch: the levels above have so few blocks that their image lines stay
    /// in the host caches, and prefetching them only costs instructions (see
    /// [`prefetch_levels`]).
    prefetch_levels: usize,
    /// Functional mode, baseline data paths only: the counters of a written line are read and
    /// bumped in its cached counter block's bytes, and [`counters`](Self::counters) is never
    /// touched. Set for the functional half of a two-thread run
    /// ([`set_counters_in_payload`](Self::set_counters_in_payload)), which runs nothing but
    /// the baseline's reads and writes: its counter store was a second copy of counters its
    /// counter-block bytes already hold (128 MiB on the bench, about 5% of that thread's time
    /// in misses, page zeroing and huge-page collapses). Designs, recovery and the harnesses
    /// work on the store, so every other controller keeps it.
    counters_in_payload: bool,
    /// The tree update strategy (`tree.update`, or the design's own: [`tree_update`]).
    updater: Updater,
    /// Tree nodes a design's strategy keeps on chip, trusted, in battery-backed storage
    /// (persistent sub-tree roots), with their bytes (zeros when counting): a fetch's
    /// verification stops below them, as below the root register. Survives a crash.
    trusted: FxHashMap<(usize, u64), [u8; 64]>,
    /// Devices beside the memory (a storage device, a design's own), each with its name and
    /// statistics of its own; [`PortId`] indexes them.
    ports: Vec<(String, Box<dyn MemoryPort + Send>)>,
    /// Whether a written-back counter block or node hashes itself into its parent (lazy
    /// update's rule), asked of the strategy once when it is installed.
    absorb_on_write_back: bool,
}

/// A hit on metadata block `key` that needs no search: the block `cache` hit or filled last,
/// or `before`, the one before that (see `SecureMc::counter_before`). Otherwise false, and
/// `before` becomes the cache's latest block, which the caller's search is about to replace.
#[inline(always)]
fn recent_hit(cache: &mut SetAssocCache, before: &mut (u64, usize), key: u64, dirty: bool) -> bool {
    if cache.lookup_last(key, dirty) {
        return true;
    }
    let last = cache.last_hit();
    let hit = key == before.0 && cache.lookup_at(before.1, key, dirty);
    *before = last;
    hit
}

/// Tree levels, from the counter blocks up, with more than this many blocks have their image
/// lines prefetched by the host look-ahead. The smaller levels above take at most
/// 8192 x (64 B line + 8 B memo) = 576 KiB each, host-cache resident once touched, and walks
/// usually stop below them anyway (at a block the tree cache holds).
const PREFETCH_MIN_LEVEL_BLOCKS: u64 = 8192;

/// The number of tree levels, from the counter blocks (level 0) up, worth a host prefetch of
/// their image lines: those below the root with more than [`PREFETCH_MIN_LEVEL_BLOCKS`]
/// blocks, and at least the counter level.
fn prefetch_levels(tree: &TreeGeometry) -> usize {
    tree.nodes.iter().take_while(|&&n| n > PREFETCH_MIN_LEVEL_BLOCKS).count().max(1).min(tree.root_level())
}

/// A device attached beside the memory ([`SecureMc::attach_port`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PortId(pub usize);

/// A metadata block with its identity: `key` is its device line number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaBlock {
    pub kind: MetaKind,
    pub key: u64,
    /// Its content (functional mode).
    pub payload: Option<[u8; 64]>,
}

/// A dirty metadata block on its way to NVM.
#[derive(Clone, Copy, Debug)]
struct Evicted {
    kind: MetaKind,
    key: u64,
    /// Its content (functional mode).
    payload: Option<[u8; 64]>,
}

/// Blocks fetched by one tree walk (at most one per level).
const MAX_LEVELS: usize = 24;

impl SecureMc {
    /// Builds the controller over `media`, for `data_bytes` of protected memory; `seed`
    /// (`run.seed`) derives the initial counters under `security.counter_init = "random"`.
    pub fn new(
        security: &SecurityConfig,
        tree: &TreeConfig,
        caches: &MetadataCachesConfig,
        data_bytes: u64,
        media: Box<dyn MemoryPort>,
        seed: u64,
    ) -> Result<SecureMc, ConfigError> {
        Self::with_media(security, tree, caches, data_bytes, Media::from(media), seed, false)
    }

    /// Builds the controller in functional mode: real AES-CTR, MACs and tree hashes over
    /// real bytes, with keys (and, under random init, the initial counters) derived from
    /// `seed`.
    pub fn new_functional(
        security: &SecurityConfig,
        tree: &TreeConfig,
        caches: &MetadataCachesConfig,
        data_bytes: u64,
        media: Box<dyn MemoryPort>,
        seed: u64,
    ) -> Result<SecureMc, ConfigError> {
        Self::with_media(security, tree, caches, data_bytes, Media::from(media), seed, true)
    }

    /// The checks only functional mode needs: its 64 B nodes and counter blocks hold what
    /// counting mode merely counts. (The simulator's config validation calls this too, so a
    /// bad config fails at load time with the same error.)
    pub fn check_functional_geometry(security: &SecurityConfig, tree: &TreeConfig) -> Result<(), ConfigError> {
        if tree.arity > 8 {
            return Err(ConfigError::new(
                "tree.arity",
                format!("functional mode stores 64-bit hashes, 8 per 64 B node: arity must be <= 8, got {}", tree.arity),
            ));
        }
        if security.minor_counter_bits > 7 {
            return Err(ConfigError::new(
                "security.minor_counter_bits",
                format!(
                    "functional mode stores each counter block as 64 B (64-bit major + 64 minors): minors must be <= 7 bits, got {}",
                    security.minor_counter_bits
                ),
            ));
        }
        Ok(())
    }

    /// The functional-mode state of a controller, after [`check_functional_geometry`](Self::check_functional_geometry).
    fn functional_state(security: &SecurityConfig, tree: &TreeConfig, seed: u64) -> Result<Box<Functional>, ConfigError> {
        Self::check_functional_geometry(security, tree)?;
        let mut func = Box::new(Functional::new(seed, security.mac_bits));
        func.init = security.initial_counters(seed);
        func.minor_bits = security.minor_counter_bits;
        Ok(func)
    }

    /// [`new`](Self::new) or, if `functional`, [`new_functional`](Self::new_functional),
    /// over a [`Media`]: how the simulator hands over its `PcmMedia` by value (`Media::Pcm`),
    /// so that device accesses skip the trait object.
    pub fn with_media(
        security: &SecurityConfig,
        tree: &TreeConfig,
        caches: &MetadataCachesConfig,
        data_bytes: u64,
        media: Media,
        seed: u64,
        functional: bool,
    ) -> Result<SecureMc, ConfigError> {
        let mut func = if functional { Some(Self::functional_state(security, tree, seed)?) } else { None };
        let layout = SecureLayout::new(data_bytes, tree.arity, security.mac_bits)?;
        if let Some(f) = func.as_mut() {
            // Counter blocks and tree nodes are filled densely by any sizeable run: stored by
            // position, one host cache miss each. MAC blocks and data stay sparse; a MAC block
            // shares its index home with its data lines, which are looked up just before it.
            // Its slab and index growth are committed ahead, in a host core's idle time.
            let tree_first = (layout.mac_base >> LINE_SHIFT) + layout.mac_blocks;
            f.memo_layout = (data_bytes, tree.arity, security.mac_bits);
            debug_assert!(layout.macs_per_block.is_power_of_two(), "mac_bits divides 512");
            f.image = NvmImage::with_dense_ranges(&[
                (layout.counter_base >> LINE_SHIFT, (layout.counter_base >> LINE_SHIFT) + layout.counter_blocks),
                (tree_first, layout.end >> LINE_SHIFT),
            ])
            .with_shared_homes(SharedHomes {
                data_lines: data_bytes >> LINE_SHIFT,
                group_shift: layout.macs_per_block.trailing_zeros(),
                group_first: layout.mac_base >> LINE_SHIFT,
            })
            .with_prefault();
        }
        let strict = security.metadata_persistence == MetadataPersistence::Strict;
        if strict && tree.update != TreeUpdate::Eager {
            return Err(ConfigError::new(
                "security.metadata_persistence",
                "strict persistence needs tree.update = \"eager\" (a lazily updated root is stale after a crash)",
            ));
        }
        if func.is_some() && !tree.verify_parent_on_write_back {
            return Err(ConfigError::new(
                "tree.verify_parent_on_write_back",
                "false is a timing variant for counting mode: functional mode verifies every node it fetches (an unverified parent would let a forged node be re-hashed as genuine)",
            ));
        }
        if layout.tree.height() > MAX_LEVELS {
            return Err(ConfigError::new("tree.arity", format!("tree of {} levels is taller than {MAX_LEVELS}", layout.tree.height())));
        }
        let mk = |c| {
            let cache = SetAssocCache::new(c);
            if func.is_some() { cache.with_data() } else { cache }
        };
        Ok(SecureMc {
            engine: engine::CryptoEngine::new(security.crypto_engine, security.crypto_engine_cycles_per_64b),
            media,
            counters: CounterStore::with_init(security.minor_counter_bits, layout.counter_blocks, security.initial_counters(seed)),
            counter_cache: mk(&caches.counter),
            mac_cache: mk(&caches.mac),
            tree_cache: mk(&caches.tree),
            tree_ways_of_level: tree_way_partition(caches, &layout)?,
            p: McParams {
                secure: security.enabled,
                minor_bits: security.minor_counter_bits,
                aes: Cycle(security.aes_latency_cycles),
                mac: Cycle(security.mac_latency_cycles),
                hash: Cycle(security.hash_latency_cycles),
                verify_on_critical_path: security.verify_on_critical_path,
                update: tree.update,
                verify_parent_on_write_back: tree.verify_parent_on_write_back,
                strict,
                counter_hit: Cycle(caches.counter.latency_cycles),
                mac_hit: Cycle(caches.mac.latency_cycles),
                tree_hit: Cycle(caches.tree.latency_cycles),
            },
            prefetch_levels: prefetch_levels(&layout.tree),
            counters_in_payload: false,
            updater: match tree.update {
                TreeUpdate::Lazy => Updater::Lazy,
                TreeUpdate::Eager => Updater::Eager,
            },
            absorb_on_write_back: tree.update == TreeUpdate::Lazy,
            trusted: FxHashMap::default(),
            ports: Vec::new(),
            layout,
            stats: McStats::default(),
            evictions: Vec::with_capacity(16),
            func,
            chain_buf: Vec::with_capacity(MAX_LEVELS),
            counter_before: (u64::MAX, 0),
            mac_before: (u64::MAX, 0),
            crashed_counters: Vec::new(),
        })
    }

    pub fn is_functional(&self) -> bool { self.func.is_some() }

    /// Keeps the counters of written lines in the cached counter blocks' bytes instead of the
    /// counter store (see the field `counters_in_payload`). Functional mode only, and only for
    /// a controller that runs the baseline's data paths and nothing else: a design, recovery
    /// or a crash would read a counter store that no longer follows the writes.
    pub fn set_counters_in_payload(&mut self) {
        assert!(self.func.is_some(), "counters live in counter-block bytes only in functional mode");
        self.counters_in_payload = true;
    }

    /// Whether [`set_counters_in_payload`](Self::set_counters_in_payload) was called: the
    /// counter store is not used, and host look-aheads need not fetch it.
    #[inline]
    pub fn counters_in_payload(&self) -> bool { self.counters_in_payload }

    /// A snapshot of all stats (controller + caches), for warm-up subtraction and reports.
    pub fn snapshot(&self) -> (McStats, MediaStats) {
        let mut s = self.stats.clone();
        s.counter_cache = self.counter_cache.stats;
        s.mac_cache = self.mac_cache.stats;
        s.tree_cache = self.tree_cache.stats;
        (s, self.media.stats())
    }

    // ---------------------------------------------------------------- device access

    // The direct read/write entry points of `Media`, not `access`: the kind is known here,
    // so the PCM path has no `match` on it.

    #[inline]
    pub fn device_read(&mut self, addr: u64, class: TrafficClass, at: Cycle) -> Cycle {
        self.media.read(addr, class, at)
    }

    #[inline]
    pub fn device_write(&mut self, addr: u64, class: TrafficClass, at: Cycle) -> Cycle {
        self.media.write(addr, class, at)
    }

    /// A read of data `line` outside the protected memory (the engine's `persist.coverage =
    /// "non-stack"` stack): the device read alone, no counter, MAC or tree. Counting mode
    /// only (the config refuses functional mode with an unprotected region).
    pub fn read_unprotected(&mut self, line: u64, now: Cycle) -> Cycle {
        debug_assert!(self.func.is_none(), "unprotected lines in functional mode");
        self.stats.data_reads += 1;
        let done = self.device_read(line << LINE_SHIFT, TrafficClass::Data, now);
        self.stats.read_latency.record((done - now).0);
        done
    }

    /// A write of data `line` outside the protected memory: the device write alone, as
    /// [`read_unprotected`](Self::read_unprotected).
    pub fn write_unprotected(&mut self, line: u64, now: Cycle) -> Cycle {
        debug_assert!(self.func.is_none(), "unprotected lines in functional mode");
        self.stats.data_writes += 1;
        let done = self.device_write(line << LINE_SHIFT, TrafficClass::Data, now);
        self.stats.write_latency.record((done - now).0);
        done
    }

    // ---------------------------------------------------------------- further ports

    /// Attaches a device beside the memory under `name` (unique): a storage device, or a
    /// device of a design's own. Returns its handle.
    pub fn attach_port(&mut self, name: impl Into<String>, device: Box<dyn MemoryPort + Send>) -> PortId {
        let name = name.into();
        assert!(self.port(&name).is_none(), "a port named '{name}' is attached already");
        self.ports.push((name, device));
        PortId(self.ports.len() - 1)
    }

    /// Every further port's name and statistics, in the order they were attached.
    pub fn port_stats(&self) -> Vec<(String, MediaStats)> { self.ports.iter().map(|(n, d)| (n.clone(), d.stats())).collect() }

    // ---------------------------------------------------------------- host look-ahead

    /// Hints the host CPU to bring in the metadata-cache sets a read of data `line` looks up
    /// first (its counter block's and its MAC block's). Changes no simulated state.
    #[inline]
    pub fn prefetch_read_metadata(&self, line: u64) {
        if line < self.layout.counter_blocks * LINES_PER_PAGE {
            self.counter_cache.prefetch(self.layout.counter_addr(page_of_line(line)) >> LINE_SHIFT);
            self.mac_cache.prefetch(self.layout.mac_addr(line).0 >> LINE_SHIFT);
        }
    }

    /// As [`prefetch_read_metadata`](Self::prefetch_read_metadata), for a write of `line`:
    /// also its counter in the counter store.
    #[inline]
    pub fn prefetch_write_metadata(&self, line: u64) {
        if line < self.layout.counter_blocks * LINES_PER_PAGE {
            self.prefetch_read_metadata(line);
            self.counters.prefetch_line(line);
        }
    }

    /// Device lines a secure access to data `line` may read or write in functional mode's NVM
    /// image and that are worth a host prefetch: the line itself, its MAC block, its counter
    /// block and that block's ancestors in the large tree levels (up to 16 lines; the count in
    /// `.1`). A counter-cache miss fetches the ancestors up to the first cached one, and those
    /// are usually several.
    #[inline]
    fn image_lines_of(&self, line: u64) -> ([u64; 16], usize) {
        let mut out = [0; 16];
        out[0] = line;
        if !self.p.secure || line >= self.layout.counter_blocks * LINES_PER_PAGE {
            return (out, 1);
        }
        out[1] = self.layout.mac_addr(line).0 >> LINE_SHIFT;
        let n = self.path_lines(0, page_of_line(line), &mut out, 2);
        (out, n)
    }

    /// Writes the device lines of block (`level`, `index`) and of its ancestors in the
    /// levels worth a host prefetch (`prefetch_levels`, all below the root) into `out` from
    /// position `n`, as far as `out` has room; returns the new count.
    #[inline]
    fn path_lines(&self, level: usize, index: u64, out: &mut [u64; 16], mut n: usize) -> usize {
        let (mut lvl, mut idx) = (level, index);
        while lvl < self.prefetch_levels && n < out.len() {
            out[n] = self.block_addr(lvl, idx) >> LINE_SHIFT;
            n += 1;
            (lvl, idx) = self.layout.tree.parent(lvl, idx);
        }
        n
    }

    /// Functional mode, first look-ahead stage for an access to data `line`: hints the host
    /// CPU to fetch the image index entries of the lines it may touch in NVM (see
    /// [`NvmImage::prefetch_index`](crate::controller::functional::NvmImage::prefetch_index)) and the
    /// tree-cache sets of its counter block's ancestors in the large levels (which a
    /// counter-cache miss looks up, fills and takes victims from; the second stage reads
    /// them). Changes no simulated state; no-op in counting mode.
    #[inline]
    pub fn prefetch_image_index(&self, line: u64) {
        if let Some(f) = self.func.as_ref() {
            let (lines, n) = self.image_lines_of(line);
            for &l in &lines[..n] {
                f.image.prefetch_index(l);
            }
            // lines[3..n]: the tree nodes (after the data line, its MAC block and counter block).
            for &l in lines.get(3..n).unwrap_or(&[]) {
                self.tree_cache.prefetch(l);
            }
        }
    }

    /// Functional mode, first look-ahead stage for a record in the page of the one before:
    /// only its data line's index entry (the page's metadata lines are the ones the first
    /// record of the page prefetched). Changes no simulated state; no-op in counting mode.
    #[inline]
    pub fn prefetch_image_data_index(&self, line: u64) {
        if let Some(f) = self.func.as_ref() {
            f.image.prefetch_index(line);
        }
    }

    /// Second stage of [`prefetch_image_data_index`](Self::prefetch_image_data_index): the
    /// data line's stored bytes.
    #[inline]
    pub fn prefetch_image_data_bytes(&self, line: u64) {
        if let Some(f) = self.func.as_ref() {
            f.image.prefetch_bytes(line);
        }
    }

    /// Functional mode, second look-ahead stage (after
    /// [`prefetch_image_index`](Self::prefetch_image_index)): hints the host CPU to fetch the
    /// stored bytes of those lines. Changes no simulated state; no-op in counting mode.
    #[inline]
    pub fn prefetch_image_bytes(&self, line: u64) {
        if let Some(f) = self.func.as_ref() {
            f.image.prefetch_bytes(line);
            if self.p.secure && line < self.layout.counter_blocks * LINES_PER_PAGE {
                // The cached payloads a read of the line reads (or a fill evicts).
                self.counter_cache.prefetch_data(self.layout.counter_addr(page_of_line(line)) >> LINE_SHIFT);
                let mac_key = self.layout.mac_addr(line).0 >> LINE_SHIFT;
                self.mac_cache.prefetch_data(mac_key);
                // The tree-cache slot a miss on the counter block's parent fills (or hits).
                // (`prefetch_levels` stops below the root, so the parent is a stored node.)
                if self.prefetch_levels > 1 {
                    let (plvl, pidx) = self.layout.tree.parent(0, page_of_line(line));
                    self.tree_cache.prefetch_data(self.layout.tree.node_addr(plvl, pidx) >> LINE_SHIFT);
                }
                // Only the data line and its MAC block have bytes to fetch in this stage: the
                // counter block and tree nodes (the rest of `image_lines_of`) are stored by
                // position, and the first stage prefetched their bytes already.
                f.image.prefetch_bytes(mac_key);
            }
        }
    }

    // ---------------------------------------------------------------- metadata blocks

    #[inline]
    fn block_addr(&self, level: usize, index: u64) -> u64 {
        if level == 0 { self.layout.counter_addr(index) } else { self.layout.tree.node_addr(level, index) }
    }

    /// (level, index) of a counter-cache or tree-cache key (the block's device line number):
    /// level 0 and the page for a counter block.
    #[inline]
    fn meta_key_to_node(&self, kind: MetaKind, key: u64) -> (usize, u64) {
        debug_assert!(kind != MetaKind::Mac, "MAC blocks are not in the tree");
        if kind == MetaKind::Counter {
            (0, ((key << LINE_SHIFT) - self.layout.counter_base) >> LINE_SHIFT)
        } else {
            self.tree_key_to_node(key)
        }
    }

    /// (level, index) of a tree-cache key (a stored node's device line number).
    ///
    /// The stored levels lie in order of level from `base[1]` up, so the level is the number
    /// of them starting at or below the address. It is counted without a branch per level:
    /// which level a dirty victim belongs to is unpredictable, so a search that stopped at
    /// it could cost the host a mispredicted branch on each lazy write-back.
    #[inline]
    fn tree_key_to_node(&self, key: u64) -> (usize, u64) {
        let addr = key << LINE_SHIFT;
        let t = &self.layout.tree;
        let level = t.base[1..t.root_level()].iter().map(|&b| usize::from(addr >= b)).sum::<usize>();
        assert!(level >= 1, "tree key {key:#x} below the tree region");
        (level, (addr - t.base[level]) >> LINE_SHIFT)
    }

    #[inline]
    fn cache_of(&mut self, kind: MetaKind) -> &mut SetAssocCache {
        match kind {
            MetaKind::Counter => &mut self.counter_cache,
            MetaKind::Tree => &mut self.tree_cache,
            MetaKind::Mac => &mut self.mac_cache,
        }
    }

    /// Takes a block back from the write-back buffer, if it is there (refilled dirty).
    #[inline(always)]
    fn reclaim(&mut self, kind: MetaKind, key: u64) -> bool {
        // Between operations the buffer is empty; a miss then costs no call.
        !self.evictions.is_empty() && self.reclaim_buffered(kind, key)
    }

    #[inline(never)]
    fn reclaim_buffered(&mut self, kind: MetaKind, key: u64) -> bool {
        let Some(i) = self.evictions.iter().position(|e| e.key == key) else { return false };
        let e = self.evictions.swap_remove(i);
        debug_assert_eq!(e.kind, kind);
        self.fill_meta(kind, key, true, e.payload);
        true
    }

    /// Payload of a cached metadata block (functional mode).
    #[inline]
    fn payload(&self, kind: MetaKind, key: u64) -> Option<[u8; 64]> { self.payload_ref(kind, key).copied() }

    /// As [`payload`](Self::payload), without copying the 64 bytes out.
    #[inline(always)]
    fn payload_ref(&self, kind: MetaKind, key: u64) -> Option<&[u8; 64]> {
        let cache = match kind {
            MetaKind::Counter => &self.counter_cache,
            MetaKind::Tree => &self.tree_cache,
            MetaKind::Mac => &self.mac_cache,
        };
        cache.probe(key).and_then(|s| cache.data(s))
    }

    /// The payload of a cached metadata block, to change in place: one probe of the cache,
    /// where a read-modify-write through `payload` and `set_payload` took two and copied the
    /// block twice.
    #[inline(always)]
    fn payload_mut(&mut self, kind: MetaKind, key: u64) -> &mut [u8; 64] {
        let cache = self.cache_of(kind);
        let slot = cache.probe(key).expect("metadata block is cached when its payload is set");
        cache.data_mut(slot).expect("functional caches keep data")
    }

    #[inline]
    fn set_payload(&mut self, kind: MetaKind, key: u64, bytes: [u8; 64]) { *self.payload_mut(kind, key) = bytes; }

    /// Makes counter block (level 0) or tree node (level >= 1) `index` available on chip,
    /// fetching it and every uncached ancestor and verifying them against their parents.
    /// `dirty` marks the block modified. Returns the cycle it is available and verified.
    #[inline(always)]
    pub fn ensure_block(&mut self, level: usize, index: u64, dirty: bool, now: Cycle) -> Result<Cycle, IntegrityError> {
        // The counter block its cache hit or filled last (consecutive lines of one page), or
        // the one before that (`recent_hit`), is answered here, without the call: the call's
        // entry and exit alone cost more than the rest of such a hit. (Level 0 is always below
        // the root.)
        if level == 0 && recent_hit(&mut self.counter_cache, &mut self.counter_before, self.layout.counter_addr(index) >> LINE_SHIFT, dirty) {
            return Ok(now + self.p.counter_hit);
        }
        self.ensure_block_searched(level, index, dirty, now)
    }

    /// [`ensure_block`](Self::ensure_block) past the recent-block tests.
    #[inline(never)]
    fn ensure_block_searched(&mut self, level: usize, index: u64, dirty: bool, now: Cycle) -> Result<Cycle, IntegrityError> {
        let root = self.layout.tree.root_level();
        if level >= root || self.trusted(level, index) {
            return Ok(now); // the root is an on-chip register, a strategy's trusted node too
        }
        let kind = if level == 0 { MetaKind::Counter } else { MetaKind::Tree };
        let key = self.block_addr(level, index) >> LINE_SHIFT;
        let (cache, hit_lat) = if level == 0 {
            (&mut self.counter_cache, self.p.counter_hit)
        } else {
            (&mut self.tree_cache, self.p.tree_hit)
        };
        if cache.lookup(key, dirty).is_some() {
            return Ok(now + hit_lat);
        }
        if self.reclaim(kind, key) {
            return Ok(now + hit_lat);
        }
        // Miss: fetch this block and walk up until a cached ancestor (already verified) or the
        // root. All fetches issue at once; each fetched block is then hashed and compared with
        // its parent's entry, in parallel. Only verified blocks enter the caches, top-down:
        // each after its parent and the requested block last, so no fill of this walk evicts
        // a block the walk still needs (with few ways, an ancestor filled after its child
        // could push the child out of a shared set, leaving the caller without the block it
        // asked for).
        // Functional mode keeps the fetched bytes for verification; the buffer is reused so the
        // hot path allocates nothing (and counting mode never touches it).
        let mut chain = std::mem::take(&mut self.chain_buf);
        chain.clear();
        if let Some(f) = self.func.as_ref() {
            // The walk reads the image entries of this block and of the ancestors it goes on
            // to one after another; ask for all of them at once so that their host cache
            // misses overlap (index entries first, then the bytes they point to).
            let mut lines = [0u64; 16];
            let n = self.path_lines(level, index, &mut lines, 0);
            for &l in &lines[..n] {
                f.image.prefetch_index(l);
            }
            for &l in &lines[..n] {
                f.image.prefetch_bytes(l);
            }
        }
        // (level, line key) of each fetched block, bottom-up.
        let mut walk = [(0usize, 0u64); MAX_LEVELS];
        let mut fetched = 0usize;
        let mut ready = now;
        let (mut lvl, mut idx) = (level, index);
        let mut addr = self.block_addr(lvl, idx);
        loop {
            let class = if lvl == 0 { TrafficClass::Counter } else { TrafficClass::Tree };
            ready = ready.max(self.device_read(addr, class, now));
            if let Some(f) = self.func.as_ref() {
                let (bytes, memo) = f.block_bytes(lvl, idx, addr >> LINE_SHIFT);
                chain.push((lvl, idx, bytes, memo));
            }
            walk[fetched] = (lvl, addr >> LINE_SHIFT);
            fetched += 1;
            let (plvl, pidx) = self.layout.tree.parent(lvl, idx);
            if plvl >= root || self.trusted(plvl, pidx) {
                break;
            }
            let paddr = self.block_addr(plvl, pidx);
            let pkey = paddr >> LINE_SHIFT;
            if self.tree_cache.lookup(pkey, false).is_some() || self.reclaim(MetaKind::Tree, pkey) {
                break;
            }
            lvl = plvl;
            idx = pidx;
            addr = paddr;
        }
        self.stats.mac_ops.tree_verify += fetched as u64;
        let verdict = if chain.is_empty() { Ok(()) } else { self.verify_chain(&chain) };
        if verdict.is_ok() {
            for (i, &(l, key)) in walk[..fetched].iter().enumerate().rev() {
                let kind = if l == 0 { MetaKind::Counter } else { MetaKind::Tree };
                self.fill_meta(kind, key, l == level && dirty, chain.get(i).map(|c| c.2));
            }
        }
        self.chain_buf = chain;
        verdict?;
        // The fetched blocks are checked in parallel, each against the block above it.
        Ok(self.engine.run_many(ready, fetched.max(1) as u64, 1, self.p.hash))
    }

    /// Checks each fetched block against its parent's entry, top-down: the topmost against a
    /// cached node or the root register, each lower one against the block above it. The
    /// fetched blocks are not cached yet; on a mismatch they never are.
    ///
    /// A block's entry is its image memo when it has one (the hash of exactly these bytes,
    /// computed when they were last hashed: see [`NvmImage`]), else it is hashed here and
    /// memoised.
    fn verify_chain(&mut self, chain: &[(usize, u64, [u8; 64], u64)]) -> Result<(), IntegrityError> {
        let f = self.func.as_ref().expect("functional");
        let mut entries = [(0u64, false); MAX_LEVELS];
        for (e, (lvl, idx, bytes, memo)) in entries.iter_mut().zip(chain) {
            *e = if *memo != 0 { (*memo, false) } else { (f.child_entry(*lvl, *idx, bytes), true) };
        }
        let root = self.layout.tree.root_level();
        let mut verdict = Ok(());
        for i in (0..chain.len()).rev() {
            let (lvl, idx, _, _) = &chain[i];
            let (plvl, pidx) = self.layout.tree.parent(*lvl, *idx);
            let slot = self.layout.tree.slot_in_parent(*idx);
            let expected = if plvl >= root {
                f.root_entry(slot)
            } else if i + 1 < chain.len() {
                node_entry(&chain[i + 1].2, slot)
            } else if let Some(e) = self.trusted_entry(plvl, pidx, slot) {
                e
            } else {
                let pkey = self.layout.tree.node_addr(plvl, pidx) >> LINE_SHIFT;
                node_entry(self.payload_ref(MetaKind::Tree, pkey).expect("verified parent is cached"), slot)
            };
            if *lvl == 0 && f.canaries.skip_counter_verification {
                continue;
            }
            if entries[i].0 != expected {
                let addr = self.block_addr(*lvl, *idx);
                verdict = Err(if *lvl == 0 {
                    IntegrityError::CounterBlock { page: *idx, addr }
                } else {
                    IntegrityError::TreeNode { level: *lvl, index: *idx, addr }
                });
                break;
            }
        }
        let tag = f.memo_tag();
        // `&entries`: by value, the whole 24-entry array was copied (a memcpy call) per walk.
        for ((lvl, idx, bytes, _), &(entry, fresh)) in chain.iter().zip(&entries) {
            if fresh && entry != 0 {
                let line = self.block_addr(*lvl, *idx) >> LINE_SHIFT;
                self.func.as_mut().expect("functional").image.set_memo(line, &tag, bytes, entry);
            }
        }
        verdict
    }

    /// Makes the MAC block holding `line`'s MAC available. MAC blocks need no tree: a stale
    /// or forged MAC fails against the (tree-verified) counter. Returns the ready cycle.
    #[inline(always)]
    pub fn ensure_mac(&mut self, line: u64, dirty: bool, now: Cycle) -> Cycle {
        // The MAC block its cache hit or filled last (the 8 consecutive lines whose MACs it
        // holds), or the one before that, is answered here, without the call (see
        // `ensure_block`).
        if recent_hit(&mut self.mac_cache, &mut self.mac_before, self.layout.mac_addr(line).0 >> LINE_SHIFT, dirty) {
            return now + self.p.mac_hit;
        }
        self.ensure_mac_searched(line, dirty, now)
    }

    /// [`ensure_mac`](Self::ensure_mac) past the recent-block tests.
    #[inline(never)]
    fn ensure_mac_searched(&mut self, line: u64, dirty: bool, now: Cycle) -> Cycle {
        let (addr, _) = self.layout.mac_addr(line);
        let key = addr >> LINE_SHIFT;
        if self.mac_cache.lookup(key, dirty).is_some() || self.reclaim(MetaKind::Mac, key) {
            return now + self.p.mac_hit;
        }
        let t = self.device_read(addr, TrafficClass::Mac, now);
        let bytes = self.func.as_ref().map(|f| f.image.get(key));
        self.fill_meta(MetaKind::Mac, key, dirty, bytes);
        t
    }

    #[inline(always)]
    fn fill_meta(&mut self, kind: MetaKind, key: u64, dirty: bool, payload: Option<[u8; 64]>) {
        let ways = (kind == MetaKind::Tree && !self.tree_ways_of_level.is_empty()).then(|| self.tree_ways_of_level[self.tree_key_to_node(key).0].clone());
        let cache = self.cache_of(kind);
        let (slot, victim) = match ways {
            Some(w) => cache.fill_within(key, dirty, w),
            None => cache.fill(key, dirty),
        };
        let victim = victim.filter(|v| v.dirty).map(|v| Evicted { kind, key: v.line, payload: cache.data(v.slot).copied() });
        if let (Some(p), Some(dst)) = (payload, cache.data_mut(slot)) {
            *dst = p;
        }
        if let Some(v) = victim {
            if self.func.is_some() {
                // (Tested here so that counting mode, which has nothing to prefetch, makes no call.)
                self.prefetch_eviction(kind, v.key);
            }
            self.evictions.push(v);
        }
    }

    /// Functional mode: hints the host CPU to fetch what writing back dirty victim `key` at
    /// the end of this operation touches (see `process_evictions`), so that those host cache
    /// misses overlap with the rest of the operation: the victim's image entry and, with lazy
    /// update, its parent's tree-cache set and image entry. Changes no simulated state.
    #[inline(never)]
    fn prefetch_eviction(&self, kind: MetaKind, key: u64) {
        let Some(f) = self.func.as_ref() else { return };
        f.image.prefetch_index(key);
        if kind == MetaKind::Mac || !self.absorb_on_write_back {
            return;
        }
        let (level, index) = self.meta_key_to_node(kind, key);
        let (plvl, pidx) = self.layout.tree.parent(level, index);
        if plvl < self.prefetch_levels {
            let pkey = self.layout.tree.node_addr(plvl, pidx) >> LINE_SHIFT;
            self.tree_cache.prefetch(pkey);
            f.image.prefetch_index(pkey);
        }
    }

    /// Writes back every buffered dirty metadata eviction. With lazy update, an evicted counter
    /// block or node also updates its parent's hash entry (fetching and verifying the parent
    /// if it is not cached), which may evict more.
    #[inline(always)]
    pub fn process_evictions(&mut self, now: Cycle) -> Result<(), IntegrityError> {
        // Most operations evict nothing dirty: then no call.
        if self.evictions.is_empty() {
            return Ok(());
        }
        self.write_back_evictions(now)
    }

    /// [`process_evictions`](Self::process_evictions) of a non-empty buffer.
    #[inline(never)]
    fn write_back_evictions(&mut self, now: Cycle) -> Result<(), IntegrityError> {
        while let Some(Evicted { kind, key, payload }) = self.evictions.pop() {
            let addr = key << LINE_SHIFT;
            let class = match kind {
                MetaKind::Mac => TrafficClass::Mac,
                MetaKind::Counter => TrafficClass::Counter,
                MetaKind::Tree => TrafficClass::Tree,
            };
            self.device_write(addr, class, now);
            if let (Some(f), Some(p)) = (self.func.as_mut(), payload) {
                f.persist(key, p);
            }
            if kind != MetaKind::Mac && self.absorb_on_write_back {
                let (level, index) = self.meta_key_to_node(kind, key);
                let entry = self.update_parent(level, index, payload.as_ref(), now)?;
                if let (Some(f), Some(p), Some(e)) = (self.func.as_mut(), payload, entry) {
                    // The hash of the bytes just persisted: a refetch need not hash them again.
                    if e != 0 {
                        let tag = f.memo_tag();
                        f.image.set_memo(key, &tag, &p, e);
                    }
                }
            }
        }
        Ok(())
    }

    /// Recomputes the hash of block (level, index) (content `bytes` in functional mode) into
    /// its parent (one hash), marking the parent dirty, or into the root register. Returns
    /// the entry computed (functional mode). No cycle: the only caller is a metadata
    /// write-back, which costs no latency to the access that caused it (module docs,
    /// "Timing"), so when the hash is done is never needed; the parent's fetch still
    /// occupies the device.
    fn update_parent(&mut self, level: usize, index: u64, bytes: Option<&[u8; 64]>, now: Cycle) -> Result<Option<u64>, IntegrityError> {
        if self.func.as_ref().is_some_and(|f| f.canaries.skip_tree_update) {
            return Ok(None);
        }
        let (plvl, pidx) = self.layout.tree.parent(level, index);
        self.stats.mac_ops.tree_update += 1;
        let slot = self.layout.tree.slot_in_parent(index);
        let entry = match (self.func.as_ref(), bytes) {
            (Some(f), Some(b)) => Some(f.child_entry(level, index, b)),
            _ => None,
        };
        if plvl >= self.layout.tree.root_level() {
            self.stats.root_updates += 1;
            if let (Some(f), Some(e)) = (self.func.as_mut(), entry) {
                f.set_root_entry(slot, e);
            }
            return Ok(entry);
        }
        if self.p.verify_parent_on_write_back {
            self.ensure_block(plvl, pidx, true, now)?;
        } else {
            self.fetch_unverified(plvl, pidx, now);
        }
        if let Some(e) = entry {
            let pkey = self.layout.tree.node_addr(plvl, pidx) >> LINE_SHIFT;
            set_node_entry(self.payload_mut(MetaKind::Tree, pkey), slot, e);
        }
        Ok(entry)
    }

    /// The node (level, index) brought into the tree cache dirty, read from the device if
    /// absent, without verifying it (`tree.verify_parent_on_write_back = false`; counting
    /// mode only).
    fn fetch_unverified(&mut self, level: usize, index: u64, now: Cycle) {
        let key = self.block_addr(level, index) >> LINE_SHIFT;
        if self.tree_cache.lookup(key, true).is_some() || self.reclaim(MetaKind::Tree, key) {
            return;
        }
        self.device_read(key << LINE_SHIFT, TrafficClass::Tree, now);
        self.fill_meta(MetaKind::Tree, key, true, None);
    }

    /// Eager update: recompute every hash from the counter block of `page` up to the node at
    /// `top_level` (the root register when `top_level` is the root level or above; tree
    /// levels count from the counter blocks, 0). With strict persistence every node on the
    /// way is written through. Returns when the top is updated (hashes are sequential up the
    /// path).
    pub(crate) fn path_update(&mut self, page: u64, now: Cycle, top_level: usize) -> Result<Cycle, IntegrityError> { self.path_update_from(0, page, now, top_level) }

    /// [`path_update`](Self::path_update) from block (`level`, `index`) instead of a counter
    /// block: the block's hash goes into its parent and on up to `top_level`. In functional
    /// mode the block must be cached.
    pub(crate) fn path_update_from(&mut self, level: usize, index: u64, now: Cycle, top_level: usize) -> Result<Cycle, IntegrityError> {
        if self.func.as_ref().is_some_and(|f| f.canaries.skip_tree_update) {
            return Ok(now);
        }
        let (mut level, mut index) = (level, index);
        let mut t = now;
        let root = self.layout.tree.root_level();
        let kind = if level == 0 { MetaKind::Counter } else { MetaKind::Tree };
        let mut child = self.func.is_some().then(|| self.payload(kind, self.block_addr(level, index) >> LINE_SHIFT).expect("block cached"));
        loop {
            let (plvl, pidx) = self.layout.tree.parent(level, index);
            self.stats.mac_ops.tree_update += 1;
            let slot = self.layout.tree.slot_in_parent(index);
            let entry = match (self.func.as_ref(), child.as_ref()) {
                (Some(f), Some(b)) => Some(f.child_entry(level, index, b)),
                _ => None,
            };
            if plvl >= root {
                self.stats.root_updates += 1;
                if let (Some(f), Some(e)) = (self.func.as_mut(), entry) {
                    f.set_root_entry(slot, e);
                }
                return Ok(self.engine.run(t, 1, self.p.hash));
            }
            let avail = self.ensure_block(plvl, pidx, true, now)?;
            t = self.engine.run(t.max(avail), 1, self.p.hash);
            let addr = self.layout.tree.node_addr(plvl, pidx);
            if let Some(e) = entry {
                let node = self.payload_mut(MetaKind::Tree, addr >> LINE_SHIFT);
                set_node_entry(node, slot, e);
                child = Some(*node);
            }
            if self.p.strict {
                t = t.max(self.device_write(addr, TrafficClass::Tree, t));
                if let Some(slot) = self.tree_cache.probe(addr >> LINE_SHIFT) {
                    self.tree_cache.set_dirty(slot, false);
                }
                if let (Some(f), Some(node)) = (self.func.as_mut(), child) {
                    f.persist(addr >> LINE_SHIFT, node);
                }
            }
            if plvl >= top_level {
                return Ok(t);
            }
            level = plvl;
            index = pidx;
        }
    }

    // ---------------------------------------------------------------- functional helpers

    /// The MAC stored for `line` in its (cached) MAC block.
    fn stored_mac(&self, line: u64) -> u64 {
        let (addr, slot) = self.layout.mac_addr(line);
        let block = self.payload_ref(MetaKind::Mac, addr >> LINE_SHIFT).expect("MAC block cached");
        get_bits(block, slot, self.layout.macs_per_block)
    }

    fn set_stored_mac(&mut self, line: u64, mac: u64) {
        let (addr, slot) = self.layout.mac_addr(line);
        let per_block = self.layout.macs_per_block;
        set_bits(self.payload_mut(MetaKind::Mac, addr >> LINE_SHIFT), slot, per_block, mac);
    }

    /// Functional mode: re-encodes the cached counter block of `page` from the counter store.
    /// Counting mode keeps no bytes (and may run 8-bit minors, which do not fit 64 B).
    pub fn store_counter_payload(&mut self, page: u64) {
        if self.func.is_some() {
            let bytes = self.counters.block(page).encode(self.p.minor_bits);
            self.set_payload(MetaKind::Counter, self.layout.counter_addr(page) >> LINE_SHIFT, bytes);
        }
    }

    /// Functional mode, after a write bumped `line`'s minor and nothing else of its page's
    /// counters: writes that minor into the cached counter block's bytes (the same bytes as
    /// [`store_counter_payload`](Self::store_counter_payload), without re-encoding the other 63).
    fn store_counter_minor(&mut self, line: u64) {
        if self.func.is_some() {
            let (_, minor) = self.counters.counter_of_line(line);
            let (page, bits) = (page_of_line(line), self.p.minor_bits);
            let payload = self.payload_mut(MetaKind::Counter, self.layout.counter_addr(page) >> LINE_SHIFT);
            CounterBlock::encode_one(payload, line_in_page(line), minor, bits);
            debug_assert_eq!(
                self.payload(MetaKind::Counter, self.layout.counter_addr(page) >> LINE_SHIFT),
                Some(self.counters.block(page).encode(bits)),
                "the cached counter block of page {page} was out of step with the counter store"
            );
        }
    }

    /// [`CounterStore::bump_line_keeping_old`](secmem_core::counters::CounterStore::bump_line_keeping_old)
    /// on the cached counter block's bytes (`counters_in_payload`): bumps `line`'s minor, or
    /// on an overflow the major (every minor back to 0), and returns the block from before an
    /// overflow, else `None`. The block is the counter cache's latest, so finding it takes no
    /// search.
    fn bump_in_payload(&mut self, line: u64) -> Option<CounterBlock> {
        let (idx, bits) = (line_in_page(line), self.p.minor_bits);
        let key = self.layout.counter_addr(page_of_line(line)) >> LINE_SHIFT;
        let bytes = self.payload_mut(MetaKind::Counter, key);
        let (_, minor) = CounterBlock::decode_one(bytes, idx, bits);
        if u32::from(minor) + 1 < 1 << bits {
            CounterBlock::encode_one(bytes, idx, minor + 1, bits);
            return None;
        }
        let old = CounterBlock::decode(bytes, bits);
        let mut new = old;
        new.bump(idx, bits);
        *bytes = new.encode(bits);
        Some(old)
    }

    /// Functional mode: `line`'s counter (major, minor) as its cached counter block's bytes
    /// hold it (the block must be cached).
    fn cached_counter_of_line(&self, line: u64) -> (u64, u8) {
        let key = self.layout.counter_addr(page_of_line(line)) >> LINE_SHIFT;
        let block = self.payload_ref(MetaKind::Counter, key).expect("counter block cached");
        CounterBlock::decode_one(block, line_in_page(line), self.p.minor_bits)
    }

    /// Decrypts and verifies the NVM copy of data `line` under counter (major, minor).
    fn open_line(&self, line: u64, major: u64, minor: u8) -> Result<[u8; 64], IntegrityError> {
        let f = self.func.as_ref().expect("functional");
        let stored = self.stored_mac(line);
        // One look-up of the line in the image serves the boot-content test and the read.
        let in_image = f.image.get_opt(line);
        if stored == 0 && in_image.is_none() && (major, minor) == f.initial_counter(line) {
            // Boot content on every side: the check would compare the boot MAC with itself.
            return Ok([0; 64]);
        }
        // The ciphertext NVM holds: the image's, or the boot content.
        let mut buf = in_image.unwrap_or_else(|| f.boot_line(line));
        if !f.canaries.skip_data_mac_check && f.data_mac(&buf, line, major, minor) != f.effective_mac(stored, line) {
            return Err(IntegrityError::DataMac { line, addr: line << LINE_SHIFT });
        }
        f.decrypt(&mut buf, line, major, minor);
        Ok(buf)
    }

    /// Encrypts `plain` for `line` under its current counter, persists the ciphertext and
    /// stores its MAC.
    fn seal_line(&mut self, line: u64, plain: &[u8; 64]) {
        let (major, minor) = if self.counters_in_payload { self.cached_counter_of_line(line) } else { self.counters.counter_of_line(line) };
        self.seal_line_under(line, plain, major, minor);
    }

    /// Encrypts `plain` for `line` under counter (`major`, `minor`), persists the ciphertext
    /// and stores its MAC.
    fn seal_line_under(&mut self, line: u64, plain: &[u8; 64], major: u64, minor: u8) {
        let f = self.func.as_mut().expect("functional");
        let mut ct = *plain;
        f.encrypt(&mut ct, line, major, minor);
        f.persist(line, ct);
        let mac = f.data_mac(&ct, line, major, minor);
        self.set_stored_mac(line, mac);
    }

    // ---------------------------------------------------------------- data paths

    // One read path and one write path serve the baseline and every design: `read_line` /
    // `write_line` take the line's own counter from the counter view, `McOps::read_line_under` /
    // `write_line_under` the counter a design chose; both end in `read_tail` / `write_tail`.
    // Latency is recorded by the caller of the design's hook (`Design::serve_read` /
    // `serve_write`), once per core-level request.

    /// Baseline read of data `line` arriving at `now`: returns when the plaintext is usable
    /// and, in functional mode, the verified plaintext.
    pub fn read_line(&mut self, line: u64, now: Cycle) -> Result<(Cycle, Option<[u8; 64]>), IntegrityError> {
        self.stats.data_reads += 1;
        let data_at = self.device_read(line << LINE_SHIFT, TrafficClass::Data, now);
        if !self.p.secure {
            let plain = self.func.as_ref().map(|f| f.image.get(line));
            return Ok((data_at, plain));
        }
        let ctr_at = self.ensure_block(0, page_of_line(line), false, now)?;
        self.read_tail(line, None, false, data_at, ctr_at, now)
    }

    /// The common end of every secure read whose data fetch is issued (`data_at`) and whose
    /// counter block is usable (`ctr_at`): fetches the MAC, decrypts and verifies (functional
    /// mode) under `counter` (None: the line's own, from the verified counter-block bytes),
    /// writes back what the fetches evicted, counts the work, and returns when the plaintext
    /// is usable. Pad generation starts when the counter is known; the XOR follows when both
    /// pad and data are in. A `reencrypt` read is counted as the re-encryption's (one AES op,
    /// no data read or MAC check of its own).
    #[inline(always)]
    fn read_tail(&mut self, line: u64, counter: Option<(u64, u8)>, reencrypt: bool, data_at: Cycle, ctr_at: Cycle, now: Cycle) -> Result<(Cycle, Option<[u8; 64]>), IntegrityError> {
        let mac_at = self.ensure_mac(line, false, now);
        let plain = if self.func.is_some() {
            let (major, minor) = counter.unwrap_or_else(|| self.cached_counter_of_line(line));
            Some(self.open_line(line, major, minor)?)
        } else {
            None
        };
        if reencrypt {
            self.stats.aes_ops.reencrypt += 1;
        } else {
            self.stats.aes_ops.data_decrypt += 1;
            self.stats.mac_ops.data_verify += 1;
        }
        self.process_evictions(now)?;
        let pad_at = self.engine.run(ctr_at, 1, self.p.aes);
        let plain_at = data_at.max(pad_at) + Cycle(1);
        let verified_at = self.engine.run(data_at.max(mac_at), 1, self.p.mac);
        let ready = if self.p.verify_on_critical_path { plain_at.max(verified_at) } else { plain_at };
        Ok((ready, plain))
    }

    /// Baseline write of data `line` (an LLC write-back) arriving at `now`; `data` is the
    /// plaintext (required in functional mode). Returns when the write is persistent (data,
    /// and with strict persistence all its metadata).
    pub fn write_line(&mut self, line: u64, data: Option<&[u8; 64]>, now: Cycle) -> Result<Cycle, IntegrityError> {
        let functional = self.func.is_some();
        let plain = if functional { Some(data.expect("functional mode writes carry data")) } else { None };
        if !self.p.secure {
            self.stats.data_writes += 1;
            let done = self.device_write(line << LINE_SHIFT, TrafficClass::Data, now);
            if let (Some(f), Some(p)) = (self.func.as_mut(), plain) {
                f.persist(line, *p);
            }
            return Ok(done);
        }
        let page = page_of_line(line);
        let ctr_at = self.ensure_block(0, page, true, now)?;
        let mut reenc_done = now;
        // The block from before an overflow: the counters the page's other lines are still
        // encrypted under.
        let overflowed = if self.counters_in_payload { self.bump_in_payload(line) } else { self.counters.bump_line_keeping_old(line) };
        let overflow = overflowed.is_some();
        if let Some(old) = overflowed {
            if self.func.as_ref().is_some_and(|f| f.canaries.minor_wrap_without_reencryption) {
                // Planted bug: the minor wraps, the major stays, nothing is re-encrypted.
                let mut wrapped = old;
                wrapped.minors[line_in_page(line)] = 0;
                if self.counters_in_payload {
                    let bytes = wrapped.encode(self.p.minor_bits);
                    self.set_payload(MetaKind::Counter, self.layout.counter_addr(page) >> LINE_SHIFT, bytes);
                } else {
                    self.counters.set_block(page, wrapped);
                }
            } else {
                reenc_done = self.reencrypt_page(page, line_in_page(line), &old, ctr_at)?;
            }
        }
        // The new counter into the cached block's bytes (with `counters_in_payload`,
        // `bump_in_payload` wrote them already). The MAC fetch in `write_tail` touches only
        // the MAC cache, so the block is still cached when the line is sealed.
        if functional && !self.counters_in_payload {
            if overflow {
                self.store_counter_payload(page);
            } else {
                self.store_counter_minor(line);
            }
        }
        Ok(self.write_tail(line, plain, None, TrafficClass::Data, ctr_at, now)?.max(reenc_done))
    }

    /// The common end of every secure write whose counter block is updated and usable at
    /// `ctr_at`: fetches the MAC block, encrypts and MACs (functional mode) under `counter`
    /// (None: the line's own counter), writes the line as traffic `class`, runs the tree
    /// update (eager: the page's path) and, with strict persistence, writes its metadata
    /// through. Returns when the write is persistent.
    #[inline(always)]
    fn write_tail(&mut self, line: u64, plain: Option<&[u8; 64]>, counter: Option<(u64, u8)>, class: TrafficClass, ctr_at: Cycle, now: Cycle) -> Result<Cycle, IntegrityError> {
        let mac_at_start = self.ensure_mac(line, true, now);
        if self.func.is_some() {
            let plain = plain.expect("functional mode writes carry data");
            match counter {
                None => self.seal_line(line, plain),
                Some((major, minor)) => self.seal_line_under(line, plain, major, minor),
            }
        }
        match class {
            TrafficClass::Reencrypt => {
                // As the baseline's re-encryption counts it (`reencrypt_page`).
                self.stats.aes_ops.reencrypt += 1;
                self.stats.mac_ops.reencrypt += 1;
            }
            _ => {
                if class == TrafficClass::Data {
                    self.stats.data_writes += 1;
                }
                self.stats.aes_ops.data_encrypt += 1;
                self.stats.mac_ops.data_write += 1;
            }
        }
        let cipher_at = self.engine.run(ctr_at, 1, self.p.aes) + Cycle(1);
        let mac_at = self.engine.run(mac_at_start.max(cipher_at), 1, self.p.mac);
        let mut done = self.device_write(line << LINE_SHIFT, class, mac_at);
        done = done.max(self.update_tree_after_counter_change(page_of_line(line), ctr_at)?);
        if self.p.strict {
            done = done.max(self.persist_metadata_of(line, mac_at));
        }
        self.process_evictions(now)?;
        Ok(done)
    }

    /// The tree update after `page`'s counter block changed at `ctr_at`, by the strategy in
    /// force ([`tree_update`]): nothing now under lazy update (the parent absorbs the block's
    /// hash when the block is written back), the whole path to the root under eager update,
    /// what it decides under a design's own. Returns when the update is done.
    #[inline]
    fn update_tree_after_counter_change(&mut self, page: u64, ctr_at: Cycle) -> Result<Cycle, IntegrityError> {
        match self.updater {
            Updater::Lazy => Ok(ctr_at),
            Updater::Eager => self.path_update(page, ctr_at, usize::MAX),
            Updater::Own(_) => self.own_tree_update(page, ctr_at),
        }
    }

    /// [`update_tree_after_counter_change`](Self::update_tree_after_counter_change) under a
    /// design's strategy: it is taken out of the controller for the call, so that it can be
    /// handed the controller's operations.
    #[inline(never)]
    fn own_tree_update(&mut self, page: u64, ctr_at: Cycle) -> Result<Cycle, IntegrityError> {
        let Updater::Own(slot) = &mut self.updater else { unreachable!("called for a design's strategy") };
        let mut strategy = slot.take().expect("a tree update strategy is never re-entered");
        let r = strategy.counter_changed(self, page, ctr_at);
        self.updater = Updater::Own(Some(strategy));
        r
    }

    /// Whether node (`level`, `index`) is held on chip, trusted ([`trusted`](Self::trusted)).
    #[inline]
    fn trusted(&self, level: usize, index: u64) -> bool { !self.trusted.is_empty() && self.trusted.contains_key(&(level, index)) }

    /// Whether tree node (`level`, `index`) is held on chip, trusted, by a design's strategy
    /// (a persistent sub-tree root): its stored copy is not read while it is.
    pub fn is_trusted(&self, level: usize, index: u64) -> bool { self.trusted(level, index) }

    /// Functional mode: entry `slot` of trusted node (`level`, `index`).
    fn trusted_entry(&self, level: usize, index: u64, slot: usize) -> Option<u64> {
        if self.trusted.is_empty() {
            return None;
        }
        self.trusted.get(&(level, index)).map(|b| node_entry(b, slot))
    }

    /// After a crash: installs what survives power loss of `live`'s on-chip battery-backed
    /// state, its trusted nodes and what of its tree update strategy survives
    /// ([`TreeUpdateStrategy::persistent_copy`]), in this controller, which recovers.
    pub fn adopt_tree_update_state_of(&mut self, live: &SecureMc) {
        self.trusted.clone_from(&live.trusted);
        if let Updater::Own(Some(s)) = &live.updater {
            if let Some(copy) = s.persistent_copy() {
                self.updater = Updater::Own(Some(copy));
            }
        }
    }

    /// Recovery by the strategy in force ([`TreeUpdateStrategy::recover`]); the baseline's
    /// for the built-in two.
    pub(crate) fn recover_tree_update(&mut self, now: Cycle) -> Result<recovery::RecoveryReport, recovery::RecoveryError> {
        let Updater::Own(slot) = &mut self.updater else { return recovery::rebuild_and_verify(self, now) };
        let mut strategy = slot.take().expect("a tree update strategy is never re-entered");
        let r = strategy.recover(self, now);
        self.updater = Updater::Own(Some(strategy));
        r
    }

    /// A persist barrier for the strategy in force ([`TreeUpdateStrategy::fence`]).
    pub(crate) fn tree_update_fence(&mut self, now: Cycle) -> Result<Cycle, IntegrityError> {
        let Updater::Own(slot) = &mut self.updater else { return Ok(now) };
        let mut strategy = slot.take().expect("a tree update strategy is never re-entered");
        let r = strategy.fence(self, now);
        self.updater = Updater::Own(Some(strategy));
        r
    }

    /// The counters of the strategy in force ([`TreeUpdateStrategy::stats`]); none for the
    /// built-in two.
    pub fn tree_update_stats(&self) -> Vec<(&'static str, f64)> {
        match &self.updater {
            Updater::Own(Some(s)) => s.stats(),
            _ => Vec::new(),
        }
    }

    /// Installs a design's own tree update strategy in place of `tree.update`'s (before the
    /// first request).
    pub fn set_tree_update(&mut self, strategy: Box<dyn TreeUpdateStrategy>) {
        self.absorb_on_write_back = strategy.absorbs_on_write_back();
        self.updater = Updater::Own(Some(strategy));
    }

    /// The name of the tree update strategy in force ("lazy", "eager" or the design's).
    pub fn tree_update_name(&self) -> &'static str { self.updater.name() }

    /// Strict persistence: write the counter block and MAC block of `line` through to NVM and
    /// leave their cached copies clean.
    fn persist_metadata_of(&mut self, line: u64, at: Cycle) -> Cycle {
        let caddr = self.layout.counter_addr(page_of_line(line));
        let (maddr, _) = self.layout.mac_addr(line);
        let skip_counter = self.func.as_ref().is_some_and(|f| f.canaries.persist_data_before_counter);
        let t1 = self.device_write(caddr, TrafficClass::Counter, at);
        let t2 = self.device_write(maddr, TrafficClass::Mac, at);
        for (kind, key) in [(MetaKind::Counter, caddr >> LINE_SHIFT), (MetaKind::Mac, maddr >> LINE_SHIFT)] {
            if kind == MetaKind::Counter && skip_counter {
                continue; // planted bug: the counter block stays dirty in the volatile cache
            }
            let payload = self.payload(kind, key);
            let cache = self.cache_of(kind);
            if let Some(s) = cache.probe(key) {
                cache.set_dirty(s, false);
            }
            if let (Some(f), Some(p)) = (self.func.as_mut(), payload) {
                f.persist(key, p);
            }
        }
        t1.max(t2)
    }

    /// Re-encrypts the other 63 lines of `page` after its major counter advanced: each is read,
    /// decrypted with its old counter (from `old`), encrypted with the new one, re-MACed and
    /// written back. (The line being written is encrypted by the write itself, so the page's
    /// 64 lines are all rewritten.)
    fn reencrypt_page(&mut self, page: u64, written_idx: usize, old: &CounterBlock, at: Cycle) -> Result<Cycle, IntegrityError> {
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
            if self.func.is_some() {
                let plain = self.open_line(line, old.major, old.minors[i])?;
                self.seal_line(line, &plain);
            }
            let decrypted = self.engine.run_many(r.max(at), 2, 1, self.p.aes);
            let ready = self.engine.run(decrypted, 1, self.p.mac);
            done = done.max(self.device_write(addr, TrafficClass::Reencrypt, ready.max(mac_at)));
            self.stats.reencrypted_lines += 1;
            self.stats.aes_ops.reencrypt += 2;
            self.stats.mac_ops.reencrypt += 1;
        }
        if self.p.strict {
            // Strict persistence writes every MAC update through: the re-encrypted lines'
            // new MACs must reach NVM with their new ciphertext (the written line's MAC block
            // is written through by the write itself).
            let (own, _) = self.layout.mac_addr(first_line + written_idx as u64);
            let mut last = None;
            for i in 0..LINES_PER_PAGE {
                let (maddr, _) = self.layout.mac_addr(first_line + i);
                if maddr != own && last != Some(maddr) {
                    last = Some(maddr);
                    done = done.max(self.persist_block(MetaKind::Mac, maddr, TrafficClass::Mac, done));
                }
            }
        }
        Ok(done)
    }

    /// Writes cached metadata block `addr` through to NVM and leaves it clean. A block no
    /// longer cached is in the write-back buffer, which this operation drains anyway.
    fn persist_block(&mut self, kind: MetaKind, addr: u64, class: TrafficClass, at: Cycle) -> Cycle {
        let key = addr >> LINE_SHIFT;
        let Some(slot) = self.cache_of(kind).probe(key) else { return at };
        self.cache_of(kind).set_dirty(slot, false);
        let t = self.device_write(addr, class, at);
        let payload = self.payload(kind, key);
        if let (Some(f), Some(p)) = (self.func.as_mut(), payload) {
            f.persist(key, p);
        }
        t
    }

    /// Writes every dirty metadata block back to NVM (lazy: with parent updates, so the root
    /// ends up consistent), e.g. at the end of a run or in a design's drain. Returns when the
    /// last write is persistent.
    pub fn flush_metadata(&mut self, now: Cycle) -> Result<Cycle, IntegrityError> {
        // Counters first, then tree levels bottom-up, so each parent absorbs its children
        // before it is itself written. In the baseline one pass leaves nothing dirty: writing
        // level L back dirties only level L + 1, and the fetches it causes evict only blocks of
        // levels not yet done (the levels below are clean by then). Passes repeat while any
        // pass found something dirty all the same, so a flush stays complete should a hook
        // ever dirty a lower block; the second pass then finds nothing and stops.
        let mut done = now;
        for _pass in 0..64 {
            let dirty_counters: Vec<(u64, usize)> = self.counter_cache.valid_lines().filter(|x| x.1).map(|x| (x.0, x.2)).collect();
            let mut any = !dirty_counters.is_empty();
            for (key, slot) in dirty_counters {
                let payload = self.counter_cache.data(slot).copied();
                self.counter_cache.invalidate(key);
                self.evictions.push(Evicted { kind: MetaKind::Counter, key, payload });
            }
            self.process_evictions(now)?;
            for level in 1..self.layout.tree.root_level() {
                let dirty: Vec<(u64, usize)> = self
                    .tree_cache
                    .valid_lines()
                    .filter(|&(k, d, _)| d && self.tree_key_to_node(k).0 == level)
                    .map(|x| (x.0, x.2))
                    .collect();
                any |= !dirty.is_empty();
                for (key, slot) in dirty {
                    let payload = self.tree_cache.data(slot).copied();
                    self.tree_cache.invalidate(key);
                    self.evictions.push(Evicted { kind: MetaKind::Tree, key, payload });
                }
                self.process_evictions(now)?;
            }
            if !any {
                break;
            }
        }
        let dirty_macs: Vec<(u64, usize)> = self.mac_cache.valid_lines().filter(|x| x.1).map(|x| (x.0, x.2)).collect();
        for (key, slot) in dirty_macs {
            let payload = self.mac_cache.data(slot).copied();
            self.mac_cache.invalidate(key);
            done = done.max(self.device_write(key << LINE_SHIFT, TrafficClass::Mac, now));
            if let (Some(f), Some(p)) = (self.func.as_mut(), payload) {
                f.persist(key, p);
            }
        }
        Ok(done.max(self.media.drain(now)))
    }

    /// Drops every cached metadata block without writing anything (the next accesses fetch and
    /// verify from NVM); the counter view is kept. Attack harnesses use it between injections.
    pub fn drop_metadata_caches(&mut self) {
        self.evictions.clear();
        self.counter_cache.clear();
        self.mac_cache.clear();
        self.tree_cache.clear();
    }

    /// Every dirty metadata block on chip (counter cache, tree cache, MAC cache, then the
    /// write-back buffer), with its bytes in functional mode: what an eADR drain must save.
    pub fn dirty_metadata(&self) -> Vec<MetaBlock> {
        let mut out = Vec::new();
        for (kind, cache) in [(MetaKind::Counter, &self.counter_cache), (MetaKind::Tree, &self.tree_cache), (MetaKind::Mac, &self.mac_cache)] {
            for (key, dirty, slot) in cache.valid_lines() {
                if dirty {
                    out.push(MetaBlock { kind, key, payload: cache.data(slot).copied() });
                }
            }
        }
        out.extend(self.evictions.iter().map(|e| MetaBlock { kind: e.kind, key: e.key, payload: e.payload }));
        out
    }

    /// Which metadata region device line `key` is in (None for data or beyond the tree).
    pub fn kind_of_key(&self, key: u64) -> Option<MetaKind> {
        let addr = key << LINE_SHIFT;
        let l = &self.layout;
        let tree_start = l.tree.base.get(1).copied().unwrap_or(l.end);
        if addr >= l.counter_base && addr < l.counter_base + l.counter_blocks * 64 {
            Some(MetaKind::Counter)
        } else if addr >= l.mac_base && addr < l.mac_base + l.mac_blocks * 64 {
            Some(MetaKind::Mac)
        } else if addr >= tree_start && addr < l.end {
            Some(MetaKind::Tree)
        } else {
            None
        }
    }

    /// Puts a saved dirty metadata block back into its cache (recovery of a drained or
    /// battery-backed metadata cache); a counter block also becomes the counter view of its
    /// page again. The caller has verified the bytes.
    pub fn restore_metadata(&mut self, b: MetaBlock) {
        if b.kind == MetaKind::Counter {
            if let Some(p) = b.payload.as_ref() {
                let page = ((b.key << LINE_SHIFT) - self.layout.counter_base) >> LINE_SHIFT;
                self.counters.set_block(page, CounterBlock::decode(p, self.p.minor_bits));
            }
        }
        if let Some(slot) = self.cache_of(b.kind).probe(b.key) {
            self.cache_of(b.kind).set_dirty(slot, true);
            if let (Some(p), Some(dst)) = (b.payload, self.cache_of(b.kind).data_mut(slot)) {
                *dst = p;
            }
            return;
        }
        self.fill_meta(b.kind, b.key, true, b.payload);
    }

    /// Rebuilds the counter view from the counter blocks persisted in NVM (functional mode),
    /// without touching the tree: recoveries that restore their metadata caches from a
    /// verified copy use it, and every counter block fetched later is still verified against
    /// the tree before use.
    pub fn load_counter_view_from_image(&mut self) {
        let bits = self.p.minor_bits;
        self.load_counter_view_with(|_, bytes| CounterBlock::decode(bytes, bits));
    }

    /// As [`load_counter_view_from_image`](Self::load_counter_view_from_image), for a design
    /// whose counter blocks have a format of their own: `decode(page, bytes)` turns a persisted
    /// block's bytes into its counters (a design may note what else the block holds), page by
    /// page in ascending order. Host work only: no simulated reads (a recovery that calls it
    /// has read and verified those blocks already).
    pub fn load_counter_view_with(&mut self, mut decode: impl FnMut(u64, &[u8; 64]) -> CounterBlock) {
        let Some(f) = self.func.as_ref() else { return };
        let first = self.layout.counter_base >> LINE_SHIFT;
        for line in f.image.lines_in(first, first + self.layout.counter_blocks) {
            self.counters.set_block(line - first, decode(line - first, &f.image.get(line)));
        }
    }

    /// Whether dirty metadata victims wait in the write-back buffer (`process_evictions` writes
    /// them). Every operation empties it before it returns.
    pub fn has_pending_evictions(&self) -> bool { !self.evictions.is_empty() }

    /// After a crash with battery-backed metadata (`security.metadata_persistence =
    /// "battery-backed"`): takes over what `live` kept powered through it, its metadata caches
    /// (payloads included) and its counter view. Called on a recovery controller that already
    /// holds the surviving NVM image and root register.
    pub fn keep_battery_backed_state_of(&mut self, live: &SecureMc) {
        self.counter_cache = live.counter_cache.clone();
        self.mac_cache = live.mac_cache.clone();
        self.tree_cache = live.tree_cache.clone();
        // Block by block: the store's host memory is reserved for the whole device.
        self.counters = CounterStore::with_init(self.p.minor_bits, self.layout.counter_blocks, live.counters.init());
        for (page, block) in live.counters.changed_blocks() {
            self.counters.set_block(page, block);
        }
        self.evictions.clear();
    }

    /// Power loss: every volatile structure of the controller is lost — the metadata caches
    /// (unless `keep_metadata_caches`, for battery-backed or non-volatile ones) and the
    /// counter store (the architectural view is rebuilt from NVM by recovery). The NVM image
    /// and the on-chip root register survive; so does the write pending queue under ADR,
    /// whose writes this model applies to the image when they are accepted.
    pub fn crash(&mut self, keep_metadata_caches: bool) {
        self.evictions.clear();
        if !keep_metadata_caches {
            self.counter_cache.clear();
            self.mac_cache.clear();
            self.tree_cache.clear();
            if self.func.is_none() {
                // No NVM bytes in counting mode: the changed blocks stand for the persisted
                // counter blocks recovery reads back.
                self.crashed_counters = self.counters.changed_blocks();
            }
            self.counters = CounterStore::with_init(self.p.minor_bits, self.layout.counter_blocks, self.counters.init());
        }
    }
}

/// Building blocks for designs that keep their own counter-block format or redirect data
/// reads (Lelantus, Silent Shredder). They reuse the baseline's timing and crypto; the design
/// decides which counter a line is encrypted under and how its counter block is encoded.
impl SecureMc {
    /// The cached payload of `page`'s counter block (functional mode; the block must have been
    /// made available with `ensure_block`).
    pub fn counter_payload(&self, page: u64) -> Option<[u8; 64]> {
        self.payload(MetaKind::Counter, self.layout.counter_addr(page) >> LINE_SHIFT)
    }

    /// Replaces the cached payload of `page`'s counter block (functional mode; no-op in
    /// counting mode). The block must be cached (ensure it dirty first).
    pub fn set_counter_payload(&mut self, page: u64, bytes: [u8; 64]) {
        if self.func.is_some() {
            self.set_payload(MetaKind::Counter, self.layout.counter_addr(page) >> LINE_SHIFT, bytes);
        }
    }

    /// After a design changed `page`'s counter block without writing data (a page command):
    /// with eager update recompute its tree path, with strict persistence write it through.
    /// Returns when that is done.
    pub fn counter_block_updated(&mut self, page: u64, ctr_at: Cycle) -> Result<Cycle, IntegrityError> {
        let mut done = self.update_tree_after_counter_change(page, ctr_at)?;
        if self.p.strict {
            let caddr = self.layout.counter_addr(page);
            done = done.max(self.device_write(caddr, TrafficClass::Counter, ctr_at));
            let key = caddr >> LINE_SHIFT;
            let payload = self.payload(MetaKind::Counter, key);
            if let Some(s) = self.counter_cache.probe(key) {
                self.counter_cache.set_dirty(s, false);
            }
            if let (Some(f), Some(p)) = (self.func.as_mut(), payload) {
                f.persist(key, p);
            }
        }
        self.process_evictions(ctr_at)?;
        Ok(done)
    }
}

/// Reads the `slot`-th of `per_block` equal-width fields of a 64 B block (LSB first).
pub fn get_bits(block: &[u8; 64], slot: usize, per_block: u64) -> u64 {
    let width = 512 / per_block as usize;
    if width == 64 {
        return node_entry(block, slot);
    }
    let mut v = 0u64;
    for b in 0..width {
        let bit = slot * width + b;
        v |= (((block[bit / 8] >> (bit % 8)) & 1) as u64) << b;
    }
    v
}

/// Writes the `slot`-th of `per_block` equal-width fields of a 64 B block.
pub fn set_bits(block: &mut [u8; 64], slot: usize, per_block: u64, v: u64) {
    let width = 512 / per_block as usize;
    if width == 64 {
        return set_node_entry(block, slot, v);
    }
    for b in 0..width {
        let bit = slot * width + b;
        if (v >> b) & 1 == 1 {
            block[bit / 8] |= 1 << (bit % 8);
        } else {
            block[bit / 8] &= !(1 << (bit % 8));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FixedLatencyMedia;

    fn mc(data_bytes: u64, arity: u64) -> SecureMc {
        let tree = TreeConfig { arity, update: TreeUpdate::Lazy, ..TreeConfig::default() };
        let media = Box::new(FixedLatencyMedia::new(100, 300, 1 << 40));
        SecureMc::new(&SecurityConfig::default(), &tree, &MetadataCachesConfig::default(), data_bytes, media, 1).unwrap()
    }

    #[test]
    fn every_stored_tree_node_key_maps_back_to_its_level_and_index() {
        // Five stored levels at arity 8 and at arity 4 (over less data); one stored level.
        for (data_bytes, arity) in [(1u64 << 30, 8), (16 << 20, 4), (64 * 4096, 8)] {
            let m = mc(data_bytes, arity);
            let t = &m.layout.tree;
            assert!(t.root_level() >= 2, "a tree with stored nodes");
            for level in 1..t.root_level() {
                let last = t.nodes[level] - 1;
                for index in [0, last / 2, last] {
                    let key = t.node_addr(level, index) >> LINE_SHIFT;
                    assert_eq!(m.tree_key_to_node(key), (level, index), "level {level}, index {index}");
                    assert_eq!(m.meta_key_to_node(MetaKind::Tree, key), (level, index));
                }
            }
        }
    }
}
