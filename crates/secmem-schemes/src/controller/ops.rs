//! [`McOps`]: the operations a design may use on the controller, and nothing else.
//!
//! Every [`Design`](crate::designs::Design) hook receives `&mut McOps`, a view of the
//! [`SecureMc`] that exposes this documented set of operations and none of the controller's
//! fields: a design cannot resize a cache, reach into the write-back buffer or charge a
//! statistic the controller does not offer it. The owner of the controller (the engine, the
//! harnesses, tests) holds the `SecureMc` itself and hands it to hooks as is: `SecureMc`
//! dereferences to `McOps`, so `design.read(&mut mc, ..)` needs no conversion.
//!
//! The operations, by group:
//!
//! | group | operations |
//! |---|---|
//! | what was configured | [`params`](McOps::params), [`layout`](McOps::layout), [`is_functional`](McOps::is_functional), [`device_capacity_bytes`](McOps::device_capacity_bytes), [`stats`](McOps::stats) (read only) |
//! | tree | [`update_path`](McOps::update_path) (the eager walk up to a chosen level: the building block of a design's own [`TreeUpdateStrategy`](crate::controller::tree_update::TreeUpdateStrategy)) |
//! | counters | [`fetch_counter_block`](McOps::fetch_counter_block) (fetch and verify up the tree), [`counter_block`](McOps::counter_block) / [`set_counter_block`](McOps::set_counter_block) (the counter view), [`counter_payload`](McOps::counter_payload) / [`set_counter_payload`](McOps::set_counter_payload) / [`store_counter_payload`](McOps::store_counter_payload) (the block's bytes, for designs with a format of their own), [`counter_block_updated`](McOps::counter_block_updated) (the tree update after a counter change without a data write) |
//! | data path | [`read_line`](McOps::read_line) / [`write_line`](McOps::write_line) (the baseline's), [`read_line_under`](McOps::read_line_under) / [`write_line_under`](McOps::write_line_under) (the same path under a counter the design chose) |
//! | device | [`device_read`](McOps::device_read) / [`device_write`](McOps::device_write) (line traffic of the memory, the design's own regions included); [`port`](McOps::port) / [`port_access`](McOps::port_access) (requests of any size to a further port: a storage device beside the memory) |
//! | metadata caches | [`flush_metadata`](McOps::flush_metadata), [`drop_metadata_caches`](McOps::drop_metadata_caches), [`dirty_metadata`](McOps::dirty_metadata), [`restore_metadata`](McOps::restore_metadata), [`kind_of_key`](McOps::kind_of_key), [`write_back_evictions`](McOps::write_back_evictions), [`counter_cache_shape`](McOps::counter_cache_shape) / [`carve_counter_cache`](McOps::carve_counter_cache) |
//! | statistics | [`count_counter_overflow`](McOps::count_counter_overflow), [`count_reencrypted_line`](McOps::count_reencrypted_line) (everything else is counted by the operation that does the work) |
//! | crash and recovery | [`crash`](McOps::crash), [`rebuild_and_verify`](McOps::rebuild_and_verify), [`load_counter_view_from_image`](McOps::load_counter_view_from_image), [`load_counter_view_with`](McOps::load_counter_view_with) |
//! | byte work | [`functional`](McOps::functional) / [`functional_mut`](McOps::functional_mut): keys, pads, MACs and the NVM image of functional mode (`None` in counting mode) |
//!
//! Latency is not among them: the engine records each core-level read's and write's latency
//! once, around the design's hook, whatever the design did inside it.

use crate::controller::functional::{Functional, IntegrityError};
use crate::controller::recovery::{RecoveryError, RecoveryReport};
use crate::controller::{McParams, McStats, MetaBlock, MetaKind, PortId, SecureMc};
use ref_cast::RefCast;
use secmem_core::cache::{Replacement, SetAssocCache};
use secmem_core::counters::CounterBlock;
use secmem_core::addr::LINE_SHIFT;
use secmem_core::tree::SecureLayout;
use secmem_core::Cycle;
use secmem_media::{MemRequest, TrafficClass};

/// The design-facing view of a [`SecureMc`] (see the module documentation).
#[derive(RefCast)]
#[repr(transparent)]
pub struct McOps(SecureMc);

impl std::ops::Deref for SecureMc {
    type Target = McOps;
    #[inline(always)]
    fn deref(&self) -> &McOps { McOps::ref_cast(self) }
}

impl std::ops::DerefMut for SecureMc {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut McOps { McOps::ref_cast_mut(self) }
}

impl McOps {
    /// The whole controller, for the controller's own parts (recovery, the drain machinery)
    /// that designs call through this view.
    #[inline(always)]
    pub(in crate::controller) fn mc(&self) -> &SecureMc { &self.0 }
    #[inline(always)]
    pub(in crate::controller) fn mc_mut(&mut self) -> &mut SecureMc { &mut self.0 }

    // ------------------------------------------------------------ what was configured

    /// The controller's resolved parameters: security on or off, minor-counter width, crypto
    /// and metadata-cache latencies, tree update, strict persistence.
    #[inline(always)]
    pub fn params(&self) -> &McParams { &self.0.p }

    /// Where data, counters, MACs and the tree live on the device.
    #[inline(always)]
    pub fn layout(&self) -> &SecureLayout { &self.0.layout }

    /// Whether bytes are real (functional mode) or only counted.
    #[inline(always)]
    pub fn is_functional(&self) -> bool { self.0.func.is_some() }

    /// The device's capacity, design regions included.
    pub fn device_capacity_bytes(&self) -> u64 { secmem_media::MemoryPort::capacity_bytes(&self.0.media) }

    /// The controller's statistics so far (read only; designs keep their own in
    /// [`Design::extra_stats`](crate::designs::Design::extra_stats)).
    pub fn stats(&self) -> &McStats { &self.0.stats }

    // ------------------------------------------------------------ counters

    /// Makes `page`'s counter block available on chip: a hit, or a fetch verified up the
    /// tree to the first cached ancestor. `dirty` marks it about to change. Returns when it
    /// is usable.
    #[inline]
    pub fn fetch_counter_block(&mut self, page: u64, dirty: bool, now: Cycle) -> Result<Cycle, IntegrityError> {
        self.0.ensure_block(0, page, dirty, now)
    }

    /// `page`'s counters as the controller's counter view holds them.
    #[inline]
    pub fn counter_block(&self, page: u64) -> CounterBlock { self.0.counters.block(page) }

    /// Replaces `page`'s counters in the counter view (the block's bytes follow with
    /// [`store_counter_payload`](Self::store_counter_payload) or
    /// [`set_counter_payload`](Self::set_counter_payload)).
    #[inline]
    pub fn set_counter_block(&mut self, page: u64, block: CounterBlock) { self.0.counters.set_block(page, block) }

    /// The cached bytes of `page`'s counter block (functional mode; fetched first).
    pub fn counter_payload(&self, page: u64) -> Option<[u8; 64]> { self.0.counter_payload(page) }

    /// Replaces the cached bytes of `page`'s counter block (functional mode; no-op when
    /// counting). The block must be cached (fetched dirty first).
    pub fn set_counter_payload(&mut self, page: u64, bytes: [u8; 64]) { self.0.set_counter_payload(page, bytes) }

    /// Re-encodes `page`'s cached counter block from the counter view, in the baseline's
    /// format (functional mode).
    pub fn store_counter_payload(&mut self, page: u64) { self.0.store_counter_payload(page) }

    /// After a design changed `page`'s counter block without writing data: the tree update
    /// strategy brings the tree up to date, and strict persistence writes the block through.
    pub fn counter_block_updated(&mut self, page: u64, ctr_at: Cycle) -> Result<Cycle, IntegrityError> {
        self.0.counter_block_updated(page, ctr_at)
    }

    /// Recomputes the hashes from `page`'s counter block up to the node at `top_level` (the
    /// root register at the root level or above), fetching and verifying each node on the way
    /// and, with strict persistence, writing each through: eager update's walk, stopped where
    /// a [`TreeUpdateStrategy`](crate::controller::tree_update::TreeUpdateStrategy) says.
    /// Returns when the top is updated.
    pub fn update_path(&mut self, page: u64, ctr_at: Cycle, top_level: usize) -> Result<Cycle, IntegrityError> {
        self.0.path_update(page, ctr_at, top_level)
    }

    /// [`update_path`](Self::update_path) from tree block (`level`, `index`) instead of a
    /// counter block (a persistent sub-tree root whose edge to its ancestor is restored).
    /// Counting mode only for a block not in the tree cache.
    pub fn update_path_from(&mut self, level: usize, index: u64, at: Cycle, top_level: usize) -> Result<Cycle, IntegrityError> {
        self.0.path_update_from(level, index, at, top_level)
    }

    /// Makes tree block (`level`, `index`) available on chip (a hit, or a fetch verified up
    /// to the first cached or trusted ancestor); returns when it is usable.
    pub fn fetch_tree_block(&mut self, level: usize, index: u64, dirty: bool, now: Cycle) -> Result<Cycle, IntegrityError> {
        self.0.ensure_block(level, index, dirty, now)
    }

    /// One tree hash on the crypto engine, its input ready at `at` (counted as a tree
    /// update); returns when it is done.
    pub fn hash_tree_node(&mut self, at: Cycle) -> Cycle {
        self.0.stats.mac_ops.tree_update += 1;
        self.0.engine.run(at, 1, self.0.p.hash)
    }

    /// Encryption and MAC work a design spends outside the data path (`aes` pad generations
    /// and `mac` MACs, counted as the design's), on the crypto engine from `at`; returns when
    /// it is done. DeWrite's speculative encryption of a line that turns out a duplicate is
    /// such work.
    pub fn design_crypto(&mut self, aes: u64, mac: u64, at: Cycle) -> Cycle {
        self.0.stats.aes_ops.design += aes;
        self.0.stats.mac_ops.design += mac;
        let t = self.0.engine.run_many(at, aes, 1, self.0.p.aes);
        self.0.engine.run_many(t, mac, 1, self.0.p.mac)
    }

    /// The latencies of one AES pad generation and one data MAC, CPU cycles.
    pub fn crypto_latencies(&self) -> (Cycle, Cycle) { (self.0.p.aes, self.0.p.mac) }

    /// Counts an update of the root register that [`update_path`](Self::update_path) did not
    /// make (a strategy's own root store).
    pub fn count_root_update(&mut self) { self.0.stats.root_updates += 1 }

    /// Functional mode: the entry a parent holds for cached block (`level`, `index`): its
    /// keyed hash, or 0 at its boot content. None when counting.
    pub fn block_entry(&self, level: usize, index: u64) -> Option<u64> {
        let f = self.0.func.as_ref()?;
        Some(f.child_entry(level, index, &self.block_bytes(level, index)?))
    }

    /// Functional mode: the entry a parent would hold for block (`level`, `index`) with
    /// `bytes` (recovery's rebuilt blocks, a trusted node's bytes). None when counting.
    pub fn entry_of(&self, level: usize, index: u64, bytes: &[u8; 64]) -> Option<u64> { self.0.func.as_ref().map(|f| f.child_entry(level, index, bytes)) }

    /// Functional mode: the bytes of cached block (`level`, `index`) (a counter block at level
    /// 0). None when counting or not cached.
    pub fn block_bytes(&self, level: usize, index: u64) -> Option<[u8; 64]> {
        // Counting mode keeps no bytes: no cache lookup on the update path for nothing.
        self.0.func.as_ref()?;
        let kind = if level == 0 { MetaKind::Counter } else { MetaKind::Tree };
        self.0.payload(kind, self.0.block_addr(level, index) >> LINE_SHIFT)
    }

    /// Functional mode: tree block (`level`, `index`) leaves the strategy's trusted store
    /// with `bytes` (a persistent root merged back into the tree): it is written to NVM, as
    /// strict persistence writes a path's nodes, and cached clean. Returns when the write is
    /// persistent. Counting mode: the write alone.
    pub fn persist_tree_block(&mut self, level: usize, index: u64, bytes: Option<[u8; 64]>, at: Cycle) -> Cycle {
        let addr = self.0.block_addr(level, index);
        let done = self.0.device_write(addr, TrafficClass::Tree, at);
        if let (Some(f), Some(b)) = (self.0.func.as_mut(), bytes) {
            f.persist(addr >> LINE_SHIFT, b);
        }
        // Cached in both modes, so that both fill (and evict) alike.
        self.0.restore_metadata(MetaBlock { kind: MetaKind::Tree, key: addr >> LINE_SHIFT, payload: bytes });
        if let Some(slot) = self.0.tree_cache.probe(addr >> LINE_SHIFT) {
            self.0.tree_cache.set_dirty(slot, false);
        }
        done
    }

    /// Keeps tree node (`level`, `index`, below the root) on chip, trusted, with `bytes`
    /// (zeros when counting): a persistent sub-tree root. Fetches below it verify against it.
    pub fn trust_node(&mut self, level: usize, index: u64, bytes: [u8; 64]) { self.0.trusted.insert((level, index), bytes); }

    /// Node (`level`, `index`) is no longer trusted; returns its bytes.
    pub fn untrust_node(&mut self, level: usize, index: u64) -> Option<[u8; 64]> { self.0.trusted.remove(&(level, index)) }

    /// The bytes of trusted node (`level`, `index`), if it is one.
    pub fn trusted_bytes(&self, level: usize, index: u64) -> Option<[u8; 64]> { self.0.trusted.get(&(level, index)).copied() }

    /// Sets entry `slot` of trusted node (`level`, `index`) (functional mode; the node must be
    /// trusted).
    pub fn set_trusted_entry(&mut self, level: usize, index: u64, slot: usize, entry: u64) {
        if let Some(b) = self.0.trusted.get_mut(&(level, index)) {
            secmem_crypto::set_node_entry(b, slot, entry);
        }
    }

    /// Functional mode: the root register's bytes. None when counting.
    pub fn root_register(&self) -> Option<[u8; 64]> { self.0.func.as_ref().map(|f| f.root) }

    /// Recovery by the tree update strategy in force (its own, or the baseline's
    /// [`rebuild_and_verify`](Self::rebuild_and_verify)).
    pub fn recover_tree_update(&mut self, now: Cycle) -> Result<RecoveryReport, RecoveryError> { self.0.recover_tree_update(now) }

    /// Rebuilds the counter view and every tree level below the root from the counter blocks
    /// persisted in NVM, a block for which `cut(level, index)` holds entering its parent as 0
    /// (a persistent sub-tree root's cut edge), for a strategy's own recovery to check against
    /// the nodes it trusts. Functional mode: the rebuilt blocks by level (`[0]` the counter
    /// blocks), sparse (a block absent is at its boot content); counting mode: the work alone.
    pub fn rebuild_levels(&mut self, now: Cycle, cut: &dyn Fn(usize, u64) -> bool) -> (crate::controller::recovery::RebuiltLevels, RecoveryReport) {
        crate::controller::recovery::rebuild_levels(&mut self.0, now, cut)
    }

    /// A persist barrier for the tree update strategy in force (a design's epoch end):
    /// returns when the barrier may retire.
    pub fn tree_update_fence(&mut self, now: Cycle) -> Result<Cycle, IntegrityError> { self.0.tree_update_fence(now) }

    // ------------------------------------------------------------ data path

    /// The baseline's read of data `line`: counter, MAC, data, decrypt and verify. Returns
    /// when the plaintext is usable, and the plaintext in functional mode.
    #[inline]
    pub fn read_line(&mut self, line: u64, now: Cycle) -> Result<(Cycle, Option<[u8; 64]>), IntegrityError> {
        self.0.read_line(line, now)
    }

    /// The baseline's write of data `line`: counter bump (re-encrypting the page on a minor
    /// overflow), encrypt, MAC, write, tree update. Returns when the write is persistent.
    #[inline]
    pub fn write_line(&mut self, line: u64, data: Option<&[u8; 64]>, now: Cycle) -> Result<Cycle, IntegrityError> {
        self.0.write_line(line, data, now)
    }

    /// The baseline's read path for `line` under counter (`major`, `minor`) the design chose,
    /// its counter block usable at `ctr_at`: same timing and counts as `read_line` (which
    /// fetches the counter itself). `class` is `Data`, or `Reencrypt` for a read of a line a
    /// minor overflow re-encrypts, counted as the baseline's re-encryption is (a
    /// re-encryption read and AES op, not a data read, decryption and MAC check).
    #[inline]
    pub fn read_line_under(&mut self, line: u64, major: u64, minor: u8, class: TrafficClass, ctr_at: Cycle, now: Cycle) -> Result<(Cycle, Option<[u8; 64]>), IntegrityError> {
        let mc = &mut self.0;
        let reencrypt = class == TrafficClass::Reencrypt;
        if !reencrypt {
            mc.stats.data_reads += 1;
        }
        let data_at = mc.device_read(line << LINE_SHIFT, class, now);
        mc.read_tail(line, Some((major, minor)), reencrypt, data_at, ctr_at, now)
    }

    /// The baseline's write path for `line` under counter (`major`, `minor`) the design chose
    /// and stored, its counter block usable at `ctr_at`: encrypt (functional mode), MAC,
    /// write as traffic `class` (`Data`, `Reencrypt`, `Design`), tree update, and with strict
    /// persistence the metadata written through. Returns when the write is persistent.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn write_line_under(
        &mut self,
        line: u64,
        plain: Option<&[u8; 64]>,
        major: u64,
        minor: u8,
        class: TrafficClass,
        ctr_at: Cycle,
        now: Cycle,
    ) -> Result<Cycle, IntegrityError> {
        self.0.write_tail(line, plain, Some((major, minor)), class, ctr_at, now)
    }

    // ------------------------------------------------------------ device

    /// A device read at `addr` issued at `at`; returns when the data is in.
    #[inline]
    pub fn device_read(&mut self, addr: u64, class: TrafficClass, at: Cycle) -> Cycle { self.0.device_read(addr, class, at) }

    /// A device write at `addr` issued at `at`; returns when it is persistent.
    #[inline]
    pub fn device_write(&mut self, addr: u64, class: TrafficClass, at: Cycle) -> Cycle { self.0.device_write(addr, class, at) }

    /// The further port attached under `name` (a storage device, a design's own device).
    pub fn port(&self, name: &str) -> Option<PortId> { self.0.ports.iter().position(|(n, _)| n == name).map(PortId) }

    /// A request of any size to a further port; returns when it completes (reads) or is
    /// persistent (writes), as [`MemoryPort::access`](secmem_media::MemoryPort::access) does.
    pub fn port_access(&mut self, port: PortId, req: MemRequest) -> Cycle { self.0.ports[port.0].1.access(req) }

    /// The capacity of a further port.
    pub fn port_capacity_bytes(&self, port: PortId) -> u64 { self.0.ports[port.0].1.capacity_bytes() }

    // ------------------------------------------------------------ metadata caches

    /// Writes every dirty metadata block home (the tree made consistent with the root).
    pub fn flush_metadata(&mut self, now: Cycle) -> Result<Cycle, IntegrityError> { self.0.flush_metadata(now) }

    /// Forgets every cached metadata block without writing it.
    pub fn drop_metadata_caches(&mut self) { self.0.drop_metadata_caches() }

    /// Every dirty metadata block on chip, with its bytes in functional mode.
    pub fn dirty_metadata(&self) -> Vec<MetaBlock> { self.0.dirty_metadata() }

    /// Puts a saved, verified metadata block back into its cache.
    pub fn restore_metadata(&mut self, b: MetaBlock) { self.0.restore_metadata(b) }

    /// Which metadata region device line `key` is in.
    pub fn kind_of_key(&self, key: u64) -> Option<MetaKind> { self.0.kind_of_key(key) }

    /// Writes back the dirty metadata the latest fetches evicted (every data-path operation
    /// does this before it returns; a design that only fetches calls it itself).
    pub fn write_back_evictions(&mut self, now: Cycle) -> Result<(), IntegrityError> { self.0.process_evictions(now) }

    /// The counter cache's (lines, ways).
    pub fn counter_cache_shape(&self) -> (usize, usize) { (self.0.counter_cache.capacity_lines(), self.0.counter_cache.ways()) }

    /// Rebuilds the (still empty) counter cache with `sets` sets of the same ways: a design
    /// that carves a cache of its own out of the counter cache's area (Lelantus-CoW).
    pub fn carve_counter_cache(&mut self, sets: u64) {
        let mc = &mut self.0;
        assert_eq!(mc.counter_cache.valid_lines().count(), 0, "the counter cache is carved before first use");
        let mut cc = SetAssocCache::with_geometry(sets, mc.counter_cache.ways(), Replacement::Lru);
        if mc.func.is_some() {
            cc = cc.with_data();
        }
        mc.counter_cache = cc;
    }

    // ------------------------------------------------------------ statistics

    /// A minor counter overflowed (the design re-encrypts the page itself).
    pub fn count_counter_overflow(&mut self) { self.0.stats.counter_overflows += 1 }

    /// A line was re-encrypted by the design after an overflow.
    pub fn count_reencrypted_line(&mut self) { self.0.stats.reencrypted_lines += 1 }

    // ------------------------------------------------------------ crash and recovery

    /// Power loss: the controller's volatile state is lost (see [`SecureMc::crash`]).
    pub fn crash(&mut self, keep_metadata_caches: bool) { self.0.crash(keep_metadata_caches) }

    /// The baseline's recovery: rebuild the tree from the persisted counters and check it
    /// against the root register.
    pub fn rebuild_and_verify(&mut self, now: Cycle) -> Result<RecoveryReport, RecoveryError> {
        crate::controller::recovery::rebuild_and_verify(&mut self.0, now)
    }

    /// Rebuilds the counter view from the persisted counter blocks (baseline format).
    pub fn load_counter_view_from_image(&mut self) { self.0.load_counter_view_from_image() }

    /// As [`load_counter_view_from_image`](Self::load_counter_view_from_image), decoding each
    /// persisted block with the design's `decode(page, bytes)`.
    pub fn load_counter_view_with(&mut self, decode: impl FnMut(u64, &[u8; 64]) -> CounterBlock) { self.0.load_counter_view_with(decode) }

    // ------------------------------------------------------------ byte work

    /// Functional mode's keys, pads, MACs and NVM image (None when counting).
    pub fn functional(&self) -> Option<&Functional> { self.0.func.as_deref() }

    /// As [`functional`](Self::functional), to persist bytes or draw pads.
    pub fn functional_mut(&mut self) -> Option<&mut Functional> { self.0.func.as_deref_mut() }
}
