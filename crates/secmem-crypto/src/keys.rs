//! Key material for functional mode, derived deterministically from a `u64` seed.

use aes::cipher::KeyInit;
use aes::Aes128;

/// BLAKE3 `derive_key` context for the AES-128 key that produces counter-mode pads.
pub const CONTEXT_PAD_KEY: &str = "secmem 2026 data-pad key";
/// BLAKE3 `derive_key` context for the 128-bit SipHash key of per-line (and design) MACs.
pub const CONTEXT_MAC_KEY: &str = "secmem 2026 line-mac key";
/// BLAKE3 `derive_key` context for the 128-bit SipHash key of Merkle-tree node hashes.
pub const CONTEXT_TREE_KEY: &str = "secmem 2026 tree-hash key";

/// All keys one simulated secure-memory controller uses.
///
/// Every key is derived from the seed with BLAKE3's `derive_key` mode (a KDF), each
/// under its own context string, so the three keys are independent of each other:
///
/// | key | derivation | used by |
/// | --- | --- | --- |
/// | AES-128 pad key | first 16 bytes of `derive_key(CONTEXT_PAD_KEY, seed.to_le_bytes())` | [`Keys::pad`] and friends |
/// | 16 B MAC key (SipHash-2-4) | first 16 bytes of `derive_key(CONTEXT_MAC_KEY, seed.to_le_bytes())` | [`Keys::line_mac`], [`Keys::mac`] |
/// | 16 B tree key (SipHash-2-4) | first 16 bytes of `derive_key(CONTEXT_TREE_KEY, seed.to_le_bytes())` | [`Keys::node_hash`] |
///
/// The seed is a simulation knob, not a secret: functional mode is about checking
/// that a design's *protocol* is right (pads never reused, tampering detected), and a
/// reproducible key makes every run repeatable.
///
/// `key_id` names the key generation for the [`crate::PadReuseDetector`]: pads under
/// different keys never collide, so the detector keeps one set per `key_id`. For
/// [`Keys::from_seed`] it is the seed itself.
#[derive(Clone)]
pub struct Keys {
    pub(crate) pad_cipher: Aes128,
    pub(crate) mac_key: [u8; 16],
    pub(crate) tree_key: [u8; 16],
    key_id: u64,
}

impl Keys {
    /// Derives all keys from `seed`; `key_id` is `seed`.
    pub fn from_seed(seed: u64) -> Self {
        let material = seed.to_le_bytes();
        let pad_key = blake3::derive_key(CONTEXT_PAD_KEY, &material);
        let mac_key = blake3::derive_key(CONTEXT_MAC_KEY, &material);
        let tree_key = blake3::derive_key(CONTEXT_TREE_KEY, &material);
        let pad_cipher =
            Aes128::new_from_slice(&pad_key[..16]).expect("AES-128 takes a 16-byte key");
        let first_16 = |k: [u8; 32]| -> [u8; 16] { k[..16].try_into().expect("16 of 32 bytes") };
        Keys {
            pad_cipher,
            mac_key: first_16(mac_key),
            tree_key: first_16(tree_key),
            key_id: seed,
        }
    }

    /// The identifier of this key generation, for the pad-reuse detector.
    pub fn key_id(&self) -> u64 {
        self.key_id
    }
}

impl std::fmt::Debug for Keys {
    /// Shows only `key_id`: key bytes stay out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Keys")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_derives_identical_keys() {
        let (a, b) = (Keys::from_seed(42), Keys::from_seed(42));
        assert_eq!(a.mac_key, b.mac_key);
        assert_eq!(a.tree_key, b.tree_key);
        assert_eq!(a.pad(7, 1, 2), b.pad(7, 1, 2));
        assert_eq!(a.key_id(), 42);
    }

    #[test]
    fn mac_tree_and_pad_keys_are_independent_and_seed_dependent() {
        let k = Keys::from_seed(1);
        let pad_key: [u8; 16] = blake3::derive_key(CONTEXT_PAD_KEY, &1u64.to_le_bytes())[..16].try_into().unwrap();
        assert_ne!(k.mac_key, k.tree_key);
        assert_ne!(k.mac_key, pad_key);
        assert_ne!(k.tree_key, pad_key);
        let other = Keys::from_seed(2);
        assert_ne!(k.mac_key, other.mac_key);
        assert_ne!(k.tree_key, other.tree_key);
    }

    #[test]
    fn pad_cipher_uses_the_documented_derived_key() {
        use aes::cipher::{BlockEncrypt, KeyInit};
        let k = Keys::from_seed(9);
        let pad_key = blake3::derive_key(CONTEXT_PAD_KEY, &9u64.to_le_bytes());
        let reference = Aes128::new_from_slice(&pad_key[..16]).unwrap();
        let mut a = aes::Block::from([0x5a; 16]);
        let mut b = a;
        k.pad_cipher.encrypt_block(&mut a);
        reference.encrypt_block(&mut b);
        assert_eq!(a, b);
    }

    #[test]
    fn debug_output_hides_key_bytes() {
        let s = format!("{:?}", Keys::from_seed(3));
        assert!(s.contains("key_id: 3"), "{s}");
        assert!(!s.contains("mac_key"), "{s}");
    }
}
