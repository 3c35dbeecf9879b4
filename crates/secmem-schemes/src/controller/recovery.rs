//! Recovery of the baseline after a crash: rebuild the counter view and the integrity tree
//! from the counter blocks persisted in NVM, then compare the rebuilt root with the on-chip
//! root register (which always survives). A mismatch fails closed and names the first (lowest,
//! then leftmost) stored node that differs from its rebuilt value — or the root itself.
//!
//! This is the recovery of a strict/eager baseline (Triad-NVM style): correct only if every
//! counter update reached NVM together with its path to the root before the write completed.
//! A lazily updated tree fails here by design (its root is ahead of or behind NVM), which is
//! exactly what the Horus paper says about recovery-oblivious lazy update.
//!
//! Work is counted like run-time work: one device read per persisted counter block, one
//! hash per rebuilt entry; the reads are issued together through the device (bank
//! parallelism applies) and the hashes run on one hash engine.

use crate::controller::SecureMc;
use crate::controller::functional::Functional;
use rustc_hash::FxHashMap;
use secmem_core::addr::LINE_SHIFT;
use secmem_core::counters::CounterBlock;
use secmem_core::Cycle;
use secmem_crypto::set_node_entry;
use secmem_media::TrafficClass;
use serde::Serialize;

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RecoveryReport {
    /// Counter blocks read from NVM.
    pub counter_blocks_read: u64,
    /// Tree-node entries recomputed (hashes).
    pub hashes: u64,
    /// Stored tree nodes read to compare (only when locating a mismatch).
    pub nodes_read: u64,
    /// Simulated recovery time in CPU cycles.
    pub cycles: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryError {
    /// `root`, or `tree level L index I (address A)`, or `counter block of page P (address A)`.
    pub first_bad: String,
    pub message: String,
}

impl std::fmt::Display for RecoveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "recovery failed closed: {}; first bad node: {}", self.message, self.first_bad)
    }
}
impl std::error::Error for RecoveryError {}

/// Rebuilds counters and tree from NVM and checks the root. Requires functional mode (in
/// counting mode there are no bytes to verify; the work estimate is still reported).
pub fn rebuild_and_verify(mc: &mut SecureMc, now: Cycle) -> Result<RecoveryReport, RecoveryError> {
    let layout = mc.layout.clone();
    let mut report = RecoveryReport::default();
    let Some(func) = mc.func.take() else {
        // Counting mode: the same reads and hashes as the functional rebuild below, over the
        // counter blocks the crash kept (no bytes to verify), and the counter view restored.
        let blocks = std::mem::take(&mut mc.crashed_counters);
        let mut issue_last = now;
        for &(page, block) in &blocks {
            mc.counters.set_block(page, block);
            issue_last = issue_last.max(mc.device_read(layout.counter_addr(page), TrafficClass::Counter, now));
        }
        report.counter_blocks_read = blocks.len() as u64;
        let tree = &layout.tree;
        let mut level: Vec<u64> = blocks.iter().map(|b| b.0).collect();
        for lvl in 0..tree.root_level() {
            report.hashes += level.len() as u64;
            level = level.iter().map(|&i| tree.parent(lvl, i).1).collect();
            level.dedup(); // ascending children have ascending parents
            if lvl + 1 < tree.root_level() {
                // The stored nodes compared with the rebuilt ones: the same set when NVM is
                // consistent, as it is by the time a counting-mode recovery runs.
                report.nodes_read += level.len() as u64;
            }
        }
        report.cycles = (issue_last - now).0 + report.hashes * mc.p.hash.0;
        return Ok(report);
    };
    let result = rebuild(mc, &func, &layout, &mut report, now);
    mc.func = Some(func);
    result.map(|_| report)
}

fn rebuild(
    mc: &mut SecureMc,
    func: &Functional,
    layout: &secmem_core::tree::SecureLayout,
    report: &mut RecoveryReport,
    now: Cycle,
) -> Result<(), RecoveryError> {
    let tree = &layout.tree;
    let first_counter_line = layout.counter_base >> LINE_SHIFT;
    let counter_lines = func.image.lines_in(first_counter_line, first_counter_line + layout.counter_blocks);
    // Level 0: the persisted counter blocks become the counter view again.
    let mut level_blocks: Vec<(u64, [u8; 64])> = Vec::with_capacity(counter_lines.len());
    let mut issue_last = now;
    for line in counter_lines {
        let bytes = func.image.get(line);
        let page = line - first_counter_line;
        mc.counters.set_block(page, CounterBlock::decode(&bytes, mc.p.minor_bits));
        issue_last = issue_last.max(mc.device_read(line << LINE_SHIFT, TrafficClass::Counter, now));
        level_blocks.push((page, bytes));
        report.counter_blocks_read += 1;
    }
    // Levels 1..root: parents from children; compare each stored level with what NVM holds.
    let root = tree.root_level();
    let mut first_bad: Option<String> = None;
    for level in 0..root {
        let mut parents: FxHashMap<u64, [u8; 64]> = FxHashMap::default();
        for (index, bytes) in &level_blocks {
            let entry = func.child_entry(level, *index, bytes);
            report.hashes += 1;
            let (_, pidx) = tree.parent(level, *index);
            set_node_entry(parents.entry(pidx).or_insert([0; 64]), tree.slot_in_parent(*index), entry);
        }
        let plevel = level + 1;
        let mut next: Vec<(u64, [u8; 64])> = parents.into_iter().collect();
        next.sort_unstable_by_key(|x| x.0);
        if plevel == root {
            let rebuilt = next.first().map(|x| x.1).unwrap_or([0; 64]);
            if rebuilt != func.root && !func.canaries.skip_root_check {
                // (No work is reported on failure: the caller drops the report with the error.)
                return Err(RecoveryError {
                    first_bad: first_bad.unwrap_or_else(|| "root".to_string()),
                    message: "the tree rebuilt from persisted counters does not match the on-chip root".into(),
                });
            }
            break;
        }
        // Locate the first stored node that disagrees (only needed to name it on failure,
        // but cheap to track: the stored copies must equal the rebuilt ones under strict).
        if first_bad.is_none() {
            let base_line = tree.base[plevel] >> LINE_SHIFT;
            let stored = func.image.lines_in(base_line, base_line + tree.nodes[plevel]);
            let rebuilt: FxHashMap<u64, [u8; 64]> = next.iter().copied().collect();
            let mut idxs: Vec<u64> = stored.iter().map(|l| l - base_line).chain(rebuilt.keys().copied()).collect();
            idxs.sort_unstable();
            idxs.dedup();
            for idx in idxs {
                report.nodes_read += 1;
                let have = func.image.get(base_line + idx);
                let want = rebuilt.get(&idx).copied().unwrap_or([0; 64]);
                if have != want {
                    first_bad = Some(format!("tree level {plevel} index {idx} (address {:#x})", tree.node_addr(plevel, idx)));
                    break;
                }
            }
        }
        level_blocks = next;
    }
    report.cycles = (issue_last - now).0 + report.hashes * mc.p.hash.0;
    Ok(())
}

/// Every tree level rebuilt from the persisted counter blocks: `levels[0]` the counter blocks,
/// `levels[k]` the nodes of level k below the root, `root` the rebuilt root-level bytes; each
/// sparse (a block absent is at its boot content). Empty in counting mode.
#[derive(Clone, Debug)]
pub struct RebuiltLevels {
    pub levels: Vec<FxHashMap<u64, [u8; 64]>>,
    pub root: [u8; 64],
}

impl RebuiltLevels {
    /// The rebuilt bytes of block (`level`, `index`), zeros if absent.
    pub fn block(&self, level: usize, index: u64) -> [u8; 64] { self.levels.get(level).and_then(|l| l.get(&index)).copied().unwrap_or([0; 64]) }
}

/// The rebuild of [`rebuild_and_verify`] without its check against the root register, for a
/// strategy that checks against nodes of its own (see
/// [`McOps::rebuild_levels`](crate::controller::ops::McOps::rebuild_levels)): a block for
/// which `cut(level, index)` holds enters its parent as 0.
pub fn rebuild_levels(mc: &mut SecureMc, now: Cycle, cut: &dyn Fn(usize, u64) -> bool) -> (RebuiltLevels, RecoveryReport) {
    let layout = mc.layout.clone();
    let tree = &layout.tree;
    let mut report = RecoveryReport::default();
    let Some(func) = mc.func.take() else {
        // Counting mode: the work of the baseline's counting rebuild (no bytes).
        let report = rebuild_and_verify(mc, now).expect("counting mode has nothing to fail");
        return (RebuiltLevels { levels: Vec::new(), root: [0; 64] }, report);
    };
    let first_counter_line = layout.counter_base >> LINE_SHIFT;
    let mut out = RebuiltLevels { levels: vec![FxHashMap::default(); tree.root_level()], root: [0; 64] };
    let mut issue_last = now;
    for line in func.image.lines_in(first_counter_line, first_counter_line + layout.counter_blocks) {
        let bytes = func.image.get(line);
        let page = line - first_counter_line;
        mc.counters.set_block(page, CounterBlock::decode(&bytes, mc.p.minor_bits));
        issue_last = issue_last.max(mc.device_read(line << LINE_SHIFT, TrafficClass::Counter, now));
        out.levels[0].insert(page, bytes);
        report.counter_blocks_read += 1;
    }
    let root = tree.root_level();
    for level in 0..root {
        let mut children: Vec<(u64, [u8; 64])> = out.levels[level].iter().map(|(&i, &b)| (i, b)).collect();
        children.sort_unstable_by_key(|x| x.0);
        let mut parents: FxHashMap<u64, [u8; 64]> = FxHashMap::default();
        for (index, bytes) in &children {
            let entry = if cut(level, *index) { 0 } else { func.child_entry(level, *index, bytes) };
            report.hashes += 1;
            let (_, pidx) = tree.parent(level, *index);
            set_node_entry(parents.entry(pidx).or_insert([0; 64]), tree.slot_in_parent(*index), entry);
        }
        if level + 1 == root {
            out.root = parents.get(&0).copied().unwrap_or([0; 64]);
        } else {
            out.levels[level + 1] = parents;
        }
    }
    report.cycles = (issue_last - now).0 + report.hashes * mc.p.hash.0;
    mc.func = Some(func);
    (out, report)
}
