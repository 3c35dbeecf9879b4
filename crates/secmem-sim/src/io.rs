//! Storage I/O beside the secure memory: fio-style workloads on an NVMe SSD
//! (`secmem_media::ssd`) attached to the secure memory controller as a further port, with the
//! host's I/O path on the simulated cores and every DMA transfer carried through the memory
//! controller (`secmem io`).
//!
//! One I/O, as the NVMe protocol runs it (each step an event, all events in time order):
//!
//! 1. **submit** — the thread's core runs the block layer and driver (`io.submit_us`), writes
//!    the 64 B command into its submission queue in host memory (a memory write) and rings
//!    the doorbell (`io.pcie_latency_ns` to the drive);
//! 2. **fetch** — the drive reads the command from the submission queue (a memory read);
//! 3. **DMA in** (writes) — the drive reads the data buffer from host memory, a line at a time;
//! 4. **flash** — the drive serves the block (`secmem_media::ssd`: buffer, FTL, planes);
//! 5. **DMA out** (reads) — the drive writes the data into the host buffer, a line at a time;
//! 6. **complete** — the drive writes the completion-queue entry (a memory write) and sends
//!    an MSI (`io.pcie_latency_ns`);
//! 7. **interrupt** — the core handles the interrupt and completes the I/O (`io.complete_us`);
//!    the thread submits its next I/O.
//!
//! With `io.dma_through_memory = false` the memory steps take no time and cause no traffic
//! (the SSD and the host path alone). The I/O space is preconditioned (written once,
//! sequentially) before the run unless `io.precondition = false`, as fio reads of a laid-out
//! file are.

use crate::config::Config;
use crate::engine::Engine;
use crate::run::SimError;
use rand::{Rng, SeedableRng};
use secmem_core::error::{ensure, number, ConfigError};
use secmem_core::stats::Histogram;
use secmem_core::{config_enum, config_section, Cycle};
use secmem_media::ssd::SsdMedia;
use secmem_media::{AccessKind, MemRequest, TrafficClass};
use serde_json::{json, Value};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

config_enum! {
    /// fio's access patterns (`rw=`).
    pub enum IoPattern {
        SeqRead => "seq-read": "sequential reads (fio rw=read, D-Shield's Seq-R)",
        SeqWrite => "seq-write": "sequential writes (rw=write, Seq-W)",
        SeqRw => "seq-rw": "sequential, reads and writes mixed by io.read_percent (rw=rw, Seq-RW)",
        RandRead => "rand-read": "uniform random reads (rw=randread, Rand-R)",
        RandWrite => "rand-write": "uniform random writes (rw=randwrite, Rand-W)",
        RandRw => "rand-rw": "uniform random, reads and writes mixed by io.read_percent (rw=randrw, Rand-RW)"
    }
}

config_enum! {
    /// The host's storage stack between the application and the drive.
    pub enum IoStack {
        Insecure => "insecure": "no storage security: the block layer and NVMe driver only",
        Enc => "enc": "dm-crypt (aes-xts-plain64): each 512 B sector encrypted before a write is submitted and decrypted after a read completes, in software on the thread's core (io.aes_xts_ns_per_sector)"
    }
}

config_section! {
    /// The I/O workload and the host's I/O path (`secmem io`).
    pub struct IoConfig {
        pattern: IoPattern = IoPattern::RandRead => "Access pattern, as fio's rw=";
        threads: u32 = 4 => "Submitting threads, one per core (fio numjobs; D-Shield Table II: 4)";
        block_bytes: u32 = 4096 => "Bytes per I/O, a multiple of 512 (fio bs; Table II: 4 KB)";
        queue_depth: u32 = 1 => "I/Os each thread keeps outstanding (fio iodepth)";
        space_gib: u64 = 8 => "I/O space at the start of the drive, GiB (Table II: 8 GB); sequential threads each take an equal slice of it";
        ios: u64 = 131072 => "I/Os in all, spread evenly over the threads (Table II: 128K to 512K transactions)";
        read_percent: u32 = 50 => "Share of reads in the mixed patterns, % (fio rwmixread)";
        seed: u64 = 1 => "Seed of the random offsets and of the read/write mix";
        submit_us: f64 = 1.5 => "Core time to submit one I/O through the block layer and NVMe driver, us (the order measured for Linux's interrupt-driven NVMe path; not from the paper)";
        complete_us: f64 = 2.5 => "Core time to handle one completion interrupt and finish the I/O, us (as submit_us)";
        pcie_latency_ns: f64 = 500.0 => "One-way PCIe latency of a doorbell or an MSI, ns";
        dma_through_memory: bool = true => "DMA transfers, queue entries and their timing go through the secure memory controller (false: they take no time and make no traffic)";
        buffer_base_mib: u64 = 1024 => "Physical address of the host's queues and I/O buffers, MiB";
        precondition: bool = true => "Write the I/O space once before the run (untimed), so reads find data as in a laid-out fio file";
        stack: IoStack = IoStack::Insecure => "Storage stack: insecure, or enc (dm-crypt)";
        aes_xts_ns_per_sector: f64 = 120.0 => "Core time of dm-crypt's AES-XTS per 512 B sector, ns (measured on this project's machine, RustCrypto with AES-NI: secmem io-calibrate prints your machine's)";
        trace: String = String::new() => "An I/O trace to replay instead of the pattern: a fio iolog (v2 or v3) or an MQSim ASCII trace; each file gets io.space_gib of the drive; its I/Os share threads x queue_depth slots (empty: the pattern)";
    }
}

impl IoConfig {
    pub fn validate(&self, ssd_capacity_gib: u64) -> Result<(), ConfigError> {
        ensure(self.threads >= 1 && self.threads <= 1024, "io.threads", || format!("must be 1..=1024, got {}", self.threads))?;
        ensure(self.queue_depth >= 1 && self.queue_depth <= 65536, "io.queue_depth", || format!("must be 1..=65536 (an NVMe queue), got {}", self.queue_depth))?;
        ensure(self.block_bytes >= 512 && self.block_bytes.is_multiple_of(512) && self.block_bytes <= 1 << 24, "io.block_bytes", || {
            format!("must be a multiple of 512 bytes (a logical block), at most 16 MiB, got {}", self.block_bytes)
        })?;
        ensure(self.space_gib >= 1 && self.space_gib <= ssd_capacity_gib, "io.space_gib", || {
            format!("must be 1..={ssd_capacity_gib} (ssd.capacity_gib): an I/O past the end of the drive, got {}", self.space_gib)
        })?;
        ensure(u64::from(self.block_bytes) * u64::from(self.threads) <= self.space_gib << 30, "io.block_bytes", || "each thread needs at least one block of the I/O space".into())?;
        ensure(self.ios >= 1 && self.ios <= 1 << 40, "io.ios", || format!("must be 1..=2^40, got {}", self.ios))?;
        ensure(self.read_percent <= 100, "io.read_percent", || format!("must be 0..=100, got {}", self.read_percent))?;
        for (name, v) in [("io.submit_us", self.submit_us), ("io.complete_us", self.complete_us), ("io.pcie_latency_ns", self.pcie_latency_ns), ("io.aes_xts_ns_per_sector", self.aes_xts_ns_per_sector)] {
            ensure(v.is_finite() && (0.0..=1e6).contains(&v), name, || format!("must be a number in 0..=1e6, got {}", number(v)))?;
        }
        Ok(())
    }

    /// Checks that the queues and buffers fit in data memory: a 4 KB submission and
    /// completion queue page per thread, and a buffer of `io_bytes` (the largest I/O) per
    /// outstanding I/O.
    fn check_host_memory(&self, io_bytes: u32, memory_bytes: u64) -> Result<(), ConfigError> {
        let t = u64::from(self.threads);
        let need = (self.buffer_base_mib << 20) + t * 8192 + t * u64::from(self.queue_depth) * u64::from(io_bytes);
        ensure(need <= memory_bytes, "io.buffer_base_mib", || {
            format!("the queues and buffers ({io_bytes}-byte I/Os) end at byte {need}, beyond the {memory_bytes} bytes of data memory")
        })
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step { Arrive, Submit, Fetch, DmaIn, Flash, DmaOut, Complete, Interrupt }

/// One I/O in flight.
#[derive(Copy, Clone)]
struct Io {
    thread: u32,
    slot: u32,
    write: bool,
    offset: u64,
    bytes: u32,
    /// The trace request it serves (trace replay only).
    request: usize,
    /// When its thread began submitting it.
    started: u64,
    /// Its entry's index in the thread's queues (wraps at 64 entries a page).
    entry: u64,
}

/// The threads' offset streams.
struct Streams {
    cfg: IoConfig,
    rngs: Vec<rand_chacha::ChaCha8Rng>,
    next_seq: Vec<u64>,
    issued: Vec<u64>,
    quota: Vec<u64>,
}

impl Streams {
    fn new(cfg: &IoConfig) -> Streams {
        let t = u64::from(cfg.threads);
        Streams {
            cfg: cfg.clone(),
            rngs: (0..t).map(|i| rand_chacha::ChaCha8Rng::seed_from_u64(cfg.seed.wrapping_mul(0x9E37_79B9).wrapping_add(i))).collect(),
            next_seq: vec![0; t as usize],
            issued: vec![0; t as usize],
            quota: (0..t).map(|i| cfg.ios / t + u64::from(i < cfg.ios % t)).collect(),
        }
    }

    /// The next I/O of `thread`: (write, offset), or None when its share is done.
    fn next(&mut self, thread: usize) -> Option<(bool, u64)> {
        if self.issued[thread] == self.quota[thread] {
            return None;
        }
        self.issued[thread] += 1;
        let bs = u64::from(self.cfg.block_bytes);
        let space = self.cfg.space_gib << 30;
        let rng = &mut self.rngs[thread];
        let write = match self.cfg.pattern {
            IoPattern::SeqRead | IoPattern::RandRead => false,
            IoPattern::SeqWrite | IoPattern::RandWrite => true,
            IoPattern::SeqRw | IoPattern::RandRw => rng.gen_range(0..100) >= self.cfg.read_percent,
        };
        let offset = match self.cfg.pattern {
            IoPattern::SeqRead | IoPattern::SeqWrite | IoPattern::SeqRw => {
                // Each thread streams through its own slice (fio offset_increment), wrapping.
                let slice_blocks = space / u64::from(self.cfg.threads) / bs;
                let k = self.next_seq[thread] % slice_blocks;
                self.next_seq[thread] += 1;
                (thread as u64 * slice_blocks + k) * bs
            }
            _ => rng.gen_range(0..space / bs) * bs,
        };
        Some((write, offset))
    }
}

/// This host's rates of the storage baselines' software cryptography (see
/// `secmem_crypto::host_rates`), for `secmem io-calibrate`.
pub fn host_rates(sectors: usize) -> secmem_crypto::host_rates::HostRates { secmem_crypto::host_rates::measure(sectors) }

/// Runs the `[io]` workload on the `[ssd]` drive beside `cfg`'s secure memory; the report.
pub fn run_io(cfg: &Config) -> Result<Value, SimError> {
    let io = &cfg.io;
    let cfgerr = SimError::Config;
    if cfg.run.functional {
        return Err(cfgerr(ConfigError::new("run.functional", "I/O runs count and time; functional mode (real bytes through the DMA path) is not modelled for storage yet")));
    }
    cfg.ssd.validate("ssd").map_err(cfgerr)?;
    let mut engine = Engine::new(cfg).map_err(cfgerr)?;
    io.validate(cfg.ssd.capacity_gib).map_err(cfgerr)?;
    let freq = cfg.core.freq_mhz;
    let mut ssd = SsdMedia::new(&cfg.ssd, freq);
    if io.precondition {
        ssd.precondition(io.space_gib << 30);
    }
    let port = engine.mc.attach_port("ssd", Box::new(ssd));
    let wall = std::time::Instant::now();
    let cyc = |us: f64| (us * freq as f64).round() as u64;
    let (submit, complete, pcie) = (cyc(io.submit_us), cyc(io.complete_us), cyc(io.pcie_latency_ns / 1000.0));
    // dm-crypt's software cipher: each sector of an I/O, on the core that submits or completes it.
    let crypt = |bytes: u32| match io.stack {
        IoStack::Insecure => 0,
        IoStack::Enc => cyc(io.aes_xts_ns_per_sector * f64::from(bytes / 512) / 1000.0),
    };
    let mut crypto_busy = 0u64;
    let base_line = (io.buffer_base_mib << 20) >> 6;
    // A trace replaces the pattern: its I/Os arrive at their times (or at once) and wait for
    // a free slot of any thread.
    let trace = if io.trace.is_empty() {
        None
    } else {
        let t = crate::io_trace::read(std::path::Path::new(&io.trace), io.space_gib << 30, cfg.ssd.capacity_gib << 30)
            .map_err(|e| cfgerr(ConfigError::new("io.trace", e)))?;
        Some(t)
    };
    let max_bytes = trace.as_ref().map_or(io.block_bytes, |t| t.requests.iter().map(|r| r.bytes).max().unwrap_or(512));
    io.check_host_memory(max_bytes, cfg.data_bytes()).map_err(cfgerr)?;
    let slot_lines = u64::from(max_bytes).div_ceil(64);
    let threads = io.threads as usize;
    // Thread t's submission queue is page 2t past the base, its completion queue page 2t+1,
    // and the buffer of its slot s follows the queues.
    let sq_line = |t: u32, entry: u64| base_line + u64::from(t) * 128 + entry % 64;
    let cq_line = |t: u32, entry: u64| base_line + u64::from(t) * 128 + 64 + (entry / 4) % 64;
    let buffer_line = |t: u32, s: u32| base_line + threads as u64 * 128 + (u64::from(t) * u64::from(io.queue_depth) + u64::from(s)) * slot_lines;
    let mut streams = Streams::new(io);
    let mut core_free = vec![0u64; threads];
    let mut entries = vec![0u64; threads];
    let mut events: BinaryHeap<Reverse<(u64, u64, Step, usize)>> = BinaryHeap::new();
    let mut ios: Vec<Io> = Vec::new();
    let mut seq = 0u64;
    let mut push = |events: &mut BinaryHeap<_>, t: u64, step: Step, id: usize| {
        seq += 1;
        events.push(Reverse((t, seq, step, id)));
    };
    for t in 0..io.threads {
        for s in 0..io.queue_depth {
            ios.push(Io { thread: t, slot: s, write: false, offset: 0, bytes: io.block_bytes, request: 0, started: 0, entry: 0 });
            if trace.is_none() {
                push(&mut events, 0, Step::Submit, ios.len() - 1);
            }
        }
    }
    // Trace replay: every request arrives (event id = its index), then takes a free slot or
    // waits in arrival order.
    let requests: &[crate::io_trace::IoRequest] = trace.as_ref().map_or(&[], |t| &t.requests);
    let arrival = |r: &crate::io_trace::IoRequest| r.arrival_ns.map(|ns| cyc(ns as f64 / 1000.0));
    for (i, r) in requests.iter().enumerate() {
        push(&mut events, arrival(r).unwrap_or(0), Step::Arrive, i);
    }
    let mut free_slots: Vec<usize> = (0..ios.len()).rev().collect();
    let mut waiting: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
    let mut latency = Histogram::default();
    let (mut reads, mut writes, mut dma_lines, mut last_done, mut bytes_moved) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut cpu_busy = 0u64;
    let dma = io.dma_through_memory;
    // A memory access of the I/O path; with dma_through_memory = false it is free.
    macro_rules! mem {
        ($line:expr, $write:expr, $at:expr) => {{
            if dma {
                let r = if $write {
                    engine.design.serve_write(&mut engine.mc, $line, None, Cycle($at)).map(|c| c.0)
                } else {
                    engine.design.serve_read(&mut engine.mc, $line, Cycle($at)).map(|(c, _)| c.0)
                };
                r.map_err(|e| SimError::Config(ConfigError::new("", format!("memory access of the I/O path failed: {e}"))))?
            } else {
                $at
            }
        }};
    }
    // The drive's DMA of an I/O's buffer, every line issued at once; done when the last is.
    macro_rules! dma {
        ($o:expr, $write:expr, $at:expr) => {{
            let mut done = $at;
            let lines = u64::from($o.bytes).div_ceil(64);
            for k in 0..lines {
                done = done.max(mem!(buffer_line($o.thread, $o.slot) + k, $write, $at));
            }
            dma_lines += lines;
            done
        }};
    }
    while let Some(Reverse((now, _, step, id))) = events.pop() {
        let (step, id) = if step == Step::Arrive {
            // A trace's request takes a free slot, or waits in arrival order for one.
            match free_slots.pop() {
                Some(slot) => {
                    ios[slot].request = id;
                    (Step::Submit, slot)
                }
                None => {
                    waiting.push_back(id);
                    continue;
                }
            }
        } else {
            (step, id)
        };
        let mut o = ios[id];
        let t = o.thread as usize;
        match step {
            Step::Arrive => unreachable!("turned into a submission above"),
            Step::Submit => {
                let next = if trace.is_some() {
                    let r = &requests[o.request];
                    Some((r.write, r.offset, r.bytes))
                } else {
                    streams.next(t).map(|(w, off)| (w, off, io.block_bytes))
                };
                let Some((write, offset, bytes)) = next else { continue };
                o.bytes = bytes;
                // A write is encrypted before the driver sees it.
                let cipher = if write { crypt(bytes) } else { 0 };
                crypto_busy += cipher;
                let start = now.max(core_free[t]) + cipher;
                core_free[t] = start + submit;
                cpu_busy += submit + cipher;
                // A trace's I/O counts its wait for a slot from its arrival time.
                let started = trace.as_ref().and_then(|_| arrival(&requests[o.request])).map_or(now, |a| a.min(now));
                o = Io { write, offset, started, entry: entries[t], ..o };
                entries[t] += 1;
                // The doorbell follows the store; the store's persistence is not awaited.
                let _ = mem!(sq_line(o.thread, o.entry), true, start + submit);
                push(&mut events, start + submit + pcie, Step::Fetch, id);
            }
            Step::Fetch => {
                let done = mem!(sq_line(o.thread, o.entry), false, now);
                push(&mut events, done, if o.write { Step::DmaIn } else { Step::Flash }, id);
            }
            Step::DmaIn => {
                let done = dma!(o, false, now);
                push(&mut events, done, Step::Flash, id);
            }
            Step::Flash => {
                let kind = if o.write { AccessKind::Write } else { AccessKind::Read };
                let req = MemRequest { addr: o.offset, size_bytes: o.bytes, kind, class: TrafficClass::Data, issue: Cycle(now) };
                let done = engine.mc.port_access(port, req).0;
                push(&mut events, done, if o.write { Step::Complete } else { Step::DmaOut }, id);
            }
            Step::DmaOut => {
                let done = dma!(o, true, now);
                push(&mut events, done, Step::Complete, id);
            }
            Step::Complete => {
                let done = mem!(cq_line(o.thread, o.entry), true, now);
                push(&mut events, done + pcie, Step::Interrupt, id);
            }
            Step::Interrupt => {
                // A read is decrypted after the completion, before the application has it.
                let cipher = if o.write { 0 } else { crypt(o.bytes) };
                crypto_busy += cipher;
                let start = now.max(core_free[t]);
                core_free[t] = start + complete + cipher;
                cpu_busy += complete + cipher;
                // The handler reads the completion entry.
                let _ = mem!(cq_line(o.thread, o.entry), false, start);
                let done = start + complete + cipher;
                latency.record(done - o.started);
                if o.write { writes += 1 } else { reads += 1 }
                bytes_moved += u64::from(o.bytes);
                last_done = last_done.max(done);
                if trace.is_none() {
                    push(&mut events, done, Step::Submit, id);
                } else if let Some(next) = waiting.pop_front() {
                    o.request = next;
                    push(&mut events, done, Step::Submit, id);
                } else {
                    free_slots.push(id);
                }
            }
        }
        ios[id] = o;
    }
    let wall_s = wall.elapsed().as_secs_f64();
    let runtime_us = last_done as f64 / freq as f64;
    let n = reads + writes;
    let lat = latency.summary();
    let us = |c: u64| c as f64 / freq as f64;
    let ssd_stats = engine.mc.port_stats().into_iter().find(|(name, _)| name == "ssd").map(|(_, s)| s).expect("attached above");
    let mut ssd_json = serde_json::Map::new();
    for (name, v) in &ssd_stats.device {
        ssd_json.insert((*name).to_string(), json!(v));
    }
    let counter = |name: &str| ssd_stats.device_counter(name).unwrap_or(0);
    ssd_json.insert("write_amplification".into(), json!(secmem_media::ssd::write_amplification(&ssd_stats)));
    // Busy time over the run, per channel and per plane (the flash back end's parallelism in use).
    let units = |busy: &str, n: u64| if last_done > 0 { counter(busy) as f64 / (n as f64 * last_done as f64) } else { 0.0 };
    ssd_json.insert("channel_utilisation".into(), json!(units("channel_busy_cycles", u64::from(cfg.ssd.channels))));
    ssd_json.insert("plane_utilisation".into(), json!(units("plane_busy_cycles", cfg.ssd.planes())));
    let map_lookups = counter("map_cache_hits") + counter("map_cache_misses");
    ssd_json.insert("map_cache_hit_rate".into(), json!(if map_lookups > 0 { counter("map_cache_hits") as f64 / map_lookups as f64 } else { 0.0 }));
    let (_, media) = engine.mc.snapshot();
    Ok(json!({
        "io": {
            "pattern": trace.as_ref().map_or(io.pattern.as_str(), |t| t.format),
            "trace_flushes_and_trims": trace.as_ref().map_or(0, |t| t.flushes_and_trims), "threads": io.threads, "queue_depth": io.queue_depth, "block_bytes": io.block_bytes,
            "ios": n, "reads": reads, "writes": writes,
            "runtime_us": runtime_us,
            "iops": if runtime_us > 0.0 { n as f64 / runtime_us * 1e6 } else { 0.0 },
            "throughput_mb_per_s": if runtime_us > 0.0 { bytes_moved as f64 / runtime_us } else { 0.0 },
            "latency_us": {"mean": lat.mean / freq as f64, "p50": us(lat.p50), "p99": us(lat.p99), "p999": us(lat.p999), "max": us(lat.max)},
            "cpu_busy_us": us(cpu_busy),
            "stack": io.stack.as_str(),
            "crypto_cpu_us": us(crypto_busy),
        },
        "ssd": Value::Object(ssd_json),
        "memory": {
            "dma_lines": dma_lines,
            "reads": media.reads(), "writes": media.writes(),
        },
        "meta": {"wall_time_s": wall_s, "dma_through_memory": dma},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(extra: &[&str]) -> Config {
        let mut o: Vec<String> = ["run.progress=false", "io.ios=2000", "io.space_gib=1", "ssd.capacity_gib=16"].iter().map(|s| s.to_string()).collect();
        o.extend(extra.iter().map(|s| s.to_string()));
        Config::load(Some("horus"), None, &o).unwrap()
    }

    #[test]
    fn a_random_read_at_queue_depth_one_takes_the_drive_plus_the_host_path() {
        let r = run_io(&cfg(&["io.threads=1", "io.dma_through_memory=false"])).unwrap();
        let p50 = r["io"]["latency_us"]["p50"].as_f64().unwrap();
        // submit 1.5 + doorbell 0.5 + drive 10.5 + MSI 0.5 + completion 2.5 = 15.5 us (the
        // median is its histogram bucket's upper bound, within 3%).
        assert!((15.5..15.5 * 1.03).contains(&p50), "{p50}");
        // The mean adds the first touch of each of the 256 translation pages of 1 GiB: a
        // translation read (tR + transfer, 8.1 us) each.
        let mean = r["io"]["latency_us"]["mean"].as_f64().unwrap();
        let cold = 256.0 * 8.12 / 2000.0;
        assert!((mean - (15.5 + cold)).abs() < 0.2, "{mean}");
        assert_eq!(r["io"]["reads"], 2000);
        assert_eq!(r["memory"]["dma_lines"], 2000 * 64);
        assert_eq!(r["memory"]["reads"], 0, "no memory traffic without the memory side");
    }

    #[test]
    fn dma_through_the_memory_controller_is_memory_traffic_and_time() {
        let off = run_io(&cfg(&["io.dma_through_memory=false"])).unwrap();
        let on = run_io(&cfg(&[])).unwrap();
        // Each 4 KB read: 64 line writes of data, a command fetch, a completion write and read.
        assert!(on["memory"]["writes"].as_u64().unwrap() >= 2000 * 65, "{}", on["memory"]);
        assert!(on["io"]["latency_us"]["mean"].as_f64() > off["io"]["latency_us"]["mean"].as_f64());
    }

    #[test]
    fn dm_crypt_costs_each_sector_its_cipher_time_on_the_core() {
        let base = ["io.threads=1", "io.pattern=rand-rw", "io.dma_through_memory=false", "io.aes_xts_ns_per_sector=250"];
        let plain = run_io(&cfg(&base)).unwrap();
        let enc = run_io(&cfg(&[&base[..], &["io.stack=enc"]].concat())).unwrap();
        assert_eq!(plain["io"]["reads"], enc["io"]["reads"], "the same I/Os");
        // 2000 I/Os of 8 sectors at 250 ns: 4 ms of cipher, on the critical path at QD 1.
        assert!((enc["io"]["crypto_cpu_us"].as_f64().unwrap() - 4000.0).abs() < 1e-6);
        assert_eq!(plain["io"]["crypto_cpu_us"], 0.0);
        // Reads alone at queue depth 1 wait for nothing else: the run is longer by exactly that.
        let reads = |stack: &str| {
            let r = run_io(&cfg(&["io.threads=1", "io.dma_through_memory=false", "io.aes_xts_ns_per_sector=250", stack])).unwrap();
            r["io"]["runtime_us"].as_f64().unwrap()
        };
        let extra = reads("io.stack=enc") - reads("io.stack=insecure");
        assert!((extra - 4000.0).abs() < 1.0, "{extra}");
    }

    #[test]
    fn utilisation_is_the_flash_busy_time_over_the_run() {
        // One thread at queue depth 1: one plane read (3 us) and one transfer (5.12 us) per
        // 15.5 us I/O, spread over 8 channels and 128 planes.
        let r = run_io(&cfg(&["io.threads=1", "io.dma_through_memory=false", "io.ios=5000"])).unwrap();
        let ch = r["ssd"]["channel_utilisation"].as_f64().unwrap();
        let pl = r["ssd"]["plane_utilisation"].as_f64().unwrap();
        assert!((ch - 5.12 / 15.5 / 8.0).abs() < 0.01, "{ch}");
        assert!((pl - 3.0 / 15.5 / 128.0).abs() < 0.001, "{pl}");
    }

    #[test]
    fn deeper_queues_and_more_threads_raise_iops_until_the_drive_saturates() {
        let iops = |extra: &[&str]| run_io(&cfg(extra)).unwrap()["io"]["iops"].as_f64().unwrap();
        let qd1 = iops(&["io.threads=1", "io.queue_depth=1"]);
        let qd8 = iops(&["io.threads=1", "io.queue_depth=8"]);
        let t4qd8 = iops(&["io.threads=4", "io.queue_depth=8"]);
        assert!(qd8 > 3.0 * qd1, "{qd1} {qd8}");
        assert!(t4qd8 > qd8, "{qd8} {t4qd8}");
    }

    #[test]
    fn random_writes_pay_for_the_flash_behind_the_write_buffer_once_it_fills() {
        let r = run_io(&cfg(&["io.pattern=rand-write", "io.threads=4", "io.queue_depth=32", "io.ios=40000", "ssd.write_buffer_mib=1"])).unwrap();
        assert!(r["ssd"]["write_buffer_stall_cycles"].as_u64().unwrap() > 0, "{}", r["ssd"]);
        assert_eq!(r["io"]["writes"], 40000);
    }

    #[test]
    fn the_same_seed_gives_the_same_run_and_another_seed_another() {
        let a = run_io(&cfg(&["io.pattern=rand-rw"])).unwrap();
        let b = run_io(&cfg(&["io.pattern=rand-rw"])).unwrap();
        let c = run_io(&cfg(&["io.pattern=rand-rw", "io.seed=2"])).unwrap();
        assert_eq!(a["io"], b["io"]);
        assert_ne!(a["io"]["reads"], c["io"]["reads"]);
    }

    #[test]
    fn a_real_fio_iolog_replays_at_its_recorded_times() {
        let log = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/io/fio-randrw.v3.iolog");
        let r = run_io(&cfg(&[&format!("io.trace=\"{log}\"")])).unwrap();
        let (reads, writes) = (r["io"]["reads"].as_u64().unwrap(), r["io"]["writes"].as_u64().unwrap());
        assert_eq!(reads + writes, 2000);
        assert!((1300..1500).contains(&reads), "fio's 70% reads: {reads}");
        assert_eq!(r["io"]["pattern"], "fio-iolog-v3");
        // Open loop: the last I/O arrives at 132,836 us, so the run lasts at least that long,
        // and an idle drive serves each one in tens of microseconds.
        let runtime = r["io"]["runtime_us"].as_f64().unwrap();
        assert!((132_836.0..133_000.0).contains(&runtime), "{runtime}");
        assert!(r["io"]["latency_us"]["p99"].as_f64().unwrap() < 50.0, "{}", r["io"]["latency_us"]);
    }

    #[test]
    fn throughput_counts_the_bytes_each_io_moved() {
        // An 8 KB and a 512 B read: 8.5 KB moved, whatever io.block_bytes says.
        let p = std::env::temp_dir().join(format!("secmem-io-sizes-{}.trace", std::process::id()));
        std::fs::write(&p, "0 0 0 16 1\n0 0 64 1 1\n").unwrap();
        let r = run_io(&cfg(&[&format!("io.trace=\"{}\"", p.display())])).unwrap();
        let _ = std::fs::remove_file(&p);
        let (mb_s, us) = (r["io"]["throughput_mb_per_s"].as_f64().unwrap(), r["io"]["runtime_us"].as_f64().unwrap());
        assert!((mb_s * us - 8704.0).abs() < 1e-6, "{mb_s} MB/s over {us} us");
    }

    #[test]
    fn trace_ios_beyond_the_slots_wait_and_count_their_wait() {
        // 64 reads arriving together on one slot: each waits for the ones before it.
        let dir = std::env::temp_dir().join(format!("secmem-io-burst-{}.trace", std::process::id()));
        let text: String = (0..64).map(|i| format!("0 0 {} 8 1\n", i * 8)).collect();
        std::fs::write(&dir, text).unwrap();
        let r = run_io(&cfg(&[&format!("io.trace=\"{}\"", dir.display()), "io.threads=1", "io.queue_depth=1"])).unwrap();
        let _ = std::fs::remove_file(&dir);
        let lat = &r["io"]["latency_us"];
        assert!(lat["max"].as_f64().unwrap() > 60.0 * 15.5, "{lat}");
        assert_eq!(r["io"]["pattern"], "mqsim");
    }

    #[test]
    fn bad_io_settings_name_the_field() {
        let bad = |extra: &[&str]| run_io(&cfg(extra)).unwrap_err().to_string();
        assert!(bad(&["io.queue_depth=0"]).contains("io.queue_depth"));
        assert!(bad(&["io.block_bytes=1000"]).contains("io.block_bytes"));
        assert!(bad(&["io.space_gib=32"]).contains("past the end of the drive"));
        assert!(bad(&["run.functional=true"]).contains("run.functional"));
        assert!(bad(&["io.trace=\"/no/such/iolog\""]).contains("io.trace"));
        assert!(bad(&["io.buffer_base_mib=40000"]).contains("io.buffer_base_mib"));
    }
}
