//! Latency histograms. Log-linear buckets (64 exact buckets, then 32 sub-buckets per power of
//! two, < 3.2% relative error) give p50/p99/p99.9 at a fixed memory cost, whatever the trace
//! length. Histograms subtract, like every other stat, so warm-up is removed by `since`.
//! The maximum cannot be un-merged, so a histogram also remembers *when* its maximum was
//! recorded: `since` keeps it when it was recorded after the start snapshot, and otherwise
//! (the largest sample was a warm-up one) takes the upper bound of the highest bucket the
//! window's own samples fill, which is within the buckets' 3.2% of the true window maximum.

use serde::Serialize;

const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
const BUCKETS: usize = 64 + (64 - 6) * SUB as usize;

#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    counts: Vec<u64>,
    pub count: u64,
    pub sum: u128,
    pub max: u64,
    /// `count` just after `max` was recorded (0: no sample yet), so that `since` can tell a
    /// warm-up maximum from one inside the window.
    max_at: u64,
}

impl Default for Histogram {
    fn default() -> Self { Histogram { counts: vec![0; BUCKETS], count: 0, sum: 0, max: 0, max_at: 0 } }
}

#[inline]
fn bucket_of(v: u64) -> usize {
    if v < 64 {
        v as usize
    } else {
        let exp = 63 - v.leading_zeros(); // >= 6
        let sub = (v >> (exp - SUB_BITS)) & (SUB - 1);
        64 + ((exp - 6) as usize) * SUB as usize + sub as usize
    }
}

/// Smallest value that falls in bucket `b`'s upper neighbour, minus one: the bucket's upper bound.
fn bucket_upper(b: usize) -> u64 {
    if b < 64 {
        b as u64
    } else {
        let exp = ((b - 64) / SUB as usize) as u32 + 6;
        let sub = ((b - 64) % SUB as usize) as u64;
        let lo = (1u64 << exp) + (sub << (exp - SUB_BITS));
        lo.saturating_add((1u64 << (exp - SUB_BITS)) - 1)
    }
}

impl Histogram {
    #[inline]
    pub fn record(&mut self, v: u64) {
        self.counts[bucket_of(v)] += 1;
        self.count += 1;
        self.sum += v as u128;
        if v > self.max {
            self.max = v;
            self.max_at = self.count;
        }
    }

    pub fn mean(&self) -> f64 { if self.count == 0 { 0.0 } else { self.sum as f64 / self.count as f64 } }

    /// The value below or at which a fraction `q` (0..=1) of samples fall (bucket upper bound,
    /// clamped to the maximum seen).
    pub fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return bucket_upper(b).min(self.max);
            }
        }
        self.max
    }

    pub fn since(&self, start: &Histogram) -> Histogram {
        let counts: Vec<u64> = self.counts.iter().zip(&start.counts).map(|(a, b)| a - b).collect();
        let count = self.count - start.count;
        let max = if self.max_at > start.count {
            // The largest sample of the run was recorded inside the window: exact.
            self.max
        } else {
            // It was a warm-up sample: the window's largest lies in its highest filled bucket.
            counts.iter().rposition(|&c| c > 0).map_or(0, |b| bucket_upper(b).min(self.max))
        };
        Histogram { counts, count, sum: self.sum - start.sum, max, max_at: if count == 0 { 0 } else { count } }
    }

    pub fn summary(&self) -> LatencySummary {
        LatencySummary {
            count: self.count,
            mean: self.mean(),
            p50: self.quantile(0.50),
            p99: self.quantile(0.99),
            p999: self.quantile(0.999),
            max: self.max,
        }
    }
}

/// What reports show of a histogram (values in the unit it was recorded in, cycles here).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub mean: f64,
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::default();
        for v in 1..=50 {
            h.record(v);
        }
        assert_eq!(h.quantile(0.5), 25);
        assert_eq!(h.quantile(1.0), 50);
        assert_eq!(h.mean(), 25.5);
    }

    #[test]
    fn large_values_are_within_the_bucket_error() {
        let mut h = Histogram::default();
        for v in 0..100_000u64 {
            h.record(1000 + v % 1000);
        }
        let p50 = h.quantile(0.5) as f64;
        assert!((p50 - 1500.0).abs() / 1500.0 < 0.035, "{p50}");
        assert!(h.quantile(0.999) <= 1999);
    }

    #[test]
    fn buckets_are_monotonic_and_cover_u64() {
        let mut last = 0;
        for v in [0u64, 1, 63, 64, 65, 127, 128, 1 << 20, u64::MAX] {
            let b = bucket_of(v);
            assert!(b >= last && b < BUCKETS);
            assert!(bucket_upper(b) >= v);
            last = b;
        }
    }

    #[test]
    fn the_largest_value_fills_the_last_bucket_so_no_bucket_is_wasted() {
        // 64 exact buckets, then 32 per power of two from 2^6 to 2^63: every histogram holds
        // exactly that many counters (one per bucket any u64 can land in), none more.
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_upper(BUCKETS - 1), u64::MAX);
        assert_eq!(Histogram::default().counts.len(), bucket_of(u64::MAX) + 1);
    }

    #[test]
    fn warmup_subtraction_removes_early_samples() {
        let mut h = Histogram::default();
        for _ in 0..10 {
            h.record(5000);
        }
        let snap = h.clone();
        for _ in 0..10 {
            h.record(10);
        }
        let d = h.since(&snap);
        assert_eq!(d.count, 10);
        assert_eq!(d.quantile(0.99), 10);
    }

    #[test]
    fn a_warm_up_maximum_does_not_leak_into_the_window() {
        let mut h = Histogram::default();
        h.record(1_500_000); // a warm-up outlier
        let snap = h.clone();
        for v in [10, 700, 40] {
            h.record(v);
        }
        let d = h.since(&snap);
        // 700 falls in a 32-wide bucket (512..1024 split in 32): the bound is its top, 703.
        assert_eq!(d.max, 703);
        assert!(d.max >= 700 && (d.max as f64) < 700.0 * 1.032);
        assert_eq!(h.max, 1_500_000, "the whole-run maximum is unchanged");
    }

    #[test]
    fn a_window_maximum_is_exact() {
        let mut h = Histogram::default();
        h.record(100);
        let snap = h.clone();
        h.record(12_345);
        h.record(7);
        assert_eq!(h.since(&snap).max, 12_345);
        assert_eq!(Histogram::default().since(&Histogram::default()).max, 0);
    }

    #[test]
    fn a_window_after_the_warm_up_reports_its_own_maximum_and_mean() {
        let mut h = Histogram::default();
        h.record(1_000_000); // the warm-up's largest
        h.record(5);
        let warm = h.clone();
        h.record(10);
        h.record(30);
        let w = h.since(&warm);
        assert_eq!(w.count, 2);
        assert_eq!(w.mean(), 20.0);
        assert_eq!(w.quantile(1.0), 30);
        assert!(w.summary().max <= 31, "the warm-up's 1e6 must not leak into the window: {}", w.summary().max);
    }
}

/// What one reported statistic is: its dotted name in the report (`*` stands for one name
/// segment of a family, as in `stats.caches.*.hits`), its unit and what it counts. The report
/// writers (`stats.txt`), `secmem stats describe` and the docs all read these tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatDoc {
    pub name: &'static str,
    pub unit: &'static str,
    pub description: &'static str,
}

impl StatDoc {
    pub const fn new(name: &'static str, unit: &'static str, description: &'static str) -> StatDoc { StatDoc { name, unit, description } }
}
