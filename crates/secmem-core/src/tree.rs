//! Bonsai Merkle Tree geometry and the layout of secure memory in the device address space.
//!
//! A Bonsai Merkle Tree (Rogers et al., MICRO'07) covers the *counter blocks* only: data lines
//! are protected by per-line MACs keyed with their counters, so freshness of the counters is
//! all the tree must guarantee. Level 0 is the counter blocks themselves; each node of level
//! k+1 holds `arity` hashes of level-k blocks (8 x 64-bit hashes fill a 64 B node at arity 8);
//! the single node of the top level is the root, kept in an on-chip register and never in NVM.
//!
//! Height counts every level including the counter level and the root: for 8 GiB at arity 8,
//! 2 Mi counter blocks -> 2^21, 2^18, ..., 2^3, 1 -> 8 levels, the "8-level BMT" of the BMF
//! paper (Table 1). (Horus Table I says "10-level" for 32 GiB; counted the same way 32 GiB
//! gives 9 levels — the paper's count evidently includes one more level, e.g. the data/MAC
//! level. secmem reports its own count and says so.)
//!
//! Device layout, in this order, each region 64 B aligned:
//! `[ data | counter blocks | MAC blocks | tree level 1 | tree level 2 | ... ]`
//! (the root is on chip). One counter block per 4 KB page; one 64 B MAC block per 8 lines
//! (64-bit MACs).

use crate::addr::{LINE_BYTES, PAGE_BYTES};
use crate::error::ConfigError;

/// Where each region of secure memory lives in the device address space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SecureLayout {
    pub data_bytes: u64,
    pub counter_base: u64,
    pub counter_blocks: u64,
    pub mac_base: u64,
    pub mac_blocks: u64,
    /// MACs per 64 B MAC block.
    pub macs_per_block: u64,
    pub tree: TreeGeometry,
    /// First byte after the last metadata region (device capacity needed).
    pub end: u64,
}

/// The shape of the tree: nodes per level, base address of each stored level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeGeometry {
    pub arity: u64,
    /// `nodes[k]` = number of blocks at level k; level 0 = counter blocks; last = 1 (root).
    pub nodes: Vec<u64>,
    /// `base[k]` = device address of level k's first node, for 1 <= k < height-1.
    /// (`base[0]` is the counter region; the root has no address.)
    pub base: Vec<u64>,
    /// log2(arity) when the arity is a power of two: the walk up the tree then shifts
    /// instead of dividing.
    pub arity_shift: Option<u32>,
}

impl TreeGeometry {
    /// Number of levels, counter level and root included.
    pub fn height(&self) -> usize { self.nodes.len() }
    /// Index of the root level.
    pub fn root_level(&self) -> usize { self.nodes.len() - 1 }
    /// Parent (level, index) of node `index` at `level`.
    #[inline]
    pub fn parent(&self, level: usize, index: u64) -> (usize, u64) {
        match self.arity_shift {
            Some(s) => (level + 1, index >> s),
            None => (level + 1, index / self.arity),
        }
    }
    /// Which of its parent's entries node `index` is (`index % arity`), by a mask where the
    /// arity is a power of two, as [`parent`](Self::parent) shifts: the walk's verification
    /// and every parent update ask, once per node, and a 64-bit division is a slow
    /// instruction on the path.
    #[inline]
    pub fn slot_in_parent(&self, index: u64) -> usize {
        match self.arity_shift {
            Some(s) => (index & ((1 << s) - 1)) as usize,
            None => (index % self.arity) as usize,
        }
    }
    /// Device address of a stored node (level >= 1, below the root).
    #[inline]
    pub fn node_addr(&self, level: usize, index: u64) -> u64 {
        debug_assert!(level >= 1 && level < self.root_level());
        self.base[level] + index * LINE_BYTES
    }
}

impl SecureLayout {
    /// Lays out secure memory for `data_bytes` of data with a tree of `arity`.
    /// `data_bytes` must be a positive multiple of 4 KB; `arity` >= 2; `mac_bits` in 8..=64
    /// dividing 512.
    pub fn new(data_bytes: u64, arity: u64, mac_bits: u32) -> Result<SecureLayout, ConfigError> {
        if arity < 2 {
            return Err(ConfigError::new("tree.arity", format!("must be >= 2 (a tree of arity {arity} has no height)")));
        }
        if arity > 64 {
            return Err(ConfigError::new("tree.arity", format!("must be <= 64 (each child hash must fit a 64 B node), got {arity}")));
        }
        if data_bytes == 0 || !data_bytes.is_multiple_of(PAGE_BYTES) {
            return Err(ConfigError::new("memory.capacity_gib", "data capacity must be a positive multiple of 4 KB"));
        }
        if !(8..=64).contains(&mac_bits) || 512 % mac_bits != 0 {
            return Err(ConfigError::new("security.mac_bits", format!("must be 8, 16, 32 or 64, got {mac_bits}")));
        }
        let counter_blocks = data_bytes / PAGE_BYTES;
        let macs_per_block = 512 / mac_bits as u64;
        let lines = data_bytes / LINE_BYTES;
        let mac_blocks = lines.div_ceil(macs_per_block);
        let counter_base = data_bytes;
        let mac_base = counter_base + counter_blocks * LINE_BYTES;
        let mut nodes = vec![counter_blocks];
        while *nodes.last().unwrap() > 1 {
            let n = nodes.last().unwrap().div_ceil(arity);
            nodes.push(n);
        }
        if nodes.len() == 1 {
            // A single counter block: its parent is the root.
            nodes.push(1);
        }
        let mut base = vec![counter_base];
        let mut next = mac_base + mac_blocks * LINE_BYTES;
        for &n in &nodes[1..nodes.len() - 1] {
            base.push(next);
            next += n * LINE_BYTES;
        }
        Ok(SecureLayout {
            data_bytes,
            counter_base,
            counter_blocks,
            mac_base,
            mac_blocks,
            macs_per_block,
            tree: TreeGeometry { arity, nodes, base, arity_shift: arity.is_power_of_two().then(|| arity.trailing_zeros()) },
            end: next,
        })
    }

    /// Device address of the counter block of data `page`.
    #[inline]
    pub fn counter_addr(&self, page: u64) -> u64 { self.counter_base + page * LINE_BYTES }
    /// Device address of the MAC block holding data `line`'s MAC, and the MAC's slot in it.
    #[inline]
    pub fn mac_addr(&self, line: u64) -> (u64, usize) {
        let m = self.macs_per_block;
        if m.is_power_of_two() {
            // 8 or 64 per block (64- or 8-bit MACs): shift and mask rather than divide.
            (self.mac_base + (line >> m.trailing_zeros()) * LINE_BYTES, (line & (m - 1)) as usize)
        } else {
            (self.mac_base + (line / m) * LINE_BYTES, (line % m) as usize)
        }
    }
    /// Metadata bytes as a fraction of data bytes.
    pub fn overhead(&self) -> f64 { (self.end - self.data_bytes) as f64 / self.data_bytes as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;
    const GIB: u64 = 1 << 30;

    #[test]
    fn eight_gib_arity_eight_is_the_bmf_8_level_tree() {
        let l = SecureLayout::new(8 * GIB, 8, 64).unwrap();
        assert_eq!(l.tree.height(), 8);
        assert_eq!(l.tree.nodes[0], 2 * 1024 * 1024);
        assert_eq!(*l.tree.nodes.last().unwrap(), 1);
    }

    #[test]
    fn thirty_two_gib_arity_eight_has_nine_levels() {
        let l = SecureLayout::new(32 * GIB, 8, 64).unwrap();
        assert_eq!(l.tree.nodes, vec![1 << 23, 1 << 20, 1 << 17, 1 << 14, 1 << 11, 256, 32, 4, 1]);
    }

    #[test]
    fn non_power_of_arity_rounds_levels_up() {
        let l = SecureLayout::new(10 * PAGE_BYTES, 4, 64).unwrap();
        assert_eq!(l.tree.nodes, vec![10, 3, 1]);
        assert_eq!(l.tree.parent(0, 9), (1, 2));
    }

    #[test]
    fn regions_do_not_overlap_and_are_in_order() {
        let l = SecureLayout::new(GIB, 8, 64).unwrap();
        assert_eq!(l.counter_base, GIB);
        assert_eq!(l.mac_base, GIB + GIB / 64);
        assert_eq!(l.tree.base[1], l.mac_base + GIB / 8);
        assert_eq!(l.tree.node_addr(1, 0), l.tree.base[1]);
        let last = l.tree.root_level() - 1;
        assert_eq!(l.end, l.tree.base[last] + l.tree.nodes[last] * 64);
        assert_eq!(l.mac_addr(9), (l.mac_base + 64, 1));
        assert!(l.overhead() > 0.14 && l.overhead() < 0.145);
    }

    #[test]
    fn arity_zero_and_one_are_rejected_naming_the_field() {
        for a in [0, 1] {
            assert_eq!(SecureLayout::new(GIB, a, 64).unwrap_err().field, "tree.arity");
        }
        assert_eq!(SecureLayout::new(GIB, 8, 0).unwrap_err().field, "security.mac_bits");
        assert_eq!(SecureLayout::new(100, 8, 64).unwrap_err().field, "memory.capacity_gib");
    }

    #[test]
    fn parent_at_a_non_power_of_two_arity_is_index_div_arity_one_level_up() {
        // Arity 3 takes the division path (no shift); configs accept any arity in 2..=64.
        let l = SecureLayout::new(GIB, 3, 64).unwrap();
        assert_eq!(l.tree.arity_shift, None);
        assert_eq!(l.tree.parent(0, 0), (1, 0));
        assert_eq!(l.tree.parent(0, 8), (1, 2));
        assert_eq!(l.tree.parent(2, 9), (3, 3));
        assert_eq!(l.tree.parent(1, 10), (2, 3));
    }

    #[test]
    fn slot_in_parent_is_index_mod_arity_at_every_arity() {
        // Powers of two take the mask, the others the division: both must agree with `%`.
        for arity in [2, 3, 5, 8, 12, 16, 64] {
            let l = SecureLayout::new(GIB, arity, 64).unwrap();
            for index in [0, 1, 2, 7, 8, 9, 63, 64, 65, 1000, 123_457] {
                assert_eq!(l.tree.slot_in_parent(index), (index % arity) as usize, "arity {arity}, index {index}");
            }
        }
    }
}
