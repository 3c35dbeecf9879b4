//! Counter-mode one-time pads: AES-128 over unique counter blocks.
//!
//! # Counter block layout
//!
//! The 64-byte pad of a line is four AES-128 blocks, `pad[16*j..16*j+16] =
//! AES_K(counter_block(domain, line, major, minor, j))` for `j` in `0..4`, where the
//! 16-byte counter block is
//!
//! | bytes | content |
//! | --- | --- |
//! | `0..6` | line index, low 48 bits, little-endian (the line index must be `< 2^48`) |
//! | `6` | minor counter (`u8`) |
//! | `7` | `domain << 2 \| j` (domain `< 64`, block index `j < 4`) |
//! | `8..16` | major counter, `u64` little-endian |
//!
//! Every field sits at a fixed position with a fixed width and none is truncated
//! (line and domain are range-checked, panicking otherwise), so the map
//! `(domain, line, major, minor, j) -> counter block` is injective. AES under one key is
//! a permutation, so distinct counter blocks give distinct pad blocks, and a pad
//! repeats only if the same `(domain, line, major, minor)` is used twice under the same
//! key — which is what [`crate::PadReuseDetector`] watches for.
//!
//! 2^48 lines of 64 B is 16 PiB of memory, far beyond anything simulated.

use aes::cipher::consts::U16;
use aes::cipher::inout::InOutBuf;
use aes::cipher::BlockEncrypt;

use crate::Keys;

/// Lines addressable by a pad: line indices must be `< MAX_LINES` (2^48).
pub const MAX_LINES: u64 = 1 << 48;
/// Largest allowed pad domain tag (6 bits).
pub const MAX_DOMAIN: u8 = 63;
/// Pad domain of ordinary data-line encryption.
pub const DOMAIN_DATA: u8 = 0;
/// Pad domain reserved for a drain vault's own counter space.
pub const DOMAIN_VAULT: u8 = 1;

/// The `j`-th 16-byte counter block of the pad of `(domain, line, major, minor)`;
/// see the module docs for the layout.
///
/// # Panics
/// If `line >= MAX_LINES`, `domain > MAX_DOMAIN` or `j >= 4`.
#[inline]
pub fn counter_block(domain: u8, line: u64, major: u64, minor: u8, j: u8) -> [u8; 16] {
    check_pad_inputs(domain, line);
    assert!(j < 4, "pad block index {j} out of range 0..4");
    let mut b = [0u8; 16];
    b[0..6].copy_from_slice(&line.to_le_bytes()[0..6]);
    b[6] = minor;
    b[7] = (domain << 2) | j;
    b[8..16].copy_from_slice(&major.to_le_bytes());
    b
}

/// The four counter blocks of one pad, concatenated (same layout as [`counter_block`],
/// built with one range check per line rather than per block).
#[inline]
fn pad_counter_blocks(domain: u8, line: u64, major: u64, minor: u8) -> [u8; 64] {
    check_pad_inputs(domain, line);
    // Bytes 0..8 of a counter block as a little-endian u64: line | minor | domain<<2 | j.
    let low = line | (minor as u64) << 48 | ((domain as u64) << 2) << 56;
    let major = major.to_le_bytes();
    let mut out = [0u8; 64];
    for (j, chunk) in out.chunks_exact_mut(16).enumerate() {
        chunk[..8].copy_from_slice(&(low | (j as u64) << 56).to_le_bytes());
        chunk[8..].copy_from_slice(&major);
    }
    out
}

#[inline]
fn check_pad_inputs(domain: u8, line: u64) {
    assert!(
        line < MAX_LINES,
        "line index {line:#x} does not fit the 48-bit pad counter field"
    );
    assert!(
        domain <= MAX_DOMAIN,
        "pad domain {domain} exceeds {MAX_DOMAIN}"
    );
}

impl Keys {
    /// The 64-byte data pad ([`DOMAIN_DATA`]) of `line` at counter `(major, minor)`.
    ///
    /// # Panics
    /// If `line >= MAX_LINES`.
    #[inline]
    pub fn pad(&self, line: u64, major: u64, minor: u8) -> [u8; 64] {
        self.pad_with_domain(DOMAIN_DATA, line, major, minor)
    }

    /// The 64-byte pad of `line` at counter `(major, minor)` in pad domain `domain`.
    /// Pads of different domains never collide, so a design may run a separate counter
    /// space (e.g. a drain vault, [`DOMAIN_VAULT`]) under the same key.
    ///
    /// # Panics
    /// If `line >= MAX_LINES` or `domain > MAX_DOMAIN`.
    pub fn pad_with_domain(&self, domain: u8, line: u64, major: u64, minor: u8) -> [u8; 64] {
        let mut out = pad_counter_blocks(domain, line, major, minor);
        let (blocks, tail) = InOutBuf::from(&mut out[..]).into_chunks::<U16>();
        debug_assert!(tail.is_empty());
        self.pad_cipher.encrypt_blocks_inout(blocks);
        out
    }

    /// Data pads of many lines at once: `out[i] = self.pad(reqs[i].0, reqs[i].1, reqs[i].2)`.
    ///
    /// The `4 * reqs.len()` counter blocks are written straight into `out` and encrypted
    /// in place by ONE multi-block cipher call, so the AES-NI backend pipelines eight
    /// blocks at a time; per line this is several times faster than [`Keys::pad`].
    ///
    /// # Panics
    /// If `out.len() != reqs.len()` or any line is `>= MAX_LINES`.
    #[inline]
    pub fn pads_batch(&self, reqs: &[(u64, u64, u8)], out: &mut [[u8; 64]]) {
        self.pads_batch_with_domain(DOMAIN_DATA, reqs, out)
    }

    /// [`Keys::pads_batch`] in pad domain `domain`.
    ///
    /// # Panics
    /// If `out.len() != reqs.len()`, any line is `>= MAX_LINES` or `domain > MAX_DOMAIN`.
    pub fn pads_batch_with_domain(
        &self,
        domain: u8,
        reqs: &[(u64, u64, u8)],
        out: &mut [[u8; 64]],
    ) {
        assert_eq!(
            out.len(),
            reqs.len(),
            "pads_batch: output and request counts differ"
        );
        for (dst, &(line, major, minor)) in out.iter_mut().zip(reqs) {
            *dst = pad_counter_blocks(domain, line, major, minor);
        }
        let (blocks, tail) = InOutBuf::from(out.as_flattened_mut()).into_chunks::<U16>();
        debug_assert!(tail.is_empty());
        self.pad_cipher.encrypt_blocks_inout(blocks);
    }
}

/// `a ^= pad`: encrypts a plaintext line or decrypts a ciphertext line in place.
#[inline]
pub fn xor_line(a: &mut [u8; 64], pad: &[u8; 64]) {
    for (x, p) in a.iter_mut().zip(pad) {
        *x ^= p;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes::cipher::KeyInit;
    use proptest::prelude::*;

    #[test]
    fn counter_block_places_fields_where_documented() {
        let b = counter_block(5, 0x0000_6655_4433_2211, 0x8877_6655_4433_2211, 0xab, 3);
        assert_eq!(
            b,
            [
                0x11,
                0x22,
                0x33,
                0x44,
                0x55,
                0x66,
                0xab,
                (5 << 2) | 3,
                0x11,
                0x22,
                0x33,
                0x44,
                0x55,
                0x66,
                0x77,
                0x88
            ]
        );
    }

    #[test]
    fn fast_counter_blocks_equal_the_reference_layout() {
        let cases = [
            (0, 0, 0, 0),
            (MAX_DOMAIN, MAX_LINES - 1, u64::MAX, u8::MAX),
            (3, 0x1234_5678_9abc, 42, 0x7f),
        ];
        for (d, l, ma, mi) in cases {
            let fast = pad_counter_blocks(d, l, ma, mi);
            for j in 0..4u8 {
                assert_eq!(
                    &fast[16 * j as usize..][..16],
                    &counter_block(d, l, ma, mi, j)[..]
                );
            }
        }
    }

    #[test]
    fn pad_is_aes_of_the_documented_counter_blocks() {
        let k = Keys::from_seed(11);
        let key = blake3::derive_key(crate::keys::CONTEXT_PAD_KEY, &11u64.to_le_bytes());
        let aes = aes::Aes128::new_from_slice(&key[..16]).unwrap();
        let (line, major, minor) = (0x1234_5678_9abc, 77, 5);
        let pad = k.pad_with_domain(DOMAIN_VAULT, line, major, minor);
        for j in 0..4u8 {
            // Built by hand from the layout table, independently of `counter_block`.
            let mut cb = [0u8; 16];
            cb[..6].copy_from_slice(&[0xbc, 0x9a, 0x78, 0x56, 0x34, 0x12]);
            cb[6] = minor;
            cb[7] = (DOMAIN_VAULT << 2) | j;
            cb[8..].copy_from_slice(&major.to_le_bytes());
            let mut block = aes::Block::from(cb);
            aes.encrypt_block(&mut block);
            assert_eq!(&pad[16 * j as usize..][..16], block.as_slice(), "block {j}");
        }
    }

    #[test]
    #[should_panic(expected = "48-bit")]
    fn line_beyond_48_bits_is_rejected_not_truncated() {
        Keys::from_seed(0).pad(MAX_LINES, 0, 0);
    }

    #[test]
    #[should_panic(expected = "pad domain")]
    fn domain_beyond_6_bits_is_rejected() {
        Keys::from_seed(0).pad_with_domain(MAX_DOMAIN + 1, 0, 0, 0);
    }

    #[test]
    fn four_blocks_of_one_pad_all_differ() {
        let pad = Keys::from_seed(0).pad(0, 0, 0);
        let blocks: Vec<&[u8]> = pad.chunks(16).collect();
        for i in 0..4 {
            for j in i + 1..4 {
                assert_ne!(blocks[i], blocks[j]);
            }
        }
    }

    #[test]
    fn encrypt_then_decrypt_round_trips() {
        let k = Keys::from_seed(5);
        let plain: [u8; 64] = std::array::from_fn(|i| i as u8 * 3);
        let mut line = plain;
        let pad = k.pad(100, 2, 9);
        xor_line(&mut line, &pad);
        assert_ne!(line, plain, "encryption must change the line");
        xor_line(&mut line, &k.pad(100, 2, 9));
        assert_eq!(line, plain);
    }

    #[test]
    fn different_seeds_give_different_pads() {
        assert_ne!(
            Keys::from_seed(1).pad(3, 4, 5),
            Keys::from_seed(2).pad(3, 4, 5)
        );
    }

    #[test]
    fn empty_batch_is_fine() {
        Keys::from_seed(1).pads_batch(&[], &mut []);
    }

    #[test]
    #[should_panic(expected = "counts differ")]
    fn batch_with_mismatched_output_panics() {
        Keys::from_seed(1).pads_batch(&[(0, 0, 0)], &mut [[0; 64]; 2]);
    }

    fn line() -> impl Strategy<Value = u64> {
        0..MAX_LINES
    }

    proptest! {
        #[test]
        fn pad_changes_when_any_input_changes(
            domain in 0..=MAX_DOMAIN, l in line(), major: u64, minor: u8,
            which in 0..4usize, bit in 0..64u32,
        ) {
            let k = Keys::from_seed(7);
            let base = k.pad_with_domain(domain, l, major, minor);
            let (mut d2, mut l2, mut ma2, mut mi2) = (domain, l, major, minor);
            match which {
                0 => d2 ^= 1 << (bit % 6),
                1 => l2 ^= 1 << (bit % 48),
                2 => ma2 ^= 1 << bit,
                _ => mi2 ^= 1 << (bit % 8),
            }
            prop_assert_ne!(base, k.pad_with_domain(d2, l2, ma2, mi2));
        }

        #[test]
        fn batch_equals_one_at_a_time(
            domain in 0..=MAX_DOMAIN,
            reqs in proptest::collection::vec((line(), any::<u64>(), any::<u8>()), 0..40),
        ) {
            let k = Keys::from_seed(8);
            let mut out = vec![[0u8; 64]; reqs.len()];
            k.pads_batch_with_domain(domain, &reqs, &mut out);
            for (r, got) in reqs.iter().zip(&out) {
                prop_assert_eq!(*got, k.pad_with_domain(domain, r.0, r.1, r.2));
            }
            if domain == DOMAIN_DATA {
                let mut out2 = vec![[1u8; 64]; reqs.len()];
                k.pads_batch(&reqs, &mut out2);
                prop_assert_eq!(out, out2);
            }
        }
    }
}
