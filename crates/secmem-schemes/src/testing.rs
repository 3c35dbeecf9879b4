//! Test doubles: a device with fixed latencies and no contention, so that hand-worked
//! examples can predict exact counts and cycles.

use secmem_core::Cycle;
use secmem_media::{AccessKind, MediaStats, MemRequest, MemoryPort, TrafficClass};
use std::cell::RefCell;
use std::rc::Rc;

/// Every request a device saw, in order, as (byte address, read or write, traffic class).
/// Shared, so a test keeps it after boxing the device into a controller.
pub type AccessLog = Rc<RefCell<Vec<(u64, AccessKind, TrafficClass)>>>;

pub struct FixedLatencyMedia {
    pub read: Cycle,
    pub write: Cycle,
    pub capacity: u64,
    pub stats: MediaStats,
    pub log: AccessLog,
}

impl FixedLatencyMedia {
    pub fn new(read: u64, write: u64, capacity: u64) -> Self {
        FixedLatencyMedia { read: Cycle(read), write: Cycle(write), capacity, stats: MediaStats::default(), log: AccessLog::default() }
    }

    /// A device and a handle on its request log.
    pub fn recording(read: u64, write: u64, capacity: u64) -> (Self, AccessLog) {
        let m = Self::new(read, write, capacity);
        let log = m.log.clone();
        (m, log)
    }
}

impl MemoryPort for FixedLatencyMedia {
    fn access(&mut self, req: MemRequest) -> Cycle {
        self.log.borrow_mut().push((req.addr, req.kind, req.class));
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
