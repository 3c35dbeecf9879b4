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

pub mod blocking;
pub mod dm_integrity;
pub mod dshield;
mod enc_int;
mod host;
pub mod strace;
pub mod trace;

use crate::config::Config;
use crate::engine::Engine;
use crate::run::SimError;
use rand::{Rng, SeedableRng};
use secmem_core::error::{ensure, number, ConfigError};
use secmem_core::stats::Histogram;
use secmem_core::{config_enum, config_section};
use host::{Ev, Host, HostTiming, Owner};
use secmem_media::ssd::SsdMedia;
use serde_json::{json, Value};

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
        Enc => "enc": "dm-crypt (aes-xts-plain64): each 512 B sector encrypted before a write is submitted and decrypted after a read completes, in software on the thread's core (io.aes_xts_ns_per_sector)",
        EncInt => "enc-int": "dm-crypt over dm-integrity in journal mode: each sector also gets an HMAC-SHA256 tag on the core (io.hmac_sha256_ns_per_sector); writes go through the journal and are copied to their place, tags live in interleaved metadata read and written through a buffer cache, from dm-integrity's on-disk format",
        Dshield => "dshield": "D-Shield (HPCA'23): the processor's DMA Interception Engine encrypts and verifies each sector on the memory controller's engine, with fused counter/MAC blocks and a Merkle tree read and written through a hidden metadata queue pair and two on-chip caches (io.dshield_*); the cores run the insecure path",
        DshieldHyb => "dshield-hyb": "D-Shield-Hyb (section VI): D-Shield whose reads leave the drive's data in memory in the storage protection domain (a PD bit per line in the memory's counter blocks), neither decrypted nor re-encrypted, their completion not held; a sector written back unchanged from the lines it was read into needs no cryptography",
        DshieldPro => "dshield-pro": "D-Shield-Pro (section VII): D-Shield-Hyb with a direct-mapped cache of CMAC blocks in host memory behind the on-chip one (io.dshield_pro_cache_mib), filled with the blocks whose Useful count is non-zero as they leave the chip"
    }
}

/// dm-integrity's HMAC-SHA256 per 512 B sector on this project's machine (`secmem io-calibrate`).
const HMAC_NS: f64 = 560.0;

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
        stack: IoStack = IoStack::Insecure => "Storage stack: insecure, enc (dm-crypt), enc-int (dm-crypt and dm-integrity) or dshield (D-Shield's processor-side protection)";
        aes_xts_ns_per_sector: f64 = 120.0 => "Core time of dm-crypt's AES-XTS per 512 B sector, ns (measured on this project's machine, RustCrypto with AES-NI: secmem io-calibrate prints your machine's)";
        hmac_sha256_ns_per_sector: f64 = HMAC_NS => "Core time of dm-integrity's HMAC-SHA256 tag per 512 B sector, ns (measured as aes_xts_ns_per_sector)";
        integrity_tag_bytes: u32 = 32 => "dm-integrity tag per 512 B sector, bytes (HMAC-SHA256: 32); sets the journal entry and the tag space";
        integrity_journal_watermark: u32 = 50 => "dm-integrity's journal_watermark, %: at or below this share of free journal entries each write queues a commit and a commit the writer";
        integrity_commit_ms: f64 = 10000.0 => "dm-integrity's commit_time, ms: uncommitted journal sections are committed at the latest this long after a write";
        integrity_buffer_cache_mib: u64 = 0 => "dm-bufio's cache of dm-integrity metadata buffers (64 KiB each), MiB (0: dm-bufio's default, 2% of the host's memory, memory.capacity_gib)";
        max_transfer_kib: u32 = 128 => "Largest command the block layer sends the drive (max_sectors_kb), KiB; larger transfers are split";
        dshield_cache_kib: u64 = 256 => "D-Shield: each of the DIE's two on-chip metadata caches (CMAC blocks, tree nodes), KiB (Table I: 256 KB)";
        dshield_cache_ways: u32 = 8 => "D-Shield: ways of each metadata cache (Table I: 8)";
        dshield_pro_cache_mib: u64 = 128 => "D-Shield-Pro: the in-memory CMAC cache, MiB (section VIII: 128 MB), a power of two; in host memory after the I/O buffers";
        dshield_minor_counter_bits: u32 = 38 => "D-Shield: bits of a CMAC block's minor counters (section V-B2: 38); a wrap moves the major and re-encrypts the 32 blocks";
        dshield_op_64b_cycles: u64 = 40 => "D-Shield: the memory controller's engine per 64 B encryption or hash, CPU cycles (Table I: 40)";
        dshield_hash_512b_cycles: u64 = 320 => "D-Shield: the engine per 512 B hash (a sector's MAC, a tree node), CPU cycles (Table I: 320)";
        touch_data: bool = false => "The application uses its data: after each read it reads every line of the block on its core, and before each write it writes every line, through the memory controller (a database using its pages; fio touches neither). Under D-Shield-Hyb a read line still in the storage domain is checked and decrypted with the storage metadata then, and a written one moves to the memory domain";
        namespaces: String = String::new() => "D-Shield's Region Table: the drive's data namespaces as comma-separated NSID@FIRST_GIB+SIZE_GIB entries (e.g. \"1@0+200,2@256+200\"), each with its own CMAC blocks and tree in the metadata namespace at the drive's end, in this order; the pattern's threads take the namespaces in turn, a trace's files take them in order; each gets io.space_gib of I/O space (empty: one namespace, the largest the drive holds beside its metadata, a trace's files taking io.space_gib each of it)";
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
        ensure(self.max_transfer_kib >= 4 && self.max_transfer_kib.is_power_of_two() && self.max_transfer_kib <= 1 << 14, "io.max_transfer_kib", || {
            format!("must be a power of two in 4..=16384, got {}", self.max_transfer_kib)
        })?;
        ensure((1..=100).contains(&self.integrity_journal_watermark), "io.integrity_journal_watermark", || format!("must be 1..=100, got {}", self.integrity_journal_watermark))?;
        ensure(self.integrity_tag_bytes >= 1, "io.integrity_tag_bytes", || "must be at least 1".into())?;
        ensure(self.dshield_cache_ways >= 1 && self.dshield_cache_ways <= 64, "io.dshield_cache_ways", || format!("must be 1..=64, got {}", self.dshield_cache_ways))?;
        ensure(
            self.dshield_cache_kib >= 1 && self.dshield_cache_kib <= 1 << 20 && (self.dshield_cache_kib * 2).is_multiple_of(u64::from(self.dshield_cache_ways)),
            "io.dshield_cache_kib",
            || format!("must be 1..=1048576 KiB and hold a whole number of {}-way sets of 512 B blocks, got {}", self.dshield_cache_ways, self.dshield_cache_kib),
        )?;
        ensure(self.dshield_pro_cache_mib >= 1 && self.dshield_pro_cache_mib.is_power_of_two() && self.dshield_pro_cache_mib <= 1 << 20, "io.dshield_pro_cache_mib", || {
            format!("must be a power of two from 1 to 1048576 MiB, got {}", self.dshield_pro_cache_mib)
        })?;
        ensure((8..=63).contains(&self.dshield_minor_counter_bits), "io.dshield_minor_counter_bits", || format!("must be 8..=63, got {}", self.dshield_minor_counter_bits))?;
        ensure(self.dshield_op_64b_cycles <= 1_000_000 && self.dshield_hash_512b_cycles <= 1_000_000, "io.dshield_op_64b_cycles", || "engine latencies must be at most 1,000,000 cycles".into())?;
        ensure(self.integrity_commit_ms.is_finite() && self.integrity_commit_ms > 0.0 && self.integrity_commit_ms <= 1e7, "io.integrity_commit_ms", || {
            format!("must be a number in (0, 1e7], got {}", number(self.integrity_commit_ms))
        })?;
        let rates = [
            ("io.submit_us", self.submit_us),
            ("io.complete_us", self.complete_us),
            ("io.pcie_latency_ns", self.pcie_latency_ns),
            ("io.aes_xts_ns_per_sector", self.aes_xts_ns_per_sector),
            ("io.hmac_sha256_ns_per_sector", self.hmac_sha256_ns_per_sector),
        ];
        for (name, v) in rates {
            ensure(v.is_finite() && (0.0..=1e6).contains(&v), name, || format!("must be a number in 0..=1e6, got {}", number(v)))?;
        }
        Ok(())
    }

    /// Core time of the stack's software cryptography per 512 B sector, ns: dm-crypt's
    /// cipher, and under enc-int dm-integrity's tag as well.
    pub fn crypto_ns_per_sector(&self) -> f64 {
        match self.stack {
            IoStack::Insecure => 0.0,
            IoStack::Enc => self.aes_xts_ns_per_sector,
            IoStack::EncInt => self.aes_xts_ns_per_sector + self.hmac_sha256_ns_per_sector,
            // In hardware, on the memory controller's engine: no core time.
            IoStack::Dshield | IoStack::DshieldHyb | IoStack::DshieldPro => 0.0,
        }
    }

    /// Checks that the queues and buffers fit in data memory: a 4 KB submission and
    /// completion queue page per thread, a buffer of `io_bytes` (the largest I/O) per
    /// outstanding I/O, and `stack_bytes` of the storage stack's own memory.
    fn check_host_memory(&self, io_bytes: u32, stack_bytes: u64, memory_bytes: u64) -> Result<(), ConfigError> {
        let t = u64::from(self.threads);
        let need = (self.buffer_base_mib << 20) + t * 8192 + t * u64::from(self.queue_depth) * u64::from(io_bytes).div_ceil(64) * 64 + stack_bytes;
        ensure(need <= memory_bytes, "io.buffer_base_mib", || {
            format!("the queues, buffers ({io_bytes}-byte I/Os) and storage stack memory end at byte {need}, beyond the {memory_bytes} bytes of data memory")
        })
    }
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

/// One application I/O in flight (a slot of a thread's queue).
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
    /// Its commands and buffer reads not yet done.
    pending: u32,
    /// Its device I/O is done and it waits for tags (enc-int reads).
    verifying: bool,
}

/// D-Shield's Region Table from `io.namespaces` (empty: one namespace over the drive), each
/// namespace holding `io.space_gib` of I/O space.
pub fn dshield_geometry(cfg: &Config) -> Result<dshield::Geometry, ConfigError> {
    let io = &cfg.io;
    let drive_sectors = (cfg.ssd.capacity_gib << 30) / 512;
    let g = if io.namespaces.trim().is_empty() {
        dshield::Geometry::for_drive(drive_sectors)
    } else {
        dshield::Geometry::parse(&io.namespaces, drive_sectors).map_err(|e| ConfigError::new("io.namespaces", e))?
    };
    for r in &g.regions {
        ensure((io.space_gib << 30) / 512 <= r.data_sectors, "io.space_gib", || {
            format!("D-Shield's namespace {} holds {} GiB of the drive's {} GiB (the rest is other namespaces and the metadata namespace): an I/O past its end", r.nsid, (r.data_sectors * 512) >> 30, cfg.ssd.capacity_gib)
        })?;
    }
    Ok(g)
}

/// Runs the `[io]` workload on the `[ssd]` drive beside `cfg`'s secure memory; the report.
pub fn run_io(cfg: &Config) -> Result<Value, SimError> {
    let io = &cfg.io;
    let cfgerr = SimError::Config;
    if cfg.run.functional && io.stack != IoStack::Dshield {
        return Err(cfgerr(ConfigError::new(
            "run.functional",
            format!("functional I/O runs (real bytes, encrypted and verified) need D-Shield's stack (io.stack = \"dshield\"): the software stacks are timed only, and D-Shield-Hyb and -Pro keep read data in memory in the storage domain, bytes the I/O run does not carry (secmem io-attack and io-crash take dshield-pro); got \"{}\"", io.stack.as_str()),
        )));
    }
    cfg.ssd.validate("ssd").map_err(cfgerr)?;
    // Functional mode here is the drive's: its bytes are encrypted and verified by the DIE.
    // Host memory (queues, buffers, the DMA path) is counted and timed only: the memory side's
    // functional mode runs traces whose stores carry data, and DMA transfers carry none here.
    let mut engine = if cfg.run.functional {
        let mut counted = cfg.clone();
        counted.run.functional = false;
        Engine::new(&counted)
    } else {
        Engine::new(cfg)
    }
    .map_err(cfgerr)?;
    io.validate(cfg.ssd.capacity_gib).map_err(cfgerr)?;
    let freq = cfg.core.freq_mhz;
    let cyc = |us: f64| (us * freq as f64).round() as u64;
    let enc_int = io.stack == IoStack::EncInt;
    let drive_sectors = (cfg.ssd.capacity_gib << 30) / 512;
    // enc-int: dm-integrity formats the whole drive; the I/O space is its logical device.
    let layout = if enc_int {
        let l = dm_integrity::Layout::format(drive_sectors, io.integrity_tag_bytes, dm_integrity::DEFAULT_INTERLEAVE_SECTORS, dm_integrity::DEFAULT_BUFFER_SECTORS)
            .map_err(|e| cfgerr(ConfigError::new("io.integrity_tag_bytes", e)))?;
        ensure((io.space_gib << 30) / 512 <= l.provided_data_sectors, "io.space_gib", || {
            format!("dm-integrity's device offers {} GiB of the drive's {} GiB (the rest holds its journal and tags): an I/O past its end", (l.provided_data_sectors * 512) >> 30, cfg.ssd.capacity_gib)
        })
        .map_err(cfgerr)?;
        Some(l)
    } else {
        None
    };
    // dshield: the data namespaces, and the metadata namespace at the drive's end.
    let dshield = matches!(io.stack, IoStack::Dshield | IoStack::DshieldHyb | IoStack::DshieldPro);
    let die_geometry = if dshield { Some(dshield_geometry(cfg).map_err(cfgerr)?) } else { None };
    let logical_bytes = match (&layout, &die_geometry) {
        (Some(l), _) => l.provided_data_sectors * 512,
        (None, Some(g)) => g.regions[0].data_sectors * 512,
        (None, None) => cfg.ssd.capacity_gib << 30,
    };
    // A trace replaces the pattern: its I/Os arrive at their times (or at once) and wait for
    // a free slot of any thread.
    let trace = if io.trace.is_empty() {
        None
    } else {
        // With a Region Table file k is namespace k (checked below); without one, the files
        // take io.space_gib each of the one namespace (or of the drive).
        let table = die_geometry.as_ref().filter(|_| !io.namespaces.trim().is_empty());
        let drive_bytes = if table.is_some() { u64::MAX } else { logical_bytes };
        let mut t = trace::read(std::path::Path::new(&io.trace), io.space_gib << 30, drive_bytes).map_err(|e| cfgerr(ConfigError::new("io.trace", e)))?;
        if let Some(g) = table {
            let regions = g.regions.len();
            for (i, r) in t.requests.iter_mut().enumerate() {
                let file = r.offset / (io.space_gib << 30);
                let Some(ns) = g.regions.get(file as usize) else {
                    return Err(cfgerr(ConfigError::new("io.trace", format!(
                        "I/O {} is on the trace's file {}, whose namespace has no region: io.namespaces has {regions} entr{} (one per file)", i + 1, file + 1, if regions == 1 { "y" } else { "ies" }
                    ))));
                };
                r.offset = ns.first * 512 + r.offset % (io.space_gib << 30);
            }
        }
        Some(t)
    };
    let max_bytes = trace.as_ref().map_or(io.block_bytes, |t| t.requests.iter().map(|r| r.bytes).max().unwrap_or(512));
    let mut ssd = SsdMedia::new(&cfg.ssd, freq);
    if io.precondition {
        // Every data sector of the space, and under enc-int its tags, exist before the run.
        let bytes = layout.as_ref().map_or(io.space_gib << 30, |l| l.extent_sectors((io.space_gib << 30) / 512) * 512);
        match &die_geometry {
            // Each namespace's space.
            Some(g) => g.regions.iter().for_each(|r| ssd.precondition_range(r.first * 512, bytes)),
            None => ssd.precondition(bytes),
        }
        // Under dshield, the space's CMAC blocks and tree nodes too.
        for (first, n) in die_geometry.as_ref().map(|g| g.metadata_extents((io.space_gib << 30) / 512)).unwrap_or_default() {
            ssd.precondition_range(first * 512, n * 512);
        }
    }
    let port = engine.mc.attach_port("ssd", Box::new(ssd));
    let wall = std::time::Instant::now();
    let threads = io.threads as usize;
    let slot_lines = u64::from(max_bytes).div_ceil(64);
    let timing = HostTiming::of(io, freq);
    let base_line = timing.queue_base_line;
    // The queues (a page each), then each slot's buffer, then the stack's own memory.
    let buffer_line = |t: u32, s: u32| base_line + threads as u64 * 128 + (u64::from(t) * u64::from(io.queue_depth) + u64::from(s)) * slot_lines;
    let kernel_line = buffer_line(io.threads, 0);
    let mut stack = match &layout {
        Some(l) => {
            let cache_bytes = if io.integrity_buffer_cache_mib > 0 { io.integrity_buffer_cache_mib << 20 } else { cfg.data_bytes() / 50 };
            let buffers = (cache_bytes / (l.buffer_sectors * 512)).max(1);
            ensure(max_bytes as u64 / 512 <= l.section_entries as u64 * l.journal_sections as u64 / 2, "io.block_bytes", || "an I/O larger than half of dm-integrity's journal".into())
                .map_err(cfgerr)?;
            let stack_bytes = enc_int::EncInt::host_bytes(l, buffers);
            io.check_host_memory(max_bytes, stack_bytes, cfg.data_bytes()).map_err(cfgerr)?;
            Some(enc_int::EncInt::new(l.clone(), io.integrity_journal_watermark, buffers as usize, kernel_line, io.threads))
        }
        None => {
            // D-Shield-Pro's CMAC cache is the stack's own memory.
            let pro_bytes = if io.stack == IoStack::DshieldPro { io.dshield_pro_cache_mib << 20 } else { 0 };
            io.check_host_memory(max_bytes, pro_bytes, cfg.data_bytes()).map_err(|e| cfgerr(if pro_bytes > 0 { ConfigError::new("io.dshield_pro_cache_mib", format!("the CMAC cache does not fit beside the I/O buffers: {}", e.message)) } else { e }))?;
            None
        }
    };
    let mut host = Host::new(&mut engine, port, io.threads, timing);
    let mut die = die_geometry.map(|g| {
        let mut meta = dshield::Metadata::new(g, io.dshield_cache_kib, io.dshield_cache_ways as usize, io.dshield_minor_counter_bits);
        if io.stack == IoStack::DshieldPro {
            meta = meta.with_memory_cache((io.dshield_pro_cache_mib << 20) / 512);
        }
        if cfg.run.functional {
            meta = meta.with_bytes(secmem_crypto::storage::StorageKeys::for_device(cfg.run.seed, 0));
        }
        let mut die = dshield::Die::new(meta, io.dshield_op_64b_cycles, io.dshield_hash_512b_cycles, (io.threads * io.queue_depth) as usize, kernel_line);
        if cfg.run.functional {
            die.oracle = Some(dshield::Oracle::new(io.seed));
        }
        if matches!(io.stack, IoStack::DshieldHyb | IoStack::DshieldPro) {
            let domains = std::rc::Rc::new(std::cell::RefCell::new(dshield::hyb::ProtectionDomains::default()));
            die.hyb = Some(domains.clone());
            host.domains = Some(domains);
        }
        die
    });
    let per_sector = |ns: f64, bytes: u32| cyc(ns * f64::from(bytes / 512) / 1000.0);
    // The software cryptography of a write before it is submitted, and of a read after it
    // completes.
    let crypto = |bytes: u32| per_sector(io.crypto_ns_per_sector(), bytes);
    let commit_cycles = cyc(io.integrity_commit_ms * 1000.0);
    let mut crypto_busy = 0u64;
    let mut streams = Streams::new(io);
    let mut ios: Vec<Io> = Vec::new();
    for t in 0..io.threads {
        for s in 0..io.queue_depth {
            ios.push(Io { thread: t, slot: s, write: false, offset: 0, bytes: io.block_bytes, request: 0, started: 0, pending: 0, verifying: false });
            if trace.is_none() {
                host.push(0, Ev::Submit(ios.len() - 1));
            }
        }
    }
    // Trace replay: every request arrives, then takes a free slot or waits in arrival order.
    let requests: &[trace::IoRequest] = trace.as_ref().map_or(&[], |t| &t.requests);
    let arrival = |r: &trace::IoRequest| r.arrival_ns.map(|ns| cyc(ns as f64 / 1000.0));
    for (i, r) in requests.iter().enumerate() {
        host.push(arrival(r).unwrap_or(0), Ev::Arrive(i));
    }
    let mut free_slots: Vec<usize> = (0..ios.len()).rev().collect();
    let mut waiting: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
    let mut latency = Histogram::default();
    let (mut reads, mut writes, mut last_done, mut bytes_moved) = (0u64, 0u64, 0u64, 0u64);
    // A trace's flush (an fsync) is a barrier: no later request starts until every earlier
    // one is done and the stack has made them durable. The flush's slot, start and whether
    // its slot has taken it (its submission event ran); flushes done and the time they waited;
    // the trace's data I/Os started and not yet done.
    let mut barrier: Option<(usize, u64, bool)> = None;
    let (mut flushes, mut flush_wait_cycles, mut in_flight) = (0u64, 0u64, 0u64);
    // A trace's request `r` takes slot `slot` at `at` (a flush raises the barrier).
    macro_rules! assign {
        ($slot:expr, $r:expr, $at:expr) => {{
            let (slot, r, at) = ($slot, $r, $at);
            ios[slot].request = r;
            if requests[r].flush {
                barrier = Some((slot, at, false));
            } else {
                in_flight += 1;
            }
            host.push(at, Ev::Submit(slot));
        }};
    }
    // The barrier falls once nothing before it is in flight and the stack's flush is done
    // (dm-integrity commits its journal; the drive has power-loss protection, so its own
    // flush is immediate); the driver's submission and completion of the flush command run on
    // its thread's core. Then the waiting requests take the free slots, up to the next flush.
    macro_rules! check_barrier {
        ($at:expr) => {{
            let at = $at;
            if let Some((slot, started, true)) = barrier {
                let stack_waits = match stack.as_mut() {
                    Some(s) if in_flight == 0 => s.flush(&mut host, at)?,
                    _ => false,
                };
                if in_flight == 0 && !stack_waits {
                    barrier = None;
                    flushes += 1;
                    let end = host.run_on(ios[slot].thread, at, cyc(io.submit_us + io.complete_us));
                    flush_wait_cycles += end - started;
                    last_done = last_done.max(end);
                    free_slots.push(slot);
                    while barrier.is_none() && !waiting.is_empty() {
                        let Some(free) = free_slots.pop() else { break };
                        let next = waiting.pop_front().expect("not empty");
                        assign!(free, next, end);
                    }
                }
            }
        }};
    }
    // With io.touch_data, the application reads the block a read brought, a sector at a time:
    // a storage-domain sector (D-Shield-Hyb) is checked by the DIE and read past the memory's
    // encryption; any other line through the secure memory controller.
    let mut cpu_secure_lines = 0u64;
    macro_rules! touched {
        ($id:expr, $at:expr) => {{
            let (o, at) = (ios[$id], $at);
            let first_line = buffer_line(o.thread, o.slot);
            let mut done = at;
            for k in 0..u64::from(o.bytes).div_ceil(512) {
                let line = first_line + 8 * k;
                let storage = die.as_ref().and_then(|d| d.hyb.as_ref()).and_then(|h| {
                    let h = h.borrow();
                    if h.in_storage(line) { h.sector_of_line(line) } else { None }
                });
                match storage {
                    Some(sector) => {
                        done = done.max(die.as_mut().expect("hyb").processor_check(&mut host, sector, o.thread, at)?);
                        for j in 0..8 {
                            done = done.max(host.storage_domain_line(line + j, false, false, at)?);
                        }
                    }
                    None => {
                        for j in 0..8 {
                            cpu_secure_lines += 1;
                            done = done.max(host.mem(line + j, false, at)?);
                        }
                    }
                }
            }
            done
        }};
    }
    // An application I/O is done at `done` (a read's, once the application has read its block
    // with io.touch_data): count it and start its slot's next.
    macro_rules! finish {
        ($id:expr, $done:expr) => {{
            let (id, done) = ($id, $done);
            let done = if io.touch_data && !ios[id].write { touched!(id, done) } else { done };
            let o = &mut ios[id];
            latency.record(done - o.started);
            if o.write { writes += 1 } else { reads += 1 }
            bytes_moved += u64::from(o.bytes);
            last_done = last_done.max(done);
            if trace.is_none() {
                host.push(done, Ev::Submit(id));
            } else {
                in_flight -= 1;
                match waiting.pop_front() {
                    Some(next) if barrier.is_none() => assign!(id, next, done),
                    Some(next) => {
                        waiting.push_front(next);
                        free_slots.push(id);
                    }
                    None => free_slots.push(id),
                }
                check_barrier!(done);
            }
        }};
    }
    // A read's data and tags are in: verify and decrypt on its core, then it is done.
    macro_rules! verified {
        ($id:expr, $at:expr) => {{
            let o = ios[$id];
            let c = crypto(o.bytes);
            crypto_busy += c;
            let end = host.run_on(o.thread, $at, c);
            finish!($id, end);
        }};
    }
    // A write's sectors went into dm-integrity's journal: it completes on its core.
    macro_rules! journalled {
        ($id:expr, $at:expr) => {{
            let o = ios[$id];
            let end = host.run_on(o.thread, $at, cyc(io.complete_us));
            finish!($id, end);
            stack.as_mut().expect("enc-int").written(&mut host, $at, commit_cycles)?;
        }};
    }
    let mut events: u64 = 0;
    while let Some((now, ev)) = host.pop() {
        events += 1;
        if events.is_multiple_of(crate::interrupt::CHECK_EVERY) {
            crate::interrupt::check()?;
        }
        match ev {
            Ev::Autocommit => {
                let s = stack.as_mut().expect("only enc-int arms the timer");
                s.autocommit_pending = false;
                s.start_commit(&mut host, now)?;
            }
            Ev::Arrive(r) => match free_slots.pop() {
                // A trace's request takes a free slot, or waits in arrival order for one (or
                // for a flush before it).
                Some(slot) if barrier.is_none() => assign!(slot, r, now),
                Some(slot) => {
                    free_slots.push(slot);
                    waiting.push_back(r);
                }
                None => waiting.push_back(r),
            },
            Ev::Submit(id) => {
                let t = ios[id].thread as usize;
                let next = if trace.is_some() {
                    let r = &requests[ios[id].request];
                    if r.flush {
                        barrier = barrier.map(|(slot, started, _)| (slot, started, true));
                        check_barrier!(now);
                        continue;
                    }
                    Some((r.write, r.offset, r.bytes))
                } else {
                    // Under D-Shield the threads take the namespaces in turn.
                    streams.next(t).map(|(w, off)| (w, die.as_ref().map_or(off, |d| d.meta.geometry.regions[t % d.meta.geometry.regions.len()].first * 512 + off), io.block_bytes))
                };
                let Some((write, offset, bytes)) = next else { continue };
                // A trace's I/O counts its wait for a slot from its arrival time.
                let started = trace.as_ref().and_then(|_| arrival(&requests[ios[id].request])).map_or(now, |a| a.min(now));
                let o = Io { write, offset, bytes, started, pending: 0, verifying: false, ..ios[id] };
                ios[id] = o;
                // With io.touch_data the application writes the block first (its stores reach
                // memory as the caches write them back; the I/O does not wait for them), and
                // under D-Shield-Hyb each line moves to the memory's domain.
                if io.touch_data && write {
                    let first_line = buffer_line(o.thread, o.slot);
                    for k in 0..u64::from(bytes).div_ceil(64) {
                        if let Some(h) = die.as_ref().and_then(|d| d.hyb.as_ref()) {
                            h.borrow_mut().processor_write(first_line + k);
                        }
                        cpu_secure_lines += 1;
                        host.mem(first_line + k, true, now)?;
                    }
                }
                // A write is encrypted (and tagged) before the driver sees it.
                let c = if write { crypto(bytes) } else { 0 };
                crypto_busy += c;
                let at = host.run_on(o.thread, now, c);
                let (logical, n) = (offset / 512, u64::from(bytes) / 512);
                match (&mut stack, write) {
                    (Some(s), true) => {
                        if s.journal.reserve(logical, n) {
                            journalled!(id, at);
                        } else {
                            s.stats.writes_waited_for_journal += 1;
                            s.journal_waiters.push_back((id, logical, n));
                        }
                    }
                    (Some(s), false) if s.journal.holds_all(logical, n) => {
                        // Every sector is still in the journal: copied from memory and
                        // decrypted (dm-integrity does not verify its own journal's copy).
                        s.stats.reads_from_journal += 1;
                        let c = per_sector(io.aes_xts_ns_per_sector, bytes);
                        crypto_busy += c;
                        let end = host.run_on(o.thread, at, cyc(io.submit_us + io.complete_us) + c);
                        finish!(id, end);
                    }
                    (Some(s), false) => {
                        // One command per run of sectors in one area (dm-integrity splits there).
                        let l = &s.layout;
                        let mut first = logical;
                        let mut pending = 0;
                        while first < logical + n {
                            let area_end = (first / l.interleave_sectors + 1) * l.interleave_sectors;
                            let k = area_end.min(logical + n) - first;
                            let line = buffer_line(o.thread, o.slot) + (first - logical) * 8;
                            pending += host.issue_split(Owner::App(id), false, l.data_sector(first) * 512, k * 512, line, o.thread, at)?;
                            first += k;
                        }
                        ios[id].pending = pending;
                    }
                    (None, _) => {
                        // D-Shield sees the I/O's addresses as its commands pass and starts
                        // their metadata; its commands wait at the DIE for it (but Hyb's reads).
                        let held = match die.as_mut() {
                            Some(d) => d.begin(&mut host, id, write, offset / 512, u64::from(bytes) / 512, buffer_line(o.thread, o.slot), o.thread, at)?,
                            None => false,
                        };
                        ios[id].pending = host.issue_split_held(Owner::App(id), write, offset, u64::from(bytes), buffer_line(o.thread, o.slot), o.thread, at, held)?;
                    }
                }
            }
            Ev::Cmd(step, cid) => {
                let stepped = host.step(step, cid, now)?;
                if let Some(d) = die.as_mut() {
                    for (c, held_id, at) in host.take_held() {
                        let Owner::App(slot) = c.owner else { unreachable!("only application commands are held") };
                        d.held(&mut host, slot, held_id, u64::from(c.bytes) / 512, at);
                    }
                }
                let Some((cmd, end)) = stepped else { continue };
                match cmd.owner {
                    Owner::App(id) => {
                        ios[id].pending -= 1;
                        if ios[id].pending > 0 {
                            continue;
                        }
                        let o = ios[id];
                        match &mut stack {
                            Some(s) if !o.verifying => {
                                // The data is in: its tags next (dm-integrity reads them after the data).
                                ios[id].verifying = true;
                                let waits = s.read_tags(&mut host, id, o.offset / 512, u64::from(o.bytes) / 512, o.thread, end)?;
                                ios[id].pending = waits;
                                if waits == 0 {
                                    verified!(id, end);
                                }
                            }
                            _ if o.write => finish!(id, end),
                            _ => verified!(id, end),
                        }
                    }
                    Owner::Commit => {
                        stack.as_mut().expect("enc-int").commit_write_done(&mut host, end)?;
                        check_barrier!(end);
                    }
                    Owner::WriterData | Owner::MetaWrite => stack.as_mut().expect("enc-int").writer_command_done(&mut host, end)?,
                    Owner::EvictWrite | Owner::DieWrite | Owner::DieFetch => {}
                    Owner::DieRead(slot) => die.as_mut().expect("dshield").metadata_arrived(&mut host, slot, end),
                    Owner::MetaRead(b) => {
                        for w in stack.as_mut().expect("enc-int").buffer_read(b) {
                            match w {
                                enc_int::Waiter::Writer => stack.as_mut().expect("enc-int").writer_buffer_ready(&mut host, end)?,
                                enc_int::Waiter::App(id) => {
                                    ios[id].pending -= 1;
                                    if ios[id].pending == 0 {
                                        verified!(id, end);
                                    }
                                }
                            }
                        }
                    }
                }
                // Sections the writer freed take the writes waiting for them, in order.
                while let Some(s) = stack.as_mut() {
                    let Some(&(id, logical, n)) = s.journal_waiters.front() else { break };
                    if !s.journal.reserve(logical, n) {
                        break;
                    }
                    s.journal_waiters.pop_front();
                    journalled!(id, end);
                }
            }
        }
    }
    if let Some(s) = &stack {
        if !s.journal_waiters.is_empty() {
            return Err(SimError::Config(ConfigError::new("io.stack", format!("{} writes still wait for dm-integrity's journal at the end", s.journal_waiters.len()))));
        }
    }
    let wall_s = wall.elapsed().as_secs_f64();
    let runtime_us = last_done as f64 / freq as f64;
    let n = reads + writes;
    let lat = latency.summary();
    let us = |c: u64| c as f64 / freq as f64;
    let ssd_stats = host.engine.mc.port_stats().into_iter().find(|(name, _)| name == "ssd").map(|(_, s)| s).expect("attached above");
    let mut ssd_json = serde_json::Map::new();
    for (name, v) in &ssd_stats.device {
        ssd_json.insert((*name).to_string(), json!(v));
    }
    let counter = |name: &str| ssd_stats.device_counter(name).unwrap_or(0);
    ssd_json.insert("write_amplification".into(), json!(secmem_media::ssd::write_amplification(&ssd_stats)));
    // Busy time over the run, per channel, die and plane (the flash back end's parallelism in use).
    let units = |busy: &str, n: u64| if last_done > 0 { counter(busy) as f64 / (n as f64 * last_done as f64) } else { 0.0 };
    ssd_json.insert("channel_utilisation".into(), json!(units("channel_busy_cycles_sum", u64::from(cfg.ssd.channels))));
    ssd_json.insert("die_utilisation".into(), json!(units("die_busy_cycles_sum", u64::from(cfg.ssd.channels * cfg.ssd.dies_per_channel))));
    ssd_json.insert("plane_utilisation".into(), json!(units("plane_busy_cycles_sum", cfg.ssd.planes())));
    let map_lookups = counter("map_cache_hits") + counter("map_cache_misses");
    ssd_json.insert("map_cache_hit_rate".into(), json!(if map_lookups > 0 { counter("map_cache_hits") as f64 / map_lookups as f64 } else { 0.0 }));
    let (_, media) = host.engine.mc.snapshot();
    let mut report = json!({
        "io": {
            "pattern": trace.as_ref().map_or(io.pattern.as_str(), |t| t.format),
            "trace_flushes_and_trims": trace.as_ref().map_or(0, |t| t.flushes_and_trims), "flushes": flushes, "flush_wait_us": us(flush_wait_cycles), "threads": io.threads, "queue_depth": io.queue_depth, "block_bytes": io.block_bytes,
            "ios": n, "reads": reads, "writes": writes,
            "runtime_us": runtime_us,
            "iops": if runtime_us > 0.0 { n as f64 / runtime_us * 1e6 } else { 0.0 },
            "throughput_mb_per_s": if runtime_us > 0.0 { bytes_moved as f64 / runtime_us } else { 0.0 },
            "latency_us": {"mean": lat.mean / freq as f64, "p50": us(lat.p50), "p99": us(lat.p99), "p999": us(lat.p999), "max": us(lat.max)},
            "cpu_busy_us": us(host.cpu_busy),
            "stack": io.stack.as_str(),
            "crypto_cpu_us": us(crypto_busy),
            "commands": host.commands,
        },
        "ssd": Value::Object(ssd_json),
        "memory": {
            "dma_lines": host.dma_lines,
            "reads": media.reads(), "writes": media.writes(),
        },
        "meta": {"wall_time_s": wall_s, "dma_through_memory": io.dma_through_memory},
    });
    // The memory controller's engine, shared by the memory side and the DIE.
    let eng = &host.engine.mc.engine;
    report["crypto_engine"] = json!({
        "issue": eng.issue().as_str(), "ops": eng.stats.ops,
        "busy_us": us(eng.stats.busy_cycles), "queue_wait_us": us(eng.stats.queue_wait_cycles),
        // Over the run, or up to the engine's last work if that queued past the run's end.
        "utilisation": if last_done > 0 { eng.stats.busy_cycles as f64 / last_done.max(eng.stats.busy_until) as f64 } else { 0.0 },
        "backlog_us": us(eng.stats.busy_until.saturating_sub(last_done)),
    });
    if let Some(d) = &die {
        let st = &d.meta.stats;
        let (cmac_share, tree_share) = d.meta.geometry.overhead();
        let rate = |h: u64, m: u64| if h + m > 0 { h as f64 / (h + m) as f64 } else { 0.0 };
        report["dshield"] = json!({
            "cmac_hits": st.cmac_hits, "cmac_misses": st.cmac_misses, "cmac_hit_rate": rate(st.cmac_hits, st.cmac_misses),
            "node_hits": st.node_hits, "node_misses": st.node_misses, "node_hit_rate": rate(st.node_hits, st.node_misses),
            "metadata_reads": st.metadata_reads, "metadata_writes": st.metadata_writes,
            "minor_overflows": st.minor_overflows, "reencrypted_blocks": st.reencrypted_blocks,
            "memory_cache_hits": st.memory_cache_hits, "memory_cache_misses": st.memory_cache_misses, "memory_cache_fills": st.memory_cache_fills,
            "metadata_share_of_drive": {"cmac": cmac_share, "tree": tree_share},
            "data_namespace_gib": (d.meta.geometry.data_sectors() * 512) as f64 / (1u64 << 30) as f64,
            "namespaces": d.meta.geometry.regions.iter().map(|r| json!({"nsid": r.nsid, "first_gib": (r.first * 512) as f64 / (1u64 << 30) as f64, "data_gib": (r.data_sectors * 512) as f64 / (1u64 << 30) as f64, "metadata_first_sector": r.metadata_base})).collect::<Vec<_>>(),
            // Cryptographic work in 64 B operations: the DIE's on the engine (a 512 B hash is
            // eight), and the memory's pad and MAC for each application line it encrypts or
            // decrypts, on the DMA path and for the application's own use (io.touch_data).
            "engine_ops_64b": d.engine_ops_64b, "engine_hashes_512b": d.engine_hashes_512b,
            "memory_dma_lines_encrypted": host.secure_dma_lines, "memory_cpu_lines_encrypted": cpu_secure_lines,
            "crypto_ops_64b": d.engine_ops_64b + 8 * d.engine_hashes_512b + 2 * (host.secure_dma_lines + cpu_secure_lines),
        });
        if let Some(o) = &d.oracle {
            report["dshield"]["functional"] = json!({"blocks_written": o.blocks_written, "blocks_verified": o.blocks_verified});
        }
        if let Some(h) = &d.hyb {
            report["dshield"]["hyb"] = serde_json::to_value(&h.borrow().stats).expect("plain counters");
        }
    }
    if let Some(s) = &stack {
        let st = &s.stats;
        report["integrity"] = json!({
            "journal_commits": st.commits, "journal_sectors_written": st.journal_sectors_written,
            "writer_rounds": st.writer_rounds, "writeback_sectors": st.writeback_sectors,
            "buffer_hits": st.buffer_hits, "buffer_misses": st.buffer_misses, "buffer_bytes_written": st.buffer_bytes_written,
            "reads_from_journal": st.reads_from_journal, "writes_waited_for_journal": st.writes_waited_for_journal,
            "journal_sections": s.layout.journal_sections, "section_entries": s.layout.section_entries, "tag_bytes": s.layout.tag_bytes,
        });
    }
    Ok(report)
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
    fn functional_d_shield_reads_back_what_it_wrote_with_the_counts_and_times_of_counting_mode() {
        let base = ["io.stack=dshield", "io.pattern=rand-rw", "io.dshield_cache_kib=16"];
        let counting = run_io(&cfg(&base)).unwrap();
        let functional = run_io(&cfg(&[&base[..], &["run.functional=true"]].concat())).unwrap();
        let f = &functional["dshield"]["functional"];
        assert!(f["blocks_written"].as_u64().unwrap() > 5000 && f["blocks_verified"].as_u64().unwrap() > 5000, "{f}");
        let mut d = functional["dshield"].clone();
        d.as_object_mut().unwrap().remove("functional");
        assert_eq!(d, counting["dshield"]);
        assert_eq!(functional["io"], counting["io"]);
        for stack in ["io.stack=enc", "io.stack=dshield-hyb", "io.stack=dshield-pro"] {
            let e = run_io(&cfg(&["run.functional=true", stack])).unwrap_err().to_string();
            assert!(e.contains("run.functional") && e.contains("dshield"), "{e}");
        }
    }

    #[test]
    fn a_traces_fsync_waits_for_the_writes_before_it_and_for_dm_integritys_commit() {
        // Four writes then a sync, repeated; the same without the syncs.
        let mut with = String::from("fio version 2 iolog\n/db add\n/db open\n");
        let mut without = with.clone();
        for k in 0..200u64 {
            for j in 0..4u64 {
                let line = format!("/db write {} 4096\n", ((k * 4 + j) * 7919 % 200_000) * 4096);
                with.push_str(&line);
                without.push_str(&line);
            }
            with.push_str("/db sync 0 0\n");
        }
        let dir = std::env::temp_dir();
        let (pw, po) = (dir.join(format!("secmem-sync-{}.iolog", std::process::id())), dir.join(format!("secmem-nosync-{}.iolog", std::process::id())));
        std::fs::write(&pw, with).unwrap();
        std::fs::write(&po, without).unwrap();
        let run = |stack: &str, p: &std::path::Path| run_io(&cfg(&[stack, "io.threads=4", &format!("io.trace=\"{}\"", p.display())])).unwrap();
        for stack in ["io.stack=insecure", "io.stack=enc-int"] {
            let (a, b) = (run(stack, &pw), run(stack, &po));
            assert_eq!(a["io"]["flushes"].as_u64(), Some(200), "{stack}");
            assert_eq!((a["io"]["writes"].as_u64(), b["io"]["flushes"].as_u64()), (Some(800), Some(0)));
            // Four writes at a time at most: the barrier takes away the overlap of the next four.
            assert!(a["io"]["runtime_us"].as_f64() > b["io"]["runtime_us"].as_f64(), "{stack}: {} vs {}", a["io"], b["io"]);
        }
        // dm-integrity: each sync commits the journal, so a write no longer completes in memory alone.
        let (a, b) = (run("io.stack=enc-int", &pw), run("io.stack=enc-int", &po));
        assert!(a["integrity"]["journal_commits"].as_u64().unwrap() >= 200 && b["integrity"]["journal_commits"].as_u64().unwrap() < 10, "{} vs {}", a["integrity"], b["integrity"]);
        let _ = (std::fs::remove_file(&pw), std::fs::remove_file(&po));
    }

    #[test]
    fn d_shield_s_region_table_gives_each_namespace_its_own_tree_and_refuses_what_does_not_fit() {
        let base = ["io.stack=dshield", "io.pattern=rand-rw", "io.threads=2", "io.namespaces=\"1@0+4, 2@8+4\""];
        let r = run_io(&cfg(&base)).unwrap();
        let ns = r["dshield"]["namespaces"].as_array().unwrap();
        assert_eq!((ns.len(), ns[1]["nsid"].as_u64(), ns[1]["first_gib"].as_f64()), (2, Some(2), Some(8.0)));
        // Two trees of depth 3 (4 GiB each): the cold misses walk both.
        let one = run_io(&cfg(&["io.stack=dshield", "io.pattern=rand-rw", "io.threads=2", "io.namespaces=\"1@0+4\""])).unwrap();
        assert!(r["dshield"]["node_misses"].as_u64() > one["dshield"]["node_misses"].as_u64(), "{} vs {}", r["dshield"], one["dshield"]);
        // The functional run reads back what each namespace wrote.
        let f = run_io(&cfg(&[&base[..], &["run.functional=true"]].concat())).unwrap();
        assert_eq!(f["io"], r["io"]);
        for (spec, want) in [("1@0+4,2@2+4", "overlaps namespace 1"), ("1@0+4,1@8+4", "already in the table"), ("1@0+16", "metadata namespace"), ("1@0+4,2@8", "entry 2")] {
            let e = run_io(&cfg(&["io.stack=dshield", &format!("io.namespaces=\"{spec}\"")])).unwrap_err().to_string();
            assert!(e.contains("io.namespaces") && e.contains(want), "{spec}: {e}");
        }
        let e = run_io(&cfg(&["io.stack=dshield", "io.namespaces=\"1@0+4\"", "io.space_gib=5"])).unwrap_err().to_string();
        assert!(e.contains("io.space_gib") && e.contains("namespace 1"), "{e}");
        // A trace's second file on a one-namespace table: no region for it.
        let p = std::env::temp_dir().join(format!("secmem-ns-{}.iolog", std::process::id()));
        std::fs::write(&p, "fio version 2 iolog\n/a add\n/b add\n/a open\n/b open\n/a read 0 4096\n/b read 0 4096\n").unwrap();
        let e = run_io(&cfg(&["io.stack=dshield", "io.namespaces=\"1@0+4\"", &format!("io.trace=\"{}\"", p.display())])).unwrap_err().to_string();
        let _ = std::fs::remove_file(&p);
        assert!(e.contains("io.trace") && e.contains("I/O 2") && e.contains("no region"), "{e}");
    }

    #[test]
    fn the_die_and_the_memory_side_queue_on_one_crypto_engine() {
        let run = |stack: &str, engine: &str| run_io(&cfg(&["io.pattern=rand-read", &format!("io.stack={stack}"), &format!("security.crypto_engine={engine}")])).unwrap();
        let runtime = |r: &Value| r["io"]["runtime_us"].as_f64().unwrap();
        let (ins, ds) = (run("insecure", "serial"), run("dshield", "serial"));
        // Every DMA line's pad and MAC are the memory side's; D-Shield adds the DIE's on the
        // same engine, so the memory side's operations wait longer for it.
        let ops = |r: &Value| r["crypto_engine"]["ops"].as_u64().unwrap();
        let die_ops = ds["dshield"]["engine_ops_64b"].as_u64().unwrap() + ds["dshield"]["engine_hashes_512b"].as_u64().unwrap();
        assert!(ops(&ds) >= ops(&ins) + die_ops, "{} vs {} + {die_ops}", ops(&ds), ops(&ins));
        let wait = |r: &Value| r["crypto_engine"]["queue_wait_us"].as_f64().unwrap();
        assert!(wait(&ins) > 0.0 && wait(&ds) > wait(&ins), "{} vs {}", wait(&ds), wait(&ins));
        // An unlimited engine never queues, and a serial one is slower than a pipelined one.
        let (unl, pip) = (run("dshield", "unlimited"), run("dshield", "pipelined"));
        assert_eq!(wait(&unl), 0.0);
        assert!(runtime(&unl) <= runtime(&pip) && runtime(&pip) < runtime(&ds), "{} {} {}", runtime(&unl), runtime(&pip), runtime(&ds));
        assert_eq!(ds["crypto_engine"]["issue"], "serial");
        for r in [&ins, &ds, &unl, &pip] {
            let u = r["crypto_engine"]["utilisation"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&u), "utilisation {u}");
        }
    }

    #[test]
    fn hyb_reads_land_in_memory_unconverted_and_unheld_with_fewer_crypto_operations() {
        let p50 = |r: &Value| r["io"]["latency_us"]["p50"].as_f64().unwrap();
        let base = ["io.threads=1", "io.pattern=rand-read"];
        let (insecure, ds, hyb) = (run_io(&cfg(&base)).unwrap(), run_io(&cfg(&[&base[..], &["io.stack=dshield"]].concat())).unwrap(), run_io(&cfg(&[&base[..], &["io.stack=dshield-hyb"]].concat())).unwrap());
        // The completion is not held for the engine: Hyb's read is the insecure one, give or
        // take the counter blocks its lines' PD bits live in.
        assert!(p50(&hyb) < p50(&ds) && p50(&hyb) < 1.1 * p50(&insecure), "hyb {} dshield {} insecure {}", p50(&hyb), p50(&ds), p50(&insecure));
        let h = &hyb["dshield"];
        assert_eq!(h["hyb"]["deferred_sector_checks"].as_u64(), Some(2000 * 8));
        assert_eq!(h["hyb"]["storage_domain_lines"].as_u64(), Some(2000 * 64));
        assert_eq!(h["memory_dma_lines_encrypted"].as_u64(), Some(0));
        // The same metadata is fetched; the sectors' and the memory's cryptography is not done.
        assert_eq!(h["metadata_reads"], ds["dshield"]["metadata_reads"]);
        let (c_ds, c_hyb) = (ds["dshield"]["crypto_ops_64b"].as_u64().unwrap(), h["crypto_ops_64b"].as_u64().unwrap());
        assert!(c_hyb * 4 < c_ds, "{c_hyb} vs {c_ds}");
    }

    #[test]
    fn with_the_application_using_its_data_hyb_checks_reads_late_and_writes_move_lines_home() {
        let base = ["io.threads=1", "io.pattern=rand-rw", "io.touch_data=true"];
        let (ds, hyb) = (run_io(&cfg(&[&base[..], &["io.stack=dshield"]].concat())).unwrap(), run_io(&cfg(&[&base[..], &["io.stack=dshield-hyb"]].concat())).unwrap());
        let (reads, writes) = (hyb["io"]["reads"].as_u64().unwrap(), hyb["io"]["writes"].as_u64().unwrap());
        let h = &hyb["dshield"]["hyb"];
        // Every sector read is checked when the application reads it, none at the DMA.
        assert_eq!(h["processor_checked_sectors"].as_u64(), Some(reads * 8));
        assert_eq!(h["deferred_sector_checks"].as_u64(), Some(reads * 8));
        // The application's writes bring back to the memory's domain the lines earlier reads
        // left in the storage's (one slot: its buffer alternates).
        assert!(h["lines_moved_to_memory"].as_u64().unwrap() > 0, "{h}");
        // Under D-Shield every line the application reads or writes goes through the memory's
        // encryption; under Hyb the read lines do not.
        assert_eq!(ds["dshield"]["memory_cpu_lines_encrypted"].as_u64(), Some((reads + writes) * 64));
        assert_eq!(hyb["dshield"]["memory_cpu_lines_encrypted"].as_u64(), Some(writes * 64));
        let (c_ds, c_hyb) = (ds["dshield"]["crypto_ops_64b"].as_u64().unwrap(), hyb["dshield"]["crypto_ops_64b"].as_u64().unwrap());
        // Per 4 KB read D-Shield runs 384 64 B operations (the check, the DMA's encryption, the
        // application's decryption), Hyb 128 (the check); a write costs both 384.
        assert!(c_hyb * 4 < c_ds * 3, "{c_hyb} vs {c_ds}");
    }

    #[test]
    fn hyb_writes_a_sector_back_unchanged_without_cryptography_and_a_moved_one_with_it() {
        // One slot: read a block, write it back where it came from, then write it elsewhere.
        let p = std::env::temp_dir().join(format!("secmem-hyb-{}.iolog", std::process::id()));
        let mut t = String::from("fio version 2 iolog\n/f add\n/f open\n");
        for k in 0..50u64 {
            t.push_str(&format!("/f read {o} 4096\n/f write {o} 4096\n/f write {m} 4096\n", o = k << 20, m = (k << 20) + 65536));
        }
        std::fs::write(&p, t).unwrap();
        let run = |stack: &str| run_io(&cfg(&[stack, "io.threads=1", &format!("io.trace=\"{}\"", p.display())])).unwrap();
        let (ds, hyb) = (run("io.stack=dshield"), run("io.stack=dshield-hyb"));
        let _ = std::fs::remove_file(&p);
        let h = &hyb["dshield"]["hyb"];
        assert_eq!((h["unchanged_sectors_written"].as_u64(), h["moved_sectors_written"].as_u64()), (Some(50 * 8), Some(50 * 8)));
        // An unchanged sector keeps its counters: half the writes leave their minors alone.
        assert!(hyb["dshield"]["engine_ops_64b"].as_u64() < ds["dshield"]["engine_ops_64b"].as_u64());
        assert_eq!(hyb["dshield"]["memory_dma_lines_encrypted"].as_u64(), Some(0), "the buffer never left the storage domain");
    }

    #[test]
    fn d_shield_reads_wait_for_their_metadata_and_the_engine_and_sequential_ones_hit_the_cmac_cache() {
        let p50 = |r: &Value| r["io"]["latency_us"]["p50"].as_f64().unwrap();
        let base = ["io.threads=1", "io.dma_through_memory=false", "security.crypto_engine=serial"];
        let insecure = run_io(&cfg(&base)).unwrap();
        let r = run_io(&cfg(&[&base[..], &["io.stack=dshield"]].concat())).unwrap();
        let d = &r["dshield"];
        // Random 4 KB reads over 1 GiB: 65,536 CMAC blocks against a cache of 512, so nearly
        // every read fetches its CMAC block (and often its level-1 node). Those reads start at
        // the submission and run on other dies beside the data's, so at queue depth 1 what
        // the read waits for beyond the insecure path is the engine verifying and decrypting
        // its 8 sectors: 8 x (8 x 40 + 320) cycles and the metadata's hashes.
        assert!(d["cmac_hit_rate"].as_f64().unwrap() < 0.05, "{d}");
        assert_eq!(d["metadata_reads"].as_u64().unwrap(), d["cmac_misses"].as_u64().unwrap() + d["node_misses"].as_u64().unwrap());
        let engine_us = 8.0 * (8.0 * 40.0 + 320.0) / 4000.0;
        let extra = p50(&r) - p50(&insecure);
        assert!(extra > 0.97 * engine_us && extra < 2.0 * engine_us, "dshield {} vs insecure {}", p50(&r), p50(&insecure));
        assert!(r["io"]["cpu_busy_us"] == insecure["io"]["cpu_busy_us"], "the cores run the insecure path");
        // Sequential 4 KB reads: a CMAC block covers 16 KB, so three reads in four hit.
        let seq = run_io(&cfg(&[&base[..], &["io.stack=dshield", "io.pattern=seq-read"]].concat())).unwrap();
        let hit = seq["dshield"]["cmac_hit_rate"].as_f64().unwrap();
        assert!((0.74..=0.76).contains(&hit), "{hit}");
    }

    #[test]
    fn d_shield_random_writes_write_dirty_metadata_back_through_the_hidden_queue() {
        let r = run_io(&cfg(&["io.stack=dshield", "io.pattern=rand-write", "io.dshield_cache_kib=16"])).unwrap();
        let d = &r["dshield"];
        assert!(d["metadata_writes"].as_u64().unwrap() > 1000, "{d}");
        // Hidden commands are the DIE's: no core submits them or takes their interrupt.
        let insecure = run_io(&cfg(&["io.pattern=rand-write"])).unwrap();
        assert!(r["io"]["commands"].as_u64().unwrap() > insecure["io"]["commands"].as_u64().unwrap());
        assert_eq!(r["io"]["cpu_busy_us"], insecure["io"]["cpu_busy_us"]);
    }

    #[test]
    fn d_shield_pro_serves_cmac_misses_from_memory_once_useful_blocks_leave_the_chip() {
        // Random reads over 1 GiB: 65,536 CMAC blocks. The on-chip cache holds 512; a 64 MiB
        // memory cache holds all of them, so once read blocks have left the chip (Useful > 0),
        // their next misses come from memory, without a drive read or a tree walk.
        let base = ["io.threads=1", "io.ios=20000", "io.pattern=rand-read", "io.space_gib=1"];
        let basic = run_io(&cfg(&[&base[..], &["io.stack=dshield"]].concat())).unwrap();
        let pro = run_io(&cfg(&[&base[..], &["io.stack=dshield-pro", "io.dshield_pro_cache_mib=64"]].concat())).unwrap();
        let (b, p) = (&basic["dshield"], &pro["dshield"]);
        let hits = p["memory_cache_hits"].as_u64().unwrap();
        assert!(hits > 2000, "{p}");
        assert_eq!(p["memory_cache_hits"].as_u64().unwrap() + p["memory_cache_misses"].as_u64().unwrap(), p["cmac_misses"].as_u64().unwrap());
        assert!(p["metadata_reads"].as_u64().unwrap() < b["metadata_reads"].as_u64().unwrap(), "{p} vs {b}");
        assert_eq!(b["memory_cache_hits"], 0);
        // Its loads are memory traffic through the secure controller.
        assert!(pro["memory"]["reads"].as_u64().unwrap() >= basic["memory"]["reads"].as_u64().unwrap() + 8 * hits);
        // Too large for the host's memory: an error naming the field.
        let e = run_io(&cfg(&["io.stack=dshield-pro", "io.dshield_pro_cache_mib=65536"])).unwrap_err().to_string();
        assert!(e.contains("io.dshield_pro_cache_mib"), "{e}");
        let e = run_io(&cfg(&["io.stack=dshield-pro", "io.dshield_pro_cache_mib=100"])).unwrap_err().to_string();
        assert!(e.contains("io.dshield_pro_cache_mib") && e.contains("power of two"), "{e}");
    }

    #[test]
    fn d_shield_s_data_namespace_leaves_room_for_its_metadata() {
        let e = run_io(&cfg(&["io.stack=dshield", "io.space_gib=16"])).unwrap_err().to_string();
        assert!(e.contains("io.space_gib") && e.contains("metadata namespace"), "{e}");
        let g = dshield::Geometry::for_drive(16 << 21);
        let (c, t) = g.metadata_sectors();
        assert!(g.data_sectors() + c + t <= 16 << 21 && g.data_sectors() > (16 << 21) * 96 / 100);
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
        let die = r["ssd"]["die_utilisation"].as_f64().unwrap();
        assert!((ch - 5.12 / 15.5 / 8.0).abs() < 0.01, "{ch}");
        assert!((pl - 3.0 / 15.5 / 128.0).abs() < 0.001, "{pl}");
        // One read at a time: a die is busy exactly when one of its planes is (64 dies).
        assert!((die - 3.0 / 15.5 / 64.0).abs() < 0.002, "{die}");
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
        assert!(r["ssd"]["write_buffer_stall_cycles_sum"].as_u64().unwrap() > 0, "{}", r["ssd"]);
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

    fn count(r: &Value, section: &str, name: &str) -> u64 { r[section][name].as_u64().unwrap_or_else(|| panic!("{section}.{name} in {r}")) }

    #[test]
    fn enc_int_writes_go_to_the_journal_then_to_their_place_with_their_tags() {
        // 20,000 random 4 KB writes: 78 MiB, past the 64 MiB journal's 50% watermark.
        let r = run_io(&cfg(&["io.pattern=rand-write", "io.stack=enc-int", "io.ios=20000", "io.queue_depth=4"])).unwrap();
        let sectors = 20_000 * 8;
        let journal = count(&r, "integrity", "journal_sectors_written");
        let placed = count(&r, "integrity", "writeback_sectors");
        assert!(count(&r, "integrity", "writer_rounds") >= 1 && placed > sectors / 3, "{}", r["integrity"]);
        assert!(placed <= sectors, "a sector is copied to its place at most once a write");
        // Each committed section holds 80 data sectors behind 8 entry sectors (more when a
        // commit pads it): the journal area gets at least 1.1 sectors a sector written back.
        assert!(journal * 10 >= placed * 11, "{journal} {placed}");
        assert!(count(&r, "integrity", "buffer_bytes_written") >= 4096 * count(&r, "integrity", "writer_rounds"));
        // The drive took the journal, the data and the tags: well over twice what was written.
        let pages = count(&r, "ssd", "host_page_writes");
        assert!(pages > 2 * 20_000, "{pages}");
        let plain = run_io(&cfg(&["io.pattern=rand-write", "io.ios=20000", "io.queue_depth=4"])).unwrap();
        assert_eq!(count(&plain, "ssd", "host_page_writes"), 20_000);
    }

    #[test]
    fn enc_int_reads_each_tag_buffer_once_while_it_stays_cached() {
        // 1 GiB of data has 1,024 buffers of tags (1 MiB of data each); the default cache
        // (2% of 32 GiB) holds them all.
        let r = run_io(&cfg(&["io.stack=enc-int", "io.ios=4000"])).unwrap();
        let (hits, misses) = (count(&r, "integrity", "buffer_hits"), count(&r, "integrity", "buffer_misses"));
        assert_eq!(hits + misses, 4000);
        assert!((900..=1024).contains(&misses), "{misses}");
        // 16 buffers of cache: almost every read misses.
        let small = run_io(&cfg(&["io.stack=enc-int", "io.ios=4000", "io.integrity_buffer_cache_mib=1"])).unwrap();
        assert!(count(&small, "integrity", "buffer_misses") > 3900, "{}", small["integrity"]);
        assert!(small["io"]["runtime_us"].as_f64() > r["io"]["runtime_us"].as_f64());
    }

    #[test]
    fn a_read_of_sectors_still_in_the_journal_is_served_from_memory() {
        let p = std::env::temp_dir().join(format!("secmem-io-journal-{}.trace", std::process::id()));
        std::fs::write(&p, "0 0 800 8 0
100000 0 800 8 1
200000 0 808 8 1
").unwrap();
        let r = run_io(&cfg(&[&format!("io.trace=\"{}\"", p.display()), "io.stack=enc-int"])).unwrap();
        let _ = std::fs::remove_file(&p);
        assert_eq!(count(&r, "integrity", "reads_from_journal"), 1);
        assert_eq!(count(&r, "integrity", "buffer_misses"), 1, "the other read fetched its tags");
        // One data read, one tag buffer read, and the journal section the commit timer wrote.
        assert_eq!(count(&r, "io", "commands"), 3);
        assert_eq!(count(&r, "integrity", "journal_sectors_written"), 88);
    }

    #[test]
    fn enc_int_costs_more_than_enc_and_enc_more_than_insecure_on_random_writes() {
        let rt = |stack: &str| {
            let r = run_io(&cfg(&["io.pattern=rand-write", "io.ios=20000", &format!("io.stack={stack}")])).unwrap();
            r["io"]["runtime_us"].as_f64().unwrap()
        };
        let (plain, enc, enc_int) = (rt("insecure"), rt("enc"), rt("enc-int"));
        assert!(plain < enc && enc < enc_int, "{plain} {enc} {enc_int}");
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
        assert!(bad(&["io.stack=enc-int", "io.space_gib=16"]).contains("io.space_gib"));
        assert!(bad(&["io.stack=enc-int", "io.integrity_tag_bytes=600"]).contains("io.integrity_tag_bytes"));
        assert!(bad(&["io.max_transfer_kib=3"]).contains("io.max_transfer_kib"));
        assert!(bad(&["io.integrity_journal_watermark=0"]).contains("io.integrity_journal_watermark"));
    }
}
