//! `memory.device = "simple"`: a fixed-latency device behind one bandwidth-limited port, as
//! gem5's `SimpleMemory` models memory. A request occupies the port for `size / bandwidth`
//! (requests queue behind each other there), then completes after the read or write latency.
//! No banks, rows or write queue: the device to use when a study wants the controller's
//! effects apart from a memory technology's, or a stand-in port of known timing (a storage
//! device's, in tests of a design with two ports).

use crate::{AccessKind, MediaStats, MemRequest, MemoryPort};
use secmem_core::error::{ensure, number, ConfigError};
use secmem_core::{config_section, Cycle};

config_section! {
    /// The simple device (`memory.device = "simple"`).
    pub struct SimpleConfig {
        read_latency_ns: f64 = 150.0 => "Latency of a read after its transfer slot, ns (default: PCM's array read, Horus Table I)";
        write_latency_ns: f64 = 500.0 => "Latency until a write is persistent after its transfer slot, ns (default: PCM's array write, Horus Table I)";
        bandwidth_gb_per_s: f64 = 12.8 => "Port bandwidth in GB/s (1e9 B/s): a request occupies the port for its size divided by this (default: one DDR4-1600 channel, 12.8 GB/s); 0 = unlimited";
    }
}

impl SimpleConfig {
    /// Rejects values no device can have; errors name the field as `path.field`.
    pub fn validate(&self, path: &str) -> Result<(), ConfigError> {
        let f = |n: &str| if path.is_empty() { n.to_string() } else { format!("{path}.{n}") };
        for (name, v) in [("read_latency_ns", self.read_latency_ns), ("write_latency_ns", self.write_latency_ns), ("bandwidth_gb_per_s", self.bandwidth_gb_per_s)] {
            ensure(v.is_finite() && v >= 0.0, &f(name), || format!("must be a number >= 0, got {}", number(v)))?;
            ensure(v <= 1e6, &f(name), || format!("must be at most 1e6, got {}", number(v)))?;
        }
        ensure(self.read_latency_ns + self.write_latency_ns > 0.0 || self.bandwidth_gb_per_s > 0.0, &f("read_latency_ns"), || {
            "a device with no latency and unlimited bandwidth takes no time at all".into()
        })
    }
}

/// The simple device (see the module documentation).
pub struct SimpleMedia {
    read_cycles: u64,
    write_cycles: u64,
    /// Core cycles per byte moved, scaled by 2^16 (0: unlimited bandwidth).
    cycles_per_byte_x65536: u64,
    /// When the port is free for the next transfer.
    port_free_at: u64,
    last_done: u64,
    capacity_bytes: u64,
    stats: MediaStats,
}

impl SimpleMedia {
    /// A device of `capacity_bytes` at a core clock of `freq_mhz`.
    pub fn new(cfg: &SimpleConfig, freq_mhz: u64, capacity_bytes: u64) -> SimpleMedia {
        let cyc = |ns: f64| (ns * freq_mhz as f64 / 1000.0).round() as u64;
        let cycles_per_byte_x65536 = if cfg.bandwidth_gb_per_s > 0.0 {
            // cycles per byte = (freq_mhz * 1e6) / (gb_per_s * 1e9)
            ((freq_mhz as f64 / (cfg.bandwidth_gb_per_s * 1000.0)) * 65536.0).round() as u64
        } else {
            0
        };
        SimpleMedia {
            read_cycles: cyc(cfg.read_latency_ns),
            write_cycles: cyc(cfg.write_latency_ns),
            cycles_per_byte_x65536,
            port_free_at: 0,
            last_done: 0,
            capacity_bytes,
            stats: MediaStats { device: vec![("port_wait_cycles", 0)], ..MediaStats::default() },
        }
    }
}

impl MemoryPort for SimpleMedia {
    fn access(&mut self, req: MemRequest) -> Cycle {
        debug_assert!(req.addr + u64::from(req.size_bytes) <= self.capacity_bytes, "request beyond the device");
        self.stats.count(req.kind, req.class, req.size_bytes);
        let start = req.issue.0.max(self.port_free_at);
        self.stats.device[0].1 += start - req.issue.0;
        let transfer = (u64::from(req.size_bytes) * self.cycles_per_byte_x65536).div_ceil(65536);
        self.port_free_at = start + transfer;
        let done = start
            + transfer
            + match req.kind {
                AccessKind::Read => self.read_cycles,
                AccessKind::Write => self.write_cycles,
            };
        self.last_done = self.last_done.max(done);
        Cycle(done)
    }

    /// Writes are persistent when they complete: nothing is pending beyond the last one.
    fn drain(&mut self, now: Cycle) -> Cycle { Cycle(now.0.max(self.last_done)) }

    fn capacity_bytes(&self) -> u64 { self.capacity_bytes }

    fn stats(&self) -> MediaStats { self.stats.clone() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TrafficClass;

    fn req(addr: u64, size_bytes: u32, kind: AccessKind, issue: u64) -> MemRequest {
        MemRequest { addr, size_bytes, kind, class: TrafficClass::Data, issue: Cycle(issue) }
    }

    #[test]
    fn a_request_waits_for_the_port_then_its_transfer_then_its_latency() {
        // 4 GHz, 12.8 GB/s: 0.3125 cycles per byte, a 64 B line is 20 cycles on the port, a
        // 4 KiB block 1280. Reads 600 cycles, writes 2000.
        let mut d = SimpleMedia::new(&SimpleConfig::default(), 4000, 1 << 30);
        assert_eq!(d.access(req(0, 64, AccessKind::Read, 100)), Cycle(100 + 20 + 600));
        // Issued while the port is busy until 120: waits 20.
        assert_eq!(d.access(req(64, 4096, AccessKind::Write, 100)), Cycle(120 + 1280 + 2000));
        let s = d.stats();
        assert_eq!((s.reads(), s.writes(), s.bytes_read, s.bytes_written), (1, 1, 64, 4096));
        assert_eq!(s.device_counter("port_wait_cycles"), Some(20));
        assert_eq!(d.drain(Cycle(0)), Cycle(120 + 1280 + 2000));
    }

    #[test]
    fn unlimited_bandwidth_leaves_only_the_latency() {
        let cfg = SimpleConfig { bandwidth_gb_per_s: 0.0, ..SimpleConfig::default() };
        let mut d = SimpleMedia::new(&cfg, 4000, 1 << 30);
        assert_eq!(d.access(req(0, 1 << 20, AccessKind::Read, 7)), Cycle(607));
        assert_eq!(d.access(req(0, 1 << 20, AccessKind::Read, 7)), Cycle(607));
    }

    #[test]
    fn a_config_with_a_negative_latency_is_refused_naming_the_field() {
        let cfg = SimpleConfig { write_latency_ns: -1.0, ..SimpleConfig::default() };
        assert_eq!(cfg.validate("simple").unwrap_err().field, "simple.write_latency_ns");
    }
}
