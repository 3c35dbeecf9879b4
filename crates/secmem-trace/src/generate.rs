//! Seeded synthetic trace generators.
//!
//! A [`GenSpec`] describes the workload; [`Generator`] yields exactly `requests` records,
//! deterministically for a given spec (ChaCha8 seeded with `seed`). Every record is a 64 B
//! read (probability `read_ratio`) or write at a 64 B-aligned address in
//! `[base_addr, base_addr + footprint_bytes)`, with `inst_gap = spec.inst_gap` and no data.
//!
//! * `Sequential` walks the lines in order from `base_addr`, wrapping around.
//! * `Random` picks a uniformly random line.
//! * `Stride` starts at `base_addr` and advances by `stride_bytes` modulo the footprint.
//! * `Zipf` draws a popularity rank `k` (0 = hottest) with `P(k) ∝ 1/(k+1)^theta` over all
//!   lines, then maps ranks to lines with a fixed bijection `line = rank * A mod lines`
//!   (`A` odd-ish and coprime with the line count) so hot lines are spread over the footprint.
//!   Sampling is O(1) expected time and O(1) memory (rejection-inversion, see [`Zipf`]).

use std::fmt;
use std::str::FromStr;

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Op, Record};

/// Cache-line size used by the generators.
pub const LINE_BYTES: u64 = 64;

/// The address pattern of a synthetic workload.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pattern {
    Sequential,
    Random,
    Stride,
    Zipf,
}

impl Pattern {
    /// All patterns, in documentation order.
    pub const ALL: [Pattern; 4] = [
        Pattern::Sequential,
        Pattern::Random,
        Pattern::Stride,
        Pattern::Zipf,
    ];

    /// The lower-case name accepted by `FromStr`.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Sequential => "sequential",
            Pattern::Random => "random",
            Pattern::Stride => "stride",
            Pattern::Zipf => "zipf",
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        Pattern::ALL
            .iter()
            .copied()
            .find(|p| p.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| {
                format!("unknown pattern '{s}' (expected one of: sequential, random, stride, zipf)")
            })
    }
}

/// A synthetic workload description.
#[derive(Clone, Debug, PartialEq)]
pub struct GenSpec {
    pub pattern: Pattern,
    /// Number of records to generate (> 0).
    pub requests: u64,
    /// Bytes of address space touched; a multiple of 64, >= 64.
    pub footprint_bytes: u64,
    /// Probability that a record is a read, in [0, 1].
    pub read_ratio: f64,
    pub seed: u64,
    /// Step of the `Stride` pattern (> 0, multiple of 64); ignored otherwise.
    pub stride_bytes: u64,
    /// Skew of the `Zipf` pattern (> 0; 0.99 is YCSB's default); ignored otherwise.
    pub zipf_theta: f64,
    /// `inst_gap` of every record.
    pub inst_gap: u32,
    /// Lowest address (64 B aligned).
    pub base_addr: u64,
}

impl Default for GenSpec {
    /// 1 M random requests over 64 MiB, 2/3 reads, seed 1, stride 4 KiB, theta 0.99,
    /// `inst_gap` 10, base 0.
    fn default() -> Self {
        GenSpec {
            pattern: Pattern::Random,
            requests: 1 << 20,
            footprint_bytes: 64 << 20,
            read_ratio: 2.0 / 3.0,
            seed: 1,
            stride_bytes: 4096,
            zipf_theta: 0.99,
            inst_gap: 10,
            base_addr: 0,
        }
    }
}

impl GenSpec {
    /// Checks the spec; the error names the offending field and value.
    pub fn validate(&self) -> Result<(), String> {
        if self.requests == 0 {
            return Err("requests must be > 0, got 0".into());
        }
        if self.footprint_bytes < LINE_BYTES || !self.footprint_bytes.is_multiple_of(LINE_BYTES) {
            return Err(format!(
                "footprint_bytes must be >= 64 and a multiple of 64, got {}",
                self.footprint_bytes
            ));
        }
        if !(0.0..=1.0).contains(&self.read_ratio) {
            return Err(format!(
                "read_ratio must be in [0,1], got {}",
                self.read_ratio
            ));
        }
        if !self.base_addr.is_multiple_of(LINE_BYTES) {
            return Err(format!(
                "base_addr must be 64-byte aligned, got {:#x}",
                self.base_addr
            ));
        }
        if self
            .base_addr
            .checked_add(self.footprint_bytes - 1)
            .is_none()
        {
            return Err(format!(
                "base_addr + footprint_bytes must fit in 64 bits, got base_addr {:#x} + footprint_bytes {}",
                self.base_addr, self.footprint_bytes
            ));
        }
        if self.pattern == Pattern::Stride
            && (self.stride_bytes == 0 || !self.stride_bytes.is_multiple_of(LINE_BYTES))
        {
            return Err(format!(
                "stride_bytes must be > 0 and a multiple of 64 for the stride pattern, got {}",
                self.stride_bytes
            ));
        }
        if self.pattern == Pattern::Zipf && !(self.zipf_theta > 0.0 && self.zipf_theta.is_finite())
        {
            return Err(format!(
                "zipf_theta must be a finite number > 0 for the zipf pattern, got {}",
                self.zipf_theta
            ));
        }
        Ok(())
    }

    /// Validates the spec and returns its generator.
    pub fn generator(&self) -> Result<Generator, String> {
        Generator::new(self)
    }
}

/// Zipf-distributed ranks in `[0, n)` with `P(k) ∝ 1/(k+1)^theta`, for any `theta > 0`.
///
/// Uses rejection-inversion sampling (W. Hörmann and G. Derflinger, "Rejection-inversion to
/// generate variates from monotone discrete distributions", 1996): invert the integral `H`
/// of the hat function `h(x) = x^-theta` over `[0.5, n + 0.5]`, round to the nearest integer
/// `k`, and accept if the sample falls under `h(k)` within `k`'s cell. Exact (not an
/// approximation), O(1) memory, no zeta constant, and the expected number of iterations is
/// close to 1 for every `theta` and `n` (up to 2^53 ranks).
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    /// `1 - theta`.
    q: f64,
    /// `H(1.5) - h(1)`: lower end of the sampling interval (cell of rank 1 is always accepted).
    h_lo: f64,
    /// `H(n + 0.5)`: upper end of the sampling interval.
    h_hi: f64,
}

/// `expm1(y) / y`, continuous at 0.
fn expm1_over(y: f64) -> f64 {
    if y.abs() > 1e-8 {
        y.exp_m1() / y
    } else {
        1.0 + y * (0.5 + y / 6.0)
    }
}

/// `ln_1p(y) / y`, continuous at 0.
fn ln1p_over(y: f64) -> f64 {
    if y.abs() > 1e-8 {
        y.ln_1p() / y
    } else {
        1.0 - y * (0.5 - y / 3.0)
    }
}

impl Zipf {
    /// A sampler over `n >= 1` ranks with exponent `theta > 0` (checked by `GenSpec::validate`).
    pub fn new(n: u64, theta: f64) -> Zipf {
        let n = n.max(1);
        let mut z = Zipf {
            n,
            theta,
            q: 1.0 - theta,
            h_lo: 0.0,
            h_hi: 0.0,
        };
        z.h_lo = z.big_h(1.5) - 1.0;
        z.h_hi = z.big_h(n as f64 + 0.5);
        z
    }

    /// `h(x) = x^-theta`.
    #[inline]
    fn h(&self, x: f64) -> f64 {
        (-self.theta * x.ln()).exp()
    }

    /// `H(x) = ∫_1^x t^-theta dt = (x^q - 1) / q` (= `ln x` at `theta = 1`), computed stably.
    #[inline]
    fn big_h(&self, x: f64) -> f64 {
        let lx = x.ln();
        expm1_over(self.q * lx) * lx
    }

    /// Inverse of `H`.
    #[inline]
    fn big_h_inv(&self, u: f64) -> f64 {
        let t = (self.q * u).max(-1.0);
        (ln1p_over(t) * u).exp()
    }

    /// A rank in `[0, n)`, 0 being the most popular.
    #[inline]
    pub fn sample<G: RngCore>(&self, rng: &mut G) -> u64 {
        if self.n == 1 {
            return 0;
        }
        let mut k = 1u64;
        // Acceptance probability is high for every theta; the bound only guards against
        // floating-point pathologies turning the loop infinite.
        for _ in 0..1000 {
            let u = self.h_hi + unit_f64(rng) * (self.h_lo - self.h_hi);
            let x = self.big_h_inv(u);
            // `as` saturates (NaN -> 0), then clamp into [1, n].
            k = ((x + 0.5) as u64).clamp(1, self.n);
            if u >= self.big_h(k as f64 + 0.5) - self.h(k as f64) {
                break;
            }
        }
        k - 1
    }
}

/// A uniform `f64` in `[0, 1)` with 53 random bits.
#[inline]
fn unit_f64<G: RngCore>(rng: &mut G) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A uniform integer in `[0, n)` by multiply-shift (bias < n / 2^64, negligible).
#[inline]
fn below(r: u64, n: u64) -> u64 {
    ((r as u128 * n as u128) >> 64) as u64
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The multiplier of the rank-to-line bijection `line = rank * A mod lines`.
fn scramble_multiplier(lines: u64) -> u64 {
    if lines <= 2 {
        return 1;
    }
    // Start from the 64-bit golden-ratio constant and take the next value coprime with
    // `lines`; this spreads consecutive ranks far apart.
    let mut a = 0x9E37_79B9_7F4A_7C15u64 % lines;
    while a < 2 || gcd(a, lines) != 1 {
        a = (a + 1) % lines;
    }
    a
}

/// Yields `spec.requests` records of a validated [`GenSpec`].
#[derive(Clone, Debug)]
pub struct Generator {
    rng: ChaCha8Rng,
    pattern: Pattern,
    remaining: u64,
    lines: u64,
    base_addr: u64,
    inst_gap: u32,
    /// A record is a read when `rng >> 11 < read_threshold` (53-bit comparison).
    read_threshold: u64,
    /// Sequential: next line; stride: next byte offset.
    cursor: u64,
    stride: u64,
    footprint: u64,
    zipf: Option<Zipf>,
    scramble: u64,
}

impl Generator {
    /// Validates `spec` and builds its generator.
    pub fn new(spec: &GenSpec) -> Result<Generator, String> {
        spec.validate()?;
        let lines = spec.footprint_bytes / LINE_BYTES;
        let read_threshold = (spec.read_ratio * (1u64 << 53) as f64) as u64;
        Ok(Generator {
            rng: ChaCha8Rng::seed_from_u64(spec.seed),
            pattern: spec.pattern,
            remaining: spec.requests,
            lines,
            base_addr: spec.base_addr,
            inst_gap: spec.inst_gap,
            read_threshold,
            cursor: 0,
            stride: spec.stride_bytes % spec.footprint_bytes,
            footprint: spec.footprint_bytes,
            zipf: (spec.pattern == Pattern::Zipf).then(|| Zipf::new(lines, spec.zipf_theta)),
            scramble: scramble_multiplier(lines),
        })
    }

    #[inline(always)]
    fn next_line(&mut self) -> u64 {
        match self.pattern {
            Pattern::Sequential => {
                let l = self.cursor;
                self.cursor += 1;
                if self.cursor == self.lines {
                    self.cursor = 0;
                }
                l
            }
            Pattern::Random => below(self.rng.next_u64(), self.lines),
            Pattern::Stride => {
                let off = self.cursor;
                // cursor = (cursor + stride) mod footprint, without overflow.
                self.cursor = if self.cursor >= self.footprint - self.stride {
                    self.cursor - (self.footprint - self.stride)
                } else {
                    self.cursor + self.stride
                };
                off / LINE_BYTES
            }
            Pattern::Zipf => {
                let rank = match &self.zipf {
                    Some(z) => z.sample(&mut self.rng),
                    None => 0,
                };
                ((rank as u128 * self.scramble as u128) % self.lines as u128) as u64
            }
        }
    }
}

impl Iterator for Generator {
    type Item = Record;

    #[inline(always)]
    fn next(&mut self) -> Option<Record> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let line = self.next_line();
        let op = if (self.rng.next_u64() >> 11) < self.read_threshold {
            Op::Read
        } else {
            Op::Write
        };
        Some(Record {
            op,
            addr: self.base_addr + line * LINE_BYTES,
            size_bytes: LINE_BYTES as u16,
            inst_gap: self.inst_gap,
            data: None,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match usize::try_from(self.remaining) {
            Ok(n) => (n, Some(n)),
            Err(_) => (usize::MAX, None),
        }
    }
}

impl std::iter::FusedIterator for Generator {}

/// Contents for a synthetic workload's writes, for designs that decide on them
/// (deduplication). Real programs repeat a few contents many times (zeros, small integers,
/// the same pointers: ESD Fig. 3's content locality), so a write repeats one of
/// `popular` contents with probability `duplicate_pct`%, the content's rank drawn from a Zipf
/// law of exponent `theta` (rank 0 the most written), and otherwise writes a content no
/// other write has. Deterministic for a seed.
#[derive(Clone, Debug, PartialEq)]
pub struct ContentSpec {
    pub duplicate_pct: u32,
    pub popular: u64,
    pub theta: f64,
    pub seed: u64,
}

impl ContentSpec {
    /// Checks the spec; the error names the offending field and value.
    pub fn validate(&self) -> Result<(), String> {
        if self.duplicate_pct > 100 {
            return Err(format!("duplicate_pct must be a percentage, 0..=100, got {}", self.duplicate_pct));
        }
        if self.popular == 0 {
            return Err("duplicate_contents must be at least 1".into());
        }
        if !(self.theta > 0.0 && self.theta.is_finite()) {
            return Err(format!("duplicate_theta must be > 0, got {}", self.theta));
        }
        Ok(())
    }
}

/// `inner`'s records with every write carrying a line from a [`ContentSpec`].
pub struct WithContents<I> {
    inner: I,
    rng: ChaCha8Rng,
    zipf: Zipf,
    threshold: u64,
    popular: u64,
    key: u64,
    fresh: u64,
}

impl<I> WithContents<I> {
    pub fn new(inner: I, spec: &ContentSpec) -> WithContents<I> {
        WithContents {
            inner,
            rng: ChaCha8Rng::seed_from_u64(spec.seed ^ 0x636f_6e74_656e_7473),
            zipf: Zipf::new(spec.popular, spec.theta),
            threshold: (u64::from(spec.duplicate_pct) << 53) / 100,
            popular: spec.popular,
            key: spec.seed,
            fresh: 0,
        }
    }

    /// Content number `n`: 8 words mixed from the seed and `n` (splitmix64), so distinct
    /// numbers give distinct lines.
    fn content(&self, n: u64) -> [u8; 64] {
        let mut out = [0u8; 64];
        for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
            let mut z = self.key.wrapping_add((n * 8 + i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
        }
        out
    }
}

impl<I: Iterator<Item = Record>> Iterator for WithContents<I> {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        let mut r = self.inner.next()?;
        if r.op == Op::Write {
            let n = if (self.rng.next_u64() >> 11) < self.threshold {
                self.zipf.sample(&mut self.rng)
            } else {
                self.fresh += 1;
                self.popular + self.fresh
            };
            r.data = Some(self.content(n));
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn spec(pattern: Pattern) -> GenSpec {
        GenSpec {
            pattern,
            requests: 10_000,
            footprint_bytes: 1 << 20,
            read_ratio: 0.7,
            seed: 42,
            stride_bytes: 4096,
            zipf_theta: 0.99,
            inst_gap: 7,
            base_addr: 1 << 30,
        }
    }

    fn run(s: &GenSpec) -> Vec<Record> {
        Generator::new(s).unwrap().collect()
    }

    #[test]
    fn same_seed_gives_the_same_sequence_and_different_seeds_differ() {
        for p in Pattern::ALL {
            let s = spec(p);
            assert_eq!(run(&s), run(&s), "{p}");
            let other = GenSpec {
                seed: 43,
                ..s.clone()
            };
            assert_ne!(run(&s), run(&other), "{p}");
        }
    }

    #[test]
    fn generators_yield_exactly_the_requested_count() {
        for p in Pattern::ALL {
            let g = Generator::new(&GenSpec {
                requests: 1234,
                ..spec(p)
            })
            .unwrap();
            assert_eq!(g.size_hint(), (1234, Some(1234)));
            assert_eq!(g.count(), 1234, "{p}");
        }
    }

    #[test]
    fn all_addresses_are_aligned_and_in_range_and_fields_fixed() {
        for p in Pattern::ALL {
            let s = GenSpec {
                footprint_bytes: 64 * 1000,
                stride_bytes: 64 * 7,
                ..spec(p)
            };
            for r in run(&s) {
                assert_eq!(r.addr % 64, 0, "{p}");
                assert!(
                    r.addr >= s.base_addr && r.addr < s.base_addr + s.footprint_bytes,
                    "{p}: {:#x}",
                    r.addr
                );
                assert_eq!((r.size_bytes, r.inst_gap, r.data), (64, 7, None));
                assert!(matches!(r.op, Op::Read | Op::Write));
            }
        }
    }

    #[test]
    fn addresses_stay_in_range_at_the_top_of_the_address_space() {
        for p in Pattern::ALL {
            let s = GenSpec {
                base_addr: u64::MAX - (1 << 20) + 1,
                footprint_bytes: 1 << 20,
                stride_bytes: (1 << 20) - 64,
                ..spec(p)
            };
            s.validate().unwrap();
            for r in run(&s) {
                assert!(r.addr >= s.base_addr, "{p}");
            }
        }
    }

    #[test]
    fn read_ratio_is_respected_within_tolerance() {
        for (ratio, p) in [
            (0.7, Pattern::Random),
            (0.25, Pattern::Zipf),
            (0.5, Pattern::Sequential),
        ] {
            let s = GenSpec {
                requests: 100_000,
                read_ratio: ratio,
                ..spec(p)
            };
            let reads = run(&s).iter().filter(|r| r.op == Op::Read).count() as f64 / 100_000.0;
            assert!((reads - ratio).abs() < 0.01, "{p}: {reads} vs {ratio}");
        }
        let all_reads = GenSpec {
            read_ratio: 1.0,
            ..spec(Pattern::Random)
        };
        assert!(run(&all_reads).iter().all(|r| r.op == Op::Read));
        let all_writes = GenSpec {
            read_ratio: 0.0,
            ..spec(Pattern::Random)
        };
        assert!(run(&all_writes).iter().all(|r| r.op == Op::Write));
    }

    #[test]
    fn sequential_walks_lines_in_order_and_wraps() {
        let s = GenSpec {
            footprint_bytes: 64 * 4,
            requests: 10,
            base_addr: 0x1000,
            ..spec(Pattern::Sequential)
        };
        let addrs: Vec<u64> = run(&s).iter().map(|r| r.addr).collect();
        assert_eq!(
            addrs,
            vec![0x1000, 0x1040, 0x1080, 0x10c0, 0x1000, 0x1040, 0x1080, 0x10c0, 0x1000, 0x1040]
        );
    }

    #[test]
    fn stride_advances_modulo_the_footprint() {
        let s = GenSpec {
            footprint_bytes: 64 * 10,
            stride_bytes: 64 * 4,
            requests: 6,
            base_addr: 0,
            ..spec(Pattern::Stride)
        };
        let lines: Vec<u64> = run(&s).iter().map(|r| r.addr / 64).collect();
        assert_eq!(lines, vec![0, 4, 8, 2, 6, 0]);
    }

    #[test]
    fn random_covers_the_footprint_roughly_uniformly() {
        let s = GenSpec {
            footprint_bytes: 64 * 16,
            requests: 160_000,
            ..spec(Pattern::Random)
        };
        let mut counts = [0u32; 16];
        for r in run(&s) {
            counts[((r.addr - s.base_addr) / 64) as usize] += 1;
        }
        for c in counts {
            assert!((9_400..10_600).contains(&c), "{counts:?}");
        }
    }

    fn top_percent_share(s: &GenSpec) -> f64 {
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for r in run(s) {
            *counts.entry(r.addr).or_default() += 1;
        }
        let mut v: Vec<u64> = counts.into_values().collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        let lines = (s.footprint_bytes / 64) as usize;
        let top: u64 = v.iter().take(lines / 100).sum();
        top as f64 / s.requests as f64
    }

    #[test]
    fn zipf_top_one_percent_of_lines_gets_a_large_share_at_theta_099() {
        let s = GenSpec {
            footprint_bytes: 64 * 10_000,
            requests: 200_000,
            ..spec(Pattern::Zipf)
        };
        let share = top_percent_share(&s);
        // Exact value: H(100, 0.99) / H(10000, 0.99) ~= 0.53.
        assert!(share > 0.45 && share < 0.60, "share {share}");
    }

    #[test]
    fn zipf_with_small_theta_is_nearly_uniform() {
        let s = GenSpec {
            footprint_bytes: 64 * 10_000,
            requests: 200_000,
            zipf_theta: 0.05,
            ..spec(Pattern::Zipf)
        };
        let share = top_percent_share(&s);
        assert!(share < 0.04, "share {share}");
    }

    #[test]
    fn zipf_rank_frequencies_match_the_distribution() {
        for theta in [0.5, 0.99, 1.0, 1.5, 3.0] {
            let n = 10u64;
            let z = Zipf::new(n, theta);
            let mut rng = ChaCha8Rng::seed_from_u64(1);
            let mut counts = [0u64; 10];
            let draws = 400_000;
            for _ in 0..draws {
                counts[z.sample(&mut rng) as usize] += 1;
            }
            let norm: f64 = (1..=n).map(|k| (k as f64).powf(-theta)).sum();
            for (k, &c) in counts.iter().enumerate() {
                let p = ((k + 1) as f64).powf(-theta) / norm;
                let got = c as f64 / draws as f64;
                let sd = (p * (1.0 - p) / draws as f64).sqrt();
                assert!(
                    (got - p).abs() < 5.0 * sd + 1e-4,
                    "theta {theta} rank {k}: {got} vs {p}"
                );
            }
        }
    }

    #[test]
    fn zipf_handles_huge_footprints_and_extreme_theta() {
        // 2^30 lines: no per-line tables, and ranks stay in range.
        for theta in [0.01, 0.99, 1.0, 50.0] {
            let z = Zipf::new(1 << 30, theta);
            let mut rng = ChaCha8Rng::seed_from_u64(2);
            for _ in 0..10_000 {
                assert!(z.sample(&mut rng) < 1 << 30);
            }
        }
        let s = GenSpec {
            footprint_bytes: 64 << 30,
            requests: 1000,
            ..spec(Pattern::Zipf)
        };
        assert_eq!(run(&s).len(), 1000);
        // Very skewed: nearly everything on the hottest line.
        let z = Zipf::new(1 << 20, 50.0);
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        assert!((0..1000).all(|_| z.sample(&mut rng) == 0));
    }

    #[test]
    fn zipf_scramble_is_a_bijection() {
        for lines in [1u64, 2, 3, 64, 100, 1000, 4096] {
            let a = scramble_multiplier(lines);
            let mut seen = vec![false; lines as usize];
            for r in 0..lines {
                let l = ((r as u128 * a as u128) % lines as u128) as usize;
                assert!(!seen[l], "lines {lines}");
                seen[l] = true;
            }
            if lines > 2 {
                assert_ne!(a, 1, "hot ranks are spread for {lines} lines");
            }
        }
    }

    #[test]
    fn validate_errors_name_the_field() {
        let ok = spec(Pattern::Random);
        ok.validate().unwrap();
        let cases: Vec<(GenSpec, &str)> = vec![
            (
                GenSpec {
                    read_ratio: 1.5,
                    ..ok.clone()
                },
                "read_ratio must be in [0,1], got 1.5",
            ),
            (
                GenSpec {
                    read_ratio: f64::NAN,
                    ..ok.clone()
                },
                "read_ratio must be in [0,1], got NaN",
            ),
            (
                GenSpec {
                    requests: 0,
                    ..ok.clone()
                },
                "requests must be > 0, got 0",
            ),
            (
                GenSpec {
                    footprint_bytes: 32,
                    ..ok.clone()
                },
                "footprint_bytes must be >= 64 and a multiple of 64, got 32",
            ),
            (
                GenSpec {
                    footprint_bytes: 100,
                    ..ok.clone()
                },
                "footprint_bytes must be >= 64 and a multiple of 64, got 100",
            ),
            (
                GenSpec {
                    base_addr: 8,
                    ..ok.clone()
                },
                "base_addr must be 64-byte aligned, got 0x8",
            ),
            (
                GenSpec {
                    base_addr: u64::MAX - 63,
                    footprint_bytes: 128,
                    ..ok.clone()
                },
                "base_addr + footprint_bytes must fit",
            ),
            (
                GenSpec {
                    pattern: Pattern::Stride,
                    stride_bytes: 0,
                    ..ok.clone()
                },
                "stride_bytes must be > 0 and a multiple of 64 for the stride pattern, got 0",
            ),
            (
                GenSpec {
                    pattern: Pattern::Stride,
                    stride_bytes: 100,
                    ..ok.clone()
                },
                "stride_bytes",
            ),
            (
                GenSpec {
                    pattern: Pattern::Zipf,
                    zipf_theta: 0.0,
                    ..ok.clone()
                },
                "zipf_theta must be a finite number > 0 for the zipf pattern, got 0",
            ),
            (
                GenSpec {
                    pattern: Pattern::Zipf,
                    zipf_theta: f64::INFINITY,
                    ..ok.clone()
                },
                // Not "> 0": infinity is greater than 0, and the message must say why it fails.
                "zipf_theta must be a finite number > 0 for the zipf pattern, got inf",
            ),
        ];
        for (s, want) in cases {
            let e = s.validate().unwrap_err();
            assert!(e.starts_with(want), "got '{e}', want '{want}'");
            assert_eq!(Generator::new(&s).unwrap_err(), e);
        }
        // Fields irrelevant to the pattern are not checked.
        GenSpec {
            stride_bytes: 0,
            zipf_theta: 0.0,
            ..ok
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn pattern_names_parse_and_unknown_names_list_the_known_ones() {
        for p in Pattern::ALL {
            assert_eq!(p.to_string().parse::<Pattern>().unwrap(), p);
        }
        assert_eq!("ZIPF".parse::<Pattern>().unwrap(), Pattern::Zipf);
        assert_eq!(
            "hotcold".parse::<Pattern>().unwrap_err(),
            "unknown pattern 'hotcold' (expected one of: sequential, random, stride, zipf)"
        );
    }

    /// Run with `cargo test --release -p secmem-trace -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn random_generator_exceeds_50m_records_per_second_in_release() {
        let s = GenSpec {
            requests: 50_000_000,
            footprint_bytes: 1 << 34,
            ..spec(Pattern::Random)
        };
        let t = std::time::Instant::now();
        let mut acc = 0u64;
        for r in Generator::new(&s).unwrap() {
            acc = acc.wrapping_add(r.addr ^ r.op as u64);
        }
        let rate = s.requests as f64 / t.elapsed().as_secs_f64();
        println!("random: {:.1} M records/s (checksum {acc:x})", rate / 1e6);
        let z = GenSpec {
            requests: 5_000_000,
            pattern: Pattern::Zipf,
            ..s
        };
        let t = std::time::Instant::now();
        let n = Generator::new(&z)
            .unwrap()
            .filter(|r| r.op == Op::Read)
            .count();
        println!(
            "zipf: {:.1} M records/s ({n} reads)",
            5.0 / t.elapsed().as_secs_f64()
        );
        if !cfg!(debug_assertions) {
            assert!(rate > 50e6, "{rate}");
        }
    }

    #[test]
    fn the_footprint_must_hold_at_least_one_line_and_one_line_is_enough() {
        for bad in [0, 32, 100] {
            let Err(e) = Generator::new(&GenSpec { footprint_bytes: bad, ..spec(Pattern::Random) }) else { panic!("refused") };
            assert!(e.contains("footprint_bytes"), "{bad}: {e}");
        }
        for p in Pattern::ALL {
            let s = GenSpec { footprint_bytes: 64, ..spec(p) };
            assert!(run(&s).iter().all(|r| r.addr == s.base_addr), "{p:?}");
        }
    }

    #[test]
    fn the_scramble_multiplier_is_the_first_value_from_the_golden_ratio_coprime_with_the_line_count() {
        // 0x9E37_79B9_7F4A_7C15 mod lines, then upwards (wrapping, skipping 0 and 1) to the first
        // value coprime with lines: mod 100 is 85 (gcd 5), 86 (gcd 2), 87.
        let got: Vec<u64> = [3u64, 16, 64, 100, 1000, 4096].iter().map(|&l| scramble_multiplier(l)).collect();
        assert_eq!(got, vec![2, 5, 21, 87, 487, 3093]);
    }

    #[test]
    fn zipf_ranks_map_to_lines_by_rank_times_the_multiplier() {
        // With a steep skew the hottest lines are ranks 0, 1, 2 (P ~ 1 : 1/8 : 1/27), at lines
        // 0, A and 2A mod 1000 with A = 487.
        let s = GenSpec { footprint_bytes: 64 * 1000, requests: 20_000, zipf_theta: 3.0, base_addr: 0, ..spec(Pattern::Zipf) };
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for r in run(&s) {
            *counts.entry(r.addr / 64).or_default() += 1;
        }
        let mut v: Vec<(u64, u64)> = counts.into_iter().collect();
        v.sort_by_key(|&(_, c)| std::cmp::Reverse(c));
        assert_eq!([v[0].0, v[1].0, v[2].0], [0, 487, 974], "{:?}", &v[..4]);
    }

    #[test]
    fn expm1_over_and_ln1p_over_follow_their_series_near_zero_and_their_definition_elsewhere() {
        let close = |got: f64, want: f64, what: &str| assert!((got - want).abs() <= 1e-15 * want.abs(), "{what}: {got:e} vs {want:e}");
        assert_eq!((expm1_over(0.0), ln1p_over(0.0)), (1.0, 1.0));
        // Below 1e-8 the quadratic term is under f64 resolution: 1 + y/2 and 1 - y/2.
        for y in [1e-9, -1e-9, 3e-12] {
            close(expm1_over(y), 1.0 + y / 2.0, "expm1_over");
            close(ln1p_over(y), 1.0 - y / 2.0, "ln1p_over");
        }
        for y in [1e-6, -0.5, 1.0, 3.0] {
            close(expm1_over(y), y.exp_m1() / y, "expm1_over");
            close(ln1p_over(y), y.ln_1p() / y, "ln1p_over");
        }
    }

    #[test]
    fn with_contents_repeats_popular_lines_at_the_duplicate_share_and_never_repeats_the_rest() {
        let spec = GenSpec { read_ratio: 0.0, requests: 20_000, ..GenSpec::default() };
        let contents = ContentSpec { duplicate_pct: 60, popular: 100, theta: 0.99, seed: 7 };
        let recs: Vec<Record> = WithContents::new(Generator::new(&spec).unwrap(), &contents).collect();
        let mut seen = std::collections::HashMap::new();
        for r in &recs {
            *seen.entry(r.data.expect("every write carries a line")).or_insert(0u64) += 1;
        }
        let repeated: u64 = seen.values().filter(|&&n| n > 1).sum();
        let share = repeated as f64 / recs.len() as f64;
        assert!((0.57..0.63).contains(&share), "{share}");
        assert!(seen.values().filter(|&&n| n > 1).count() <= 100);
        let again: Vec<Record> = WithContents::new(Generator::new(&spec).unwrap(), &contents).collect();
        assert_eq!(recs, again, "same seed, same contents");
        assert!(ContentSpec { duplicate_pct: 101, ..contents.clone() }.validate().unwrap_err().contains("duplicate_pct"));
    }
}
