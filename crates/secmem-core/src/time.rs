//! Simulated time. Everything inside the simulator is measured in CPU cycles of the configured
//! core clock; device parameters given in nanoseconds are converted once, at construction.

use serde::{Deserialize, Serialize};
use std::ops::{Add, AddAssign, Sub};

/// A point in simulated time or a duration, in CPU cycles.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Cycle(pub u64);

impl Cycle {
    pub const ZERO: Cycle = Cycle(0);

    /// Converts nanoseconds to cycles at `freq_mhz`, rounding up so that no latency becomes 0.
    pub fn from_ns(ns: f64, freq_mhz: u64) -> Cycle {
        Cycle((ns * freq_mhz as f64 / 1000.0).ceil() as u64)
    }

    pub fn to_ns(self, freq_mhz: u64) -> f64 {
        self.0 as f64 * 1000.0 / freq_mhz as f64
    }

    #[inline]
    pub fn max(self, other: Cycle) -> Cycle {
        if self.0 >= other.0 { self } else { other }
    }
}

impl Add for Cycle {
    type Output = Cycle;
    #[inline]
    fn add(self, rhs: Cycle) -> Cycle { Cycle(self.0 + rhs.0) }
}
impl AddAssign for Cycle {
    #[inline]
    fn add_assign(&mut self, rhs: Cycle) { self.0 += rhs.0; }
}
impl Sub for Cycle {
    type Output = Cycle;
    #[inline]
    fn sub(self, rhs: Cycle) -> Cycle { Cycle(self.0 - rhs.0) }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn ns_to_cycles_rounds_up_at_4ghz() {
        assert_eq!(Cycle::from_ns(150.0, 4000), Cycle(600));
        assert_eq!(Cycle::from_ns(0.1, 4000), Cycle(1));
        assert_eq!(Cycle(600).to_ns(4000), 150.0);
    }
}
