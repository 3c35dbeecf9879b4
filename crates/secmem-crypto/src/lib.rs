//! Real cryptography for secmem's *functional mode*: the simulated memory's bytes are
//! actually encrypted and authenticated, so a design's protocol bugs (a reused pad, a
//! MAC that does not cover the counter, a tree that misses a splice) show up as wrong
//! bytes or failed checks instead of going unnoticed.
//!
//! Nothing here is home-made cryptography: the primitives come from well-kept crates,
//! used through their documented APIs.
//!
//! | purpose | primitive | crate |
//! | --- | --- | --- |
//! | key derivation | BLAKE3 `derive_key` (KDF mode), one context string per key | `blake3` 1.x |
//! | line encryption | AES-128 in counter mode (pads = AES of counter blocks) | `aes` 0.8 (AES-NI autodetected at run time, software fallback) |
//! | line MACs, design MACs | SipHash-2-4 (a 64-bit PRF/MAC for short inputs), truncated | `siphasher` 1.x |
//! | Merkle tree node hashes | SipHash-2-4 under a separate key, 64-bit | `siphasher` 1.x |
//! | deduplication fingerprints (the ESD baselines) | SHA-1, CRC-32 (IEEE) | `sha1` 0.10, `crc32fast` 1.x |
//!
//! # Constructions
//!
//! * **Keys** ([`Keys::from_seed`]): AES-128 pad key, 128-bit MAC key and 128-bit tree
//!   key, each the first 16 bytes of `blake3::derive_key(context, seed.to_le_bytes())`
//!   under its own context string (`"secmem 2026 data-pad key"`, `"… line-mac key"`,
//!   `"… tree-hash key"`), so the keys are independent and one primitive's outputs are
//!   never usable as another's.
//! * **Pads** ([`Keys::pad`], [`Keys::pads_batch`], module [`pad`]): a 64 B line is
//!   XORed with four AES-128 blocks of 16-byte counter blocks
//!   `line (48 bits) | minor | domain<<2 | j | major (64 bits)`. The layout is injective
//!   for `line < 2^48` and `domain < 64`, and AES is a permutation, so pads repeat only if
//!   the tuple `(domain, line, major, minor)` does. Split counters (64-bit major per
//!   4 KB page, small minor per line) map straight onto the fields. The domain tag lets
//!   a design derive pads for another counter space (e.g. a drain vault, domain 1)
//!   that can never collide with data pads (domain 0). The batch API encrypts all
//!   counter blocks with one multi-block cipher call so AES-NI pipelines eight at a time.
//! * **Line MACs** ([`Keys::line_mac`], module [`mac`]): SipHash-2-4 over a fixed
//!   88-byte message binding ciphertext, line address, major and minor counter (so
//!   moving a line, replaying an old counter or flipping a bit is detected), truncated
//!   to the low `mac_bits` bits of its 64-bit output. A leading format byte keeps line
//!   MACs apart from generic MACs ([`Keys::mac`]) that designs use with their own
//!   domain byte and length-prefixed parts.
//! * **Tree hashes** ([`Keys::node_hash`], module [`tree_hash`]): a Bonsai Merkle Tree
//!   over the counter blocks; each 64 B node holds 8 little-endian 64-bit hashes of its
//!   64 B children; `node_hash` is SipHash-2-4 (tree key) over
//!   `(level, index, child)`, so a hash is bound to its position and splicing subtrees
//!   is detected. The root lives on chip.
//! * **Storage** (module [`storage`]): D-Shield's per-drive keys, 512 B block pads with a
//!   seed per 128-bit chunk, 88-bit block MACs (SipHash-2-4-128, truncated) and 8 B tree hashes.
//! * **Pad-reuse detection** ([`PadReuseDetector`], module [`reuse`]): records each
//!   pad used for encryption, per key, and returns [`PadReuse`] on a repeat.
//!
//! Security note: truncated 64-bit tree hashes and ≤64-bit MACs match what secure-memory
//! hardware stores; they model such hardware and are not meant for storage security
//! in general.
//!
//! ```
//! use secmem_crypto::{xor_line, Keys, PadReuseDetector};
//! let keys = Keys::from_seed(1);
//! let mut reuse = PadReuseDetector::new();
//! let (line, major, minor) = (0x1000, 0, 1);
//! reuse.record(keys.key_id(), 0, line, major, minor).unwrap();
//! let mut data = [0x42u8; 64];
//! xor_line(&mut data, &keys.pad(line, major, minor)); // encrypt
//! let tag = keys.line_mac(&data, line, major, minor, 64);
//! assert_eq!(tag, keys.line_mac(&data, line, major, minor, 64));
//! xor_line(&mut data, &keys.pad(line, major, minor)); // decrypt
//! assert_eq!(data, [0x42u8; 64]);
//! assert!(reuse.record(keys.key_id(), 0, line, major, minor).is_err());
//! ```

pub mod fingerprint;
pub mod host_rates;
pub mod keys;
pub mod mac;
pub mod pad;
pub mod reuse;
pub mod storage;
pub mod tree_hash;

pub use keys::Keys;
pub use pad::{xor_line, DOMAIN_DATA, DOMAIN_VAULT, MAX_DOMAIN, MAX_LINES};
pub use reuse::{PadReuse, PadReuseDetector};
pub use tree_hash::{node_entry, set_node_entry, NODE_SLOTS};

#[cfg(test)]
mod known_answers {
    //! Known-answer tests of the primitives, through the same crate APIs the library
    //! uses, so a broken backend or a wrong crate feature is caught.

    use aes::cipher::{BlockEncrypt, KeyInit};

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn aes128_matches_fips197_appendix_c1_single_and_pipelined() {
        let key = hex("000102030405060708090a0b0c0d0e0f");
        let pt = hex("00112233445566778899aabbccddeeff");
        let ct = hex("69c4e0d86a7b0430d8cdb78070b4c55a");
        let aes = aes::Aes128::new_from_slice(&key).unwrap();
        let mut b = aes::Block::clone_from_slice(&pt);
        aes.encrypt_block(&mut b);
        assert_eq!(b.as_slice(), &ct[..]);
        // 19 blocks: two 8-block pipelined rounds plus a 3-block tail.
        let mut many = vec![aes::Block::clone_from_slice(&pt); 19];
        aes.encrypt_blocks(&mut many);
        for b in &many {
            assert_eq!(b.as_slice(), &ct[..]);
        }
    }

    /// SipHash-2-4 reference vectors (the reference implementation's `vectors.h`, also in
    /// the paper's appendix): key `00 01 .. 0f`, message `00 01 .. (len - 1)`, the 64-bit
    /// output as the little-endian number of its 8 bytes. The streaming path the MACs use
    /// (several `write` calls) must give the same output as one call.
    #[test]
    fn siphash24_matches_the_reference_vectors_one_shot_and_streamed() {
        use std::hash::Hasher;
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let input: Vec<u8> = (0..64).map(|i| i as u8).collect();
        let cases = [(0, 0x726f_db47_dd0e_0e31u64), (15, 0xa129_ca61_49be_45e5), (63, 0x958a_324c_eb06_4572)];
        for (len, want) in cases {
            let one = siphasher::sip::SipHasher24::new_with_key(&key).hash(&input[..len]);
            assert_eq!(one, want, "one-shot, len {len}");
            let mut h = siphasher::sip::SipHasher24::new_with_key(&key);
            for part in input[..len].chunks(5) {
                h.write(part);
            }
            assert_eq!(h.finish(), want, "streamed, len {len}");
        }
    }

    /// Official BLAKE3 test vectors (test_vectors.json): input = bytes `i % 251`,
    /// key "whats the Elvish word for friend", first 32 output bytes.
    #[test]
    fn blake3_keyed_hash_and_derive_key_match_official_vectors() {
        let key: &[u8; 32] = b"whats the Elvish word for friend";
        let input: Vec<u8> = (0..1024).map(|i| (i % 251) as u8).collect();
        let cases = [
            (
                0,
                "92b2b75604ed3c761f9d6f62392c8a9227ad0ea3f09573e783f1498a4ed60d26",
            ),
            (
                1,
                "6d7878dfff2f485635d39013278ae14f1454b8c0a3a2d34bc1ab38228a80c95b",
            ),
            (
                1024,
                "75c46f6f3d9eb4f55ecaaee480db732e6c2105546f1e675003687c31719c7ba4",
            ),
        ];
        for (len, want) in cases {
            assert_eq!(
                blake3::keyed_hash(key, &input[..len]).as_bytes()[..],
                hex(want)[..],
                "keyed len {len}"
            );
        }
        let ctx = "BLAKE3 2019-12-27 16:29:52 test vectors context";
        assert_eq!(
            blake3::derive_key(ctx, &[])[..],
            hex("2cc39783c223154fea8dfb7c1b1660f2ac2dcbd1c1de8277b0b0dd39b7e50d7d")[..]
        );
        assert_eq!(
            blake3::derive_key(ctx, &input[..1])[..],
            hex("b3e2e340a117a499c6cf2398a19ee0d29cca2bb7404c73063382693bf66cb06c")[..]
        );
    }
}
