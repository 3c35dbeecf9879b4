//! Throughput of the functional-mode primitives, in lines per second.
//!
//! Run with `cargo run --release -p secmem-crypto --example crypto_speed`.
//! Optional argument: number of lines per measurement (default 1,000,000).

use std::hint::black_box;
use std::time::Instant;

use secmem_crypto::{xor_line, Keys};

/// Best of `reps` runs of `f` (which processes `lines` lines), in lines per second.
fn rate(lines: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..reps {
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    lines as f64 / best
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(1_000_000, |s| s.parse().expect("line count"));
    let reps = 5;
    let keys = Keys::from_seed(2026);
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    println!("CPU AES-NI: {}", std::arch::is_x86_feature_detected!("aes"));
    println!("{n} lines per measurement, best of {reps}");

    // Requests: consecutive lines, counters varying a little, like a write stream.
    let reqs: Vec<(u64, u64, u8)> = (0..n as u64)
        .map(|i| (i, i >> 6, (i & 0x7f) as u8))
        .collect();

    let single = rate(n, reps, || {
        let mut acc = [0u8; 64];
        for &(line, major, minor) in &reqs {
            let p = keys.pad(black_box(line), major, minor);
            xor_line(&mut acc, &p);
        }
        black_box(acc);
    });
    report("pad, one line at a time", single);

    let mut out = vec![[0u8; 64]; 64];
    let batch = rate(n, reps, || {
        for chunk in reqs.chunks(64) {
            let out = &mut out[..chunk.len()];
            keys.pads_batch(black_box(chunk), out);
            black_box(&out);
        }
    });
    report("pads_batch, 64 lines per batch", batch);
    println!(
        "  batch speed-up over one at a time: {:.1}x",
        batch / single
    );

    let ct = [0x5au8; 64];
    let mac = rate(n, reps, || {
        let mut acc = 0u64;
        for &(line, major, minor) in &reqs {
            acc ^= keys.line_mac(black_box(&ct), line, major, minor, 64);
        }
        black_box(acc);
    });
    report("line_mac (64-bit)", mac);

    // References: the bare primitive under line_mac (to separate crate cost from ours), and
    // keyed BLAKE3, which line_mac used before SipHash-2-4 (the figure behind the choice).
    let key = [7u8; 32];
    let msg = [0x33u8; 88];
    let raw = rate(n, reps, || {
        let mut acc = 0u64;
        for _ in 0..n {
            let mut h = siphasher::sip::SipHasher24::new_with_key(black_box(&[7u8; 16]));
            std::hash::Hasher::write(&mut h, black_box(&msg));
            acc ^= std::hash::Hasher::finish(&h);
        }
        black_box(acc);
    });
    report("  (bare SipHash-2-4, 88 B)", raw);
    let blake = rate(n, reps, || {
        let mut acc = 0u8;
        for _ in 0..n {
            acc ^= blake3::keyed_hash(black_box(&key), black_box(&msg)).as_bytes()[0];
        }
        black_box(acc);
    });
    report("  (bare blake3::keyed_hash, 88 B)", blake);

    let node = rate(n, reps, || {
        let mut acc = 0u64;
        for &(line, _, _) in &reqs {
            acc ^= keys.node_hash(0, line, black_box(&ct));
        }
        black_box(acc);
    });
    report("node_hash", node);
}

fn report(what: &str, lines_per_s: f64) {
    println!(
        "{what:<34} {:>8.2} M lines/s  {:>7.1} ns/line  {:>7.2} GB/s of line data",
        lines_per_s / 1e6,
        1e9 / lines_per_s,
        lines_per_s * 64.0 / 1e9
    );
}
