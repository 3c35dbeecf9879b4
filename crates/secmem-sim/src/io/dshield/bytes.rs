//! D-Shield in functional mode: the drive's real bytes, encrypted and authenticated by the
//! DIE with [`secmem_crypto::storage`], and the byte layouts of Fig. 6.
//!
//! * **The drive** ([`DriveImage`]) is sparse: a sector never written reads as zeros, as on a
//!   freshly formatted drive. It is what an attacker can read and change.
//! * **A CMAC block** (512 B): bytes `0..8` the major counter, `8..160` 32 minors of 38 bits
//!   packed low bit first, `160..512` 32 MACs of 88 bits (11 B each). The tree leaf is the
//!   hash of bytes `0..160` (the counters); the MACs need no tree, as in Bonsai trees.
//! * **A tree node** (512 B): 64 little-endian 8 B hashes of its children.
//! * **"Never written"**: a parent entry of 0 says the child was never written and must read
//!   as zeros; a data block whose counters are (0, 0) was never written and must read as
//!   zeros with a zero MAC. (Real hashes are never 0: `secmem_crypto::storage`.) So a new
//!   namespace needs no formatting pass, and an attacker cannot pass off a written block as
//!   fresh: its parent's entry is no longer 0.
//! * **On chip**: the verified content of every block in the DIE's two caches, and the top
//!   node. The caches' bookkeeping stays in [`super::Metadata`]; this keeps their bytes.

use super::{Geometry, MetaBlock, BLOCKS_PER_CMAC, COUNTER_BYTES, TREE_ARITY};
use rustc_hash::FxHashMap;
use secmem_crypto::storage::StorageKeys;

pub type Block = [u8; 512];

/// Bytes of a CMAC block's counters (the tree leaf's input).
pub const COUNTER_REGION: usize = COUNTER_BYTES as usize;
const MINOR_MASK: u64 = (1 << 38) - 1;
const MAC_MASK: u128 = (1 << 88) - 1;

pub fn major(b: &Block) -> u64 { u64::from_le_bytes(b[0..8].try_into().unwrap()) }
pub fn set_major(b: &mut Block, v: u64) { b[0..8].copy_from_slice(&v.to_le_bytes()) }

/// The 8-byte window holding minor `k` and its bit shift in it.
fn minor_at(k: usize) -> (usize, u32) {
    let bit = k * 38;
    (8 + bit / 8, (bit % 8) as u32)
}

pub fn minor(b: &Block, k: usize) -> u64 {
    let (at, shift) = minor_at(k);
    (u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) >> shift) & MINOR_MASK
}

pub fn set_minor(b: &mut Block, k: usize, v: u64) {
    let (at, shift) = minor_at(k);
    let w = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
    let w = (w & !(MINOR_MASK << shift)) | ((v & MINOR_MASK) << shift);
    b[at..at + 8].copy_from_slice(&w.to_le_bytes());
}

pub fn mac(b: &Block, k: usize) -> u128 {
    let at = COUNTER_REGION + 11 * k;
    let mut w = [0u8; 16];
    w[..11].copy_from_slice(&b[at..at + 11]);
    u128::from_le_bytes(w)
}

pub fn set_mac(b: &mut Block, k: usize, v: u128) {
    let at = COUNTER_REGION + 11 * k;
    b[at..at + 11].copy_from_slice(&(v & MAC_MASK).to_le_bytes()[..11]);
}

pub fn entry(node: &Block, slot: usize) -> u64 { u64::from_le_bytes(node[8 * slot..8 * slot + 8].try_into().unwrap()) }
pub fn set_entry(node: &mut Block, slot: usize, v: u64) { node[8 * slot..8 * slot + 8].copy_from_slice(&v.to_le_bytes()) }

/// The drive's sectors: data and metadata, sparse.
#[derive(Clone, Default)]
pub struct DriveImage {
    sectors: FxHashMap<u64, Box<Block>>,
}

impl DriveImage {
    /// Sector `s` (zeros if never written).
    pub fn read(&self, s: u64) -> Block { self.sectors.get(&s).map_or([0; 512], |b| **b) }
    pub fn write(&mut self, s: u64, b: &Block) {
        match self.sectors.get_mut(&s) {
            Some(d) => **d = *b,
            None => {
                self.sectors.insert(s, Box::new(*b));
            }
        }
    }
    /// Sectors ever written.
    pub fn written(&self) -> usize { self.sectors.len() }
}

/// What verification found wrong, and where.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(tag = "class", rename_all = "kebab-case")]
pub enum Detected {
    /// A data block's MAC does not match its ciphertext and counters (or a never-written
    /// block is not zeros).
    DataMac { sector: u64 },
    /// A CMAC block's counters do not hash to its parent's entry.
    Counters { cmac: u64 },
    /// A tree node does not hash to its parent's entry.
    Node { level: u32, index: u64 },
}

impl Detected {
    pub fn class(&self) -> &'static str {
        match self {
            Detected::DataMac { .. } => "data-mac",
            Detected::Counters { .. } => "counters",
            Detected::Node { .. } => "tree-node",
        }
    }
}

impl std::fmt::Display for Detected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Detected::DataMac { sector } => write!(f, "integrity failure: data block {sector}'s MAC does not match"),
            Detected::Counters { cmac } => write!(f, "integrity failure: CMAC block {cmac}'s counters do not match the tree"),
            Detected::Node { level, index } => write!(f, "integrity failure: tree node {index} at level {level} does not match its parent"),
        }
    }
}

/// The functional state beside [`super::Metadata`].
#[derive(Clone)]
pub struct Bytes {
    pub keys: StorageKeys,
    pub drive: DriveImage,
    /// Verified content of the blocks in the on-chip caches.
    cached: FxHashMap<MetaBlock, Box<Block>>,
    /// Each namespace's top node (on chip), by its index in the region table.
    pub tops: FxHashMap<usize, Box<Block>>,
    /// D-Shield-Pro: the in-memory cache's blocks by slot (held under the memory's own
    /// protection, which the memory side's attacks test).
    memory: FxHashMap<u64, (u64, Box<Block>)>,
    /// Blocks being written back whose parent does not yet hold their new hash (the write-back
    /// buffer, on chip): a walk that fetches one meanwhile takes this copy, unverified. With
    /// how many write-backs of it are under way.
    writing_back: FxHashMap<MetaBlock, (u32, Box<Block>)>,
    /// The first verification failure of the operation under way.
    pub failure: Option<Detected>,
}

fn slot_in_parent(b: MetaBlock) -> usize {
    match b {
        MetaBlock::Cmac(i) | MetaBlock::Node(_, i) => (i % TREE_ARITY) as usize,
    }
}

impl Bytes {
    pub fn new(keys: StorageKeys) -> Bytes {
        Bytes { keys, drive: DriveImage::default(), cached: FxHashMap::default(), tops: FxHashMap::default(), memory: FxHashMap::default(), writing_back: FxHashMap::default(), failure: None }
    }

    fn fail(&mut self, d: Detected) {
        self.failure.get_or_insert(d);
    }

    /// The hash a block's parent holds for it.
    fn parent_entry(&self, g: &Geometry, b: MetaBlock) -> u64 {
        let p = g.parent(b).expect("a stored block has a parent");
        let slot = slot_in_parent(b);
        if g.is_top(p) {
            self.tops.get(&g.region_of(p)).map_or(0, |t| entry(t, slot))
        } else {
            // The walk put the parent in the cache before its child is checked.
            entry(self.cached.get(&p).expect("a verified parent is cached"), slot)
        }
    }

    pub fn hash_of(&self, b: MetaBlock, content: &Block) -> u64 {
        match b {
            MetaBlock::Cmac(i) => self.keys.counters_hash(i, &content[..COUNTER_REGION]),
            MetaBlock::Node(level, i) => self.keys.node_hash(level, i, content),
        }
    }

    /// A block read from the drive (its parent verified and cached): checked and kept on chip.
    pub(super) fn load(&mut self, g: &Geometry, b: MetaBlock) {
        if self.cached.contains_key(&b) {
            // Brought in (and maybe changed) by a write-back while its parent was fetched.
            return;
        }
        if let Some((_, content)) = self.writing_back.get(&b) {
            self.cached.insert(b, content.clone());
            return;
        }
        let content = self.drive.read(g.sector_of(b));
        let expected = self.parent_entry(g, b);
        let ok = if expected == 0 { content.iter().all(|&x| x == 0) } else { self.hash_of(b, &content) == expected };
        if !ok {
            self.fail(match b {
                MetaBlock::Cmac(cmac) => Detected::Counters { cmac },
                MetaBlock::Node(level, index) => Detected::Node { level, index },
            });
        }
        self.cached.insert(b, Box::new(content));
    }

    /// D-Shield-Pro: CMAC block `c` loaded from memory slot `slot`.
    pub(super) fn load_from_memory(&mut self, c: u64, slot: u64) {
        let (held, content) = self.memory.get(&slot).expect("the directory names what the slot holds");
        debug_assert_eq!(*held, c);
        self.cached.insert(MetaBlock::Cmac(c), content.clone());
    }

    /// D-Shield-Pro: CMAC block `c` (still on chip) copied into memory slot `slot`.
    pub(super) fn fill_memory(&mut self, c: u64, slot: u64) {
        let content = self.cached.get(&MetaBlock::Cmac(c)).expect("a block leaving the chip is cached").clone();
        self.memory.insert(slot, (c, content));
    }

    /// A dirty block is written back: its content goes to the drive (and off the chip if it is
    /// `leaving` its cache).
    pub(super) fn store(&mut self, g: &Geometry, b: MetaBlock, leaving: bool) {
        let content = if leaving { self.cached.remove(&b).expect("a dirty block is cached") } else { self.cached.get(&b).expect("a dirty block is cached").clone() };
        self.drive.write(g.sector_of(b), &content);
        let e = self.writing_back.entry(b).or_insert((0, content.clone()));
        e.0 += 1;
        e.1 = content;
    }

    /// Its parent (cached, or the top) takes the hash of a block's copy on the drive.
    pub(super) fn set_parent_entry(&mut self, g: &Geometry, b: MetaBlock) {
        let Some((n, content)) = self.writing_back.remove(&b) else { unreachable!("set after a store") };
        let hash = self.hash_of(b, &content);
        if n > 1 {
            self.writing_back.insert(b, (n - 1, content));
        }
        let p = g.parent(b).expect("a stored block has a parent");
        let slot = slot_in_parent(b);
        if g.is_top(p) {
            set_entry(self.tops.entry(g.region_of(p)).or_insert_with(|| Box::new([0; 512])), slot, hash);
        } else {
            set_entry(self.cached.get_mut(&p).expect("the parent was just made present"), slot, hash);
        }
    }

    pub(super) fn evict(&mut self, b: MetaBlock) { self.cached.remove(&b); }

    /// Every on-chip copy dropped (the caches' bookkeeping is reset beside it).
    pub(super) fn drop_cached(&mut self) {
        self.cached.clear();
        self.memory.clear();
    }

    fn cmac(&mut self, c: u64) -> &mut Block { self.cached.get_mut(&MetaBlock::Cmac(c)).expect("the block's CMAC is cached") }

    /// Data block `s` read from the drive, verified against its cached CMAC block and
    /// decrypted into `out` (zeros and a failure if it does not verify).
    pub(super) fn read_block(&mut self, s: u64, out: &mut Block) {
        let k = (s % BLOCKS_PER_CMAC) as usize;
        let cm = **self.cached.get(&MetaBlock::Cmac(s / BLOCKS_PER_CMAC)).expect("the block's CMAC is cached");
        let (maj, min, tag) = (major(&cm), minor(&cm, k), mac(&cm, k));
        let mut ct = self.drive.read(s);
        if maj == 0 && min == 0 {
            // Never written: zeros, with a zero MAC.
            if tag != 0 || ct.iter().any(|&x| x != 0) {
                self.fail(Detected::DataMac { sector: s });
            }
            *out = [0; 512];
            return;
        }
        if self.keys.block_mac(&ct, s, maj, min) != tag {
            self.fail(Detected::DataMac { sector: s });
            *out = [0; 512];
            return;
        }
        self.keys.xor_pad(&mut ct, s, maj, min);
        *out = ct;
    }

    /// Data block `s` written with `plain`: its minor moves on (after an overflow, the group's
    /// major does, and `reencrypted`, the group's other blocks, are read, verified and
    /// encrypted again under it), the block is encrypted and its MAC stored. Returns the
    /// ciphertext for the drive.
    pub(super) fn write_block(&mut self, s: u64, plain: &Block, reencrypted: Option<&[u64]>) -> Block {
        let c = s / BLOCKS_PER_CMAC;
        let k = (s % BLOCKS_PER_CMAC) as usize;
        if let Some(others) = reencrypted {
            let base = c * BLOCKS_PER_CMAC;
            let new_major = major(self.cmac(c)) + 1;
            for &b in others {
                let mut p = [0; 512];
                self.read_block(b, &mut p);
                let mut ct = p;
                self.keys.xor_pad(&mut ct, b, new_major, 0);
                let tag = self.keys.block_mac(&ct, b, new_major, 0);
                set_mac(self.cmac(c), (b - base) as usize, tag);
                self.drive.write(b, &ct);
            }
            let cm = self.cmac(c);
            set_major(cm, new_major);
            for j in 0..BLOCKS_PER_CMAC as usize {
                set_minor(cm, j, 0);
            }
        }
        let cm = self.cmac(c);
        let (maj, min) = (major(cm), minor(cm, k) + 1);
        set_minor(cm, k, min);
        let mut ct = *plain;
        self.keys.xor_pad(&mut ct, s, maj, min);
        let tag = self.keys.block_mac(&ct, s, maj, min);
        set_mac(self.cmac(c), k, tag);
        ct
    }

    /// The cached content of a block (tests and campaigns).
    pub fn cached(&self, b: MetaBlock) -> Option<&Block> { self.cached.get(&b).map(|b| &**b) }
}

#[cfg(test)]
impl Bytes {
    /// The invariants of the functional state, for tests: every cached block's bytes belong to a
    /// block the caches hold, a clean one's equal the drive's copy, and every metadata block on
    /// the drive that is not cached hashes to its parent's entry (cached, on the drive, or top).
    pub(super) fn check_consistency(&self, g: &Geometry, dirty: &dyn Fn(MetaBlock) -> Option<bool>) -> Result<(), String> {
        for (&sector, content) in &self.drive.sectors {
            let Some(b) = g.block_at(sector) else { continue };
            if self.cached.contains_key(&b) {
                continue;
            }
            let p = g.parent(b).expect("a stored block has a parent");
            let slot = slot_in_parent(b);
            let e = if g.is_top(p) {
                self.tops.get(&g.region_of(p)).map_or(0, |t| entry(t, slot))
            } else if let Some(pc) = self.cached.get(&p) {
                entry(pc, slot)
            } else {
                entry(&self.drive.read(g.sector_of(p)), slot)
            };
            if e != self.hash_of(b, content) {
                return Err(format!("{b:?} on the drive does not match its parent {p:?}"));
            }
        }
        for (b, content) in &self.cached {
            match dirty(*b) {
                None => return Err(format!("{b:?} has bytes on chip but is not in its cache")),
                Some(false) if **content != self.drive.read(g.sector_of(*b)) => return Err(format!("clean {b:?} differs from the drive's copy")),
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cmac_block_holds_a_major_32_minors_and_32_macs_without_overlap() {
        let mut b = [0u8; 512];
        set_major(&mut b, u64::MAX);
        for k in 0..32 {
            set_minor(&mut b, k, MINOR_MASK - k as u64);
            set_mac(&mut b, k, MAC_MASK - k as u128);
        }
        assert_eq!(major(&b), u64::MAX);
        for k in 0..32 {
            assert_eq!(minor(&b, k), MINOR_MASK - k as u64, "minor {k}");
            assert_eq!(mac(&b, k), MAC_MASK - k as u128, "mac {k}");
        }
        set_minor(&mut b, 7, 1);
        assert_eq!((minor(&b, 6), minor(&b, 7), minor(&b, 8)), (MINOR_MASK - 6, 1, MINOR_MASK - 8));
    }
}
