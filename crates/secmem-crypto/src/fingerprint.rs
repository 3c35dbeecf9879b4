//! Deduplication fingerprints of a 64 B line, as the deduplicating designs' baselines compute
//! them: SHA-1 (Dedup_SHA1, taken as collision-free) and CRC-32 (DeWrite: cheap, so a match is
//! confirmed by comparing the bytes).

use sha1::{Digest, Sha1};

/// SHA-1 of `line` (160 bits).
pub fn sha1_line(line: &[u8; 64]) -> [u8; 20] { Sha1::digest(line).into() }

/// CRC-32 (IEEE) of `line`.
pub fn crc32_line(line: &[u8; 64]) -> u32 { crc32fast::hash(line) }

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprints_are_the_standard_ones() {
        // SHA-1 and CRC-32 of 64 zero bytes (`head -c 64 /dev/zero | sha1sum`, `| crc32`).
        let zeros = [0u8; 64];
        let hex: String = sha1_line(&zeros).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "c8d7d0ef0eedfa82d2ea1aa592845b9a6d4b02b7");
        assert_eq!(crc32_line(&zeros), 0x758d_6336);
    }
}
