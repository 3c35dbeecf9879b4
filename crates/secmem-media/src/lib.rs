//! secmem-media: the timing of memory devices behind one trait, [`MemoryPort`].
//!
//! The secure memory controller (secmem-schemes) never asks which device it talks to: it sends
//! line-sized [`MemRequest`]s tagged with a [`TrafficClass`] and gets back the cycle at which each
//! completes. Presets pick the device; adding an NVMe SSD later means a new file here, not a
//! change in the controller (gem5's controller/media split).

use secmem_core::Cycle;
use serde::Serialize;

pub mod pcm;

/// What a request is for. Devices count traffic per class so that reports can split memory
/// reads/writes into data, counter, MAC, tree and re-encryption traffic.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
#[repr(u8)]
pub enum TrafficClass {
    Data = 0,
    Counter = 1,
    Mac = 2,
    Tree = 3,
    /// Reads and writes done to re-encrypt a page after a minor-counter overflow.
    Reencrypt = 4,
    /// Design-specific regions (Horus vault, BMF roots, dedup tables, ...).
    Design = 5,
}

impl TrafficClass {
    pub const ALL: [TrafficClass; 6] = [
        TrafficClass::Data,
        TrafficClass::Counter,
        TrafficClass::Mac,
        TrafficClass::Tree,
        TrafficClass::Reencrypt,
        TrafficClass::Design,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            TrafficClass::Data => "data",
            TrafficClass::Counter => "counter",
            TrafficClass::Mac => "mac",
            TrafficClass::Tree => "tree",
            TrafficClass::Reencrypt => "reencrypt",
            TrafficClass::Design => "design",
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AccessKind {
    Read,
    Write,
}

/// One line-sized (64 B) access to the device.
#[derive(Copy, Clone, Debug)]
pub struct MemRequest {
    /// Device byte address, 64 B aligned, below `capacity_bytes()`.
    pub addr: u64,
    pub kind: AccessKind,
    pub class: TrafficClass,
    /// Cycle at which the controller hands the request to the device.
    pub issue: Cycle,
}

/// Per-class read/write counts plus device-wide timing and energy figures.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MediaStats {
    /// Reads per traffic class, indexed by `TrafficClass as usize`.
    pub reads_by_class: [u64; 6],
    /// Writes per traffic class, indexed by `TrafficClass as usize`.
    pub writes_by_class: [u64; 6],
    /// Reads served from the write pending queue (read-after-write forwarding).
    pub wpq_read_hits: u64,
    /// Writes that found the write queue full and had to wait for a slot.
    pub wpq_full_stalls: u64,
    /// Writes merged into a write already pending in the write queue for the same line; they
    /// are counted in `writes_by_class` but never reach the array.
    pub wpq_coalesced: u64,
    /// Reads that found the read queue full and waited for an in-flight read to complete.
    pub read_queue_full_stalls: u64,
    /// Total cycles requests spent waiting for a busy bank.
    pub bank_conflict_cycles: u64,
    /// Reads performed on the array (reads minus those forwarded from the write queue).
    pub array_reads: u64,
    /// Writes performed on the array (issued to a bank; excludes coalesced writes and writes
    /// still waiting in the write queue).
    pub array_writes: u64,
    /// Dynamic energy of array reads and writes, in nanojoules.
    pub energy_nj: f64,
}

impl MediaStats {
    pub fn reads(&self) -> u64 { self.reads_by_class.iter().sum() }
    pub fn writes(&self) -> u64 { self.writes_by_class.iter().sum() }
    /// `self - start`, for warm-up subtraction.
    pub fn since(&self, start: &MediaStats) -> MediaStats {
        let mut out = self.clone();
        for i in 0..6 {
            out.reads_by_class[i] -= start.reads_by_class[i];
            out.writes_by_class[i] -= start.writes_by_class[i];
        }
        out.wpq_read_hits -= start.wpq_read_hits;
        out.wpq_full_stalls -= start.wpq_full_stalls;
        out.wpq_coalesced -= start.wpq_coalesced;
        out.read_queue_full_stalls -= start.read_queue_full_stalls;
        out.bank_conflict_cycles -= start.bank_conflict_cycles;
        out.array_reads -= start.array_reads;
        out.array_writes -= start.array_writes;
        out.energy_nj -= start.energy_nj;
        out
    }
}

/// The one interface between a memory controller and a device.
pub trait MemoryPort {
    /// Performs one access. For a read, returns the cycle at which the data is back at the
    /// controller. For a write, returns the cycle at which the write is *persistent*: accepted
    /// into the write pending queue when that queue is in the persistence domain (ADR), or
    /// written to the array otherwise. Requests must be issued in non-decreasing `issue` order
    /// per caller thread of time; the device may reorder internally (reads before writes).
    fn access(&mut self, req: MemRequest) -> Cycle;
    /// Drains every pending write to the array; returns the cycle when the last one is done.
    fn drain(&mut self, now: Cycle) -> Cycle;
    /// Total addressable bytes.
    fn capacity_bytes(&self) -> u64;
    fn stats(&self) -> &MediaStats;
}

/// The device a controller owns: the PCM model held by value, any other [`MemoryPort`]
/// behind a trait object.
///
/// Every device access of a simulated request goes through here (about eleven per random
/// secure request), and nearly every run is on PCM. Through `Box<dyn MemoryPort>` each one
/// was an indirect call that could not inline `PcmMedia`'s access path nor fold its
/// read/write `match`, though every controller call site knows which it does. Matching on
/// this enum instead keeps the PCM path a direct call with the kind known, and keeps the
/// plug-in seam: another device (an NVMe model, a design's own, a test recorder) still
/// comes in as `Box<dyn MemoryPort>` (`Media::from`) without touching the controller.
pub enum Media {
    Pcm(pcm::PcmMedia),
    Other(Box<dyn MemoryPort>),
}

impl Media {
    /// A read of the 64 B line at device byte address `addr`: [`MemoryPort::access`] with
    /// `AccessKind::Read`, without the kind `match` on PCM.
    #[inline]
    pub fn read(&mut self, addr: u64, class: TrafficClass, issue: Cycle) -> Cycle {
        match self {
            Media::Pcm(pcm) => pcm.read(addr, class, issue),
            Media::Other(dev) => dev.access(MemRequest { addr, kind: AccessKind::Read, class, issue }),
        }
    }

    /// A write of the 64 B line at device byte address `addr` (see [`read`](Self::read)).
    #[inline]
    pub fn write(&mut self, addr: u64, class: TrafficClass, issue: Cycle) -> Cycle {
        match self {
            Media::Pcm(pcm) => pcm.write(addr, class, issue),
            Media::Other(dev) => dev.access(MemRequest { addr, kind: AccessKind::Write, class, issue }),
        }
    }
}

impl MemoryPort for Media {
    #[inline]
    fn access(&mut self, req: MemRequest) -> Cycle {
        match self {
            Media::Pcm(pcm) => pcm.access(req),
            Media::Other(dev) => dev.access(req),
        }
    }
    fn drain(&mut self, now: Cycle) -> Cycle {
        match self {
            Media::Pcm(pcm) => pcm.drain(now),
            Media::Other(dev) => dev.drain(now),
        }
    }
    #[inline]
    fn capacity_bytes(&self) -> u64 {
        match self {
            Media::Pcm(pcm) => pcm.capacity_bytes(),
            Media::Other(dev) => dev.capacity_bytes(),
        }
    }
    #[inline]
    fn stats(&self) -> &MediaStats {
        match self {
            Media::Pcm(pcm) => pcm.stats(),
            Media::Other(dev) => dev.stats(),
        }
    }
}

impl From<pcm::PcmMedia> for Media {
    fn from(pcm: pcm::PcmMedia) -> Media { Media::Pcm(pcm) }
}

/// A boxed PCM device is unboxed, so it still takes the direct path.
impl From<Box<pcm::PcmMedia>> for Media {
    fn from(pcm: Box<pcm::PcmMedia>) -> Media { Media::Pcm(*pcm) }
}

impl From<Box<dyn MemoryPort>> for Media {
    fn from(dev: Box<dyn MemoryPort>) -> Media { Media::Other(dev) }
}
