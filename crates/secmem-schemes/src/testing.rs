//! Test doubles and tools: a device with fixed latencies and no contention, so that
//! hand-worked examples can predict exact counts and cycles; a bit flip in the NVM image.

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
        self.stats.count(req.kind, req.class, req.size_bytes);
        match req.kind {
            AccessKind::Read => req.issue + self.read,
            AccessKind::Write => req.issue + self.write,
        }
    }
    fn drain(&mut self, now: Cycle) -> Cycle { now }
    fn capacity_bytes(&self) -> u64 { self.capacity }
    fn stats(&self) -> MediaStats { self.stats.clone() }
}

/// Flips bit `bit` (0..512) of the stored line at byte address `addr` in a functional
/// controller's NVM image: what an attacker with access to the device does.
///
/// # Panics
/// If `mc` is not in functional mode.
pub fn flip_bit(mc: &mut crate::SecureMc, addr: u64, bit: usize) {
    let image = &mut mc.func.as_mut().expect("functional mode").image;
    let mut b = image.get(addr >> 6);
    b[bit / 8] ^= 1 << (bit % 8);
    image.put(addr >> 6, b);
}

/// Writes 40 lines over 40 pages through the controller's baseline write path, which leaves
/// dirty counter, MAC and tree blocks in its metadata caches (for a drain to save); returns
/// each line and its new content.
pub fn write_some_lines(mc: &mut crate::SecureMc) -> Vec<(u64, [u8; 64])> {
    let functional = mc.is_functional();
    (0..40u64)
        .map(|i| {
            let (line, bytes) = (i * 97 + 3, [i as u8 + 1; 64]);
            mc.write_line(line, functional.then_some(&bytes), Cycle(i * 1000)).expect("a write to an untampered controller");
            (line, bytes)
        })
        .collect()
}
