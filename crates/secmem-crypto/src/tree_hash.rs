//! Bonsai Merkle Tree node hashes and 64-byte node entry access.
//!
//! A tree node is a 64-byte block holding up to [`NODE_SLOTS`] (8) little-endian `u64`
//! hashes of its children; children are 64-byte blocks (counter blocks at the bottom,
//! nodes above). The hash of a child is
//!
//! `node_hash(level, index, child) = SipHash-2-4(tree_key, msg)` (64 bits; see
//! [`crate::mac`] for why SipHash-2-4)
//!
//! over the fixed 80-byte message
//!
//! | bytes | content |
//! | --- | --- |
//! | `0..4` | `level` of the child, `u32` little-endian |
//! | `4..8` | zero |
//! | `8..16` | `index` of the child within its level, `u64` little-endian |
//! | `16..80` | the 64-byte child block |
//!
//! Binding `(level, index)` into the hash ties each hash to its position: copying a
//! valid subtree (or counter block) to another position, or swapping two, changes the
//! hash its parent expects, so splicing is detected. The tree key is separate from the
//! MAC key, so a tree hash is never a valid line MAC or vice versa.
//!
//! Level/index numbering is the caller's convention (the simulator's tree geometry);
//! it only has to be used consistently when computing and when verifying.

use crate::Keys;
use siphasher::sip::SipHasher24;
use std::hash::Hasher;

/// Number of 64-bit entries in a 64-byte node.
pub const NODE_SLOTS: usize = 8;
/// Length of a node-hash message.
pub const NODE_HASH_MSG_LEN: usize = 80;

/// The fixed 80-byte message a node hash is computed over (see the module docs).
#[inline]
pub fn node_hash_message(
    level: u32,
    index: u64,
    child_block: &[u8; 64],
) -> [u8; NODE_HASH_MSG_LEN] {
    let mut m = [0u8; NODE_HASH_MSG_LEN];
    m[0..4].copy_from_slice(&level.to_le_bytes());
    m[8..16].copy_from_slice(&index.to_le_bytes());
    m[16..80].copy_from_slice(child_block);
    m
}

impl Keys {
    /// 64-bit keyed hash (tree key) of the 64-byte `child_block` at position
    /// `(level, index)`.
    #[inline]
    pub fn node_hash(&self, level: u32, index: u64, child_block: &[u8; 64]) -> u64 {
        let mut h = SipHasher24::new_with_key(&self.tree_key);
        h.write(&node_hash_message(level, index, child_block));
        h.finish()
    }
}

/// The `slot`-th little-endian `u64` entry of a node (bytes `8*slot..8*slot+8`).
///
/// # Panics
/// If `slot >= NODE_SLOTS`.
#[inline]
pub fn node_entry(node: &[u8; 64], slot: usize) -> u64 {
    assert!(slot < NODE_SLOTS, "node slot {slot} out of range");
    u64::from_le_bytes(node[8 * slot..8 * slot + 8].try_into().unwrap())
}

/// Writes `v` as the `slot`-th little-endian `u64` entry of a node.
///
/// # Panics
/// If `slot >= NODE_SLOTS`.
#[inline]
pub fn set_node_entry(node: &mut [u8; 64], slot: usize, v: u64) {
    assert!(slot < NODE_SLOTS, "node slot {slot} out of range");
    node[8 * slot..8 * slot + 8].copy_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn node_hash_is_siphash24_of_the_documented_message() {
        let k = Keys::from_seed(12);
        let key = blake3::derive_key(crate::keys::CONTEXT_TREE_KEY, &12u64.to_le_bytes());
        let child = [0x3c; 64];
        let mut msg = vec![2, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0];
        msg.extend_from_slice(&child);
        let want = siphasher::sip::SipHasher24::new_with_key(&key[..16].try_into().unwrap()).hash(&msg);
        assert_eq!(k.node_hash(2, 9, &child), want);
    }

    #[test]
    fn swapping_two_children_changes_their_hashes() {
        let k = Keys::from_seed(1);
        let (a, b) = ([1u8; 64], [2u8; 64]);
        let (ha, hb) = (k.node_hash(0, 4, &a), k.node_hash(0, 5, &b));
        assert_ne!(ha, k.node_hash(0, 5, &a));
        assert_ne!(hb, k.node_hash(0, 4, &b));
    }

    #[test]
    fn node_hash_depends_on_the_tree_key() {
        assert_ne!(
            Keys::from_seed(1).node_hash(0, 0, &[0; 64]),
            Keys::from_seed(2).node_hash(0, 0, &[0; 64])
        );
    }

    #[test]
    #[should_panic(expected = "node slot")]
    fn slot_beyond_node_is_rejected() {
        node_entry(&[0; 64], NODE_SLOTS);
    }

    proptest! {
        #[test]
        fn node_hash_changes_with_level_index_or_child_content(
            level in 0u32..64, index: u64,
            child in proptest::collection::vec(any::<u8>(), 64),
            which in 0..3usize, bit in 0..512u32,
        ) {
            let k = Keys::from_seed(3);
            let child: [u8; 64] = child.try_into().unwrap();
            let base = k.node_hash(level, index, &child);
            let (mut l2, mut i2, mut c2) = (level, index, child);
            match which {
                0 => l2 ^= 1 << (bit % 32),
                1 => i2 ^= 1 << (bit % 64),
                _ => c2[(bit / 8) as usize] ^= 1 << (bit % 8),
            }
            prop_assert_ne!(base, k.node_hash(l2, i2, &c2));
        }

        #[test]
        fn node_entries_round_trip_without_disturbing_neighbours(
            values in proptest::array::uniform8(any::<u64>()),
            slot in 0..NODE_SLOTS, v: u64,
        ) {
            let mut node = [0u8; 64];
            for (s, &x) in values.iter().enumerate() {
                set_node_entry(&mut node, s, x);
            }
            for (s, &x) in values.iter().enumerate() {
                prop_assert_eq!(node_entry(&node, s), x);
            }
            set_node_entry(&mut node, slot, v);
            for (s, &x) in values.iter().enumerate() {
                prop_assert_eq!(node_entry(&node, s), if s == slot { v } else { x });
            }
            prop_assert_eq!(&node[8 * slot..8 * slot + 8], &v.to_le_bytes()[..]);
        }
    }
}
