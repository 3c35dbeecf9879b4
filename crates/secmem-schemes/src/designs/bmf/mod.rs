//! Bonsai Merkle Forests (Alwadi et al., MICRO'21): persistent sub-tree roots in a
//! battery-backed metadata cache (the nvMC), so that a persisted store's tree update stops at
//! its sub-tree root instead of climbing to the root register.
//!
//! The design is a tree update strategy ([`BmfUpdate`]) plus the persist-barrier hook that
//! ends an epoch; reads, writes and their metadata are the baseline controller's. Config is
//! `[design.bmf]` ([`BmfConfig`]):
//!
//! * `persistency` — the persistency model of the paper's Table 2: `secure_wb` (write-back
//!   metadata, lazy tree update, no persistency: the baseline), `sp` (strict persistency:
//!   every write persists its memory tuple, the tree path up to its persistent root written
//!   through, root updates one after another), `o3` (epoch persistency with PLP's most
//!   aggressive optimisations: the epoch's root updates deferred to its persist barrier, then
//!   run out of order and coalesced, epochs ordered, two epochs in flight).
//! * `forest` — `off` (the full BMT: the PLP baselines `sp` and `o3`), `static` (one tree
//!   level pinned in the nvMC, `sbmf`), `dynamic` (prune and merge at each root evaluation
//!   interval, `dbmf`): the forest itself is [`forest`].
//!
//! A persistency model fixes the run's store order, barriers and metadata persistence
//! ([`DesignEntry::implies`]). The forest's roots live in the controller's trusted store
//! (battery-backed, like the nvMC): a fetch verifies against the first root above it, a
//! crash keeps them, and recovery ([`BmfUpdate`]'s `recover`) rebuilds the tree below them
//! from the persisted counter blocks and checks every root. `o3` runs in counting mode only:
//! it writes an epoch's counters through before the epoch's root updates, and PLP's holding of
//! the epoch in the WPQ until then is not modelled.

pub mod forest;

use self::forest::{Evaluation, Forest, ForestOps, Kind, Node, Shape};
use super::{no_data_lines, no_regions, Design, DesignEntry, DesignEnv, DesignsConfig, Implied};
use crate::config::MetadataPersistence;
use crate::controller::functional::IntegrityError;
use crate::controller::ops::McOps;
use crate::controller::tree_update::TreeUpdateStrategy;
use crate::controller::recovery::{RecoveryError, RecoveryReport};
use rustc_hash::FxHashMap;
use secmem_core::error::{ensure, ConfigError};
use secmem_crypto::{node_entry, set_node_entry};
use secmem_core::stats::StatDoc;
use secmem_core::{config_enum, config_section, Cycle};

config_enum! {
    /// The persistency model (BMF Table 2).
    pub enum Persistency {
        Auto => "auto": "sp under security.metadata_persistence = strict, secure_wb under the others",
        SecureWb => "secure_wb": "write-back metadata and lazy tree update, no persistency model (the baseline of Table 3)",
        Sp => "sp": "strict persistency: each write persists its memory tuple and updates the tree up to its persistent root, root updates in order",
        O3 => "o3": "epoch persistency with PLP's optimisations: an epoch's root updates run at its barrier, out of order and coalesced, two epochs in flight",
    }
}

config_enum! {
    /// The forest of persistent roots.
    pub enum ForestKind {
        Off => "off": "the full Bonsai Merkle Tree: every update reaches the root register",
        Static => "static": "sbmf: one whole tree level pinned in the nvMC as the roots",
        Dynamic => "dynamic": "dbmf: roots pruned toward hot data and merged back at each root evaluation interval",
    }
}

config_section! {
    /// Bonsai Merkle Forests' own parameters (`[design.bmf]`).
    pub struct BmfConfig {
        persistency: Persistency = Persistency::Auto => "Persistency model: secure_wb | sp | o3 (Table 2), or auto (sp under strict metadata persistence, secure_wb under the others)";
        forest: ForestKind = ForestKind::Off => "Persistent sub-tree roots: off (BMT) | static (sbmf) | dynamic (dbmf)";
        nvmc_bytes: u64 = 4096 => "nvMC capacity, B, 64 B per tree node (Table 1: 512b to 16 MB, default 4 KB)";
        nvmc_latency_cycles: u64 = 2 => "nvMC access latency, cycles (Table 1: 2 cycles)";
        static_level: u32 = 0 => "Static forest: the tree level pinned as roots, counter blocks being level 0 (0: the lowest level whose nodes all fit the nvMC, section 6)";
        rei_writes: u64 = 32 => "Dynamic forest: the root evaluation interval, PM writes (Table 1: 2 to 64, default 32)";
        counter_bits: u32 = 6 => "Dynamic forest: bits of each nvMC and BMT-cache access counter (section 6: 6 bits)";
        prune_threshold_pct: u32 = 25 => "Dynamic forest: a root is a prune candidate when its access counter exceeds this share of the REI's writes, percent (the threshold T of Algorithm 1, which the paper does not give; relative to the REI so that an REI sweep compares like with like; capped one below the counters' maximum)";
    }
}

pub static ENTRY: DesignEntry = DesignEntry {
    name: "bmf",
    summary: "Bonsai Merkle Forests (MICRO'21): persistency models, and persistent sub-tree roots in a non-volatile metadata cache",
    needs_security: true,
    baseline_data_path: false,
    needs_line_contents: false,
    check,
    implies,
    regions: no_regions,
    data_lines_reserved: no_data_lines,
    drain_schemes: &[],
    tree_update: Some(|ctx, cfg| Box::new(BmfUpdate::new(ctx, &cfg.bmf))),
    build: |_, _| Box::new(Bmf),
    stats: &[
        StatDoc::new("updates", "updates", "tree updates of persisted writes (each counter-block change under sp and o3)"),
        StatDoc::new("avg_update_height", "levels", "mean levels on an update's path, the counter block and its persistent root included (the full BMT's height without a forest)"),
        StatDoc::new("height_1", "updates", "updates whose path had 1 level, the counter block and its root included"),
        StatDoc::new("height_2", "updates", "updates whose path had 2 levels, the counter block and its root included"),
        StatDoc::new("height_3", "updates", "updates whose path had 3 levels, the counter block and its root included"),
        StatDoc::new("height_4", "updates", "updates whose path had 4 levels, the counter block and its root included"),
        StatDoc::new("height_5", "updates", "updates whose path had 5 levels, the counter block and its root included"),
        StatDoc::new("height_6", "updates", "updates whose path had 6 levels, the counter block and its root included"),
        StatDoc::new("height_7", "updates", "updates whose path had 7 levels, the counter block and its root included"),
        StatDoc::new("height_8", "updates", "updates whose path had 8 levels, the counter block and its root included"),
        StatDoc::new("height_9", "updates", "updates whose path had 9 levels, the counter block and its root included"),
        StatDoc::new("height_10", "updates", "updates whose path had 10 levels, the counter block and its root included"),
        StatDoc::new("height_11", "updates", "updates whose path had 11 levels, the counter block and its root included"),
        StatDoc::new("height_12", "updates", "updates whose path had 12 levels, the counter block and its root included"),
        StatDoc::new("height_13", "updates", "updates whose path had 13 levels, the counter block and its root included"),
        StatDoc::new("height_14", "updates", "updates whose path had 14 levels, the counter block and its root included"),
        StatDoc::new("height_15", "updates", "updates whose path had 15 levels, the counter block and its root included"),
        StatDoc::new("height_16", "updates", "updates whose path had 16 levels, the counter block and its root included"),
        StatDoc::new("epochs", "epochs", "o3: epochs whose root updates ran at their barrier"),
        StatDoc::new("coalesced_updates", "updates", "o3: counter-block changes merged into an earlier one of the same epoch"),
        StatDoc::new("evaluations", "intervals", "dynamic forest: root evaluation intervals ended"),
        StatDoc::new("prunes", "prunes", "dynamic forest: prunes (Algorithm 1)"),
        StatDoc::new("root_prunes", "prunes", "dynamic forest: prunes of the original root, into all its children"),
        StatDoc::new("merges", "merges", "dynamic forest: merges (Algorithm 2)"),
        StatDoc::new("prunes_without_room", "prunes", "dynamic forest: prunes given up for want of a free nvMC entry"),
        StatDoc::new("nvmc_entries_used", "entries", "nvMC entries in use at the end (the pinned original root included)"),
        StatDoc::new("nvmc_roots", "roots", "persistent roots at the end"),
    ],
};

/// The tree's nodes per level for `ctx`'s memory, as the controller's layout has them.
fn shape_of(data_bytes: u64, arity: u64) -> Result<Shape, ConfigError> {
    let layout = secmem_core::tree::SecureLayout::new(data_bytes, arity, 64)?;
    Ok(Shape { arity, nodes: layout.tree.nodes })
}

/// What each persistency model decides of the run (section 6): sp's write-through caches and
/// barrier after every store; the strict metadata persistence and eager tree update of sp and
/// o3 (a memory tuple persisted with each write); o3's epochs of `persist.every_n_stores`
/// stores unless the run's trace brings its own barriers; secure_wb's write-back metadata and
/// lazy update.
fn implies(d: &DesignsConfig) -> Vec<Implied> {
    let p = d.bmf.persistency;
    let because = format!("design.bmf.persistency = \"{}\"", p.as_str());
    let fixed = |field, value| Implied { field, value, fixed: true, because: because.clone() };
    match p {
        Persistency::Auto => Vec::new(),
        Persistency::SecureWb => vec![
            fixed("hierarchy.write_through", "false"),
            fixed("security.metadata_persistence", "\"write-back\""),
            fixed("tree.update", "\"lazy\""),
        ],
        Persistency::Sp => vec![
            fixed("hierarchy.write_through", "true"),
            fixed("persist.barriers", "\"every-store\""),
            fixed("security.metadata_persistence", "\"strict\""),
            fixed("tree.update", "\"eager\""),
        ],
        Persistency::O3 => vec![
            fixed("hierarchy.write_through", "false"),
            fixed("security.metadata_persistence", "\"strict\""),
            fixed("tree.update", "\"eager\""),
            Implied { field: "persist.barriers", value: "\"every-n-stores\"", fixed: false, because: because.clone() },
        ],
    }
}

fn check(env: &DesignEnv) -> Result<(), ConfigError> {
    let c = &env.designs.bmf;
    ensure(c.nvmc_bytes >= 64, "design.bmf.nvmc_bytes", || format!("the nvMC must hold at least one 64 B tree node, got {} B", c.nvmc_bytes))?;
    ensure(c.nvmc_bytes <= 1 << 30, "design.bmf.nvmc_bytes", || format!("must be at most 1 GiB, got {} B", c.nvmc_bytes))?;
    ensure(c.nvmc_latency_cycles <= 1 << 20, "design.bmf.nvmc_latency_cycles", || format!("must be at most 2^20 cycles, got {}", c.nvmc_latency_cycles))?;
    ensure(c.rei_writes >= 1, "design.bmf.rei_writes", || "the root evaluation interval must be at least 1 PM write".into())?;
    ensure((1..=8).contains(&c.counter_bits), "design.bmf.counter_bits", || format!("must be 1..=8 bits, got {}", c.counter_bits))?;
    ensure(c.prune_threshold_pct <= 100, "design.bmf.prune_threshold_pct", || format!("must be a percentage, 0..=100, got {}", c.prune_threshold_pct))?;
    let strict = env.security.metadata_persistence == MetadataPersistence::Strict;
    match resolve(c.persistency, strict) {
        Persistency::SecureWb => {
            ensure(!strict, "security.metadata_persistence", || "design.bmf.persistency = \"secure_wb\" persists nothing: set a write-back metadata persistence".into())?;
            ensure(c.forest == ForestKind::Off, "design.bmf.forest", || "persistent roots serve a persistency model, and secure_wb has none: use design.bmf.persistency = \"sp\" or \"o3\"".into())?;
        }
        Persistency::Sp | Persistency::O3 | Persistency::Auto => {
            ensure(strict, "security.metadata_persistence", || {
                format!("design.bmf.persistency = \"{}\" persists each write's memory tuple: set security.metadata_persistence = \"strict\"", c.persistency.as_str())
            })?;
        }
    }
    if env.functional {
        // o3 writes an epoch's counters through before its root updates run at the barrier;
        // a crash in between would leave counters no root vouches for. PLP holds the epoch's
        // tuples in the WPQ until then, which secmem's persistence domain does not model.
        ensure(resolve(c.persistency, strict) != Persistency::O3, "design.bmf.persistency", || "o3's deferred epoch updates run in counting mode only (run.functional = false)".into())?;
    }
    if c.forest == ForestKind::Static {
        let shape = shape_of(env.ctx.data_bytes, env.ctx.tree_arity)?;
        let entries = c.nvmc_bytes / 64;
        let level = if c.static_level == 0 { shape.static_level(entries) } else { c.static_level as usize };
        ensure(level >= 1 && level <= shape.root_level(), "design.bmf.static_level", || {
            format!("level {level} is not a tree level above the counter blocks: this memory's tree has levels 1..={}", shape.root_level())
        })?;
        ensure(shape.nodes[level] <= entries, "design.bmf.static_level", || {
            format!("level {level}'s {} nodes do not fit the nvMC's {entries} entries (design.bmf.nvmc_bytes = {})", shape.nodes[level], c.nvmc_bytes)
        })?;
    }
    Ok(())
}

/// The threshold T of Algorithm 1, in counter units: `prune_threshold_pct` of the REI's
/// writes, capped one below the counters' maximum (so that a saturated counter still exceeds
/// it).
pub fn prune_threshold(cfg: &BmfConfig) -> u8 {
    let max = (1u64 << cfg.counter_bits) - 1;
    (cfg.rei_writes.saturating_mul(u64::from(cfg.prune_threshold_pct)) / 100).min(max - 1) as u8
}

/// `p` with `auto` resolved: sp under strict metadata persistence, secure_wb otherwise.
fn resolve(p: Persistency, strict: bool) -> Persistency {
    match p {
        Persistency::Auto if strict => Persistency::Sp,
        Persistency::Auto => Persistency::SecureWb,
        p => p,
    }
}

/// The design: the baseline's data path, with barriers and the end of a run handed to the
/// tree update strategy (an epoch's deferred root updates).
#[derive(Clone, Copy, Default)]
pub struct Bmf;

impl Design for Bmf {
    fn name(&self) -> &'static str { ENTRY.name }

    fn clone_box(&self) -> Box<dyn Design> { Box::new(*self) }

    fn fence(&mut self, mc: &mut McOps, now: Cycle) -> Cycle {
        // Counting mode only defers updates (o3), and counting mode finds no integrity error.
        mc.tree_update_fence(now).unwrap_or(now)
    }

    fn finish(&mut self, mc: &mut McOps, now: Cycle) -> Result<Cycle, IntegrityError> {
        let t = mc.tree_update_fence(now)?;
        mc.flush_metadata(t)
    }

    fn recover(&mut self, mc: &mut McOps, now: Cycle) -> Result<RecoveryReport, RecoveryError> { mc.recover_tree_update(now) }
}

/// BMF's tree update: each persisted write's path up to its persistent root (see the module
/// documentation).
#[derive(Clone)]
pub struct BmfUpdate {
    persistency: Persistency,
    /// None with `forest = off` (every update reaches the root register).
    forest: Option<Forest>,
    /// Whether the forest's roots are in the controller's trusted store yet (the nvMC's node
    /// bytes live there, battery-backed; the original root's are the root register).
    installed: bool,
    root_level: usize,
    arity: u64,
    nvmc: Cycle,
    /// sp: when the last root update completed (the next one starts no earlier).
    last_root_done: Cycle,
    /// o3: the current epoch's changed counter blocks, in first-changed order.
    epoch: Vec<u64>,
    epoch_seen: rustc_hash::FxHashSet<u64>,
    /// o3: when the previous epoch's root updates complete.
    prev_epoch_done: Cycle,
    /// o3: root evaluation intervals the epoch's updates ended (run after them).
    evaluations_due: u64,
    updates: u64,
    epochs: u64,
    coalesced: u64,
}

impl BmfUpdate {
    pub fn new(ctx: &super::DesignContext, cfg: &BmfConfig) -> BmfUpdate {
        let shape = shape_of(ctx.data_bytes, ctx.tree_arity).expect("the layout was checked with the config");
        let entries = cfg.nvmc_bytes / 64;
        let counter_max = ((1u32 << cfg.counter_bits) - 1) as u8;
        let eval = Evaluation { rei_writes: cfg.rei_writes, prune_threshold: prune_threshold(cfg), counter_max };
        let root_level = shape.root_level();
        let forest = match cfg.forest {
            ForestKind::Off => None,
            ForestKind::Static => Some(Forest::new_static(shape, entries, (cfg.static_level > 0).then_some(cfg.static_level as usize)).expect("checked with the config")),
            ForestKind::Dynamic => Some(Forest::new_dynamic(shape, entries, eval).expect("checked with the config")),
        };
        BmfUpdate {
            persistency: resolve(cfg.persistency, ctx.strict_persistence),
            forest,
            installed: false,
            root_level,
            arity: ctx.tree_arity,
            nvmc: Cycle(cfg.nvmc_latency_cycles),
            last_root_done: Cycle::ZERO,
            epoch: Vec::new(),
            epoch_seen: Default::default(),
            prev_epoch_done: Cycle::ZERO,
            evaluations_due: 0,
            updates: 0,
            epochs: 0,
            coalesced: 0,
        }
    }

    /// The forest, if any (tests and reports).
    pub fn forest(&self) -> Option<&Forest> { self.forest.as_ref() }

    /// Puts the forest's first roots on chip: a static forest's level at its boot content
    /// (all entries 0, as the boot tree's nodes are); a dynamic one's is the root register.
    fn install(&mut self, mc: &mut McOps) {
        if std::mem::replace(&mut self.installed, true) {
            return;
        }
        if let Some(f) = self.forest.as_ref() {
            for e in f.entries().filter(|e| e.node.level < self.root_level) {
                mc.trust_node(e.node.level, e.node.index, [0; 64]);
            }
        }
    }

    /// The persistent root `page`'s update stops at (the root register's level without a
    /// forest), counting the update.
    fn root_of(&mut self, page: u64) -> usize {
        let level = match self.forest.as_mut() {
            Some(f) => f.record_update(page).level,
            None => self.root_level,
        };
        self.updates += 1;
        level
    }

    /// Updates `page`'s path from `start` up to its persistent root at level `top` (the root
    /// register at the tree's top); returns when the root is updated.
    fn update_to(&mut self, mc: &mut McOps, page: u64, start: Cycle, top: usize) -> Result<Cycle, IntegrityError> {
        if top == self.root_level {
            return mc.update_path(page, start, usize::MAX);
        }
        // The path's nodes below the root, then one hash into the root's nvMC entry.
        let below = if top > 1 { mc.update_path(page, start, top - 1)? } else { start };
        let child = Node::new(top - 1, page / self.arity.pow((top - 1) as u32));
        if let Some(e) = mc.block_entry(child.level, child.index) {
            mc.set_trusted_entry(top, child.index / self.arity, (child.index % self.arity) as usize, e);
        }
        Ok(mc.hash_tree_node(below) + self.nvmc)
    }

    /// Runs a root evaluation's prune and merge from `at`; returns when its last step is done.
    fn evaluate(&mut self, mc: &mut McOps, at: Cycle) -> Result<Cycle, IntegrityError> {
        let Some(forest) = self.forest.as_mut() else { return Ok(at) };
        let steps = forest.plan_evaluation();
        run_steps(forest, steps, mc, at, self.nvmc, self.arity)
    }

    /// o3: the epoch's root updates, coalesced: each page's path goes up to the lowest node it
    /// shares with a page later in the epoch (whose walk then carries both changes on up), or
    /// to its root. Starts at `start`; returns when the last update is done.
    fn run_epoch(&mut self, mc: &mut McOps, start: Cycle) -> Result<Cycle, IntegrityError> {
        let pages = std::mem::take(&mut self.epoch);
        self.epoch_seen.clear();
        if pages.is_empty() {
            return Ok(start);
        }
        self.epochs += 1;
        let roots: Vec<usize> = pages.iter().map(|&p| self.root_of(p)).collect();
        // The REI counts persists to PM: under o3, the epoch's coalesced updates.
        if let Some(f) = self.forest.as_mut() {
            for _ in &pages {
                self.evaluations_due += u64::from(f.count_write());
            }
        }
        let arity = mc.layout().tree.arity;
        // How many of the epoch's pages still to be walked pass through each node below
        // their root (key: level, index).
        let mut sharers: FxHashMap<(usize, u64), u32> = FxHashMap::default();
        for (&p, &r) in pages.iter().zip(&roots) {
            let mut idx = p;
            for level in 1..r {
                idx /= arity;
                *sharers.entry((level, idx)).or_insert(0) += 1;
            }
        }
        // When a walk that stopped at a node left it updated (a later walk through it waits).
        let mut ready: FxHashMap<(usize, u64), Cycle> = FxHashMap::default();
        let mut done = start;
        for (&p, &r) in pages.iter().zip(&roots) {
            let mut top = r;
            let mut at = start;
            let mut idx = p;
            for level in 1..r {
                idx /= arity;
                if let Some(&t) = ready.get(&(level, idx)) {
                    at = at.max(t);
                }
                let n = sharers.get_mut(&(level, idx)).expect("counted above");
                *n -= 1;
                if *n > 0 && top == r {
                    top = level;
                }
            }
            let t = if top == r { self.update_to(mc, p, at, r)? } else { mc.update_path(p, at, top)? };
            if top < r {
                let mut idx = p;
                for _ in 0..top {
                    idx /= arity;
                }
                let e = ready.entry((top, idx)).or_insert(t);
                *e = (*e).max(t);
            }
            done = done.max(t);
        }
        for _ in 0..std::mem::take(&mut self.evaluations_due) {
            done = self.evaluate(mc, done)?;
        }
        Ok(done)
    }
}

impl TreeUpdateStrategy for BmfUpdate {
    fn name(&self) -> &'static str {
        match (self.persistency, self.forest.as_ref().map(Forest::kind)) {
            (Persistency::SecureWb | Persistency::Auto, _) => "bmf-secure-wb",
            (Persistency::Sp, None) => "bmf-sp",
            (Persistency::Sp, Some(Kind::Static)) => "bmf-sp-sbmf",
            (Persistency::Sp, Some(Kind::Dynamic)) => "bmf-sp-dbmf",
            (Persistency::O3, None) => "bmf-o3",
            (Persistency::O3, Some(Kind::Static)) => "bmf-o3-sbmf",
            (Persistency::O3, Some(Kind::Dynamic)) => "bmf-o3-dbmf",
        }
    }

    fn counter_changed(&mut self, mc: &mut McOps, page: u64, ctr_at: Cycle) -> Result<Cycle, IntegrityError> {
        self.install(mc);
        match self.persistency {
            // Lazy: the parent absorbs the block when it is written back.
            Persistency::SecureWb | Persistency::Auto => Ok(ctr_at),
            Persistency::Sp => {
                let due = self.forest.as_mut().is_some_and(Forest::count_write);
                let start = ctr_at.max(self.last_root_done);
                let top = self.root_of(page);
                let mut done = self.update_to(mc, page, start, top)?;
                if due {
                    done = self.evaluate(mc, done)?;
                }
                self.last_root_done = done;
                Ok(done)
            }
            Persistency::O3 => {
                if self.epoch_seen.insert(page) {
                    self.epoch.push(page);
                } else {
                    self.coalesced += 1;
                }
                Ok(ctr_at)
            }
        }
    }

    fn absorbs_on_write_back(&self) -> bool { self.persistency == Persistency::SecureWb }

    fn persistent_copy(&self) -> Option<Box<dyn TreeUpdateStrategy>> {
        // The nvMC's tags, root, E and L bits and bytes survive; its access counters, the
        // BMT cache's, an evaluation's progress and an epoch's pending updates do not.
        let mut copy = self.clone();
        if let Some(f) = copy.forest.as_mut() {
            f.crash();
        }
        copy.epoch.clear();
        copy.epoch_seen.clear();
        copy.evaluations_due = 0;
        copy.last_root_done = Cycle::ZERO;
        copy.prev_epoch_done = Cycle::ZERO;
        Some(Box::new(copy))
    }

    fn recover(&mut self, mc: &mut McOps, now: Cycle) -> Result<RecoveryReport, RecoveryError> {
        let Some(forest) = self.forest.as_mut() else { return mc.rebuild_and_verify(now) };
        let (rebuilt, report) = mc.rebuild_levels(now, &|level, index| forest.is_root(Node::new(level, index)));
        if mc.is_functional() {
            check_roots(forest, &rebuilt, mc, self.arity)?;
        }
        // Merges a crash cut short are finished; prunes cut short leave both roots.
        let mut ops = TimedOps { mc, t: now, nvmc: self.nvmc, root_level: self.root_level, arity: self.arity, failure: None };
        forest.finish_recovery(&mut ops);
        match ops.failure {
            Some(e) => Err(RecoveryError { first_bad: e.to_string(), message: "finishing a merge the crash cut short".into() }),
            None => Ok(report),
        }
    }

    fn fence(&mut self, mc: &mut McOps, now: Cycle) -> Result<Cycle, IntegrityError> {
        if self.persistency != Persistency::O3 {
            return Ok(now);
        }
        // Epochs persist in order: this one's root updates follow the previous one's. Two
        // epochs are in flight: the barrier retires once the previous epoch is done.
        let previous = self.prev_epoch_done;
        self.prev_epoch_done = self.run_epoch(mc, now.max(previous))?;
        Ok(now.max(previous))
    }

    fn stats(&self) -> Vec<(&'static str, f64)> {
        const HEIGHT_NAMES: [&str; 17] = [
            "height_0", "height_1", "height_2", "height_3", "height_4", "height_5", "height_6", "height_7", "height_8", "height_9", "height_10", "height_11", "height_12",
            "height_13", "height_14", "height_15", "height_16",
        ];
        // Updates by height: the forest's, or without one every update at the full height.
        let mut heights = vec![0u64; self.root_level + 2];
        match self.forest.as_ref() {
            Some(f) => heights.copy_from_slice(&f.stats.heights),
            None => heights[self.root_level + 1] = self.updates,
        }
        let avg = if self.updates == 0 { 0.0 } else { heights.iter().enumerate().map(|(h, &c)| h as f64 * c as f64).sum::<f64>() / self.updates as f64 };
        let mut out = vec![("updates", self.updates as f64), ("avg_update_height", avg), ("epochs", self.epochs as f64), ("coalesced_updates", self.coalesced as f64)];
        out.extend(heights.iter().enumerate().skip(1).take(16).map(|(h, &c)| (HEIGHT_NAMES[h], c as f64)));
        if let Some(f) = self.forest.as_ref() {
            let s = &f.stats;
            out.extend([
                ("evaluations", s.evaluations as f64),
                ("prunes", s.prunes as f64),
                ("root_prunes", s.root_prunes as f64),
                ("merges", s.merges as f64),
                ("prunes_without_room", s.prunes_without_room as f64),
                ("nvmc_entries_used", f.occupied() as f64),
                ("nvmc_roots", f.entries().filter(|e| e.root).count() as f64),
            ]);
        }
        out
    }
}

/// Recovery's check: every persistent root's entry for each child that is not a root equals
/// that child rebuilt from the persisted counter blocks. On the path to a merge a crash cut
/// short, the ancestor may hold either state (the merging root's edge cut, or restored).
fn check_roots(forest: &Forest, rebuilt: &crate::controller::recovery::RebuiltLevels, mc: &McOps, arity: u64) -> Result<(), RecoveryError> {
    let root_level = forest.shape().root_level();
    let entry = |n: Node| -> u64 {
        match rebuilt.levels.get(n.level).and_then(|l| l.get(&n.index)) {
            Some(b) => mc.entry_of(n.level, n.index, b).expect("functional"),
            None => 0, // never persisted: its boot content
        }
    };
    let register = mc.root_register().expect("functional");
    let merging = forest.merges_in_flight();
    for x in forest.entries().filter(|e| e.root).map(|e| e.node) {
        let held = if x.level == root_level { register } else { mc.trusted_bytes(x.level, x.index).unwrap_or([0; 64]) };
        for (slot, c) in forest.shape().children(x).enumerate() {
            if c.level > 0 && forest.is_root(c) {
                continue;
            }
            let have = node_entry(&held, slot);
            if have == entry(c) {
                continue;
            }
            // With a merge of root m into x in flight: the path from m up to c, m included.
            let restored = merging.iter().filter(|&&(m, a)| a == x && m.level < c.level && m.index / arity.pow((c.level - m.level) as u32) == c.index).any(|&(m, _)| {
                let mut e = mc.entry_of(m.level, m.index, &mc.trusted_bytes(m.level, m.index).unwrap_or([0; 64])).expect("functional");
                let mut idx = m.index;
                for level in m.level + 1..=c.level {
                    let mut node = rebuilt.block(level, idx / arity);
                    set_node_entry(&mut node, (idx % arity) as usize, e);
                    idx /= arity;
                    e = mc.entry_of(level, idx, &node).expect("functional");
                }
                e == have
            });
            if !restored {
                let what = if c.level == 0 { format!("counter block of page {}", c.index) } else { format!("tree level {} index {}", c.level, c.index) };
                return Err(RecoveryError {
                    first_bad: what,
                    message: format!("the tree rebuilt from persisted counters does not match the persistent root at level {} index {} in the nvMC", x.level, x.index),
                });
            }
        }
    }
    Ok(())
}

/// Carries out `steps` of a prune or merge on `forest` and its nvMC `bytes` from `at`, each
/// step one nvMC write; returns when the last is done.
fn run_steps(forest: &mut Forest, steps: Vec<forest::Step>, mc: &mut McOps, at: Cycle, nvmc: Cycle, arity: u64) -> Result<Cycle, IntegrityError> {
    let root_level = forest.shape().root_level();
    let mut ops = TimedOps { mc, t: at, nvmc, root_level, arity, failure: None };
    for step in steps {
        forest.apply(step, &mut ops);
        if let forest::Step::Invalidate { node } = step {
            ops.mc.untrust_node(node.level, node.index);
        }
        ops.t += ops.nvmc;
    }
    match ops.failure {
        Some(e) => Err(e),
        None => Ok(ops.t),
    }
}

/// A prune's or merge's tree work on the controller: fetches, hashes and the nvMC's bytes in
/// the controller's trusted store, timed from `t`.
struct TimedOps<'a> {
    mc: &'a mut McOps,
    t: Cycle,
    nvmc: Cycle,
    root_level: usize,
    arity: u64,
    failure: Option<IntegrityError>,
}

impl TimedOps<'_> {
    /// Functional mode: the entry `child`'s bytes give, set in trusted node `parent`.
    fn set_entry_from_cached(&mut self, parent: Node, child: Node) {
        if let Some(e) = self.mc.block_entry(child.level, child.index) {
            self.mc.set_trusted_entry(parent.level, parent.index, (child.index % self.arity) as usize, e);
        }
    }
}

impl ForestOps for TimedOps<'_> {
    fn load(&mut self, node: Node) {
        match self.mc.fetch_tree_block(node.level, node.index, false, self.t) {
            Ok(t) => self.t = t + self.nvmc,
            Err(e) => {
                self.failure.get_or_insert(e);
                return;
            }
        }
        // The node's bytes, verified against the root above it, now live in the nvMC; its
        // edge to that root is cut, so the root holds 0 for it (the original root's entries
        // for roots are never read).
        let bytes = self.mc.block_bytes(node.level, node.index).unwrap_or([0; 64]);
        self.mc.trust_node(node.level, node.index, bytes);
        let parent = Node::new(node.level + 1, node.index / self.arity);
        if parent.level < self.root_level {
            self.mc.set_trusted_entry(parent.level, parent.index, (node.index % self.arity) as usize, 0);
        }
    }

    fn restore_path(&mut self, from: Node, to: Node) {
        // The root leaves the nvMC for the tree: its bytes go to NVM (and the tree cache),
        // where the nodes above will be checked against them from now on.
        let from_bytes = self.mc.is_functional().then(|| self.mc.trusted_bytes(from.level, from.index).unwrap_or([0; 64]));
        self.t = self.mc.persist_tree_block(from.level, from.index, from_bytes, self.t);
        let r = if to.level == self.root_level {
            self.mc.update_path_from(from.level, from.index, self.t, usize::MAX)
        } else if to.level == from.level + 1 {
            self.set_entry_from_cached(to, from);
            Ok(self.mc.hash_tree_node(self.t) + self.nvmc)
        } else {
            let below = Node::new(to.level - 1, from.index / self.arity.pow((to.level - 1 - from.level) as u32));
            self.mc.update_path_from(from.level, from.index, self.t, to.level - 1).map(|t| {
                self.set_entry_from_cached(to, below);
                self.mc.hash_tree_node(t) + self.nvmc
            })
        };
        match r {
            Ok(t) => self.t = t,
            Err(e) => {
                self.failure.get_or_insert(e);
            }
        }
    }
}
