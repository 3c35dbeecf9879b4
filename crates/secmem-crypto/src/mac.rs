//! Truncated SipHash-2-4 MACs: per-line MACs and a generic MAC for designs.
//!
//! # Why SipHash-2-4
//!
//! SipHash-2-4 (Aumasson and Bernstein, 2012) is a keyed pseudorandom function with a
//! 128-bit key and a 64-bit output, designed as a MAC for short messages. That is this
//! module's job exactly: 64-bit tags (the width secure-memory hardware stores) over
//! 80-88 B messages. Here it costs about 55 ns a message, against about 145 ns for keyed
//! BLAKE3, which needs two compressions for 88 B and whose 256-bit output is cut to 64
//! bits anyway (`examples/crypto_speed`). Functional mode computes two or three of these per
//! request, so the MAC was a fifth of its time. The implementation is the `siphasher`
//! crate's; the known-answer test below checks it against the reference vectors.
//!
//! # Message formats
//!
//! Both MACs are SipHash-2-4 under the 128-bit MAC key over a message whose first byte
//! says which format follows, so a line MAC and a generic MAC can never be computed
//! over the same message.
//!
//! **Line MAC** ([`Keys::line_mac`]): a fixed 88-byte message
//!
//! | bytes | content |
//! | --- | --- |
//! | `0` | [`FORMAT_LINE`] (`0x00`) |
//! | `1` | minor counter |
//! | `2..8` | zero |
//! | `8..16` | line index, `u64` little-endian |
//! | `16..24` | major counter, `u64` little-endian |
//! | `24..88` | the 64-byte ciphertext |
//!
//! **Generic MAC** ([`Keys::mac`]): `[FORMAT_GENERIC (0x01), domain] || u64le(parts.len())
//! || for each part: u64le(part.len()) || part`. The length prefixes make the encoding
//! injective (`["ab", "c"]` and `["a", "bc"]` are different messages).
//!
//! # Truncation
//!
//! The tag is the 64-bit SipHash output, keeping its low `mac_bits` bits (`mac_bits` in
//! `1..=64`; the simulator uses 8, 16, 32 or 64). A shorter tag is therefore always the low
//! bits of a longer one over the same message, and a forgery succeeds with probability
//! `2^-mac_bits`.

use crate::Keys;
use siphasher::sip::SipHasher24;
use std::hash::Hasher;

/// Message format byte of a line MAC.
pub const FORMAT_LINE: u8 = 0x00;
/// Message format byte of a generic MAC.
pub const FORMAT_GENERIC: u8 = 0x01;
/// Length of a line-MAC message.
pub const LINE_MAC_MSG_LEN: usize = 88;

/// The fixed 88-byte message a line MAC is computed over (see the module docs).
#[inline]
pub fn line_mac_message(
    ciphertext: &[u8; 64],
    line: u64,
    major: u64,
    minor: u8,
) -> [u8; LINE_MAC_MSG_LEN] {
    let mut m = [0u8; LINE_MAC_MSG_LEN];
    m[0] = FORMAT_LINE;
    m[1] = minor;
    m[8..16].copy_from_slice(&line.to_le_bytes());
    m[16..24].copy_from_slice(&major.to_le_bytes());
    m[24..88].copy_from_slice(ciphertext);
    m
}

/// Keeps the low `mac_bits` bits of a 64-bit PRF output.
///
/// # Panics
/// If `mac_bits` is not in `1..=64`.
#[inline]
pub fn truncate_tag(full: u64, mac_bits: u32) -> u64 {
    assert!(
        (1..=64).contains(&mac_bits),
        "mac_bits {mac_bits} not in 1..=64"
    );
    if mac_bits == 64 {
        full
    } else {
        full & ((1u64 << mac_bits) - 1)
    }
}

impl Keys {
    /// MAC of one encrypted line: SipHash-2-4 (MAC key) over the 88-byte message
    /// `FORMAT_LINE, minor, line, major, ciphertext`, truncated to `mac_bits` bits.
    ///
    /// # Panics
    /// If `mac_bits` is not in `1..=64`.
    #[inline]
    pub fn line_mac(
        &self,
        ciphertext: &[u8; 64],
        line: u64,
        major: u64,
        minor: u8,
        mac_bits: u32,
    ) -> u64 {
        let msg = line_mac_message(ciphertext, line, major, minor);
        let mut h = SipHasher24::new_with_key(&self.mac_key);
        h.write(&msg);
        truncate_tag(h.finish(), mac_bits)
    }

    /// Generic MAC for designs (vault entries, logs, …): SipHash-2-4 (MAC key) over
    /// `FORMAT_GENERIC, domain, count, (len, part)*`, truncated to `mac_bits` bits.
    /// Distinct `domain` values give independent MACs.
    ///
    /// # Panics
    /// If `mac_bits` is not in `1..=64`.
    pub fn mac(&self, domain: u8, parts: &[&[u8]], mac_bits: u32) -> u64 {
        // `write` streams: the bytes hashed are the concatenation of every call's bytes.
        let mut h = SipHasher24::new_with_key(&self.mac_key);
        h.write(&[FORMAT_GENERIC, domain]);
        h.write(&(parts.len() as u64).to_le_bytes());
        for p in parts {
            h.write(&(p.len() as u64).to_le_bytes());
            h.write(p);
        }
        truncate_tag(h.finish(), mac_bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::{Rng, SeedableRng};

    /// SipHash-2-4 of `msg` under `key`, from the crate's one-shot API (a second path
    /// through it: the MACs above stream with `write`).
    fn siphash24(key: &[u8], msg: &[u8]) -> u64 {
        siphasher::sip::SipHasher24::new_with_key(key.try_into().unwrap()).hash(msg)
    }

    #[test]
    fn line_mac_is_siphash24_of_the_documented_message() {
        let k = Keys::from_seed(4);
        let key = blake3::derive_key(crate::keys::CONTEXT_MAC_KEY, &4u64.to_le_bytes());
        let ct: [u8; 64] = std::array::from_fn(|i| 200 - i as u8);
        let mut msg = vec![0x00, 9, 0, 0, 0, 0, 0, 0];
        msg.extend_from_slice(&0x1122u64.to_le_bytes());
        msg.extend_from_slice(&0x3344u64.to_le_bytes());
        msg.extend_from_slice(&ct);
        assert_eq!(msg.len(), LINE_MAC_MSG_LEN);
        let want = siphash24(&key[..16], &msg);
        assert_eq!(k.line_mac(&ct, 0x1122, 0x3344, 9, 64), want);
        assert_eq!(k.line_mac(&ct, 0x1122, 0x3344, 9, 16), want & 0xffff);
    }

    #[test]
    fn generic_mac_is_siphash24_of_the_documented_encoding() {
        let k = Keys::from_seed(5);
        let key = blake3::derive_key(crate::keys::CONTEXT_MAC_KEY, &5u64.to_le_bytes());
        let mut msg = vec![FORMAT_GENERIC, 0x42];
        msg.extend_from_slice(&2u64.to_le_bytes());
        for part in [&b"vault"[..], &[9u8; 70][..]] {
            msg.extend_from_slice(&(part.len() as u64).to_le_bytes());
            msg.extend_from_slice(part);
        }
        let want = siphash24(&key[..16], &msg);
        assert_eq!(k.mac(0x42, &[b"vault", &[9u8; 70]], 64), want);
        assert_eq!(k.mac(0x42, &[b"vault", &[9u8; 70]], 32), want & 0xffff_ffff);
    }

    #[test]
    fn every_mac_width_fits_its_bits_and_is_the_low_bits_of_the_full_tag() {
        let k = Keys::from_seed(2);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        for _ in 0..1000 {
            let ct: [u8; 64] = std::array::from_fn(|_| rng.gen());
            let (line, major, minor) = (rng.gen(), rng.gen(), rng.gen());
            let full = k.line_mac(&ct, line, major, minor, 64);
            for bits in [8u32, 16, 32] {
                let t = k.line_mac(&ct, line, major, minor, bits);
                assert!(t < 1u64 << bits, "{bits}-bit tag {t:#x}");
                assert_eq!(t, full & ((1u64 << bits) - 1));
            }
        }
    }

    #[test]
    #[should_panic(expected = "mac_bits")]
    fn zero_mac_bits_is_rejected() {
        Keys::from_seed(0).line_mac(&[0; 64], 0, 0, 0, 0);
    }

    /// Exact two-sided binomial acceptance region `[lo, hi]` holding the count with
    /// probability at least `1 - alpha`.
    fn binomial_bounds(n: u64, p: f64, alpha: f64) -> (u64, u64) {
        // pmf(0) = (1-p)^n is ~1e-170 for n=1e5, p=1/256: still a normal f64.
        let mut pmf = (n as f64 * (1.0 - p).ln()).exp();
        assert!(pmf > 0.0);
        let mut cdf = pmf;
        let (mut lo, mut hi) = (None, None);
        for k in 0..n {
            if lo.is_none() && cdf >= alpha / 2.0 {
                lo = Some(k);
            }
            if cdf >= 1.0 - alpha / 2.0 {
                hi = Some(k);
                break;
            }
            pmf *= (n - k) as f64 / (k + 1) as f64 * p / (1.0 - p);
            cdf += pmf;
        }
        (lo.unwrap(), hi.unwrap())
    }

    #[test]
    fn eight_bit_mac_matches_a_fixed_target_about_one_in_256_times() {
        let k = Keys::from_seed(123);
        let n = 100_000u64;
        let (lo, hi) = binomial_bounds(n, 1.0 / 256.0, 0.001);
        // Sanity of the bound itself: mean 390.6, sd 19.7 -> roughly 326..456.
        assert!(
            (320..335).contains(&lo) && (445..460).contains(&hi),
            "{lo}..{hi}"
        );
        let target = 0xa5u64;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(99);
        let mut hits = 0u64;
        for _ in 0..n {
            let ct: [u8; 64] = std::array::from_fn(|_| rng.gen());
            if k.line_mac(&ct, rng.gen(), rng.gen(), rng.gen(), 8) == target {
                hits += 1;
            }
        }
        assert!(
            (lo..=hi).contains(&hits),
            "{hits} hits of {n}, 99.9% region {lo}..={hi}"
        );
    }

    #[test]
    fn generic_mac_separates_domains_part_boundaries_and_line_macs() {
        let k = Keys::from_seed(6);
        let base = k.mac(3, &[b"ab", b"c"], 64);
        assert_ne!(base, k.mac(4, &[b"ab", b"c"], 64), "domain");
        assert_ne!(base, k.mac(3, &[b"a", b"bc"], 64), "part boundary");
        assert_ne!(base, k.mac(3, &[b"abc"], 64), "part count");
        assert_ne!(base, k.mac(3, &[b"ab", b"c", b""], 64), "empty part");
        assert_eq!(base, k.mac(3, &[b"ab", b"c"], 64), "deterministic");
        assert_ne!(base, Keys::from_seed(7).mac(3, &[b"ab", b"c"], 64), "key");
        // The exact line-MAC message fed to the generic MAC gives a different tag.
        let ct = [7u8; 64];
        let msg = line_mac_message(&ct, 1, 2, 3);
        assert_ne!(
            k.line_mac(&ct, 1, 2, 3, 64),
            k.mac(FORMAT_LINE, &[&msg], 64)
        );
    }

    proptest! {
        #[test]
        fn line_mac_changes_when_any_input_bit_flips(
            ct in proptest::array::uniform32(any::<u8>()),
            ct2 in proptest::array::uniform32(any::<u8>()),
            line: u64, major: u64, minor: u8,
            which in 0..4usize, bit in 0..512u32,
        ) {
            let k = Keys::from_seed(10);
            let mut c = [0u8; 64];
            c[..32].copy_from_slice(&ct);
            c[32..].copy_from_slice(&ct2);
            let base = k.line_mac(&c, line, major, minor, 64);
            let (mut c2, mut l2, mut ma2, mut mi2) = (c, line, major, minor);
            match which {
                0 => c2[(bit / 8) as usize] ^= 1 << (bit % 8),
                1 => l2 ^= 1 << (bit % 64),
                2 => ma2 ^= 1 << (bit % 64),
                _ => mi2 ^= 1 << (bit % 8),
            }
            prop_assert_ne!(base, k.line_mac(&c2, l2, ma2, mi2, 64));
        }
    }
}
