//! What the host's cores take to run the software storage baselines' cryptography, per
//! 512-byte sector: dm-crypt's AES-XTS (`aes-xts-plain64`) and dm-integrity's HMAC-SHA256
//! tags, measured with RustCrypto's `xts-mode`, `aes`, `hmac` and `sha2` (AES-NI when the CPU
//! has it, as the kernel's implementations use). `secmem io-calibrate` runs it and prints the
//! `[io]` fields to put in a config.

use aes::cipher::KeyInit;
use aes::Aes128;
use hmac::{Mac, SimpleHmac};
use sha2::Sha256;
use std::time::Instant;
use xts_mode::{get_tweak_default, Xts128};

/// Bytes in a logical block (a dm-crypt sector).
pub const SECTOR_BYTES: usize = 512;

/// Nanoseconds per 512 B sector on this host.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostRates {
    pub aes_xts_ns_per_sector: f64,
    pub hmac_sha256_ns_per_sector: f64,
}

/// Measures both rates over `sectors` sectors each (the median of five rounds, so a burst of
/// other work on the machine does not set the figure).
pub fn measure(sectors: usize) -> HostRates {
    let sectors = sectors.max(1);
    let xts = Xts128::new(Aes128::new(&[7u8; 16].into()), Aes128::new(&[9u8; 16].into()));
    let mut buf = vec![0x5au8; SECTOR_BYTES * sectors];
    let mut sink = 0u8;
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let aes = median(
        (0..5)
            .map(|_| {
                let t = Instant::now();
                xts.encrypt_area(&mut buf, SECTOR_BYTES, 0, get_tweak_default);
                sink ^= buf[3];
                t.elapsed().as_nanos() as f64 / sectors as f64
            })
            .collect(),
    );
    // Keyed once, as the kernel's hmac(sha256) transform keeps its key's inner and outer
    // states; each sector clones them. `SimpleHmac` (the Digest-based HMAC): `Hmac`'s
    // block-level core runs 10-100x slower when built with the workspace's fat LTO and
    // target-cpu=native (measured: 8-78 us a sector against 0.5 us).
    let keyed = <SimpleHmac<Sha256> as Mac>::new_from_slice(&[3u8; 32]).expect("any key length");
    let hmac = median(
        (0..5)
            .map(|_| {
                let t = Instant::now();
                for (i, s) in buf.chunks_exact(SECTOR_BYTES).enumerate() {
                    let mut m = keyed.clone();
                    m.update(&(i as u64).to_le_bytes());
                    m.update(s);
                    sink ^= m.finalize().into_bytes()[0];
                }
                t.elapsed().as_nanos() as f64 / sectors as f64
            })
            .collect(),
    );
    std::hint::black_box(sink);
    HostRates { aes_xts_ns_per_sector: aes, hmac_sha256_ns_per_sector: hmac }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xts_round_trips_a_sector_and_both_rates_are_measured() {
        let xts = Xts128::new(Aes128::new(&[1u8; 16].into()), Aes128::new(&[2u8; 16].into()));
        let plain: Vec<u8> = (0..SECTOR_BYTES).map(|i| i as u8).collect();
        let mut s = plain.clone();
        xts.encrypt_sector(&mut s, get_tweak_default(42));
        assert_ne!(s, plain);
        xts.decrypt_sector(&mut s, get_tweak_default(42));
        assert_eq!(s, plain);
        let r = measure(256);
        assert!(r.aes_xts_ns_per_sector > 0.0 && r.hmac_sha256_ns_per_sector > 0.0, "{r:?}");
    }
}
