//! A device without timing: every access completes a fixed number of cycles after it is
//! issued, and is counted by traffic class.
//!
//! The functional half of a two-thread functional run (`secmem_sim::run`, `run.host_threads`)
//! drives one. That half computes the bytes (image, crypto, verification, event log); its
//! cycles are thrown away, because the timing half runs the real device model on the same
//! records. Its counts are kept: the run checks that both halves sent the device the same
//! reads and writes of every class.

use crate::{MediaStats, MemRequest, MemoryPort};
use secmem_core::Cycle;

pub struct UntimedDevice {
    capacity_bytes: u64,
    latency: Cycle,
    stats: MediaStats,
}

impl UntimedDevice {
    /// A device of `capacity_bytes` whose every access takes `latency`.
    pub fn new(capacity_bytes: u64, latency: Cycle) -> UntimedDevice { UntimedDevice { capacity_bytes, latency, stats: MediaStats::default() } }
}

impl MemoryPort for UntimedDevice {
    #[inline]
    fn access(&mut self, req: MemRequest) -> Cycle {
        self.stats.count(req.kind, req.class, req.size_bytes);
        req.issue + self.latency
    }
    fn drain(&mut self, now: Cycle) -> Cycle { now }
    fn capacity_bytes(&self) -> u64 { self.capacity_bytes }
    fn stats(&self) -> MediaStats { self.stats.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AccessKind, TrafficClass};

    #[test]
    fn every_access_takes_the_fixed_latency_and_is_counted_by_kind_and_class() {
        let mut d = UntimedDevice::new(1 << 20, Cycle(7));
        let req = |kind, class, issue| MemRequest::line(64, kind, class, Cycle(issue));
        assert_eq!(d.access(req(AccessKind::Read, TrafficClass::Tree, 100)), Cycle(107));
        assert_eq!(d.access(req(AccessKind::Read, TrafficClass::Tree, 5)), Cycle(12));
        assert_eq!(d.access(req(AccessKind::Write, TrafficClass::Mac, 0)), Cycle(7));
        assert_eq!(d.stats().reads_by_class[TrafficClass::Tree as usize], 2);
        assert_eq!(d.stats().writes_by_class[TrafficClass::Mac as usize], 1);
        assert_eq!((d.stats().reads(), d.stats().writes()), (2, 1));
        assert_eq!(d.drain(Cycle(50)), Cycle(50));
        assert_eq!(d.capacity_bytes(), 1 << 20);
    }
}
