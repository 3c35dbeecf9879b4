//! secmem-media: the timing of memory and storage devices behind one trait, [`MemoryPort`].
//!
//! The secure memory controller (secmem-schemes) never asks which device it talks to: it sends
//! [`MemRequest`]s (a 64 B line, or a storage block of any multiple of 64 B) tagged with a
//! [`TrafficClass`] and gets back the cycle at which each completes. The config picks the
//! device (`memory.device`); a controller may own further ports beside its memory (a storage
//! device, say), each with statistics of its own ([`MediaStats`]: the counts every device
//! keeps, plus the device's own named counters). Adding a device means a new file here, not a
//! change in the controller (gem5's controller/media split).

use secmem_core::Cycle;
use serde::Serialize;

pub mod simple;
pub mod pcm;
pub mod ssd;
pub mod untimed;

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

/// Bytes in a line, the unit of memory requests.
pub const LINE_BYTES: u32 = 64;

/// One access to the device: a 64 B line, or a storage block of any multiple of 64 B.
#[derive(Copy, Clone, Debug)]
pub struct MemRequest {
    /// Device byte address, aligned to 64 B, with `addr + size_bytes <= capacity_bytes()`.
    pub addr: u64,
    /// Bytes moved: [`LINE_BYTES`] for memory traffic, a block size for storage.
    pub size_bytes: u32,
    pub kind: AccessKind,
    pub class: TrafficClass,
    /// Cycle at which the controller hands the request to the device.
    pub issue: Cycle,
}

impl MemRequest {
    /// A 64 B line request.
    pub fn line(addr: u64, kind: AccessKind, class: TrafficClass, issue: Cycle) -> MemRequest {
        MemRequest { addr, size_bytes: LINE_BYTES, kind, class, issue }
    }
}

/// What every device counts, plus the device's own named counters.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MediaStats {
    /// Requests read per traffic class, indexed by `TrafficClass as usize`.
    pub reads_by_class: [u64; 6],
    /// Requests written per traffic class, indexed by `TrafficClass as usize`.
    pub writes_by_class: [u64; 6],
    /// Bytes read, all classes.
    pub bytes_read: u64,
    /// Bytes written, all classes.
    pub bytes_written: u64,
    /// Dynamic energy of the device's operations, in nanojoules.
    pub energy_nj: f64,
    /// The device's own counters (PCM: its queues, bank conflicts, array operations), by
    /// name, in the order the device lists them; every device lists the same names every
    /// time.
    pub device: Vec<(&'static str, u64)>,
}

impl MediaStats {
    pub fn reads(&self) -> u64 { self.reads_by_class.iter().sum() }
    pub fn writes(&self) -> u64 { self.writes_by_class.iter().sum() }

    /// The device counter `name` (None if the device keeps no such counter).
    pub fn device_counter(&self, name: &str) -> Option<u64> { self.device.iter().find(|(n, _)| *n == name).map(|&(_, v)| v) }

    /// `self - start`, for warm-up subtraction.
    pub fn since(&self, start: &MediaStats) -> MediaStats {
        let mut out = self.clone();
        for i in 0..6 {
            out.reads_by_class[i] -= start.reads_by_class[i];
            out.writes_by_class[i] -= start.writes_by_class[i];
        }
        out.bytes_read -= start.bytes_read;
        out.bytes_written -= start.bytes_written;
        out.energy_nj -= start.energy_nj;
        for (name, v) in out.device.iter_mut() {
            *v -= start.device_counter(name).unwrap_or(0);
        }
        out
    }

    /// Counts one request of `size_bytes` (the generic half of every device's bookkeeping).
    #[inline(always)]
    pub fn count(&mut self, kind: AccessKind, class: TrafficClass, size_bytes: u32) {
        match kind {
            AccessKind::Read => {
                self.reads_by_class[class as usize] += 1;
                self.bytes_read += u64::from(size_bytes);
            }
            AccessKind::Write => {
                self.writes_by_class[class as usize] += 1;
                self.bytes_written += u64::from(size_bytes);
            }
        }
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
    /// The device's statistics so far (a copy: asked at snapshots, not per request).
    fn stats(&self) -> MediaStats;
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
// The PCM variant is large and stays inline: boxing it would add a pointer chase to every
// device access of the hot path, and a controller holds exactly one `Media`.
#[allow(clippy::large_enum_variant)]
pub enum Media {
    Pcm(pcm::PcmMedia),
    /// The functional half of a two-thread run: a direct call too, as it also makes about
    /// eleven accesses per secure request.
    Untimed(untimed::UntimedDevice),
    Other(Box<dyn MemoryPort>),
}

impl Media {
    /// A read of the 64 B line at device byte address `addr`: [`MemoryPort::access`] with
    /// `AccessKind::Read`, without the kind `match` on PCM.
    // Always: with a third variant the inliner stopped folding this into the controller's
    // walk, and counting mode paid a call per access.
    #[inline(always)]
    pub fn read(&mut self, addr: u64, class: TrafficClass, issue: Cycle) -> Cycle {
        match self {
            Media::Pcm(pcm) => pcm.read(addr, class, issue),
            _ => self.access_not_pcm(MemRequest::line(addr, AccessKind::Read, class, issue)),
        }
    }

    /// A write of the 64 B line at device byte address `addr` (see [`read`](Self::read)).
    #[inline(always)]
    pub fn write(&mut self, addr: u64, class: TrafficClass, issue: Cycle) -> Cycle {
        match self {
            Media::Pcm(pcm) => pcm.write(addr, class, issue),
            _ => self.access_not_pcm(MemRequest::line(addr, AccessKind::Write, class, issue)),
        }
    }

    /// The accesses of every device but PCM, out of line: inlined, they made counting mode's
    /// PCM path about 1% more host instructions.
    #[inline(never)]
    fn access_not_pcm(&mut self, req: MemRequest) -> Cycle {
        match self {
            Media::Untimed(dev) => dev.access(req),
            Media::Other(dev) => dev.access(req),
            // Never taken (`read` and `write` answer PCM inline). Out of line, so that this
            // function stays small: with PCM's whole access path inlined here, every untimed
            // access paid that path's register saves, about 30 host instructions a call where
            // the count itself is a few.
            Media::Pcm(pcm) => pcm_access_out_of_line(pcm, req),
        }
    }
}

#[inline(never)]
#[cold]
fn pcm_access_out_of_line(pcm: &mut pcm::PcmMedia, req: MemRequest) -> Cycle { pcm.access(req) }

impl MemoryPort for Media {
    #[inline]
    fn access(&mut self, req: MemRequest) -> Cycle {
        match self {
            Media::Pcm(pcm) => pcm.access(req),
            Media::Untimed(dev) => dev.access(req),
            Media::Other(dev) => dev.access(req),
        }
    }
    fn drain(&mut self, now: Cycle) -> Cycle {
        match self {
            Media::Pcm(pcm) => pcm.drain(now),
            Media::Untimed(dev) => dev.drain(now),
            Media::Other(dev) => dev.drain(now),
        }
    }
    #[inline]
    fn capacity_bytes(&self) -> u64 {
        match self {
            Media::Pcm(pcm) => pcm.capacity_bytes(),
            Media::Untimed(dev) => dev.capacity_bytes(),
            Media::Other(dev) => dev.capacity_bytes(),
        }
    }
    fn stats(&self) -> MediaStats {
        match self {
            Media::Pcm(pcm) => pcm.stats(),
            Media::Untimed(dev) => dev.stats(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pcm::{PcmConfig, PcmMedia};

    #[test]
    fn traffic_classes_are_named_and_indexed_in_report_order() {
        // The names are the report's keys and `as usize` indexes the per-class arrays.
        let names: Vec<&str> = TrafficClass::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names, ["data", "counter", "mac", "tree", "reencrypt", "design"]);
        for (i, c) in TrafficClass::ALL.into_iter().enumerate() {
            assert_eq!(c as usize, i);
        }
    }

    #[test]
    fn stats_since_subtracts_every_field_of_the_warm_up_snapshot() {
        // Every field nonzero and different in both snapshots, so a field skipped, added or
        // divided instead of subtracted comes out wrong. The end is start + 100 x start
        // (energy: 20.25 + 2000.5, exact in f64), so the difference is 100 x start.
        let start = MediaStats {
            reads_by_class: [1, 2, 3, 4, 5, 6],
            writes_by_class: [7, 8, 9, 10, 11, 12],
            bytes_read: 13,
            bytes_written: 14,
            energy_nj: 20.25,
            device: vec![("queue_stalls", 15), ("gc_runs", 16)],
        };
        let end = MediaStats {
            reads_by_class: [101, 202, 303, 404, 505, 606],
            writes_by_class: [707, 808, 909, 1010, 1111, 1212],
            bytes_read: 1313,
            bytes_written: 1414,
            energy_nj: 2020.75,
            device: vec![("queue_stalls", 1515), ("gc_runs", 1616)],
        };
        let delta = MediaStats {
            reads_by_class: [100, 200, 300, 400, 500, 600],
            writes_by_class: [700, 800, 900, 1000, 1100, 1200],
            bytes_read: 1300,
            bytes_written: 1400,
            energy_nj: 2000.5,
            device: vec![("queue_stalls", 1500), ("gc_runs", 1600)],
        };
        assert_eq!(end.since(&start), delta);
        assert_eq!(delta.device_counter("gc_runs"), Some(1600));
        assert_eq!(delta.device_counter("wpq_read_hits"), None);
        let zero = end.since(&end);
        assert_eq!((zero.reads(), zero.writes(), zero.bytes_read, zero.device_counter("gc_runs")), (0, 0, 0, Some(0)));
    }

    #[test]
    fn media_passes_every_call_through_to_the_pcm_device_it_holds() {
        // Default PCM at 4 GHz: 600-cycle array reads, 2000-cycle array writes, 20-cycle
        // bursts; line k is on channel k % 2, bank (k / 2) % 8.
        let mut m = Media::from(PcmMedia::new(&PcmConfig::default(), 4000, 32 << 30));
        // Line 5 (channel 1, bank 2), idle: array read, then its burst.
        assert_eq!(m.read(5 * 64, TrafficClass::Data, Cycle(1000)), Cycle(1000 + 600 + 20));
        // ADR: persistent when accepted; the watermark policy leaves it queued.
        assert_eq!(m.write(3 * 64, TrafficClass::Tree, Cycle(1000)), Cycle(1000));
        // Line 6 (channel 0, bank 3), idle, on the other bus: the same 1620.
        let req = MemRequest::line(6 * 64, AccessKind::Read, TrafficClass::Mac, Cycle(1000));
        assert_eq!(m.access(req), Cycle(1620));
        // The queued write (line 3: channel 1, bank 1, both idle at 2000) is issued at 2000:
        // its burst, then the array write.
        assert_eq!(m.drain(Cycle(2000)), Cycle(2000 + 20 + 2000));
        assert_eq!(m.capacity_bytes(), 32 << 30);
        let s = m.stats();
        let (data, mac, tree) = (TrafficClass::Data as usize, TrafficClass::Mac as usize, TrafficClass::Tree as usize);
        assert_eq!((s.reads_by_class[data], s.reads_by_class[mac], s.writes_by_class[tree]), (1, 1, 1));
        assert_eq!((s.device_counter("array_reads"), s.device_counter("array_writes")), (Some(2), Some(1)));
        assert_eq!((s.bytes_read, s.bytes_written), (128, 64));
        // A boxed PCM device is unboxed onto the direct path.
        let boxed = Media::from(Box::new(PcmMedia::new(&PcmConfig::default(), 4000, 32 << 30)));
        assert!(matches!(boxed, Media::Pcm(_)));
    }

    /// A stand-in device: a read is back 7 cycles after issue, a write persistent after 11, a
    /// drain done 13 cycles after it is asked; it counts requests per class.
    struct Fixed {
        stats: MediaStats,
    }

    impl MemoryPort for Fixed {
        fn access(&mut self, req: MemRequest) -> Cycle {
            self.stats.count(req.kind, req.class, req.size_bytes);
            match req.kind {
                AccessKind::Read => Cycle(req.issue.0 + 7),
                AccessKind::Write => Cycle(req.issue.0 + 11),
            }
        }
        fn drain(&mut self, now: Cycle) -> Cycle { Cycle(now.0 + 13) }
        fn capacity_bytes(&self) -> u64 { 1 << 20 }
        fn stats(&self) -> MediaStats { self.stats.clone() }
    }

    #[test]
    fn media_passes_every_call_with_its_kind_through_to_a_boxed_device() {
        let dev: Box<dyn MemoryPort> = Box::new(Fixed { stats: MediaStats::default() });
        let mut m = Media::from(dev);
        assert!(matches!(m, Media::Other(_)));
        // +7 is a read, +11 a write: `read` and `write` send the kind they are named for.
        assert_eq!(m.read(64, TrafficClass::Counter, Cycle(100)), Cycle(107));
        assert_eq!(m.write(128, TrafficClass::Design, Cycle(100)), Cycle(111));
        let req = MemRequest { addr: 192, size_bytes: 512, kind: AccessKind::Write, class: TrafficClass::Mac, issue: Cycle(200) };
        assert_eq!(m.access(req), Cycle(211));
        assert_eq!(m.drain(Cycle(300)), Cycle(313));
        assert_eq!(m.capacity_bytes(), 1 << 20);
        let s = m.stats();
        let (counter, design, mac) = (TrafficClass::Counter as usize, TrafficClass::Design as usize, TrafficClass::Mac as usize);
        assert_eq!((s.reads_by_class[counter], s.writes_by_class[design], s.writes_by_class[mac]), (1, 1, 1));
        assert_eq!((s.reads(), s.writes()), (1, 2));
        assert_eq!((s.bytes_read, s.bytes_written), (64, 64 + 512), "the request's size reaches the device");
    }
}
