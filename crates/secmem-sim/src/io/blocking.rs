//! Blocking storage I/O inside a memory simulation: the `IOR` and `IOW` records of an OS-level
//! trace (`secmem_trace::Event::Io`), a program's pread/pwrite with `O_DIRECT`. The core stops
//! at the record, the I/O runs the NVMe path of `io/host.rs` on the `[ssd]` drive (attached to
//! the secure memory controller at the first I/O) with its DMA through the memory controller,
//! and the core resumes when the I/O completes. Both share one clock: an I/O record is timed
//! after the `inst_gap` instructions before it, in trace order, like a load or a store.

use super::host::{Ev, Host, HostTiming, Owner};
use super::IoStack;
use crate::config::Config;
use crate::engine::Engine;
use crate::run::SimError;
use secmem_core::error::ConfigError;
use secmem_media::ssd::SsdMedia;
use secmem_schemes::controller::PortId;
use serde_json::{json, Value};

/// The drive and the totals of a trace's blocking I/Os.
pub struct BlockingIo {
    port: PortId,
    capacity_bytes: u64,
    timing: HostTiming,
    cipher_cycles_per_sector: u64,
    entries: Vec<u64>,
    reads: u64,
    writes: u64,
    bytes: u64,
    /// Core cycles the I/Os held the core (submission to completion).
    blocked_cycles: u64,
    dma_lines: u64,
    commands: u64,
}

impl BlockingIo {
    /// Attaches `cfg`'s drive to `engine`'s memory controller.
    pub fn attach(cfg: &Config, engine: &mut Engine) -> Result<BlockingIo, ConfigError> {
        if cfg.run.functional {
            return Err(ConfigError::new("run.functional", "I/O records are timed, not functional: DMA moves no real bytes yet"));
        }
        if matches!(cfg.io.stack, IoStack::EncInt | IoStack::Dshield | IoStack::DshieldPro) {
            return Err(ConfigError::new("io.stack", format!("{} runs in secmem io; I/O records inside a memory trace take insecure or enc", cfg.io.stack.as_str())));
        }
        cfg.ssd.validate("ssd")?;
        cfg.io.validate(cfg.ssd.capacity_gib)?;
        let port = engine.mc.attach_port("ssd", Box::new(SsdMedia::new(&cfg.ssd, cfg.core.freq_mhz)));
        Ok(BlockingIo {
            port,
            capacity_bytes: cfg.ssd.capacity_gib << 30,
            timing: HostTiming::of(&cfg.io, cfg.core.freq_mhz),
            cipher_cycles_per_sector: (cfg.io.crypto_ns_per_sector() * cfg.core.freq_mhz as f64 / 1000.0).round() as u64,
            entries: vec![0],
            reads: 0,
            writes: 0,
            bytes: 0,
            blocked_cycles: 0,
            dma_lines: 0,
            commands: 0,
        })
    }

    /// Runs one blocking I/O issued at cycle `at`; when the core has it back.
    pub fn run(&mut self, engine: &mut Engine, write: bool, offset: u64, bytes: u32, at: u64) -> Result<u64, SimError> {
        if offset.checked_add(u64::from(bytes)).is_none_or(|end| end > self.capacity_bytes) {
            return Err(SimError::Config(ConfigError::new("ssd.capacity_gib", format!("an I/O at byte {offset} of {bytes} bytes ends past the drive's {} bytes", self.capacity_bytes))));
        }
        // The queues take the first page past io.buffer_base_mib, the data buffer follows.
        let base = self.timing.queue_base_line;
        let mut host = Host::new(engine, self.port, 1, self.timing);
        host.entries = std::mem::take(&mut self.entries);
        let cipher = self.cipher_cycles_per_sector * u64::from(bytes / 512);
        let start = host.run_on(0, at, if write { cipher } else { 0 });
        let mut pending = host.issue_split(Owner::App(0), write, offset, u64::from(bytes), base + 128, 0, start)?;
        let mut done = start;
        while let Some((now, ev)) = host.pop() {
            let Ev::Cmd(step, id) = ev else { unreachable!("a blocking I/O makes only commands") };
            if let Some((_, end)) = host.step(step, id, now)? {
                pending -= 1;
                done = done.max(end);
            }
        }
        debug_assert_eq!(pending, 0);
        // A read is decrypted before the program has it.
        let done = host.run_on(0, done, if write { 0 } else { cipher });
        self.dma_lines += host.dma_lines;
        self.commands += host.commands;
        self.entries = std::mem::take(&mut host.entries);
        if write { self.writes += 1 } else { self.reads += 1 }
        self.bytes += u64::from(bytes);
        self.blocked_cycles += done - at;
        Ok(done)
    }

    /// The `io` block of the report: the I/Os, the time they held the core, their DMA and the
    /// drive's counters.
    pub fn report(&self, engine: &Engine, freq_mhz: u64) -> Value {
        let mut ssd = serde_json::Map::new();
        if let Some((_, s)) = engine.mc.port_stats().into_iter().find(|(n, _)| n == "ssd") {
            for (name, v) in &s.device {
                ssd.insert((*name).to_string(), json!(v));
            }
        }
        json!({
            "reads": self.reads, "writes": self.writes, "bytes": self.bytes,
            "blocked_us": self.blocked_cycles as f64 / freq_mhz as f64,
            "dma_lines": self.dma_lines, "commands": self.commands,
            "ssd": Value::Object(ssd),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::os_trace::run_events;
    use secmem_trace::{Event, PageSize};
    use serde_json::Value;

    fn cfg(extra: &[&str]) -> Config {
        let mut o: Vec<String> = vec!["run.progress=false".into(), "ssd.capacity_gib=16".into()];
        o.extend(extra.iter().map(|s| s.to_string()));
        Config::load(Some("horus"), None, &o).unwrap()
    }

    /// A program that stores into 64 lines, reads `ios` 4 KB blocks from the drive and loads
    /// the lines back.
    fn program(ios: u64) -> Vec<Event> {
        let mut ev = vec![Event::Alloc { pid: 0, vaddr: 0x10000, length: 1 << 20, page: PageSize::Small }];
        for i in 0..64u64 {
            ev.push(Event::Store { pid: 0, vaddr: 0x10000 + i * 64, size_bytes: 8, inst_gap: 10, data: None });
        }
        for i in 0..ios {
            ev.push(Event::Io { pid: 0, write: i % 2 == 0, offset: i * 4096, bytes: 4096, inst_gap: 100 });
        }
        for i in 0..64u64 {
            ev.push(Event::Load { pid: 0, vaddr: 0x10000 + i * 64, size_bytes: 8, inst_gap: 10 });
        }
        ev
    }

    fn run(c: &Config, ev: Vec<Event>) -> Result<Value, crate::run::SimError> { run_events(c, ev.into_iter().map(Ok), "mixed") }

    fn cycles(r: &Value) -> f64 { r["stats"]["cycles"].as_f64().unwrap_or_else(|| panic!("{}", r["stats"])) }

    #[test]
    fn io_records_hold_the_core_for_the_whole_nvme_path_and_move_dma_through_memory() {
        let c = cfg(&[]);
        let plain = run(&c, program(0)).unwrap();
        let mixed = run(&c, program(10)).unwrap();
        let io = &mixed["io"];
        assert_eq!((io["reads"].as_u64(), io["writes"].as_u64(), io["bytes"].as_u64()), (Some(5), Some(5), Some(40960)));
        assert_eq!(io["dma_lines"], 10 * 64);
        assert_eq!(io["ssd"]["host_page_writes"], 5);
        // The core waited for each I/O: submission, doorbell, MSI and completion (5 us) and,
        // for each write, the drive's idle write (9 us; the reads find unwritten blocks); and
        // the run is longer by exactly that wait plus the 100-instruction gaps.
        let blocked_us = io["blocked_us"].as_f64().unwrap();
        assert!(blocked_us > 10.0 * 5.0 + 5.0 * 9.0, "{blocked_us}");
        let extra = cycles(&mixed) - cycles(&plain);
        let expected = blocked_us * 4000.0 + 10.0 * 101.0;
        assert!((extra - expected).abs() < 0.01 * expected, "{extra} {expected}");
        assert!(plain.get("io").is_none(), "no I/O records, no drive");
    }

    #[test]
    fn bad_io_records_are_errors_naming_the_record() {
        let c = cfg(&[]);
        let mut ev = program(2);
        ev.insert(3, Event::Io { pid: 0, write: false, offset: 16 << 30, bytes: 4096, inst_gap: 0 });
        let e = run(&c, ev).unwrap_err().to_string();
        assert!(e.contains("record 3") && e.contains("past the drive"), "{e}");
        let mut ev = program(0);
        ev.push(Event::Io { pid: 7, write: false, offset: 0, bytes: 4096, inst_gap: 0 });
        assert!(run(&c, ev).unwrap_err().to_string().contains("unknown pid 7"));
        let e = run(&cfg(&["io.stack=enc-int"]), program(1)).unwrap_err().to_string();
        assert!(e.contains("io.stack"), "{e}");
    }
}
