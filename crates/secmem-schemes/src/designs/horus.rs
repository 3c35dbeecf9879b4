//! Horus (MICRO'22): drain the cache hierarchy into a Cache Hierarchy Vault (CHV) on power
//! loss, instead of writing each line home through the main integrity tree.
//!
//! At run time Horus is the baseline (lazy or eager tree update). When power fails:
//! * every dirty line is encrypted with the on-chip **drain counter** (DC) as its IV — a
//!   counter that only ever grows, so no pad repeats within or across drain episodes — and
//!   written to the next data entry of the vault (section IV-C, Fig. 9);
//! * its address goes into a 64 B address register, written out every 8 entries;
//! * its MAC over (ciphertext, address, DC) goes into a 64 B MAC register: **Horus-SLM** writes
//!   that register every 8 MACs; **Horus-DLM** instead MACs the 8 MACs into one second-level
//!   MAC held in a second register, written every 64 entries (Fig. 10);
//! * DC and the ephemeral drain counter eDC (entries drained this episode) are persistent
//!   on-chip registers, so entry k of the vault was sealed with DC - eDC + k;
//! * then the dirty metadata-cache blocks follow into the vault (encrypted the same way), and,
//!   as in the size formula of section IV-D (1.25 × cache + 1.125 × metadata cache), they
//!   carry addresses but no vault MAC: the small 8-ary tree of [`crate::controller::cache_tree`], whose root
//!   stays on chip, protects them.
//!
//! Recovery (section IV-C 3) reads the vault back in reverse, verifies and decrypts every
//! entry, restores the metadata blocks into the metadata caches and hands the lines back (to
//! the LLC as dirty, or to be written home through the main metadata), then clears eDC.
//!
//! Vault layout, from the reserved base above secure memory, sized for the whole hierarchy
//! and metadata caches: `[ data entries | address blocks | MAC blocks ]`.

use crate::controller::cache_tree;
use crate::controller::MetaBlock;
use crate::controller::ops::McOps;
use crate::designs::{implies_nothing, no_check, no_data_lines, Design, DesignContext, DesignEntry, DrainScheme, Region};
use crate::controller::eadr::{self, DrainClock, DrainLine, DrainRecovery, DrainRecoveryError, DrainStats};
use crate::controller::functional::IntegrityError;
use secmem_core::addr::LINE_SHIFT;
use secmem_core::Cycle;
use secmem_crypto::{node_entry, set_node_entry, xor_line, DOMAIN_VAULT};
use secmem_media::TrafficClass;

/// MAC domains (see `Keys::mac`) of vault MACs.
const DOMAIN_VAULT_MAC: u8 = 0x20;
const DOMAIN_VAULT_LEVEL2: u8 = 0x21;

pub static SLM_ENTRY: DesignEntry = DesignEntry {
    name: "horus-slm",
    summary: "Horus with single-level vault MACs: eADR drains into the Cache Hierarchy Vault (one MAC block per 8 lines)",
    needs_security: true,
    baseline_data_path: true,
    needs_line_contents: false,
    check: no_check,
    implies: implies_nothing,
    regions: |ctx| vault_region(ctx, MacLevels::Single),
    data_lines_reserved: no_data_lines,
    drain_schemes: &[DrainScheme {
        name: "horus-slm",
        summary: "Horus with single-level MACs: lines into the Cache Hierarchy Vault, one MAC block per 8 lines",
        secure: true,
        tree_update: None,
    }],
    tree_update: None,
    build: |ctx, _| Box::new(Horus::new(MacLevels::Single, ctx.hierarchy_lines, ctx.metadata_lines)),
    stats: &[],
};

pub static DLM_ENTRY: DesignEntry = DesignEntry {
    name: "horus-dlm",
    summary: "Horus with double-level vault MACs (one MAC block per 64 lines)",
    needs_security: true,
    baseline_data_path: true,
    needs_line_contents: false,
    check: no_check,
    implies: implies_nothing,
    regions: |ctx| vault_region(ctx, MacLevels::Double),
    data_lines_reserved: no_data_lines,
    drain_schemes: &[DrainScheme {
        name: "horus-dlm",
        summary: "Horus with double-level MACs: one MAC block per 64 lines",
        secure: true,
        tree_update: None,
    }],
    tree_update: None,
    build: |ctx, _| Box::new(Horus::new(MacLevels::Double, ctx.hierarchy_lines, ctx.metadata_lines)),
    stats: &[],
};

/// The vault, sized for every hierarchy line and metadata-cache block.
fn vault_region(ctx: &DesignContext, levels: MacLevels) -> Vec<Region> {
    vec![Region { name: "vault", size_bytes: ChvLayout::new(0, ctx.hierarchy_lines, ctx.metadata_lines, levels).end }]
}

/// How vault MACs are kept.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MacLevels {
    /// Horus-SLM: one stored MAC per drained line, 8 per MAC block.
    Single,
    /// Horus-DLM: one stored second-level MAC per 8 lines, 8 per MAC block (one per 64 lines).
    Double,
}

/// Where the vault's three areas are (section IV-D).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChvLayout {
    pub data_base: u64,
    pub addr_base: u64,
    pub mac_base: u64,
    pub end: u64,
    /// Entries the data area holds (hierarchy lines + metadata-cache blocks).
    pub entries: u64,
    /// Entries that carry vault MACs (the hierarchy's lines).
    pub mac_entries: u64,
}

impl ChvLayout {
    /// A vault at `base` for `hierarchy_lines` cache lines and `metadata_lines` metadata-cache
    /// blocks.
    pub fn new(base: u64, hierarchy_lines: u64, metadata_lines: u64, levels: MacLevels) -> ChvLayout {
        let entries = hierarchy_lines + metadata_lines;
        let addr_base = base + entries * 64;
        let mac_base = addr_base + entries.div_ceil(8) * 64;
        let mac_blocks = match levels {
            MacLevels::Single => hierarchy_lines.div_ceil(8),
            MacLevels::Double => hierarchy_lines.div_ceil(64),
        };
        ChvLayout { data_base: base, addr_base, mac_base, end: mac_base + mac_blocks * 64, entries, mac_entries: hierarchy_lines }
    }
    pub fn size_bytes(&self) -> u64 { self.end - self.data_base }
    pub fn data_addr(&self, entry: u64) -> u64 { self.data_base + entry * 64 }
    pub fn addr_block(&self, entry: u64) -> u64 { self.addr_base + (entry / 8) * 64 }
    pub fn mac_block(&self, entry: u64, levels: MacLevels) -> u64 {
        match levels {
            MacLevels::Single => self.mac_base + (entry / 8) * 64,
            MacLevels::Double => self.mac_base + (entry / 64) * 64,
        }
    }
}

/// The on-chip persistent registers of Horus (section IV-C and our metadata-tree root).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DrainRegisters {
    /// Drain counter: the IV of the next vault entry; never decreases, never reset.
    pub dc: u64,
    /// Ephemeral drain counter: entries drained since the last recovery.
    pub edc: u64,
    /// Root of the small tree over the metadata blocks of the last drain, and their number.
    pub metadata_root: u64,
    pub metadata_blocks: u64,
}

#[derive(Clone)]
pub struct Horus {
    pub levels: MacLevels,
    pub regs: DrainRegisters,
    hierarchy_lines: u64,
    metadata_lines: u64,
}

impl Horus {
    /// Horus sized for a hierarchy of `hierarchy_lines` lines and metadata caches of
    /// `metadata_lines` blocks (the vault holds their sum).
    pub fn new(levels: MacLevels, hierarchy_lines: u64, metadata_lines: u64) -> Horus {
        Horus { levels, regs: DrainRegisters::default(), hierarchy_lines, metadata_lines }
    }

    pub fn layout(&self, mc: &McOps) -> ChvLayout {
        ChvLayout::new(eadr::reserved_base(mc), self.hierarchy_lines, self.metadata_lines, self.levels)
    }

    /// Encrypts `plain` under drain counter `dc` (pad domain of the vault, never the data
    /// domain, so a vault pad can never equal a memory pad).
    fn seal(mc: &mut McOps, plain: &[u8; 64], dc: u64) -> [u8; 64] {
        let f = mc.functional_mut().expect("functional");
        if let Some(r) = f.reuse.as_mut() {
            if let Err(e) = r.record(f.keys.key_id(), DOMAIN_VAULT, 0, dc, 0) {
                f.reuse_violation.get_or_insert(e);
            }
        }
        let mut ct = *plain;
        xor_line(&mut ct, &f.keys.pad_with_domain(DOMAIN_VAULT, 0, dc, 0));
        ct
    }

    fn vault_mac(mc: &McOps, ct: &[u8; 64], line: u64, dc: u64) -> u64 {
        let f = mc.functional().expect("functional");
        let dc = if f.canaries.vault_mac_without_drain_counter { 0 } else { dc };
        f.keys.mac(DOMAIN_VAULT_MAC, &[ct, &line.to_le_bytes(), &dc.to_le_bytes()], f.mac_bits)
    }

    fn level2_mac(mc: &McOps, group: u64, macs: &[u8; 64]) -> u64 {
        let f = mc.functional().expect("functional");
        f.keys.mac(DOMAIN_VAULT_LEVEL2, &[&group.to_le_bytes(), macs], f.mac_bits)
    }
}

impl Design for Horus {
    fn name(&self) -> &'static str {
        match self.levels {
            MacLevels::Single => "horus-slm",
            MacLevels::Double => "horus-dlm",
        }
    }

    fn clone_box(&self) -> Box<dyn Design> { Box::new(self.clone()) }

    fn drain(&mut self, mc: &mut McOps, lines: &[DrainLine], clock: &mut DrainClock, stats: &mut DrainStats) -> Result<(), IntegrityError> {
        let chv = self.layout(mc);
        let metadata = mc.dirty_metadata();
        assert!(lines.len() as u64 <= chv.mac_entries, "{} dirty lines exceed the vault's {} line entries", lines.len(), chv.mac_entries);
        assert!(metadata.len() as u64 <= self.metadata_lines, "{} dirty metadata blocks exceed the vault's {}", metadata.len(), self.metadata_lines);
        eadr::check_room(mc, chv.data_base, chv.size_bytes());
        let functional = mc.is_functional();
        let (aes, mac) = (mc.params().aes, mc.params().mac);
        let total = lines.len() + metadata.len();
        self.regs.edc = 0;
        let mut addr_reg = [0u8; 64];
        let mut mac_reg = [0u8; 64];
        let mut level2_reg = [0u8; 64];
        for k in 0..total {
            let entry = k as u64;
            let (line_key, plain, read_cycles, is_line) = if k < lines.len() {
                (lines[k].line, lines[k].data, lines[k].read_cycles, true)
            } else {
                let m = &metadata[k - lines.len()];
                (m.key, m.payload, 0, false)
            };
            let t = clock.issue(read_cycles);
            let dc = self.regs.dc;
            // The pad depends only on DC, known in advance; the XOR follows it.
            let ct_at = t + aes + Cycle(1);
            let mut last = mc.device_write(chv.data_addr(entry), TrafficClass::Design, ct_at);
            let ct = if functional {
                let ct = Self::seal(mc, &plain.expect("functional drains carry data"), dc);
                mc.functional_mut().unwrap().persist(chv.data_addr(entry) >> LINE_SHIFT, ct);
                Some(ct)
            } else {
                None
            };
            stats.aes_ops += 1;
            self.regs.dc += 1;
            self.regs.edc += 1;
            if is_line {
                stats.writes.vault_data += 1;
            } else {
                stats.writes.metadata_save += 1;
            }
            // Addresses: 8 per block, written when the register is full (or at the end).
            set_node_entry(&mut addr_reg, k % 8, line_key);
            if k % 8 == 7 || k + 1 == total {
                let a = chv.addr_block(entry);
                last = last.max(mc.device_write(a, TrafficClass::Design, ct_at));
                if let Some(f) = mc.functional_mut() {
                    f.persist(a >> LINE_SHIFT, addr_reg);
                }
                addr_reg = [0; 64];
                stats.writes.vault_address += 1;
            }
            if is_line {
                let mac_at = ct_at + mac;
                stats.mac_ops.vault_data += 1;
                if let Some(ct) = ct.as_ref() {
                    set_node_entry(&mut mac_reg, k % 8, Self::vault_mac(mc, ct, line_key, dc));
                }
                let group_done = k % 8 == 7 || k + 1 == lines.len();
                match self.levels {
                    MacLevels::Single => {
                        if group_done {
                            let a = chv.mac_block(entry, MacLevels::Single);
                            last = last.max(mc.device_write(a, TrafficClass::Design, mac_at));
                            if let Some(f) = mc.functional_mut() {
                                f.persist(a >> LINE_SHIFT, mac_reg);
                            }
                            mac_reg = [0; 64];
                            stats.writes.vault_mac += 1;
                        }
                    }
                    MacLevels::Double => {
                        if group_done {
                            let group = entry / 8;
                            if functional {
                                set_node_entry(&mut level2_reg, (group % 8) as usize, Self::level2_mac(mc, group, &mac_reg));
                            }
                            mac_reg = [0; 64];
                            stats.mac_ops.vault_level2 += 1;
                            if group % 8 == 7 || k + 1 == lines.len() {
                                let a = chv.mac_block(entry, MacLevels::Double);
                                last = last.max(mc.device_write(a, TrafficClass::Design, mac_at + mac));
                                if let Some(f) = mc.functional_mut() {
                                    f.persist(a >> LINE_SHIFT, level2_reg);
                                }
                                level2_reg = [0; 64];
                                stats.writes.vault_mac += 1;
                            }
                        }
                    }
                }
            }
            clock.complete(last);
        }
        let (root, hashes) = cache_tree::protect(mc, &metadata);
        stats.mac_ops.metadata_protect += hashes;
        stats.metadata_blocks = metadata.len() as u64;
        if !metadata.is_empty() {
            clock.complete(clock.now() + Cycle(cache_tree::height(metadata.len() as u64) as u64 * mc.params().hash.0 + mc.params().hash.0));
        }
        self.regs.metadata_root = root;
        self.regs.metadata_blocks = metadata.len() as u64;
        Ok(())
    }

    fn recover_drained(&mut self, mc: &mut McOps, now: Cycle) -> Result<DrainRecovery, DrainRecoveryError> {
        let chv = self.layout(mc);
        let regs = self.regs;
        let total = regs.edc;
        let md = regs.metadata_blocks.min(total);
        let n_lines = total - md;
        let dc0 = regs.dc - regs.edc;
        let levels = self.levels;
        let (mac_lat, aes_lat) = (mc.params().mac.0, mc.params().aes.0);
        let functional = mc.is_functional();
        let mut rec = DrainRecovery::default();
        let mut last = now;
        // The serial estimate: every block read at the unloaded read latency (the fastest read
        // seen), one after another, plus every MAC and decryption.
        let mut unloaded_read = u64::MAX;
        let mut serial = 0u64;
        let mut read = |mc: &mut McOps, a: u64, rec: &mut DrainRecovery, fastest: &mut u64| -> [u8; 64] {
            let t = mc.device_read(a, TrafficClass::Design, now);
            *fastest = (*fastest).min((t - now).0);
            last = last.max(t);
            rec.blocks_read += 1;
            mc.functional().map(|f| f.image.get(a >> LINE_SHIFT)).unwrap_or([0; 64])
        };
        let fail = |class: &str, entry: u64, what: String| DrainRecoveryError {
            class: class.into(),
            location: format!("vault entry {entry} (drain counter {}): {what}", dc0 + entry),
        };
        // Reverse drain order: the metadata entries (drained last) come back first.
        let mut metadata: Vec<MetaBlock> = Vec::with_capacity(md as usize);
        let mut lines: Vec<(u64, Option<[u8; 64]>)> = Vec::with_capacity(n_lines as usize);
        let mut addr_block = [0u8; 64];
        let mut mac_block = [0u8; 64];
        let mut group: Vec<(u64, u64, [u8; 64])> = Vec::with_capacity(8);
        for entry in (0..total).rev() {
            if entry % 8 == 7 || entry + 1 == total {
                addr_block = read(mc, chv.addr_block(entry), &mut rec, &mut unloaded_read);
            }
            let is_line = entry < n_lines;
            if is_line && (entry + 1 == n_lines || match levels {
                MacLevels::Single => entry % 8 == 7,
                MacLevels::Double => entry % 64 == 63,
            }) {
                mac_block = read(mc, chv.mac_block(entry, levels), &mut rec, &mut unloaded_read);
            }
            let ct = read(mc, chv.data_addr(entry), &mut rec, &mut unloaded_read);
            let key = node_entry(&addr_block, (entry % 8) as usize);
            let dc = dc0 + entry;
            rec.aes_ops += 1;
            serial += aes_lat;
            let mut plain = ct;
            if functional {
                xor_line(&mut plain, &mc.functional().unwrap().keys.pad_with_domain(DOMAIN_VAULT, 0, dc, 0));
            }
            if !is_line {
                metadata.push(MetaBlock { kind: mc.kind_of_key(key).unwrap_or(crate::MetaKind::Counter), key, payload: functional.then_some(plain) });
                continue;
            }
            rec.hashes += 1;
            serial += mac_lat;
            match levels {
                MacLevels::Single => {
                    if functional && Self::vault_mac(mc, &ct, key, dc) != node_entry(&mac_block, (entry % 8) as usize) {
                        return Err(fail("vault-data-mac", entry, format!("MAC over (ciphertext, address {:#x}, drain counter) does not match", key << LINE_SHIFT)));
                    }
                    lines.push((key, functional.then_some(plain)));
                }
                MacLevels::Double => {
                    // A group of 8 is released only once its second-level MAC checks.
                    group.push((entry, key, ct));
                    if entry % 8 == 0 {
                        let g = entry / 8;
                        rec.hashes += 1;
                        serial += mac_lat;
                        if functional {
                            let mut macs = [0u8; 64];
                            for &(e, k, c) in &group {
                                set_node_entry(&mut macs, (e % 8) as usize, Self::vault_mac(mc, &c, k, dc0 + e));
                            }
                            if Self::level2_mac(mc, g, &macs) != node_entry(&mac_block, (g % 8) as usize) {
                                return Err(fail("vault-level2-mac", entry, format!("second-level MAC of entries {}..{} does not match", entry, entry + 7)));
                            }
                        }
                        for (e, k, c) in group.drain(..) {
                            let mut p = c;
                            if functional {
                                xor_line(&mut p, &mc.functional().unwrap().keys.pad_with_domain(DOMAIN_VAULT, 0, dc0 + e, 0));
                            }
                            lines.push((k, functional.then_some(p)));
                        }
                    }
                }
            }
        }
        // The metadata entries were read in reverse; the tree is over drain order.
        metadata.reverse();
        rec.hashes += cache_tree::hash_count(md);
        if functional {
            if let Some(m) = metadata.iter().find(|m| mc.kind_of_key(m.key).is_none()) {
                return Err(DrainRecoveryError { class: "metadata-tree".into(), location: format!("vault metadata entry claims address {:#x}, outside the metadata regions", m.key << LINE_SHIFT) });
            }
            let (root, _) = cache_tree::protect(mc, &metadata);
            let skip = mc.functional().is_some_and(|f| f.canaries.skip_vault_metadata_check);
            if root != regs.metadata_root && !skip {
                return Err(DrainRecoveryError {
                    class: "metadata-tree".into(),
                    location: format!("the {md} metadata blocks in the vault do not match the on-chip metadata-tree root"),
                });
            }
            mc.load_counter_view_from_image();
            for m in metadata {
                mc.restore_metadata(m);
            }
        }
        rec.metadata_restored = md;
        rec.lines_restored = n_lines;
        // Reads overlap in the device; verification and decryption pipeline behind them.
        rec.cycles = (last - now).0 + mac_lat * if levels == MacLevels::Double { 2 } else { 1 } + aes_lat + (cache_tree::height(md) as u64 + 1) * mc.params().hash.0;
        rec.serial_cycles = rec.blocks_read * unloaded_read.min(1 << 32) + serial + (cache_tree::height(md) as u64 + 1) * mc.params().hash.0;
        rec.lines = lines;
        // Recovered: the episode is over.
        self.regs.edc = 0;
        self.regs.metadata_blocks = 0;
        Ok(rec)
    }
}
