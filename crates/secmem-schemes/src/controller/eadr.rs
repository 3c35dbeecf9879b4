//! eADR draining: what a secure memory must do when power fails and the whole cache hierarchy
//! is in the persistence domain (Horus, MICRO'22, sections II-D, III and IV-B).
//!
//! On a power-loss signal the cache controller walks the hierarchy and hands every dirty line
//! to the memory controller; when the last one is safe, the metadata caches must be made
//! recoverable too. This file holds what every drain scheme shares — the drain clock, the
//! lines to drain, the counted work — and the baselines' drains:
//!
//! * **non-secure**: lines written in place, nothing else;
//! * **Base-EU** (eager tree update at run time): lines through the run-time secure write path,
//!   then the dirty metadata blocks flushed in place (the root is already up to date);
//! * **Base-LU** (lazy update): lines through the run-time secure write path, then the dirty
//!   metadata blocks written to a reserved region, protected by a small Merkle tree computed
//!   over them whose root goes to an on-chip register (Anubis-style; [`crate::controller::cache_tree`]).
//!
//! Horus' vault drain is in [`crate::designs::horus`].
//!
//! # Drain timing
//! Lines leave the caches one after another: the cache controller needs the hit latency of
//! the level that holds a line to read it out, and at most `max_inflight` flushes can be in
//! the memory controller at once (its write-back buffer); a flush is done when its last write
//! is persistent. The drain ends when every write has reached the array (the DIMM must stay
//! powered until then), i.e. after the device's write queue has drained.

use crate::controller::cache_tree;
use crate::controller::ops::McOps;
use crate::controller::{MetaBlock, SecureMc};
use crate::controller::functional::IntegrityError;
use secmem_core::addr::LINE_SHIFT;
use secmem_core::Cycle;
use secmem_crypto::{node_entry, set_node_entry};
use secmem_media::{MediaStats, MemoryPort, TrafficClass};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One dirty line handed to the drain: its line number, its content (functional mode) and
/// the cycles the cache controller needs to read it out of the level that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DrainLine {
    pub line: u64,
    pub data: Option<[u8; 64]>,
    pub read_cycles: u64,
}

/// Paces flushes: one line out of the caches at a time, at most `max_inflight` in the memory
/// controller.
#[derive(Debug)]
pub struct DrainClock {
    max_inflight: usize,
    inflight: BinaryHeap<Reverse<Cycle>>,
    next_issue: Cycle,
    /// Latest completion seen.
    pub last_done: Cycle,
}

impl DrainClock {
    pub fn new(max_inflight: u32, start: Cycle) -> DrainClock {
        DrainClock { max_inflight: max_inflight.max(1) as usize, inflight: BinaryHeap::new(), next_issue: start, last_done: start }
    }

    /// The cycle the next flush enters the memory controller, after `read_cycles` to read it
    /// out of its cache and a free in-flight slot.
    pub fn issue(&mut self, read_cycles: u64) -> Cycle {
        let mut t = self.next_issue + Cycle(read_cycles);
        if self.inflight.len() >= self.max_inflight {
            let Reverse(oldest) = self.inflight.pop().expect("non-empty");
            t = t.max(oldest);
        }
        self.next_issue = t;
        t
    }

    /// The flush issued last is persistent at `done`.
    pub fn complete(&mut self, done: Cycle) {
        self.inflight.push(Reverse(done));
        self.last_done = self.last_done.max(done);
    }

    /// The cycle the next flush could issue (no read cost).
    pub fn now(&self) -> Cycle { self.next_issue }
}

/// Memory writes of a drain, split as Horus Fig. 12 splits them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DrainWrites {
    /// Data lines written in place (baselines, non-secure).
    pub data: u64,
    pub counter: u64,
    pub mac: u64,
    pub tree: u64,
    pub reencrypt: u64,
    /// Encrypted lines written to the Cache Hierarchy Vault (Horus).
    pub vault_data: u64,
    /// Address blocks (8 addresses each) of the vault or of the metadata save region.
    pub vault_address: u64,
    /// MAC blocks of the vault (SLM: 8 MACs each; DLM: 8 second-level MACs each).
    pub vault_mac: u64,
    /// Metadata-cache blocks saved after the lines: Base-LU's reserved region, Horus' vault
    /// metadata area (Base-EU's in-place flush is counted as counter/mac/tree writes).
    pub metadata_save: u64,
}

impl DrainWrites {
    pub fn total(&self) -> u64 {
        self.data + self.counter + self.mac + self.tree + self.reencrypt + self.vault_data + self.vault_address + self.vault_mac + self.metadata_save
    }
}

/// Memory reads of a drain (metadata fetched to secure lines in place).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DrainReads {
    pub data: u64,
    pub counter: u64,
    pub mac: u64,
    pub tree: u64,
    pub reencrypt: u64,
}

impl DrainReads {
    pub fn total(&self) -> u64 { self.data + self.counter + self.mac + self.tree + self.reencrypt }
}

/// MAC and hash computations of a drain, split as Horus Fig. 13 splits them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DrainMacs {
    /// MACs of lines written in place (run-time write path).
    pub data: u64,
    /// Tree hashes updating parents (lazy on eviction, eager on every write).
    pub tree_update: u64,
    /// Hashes verifying fetched counters and tree nodes.
    pub verify: u64,
    /// Hashes of the small tree protecting the saved metadata cache (Base-LU, Horus).
    pub metadata_protect: u64,
    /// Per-line vault MACs over (ciphertext, address, drain counter).
    pub vault_data: u64,
    /// Horus-DLM's second-level MACs (one per 8 vault MACs).
    pub vault_level2: u64,
    /// MACs of lines re-encrypted after a minor overflow during the drain.
    pub reencrypt: u64,
}

impl DrainMacs {
    pub fn total(&self) -> u64 {
        self.data + self.tree_update + self.verify + self.metadata_protect + self.vault_data + self.vault_level2 + self.reencrypt
    }
}

/// Everything counted while draining.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DrainStats {
    /// Dirty lines drained from the cache hierarchy.
    pub flushed_lines: u64,
    /// Dirty metadata-cache blocks made durable after them.
    pub metadata_blocks: u64,
    /// From the power-loss signal to the last write reaching the array, cycles.
    pub drain_cycles: u64,
    pub reads: DrainReads,
    pub writes: DrainWrites,
    pub mac_ops: DrainMacs,
    pub aes_ops: u64,
}

impl DrainStats {
    /// Fills reads/writes/MAC/AES counts of the run-time paths from controller and device
    /// snapshots taken before and after; design-specific counts are added by the design.
    pub fn absorb_controller(&mut self, before: &(crate::McStats, MediaStats), after: &(crate::McStats, MediaStats)) {
        let mc = after.0.since(&before.0);
        let media = after.1.since(&before.1);
        let r = |c: TrafficClass| media.reads_by_class[c as usize];
        let w = |c: TrafficClass| media.writes_by_class[c as usize];
        self.reads = DrainReads {
            data: r(TrafficClass::Data),
            counter: r(TrafficClass::Counter),
            mac: r(TrafficClass::Mac),
            tree: r(TrafficClass::Tree),
            reencrypt: r(TrafficClass::Reencrypt),
        };
        self.writes.data = w(TrafficClass::Data);
        self.writes.counter = w(TrafficClass::Counter);
        self.writes.mac = w(TrafficClass::Mac);
        self.writes.tree = w(TrafficClass::Tree);
        self.writes.reencrypt = w(TrafficClass::Reencrypt);
        self.mac_ops.data = mc.mac_ops.data_write;
        self.mac_ops.tree_update = mc.mac_ops.tree_update;
        self.mac_ops.verify = mc.mac_ops.tree_verify + mc.mac_ops.data_verify;
        self.mac_ops.reencrypt = mc.mac_ops.reencrypt;
        self.aes_ops += mc.aes_ops.data_encrypt + mc.aes_ops.data_decrypt + mc.aes_ops.reencrypt;
    }
}

/// What recovery after a drain did, and the lines it hands back to the cache hierarchy.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DrainRecovery {
    /// Blocks read back from the vault or the metadata save region.
    pub blocks_read: u64,
    /// MACs and hashes recomputed to verify them.
    pub hashes: u64,
    /// Lines decrypted.
    pub aes_ops: u64,
    /// Drained lines restored (Horus: back to the LLC as dirty, or written home).
    pub lines_restored: u64,
    /// Metadata blocks restored into the metadata caches.
    pub metadata_restored: u64,
    /// Simulated recovery time, cycles (reads overlapped by the device's banks).
    pub cycles: u64,
    /// The same work done one block at a time: each read's full latency, then its MAC
    /// check and decryption (the estimate Horus section V-F evidently uses).
    pub serial_cycles: u64,
    /// Restored lines and their plaintext (functional mode), in restore order.
    #[serde(skip)]
    pub lines: Vec<(u64, Option<[u8; 64]>)>,
}

/// A verification failure while recovering drained state: which check, where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainRecoveryError {
    /// `vault-data-mac`, `vault-level2-mac`, `metadata-tree`, or the class of a run-time
    /// integrity failure.
    pub class: String,
    /// Where, in words (vault entry, drain counter, address).
    pub location: String,
}

impl std::fmt::Display for DrainRecoveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "recovery failed closed ({}): {}", self.class, self.location)
    }
}
impl std::error::Error for DrainRecoveryError {}

impl From<IntegrityError> for DrainRecoveryError {
    fn from(e: IntegrityError) -> Self { DrainRecoveryError { class: e.class(), location: e.to_string() } }
}

impl From<crate::controller::recovery::RecoveryReport> for DrainRecovery {
    /// A tree rebuild's work as drain-recovery work (no lines to hand back; its reads are
    /// already overlapped, so the serial estimate is the same).
    fn from(r: crate::controller::recovery::RecoveryReport) -> Self {
        DrainRecovery { blocks_read: r.counter_blocks_read, hashes: r.hashes, cycles: r.cycles, serial_cycles: r.cycles, ..Default::default() }
    }
}

impl From<crate::controller::recovery::RecoveryError> for DrainRecoveryError {
    fn from(e: crate::controller::recovery::RecoveryError) -> Self { DrainRecoveryError { class: "tree-rebuild".into(), location: e.to_string() } }
}

/// First byte of the reserved region above secure memory where drains write (the vault or
/// the metadata save region): the end of the tree region, rounded up to a 4 KB page. The
/// device layout places a design's first region here (`designs::DeviceLayout::compose`).
pub fn reserved_base(mc: &McOps) -> u64 { region_base(mc.layout()) }

/// [`reserved_base`] of a layout.
pub fn region_base(layout: &secmem_core::tree::SecureLayout) -> u64 { layout.end.div_ceil(4096) * 4096 }

/// A design's data write path: `(mc, line, plaintext, now)` -> when the write is persistent.
pub type WriteLine<'a> = dyn FnMut(&mut SecureMc, u64, Option<&[u8; 64]>, Cycle) -> Result<Cycle, IntegrityError> + 'a;

/// Writes every line through the run-time write path of `write` (in place), paced by `clock`.
pub fn drain_in_place(mc: &mut McOps, lines: &[DrainLine], clock: &mut DrainClock, write: &mut WriteLine<'_>) -> Result<(), IntegrityError> {
    let mc = mc.mc_mut();
    for l in lines {
        let t = clock.issue(l.read_cycles);
        let done = write(mc, l.line, l.data.as_ref(), t)?;
        clock.complete(done);
    }
    Ok(())
}

/// On-chip persistent registers of Base-LU's metadata save: the small tree's root over the
/// saved blocks and how many there are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetadataSaveRegisters {
    pub root: u64,
    pub blocks: u64,
}

/// Base-LU, after the lines: writes every dirty metadata block to the reserved region
/// (`base`: blocks, then their addresses 8 per block), computing the small tree over them.
/// Returns the registers to keep on chip.
pub fn save_metadata(mc: &mut McOps, base: u64, clock: &mut DrainClock, stats: &mut DrainStats) -> Result<MetadataSaveRegisters, IntegrityError> {
    let mc = mc.mc_mut();
    let blocks = mc.dirty_metadata();
    let n = blocks.len() as u64;
    check_room(mc, base, shadow_bytes(n));
    let addr_base = base + n * 64;
    let hash = mc.p.hash;
    let mut addr_block = [0u8; 64];
    for (i, b) in blocks.iter().enumerate() {
        let t = clock.issue(0);
        let done = mc.device_write(base + i as u64 * 64, TrafficClass::Design, t);
        if let (Some(f), Some(p)) = (mc.func.as_mut(), b.payload) {
            f.persist((base >> LINE_SHIFT) + i as u64, p);
        }
        set_node_entry(&mut addr_block, i % 8, b.key);
        let mut last = done;
        if i % 8 == 7 || i + 1 == blocks.len() {
            let a = addr_base + (i as u64 / 8) * 64;
            last = last.max(mc.device_write(a, TrafficClass::Design, t));
            if let Some(f) = mc.func.as_mut() {
                f.persist(a >> LINE_SHIFT, addr_block);
            }
            addr_block = [0; 64];
            stats.writes.vault_address += 1;
        }
        stats.writes.metadata_save += 1;
        // The leaf hash runs in the hash engine's pipeline beside the write.
        clock.complete(last.max(t + hash));
    }
    let (root, hashes) = cache_tree::protect(mc, &blocks);
    stats.mac_ops.metadata_protect += hashes;
    stats.metadata_blocks = n;
    // The internal nodes hash after the leaves, one level after another.
    clock.complete(clock.now() + Cycle(cache_tree::height(n) as u64 * hash.0));
    Ok(MetadataSaveRegisters { root, blocks: n })
}

/// Bytes Base-LU's save region needs for `n` metadata blocks (blocks + address blocks).
pub fn shadow_bytes(n: u64) -> u64 { n * 64 + n.div_ceil(8) * 64 }

pub(crate) fn check_room(mc: &McOps, base: u64, bytes: u64) {
    let mc = mc.mc();
    // The device is sized for the reserved region by the engine; a mismatch is a bug.
    assert!(
        base + bytes <= mc.media.capacity_bytes(),
        "reserved region [{base:#x}, {:#x}) beyond the device ({:#x} bytes)",
        base + bytes,
        mc.media.capacity_bytes()
    );
}

/// Reads Base-LU's saved metadata back, verifies it against the on-chip root and restores it
/// into the metadata caches.
pub fn restore_metadata(mc: &mut McOps, base: u64, regs: MetadataSaveRegisters, now: Cycle) -> Result<DrainRecovery, DrainRecoveryError> {
    let mc = mc.mc_mut();
    let n = regs.blocks;
    let mut rec = DrainRecovery::default();
    let addr_base = base + n * 64;
    let mut last = now;
    let mut unloaded_read = u64::MAX;
    let read_lat = |mc: &mut SecureMc, a: u64| mc.device_read(a, TrafficClass::Design, now);
    let mut blocks = Vec::with_capacity(n as usize);
    let mut addr_block = [0u8; 64];
    for i in 0..n {
        if i % 8 == 0 {
            let a = addr_base + (i / 8) * 64;
            let t = read_lat(mc, a);
            unloaded_read = unloaded_read.min((t - now).0);
            last = last.max(t);
            rec.blocks_read += 1;
            if let Some(f) = mc.func.as_ref() {
                addr_block = f.image.get(a >> LINE_SHIFT);
            }
        }
        let a = base + i * 64;
        let t = read_lat(mc, a);
        unloaded_read = unloaded_read.min((t - now).0);
        last = last.max(t);
        rec.blocks_read += 1;
        let key = node_entry(&addr_block, (i % 8) as usize);
        let payload = mc.func.as_ref().map(|f| f.image.get(a >> LINE_SHIFT));
        blocks.push((i, key, payload));
    }
    let metas: Vec<MetaBlock> = blocks
        .iter()
        .map(|&(_, key, payload)| MetaBlock { kind: mc.kind_of_key(key).unwrap_or(crate::MetaKind::Counter), key, payload })
        .collect();
    if mc.is_functional() {
        // Every address must name a metadata block, and the tree over (address, bytes)
        // must reproduce the root register.
        if let Some((i, key, _)) = blocks.iter().find(|(_, k, _)| mc.kind_of_key(*k).is_none()) {
            return Err(DrainRecoveryError { class: "metadata-tree".into(), location: format!("saved metadata block {i} claims address {:#x}, outside the metadata regions", key << LINE_SHIFT) });
        }
        let (root, hashes) = cache_tree::protect(mc, &metas);
        rec.hashes += hashes;
        if root != regs.root {
            return Err(DrainRecoveryError {
                class: "metadata-tree".into(),
                location: format!("the {n} saved metadata blocks at {base:#x} do not match the on-chip metadata-tree root"),
            });
        }
    } else {
        rec.hashes += cache_tree::hash_count(n);
    }
    // Counting mode has no bytes, hence no addresses to restore to: it counts the work only.
    if mc.is_functional() {
        mc.load_counter_view_from_image();
        for m in metas {
            mc.restore_metadata(m);
        }
    }
    rec.metadata_restored = n;
    // Leaf hashes pipeline behind the reads; the internal levels follow one after another.
    rec.cycles = (last - now).0 + (cache_tree::height(n) as u64 + 1) * mc.p.hash.0;
    rec.serial_cycles = if n == 0 { 0 } else { rec.blocks_read * unloaded_read + (n + cache_tree::height(n) as u64 + 1) * mc.p.hash.0 };
    Ok(rec)
}
