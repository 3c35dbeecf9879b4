//! The forest of a Bonsai Merkle Forest (MICRO'21 sections 3-5): which tree nodes are
//! persistent roots, held in the non-volatile metadata cache (nvMC), where each leaf's update
//! stops, and the prune and merge that change the roots, step by step so that a crash can
//! fall between any two steps.
//!
//! # Model
//!
//! * The tree is the controller's Bonsai Merkle Tree: level 0 the counter blocks (the
//!   leaves), the top level the original root (the root register).
//! * The **persistent root set** (PRS) is the nvMC entries marked `root`. A leaf's update
//!   walks up to the *first* PRS member on its path and stops there (the edge above a root is
//!   cut). Covering (Invariant 1) asks that every leaf meets one; no-leaf overlap (Invariant 2)
//!   then holds by construction, *provided a root's hash never feeds its parent*: a node's
//!   hash, wherever it is computed (updates, recovery), takes a child that is a PRS member as
//!   a fixed zero. That is the cut edge of section 4.1, and it is what lets recovery regenerate
//!   every non-root node from its leaves and check it against the roots.
//! * **Static** forests pin one whole level (the lowest that fits) and never change.
//! * **Dynamic** forests start from the original root alone, pinned in the nvMC for good, and
//!   change at every root evaluation interval (REI, in PM writes): the nvMC counters decay (a
//!   shift), then at most one merge (to free an entry, Algorithm 2) and one prune
//!   (Algorithm 1) run.
//!
//! # Crash atomicity (section 5.3)
//!
//! A prune or merge is a list of [`Step`]s, each one persistent write of nvMC state (or one
//! update of a root's data). The E (evictable) and L (locked) bits mark one in flight:
//!
//! * **Prune** of root P into its child C: C is written to a free entry with E cleared on C
//!   and P; P's E is set; then P's edge to its first persistent ancestor A is restored as a
//!   merge of P (below); last C's E is set.
//! * **Merge** of root M into A: M's L is set (updates to M stall, so M's hash is fixed); A
//!   becomes a PRS member if it was the pinned original root outside it; the path from M to A
//!   is recomputed with M's hash included and A's entry updated; M is invalidated, which
//!   clears L with it. The paper clears L before invalidating; secmem does both in one write,
//!   because in between A would already include M while M is still a root, a state recovery
//!   cannot tell from tampering.
//! * **Recovery** ([`Forest::finish_recovery`]) rolls every merge with L set forward: A's slot on the
//!   path to M may hold either M's zero (the update did not happen) or M's hash (it did); both
//!   are states only the chip could have written, so either verifies, and recovery then
//!   finishes the merge. E bits left clear are set: a prune cut short leaves P and C both
//!   roots, a valid forest.
//!
//! The forest does not compute hashes itself: [`ForestOps`] does the tree work each step
//! needs (the controller's timing in a run, real values in the tests' model).

use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};

/// A tree node: `level` (0 = counter blocks) and `index` within the level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    pub level: usize,
    pub index: u64,
}

impl Node {
    pub const fn new(level: usize, index: u64) -> Node { Node { level, index } }
    /// One word, for hashing.
    #[inline]
    fn key(self) -> u64 { (self.level as u64) << 58 | self.index }
}

/// The tree's shape: arity and nodes per level (level 0 = leaves, last = the original root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    pub arity: u64,
    pub nodes: Vec<u64>,
}

impl Shape {
    /// The original root's level.
    pub fn root_level(&self) -> usize { self.nodes.len() - 1 }
    pub fn root(&self) -> Node { Node::new(self.root_level(), 0) }
    pub fn parent(&self, n: Node) -> Node { Node::new(n.level + 1, n.index / self.arity) }
    /// `leaf`'s ancestor at `level`.
    pub fn ancestor(&self, leaf: u64, level: usize) -> Node { Node::new(level, leaf / self.arity.pow(level as u32)) }
    /// The children of `n` (level >= 1) that exist.
    pub fn children(&self, n: Node) -> impl Iterator<Item = Node> {
        let first = n.index * self.arity;
        let last = (first + self.arity).min(self.nodes[n.level - 1]);
        let level = n.level - 1;
        (first..last).map(move |i| Node::new(level, i))
    }
    /// Whether `a` is a proper ancestor of `b`.
    pub fn is_ancestor(&self, a: Node, b: Node) -> bool { a.level > b.level && b.index / self.arity.pow((a.level - b.level) as u32) == a.index }
    /// The lowest level whose nodes all fit in `entries` nvMC entries (a static forest's).
    pub fn static_level(&self, entries: u64) -> usize { (1..self.nodes.len()).find(|&l| self.nodes[l] <= entries).unwrap_or(self.root_level()) }
}

/// One nvMC line: a tree node's tag and state. `node`, `root`, `e` and `l` are persistent
/// (battery-backed with the line's data); `counter` is volatile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub node: Node,
    /// A member of the persistent root set. Only the pinned original root may be present
    /// without being one.
    pub root: bool,
    /// Evictable (section 5.3): cleared on a prune's target and new root until it completes.
    pub e: bool,
    /// Locked (section 5.3): a merge target whose edge is being restored; updates to it stall.
    pub l: bool,
    /// Access counter (6 bits by default), shifted right at each REI.
    pub counter: u8,
}

/// Static or dynamic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Static,
    Dynamic,
}

/// The tree work a step needs, done by the caller: in a run, the controller's fetches and
/// hashes (timing and counts); in the tests' model, real values.
pub trait ForestOps {
    /// `node`, a non-root node just below a root, becomes a root: its data is fetched
    /// (verified against the root above it) into the nvMC.
    fn load(&mut self, node: Node);
    /// The edge from root `from` to its ancestor `to` is restored: the nodes between are
    /// recomputed with `from`'s hash included and `to`'s entry is updated.
    fn restore_path(&mut self, from: Node, to: Node);
}

/// One persistent step of a prune or merge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Write `node` into a free entry as a root with E clear (a prune's new root, or one of
    /// the original root's children).
    AddRoot { node: Node },
    /// Set or clear E on `node`'s entry.
    SetE { node: Node, e: bool },
    /// Set L on `node`'s entry (a merge starts).
    Lock { node: Node },
    /// `node` (the pinned original root) joins or leaves the PRS.
    SetRoot { node: Node, root: bool },
    /// Recompute the path from `from` to `to` and update `to`'s entry.
    RestorePath { from: Node, to: Node },
    /// Invalidate `node`'s entry (clearing its L).
    Invalidate { node: Node },
}

/// Counts of the forest's work.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForestStats {
    /// Updates by height: `heights[h]` counts updates whose path had `h` levels, the leaf and
    /// its root included (the original BMT's full height is its level count).
    pub heights: Vec<u64>,
    pub evaluations: u64,
    pub prunes: u64,
    pub root_prunes: u64,
    pub merges: u64,
    /// Prunes given up because no entry could be freed for them.
    pub prunes_without_room: u64,
}

impl ForestStats {
    pub fn avg_height(&self) -> f64 {
        let n: u64 = self.heights.iter().sum();
        if n == 0 {
            return 0.0;
        }
        self.heights.iter().enumerate().map(|(h, &c)| h as f64 * c as f64).sum::<f64>() / n as f64
    }
}

/// Parameters of a dynamic forest's root evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evaluation {
    /// PM writes between evaluations.
    pub rei_writes: u64,
    /// A root is a prune candidate when its counter exceeds this.
    pub prune_threshold: u8,
    /// Counters saturate here (2^bits - 1).
    pub counter_max: u8,
}

/// The persistent root set in its nvMC, and its evaluation.
#[derive(Clone, Debug)]
pub struct Forest {
    shape: Shape,
    kind: Kind,
    eval: Evaluation,
    /// The entries in use by slot (a fully associative cache's lines: the slot order is the
    /// "first in the nvMC" of the algorithms' ties), and the free slots; work per evaluation
    /// is in the entries in use, not the capacity (a 16 MB nvMC has 262,144 lines).
    slots: BTreeMap<usize, Entry>,
    free: BTreeSet<usize>,
    capacity: usize,
    index: FxHashMap<u64, usize>,
    /// Which nodes are PRS members, a bit per node and level (the membership test every
    /// update makes at each level of its path, without hashing).
    root_bits: Vec<Vec<u64>>,
    /// The BMT cache's per-line access counters of non-root nodes (section 5.2), by level and
    /// index (dynamic forests; level 0 and the root level empty): each with the evaluation at
    /// which it was last brought up to date, so that the decay at each REI is applied when a
    /// counter is next read or bumped (`value >> evaluations since`), not by a sweep.
    node_counters: Vec<Vec<(u8, u32)>>,
    writes_since_eval: u64,
    pub stats: ForestStats,
}

/// Why a forest cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForestError {
    /// No nvMC entry at all.
    NoEntry,
    /// A static forest's level has more nodes than the nvMC has entries.
    LevelDoesNotFit { level: usize, nodes: u64, entries: u64 },
    /// A static level outside 1..=root.
    NoSuchLevel { level: usize, root_level: usize },
}

impl std::fmt::Display for ForestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ForestError::NoEntry => write!(f, "the nvMC must hold at least one 64 B node"),
            ForestError::LevelDoesNotFit { level, nodes, entries } => write!(f, "level {level}'s {nodes} nodes do not fit the nvMC's {entries} entries"),
            ForestError::NoSuchLevel { level, root_level } => write!(f, "level {level} is not a tree level above the counters (1..={root_level})"),
        }
    }
}

impl Forest {
    /// A static forest over `shape` with `level`'s nodes as its roots (`None`: the lowest level
    /// that fits `entries`).
    pub fn new_static(shape: Shape, entries: u64, level: Option<usize>) -> Result<Forest, ForestError> {
        if entries == 0 {
            return Err(ForestError::NoEntry);
        }
        let level = level.unwrap_or_else(|| shape.static_level(entries));
        if level == 0 || level > shape.root_level() {
            return Err(ForestError::NoSuchLevel { level, root_level: shape.root_level() });
        }
        if shape.nodes[level] > entries {
            return Err(ForestError::LevelDoesNotFit { level, nodes: shape.nodes[level], entries });
        }
        let mut f = Forest::empty(shape, Kind::Static, entries, Evaluation { rei_writes: u64::MAX, prune_threshold: u8::MAX, counter_max: 0 });
        for i in 0..f.shape.nodes[level] {
            f.insert(Entry { node: Node::new(level, i), root: true, e: true, l: false, counter: 0 });
        }
        Ok(f)
    }

    /// A dynamic forest: the original root alone, pinned.
    pub fn new_dynamic(shape: Shape, entries: u64, eval: Evaluation) -> Result<Forest, ForestError> {
        if entries == 0 {
            return Err(ForestError::NoEntry);
        }
        let mut f = Forest::empty(shape, Kind::Dynamic, entries, eval);
        let root = f.shape.root();
        f.insert(Entry { node: root, root: true, e: true, l: false, counter: 0 });
        Ok(f)
    }

    fn empty(shape: Shape, kind: Kind, entries: u64, eval: Evaluation) -> Forest {
        let heights = vec![0; shape.nodes.len() + 1];
        // (Level 0, the counter blocks, holds no root.)
        let root_bits = shape.nodes.iter().enumerate().map(|(l, &n)| if l == 0 { Vec::new() } else { vec![0u64; n.div_ceil(64) as usize] }).collect();
        let root_level = shape.root_level();
        let node_counters = match kind {
            Kind::Dynamic => shape.nodes.iter().enumerate().map(|(l, &n)| if l == 0 || l == root_level { Vec::new() } else { vec![(0, 0); n as usize] }).collect(),
            Kind::Static => Vec::new(),
        };
        Forest {
            shape,
            kind,
            eval,
            slots: BTreeMap::new(),
            free: (0..entries as usize).collect(),
            capacity: entries as usize,
            index: FxHashMap::default(),
            root_bits,
            node_counters,
            writes_since_eval: 0,
            stats: ForestStats { heights, ..Default::default() },
        }
    }

    pub fn shape(&self) -> &Shape { &self.shape }
    pub fn kind(&self) -> Kind { self.kind }
    pub fn capacity(&self) -> usize { self.capacity }
    /// Entries in use (the pinned original root included).
    pub fn occupied(&self) -> usize { self.index.len() }

    fn insert(&mut self, e: Entry) {
        let slot = self.free.pop_first().expect("a free nvMC entry");
        self.slots.insert(slot, e);
        self.index.insert(e.node.key(), slot);
        self.set_root_bit(e.node, e.root);
    }

    fn set_root_bit(&mut self, n: Node, root: bool) {
        let w = &mut self.root_bits[n.level][(n.index / 64) as usize];
        let bit = 1u64 << (n.index % 64);
        if root {
            *w |= bit;
        } else {
            *w &= !bit;
        }
    }

    /// A non-root node's access counter now (its decay applied).
    fn node_counter(&self, n: Node) -> u8 {
        let (c, stamp) = self.node_counters[n.level][n.index as usize];
        let since = (self.stats.evaluations as u32).wrapping_sub(stamp);
        if since >= 8 { 0 } else { c >> since }
    }

    fn set_node_counter(&mut self, n: Node, v: u8) { self.node_counters[n.level][n.index as usize] = (v, self.stats.evaluations as u32); }

    /// `node`'s nvMC entry, if present.
    pub fn entry(&self, node: Node) -> Option<&Entry> { self.index.get(&node.key()).map(|s| &self.slots[s]) }

    fn entry_mut(&mut self, node: Node) -> &mut Entry {
        let s = self.index[&node.key()];
        self.slots.get_mut(&s).expect("indexed entry")
    }

    /// Whether `node` is a PRS member (its hash never feeds its parent).
    #[inline]
    pub fn is_root(&self, node: Node) -> bool {
        self.root_bits.get(node.level).and_then(|l| l.get((node.index / 64) as usize)).is_some_and(|w| w >> (node.index % 64) & 1 == 1)
    }

    /// Every entry in use.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> { self.slots.values() }

    /// The root that covers `leaf` (the first PRS member above it), if any.
    #[inline]
    pub fn covering_root(&self, leaf: u64) -> Option<Node> {
        let mut idx = leaf;
        for level in 1..=self.shape.root_level() {
            idx /= self.shape.arity;
            if self.root_bits[level][(idx / 64) as usize] >> (idx % 64) & 1 == 1 {
                return Some(Node::new(level, idx));
            }
        }
        None
    }

    /// The first ancestor of `node` present in the nvMC (the pinned original root at worst).
    pub fn first_persistent_ancestor(&self, node: Node) -> Option<Node> {
        let mut n = node;
        while n.level < self.shape.root_level() {
            n = self.shape.parent(n);
            if self.entry(n).is_some() {
                return Some(n);
            }
        }
        None
    }

    /// A PM write changed `leaf`'s counter block: returns the root its update stops at, and
    /// counts the update (its height, the root's and the path's access counters).
    #[inline]
    pub fn record_update(&mut self, leaf: u64) -> Node {
        let root = self.covering_root(leaf).expect("Invariant 1: every leaf is covered");
        self.stats.heights[root.level + 1] += 1;
        if self.kind == Kind::Dynamic {
            let max = self.eval.counter_max;
            let e = self.entry_mut(root);
            e.counter = e.counter.saturating_add(1).min(max);
            let mut idx = leaf;
            for level in 1..root.level {
                idx /= self.shape.arity;
                let n = Node::new(level, idx);
                let c = self.node_counter(n);
                self.set_node_counter(n, c.saturating_add(1).min(max));
            }
        }
        root
    }

    /// Counts a PM write; returns true when it ends an REI (the caller then plans and runs
    /// the evaluation: [`plan_evaluation`](Self::plan_evaluation), [`apply`](Self::apply)).
    #[inline]
    pub fn count_write(&mut self) -> bool {
        if self.kind == Kind::Static {
            return false;
        }
        self.writes_since_eval += 1;
        if self.writes_since_eval >= self.eval.rei_writes {
            self.writes_since_eval = 0;
            return true;
        }
        false
    }

    /// The steps of this REI's evaluation: decays the counters (volatile state, no step),
    /// then picks at most one merge and one prune (Algorithms 1 and 2).
    pub fn plan_evaluation(&mut self) -> Vec<Step> {
        self.stats.evaluations += 1;
        for e in self.slots.values_mut() {
            e.counter >>= 1;
        }
        // (Node counters decay lazily: evaluations is their clock.)
        let Some(p) = self.prune_target() else { return Vec::new() };
        let root = self.shape.root();
        // Entries the prune writes: every child not yet a root (original root), else one.
        let needed = if p == root { self.shape.children(p).filter(|&c| !self.is_root(c)).count() } else { 1 };
        let free = self.capacity() - self.occupied();
        let mut steps = Vec::new();
        let mut freed = 0;
        if free < needed {
            if let Some(m) = self.merge_target(p) {
                steps.extend(self.merge_steps(m));
                self.stats.merges += 1;
                freed = 1;
            }
        }
        if free + freed < needed {
            self.stats.prunes_without_room += 1;
            return steps;
        }
        self.stats.prunes += 1;
        if p == root {
            self.stats.root_prunes += 1;
            let new: Vec<Node> = self.shape.children(p).filter(|&c| !self.is_root(c)).collect();
            steps.extend(new.iter().map(|&node| Step::AddRoot { node }));
            steps.push(Step::SetE { node: p, e: false });
            steps.push(Step::SetRoot { node: p, root: false });
            steps.extend(new.iter().map(|&node| Step::SetE { node, e: true }));
            steps.push(Step::SetE { node: p, e: true });
        } else {
            let c = self.hottest_child(p);
            steps.push(Step::AddRoot { node: c });
            steps.push(Step::SetE { node: p, e: false });
            steps.push(Step::SetE { node: p, e: true });
            steps.extend(self.merge_steps(p));
            steps.push(Step::SetE { node: c, e: true });
        }
        steps
    }

    /// Algorithm 1, lines 1-4: the root with the largest counter above the threshold (the
    /// first in the nvMC on a tie), if any.
    fn prune_target(&self) -> Option<Node> {
        let mut best: Option<&Entry> = None;
        for e in self.slots.values() {
            // A root at level 1 has counter blocks for children, and a root whose children are
            // all roots already has no child to hand its place to: neither can be pruned.
            if e.root && e.e && !e.l && e.node.level > 1 && e.counter > self.eval.prune_threshold && best.is_none_or(|b| e.counter > b.counter) && self.shape.children(e.node).any(|c| !self.is_root(c)) {
                best = Some(e);
            }
        }
        best.map(|e| e.node)
    }

    /// Algorithm 2: the root with the smallest counter, the lowest level on a tie, the first
    /// in the nvMC after that; never the original root, `prune` or an entry in flight. The
    /// merge runs before the prune it makes room for, so neither may undo the other's plan:
    /// never an ancestor of `prune` (its merge would move the ancestor `prune`'s own merge goes
    /// to), and, when `prune` is the original root, never one of its children (merged into the
    /// root that is about to leave the set, its leaves would have no root).
    fn merge_target(&self, prune: Node) -> Option<Node> {
        let root = self.shape.root();
        let mut best: Option<&Entry> = None;
        for e in self.slots.values() {
            if !e.root || !e.e || e.l || e.node == root || e.node == prune || self.shape.is_ancestor(e.node, prune) || (prune == root && e.node.level + 1 == root.level) {
                continue;
            }
            if best.is_none_or(|b| (e.counter, e.node.level) < (b.counter, b.node.level)) {
                best = Some(e);
            }
        }
        best.map(|e| e.node)
    }

    /// Algorithm 1, line 8: the child of `p` that is not a root yet with the largest
    /// BMT-cache counter (the first on a tie).
    fn hottest_child(&self, p: Node) -> Node {
        let mut best = None;
        for c in self.shape.children(p).filter(|&c| !self.is_root(c)) {
            let n = self.node_counter(c);
            if best.is_none_or(|(_, b)| n > b) {
                best = Some((c, n));
            }
        }
        best.expect("a prune target has a child that is not a root").0
    }

    /// The steps that merge root `m` into its first persistent ancestor.
    fn merge_steps(&self, m: Node) -> Vec<Step> {
        let a = self.first_persistent_ancestor(m).expect("the original root is pinned");
        let mut steps = vec![Step::Lock { node: m }];
        if !self.is_root(a) {
            steps.push(Step::SetRoot { node: a, root: true });
        }
        steps.push(Step::RestorePath { from: m, to: a });
        steps.push(Step::Invalidate { node: m });
        steps
    }

    /// Carries out one step (one persistent nvMC write, or one root update).
    pub fn apply(&mut self, step: Step, ops: &mut dyn ForestOps) {
        match step {
            Step::AddRoot { node } => {
                ops.load(node);
                if self.kind == Kind::Dynamic && node.level < self.shape.root_level() {
                    self.set_node_counter(node, 0);
                }
                self.insert(Entry { node, root: true, e: false, l: false, counter: 0 });
            }
            Step::SetE { node, e } => self.entry_mut(node).e = e,
            Step::Lock { node } => self.entry_mut(node).l = true,
            Step::SetRoot { node, root } => {
                self.entry_mut(node).root = root;
                self.set_root_bit(node, root);
            }
            Step::RestorePath { from, to } => ops.restore_path(from, to),
            Step::Invalidate { node } => {
                let s = self.index.remove(&node.key()).expect("an entry to invalidate");
                self.slots.remove(&s);
                self.free.insert(s);
                self.set_root_bit(node, false);
            }
        }
    }

    /// Power loss: the volatile counters and the progress of an evaluation are lost; the
    /// entries' tags, root, E and L bits (and data) survive.
    pub fn crash(&mut self) {
        for e in self.slots.values_mut() {
            e.counter = 0;
        }
        for level in &mut self.node_counters {
            level.fill((0, 0));
        }
        self.writes_since_eval = 0;
    }

    /// The merges a crash left in flight: each root with L set and the ancestor it merges
    /// into. Recovery checks their ancestors' slots against both states, then calls
    /// [`finish_recovery`](Self::finish_recovery).
    pub fn merges_in_flight(&self) -> Vec<(Node, Node)> {
        self.entries().filter(|e| e.l).map(|e| (e.node, self.first_persistent_ancestor(e.node).expect("the original root is pinned"))).collect()
    }

    /// After a crash and a verified recovery: finishes each merge in flight and makes every
    /// entry evictable again (a prune cut short leaves both its roots).
    pub fn finish_recovery(&mut self, ops: &mut dyn ForestOps) {
        for (m, a) in self.merges_in_flight() {
            if !self.is_root(a) {
                self.apply(Step::SetRoot { node: a, root: true }, ops);
            }
            self.apply(Step::RestorePath { from: m, to: a }, ops);
            self.apply(Step::Invalidate { node: m }, ops);
        }
        for e in self.slots.values_mut() {
            e.e = true;
        }
    }

    /// Invariant 1 (covering): every leaf is covered by a root. Returns the first leaf that is
    /// not. Checks each leaf's path, so use it on small trees (tests).
    pub fn uncovered_leaf(&self) -> Option<u64> { (0..self.shape.nodes[0]).find(|&leaf| self.covering_root(leaf).is_none()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustc_hash::FxHashMap;

    /// 512 leaves at arity 8: levels of 512, 64, 8 and 1 nodes (root level 3).
    fn shape() -> Shape { Shape { arity: 8, nodes: vec![512, 64, 8, 1] } }

    fn eval() -> Evaluation { Evaluation { rei_writes: 8, prune_threshold: 1, counter_max: 63 } }

    /// Node values over a forest: the tests' stand-in for the tree's hashes, with the cut-edge
    /// rule (a root child counts as zero) and each nvMC entry's data (one word per child).
    #[derive(Clone, Default)]
    struct Model {
        leaves: Vec<u64>,
        data: FxHashMap<Node, Vec<u64>>,
        forest_roots: Vec<Node>,
    }

    /// A mixing function standing in for the tree hash (a model, not cryptography).
    fn mix(n: Node, words: &[u64]) -> u64 {
        let mut h = (n.level as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ n.index.wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
        for &w in words {
            h = (h ^ w).wrapping_mul(0x1000_0000_01B3).rotate_left(29);
        }
        h
    }

    impl Model {
        fn new(f: &Forest) -> Model {
            let mut m = Model { leaves: (0..f.shape().nodes[0]).map(|i| i * 7 + 1).collect(), ..Default::default() };
            m.sync(f);
            for e in f.entries().copied().collect::<Vec<_>>() {
                let d = m.fresh_data(f, e.node, None);
                m.data.insert(e.node, d);
            }
            m
        }
        fn sync(&mut self, f: &Forest) { self.forest_roots = f.entries().filter(|e| e.root).map(|e| e.node).collect(); }
        fn is_root(&self, n: Node) -> bool { self.forest_roots.contains(&n) }
        /// A node's value as its parent sees it; `include` is a root whose edge counts.
        fn value(&self, f: &Forest, n: Node, include: Option<Node>) -> u64 {
            if n.level == 0 {
                return self.leaves[n.index as usize];
            }
            if self.is_root(n) && include != Some(n) {
                return 0;
            }
            let words: Vec<u64> = if self.is_root(n) { self.root_words(f, n) } else { f.shape().children(n).map(|c| self.value(f, c, include)).collect() };
            mix(n, &words)
        }
        /// A root's data as it hashes: root children as zero.
        fn root_words(&self, f: &Forest, n: Node) -> Vec<u64> {
            let d = &self.data[&n];
            f.shape().children(n).enumerate().map(|(i, c)| if self.is_root(c) { 0 } else { d[i] }).collect()
        }
        fn fresh_data(&self, f: &Forest, n: Node, include: Option<Node>) -> Vec<u64> { f.shape().children(n).map(|c| self.value(f, c, include)).collect() }
        /// A write to `leaf`: its value changes and its update stops at its root.
        fn write(&mut self, f: &mut Forest, leaf: u64) {
            self.leaves[leaf as usize] = self.leaves[leaf as usize].wrapping_mul(31).wrapping_add(leaf + 1);
            let root = f.record_update(leaf);
            let child = f.shape().ancestor(leaf, root.level - 1);
            let v = self.value(f, child, None);
            let slot = (child.index % f.shape().arity) as usize;
            self.data.get_mut(&root).unwrap()[slot] = v;
        }
        /// Recovery's check: every root's slot of a non-root child matches that child
        /// regenerated from the leaves; on the path to a merge in flight, with or without the
        /// merging root. Returns the first root that fails.
        fn verify(&mut self, f: &Forest) -> Result<(), Node> {
            self.sync(f);
            let merging = f.merges_in_flight();
            for e in f.entries().filter(|e| e.root || e.l) {
                for (i, c) in f.shape().children(e.node).enumerate() {
                    if c.level > 0 && self.is_root(c) {
                        continue;
                    }
                    let got = self.data[&e.node][i];
                    let ok = got == self.value(f, c, None) || merging.iter().any(|&(m, a)| a == e.node && got == self.value(f, c, Some(m)));
                    if !ok {
                        return Err(e.node);
                    }
                }
            }
            Ok(())
        }
    }

    /// The model's side of each step, applied with the forest's.
    struct Ops<'a> {
        model: &'a mut Model,
        forest_view: Forest,
    }

    impl ForestOps for Ops<'_> {
        fn load(&mut self, node: Node) {
            let d = self.model.fresh_data(&self.forest_view, node, None);
            self.model.data.insert(node, d);
        }
        fn restore_path(&mut self, from: Node, to: Node) {
            let f = &self.forest_view;
            let child = Node::new(to.level - 1, from.index / f.shape().arity.pow((to.level - 1 - from.level) as u32));
            let v = self.model.value(f, child, Some(from));
            let slot = (child.index % f.shape().arity) as usize;
            self.model.data.get_mut(&to).unwrap()[slot] = v;
        }
    }

    /// Applies `step` to the forest and the model.
    fn apply(f: &mut Forest, m: &mut Model, step: Step) {
        m.sync(f);
        let mut ops = Ops { model: m, forest_view: f.clone() };
        f.apply(step, &mut ops);
        m.sync(f);
    }

    /// A seeded stream of leaves, 90% of them in one hot eighth of memory.
    fn hot_leaves(seed: u64, n: usize) -> Vec<u64> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if x % 10 < 9 { 64 + x % 64 } else { x % 512 }
            })
            .collect()
    }

    #[test]
    fn a_static_forest_pins_the_lowest_level_that_fits_and_refuses_one_that_does_not() {
        let f = Forest::new_static(shape(), 8, None).unwrap();
        assert_eq!((f.occupied(), f.covering_root(100)), (8, Some(Node::new(2, 1))));
        assert_eq!(Forest::new_static(shape(), 64, None).unwrap().covering_root(100), Some(Node::new(1, 12)));
        assert_eq!(Forest::new_static(shape(), 1, None).unwrap().covering_root(100), Some(Node::new(3, 0)), "one entry: the original root");
        assert_eq!(Forest::new_static(shape(), 8, Some(1)).unwrap_err(), ForestError::LevelDoesNotFit { level: 1, nodes: 64, entries: 8 });
        assert_eq!(Forest::new_static(shape(), 0, None).unwrap_err(), ForestError::NoEntry);
        assert!(matches!(Forest::new_dynamic(shape(), 0, eval()), Err(ForestError::NoEntry)));
        assert_eq!(Forest::new_static(shape(), 8, None).unwrap().uncovered_leaf(), None);
    }

    #[test]
    fn a_dynamic_forest_lowers_the_update_height_of_hot_leaves_within_its_entries() {
        // Room for the original root, its 8 children and the hot region's 8 level-1 nodes.
        let mut f = Forest::new_dynamic(shape(), 20, eval()).unwrap();
        let mut m = Model::new(&f);
        for leaf in hot_leaves(7, 4000) {
            m.write(&mut f, leaf);
            if f.count_write() {
                for step in f.plan_evaluation() {
                    apply(&mut f, &mut m, step);
                }
            }
            assert!(f.occupied() <= 20);
        }
        let s = f.stats.clone();
        assert!(s.prunes > 0 && s.root_prunes > 0, "{s:?}");
        // The full tree's updates have 4 levels; the hot leaves' end at level 1 (2 levels).
        assert!(s.avg_height() < 2.6, "{s:?}");
        assert_eq!(f.covering_root(100).map(|r| r.level), Some(1), "a hot leaf's root sits just above it");
        assert_eq!(f.uncovered_leaf(), None);
        assert_eq!(m.verify(&f), Ok(()));
    }

    #[test]
    fn a_crash_between_any_two_steps_of_prune_and_merge_keeps_every_leaf_covered_and_recovery_verifies() {
        let mut f = Forest::new_dynamic(shape(), 12, eval()).unwrap();
        let mut m = Model::new(&f);
        let mut crashes = 0;
        for leaf in hot_leaves(11, 1500) {
            m.write(&mut f, leaf);
            if !f.count_write() {
                continue;
            }
            let steps = f.plan_evaluation();
            for k in 0..=steps.len() {
                let (mut cf, mut cm) = (f.clone(), m.clone());
                for &step in &steps[..k] {
                    apply(&mut cf, &mut cm, step);
                }
                cf.crash();
                assert_eq!(cf.uncovered_leaf(), None, "crash after step {k} of {steps:?}");
                assert_eq!(cm.verify(&cf), Ok(()), "crash after step {k} of {steps:?}");
                let mut ops = Ops { model: &mut cm, forest_view: cf.clone() };
                cf.finish_recovery(&mut ops);
                assert!(cf.merges_in_flight().is_empty() && cf.entries().all(|e| e.e));
                assert_eq!(cm.verify(&cf), Ok(()), "after finishing, crash after step {k}");
                crashes += 1;
            }
            for step in steps {
                apply(&mut f, &mut m, step);
            }
        }
        assert!(crashes > 200 && f.stats.merges > 0, "{crashes} crashes, {:?}", f.stats);
    }

    #[test]
    fn recovery_fails_when_a_leaf_changed_without_its_update_or_a_merge_skips_its_path() {
        let mut f = Forest::new_dynamic(shape(), 12, eval()).unwrap();
        let mut m = Model::new(&f);
        for leaf in hot_leaves(3, 400) {
            m.write(&mut f, leaf);
            if f.count_write() {
                for step in f.plan_evaluation() {
                    apply(&mut f, &mut m, step);
                }
            }
        }
        assert_eq!(m.verify(&f), Ok(()));
        // Tampering: a counter block changed in NVM, no update reached its root.
        let mut t = m.clone();
        t.leaves[100] ^= 1;
        assert!(t.verify(&f).is_err());
        // A merge that invalidates its root without restoring the path first.
        let target = f.entries().find(|e| e.root && e.node != f.shape().root()).unwrap().node;
        let (mut bf, mut bm) = (f.clone(), m.clone());
        let a = bf.first_persistent_ancestor(target).unwrap();
        if !bf.is_root(a) {
            apply(&mut bf, &mut bm, Step::SetRoot { node: a, root: true });
        }
        apply(&mut bf, &mut bm, Step::Invalidate { node: target });
        assert!(bm.verify(&bf).is_err(), "the ancestor still holds the merged root's zero");
        // Invalidating a root whose leaves have no other root above: a leaf uncovered.
        let mut st = Forest::new_static(shape(), 8, None).unwrap();
        let mut sm = Model::new(&st);
        apply(&mut st, &mut sm, Step::Invalidate { node: Node::new(2, 3) });
        assert_eq!(st.uncovered_leaf(), Some(3 * 64));
    }
}
