//! Test doubles: a device with fixed latencies and no contention, so that hand-worked
//! examples can predict exact counts and cycles.

use secmem_core::Cycle;
use secmem_media::{AccessKind, MediaStats, MemRequest, MemoryPort};

pub struct FixedLatencyMedia {
    pub read: Cycle,
    pub write: Cycle,
    pub capacity: u64,
    pub stats: MediaStats,
    /// Every request seen, in order.
    pub log: Vec<MemRequest>,
}

impl FixedLatencyMedia {
    pub fn new(read: u64, write: u64, capacity: u64) -> Self {
        FixedLatencyMedia { read: Cycle(read), write: Cycle(write), capacity, stats: MediaStats::default(), log: Vec::new() }
    }
}

impl MemoryPort for FixedLatencyMedia {
    fn access(&mut self, req: MemRequest) -> Cycle {
        self.log.push(req);
        match req.kind {
            AccessKind::Read => {
                self.stats.reads_by_class[req.class as usize] += 1;
                req.issue + self.read
            }
            AccessKind::Write => {
                self.stats.writes_by_class[req.class as usize] += 1;
                req.issue + self.write
            }
        }
    }
    fn drain(&mut self, now: Cycle) -> Cycle { now }
    fn capacity_bytes(&self) -> u64 { self.capacity }
    fn stats(&self) -> &MediaStats { &self.stats }
}
