//! The small Merkle tree that protects a saved metadata cache.
//!
//! A lazily updated Bonsai tree's root is stale while dirty nodes sit in the metadata cache,
//! so a drain cannot simply write those blocks home: the root would not match. Base-LU (and
//! Horus, for the metadata blocks in its vault) instead saves the dirty blocks to a reserved
//! region and keeps, on chip, the root of a small 8-ary tree over them (Horus Table I: a
//! 5-level 8-ary tree over the secure cache; Anubis' shadow-table tree). Recovery recomputes
//! the tree over what it reads back and compares roots, so tampering with, swapping, replaying
//! or dropping any saved block — or its address — fails closed.
//!
//! Shape: leaf `i` = MAC(i, address, bytes); each internal node = MAC of (level, index, its
//! up to 8 children); the root register = MAC(number of blocks, top node). Only the root is
//! kept (on chip); internal nodes are recomputed at recovery, so none is written.

use crate::controller::ops::McOps;
use crate::controller::MetaBlock;

/// MAC domains (see `Keys::mac`) of the three node kinds.
const DOMAIN_LEAF: u8 = 0x10;
const DOMAIN_NODE: u8 = 0x11;
const DOMAIN_ROOT: u8 = 0x12;
const ARITY: usize = 8;

/// Internal levels above `n` leaves (0 for n <= 1).
pub fn height(n: u64) -> usize {
    let mut levels = 0;
    let mut width = n;
    while width > 1 {
        width = width.div_ceil(ARITY as u64);
        levels += 1;
    }
    levels
}

/// Hashes computed to protect `n` blocks: the leaves, every internal node, the root binding.
pub fn hash_count(n: u64) -> u64 {
    let mut total = n;
    let mut width = n;
    while width > 1 {
        width = width.div_ceil(ARITY as u64);
        total += width;
    }
    total + 1
}

/// The root over `blocks` (in order) and the number of hashes computed. In counting mode
/// there are no bytes: the root is 0 and only the count is real.
pub fn protect(mc: &McOps, blocks: &[MetaBlock]) -> (u64, u64) {
    let mc = mc.mc();
    let count = hash_count(blocks.len() as u64);
    let Some(f) = mc.func.as_ref() else { return (0, count) };
    let k = &f.keys;
    let mut level: Vec<u64> = blocks
        .iter()
        .enumerate()
        .map(|(i, b)| k.mac(DOMAIN_LEAF, &[&(i as u64).to_le_bytes(), &b.key.to_le_bytes(), &b.payload.unwrap_or([0; 64])], 64))
        .collect();
    let mut depth = 0u64;
    while level.len() > 1 {
        depth += 1;
        level = level
            .chunks(ARITY)
            .enumerate()
            .map(|(j, kids)| {
                let bytes: Vec<u8> = kids.iter().flat_map(|x| x.to_le_bytes()).collect();
                k.mac(DOMAIN_NODE, &[&depth.to_le_bytes(), &(j as u64).to_le_bytes(), &bytes], 64)
            })
            .collect();
    }
    let top = level.first().copied().unwrap_or(0);
    (k.mac(DOMAIN_ROOT, &[&(blocks.len() as u64).to_le_bytes(), &top.to_le_bytes()], 64), count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_count_covers_leaves_internal_nodes_and_the_root_binding() {
        assert_eq!(hash_count(0), 1);
        assert_eq!(hash_count(1), 2);
        // 64 leaves: 8 nodes, 1 node, root binding.
        assert_eq!(hash_count(64), 64 + 8 + 1 + 1);
        assert_eq!(height(64), 2);
        // Table I's metadata caches, 16384 blocks: 2048 + 256 + 32 + 4 + 1 internal nodes, the
        // 5-level 8-ary tree of Horus Table I.
        assert_eq!(height(16384), 5);
        assert_eq!(hash_count(16384), 16384 + 2048 + 256 + 32 + 4 + 1 + 1);
    }
}
