//! SEC-DED (72,64): the extended Hamming code a DIMM's ECC chip stores beside every 8 B word.
//!
//! A memory controller computes 8 check bits per 64-bit word from the word's contents: 7
//! Hamming bits and one overall parity bit. Any single flipped bit of the 72 is corrected, and
//! any two flipped bits are detected (never miscorrected). A 64 B line has 8 words and so 64
//! check bits; ESD (HPCA'23) uses those 64 bits, which the controller computes anyway, as the
//! line's duplicate-detection fingerprint.
//!
//! Layout: the 72 bits are numbered 0..=71. Position 0 holds the overall parity; positions
//! 1, 2, 4, ..., 64 (the powers of two) hold Hamming bits 0..=6; the 64 data bits fill the other
//! positions in order (data bit 0 at position 3). Hamming bit `i` makes the XOR of every
//! position with bit `i` set even, so the XOR of the positions of the set bits (the syndrome)
//! is 0 for a codeword and names a single flipped position otherwise. The overall parity
//! tells one flip (odd) from two (even).

/// Position (1..=71) of each data bit in the codeword.
const POSITION: [u8; 64] = positions();

const fn positions() -> [u8; 64] {
    let mut out = [0u8; 64];
    let (mut pos, mut k) = (1u32, 0usize);
    while k < 64 {
        if !pos.is_power_of_two() {
            out[k] = pos as u8;
            k += 1;
        }
        pos += 1;
    }
    out
}

/// For Hamming bit `i`: the data bits whose position has bit `i` set.
const MASKS: [u64; 7] = masks();

const fn masks() -> [u64; 7] {
    let mut out = [0u64; 7];
    let mut k = 0;
    while k < 64 {
        let mut i = 0;
        while i < 7 {
            if POSITION[k] & (1 << i) != 0 {
                out[i] |= 1 << k;
            }
            i += 1;
        }
        k += 1;
    }
    out
}

/// The 8 check bits of `data`: Hamming bit `i` in bit `i` (0..=6), the overall parity in bit 7.
#[inline]
pub fn encode(data: u64) -> u8 {
    let mut check = 0u8;
    for (i, m) in MASKS.iter().enumerate() {
        check |= (((data & m).count_ones() & 1) as u8) << i;
    }
    let overall = (data.count_ones() + check.count_ones()) & 1;
    check | (overall as u8) << 7
}

/// What reading a stored word and its check bits found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// No error.
    Clean(u64),
    /// One bit was flipped and is corrected: the data, and the flipped position (0..=71).
    Corrected { data: u64, position: u8 },
    /// Two bits (or another even number) were flipped: detected, not correctable.
    Uncorrectable,
}

/// Checks (and corrects) a stored word against its stored check bits.
pub fn decode(data: u64, check: u8) -> Decoded {
    let fresh = encode(data);
    let syndrome = (fresh ^ check) & 0x7F;
    // Overall parity of the 72 stored bits: odd after an odd number of flips.
    let odd = (data.count_ones() + check.count_ones()) & 1 == 1;
    match (syndrome, odd) {
        (0, false) => Decoded::Clean(data),
        // The overall parity bit itself flipped.
        (0, true) => Decoded::Corrected { data, position: 0 },
        (s, true) => {
            if s.is_power_of_two() {
                // A Hamming bit flipped; the data is intact.
                return Decoded::Corrected { data, position: s };
            }
            match POSITION.iter().position(|&p| p == s) {
                Some(k) => Decoded::Corrected { data: data ^ (1 << k), position: s },
                // A syndrome past the last position: more than one flip.
                None => Decoded::Uncorrectable,
            }
        }
        (_, false) => Decoded::Uncorrectable,
    }
}

/// The 64 check bits of a 64 B line: each 8 B word's (little-endian), word 0 in the low byte.
pub fn line_ecc(line: &[u8; 64]) -> u64 {
    let mut out = 0u64;
    for (w, chunk) in line.chunks_exact(8).enumerate() {
        let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        out |= u64::from(encode(word)) << (8 * w);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flips codeword position `p` (0..=71) of (data, check).
    fn flip(data: u64, check: u8, p: u8) -> (u64, u8) {
        match p {
            0 => (data, check ^ 0x80),
            p if p.is_power_of_two() => (data, check ^ (1 << p.trailing_zeros())),
            p => (data ^ (1 << POSITION.iter().position(|&q| q == p).unwrap()), check),
        }
    }

    fn words() -> Vec<u64> {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut v = vec![0, u64::MAX, 1, 1 << 63, 0xAAAA_AAAA_AAAA_AAAA];
        for _ in 0..60 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v.push(x);
        }
        v
    }

    #[test]
    fn the_data_bits_take_every_position_that_is_not_a_power_of_two() {
        let mut all: Vec<u8> = POSITION.to_vec();
        all.extend([1, 2, 4, 8, 16, 32, 64]);
        all.sort();
        assert_eq!(all, (1..=71).collect::<Vec<u8>>());
    }

    #[test]
    fn a_clean_word_decodes_to_itself() {
        for w in words() {
            assert_eq!(decode(w, encode(w)), Decoded::Clean(w));
        }
    }

    #[test]
    fn every_single_bit_error_in_a_word_is_corrected() {
        for w in words() {
            let c = encode(w);
            for p in 0..72u8 {
                let (d, k) = flip(w, c, p);
                assert_eq!(decode(d, k), Decoded::Corrected { data: w, position: p }, "word {w:#x}, position {p}");
            }
        }
    }

    #[test]
    fn every_double_bit_error_in_a_word_is_detected_and_never_miscorrected() {
        for w in words().into_iter().take(12) {
            let c = encode(w);
            for p in 0..72u8 {
                for q in p + 1..72u8 {
                    let (d, k) = flip(w, c, p);
                    let (d, k) = flip(d, k, q);
                    assert_eq!(decode(d, k), Decoded::Uncorrectable, "word {w:#x}, positions {p} and {q}");
                }
            }
        }
    }

    #[test]
    fn a_lines_ecc_is_its_eight_words_check_bits_and_differs_for_one_changed_bit() {
        let mut line = [0u8; 64];
        for (i, b) in line.iter_mut().enumerate() {
            *b = (i * 37 + 11) as u8;
        }
        let e = line_ecc(&line);
        for w in 0..8 {
            let word = u64::from_le_bytes(line[8 * w..8 * w + 8].try_into().unwrap());
            assert_eq!((e >> (8 * w)) as u8, encode(word));
        }
        // A code of minimum distance 4: one data bit changes at least 3 check bits.
        line[17] ^= 0x04;
        assert!((line_ecc(&line) ^ e).count_ones() >= 3);
    }
}
