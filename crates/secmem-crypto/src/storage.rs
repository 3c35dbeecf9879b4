//! Processor-side storage cryptography (D-Shield, HPCA'23 section V-B2): counter-mode pads for
//! 512 B logic blocks, 88-bit block MACs, and the 8 B hashes of a Merkle tree over counter
//! blocks, all under keys unique to one (processor, drive) pair.
//!
//! # Keys
//!
//! [`StorageKeys::for_device`] derives an AES-128 pad key, a 128-bit MAC key and a 128-bit tree
//! key from the processor's seed and the drive's identifier, each the first 16 bytes of
//! `blake3::derive_key(context, seed.to_le_bytes() || device.to_le_bytes())` under its own
//! context string. The paper puts the device into each block's seed (Fig. 7) so that the
//! same LBA on two drives never shares a pad; deriving the keys per drive gives the same
//! property, and makes every MAC and tree hash drive-bound as well: a drive moved to another
//! slot or another machine fails verification.
//!
//! # Pads
//!
//! A 512 B block's pad is 32 AES-128 blocks, one per 128-bit chunk (the paper generates a seed
//! per chunk, so any 16 B-aligned chunk decrypts alone). Chunk `j`'s counter block is the
//! 128-bit little-endian number
//!
//! | bits | field |
//! | --- | --- |
//! | `0..48` | the block's LBA (sector index; `< 2^48`: 128 PiB) |
//! | `48..86` | its minor counter (38 bits, the paper's width) |
//! | `86..91` | the chunk index `j` (`0..32`) |
//! | `91..128` | its group's major counter (`< 2^37`) |
//!
//! Every field is range-checked, so the map from `(lba, major, minor, j)` to counter blocks
//! is injective and a pad repeats only if a counter pair does. The major counter is a 64-bit
//! field on the drive but moves only when a 38-bit minor wraps; reaching 2^37 would take
//! 2^75 writes to one group.
//!
//! # MACs and hashes
//!
//! * **Block MAC** ([`StorageKeys::block_mac`]): SipHash-2-4 with 128-bit output (MAC key)
//!   over `0x20, lba, major, minor, ciphertext (512 B)`, truncated to its low 88 bits, the
//!   paper's MAC width. (The paper names a GHASH-based MAC; a keyed PRF truncated to the same
//!   width gives the same forgery bound, 2^-88, without a per-message nonce.)
//! * **Counter hash** ([`StorageKeys::counters_hash`]): SipHash-2-4 (tree key) over
//!   `0x21, CMAC block index, its counters (major and 32 minors, 160 B)`: the tree's leaf.
//! * **Node hash** ([`StorageKeys::node_hash`]): SipHash-2-4 (tree key) over
//!   `0x22, level, index, the 512 B node`. Binding the position defeats splicing.
//!
//! A hash of 0 is reserved: a parent entry of 0 says its child was never written (and must
//! read as zeros), so a computed 0 is stored as 1. This lets a drive start sparse (every
//! block zero) without hashing the whole tree at format time.

use aes::cipher::consts::U16;
use aes::cipher::inout::InOutBuf;
use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128;
use siphasher::sip::SipHasher24;
use siphasher::sip128::{Hasher128, SipHasher24 as SipHasher128};
use std::hash::Hasher;

/// Bytes of a logic block (one sector).
pub const BLOCK_BYTES: usize = 512;
/// LBAs a pad can address (48 bits).
pub const MAX_LBA: u64 = 1 << 48;
/// Bits of a minor counter.
pub const MINOR_BITS: u32 = 38;
/// Majors a pad can address (37 bits).
pub const MAX_MAJOR: u64 = 1 << 37;
/// Bits of a block MAC.
pub const MAC_BITS: u32 = 88;

pub const CONTEXT_STORAGE_PAD_KEY: &str = "secmem 2026 storage-pad key";
pub const CONTEXT_STORAGE_MAC_KEY: &str = "secmem 2026 storage-mac key";
pub const CONTEXT_STORAGE_TREE_KEY: &str = "secmem 2026 storage-tree key";

/// The keys one processor uses for one drive.
#[derive(Clone)]
pub struct StorageKeys {
    pad_cipher: Aes128,
    mac_key: [u8; 16],
    tree_key: [u8; 16],
}

impl std::fmt::Debug for StorageKeys {
    /// Key bytes stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.debug_struct("StorageKeys").finish_non_exhaustive() }
}

/// The 16-byte counter block of chunk `j` (see the module docs).
///
/// # Panics
/// If a field is out of its range.
pub fn chunk_counter_block(lba: u64, major: u64, minor: u64, j: u32) -> [u8; 16] {
    assert!(lba < MAX_LBA, "LBA {lba:#x} does not fit the 48-bit seed field");
    assert!(minor < 1 << MINOR_BITS, "minor counter {minor:#x} does not fit 38 bits");
    assert!(major < MAX_MAJOR, "major counter {major:#x} does not fit the 37-bit seed field");
    assert!(j < 32, "chunk {j} out of 0..32");
    let v = u128::from(lba) | u128::from(minor) << 48 | u128::from(j) << 86 | u128::from(major) << 91;
    v.to_le_bytes()
}

/// A hash with 0 (the "never written" mark) moved to 1.
fn nonzero(h: u64) -> u64 { h.max(1) }

impl StorageKeys {
    /// The keys of drive `device` under the processor whose seed is `seed`.
    pub fn for_device(seed: u64, device: u64) -> StorageKeys {
        let mut material = [0u8; 16];
        material[..8].copy_from_slice(&seed.to_le_bytes());
        material[8..].copy_from_slice(&device.to_le_bytes());
        let key = |ctx| -> [u8; 16] { blake3::derive_key(ctx, &material)[..16].try_into().expect("16 of 32 bytes") };
        StorageKeys {
            pad_cipher: Aes128::new_from_slice(&key(CONTEXT_STORAGE_PAD_KEY)).expect("AES-128 takes a 16-byte key"),
            mac_key: key(CONTEXT_STORAGE_MAC_KEY),
            tree_key: key(CONTEXT_STORAGE_TREE_KEY),
        }
    }

    /// The 512 B pad of block `lba` at counters `(major, minor)`: 32 AES blocks in one call.
    pub fn pad(&self, lba: u64, major: u64, minor: u64) -> [u8; BLOCK_BYTES] {
        let mut out = [0u8; BLOCK_BYTES];
        for (j, chunk) in out.chunks_exact_mut(16).enumerate() {
            chunk.copy_from_slice(&chunk_counter_block(lba, major, minor, j as u32));
        }
        let (blocks, tail) = InOutBuf::from(&mut out[..]).into_chunks::<U16>();
        debug_assert!(tail.is_empty());
        self.pad_cipher.encrypt_blocks_inout(blocks);
        out
    }

    /// `block ^= pad(lba, major, minor)`: encrypts or decrypts in place.
    pub fn xor_pad(&self, block: &mut [u8; BLOCK_BYTES], lba: u64, major: u64, minor: u64) {
        for (b, p) in block.iter_mut().zip(self.pad(lba, major, minor)) {
            *b ^= p;
        }
    }

    /// The 88-bit MAC of an encrypted block.
    pub fn block_mac(&self, ciphertext: &[u8; BLOCK_BYTES], lba: u64, major: u64, minor: u64) -> u128 {
        let mut h = SipHasher128::new_with_key(&self.mac_key);
        h.write(&[0x20]);
        h.write(&lba.to_le_bytes());
        h.write(&major.to_le_bytes());
        h.write(&minor.to_le_bytes());
        h.write(ciphertext);
        let full = h.finish128();
        (u128::from(full.h2) << 64 | u128::from(full.h1)) & ((1u128 << MAC_BITS) - 1)
    }

    /// The tree leaf of CMAC block `index`: the 8 B hash of its counters.
    pub fn counters_hash(&self, index: u64, counters: &[u8]) -> u64 {
        let mut h = SipHasher24::new_with_key(&self.tree_key);
        h.write(&[0x21]);
        h.write(&index.to_le_bytes());
        h.write(counters);
        nonzero(h.finish())
    }

    /// The 8 B hash of tree node `(level, index)`.
    pub fn node_hash(&self, level: u32, index: u64, node: &[u8; BLOCK_BYTES]) -> u64 {
        let mut h = SipHasher24::new_with_key(&self.tree_key);
        h.write(&[0x22]);
        h.write(&level.to_le_bytes());
        h.write(&index.to_le_bytes());
        h.write(node);
        nonzero(h.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash128_matches_the_reference_vector() {
        // SipHash-2-4-128 of the empty message under key 00..0f (the reference vectors_sip128).
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let h = SipHasher128::new_with_key(&key).finish128();
        let want = [0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55, 0x02, 0x93];
        assert_eq!(h.as_bytes(), want);
    }

    #[test]
    fn a_block_decrypts_with_its_counters_and_not_with_others() {
        let k = StorageKeys::for_device(1, 0);
        let plain: [u8; 512] = std::array::from_fn(|i| (i * 7) as u8);
        let mut b = plain;
        k.xor_pad(&mut b, 100, 3, 9);
        assert_ne!(b, plain);
        let mut wrong = b;
        k.xor_pad(&mut wrong, 100, 3, 10);
        assert_ne!(wrong, plain);
        k.xor_pad(&mut b, 100, 3, 9);
        assert_eq!(b, plain);
    }

    #[test]
    fn each_128_bit_chunk_decrypts_alone() {
        // A chunk's pad is AES of its own counter block, nothing else.
        let k = StorageKeys::for_device(5, 2);
        let pad = k.pad(77, 1, 2);
        let mut c = aes::Block::from(chunk_counter_block(77, 1, 2, 9));
        k.pad_cipher.encrypt_block(&mut c);
        assert_eq!(&pad[9 * 16..10 * 16], c.as_slice());
    }

    #[test]
    fn counter_blocks_are_injective_over_their_fields() {
        let base = chunk_counter_block(1, 1, 1, 1);
        for other in [
            chunk_counter_block(2, 1, 1, 1),
            chunk_counter_block(1, 2, 1, 1),
            chunk_counter_block(1, 1, 2, 1),
            chunk_counter_block(1, 1, 1, 2),
            chunk_counter_block(MAX_LBA - 1, MAX_MAJOR - 1, (1 << MINOR_BITS) - 1, 31),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    #[should_panic(expected = "38 bits")]
    fn a_minor_past_38_bits_is_refused() { chunk_counter_block(0, 0, 1 << 38, 0); }

    #[test]
    fn keys_are_bound_to_the_processor_and_the_drive() {
        let ct = [0x11u8; 512];
        let a = StorageKeys::for_device(1, 0).block_mac(&ct, 5, 0, 1);
        assert_ne!(a, StorageKeys::for_device(1, 1).block_mac(&ct, 5, 0, 1), "another drive");
        assert_ne!(a, StorageKeys::for_device(2, 0).block_mac(&ct, 5, 0, 1), "another processor");
        assert_eq!(a, StorageKeys::for_device(1, 0).block_mac(&ct, 5, 0, 1));
        assert!(a < 1 << 88);
        assert_ne!(StorageKeys::for_device(1, 0).pad(5, 0, 1), StorageKeys::for_device(1, 1).pad(5, 0, 1));
    }

    #[test]
    fn macs_bind_the_address_and_counters_and_hashes_the_position() {
        let k = StorageKeys::for_device(3, 0);
        let ct = [0x42u8; 512];
        let m = k.block_mac(&ct, 5, 0, 1);
        assert_ne!(m, k.block_mac(&ct, 6, 0, 1));
        assert_ne!(m, k.block_mac(&ct, 5, 1, 1));
        assert_ne!(m, k.block_mac(&ct, 5, 0, 2));
        let mut flipped = ct;
        flipped[300] ^= 1;
        assert_ne!(m, k.block_mac(&flipped, 5, 0, 1));
        let node = [7u8; 512];
        assert_ne!(k.node_hash(1, 0, &node), k.node_hash(1, 1, &node));
        assert_ne!(k.node_hash(1, 0, &node), k.node_hash(2, 0, &node));
        assert_ne!(k.counters_hash(0, &node[..160]), k.counters_hash(1, &node[..160]));
    }
}
