//! D-Shield's Region Table (section V-B1, Fig. 5): for each data namespace of the drive, where
//! its data lies and where its security metadata lies in the metadata namespace
//! (`nvme-create-mdns`). Each namespace has its own CMAC blocks and its own Merkle tree, whose
//! top node the DIE keeps on chip; the DIE's two caches are shared by all of them.
//!
//! Addresses are the drive's 512 B sectors. A namespace starts on a whole GiB, so its CMAC
//! groups are aligned: CMAC block `c` covers drive sectors `32c..32c + 32` whatever namespace
//! holds them. A tree node is named by its level and `(namespace << 40) | index in its level`,
//! so nodes of different namespaces never share a name (or a hash: hashes bind the name).
//!
//! Within a namespace's metadata region: its CMAC blocks, then its tree level by level from the
//! leaves' parents up (the top node is not stored).

use super::{MetaBlock, BLOCKS_PER_CMAC, TREE_ARITY};

/// Sectors per GiB.
const GIB: u64 = (1 << 30) / 512;
/// Bits of a node's index within its level (the namespace is above).
const LOCAL_BITS: u32 = 40;

/// The name of node `local` (in its level) of namespace `r`'s tree.
fn node_name(r: usize, local: u64) -> u64 { ((r as u64) << LOCAL_BITS) | local }

/// One entry of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// The NVMe namespace ID.
    pub nsid: u32,
    /// The namespace's data: its first sector and its length.
    pub first: u64,
    pub data_sectors: u64,
    pub cmac_blocks: u64,
    /// Nodes per tree level, from the leaves' parents (level 1) up to the top (one node).
    pub tree_nodes: Vec<u64>,
    /// The first sector of its metadata region.
    pub metadata_base: u64,
}

impl Region {
    fn new(nsid: u32, first: u64, data_sectors: u64) -> Region {
        let cmac_blocks = data_sectors.div_ceil(BLOCKS_PER_CMAC).max(1);
        let mut tree_nodes = Vec::new();
        let mut n = cmac_blocks;
        loop {
            n = n.div_ceil(TREE_ARITY);
            tree_nodes.push(n);
            if n == 1 {
                break;
            }
        }
        Region { nsid, first, data_sectors, cmac_blocks, tree_nodes, metadata_base: 0 }
    }

    /// The tree's top level: its one node is held on chip.
    pub fn top_level(&self) -> u32 { self.tree_nodes.len() as u32 }

    /// Sectors of CMAC blocks and of stored tree nodes.
    pub fn metadata_sectors(&self) -> (u64, u64) {
        let stored: u64 = self.tree_nodes[..self.tree_nodes.len() - 1].iter().sum();
        (self.cmac_blocks, stored)
    }

    fn metadata_len(&self) -> u64 {
        let (c, t) = self.metadata_sectors();
        c + t
    }

    pub fn data_end(&self) -> u64 { self.first + self.data_sectors }
    fn first_cmac(&self) -> u64 { self.first / BLOCKS_PER_CMAC }
}

/// The table: every namespace's data and metadata regions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub regions: Vec<Region>,
}

impl Geometry {
    /// One namespace of `data_sectors` from sector 0, its metadata right after it.
    pub fn new(data_sectors: u64) -> Geometry {
        let mut r = Region::new(1, 0, data_sectors);
        r.metadata_base = data_sectors;
        Geometry { regions: vec![r] }
    }

    /// One namespace, the largest whose metadata fits beside it on a drive of `drive_sectors`
    /// (the metadata namespace takes the rest).
    pub fn for_drive(drive_sectors: u64) -> Geometry {
        // The metadata is just over 1/32 of the data: start from data = drive * 32/33 and
        // step down while it does not fit (a few steps).
        let mut data = drive_sectors / 33 * 32;
        loop {
            let g = Geometry::new(data);
            let need = data + g.regions[0].metadata_len();
            if need <= drive_sectors {
                return g;
            }
            data -= (need - drive_sectors).max(1);
        }
    }

    /// The table `spec` describes (`io.namespaces`: comma-separated `NSID@FIRST_GIB+SIZE_GIB`
    /// entries) on a drive of `drive_sectors`: the metadata namespace at the drive's end holds
    /// each namespace's metadata in the table's order. Errors name the entry at fault.
    pub fn parse(spec: &str, drive_sectors: u64) -> Result<Geometry, String> {
        let mut regions: Vec<Region> = Vec::new();
        for (k, entry) in spec.split(',').map(str::trim).enumerate() {
            let at = format!("entry {} ({entry:?})", k + 1);
            let bad = || format!("{at}: expected NSID@FIRST_GIB+SIZE_GIB, e.g. \"1@0+256\"");
            let (nsid, rest) = entry.split_once('@').ok_or_else(bad)?;
            let (first, size) = rest.split_once('+').ok_or_else(bad)?;
            let num = |s: &str| s.trim().parse::<u64>().map_err(|_| bad());
            let (nsid, first, size) = (num(nsid)?, num(first)?, num(size)?);
            if nsid == 0 || nsid > u64::from(u32::MAX - 1) {
                return Err(format!("{at}: namespace ID {nsid} is not a valid NVMe NSID (1 to 4294967294)"));
            }
            if size == 0 {
                return Err(format!("{at}: a namespace of 0 GiB"));
            }
            if regions.len() as u64 >= 1 << (56 - LOCAL_BITS) {
                return Err(format!("{at}: more than {} namespaces", 1u64 << (56 - LOCAL_BITS)));
            }
            let r = Region::new(nsid as u32, first.saturating_mul(GIB), size.saturating_mul(GIB));
            if let Some(o) = regions.iter().find(|o| o.nsid == r.nsid) {
                return Err(format!("{at}: namespace {} is already in the table ({} GiB at {} GiB)", o.nsid, o.data_sectors / GIB, o.first / GIB));
            }
            if let Some(o) = regions.iter().find(|o| r.first < o.data_end() && o.first < r.data_end()) {
                return Err(format!(
                    "{at}: namespace {}'s data ({}..{} GiB) overlaps namespace {}'s ({}..{} GiB)",
                    r.nsid,
                    first,
                    first + size,
                    o.nsid,
                    o.first / GIB,
                    o.data_end() / GIB
                ));
            }
            regions.push(r);
        }
        let metadata: u64 = regions.iter().map(Region::metadata_len).sum();
        let Some(mut base) = drive_sectors.checked_sub(metadata) else {
            return Err(format!("the namespaces' metadata ({metadata} sectors) is larger than the drive"));
        };
        for (k, r) in regions.iter().enumerate() {
            if r.data_end() > base {
                return Err(format!(
                    "entry {} (namespace {}): its data ends at {:.2} GiB, past the start of the metadata namespace at {:.2} GiB (the drive's end less every namespace's metadata, ssd.capacity_gib)",
                    k + 1,
                    r.nsid,
                    r.data_end() as f64 / GIB as f64,
                    base as f64 / GIB as f64
                ));
            }
        }
        for r in &mut regions {
            r.metadata_base = base;
            base += r.metadata_len();
        }
        Ok(Geometry { regions })
    }

    /// The region whose data holds `sector`.
    pub fn region_of_sector(&self, sector: u64) -> Option<usize> { self.regions.iter().position(|r| r.first <= sector && sector < r.data_end()) }

    /// The region a metadata block belongs to.
    pub fn region_of(&self, b: MetaBlock) -> usize {
        match b {
            MetaBlock::Cmac(c) => self.region_of_sector(c * BLOCKS_PER_CMAC).expect("a CMAC block of a namespace's data"),
            MetaBlock::Node(_, i) => (i >> LOCAL_BITS) as usize,
        }
    }

    /// The highest top level of any namespace's tree.
    pub fn top_level(&self) -> u32 { self.regions.iter().map(Region::top_level).max().unwrap_or(1) }

    /// Data sectors of every namespace.
    pub fn data_sectors(&self) -> u64 { self.regions.iter().map(|r| r.data_sectors).sum() }

    /// Sectors of CMAC blocks and of stored tree nodes, over every namespace.
    pub fn metadata_sectors(&self) -> (u64, u64) {
        self.regions.iter().map(Region::metadata_sectors).fold((0, 0), |(a, b), (c, t)| (a + c, b + t))
    }

    /// The metadata's share of the data's size: (CMAC blocks, tree).
    pub fn overhead(&self) -> (f64, f64) {
        let (c, t) = self.metadata_sectors();
        let d = self.data_sectors() as f64;
        (c as f64 / d, t as f64 / d)
    }

    /// The metadata of the first `space_sectors` data sectors of each namespace: `(first
    /// sector, sectors)` extents, one per kind (CMAC blocks, then each stored tree level).
    pub fn metadata_extents(&self, space_sectors: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for r in &self.regions {
            let mut n = space_sectors.min(r.data_sectors).div_ceil(BLOCKS_PER_CMAC).max(1);
            out.push((r.metadata_base, n));
            let mut below = r.cmac_blocks;
            for level in 1..r.top_level() {
                n = n.div_ceil(TREE_ARITY);
                out.push((r.metadata_base + below, n));
                below += r.tree_nodes[level as usize - 1];
            }
        }
        out
    }

    pub fn cmac_of(&self, sector: u64) -> u64 { sector / BLOCKS_PER_CMAC }

    /// The end of the data of the namespace holding `sector` (a CMAC group's blocks stop there).
    pub fn data_end_of(&self, sector: u64) -> u64 { self.region_of_sector(sector).map_or(sector + 1, |r| self.regions[r].data_end()) }

    /// The top node of the tree `b` belongs to (held on chip).
    pub fn top_of(&self, b: MetaBlock) -> MetaBlock {
        let r = self.region_of(b);
        MetaBlock::Node(self.regions[r].top_level(), node_name(r, 0))
    }

    pub fn is_top(&self, b: MetaBlock) -> bool { matches!(b, MetaBlock::Node(..)) && self.top_of(b) == b }

    /// The parent of a block: a CMAC block's level-1 node, a node's node one level up; None
    /// for a top node.
    pub fn parent(&self, b: MetaBlock) -> Option<MetaBlock> {
        match b {
            MetaBlock::Cmac(c) => {
                let r = self.region_of(b);
                let local = c - self.regions[r].first_cmac();
                Some(MetaBlock::Node(1, node_name(r, local / TREE_ARITY)))
            }
            MetaBlock::Node(level, i) => {
                let r = (i >> LOCAL_BITS) as usize;
                if level >= self.regions[r].top_level() {
                    return None;
                }
                let local = i & ((1 << LOCAL_BITS) - 1);
                Some(MetaBlock::Node(level + 1, node_name(r, local / TREE_ARITY)))
            }
        }
    }

    /// The sector a metadata block is stored at.
    pub fn sector_of(&self, b: MetaBlock) -> u64 {
        let r = &self.regions[self.region_of(b)];
        match b {
            MetaBlock::Cmac(c) => r.metadata_base + (c - r.first_cmac()),
            MetaBlock::Node(level, i) => {
                let below: u64 = r.tree_nodes[..level as usize - 1].iter().sum();
                r.metadata_base + r.cmac_blocks + below + (i & ((1 << LOCAL_BITS) - 1))
            }
        }
    }

    /// The metadata block stored at `sector` (None: not a metadata sector).
    pub fn block_at(&self, sector: u64) -> Option<MetaBlock> {
        for (k, r) in self.regions.iter().enumerate() {
            if sector < r.metadata_base || sector >= r.metadata_base + r.metadata_len() {
                continue;
            }
            let mut off = sector - r.metadata_base;
            if off < r.cmac_blocks {
                return Some(MetaBlock::Cmac(r.first_cmac() + off));
            }
            off -= r.cmac_blocks;
            for (l, &n) in r.tree_nodes.iter().enumerate() {
                if off < n {
                    return Some(MetaBlock::Node(l as u32 + 1, node_name(k, off)));
                }
                off -= n;
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DRIVE: u64 = 512 * GIB;

    #[test]
    fn a_table_places_each_namespaces_metadata_at_the_drives_end_in_order() {
        let g = Geometry::parse("1@0+256, 7@300+100", DRIVE).unwrap();
        let (a, b) = (&g.regions[0], &g.regions[1]);
        assert_eq!((a.nsid, a.first, b.nsid, b.first), (1, 0, 7, 300 * GIB));
        assert_eq!(b.metadata_base, a.metadata_base + a.metadata_len());
        assert_eq!(b.metadata_base + b.metadata_len(), DRIVE);
        // Each namespace has its own tree; their nodes never share a name or a sector.
        let (ca, cb) = (MetaBlock::Cmac(a.first / 32), MetaBlock::Cmac(b.first / 32));
        assert_ne!(g.parent(ca), g.parent(cb));
        assert_ne!(g.top_of(ca), g.top_of(cb));
        for blk in [ca, cb, g.parent(ca).unwrap(), g.parent(cb).unwrap(), MetaBlock::Cmac(b.first / 32 + b.cmac_blocks - 1)] {
            assert_eq!(g.block_at(g.sector_of(blk)), Some(blk), "{blk:?}");
        }
        // The walk from a CMAC block ends at its namespace's top.
        let mut x = cb;
        while let Some(p) = g.parent(x) {
            x = p;
        }
        assert!(g.is_top(x) && x == g.top_of(cb));
        assert_eq!(g.region_of_sector(299 * GIB), None, "between the namespaces: no region");
    }

    #[test]
    fn overlapping_duplicate_or_oversized_entries_are_errors_naming_the_entry() {
        for (spec, want) in [
            ("1@0+256,2@200+100", "entry 2"),
            ("1@0+256,2@200+100", "overlaps namespace 1"),
            ("1@0+10,1@20+10", "already in the table"),
            ("1@0+500", "past the start of the metadata namespace"),
            ("1@0+0", "0 GiB"),
            ("1@0", "NSID@FIRST_GIB+SIZE_GIB"),
            ("0@0+1", "not a valid NVMe NSID"),
            ("1@x+1", "entry 1"),
        ] {
            let e = Geometry::parse(spec, DRIVE).unwrap_err();
            assert!(e.contains(want), "{spec}: {e}");
        }
    }

    #[test]
    fn one_namespace_over_the_drive_matches_the_default_layout() {
        let g = Geometry::for_drive(DRIVE);
        let r = &g.regions[0];
        assert_eq!((r.first, r.metadata_base), (0, r.data_sectors));
        assert!(r.data_sectors + r.metadata_len() <= DRIVE);
    }
}
