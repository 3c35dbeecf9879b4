//! The engine: a core model driving the cache hierarchy, which drives a design on the secure
//! memory controller, which drives the device.
//!
//! Core model (documented in docs/core-model.md):
//! * the `inst_gap` non-memory instructions before each record retire at `core.ipc`;
//! * every access that misses L1 becomes an outstanding miss completing at
//!   `now + hit latency of the level that had it` (plus the controller's read time for
//!   memory); L1 hits cost nothing extra (hidden by out-of-order execution);
//! * at most `core.max_outstanding_misses` misses are in flight: when full, the core stalls
//!   until the oldest-completing one returns (memory-level parallelism);
//! * stores are write-allocate: a store miss fetches its line like a load;
//! * a fence waits until every earlier write to memory is persistent;
//! * the run ends when the last outstanding miss completes.

use crate::config::{Config, MemoryDevice, TraceLevel};
use crate::translate::{AddressSpace, Translator};
use crate::hierarchy::{Hierarchy, Level, Writeback};
use crate::misses_in_flight::MissesInFlight;
use secmem_core::addr::LINE_SHIFT;
use secmem_core::error::ConfigError;
use secmem_core::Cycle;
use secmem_media::pcm::PcmMedia;
use secmem_media::simple::SimpleMedia;
use secmem_media::{Media, MediaStats, MemoryPort};
use secmem_schemes::designs::DeviceLayout;
use secmem_schemes::{Design, IntegrityError, McStats, SecureMc};
use secmem_trace::{Op, Record};
use serde::Serialize;

#[cfg(feature = "canaries")]
thread_local! {
    static CANARIES: std::cell::Cell<secmem_schemes::Canaries> = std::cell::Cell::new(secmem_schemes::Canaries::default());
}

/// Switches planted bugs on for controllers built later on this thread (test builds only).
#[cfg(feature = "canaries")]
pub fn set_test_canaries(c: secmem_schemes::Canaries) { CANARIES.with(|x| x.set(c)) }

/// The planted bugs in force (always none outside test builds).
pub(crate) fn test_canaries() -> secmem_schemes::Canaries {
    #[cfg(feature = "canaries")]
    {
        CANARIES.with(|x| x.get())
    }
    #[cfg(not(feature = "canaries"))]
    {
        secmem_schemes::Canaries::default()
    }
}

/// Observer of every write that reaches memory: (line, plaintext).
pub type PersistHook = Box<dyn FnMut(u64, &[u8; 64])>;

/// Observer of every page command a design carried out (oracles use it: a copy, zero fill or
/// free changes what lines read as without any data write reaching memory).
pub type PageCommandHook = Box<dyn FnMut(secmem_schemes::PageCommand)>;

/// Core-side counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CoreStats {
    pub records: u64,
    pub reads: u64,
    pub writes: u64,
    pub fences: u64,
    pub flushes: u64,
    pub instructions: u64,
    /// Line accesses that missed every cache level (reads sent to the memory controller).
    pub llc_misses: u64,
    /// Dirty lines written to the memory controller (LLC write-backs, flushes, write-throughs).
    pub memory_writes_issued: u64,
    /// Cycles the core waited because all miss slots were busy.
    pub mlp_stall_cycles: u64,
    /// Cycles fences waited for persists.
    pub fence_stall_cycles: u64,
    /// Memory reads and writes of lines outside the protected memory (`persist.coverage =
    /// "non-stack"`: the stack's), served as plain device accesses.
    pub unprotected_reads: u64,
    pub unprotected_writes: u64,
}

impl CoreStats {
    fn since(&self, s: &CoreStats) -> CoreStats {
        CoreStats {
            records: self.records - s.records,
            reads: self.reads - s.reads,
            writes: self.writes - s.writes,
            fences: self.fences - s.fences,
            flushes: self.flushes - s.flushes,
            instructions: self.instructions - s.instructions,
            llc_misses: self.llc_misses - s.llc_misses,
            memory_writes_issued: self.memory_writes_issued - s.memory_writes_issued,
            mlp_stall_cycles: self.mlp_stall_cycles - s.mlp_stall_cycles,
            fence_stall_cycles: self.fence_stall_cycles - s.fence_stall_cycles,
            unprotected_reads: self.unprotected_reads - s.unprotected_reads,
            unprotected_writes: self.unprotected_writes - s.unprotected_writes,
        }
    }
}

/// Everything counted, at one instant.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub cycle: Cycle,
    pub core: CoreStats,
    pub caches: [secmem_core::cache::CacheStats; 3],
    pub mc: McStats,
    pub media: MediaStats,
    /// Each further port's name and statistics (none unless a design or the config attaches one).
    pub ports: Vec<(String, MediaStats)>,
}

impl Snapshot {
    /// `self - start`: the region of interest after warm-up.
    pub fn since(&self, start: &Snapshot) -> Snapshot {
        Snapshot {
            cycle: self.cycle - start.cycle,
            core: self.core.since(&start.core),
            caches: [
                self.caches[0].since(&start.caches[0]),
                self.caches[1].since(&start.caches[1]),
                self.caches[2].since(&start.caches[2]),
            ],
            mc: self.mc.since(&start.mc),
            media: self.media.since(&start.media),
            ports: self
                .ports
                .iter()
                .map(|(name, m)| (name.clone(), start.ports.iter().find(|(n, _)| n == name).map_or_else(|| m.clone(), |(_, s)| m.since(s))))
                .collect(),
        }
    }
}

/// A record the engine cannot simulate.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordError {
    /// Index of the record in the trace (0-based).
    pub index: u64,
    pub message: String,
    /// Set when the record failed because an integrity check failed (functional mode).
    pub integrity: Option<IntegrityError>,
}

pub struct Engine {
    pub cfg: Config,
    pub hier: Hierarchy,
    pub mc: SecureMc,
    pub design: Box<dyn Design>,
    now: Cycle,
    inst_carry: f64,
    cycles_per_inst: f64,
    /// Completion cycles of misses in flight (at most `core.max_outstanding_misses`).
    in_flight: MissesInFlight,
    last_persist: Cycle,
    stats: CoreStats,
    data_bytes: u64,
    /// Line contents move through the hierarchy: functional mode, where memory is real bytes
    /// too, and the timing half of a two-thread functional run (see `forwarded`).
    functional: bool,
    /// Stores seen, for the deterministic content of stores whose record carries no data.
    store_seq: u64,
    /// First integrity failure of the current record.
    failure: Option<IntegrityError>,
    /// Called with (line, plaintext) for every write that reaches memory (oracles use it).
    pub on_persist: Option<PersistHook>,
    /// Called with every page command the design accepted, when it was accepted.
    pub on_page_command: Option<PageCommandHook>,
    /// The timing half of a two-thread functional run ([`new_timing_half`](Self::new_timing_half)):
    /// every read and write this engine sent the controller, in order, as memory-level records
    /// (writes with their bytes) for the functional half to replay. `None` otherwise.
    pub forwarded: Option<Vec<Record>>,
    /// Records are memory-controller requests (no cache hierarchy).
    memory_level: bool,
    /// Virtual traces (`translation.addresses = "virtual"`): virtual pages to frames.
    /// (In a cell: the look-ahead, which sees the engine shared, places a record's page when
    /// the record enters its window, so pages are placed in record order.)
    translator: Option<std::cell::RefCell<Translator>>,
    /// The physical lines of the virtual record being stepped (reused buffer).
    virtual_lines: Vec<u64>,
    /// `persist.coverage = "non-stack"`: the stack's virtual addresses, whose stores are not
    /// written through and whose frames (`unprotected_frames`, by physical line >>
    /// `frame_line_shift`) hold plain, unprotected lines. An empty range otherwise.
    unprotected_va: std::ops::Range<u64>,
    /// `hierarchy.write_through`, cleared while a stack store runs under non-stack coverage.
    write_through: bool,
    unprotected_frames: rustc_hash::FxHashSet<u64>,
    frame_line_shift: u32,
    /// Reads and writes of a virtual trace that were not naturally aligned (split across
    /// lines).
    unaligned_accesses: u64,
    /// Counting mode under a design whose decisions depend on line contents
    /// (`DesignEntry::needs_line_contents`): the plaintext last written to each line, which
    /// functional mode reads back from its image. Fills take their contents from here, so the
    /// lines the design is handed are those of a functional run. `None` otherwise.
    content_shadow: Option<rustc_hash::FxHashMap<u64, [u8; 64]>>,
    /// The design decides on line contents (`DesignEntry::needs_line_contents`): a store
    /// record must carry its bytes (none are made up for it).
    stores_need_data: bool,
    /// Page of the record last given to `prefetch_late` / `prefetch` (host look-ahead only).
    prefetch_page: std::cell::Cell<u64>,
    prefetch_page_early: std::cell::Cell<u64>,
}

/// The memory device of the config (`memory.device`), idle and sized for the whole address
/// space: the data and, above it, the security metadata and any design regions.
pub fn build_media(cfg: &Config) -> Result<Media, ConfigError> {
    let bytes = device_gib(cfg)? << 30;
    Ok(match cfg.memory.device {
        // By value (`Media::Pcm`), not as `Box<dyn MemoryPort>`: device accesses are then
        // direct calls into the PCM model.
        MemoryDevice::Pcm => Media::Pcm(PcmMedia::new(&cfg.pcm, cfg.core.freq_mhz, bytes)),
        MemoryDevice::Simple => Media::from(Box::new(SimpleMedia::new(&cfg.simple, cfg.core.freq_mhz, bytes)) as Box<dyn MemoryPort>),
    })
}

/// The device's address space under the config's design: data, the security metadata above
/// it, and above the tree the design's own regions (Horus' vault, Base-LU's metadata save),
/// sized for the whole hierarchy and metadata caches; those stay untouched unless a drain runs.
pub fn device_layout(cfg: &Config) -> Result<DeviceLayout, ConfigError> {
    let layout = secmem_core::tree::SecureLayout::new(cfg.data_bytes(), cfg.tree.arity, cfg.security.mac_bits)?;
    let design = secmem_schemes::designs::entry(&cfg.run.design).map_err(|m| ConfigError::new("run.design", m))?;
    Ok(DeviceLayout::compose(&layout, design, &design_context(cfg)))
}

/// The device's size in whole GiB.
fn device_gib(cfg: &Config) -> Result<u64, ConfigError> { Ok(device_layout(cfg)?.end.div_ceil(1 << 30)) }

/// The secure controller of a config on a fresh device (functional per `run.functional`, with
/// the test canaries in force and the pad-reuse detector if asked for).
pub fn build_controller(cfg: &Config) -> Result<SecureMc, ConfigError> {
    build_controller_on(cfg, build_media(cfg)?)
}

/// As [`build_controller`], over `media`.
fn build_controller_on(cfg: &Config, media: Media) -> Result<SecureMc, ConfigError> {
    let mut mc = SecureMc::with_media(&cfg.security, &cfg.tree, &cfg.metadata_cache, cfg.data_bytes(), media, cfg.run.seed, cfg.run.functional)?;
    let design = secmem_schemes::designs::entry(&cfg.run.design).map_err(|m| ConfigError::new("run.design", m))?;
    if let Some(strategy) = design.tree_update {
        mc.set_tree_update(strategy(&design_context(cfg), &cfg.design));
    }
    if let Some(f) = mc.func.as_mut() {
        f.canaries = test_canaries();
        if cfg.run.check_pad_reuse {
            f.reuse = Some(secmem_crypto::PadReuseDetector::new());
        }
    }
    Ok(mc)
}

/// The config's design (`run.design`).
pub fn build_design(cfg: &Config) -> Result<Box<dyn Design>, ConfigError> {
    secmem_schemes::designs::build(&cfg.run.design, &design_context(cfg), &cfg.design).map_err(|m| ConfigError::new("run.design", m))
}

/// The lines a (checked, non-empty) read, write or flush record covers. A half-open range:
/// iterating a `RangeInclusive` carries an extra exhausted flag and cost about 35 host
/// instructions per one-line record. The end cannot overflow: `check` keeps the record
/// inside the data region (or, for a virtual trace, the 64-bit space). A fence (0 bytes at
/// address 0) gives line 0, which nothing iterates.
#[inline]
fn lines_of(rec: &Record) -> std::ops::Range<u64> {
    (rec.addr >> LINE_SHIFT)..((rec.addr + rec.size_bytes as u64).saturating_sub(1) >> LINE_SHIFT) + 1
}

/// Whether an access of `size` bytes at `addr` is naturally aligned: a power-of-two size at
/// an address that is a multiple of it.
#[inline(always)]
fn naturally_aligned(addr: u64, size: u64) -> bool { size.is_power_of_two() && addr & (size - 1) == 0 }

/// The sizes a design may need: hierarchy lines and metadata-cache blocks.
pub fn design_context(cfg: &Config) -> secmem_schemes::designs::DesignContext {
    let mc = &cfg.metadata_cache;
    secmem_schemes::designs::DesignContext {
        hierarchy_lines: cfg.l1.lines() + cfg.l2.lines() + cfg.llc.lines(),
        metadata_lines: mc.counter.lines() + mc.mac.lines() + mc.tree.lines(),
        data_bytes: cfg.data_bytes(),
        tree_arity: cfg.tree.arity,
        strict_persistence: cfg.security.metadata_persistence == secmem_schemes::config::MetadataPersistence::Strict,
        freq_mhz: cfg.core.freq_mhz,
    }
}

impl Engine {
    /// The design's counters and its tree update strategy's (`stats.design.NAME`).
    pub fn design_stats(&self) -> Vec<(&'static str, f64)> {
        let mut out = self.design.extra_stats();
        out.extend(self.mc.tree_update_stats());
        out
    }

    /// Builds every component from a validated config (functional mode per `run.functional`).
    /// Line contents move through the hierarchy in functional mode, and in counting mode too
    /// when the design's decisions depend on them (`DesignEntry::needs_line_contents`).
    pub fn new(cfg: &Config) -> Result<Engine, ConfigError> {
        let needs_contents = secmem_schemes::designs::entry(&cfg.run.design).is_ok_and(|d| d.needs_line_contents);
        let mut e = Self::with_controller(cfg, build_controller(cfg)?, cfg.run.functional || needs_contents)?;
        if needs_contents && !cfg.run.functional {
            e.content_shadow = Some(Default::default());
        }
        Ok(e)
    }

    /// The functional half of a two-thread functional run (`run.host_threads`): functional
    /// mode at memory level over an [`UntimedDevice`], whose every access takes the PCM read
    /// latency. Its records are the controller requests of the timing half
    /// ([`new_timing_half`](Self::new_timing_half)), which has the real device. Its bytes,
    /// checks and event log are the run's; its cycles are not. The controller's decisions do
    /// not depend on device timing, so its controller and device counts are the timing half's.
    ///
    /// [`UntimedDevice`]: secmem_media::untimed::UntimedDevice
    pub fn new_functional_half(cfg: &Config) -> Result<Engine, ConfigError> {
        debug_assert!(cfg.run.functional);
        // Its records are the timing half's controller requests (`forwarded`): no hierarchy.
        let mut cfg = cfg.clone();
        cfg.run.trace_level = TraceLevel::Memory;
        // The timing half translated them: they are physical.
        cfg.translation.addresses = AddressSpace::Physical;
        let latency = Cycle::from_ns(cfg.pcm.read_latency_ns, cfg.core.freq_mhz);
        let device = secmem_media::untimed::UntimedDevice::new(device_gib(&cfg)? << 30, latency);
        let mut mc = build_controller_on(&cfg, Media::Untimed(device))?;
        // It runs the baseline's reads and writes and nothing else (no design, crash or
        // recovery): its counters can live in the counter blocks' bytes alone.
        mc.set_counters_in_payload();
        Self::with_controller(&cfg, mc, true)
    }

    /// The timing half of a two-thread functional run: counting mode (the real device model,
    /// no crypto, no image), except that line contents move through the hierarchy as in
    /// functional mode, so that every request it sends the controller is recorded, with the
    /// bytes of each write, in [`forwarded`](Self::forwarded) for the functional half
    /// ([`new_functional_half`](Self::new_functional_half)). Its counts, cycles and every
    /// other statistic are a functional run's: neither depends on the bytes.
    pub fn new_timing_half(cfg: &Config) -> Result<Engine, ConfigError> {
        let mut counting = cfg.clone();
        counting.run.functional = false;
        counting.run.check_pad_reuse = false;
        let mut e = Self::with_controller(&counting, build_controller(&counting)?, true)?;
        e.forwarded = Some(Vec::new());
        Ok(e)
    }

    /// An engine around `mc`; with `track_data`, line contents move through the hierarchy.
    fn with_controller(cfg: &Config, mc: SecureMc, track_data: bool) -> Result<Engine, ConfigError> {
        let design = build_design(cfg)?;
        if cfg.persist.unprotected_stack().is_some() && (cfg.translation.addresses != AddressSpace::Virtual || cfg.run.trace_level == TraceLevel::Memory) {
            return Err(ConfigError::new(
                "persist.coverage",
                "non-stack finds the stack by virtual address, in a trace of a program's loads and stores: this run's addresses are physical or memory requests (run a virtual trace, e.g. one secmem trace capture wrote, at core level)",
            ));
        }
        Ok(Engine {
            hier: Hierarchy::new(&cfg.l1, &cfg.l2, &cfg.llc, cfg.hierarchy.inclusive_llc, track_data),
            mc,
            design,
            now: Cycle::ZERO,
            inst_carry: 0.0,
            cycles_per_inst: 1.0 / cfg.core.ipc,
            in_flight: MissesInFlight::new(cfg.core.max_outstanding_misses as usize),
            last_persist: Cycle::ZERO,
            stats: CoreStats::default(),
            data_bytes: cfg.data_bytes(),
            functional: track_data,
            store_seq: 0,
            failure: None,
            on_persist: None,
            on_page_command: None,
            forwarded: None,
            memory_level: cfg.run.trace_level == TraceLevel::Memory,
            translator: (cfg.translation.addresses == AddressSpace::Virtual).then(|| {
                // The frames no design keeps records in, as the OS model gives out.
                let reserved = secmem_schemes::designs::data_lines_reserved_by_any(cfg.data_bytes() >> LINE_SHIFT) << LINE_SHIFT;
                std::cell::RefCell::new(Translator::new(&cfg.translation, cfg.data_bytes() - reserved, cfg.run.seed))
            }),
            virtual_lines: Vec::new(),
            write_through: cfg.hierarchy.write_through,
            unprotected_va: cfg.persist.unprotected_stack().unwrap_or(0..0),
            unprotected_frames: Default::default(),
            frame_line_shift: cfg.translation.page_size.bytes().trailing_zeros() - LINE_SHIFT,
            unaligned_accesses: 0,
            content_shadow: None,
            stores_need_data: secmem_schemes::designs::entry(&cfg.run.design).is_ok_and(|d| d.needs_line_contents),
            prefetch_page: std::cell::Cell::new(u64::MAX),
            prefetch_page_early: std::cell::Cell::new(u64::MAX),
            cfg: cfg.clone(),
        })
    }

    pub fn now(&self) -> Cycle { self.now }

    /// Core-side counters so far (cheap; `snapshot` copies everything).
    pub fn core_stats(&self) -> &CoreStats { &self.stats }

    /// Checks a record's address and size before it touches anything.
    #[inline(always)]
    fn check(&self, rec: &Record, index: u64) -> Result<(), RecordError> {
        self.check_within(rec, index, self.data_bytes, self.cfg.run.require_aligned)
    }

    /// As [`check`](Self::check), for addresses below `end` (the data capacity, or for a
    /// virtual trace the whole 64-bit space), refusing unaligned accesses if `aligned`.
    #[inline(always)]
    fn check_within(&self, rec: &Record, index: u64, end: u64, aligned: bool) -> Result<(), RecordError> {
        if matches!(rec.op, Op::Fence) {
            return Ok(());
        }
        if rec.size_bytes == 0 {
            return Err(RecordError { index, message: format!("a {:?} of 0 bytes touches nothing (only fences have size 0)", rec.op), integrity: None });
        }
        if self.stores_need_data && rec.op == Op::Write && rec.data.is_none() {
            return Err(RecordError {
                index,
                message: format!(
                    "design '{}' decides on the contents of the lines written, and this store carries none: run a trace with data (secmem trace capture --data, or an OS-level trace whose stores carry data), or give the generated workload contents (workload.contents = \"synthetic\")",
                    self.cfg.run.design
                ),
                integrity: None,
            });
        }
        let size = rec.size_bytes as u64;
        if rec.addr.checked_add(size).is_none_or(|e| e > end) {
            return Err(RecordError {
                index,
                message: format!(
                    "address {:#x} + {} bytes is beyond the {} bytes of memory (memory.capacity_gib = {})",
                    rec.addr, size, self.data_bytes, self.cfg.memory.capacity_gib
                ),
                integrity: None,
            });
        }
        if aligned && matches!(rec.op, Op::Read | Op::Write) {
            if size > 64 {
                return Err(RecordError {
                    index,
                    message: format!(
                        "access of {size} bytes at {:#x} is larger than a 64-byte line (set run.require_aligned = false to split it across lines)",
                        rec.addr
                    ),
                    integrity: None,
                });
            }
            if !naturally_aligned(rec.addr, size) {
                return Err(RecordError {
                    index,
                    message: format!(
                        "access of {} bytes at {:#x} is not naturally aligned (set run.require_aligned = false to split it across lines)",
                        size, rec.addr
                    ),
                    integrity: None,
                });
            }
        }
        Ok(())
    }

    /// Retires `n` non-memory instructions at `core.ipc` (fractions of a cycle carried over).
    #[inline]
    pub(crate) fn retire_instructions(&mut self, n: u32) {
        self.stats.instructions += n as u64;
        self.inst_carry += n as f64 * self.cycles_per_inst;
        let whole = self.inst_carry as u64;
        self.inst_carry -= whole as f64;
        self.now += Cycle(whole);
    }

    /// Adds a miss completing at `done`, stalling first if every miss slot is busy.
    #[inline]
    fn add_outstanding(&mut self, done: Cycle) {
        let issue = self.in_flight.add(self.now, done);
        self.stats.mlp_stall_cycles += (issue - self.now).0;
        self.now = issue;
    }

    fn send_writebacks(&mut self) {
        while let Some(Writeback { line, data }) = self.hier.writebacks.pop() {
            self.write_to_memory(line, data.as_ref());
        }
    }

    #[inline(always)]
    fn write_to_memory(&mut self, line: u64, data: Option<&[u8; 64]>) {
        self.stats.memory_writes_issued += 1;
        if let Some(out) = self.forwarded.as_mut() {
            out.push(Record { op: Op::Write, addr: line << LINE_SHIFT, size_bytes: 64, inst_gap: 0, data: data.copied() });
        }
        if let (Some(shadow), Some(d)) = (self.content_shadow.as_mut(), data) {
            shadow.insert(line, *d);
        }
        if self.is_unprotected(line) {
            // Outside the persistent memory: a plain write no fence waits for.
            self.stats.unprotected_writes += 1;
            self.mc.write_unprotected(line, self.now);
            return;
        }
        match self.design.serve_write(&mut self.mc, line, data, self.now) {
            Ok(t) => self.last_persist = self.last_persist.max(t),
            Err(e) => {
                self.failure.get_or_insert(e);
                return;
            }
        }
        if let (Some(hook), Some(d)) = (self.on_persist.as_mut(), data) {
            hook(line, d);
        }
    }

    /// The content a store writes when its record carries none (functional mode): a pattern
    /// derived from the line and the store's sequence number, so every store changes the line
    /// and runs are reproducible.
    fn synth_store(&mut self, line: u64) -> [u8; 64] {
        self.store_seq += 1;
        let mut out = [0u8; 64];
        for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
            let v = line.rotate_left(17) ^ self.store_seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93);
            chunk.copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Simulates one record (`index` is its position in the trace, for errors).
    pub fn step(&mut self, rec: &Record, index: u64) -> Result<(), RecordError> {
        if self.translator.is_some() {
            return self.step_virtual(rec, index);
        }
        self.check(rec, index)?;
        self.step_checked(rec, lines_of(rec));
        self.after_step(index)
    }

    /// [`step`](Self::step) of a record at virtual addresses: each line it touches is
    /// translated (its page mapped on first touch), then the record runs on those lines.
    #[inline(never)]
    fn step_virtual(&mut self, rec: &Record, index: u64) -> Result<(), RecordError> {
        // A real program's accesses: unaligned ones (valgrind reports 16- and 32-byte vector
        // accesses at any address) are split across the lines they touch, and counted.
        self.check_within(rec, index, u64::MAX, false)?;
        if matches!(rec.op, Op::Read | Op::Write) {
            let size = u64::from(rec.size_bytes);
            if size > 64 || !naturally_aligned(rec.addr, size) {
                self.unaligned_accesses += 1;
            }
        }
        let mut lines = std::mem::take(&mut self.virtual_lines);
        lines.clear();
        if !matches!(rec.op, Op::Fence) {
            let translator = self.translator.as_mut().expect("a virtual trace").get_mut();
            for line in lines_of(rec) {
                match translator.translate(line << LINE_SHIFT) {
                    Ok(addr) => lines.push(addr >> LINE_SHIFT),
                    Err(e) => return Err(RecordError { index, message: e.to_string(), integrity: None }),
                }
            }
        }
        let stack = self.unprotected_va.contains(&rec.addr);
        if stack {
            // A stack access (`persist.coverage = "non-stack"`): its frames hold plain lines,
            // and a store to it stays in the caches under write-through.
            for &line in &lines {
                self.unprotected_frames.insert(line >> self.frame_line_shift);
            }
            self.write_through = false;
        }
        self.step_checked(rec, lines.iter().copied());
        if stack {
            self.write_through = self.cfg.hierarchy.write_through;
        }
        self.virtual_lines = lines;
        self.after_step(index)
    }

    /// Translation statistics of a virtual trace: (pages mapped, page bytes, reads and
    /// writes that were not naturally aligned and were split across lines).
    pub fn translation(&self) -> Option<(u64, u64, u64)> {
        self.translator.as_ref().map(|t| {
            let t = t.borrow();
            (t.pages_mapped(), t.page_bytes(), self.unaligned_accesses)
        })
    }

    /// The end of [`step`](Self::step): the integrity failure the record met, if any.
    #[inline(always)]
    fn after_step(&mut self, index: u64) -> Result<(), RecordError> {
        // Every operation writes its metadata victims back before it returns: a victim still
        // buffered between requests would be lost by a crash even with battery-backed caches.
        debug_assert!(self.failure.is_some() || !self.mc.has_pending_evictions(), "record {index} left metadata evictions unwritten");
        // Tested before it is taken: taking moves the whole error out, on every record.
        if self.failure.is_none() {
            return Ok(());
        }
        let e = self.failure.take().expect("tested above");
        Err(RecordError { index, message: e.to_string(), integrity: Some(e) })
    }

    #[inline(always)]
    fn step_checked(&mut self, rec: &Record, lines: impl Iterator<Item = u64>) {
        self.stats.records += 1;
        // The gap's instructions plus the record's own (load, store, clwb or fence).
        self.retire_instructions(rec.inst_gap.saturating_add(1));
        match rec.op {
            Op::Read | Op::Write => {
                let write = rec.op == Op::Write;
                if write { self.stats.writes += 1 } else { self.stats.reads += 1 }
                for line in lines {
                    // By reference: the record's 64 B are not copied for each line (or at all,
                    // when it carries none).
                    let synth;
                    let data = match &rec.data {
                        Some(d) => Some(d),
                        None if write && self.functional => {
                            synth = self.synth_store(line);
                            Some(&synth)
                        }
                        None => None,
                    };
                    if self.memory_level {
                        self.memory_request(line, write, data);
                    } else {
                        self.access_line(line, write, data);
                    }
                }
            }
            Op::Fence => {
                self.stats.fences += 1;
                if self.last_persist > self.now {
                    self.stats.fence_stall_cycles += (self.last_persist - self.now).0;
                    self.now = self.last_persist;
                }
                if let Some(out) = self.forwarded.as_mut() {
                    out.push(Record::fence(0));
                }
                self.now = self.now.max(self.design.fence(&mut self.mc, self.now));
            }
            Op::Flush => {
                self.stats.flushes += 1;
                // At memory level there is no cache to write back from: counted, nothing else.
                if !self.memory_level {
                    for line in lines {
                        if let Some(wb) = self.hier.flush_line(line) {
                            self.write_to_memory(wb.line, wb.data.as_ref());
                        }
                    }
                }
            }
        }
    }

    /// Whether physical `line` is outside the protected memory (a stack frame under
    /// `persist.coverage = "non-stack"`).
    #[inline(always)]
    fn is_unprotected(&self, line: u64) -> bool { !self.unprotected_frames.is_empty() && self.unprotected_frames.contains(&(line >> self.frame_line_shift)) }

    /// A memory-level record: a read is an outstanding miss, a write a posted write-back.
    #[inline]
    fn memory_request(&mut self, line: u64, write: bool, data: Option<&[u8; 64]>) {
        if write {
            self.write_to_memory(line, data);
        } else {
            self.stats.llc_misses += 1;
            if let Some(out) = self.forwarded.as_mut() {
                out.push(Record::read(line << LINE_SHIFT, 0));
            }
            match self.design.serve_read(&mut self.mc, line, self.now) {
                Ok((done, _)) => self.add_outstanding(done),
                Err(e) => {
                    self.failure.get_or_insert(e);
                }
            }
        }
    }

    #[inline]
    fn access_line(&mut self, line: u64, write: bool, data: Option<&[u8; 64]>) {
        // Memory content arrives from the controller after the fill; the hierarchy is patched
        // with it below (functional mode).
        let level = self.hier.access(line, write, data);
        match level {
            Level::L1 => {}
            Level::L2 => self.add_outstanding(self.now + self.hier.path_latency[1]),
            Level::Llc => self.add_outstanding(self.now + self.hier.path_latency[2]),
            Level::Memory => {
                self.stats.llc_misses += 1;
                let at = self.now + self.hier.path_latency[2];
                if let Some(out) = self.forwarded.as_mut() {
                    out.push(Record::read(line << LINE_SHIFT, 0));
                }
                if self.is_unprotected(line) {
                    self.stats.unprotected_reads += 1;
                    let done = self.mc.read_unprotected(line, at);
                    self.add_outstanding(done);
                    return self.after_access(line, write, data);
                }
                match self.design.serve_read(&mut self.mc, line, at) {
                    Ok((done, plain)) => {
                        // (Never-written memory reads as zeros, as the functional image's does.)
                        let plain = plain.or_else(|| self.content_shadow.as_ref().map(|s| s.get(&line).copied().unwrap_or([0; 64])));
                        if let Some(p) = plain {
                            self.hier.set_filled_data(line, &p, write && data.is_some());
                        }
                        self.add_outstanding(done);
                    }
                    Err(e) => {
                        self.failure.get_or_insert(e);
                    }
                }
            }
        }
        self.after_access(line, write, data)
    }

    /// The end of an access: the write-backs it caused, and a store's write-through.
    #[inline(always)]
    fn after_access(&mut self, line: u64, write: bool, data: Option<&[u8; 64]>) {
        if !self.hier.writebacks.is_empty() {
            self.send_writebacks();
        }
        if write && self.write_through {
            // Strict persistency: the store goes to memory now, in program order; the cached
            // copy is clean.
            if let Some(wb) = self.hier.flush_line(line) {
                self.write_to_memory(wb.line, wb.data.as_ref().or(data));
            }
        }
    }

    /// Host-side look-ahead: asks the host CPU to fetch the simulator state a future record
    /// will touch (its cache sets and counter block). Changes no simulated state; it only
    /// hides host memory latency, which dominates when simulating random traffic over large
    /// structures.
    #[inline(always)]
    pub fn prefetch(&self, rec: &Record) {
        match &self.translator {
            None if matches!(rec.op, Op::Read | Op::Write) => self.prefetch_line_early(rec.op, rec.addr >> LINE_SHIFT),
            // A virtual record's translation is looked up at the second stage; now only the
            // page map's slot for it is fetched.
            Some(t) if matches!(rec.op, Op::Read | Op::Write) => t.borrow().prefetch(rec.addr),
            _ => {}
        }
    }

    /// The first look-ahead stage for a record's physical `line`.
    #[inline(always)]
    fn prefetch_line_early(&self, op: Op, line: u64) {
        {
            if self.memory_level {
                // The record itself goes to the controller: a write bumps its counter (in the
                // counter block's cached bytes, which the second stage prefetches, when the
                // controller keeps no counter store).
                if op == Op::Write && !self.mc.counters_in_payload() {
                    self.mc.counters.prefetch_line(line);
                }
                if self.functional {
                    self.mc.prefetch_image_index(line);
                }
                return;
            }
            // A record in the page of the previous one (sequential traffic) touches the sets
            // next to its predecessor's, which the hardware prefetcher follows — except, in
            // functional mode, its data line's image index entry, which hashing puts anywhere.
            if self.prefetch_page_early.replace(line >> 6) == line >> 6 {
                if self.functional {
                    self.mc.prefetch_image_data_index(line);
                }
                return;
            }
            self.hier.l2.prefetch(line);
            self.hier.llc.prefetch(line);
            if self.functional {
                self.mc.prefetch_image_index(line);
            }
        }
    }

    /// Second look-ahead stage, a few records before `rec` runs (after [`prefetch`](Self::prefetch)
    /// brought its sets in): predicts the lines its fills will evict from the L2 and the LLC
    /// (each set's next victim) and prefetches what those evictions touch — the LLC set a
    /// dirty L2 victim is written into; the upper-level sets an LLC victim is
    /// back-invalidated from, its counter block and its counter and MAC cache sets (its
    /// write-back); and the metadata-cache sets a read of the record's line looks up.
    /// Changes no simulated state; a wrong guess costs one useless host prefetch.
    #[inline(always)]
    pub fn prefetch_late(&self, rec: &Record) {
        if !matches!(rec.op, Op::Read | Op::Write) {
            return;
        }
        match &self.translator {
            None => self.prefetch_line_late(rec.addr >> LINE_SHIFT),
            // Translated at the middle stage: found among the recent translations.
            Some(t) => {
                if let Some(addr) = t.borrow().peek(rec.addr) {
                    self.prefetch_line_late(addr >> LINE_SHIFT);
                }
            }
        }
    }

    /// The middle look-ahead stage, between [`prefetch`](Self::prefetch) and
    /// [`prefetch_late`](Self::prefetch_late), for virtual traces only: the record's page is
    /// placed here (its page-map slot was fetched by the first stage), in record order
    /// (every record reaches this stage or `step` in trace order, so pages are placed in the
    /// order a driver without look-ahead places them), then the first stage's work runs on
    /// its physical line.
    #[inline(always)]
    pub fn prefetch_mid(&self, rec: &Record) {
        let Some(t) = &self.translator else { return };
        if !matches!(rec.op, Op::Read | Op::Write) {
            return;
        }
        let Ok(addr) = t.borrow_mut().translate(rec.addr) else { return };
        self.prefetch_line_early(rec.op, addr >> LINE_SHIFT);
    }

    /// The second look-ahead stage for a record's physical `line`.
    #[inline(always)]
    fn prefetch_line_late(&self, line: u64) {
        if self.memory_level {
            // No hierarchy: only the controller's image reads are worth fetching ahead.
            if self.functional {
                self.mc.prefetch_image_bytes(line);
            }
            return;
        }
        // Records in the page of the previous one (sequential traffic) find everything in
        // the host caches already, and the hardware prefetcher follows their victims —
        // except, in functional mode, the line's own image bytes (placed in first-write
        // order) and the content slots its fills overwrite (a set's slots are `ways` lines
        // apart).
        if self.prefetch_page.replace(line >> 6) == line >> 6 {
            if self.functional {
                self.mc.prefetch_image_data_bytes(line);
                self.hier.llc.prefetch_data(line);
                self.hier.l2.prefetch_data(line);
            }
            return;
        }
        if let Some((v2, true)) = self.hier.l2.next_victim(line) {
            if self.hier.inclusive {
                // An inclusive LLC holds it: writing it there finds it and sets its dirty bit.
                self.hier.llc.prefetch_present(v2);
            } else {
                self.hier.llc.prefetch(v2);
            }
        }
        let secure = self.mc.p.secure;
        if secure {
            self.mc.prefetch_read_metadata(line);
        }
        if self.functional {
            // The image entries of the record's line and metadata (their index entries were
            // fetched by the first stage), and the content slots its fills overwrite (after
            // reading out the victims' content).
            self.mc.prefetch_image_bytes(line);
            self.hier.llc.prefetch_data(line);
            self.hier.l2.prefetch_data(line);
        }
        if let Some((v3, dirty)) = self.hier.llc.next_victim(line) {
            if self.hier.inclusive {
                // Its back-invalidation usually finds it in neither (it has been in the LLC
                // longest): the look-up is all it costs there.
                self.hier.l2.prefetch_probe(v3);
                self.hier.l1.prefetch_probe(v3);
            }
            // Only a dirty victim is written back (one dirty only above the LLC is rare
            // enough not to be worth a prefetch into a large counter store for every victim).
            if secure && dirty {
                self.mc.prefetch_write_metadata(v3);
            }
            if self.functional && dirty {
                // Its write-back persists it into the image: its image path (a dozen host
                // prefetches) is worth fetching for a dirty victim only, as above.
                self.mc.prefetch_image_index(v3);
            }
        }
    }

    /// The snapshot a region of interest starts from: all stats now, at the core's own clock.
    /// Misses still in flight belong to the region that waits for them: taking the clock past
    /// them (as [`snapshot`](Self::snapshot) does for the end) would hide region work that
    /// overlaps them, down to fewer cycles than its instructions take at the configured IPC.
    pub fn roi_start(&self) -> Snapshot {
        let mut s = self.snapshot();
        s.cycle = self.now;
        s
    }

    /// All stats now (the clock includes misses still in flight: the run ends when they do).
    pub fn snapshot(&self) -> Snapshot {
        let (mc, media) = self.mc.snapshot();
        let end = self.in_flight.latest(self.now);
        Snapshot { cycle: end, core: self.stats.clone(), caches: self.hier.stats(), mc, media, ports: self.mc.port_stats() }
    }

    /// Lets every miss in flight complete; the clock moves to the last completion.
    pub fn settle(&mut self) {
        self.now = self.in_flight.settle(self.now);
    }

    /// Writes every dirty line of the hierarchy back to memory (clwb of everything), leaving
    /// it clean. Returns the number of lines written.
    pub fn flush_hierarchy(&mut self) -> Result<u64, IntegrityError> {
        let dirty = self.hier.dirty_lines();
        let n = dirty.len() as u64;
        for wb in dirty {
            self.hier.flush_line(wb.line);
            self.write_to_memory(wb.line, wb.data.as_ref());
            if let Some(e) = self.failure.take() {
                return Err(e);
            }
        }
        Ok(n)
    }

    /// Dirty lines each cache holds now, by its report name: L1, L2 and the LLC (a line dirty
    /// in two levels counts in both), then the counter, MAC and tree caches' dirty blocks.
    pub fn dirty_lines_by_cache(&self) -> [(&'static str, usize); 6] {
        [
            ("l1", self.hier.l1.dirty_count()),
            ("l2", self.hier.l2.dirty_count()),
            ("llc", self.hier.llc.dirty_count()),
            ("counter", self.mc.counter_cache.dirty_count()),
            ("mac", self.mc.mac_cache.dirty_count()),
            ("tree", self.mc.tree_cache.dirty_count()),
        ]
    }

    /// The core does `cycles` of work that is not modelled instruction by instruction (an OS
    /// fault handler's entry and exit).
    pub fn stall(&mut self, cycles: Cycle) { self.now += cycles; }

    /// Waits until the device is idle: every miss in flight returned, every write persistent
    /// and drained from the write queue into the array. Workloads call it between a
    /// fast-forwarded phase and the measured one, so the measured phase does not pay for the
    /// earlier phase's queued writes.
    pub fn quiesce(&mut self) {
        self.settle();
        self.now = self.now.max(self.last_persist);
        self.now = self.now.max(self.mc.media.drain(self.now));
    }

    /// Puts a recovered line back into the LLC as dirty; lines it displaces go to memory.
    pub fn restore_dirty_line(&mut self, line: u64, data: Option<[u8; 64]>) -> Result<(), IntegrityError> {
        self.hier.restore_dirty(line, data);
        self.send_writebacks();
        self.failure.take().map_or(Ok(()), Err)
    }

    /// Makes the design's state durable (baseline: dirty metadata to NVM, tree consistent
    /// with the root register).
    pub fn finish_design(&mut self) -> Result<Cycle, IntegrityError> { self.design.finish(&mut self.mc, self.now) }
}

/// Hooks for the OS memory model (`crate::os`): page commands, non-temporal stores and the
/// cache maintenance the kernel does around page copies.
impl Engine {
    /// Sends a page command to the design. The kernel writes the controller's command
    /// registers and fences (Lelantus III-A), so the core waits for the command to reach the
    /// controller (the LLC path, like a write); the controller's work occupies the device and
    /// a later fence waits for it. Returns Ok(false) when the design does not support it (the
    /// OS then does the work itself), and the integrity error a command met on the way.
    pub fn page_command(&mut self, cmd: secmem_schemes::PageCommand) -> Result<bool, IntegrityError> {
        self.now += self.hier.path_latency[2];
        match self.design.page_command(&mut self.mc, cmd, self.now) {
            Ok(done) => {
                self.last_persist = self.last_persist.max(done);
                debug_assert!(!self.mc.has_pending_evictions(), "{cmd:?} left metadata evictions unwritten");
                if let Some(hook) = self.on_page_command.as_mut() {
                    hook(cmd);
                }
                Ok(true)
            }
            Err(secmem_schemes::PageCommandError::Unsupported(_)) => Ok(false),
            Err(secmem_schemes::PageCommandError::Integrity(e)) => Err(e),
        }
    }

    /// A non-temporal full-line store (the kernel's huge-page copy): every cached copy of
    /// `line` is dropped and the line goes to memory as a posted write.
    pub fn store_non_temporal(&mut self, line: u64, data: Option<[u8; 64]>) -> Result<(), IntegrityError> {
        self.retire_instructions(1);
        self.stats.writes += 1;
        self.invalidate_line(line);
        self.write_to_memory(line, data.as_ref());
        self.failure.take().map_or(Ok(()), Err)
    }

    /// Drops `line` from every cache level, dirty or not (a freshly allocated page's stale
    /// lines must not be written back over its new content).
    pub fn invalidate_line(&mut self, line: u64) {
        self.hier.l1.invalidate(line);
        self.hier.l2.invalidate(line);
        self.hier.llc.invalidate(line);
    }

    /// clwb of `line`: a dirty cached copy is written to memory and stays cached, clean.
    pub fn clean_line(&mut self, line: u64) -> Result<(), IntegrityError> {
        // `flush_line` leaves every level holding the written-back content.
        if let Some(wb) = self.hier.flush_line(line) {
            self.write_to_memory(wb.line, wb.data.as_ref());
        }
        self.failure.take().map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::{build_media, design_context, CoreStats, Engine};
    use crate::hierarchy::{Level, Writeback};
    use crate::config::Config;
    use secmem_core::Cycle;
    use secmem_trace::{Op, Record};

    fn engine() -> Engine { engine_with(&[]) }

    /// The default config with `-p` style overrides.
    fn engine_with(overrides: &[&str]) -> Engine {
        let mut o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
        o.push("run.progress=false".into());
        Engine::new(&Config::load(Some("default"), None, &o).unwrap()).unwrap()
    }

    fn rec(op: Op, addr: u64, size_bytes: u16) -> Record { Record { op, addr, size_bytes, inst_gap: 0, data: None } }

    #[test]
    fn a_flush_writes_back_every_line_of_its_size() {
        // `FL addr size` used to write back only the line holding `addr`.
        let mut e = engine();
        for a in [0x1000, 0x1040, 0x1080] {
            e.step(&rec(Op::Write, a, 64), 0).unwrap();
        }
        e.step(&rec(Op::Flush, 0x1000, 128), 3).unwrap();
        assert_eq!(e.core_stats().memory_writes_issued, 2, "0x1000 and 0x1040, not 0x1080");
        e.step(&rec(Op::Flush, 0x1000, 4096), 4).unwrap();
        assert_eq!(e.core_stats().memory_writes_issued, 3);
    }

    #[test]
    fn an_empty_or_over_wide_access_is_an_error_saying_so() {
        let mut e = engine();
        for op in [Op::Read, Op::Write, Op::Flush] {
            let err = e.step(&rec(op, 0x1000, 0), 7).unwrap_err();
            assert!(err.message.contains("0 bytes") && err.index == 7, "{op:?}: {}", err.message);
        }
        let err = e.step(&rec(Op::Read, 0x1000, 128), 8).unwrap_err();
        assert!(err.message.contains("larger than a 64-byte line"), "{}", err.message);
        assert!(e.step(&rec(Op::Fence, 0, 0), 9).is_ok());
    }

    #[test]
    fn every_core_counter_of_a_region_is_its_end_value_minus_its_warm_up_value() {
        let c = |base: u64| CoreStats {
            records: base + 1,
            reads: base + 2,
            writes: base + 3,
            fences: base + 4,
            flushes: base + 5,
            instructions: base + 6,
            llc_misses: base + 7,
            memory_writes_issued: base + 8,
            mlp_stall_cycles: base + 9,
            fence_stall_cycles: base + 10,
            unprotected_reads: base + 11,
            unprotected_writes: base + 12,
        };
        let region = c(100).since(&c(10));
        let ninety = CoreStats {
            records: 90,
            reads: 90,
            writes: 90,
            fences: 90,
            flushes: 90,
            instructions: 90,
            llc_misses: 90,
            memory_writes_issued: 90,
            mlp_stall_cycles: 90,
            fence_stall_cycles: 90,
            unprotected_reads: 90,
            unprotected_writes: 90,
        };
        assert_eq!(region, ninety);
    }

    #[test]
    fn a_region_of_interest_lasts_from_the_warm_up_clock_to_the_end_clock() {
        // Fences with nothing to wait for cost only their instructions: (gap + 1) cycles at IPC 1.
        let mut e = engine();
        e.step(&Record::fence(99), 0).unwrap();
        let start = e.roi_start();
        assert_eq!((e.now(), start.cycle), (Cycle(100), Cycle(100)));
        e.step(&Record::fence(199), 1).unwrap();
        let region = e.snapshot().since(&start);
        assert_eq!(region.cycle, Cycle(200));
        assert_eq!((region.core.records, region.core.fences, region.core.instructions), (1, 1, 200));
    }

    #[test]
    fn an_access_may_end_at_the_last_byte_of_memory_but_not_beyond() {
        let mut e = engine();
        let end = 32u64 << 30; // memory.capacity_gib = 32
        assert!(e.step(&Record::read(end - 64, 0), 0).is_ok());
        let err = e.step(&Record::read(end, 0), 1).unwrap_err();
        assert!(err.message.contains("beyond the 34359738368 bytes"), "{}", err.message);
    }

    #[test]
    fn the_design_context_counts_every_hierarchy_line_and_metadata_block() {
        let ctx = design_context(&engine().cfg);
        // 64 KiB + 2 MiB + 16 MiB of 64 B lines; 256 + 512 + 256 KiB of metadata blocks.
        assert_eq!(ctx.hierarchy_lines, 1024 + 32768 + 262144);
        assert_eq!(ctx.metadata_lines, 4096 + 8192 + 4096);
    }

    #[test]
    fn the_device_holds_the_data_its_metadata_and_the_drain_vault_in_whole_gib() {
        use secmem_media::MemoryPort;
        // 32 GiB of data, 0.5 GiB of counters (64 B per 4 KiB page), 4 GiB of 64-bit MACs, an
        // 8-ary tree of ~77 MB and a vault of ~25 MB for 312 320 lines: 36.6 GiB, so 37.
        assert_eq!(build_media(&engine().cfg).unwrap().capacity_bytes(), 37 << 30);
    }

    #[test]
    fn instructions_retire_at_the_configured_ipc_with_fractions_carried_over() {
        let mut e = engine_with(&["core.ipc=2"]);
        e.step(&Record::fence(99), 0).unwrap();
        assert_eq!(e.now(), Cycle(50), "100 instructions at IPC 2");
        // At IPC 4 a lone instruction is a quarter cycle: the fourth completes the first cycle.
        let mut e = engine_with(&["core.ipc=4"]);
        let mut clock = vec![];
        for i in 0..5 {
            e.step(&Record::fence(0), i).unwrap();
            clock.push(e.now().0);
        }
        assert_eq!(clock, [0, 0, 0, 1, 1]);
    }

    #[test]
    fn an_access_not_aligned_to_its_own_size_is_an_error_when_alignment_is_required() {
        let mut e = engine();
        let rec = |addr, size_bytes| Record { op: Op::Read, addr, size_bytes, inst_gap: 0, data: None };
        assert!(e.step(&rec(0x1008, 8), 0).is_ok());
        for (i, (addr, size)) in [(0x1004, 8), (0x1000, 48)].into_iter().enumerate() {
            let err = e.step(&rec(addr, size), 1 + i as u64).unwrap_err();
            assert!(err.message.contains("not naturally aligned"), "{size} B at {addr:#x}: {}", err.message);
        }
    }

    #[test]
    fn a_store_without_data_writes_the_line_and_sequence_pattern_in_functional_mode() {
        let mut e = engine_with(&["run.functional=true", "memory.capacity_gib=1"]);
        // Chunk i of the n-th store, as a little-endian u64:
        // line.rotate_left(17) ^ n * 0x9E37_79B9_7F4A_7C15 ^ i * 0xD6E8_FEB8_6659_FD93.
        let chunks = |d: [u8; 64]| -> Vec<u64> { d.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect() };
        e.step(&Record::write(5 << 6, 0), 0).unwrap();
        let first = chunks(e.hier.cached_data(5).unwrap());
        assert_eq!(first[..2], [0x9e37_79b9_7f40_7c15, 0x48df_8701_1919_8186]);
        e.step(&Record::write(5 << 6, 0), 1).unwrap();
        let second = chunks(e.hier.cached_data(5).unwrap());
        assert_eq!(second[..2], [0x3c6e_f372_fe9e_f82a, 0xea86_0dca_98c7_05b9]);
        for (i, c) in second.iter().enumerate() {
            let n = 2u64;
            assert_eq!(*c, 5u64.rotate_left(17) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93));
        }
    }

    #[test]
    fn at_memory_level_a_read_is_a_miss_a_write_is_posted_and_a_fence_waits_for_it() {
        // No security, no ADR: a write is persistent when its array write ends. An idle PCM
        // read is 150 ns (600 cycles at 4 GHz) plus a 5 ns (20-cycle) burst; a write is the
        // burst and then 500 ns (2000 cycles) in the array.
        let mut e = engine_with(&["run.trace_level=memory", "security.enabled=false", "pcm.adr=false"]);
        e.step(&Record::read(0x1000, 0), 0).unwrap();
        assert_eq!(e.core_stats().llc_misses, 1);
        assert_eq!(e.snapshot().cycle, Cycle(1 + 620), "the run ends when the read returns");
        // Line-interleaved: line 0x41 is on the other channel, so the read is no obstacle.
        e.step(&Record::write(0x1040, 0), 1).unwrap(); // at cycle 2
        e.step(&Record::flush(0x1040, 0), 2).unwrap(); // only counted
        e.step(&Record::fence(0), 3).unwrap(); // at cycle 4
        let s = e.core_stats();
        assert_eq!((s.memory_writes_issued, s.flushes, s.fences), (1, 1, 1));
        assert_eq!(s.fence_stall_cycles, 2 + 2020 - 4);
        assert_eq!(e.now(), Cycle(2 + 2020));
    }

    #[test]
    fn settle_moves_the_clock_to_the_last_miss_and_stall_adds_its_cycles() {
        let mut e = engine_with(&["run.trace_level=memory", "security.enabled=false"]);
        e.step(&Record::read(0x1000, 0), 0).unwrap();
        assert_eq!(e.now(), Cycle(1));
        e.settle();
        assert_eq!(e.now(), Cycle(1 + 620), "an idle PCM read: 600 array + 20 burst cycles");
        e.stall(Cycle(100));
        assert_eq!(e.now(), Cycle(721));
    }

    #[test]
    fn quiesce_waits_until_a_write_held_in_the_wpq_is_in_the_array() {
        // Under ADR the write is persistent when the WPQ accepts it, at once: a fence does not
        // wait. The watermark policy keeps it queued; quiesce drains it: burst + array write.
        let mut e = engine_with(&["run.trace_level=memory", "security.enabled=false"]);
        e.step(&Record::write(0x1000, 0), 0).unwrap();
        e.step(&Record::fence(0), 1).unwrap();
        assert_eq!((e.now(), e.core_stats().fence_stall_cycles), (Cycle(2), 0));
        e.quiesce();
        assert_eq!(e.now(), Cycle(2 + 20 + 2000));
    }

    #[test]
    fn flush_hierarchy_writes_each_dirty_line_once_and_leaves_the_hierarchy_clean() {
        let mut e = engine();
        for (i, a) in [0x1000, 0x1040, 0x2000, 0x1000].into_iter().enumerate() {
            e.step(&Record::write(a, 0), i as u64).unwrap();
        }
        e.step(&Record::read(0x3000, 0), 4).unwrap();
        assert_eq!(e.flush_hierarchy(), Ok(3));
        assert_eq!(e.core_stats().memory_writes_issued, 3);
        assert!(e.hier.dirty_lines().is_empty());
        assert_eq!(e.flush_hierarchy(), Ok(0));
    }

    #[test]
    fn a_restored_line_is_cached_dirty_in_the_llc() {
        let mut e = engine();
        assert_eq!(e.restore_dirty_line(9, None), Ok(()));
        assert_eq!(e.hier.dirty_lines_with_level(), vec![(Writeback { line: 9, data: None }, Level::Llc)]);
        assert_eq!(e.core_stats().memory_writes_issued, 0, "an empty LLC displaces nothing");
    }

    #[test]
    fn finish_design_writes_the_dirty_counter_and_mac_blocks_back() {
        use secmem_media::TrafficClass;
        let mut e = engine();
        e.step(&Record::write(0x1000, 0), 0).unwrap();
        e.step(&Record::flush(0x1000, 0), 1).unwrap();
        let writes = |e: &Engine, c: TrafficClass| e.mc.snapshot().1.writes_by_class[c as usize];
        // The data write bumped a counter and replaced a MAC; both blocks sit dirty in the
        // metadata caches until the design makes its state durable.
        assert_eq!((writes(&e, TrafficClass::Counter), writes(&e, TrafficClass::Mac)), (0, 0));
        let done = e.finish_design().unwrap();
        assert_eq!((writes(&e, TrafficClass::Counter), writes(&e, TrafficClass::Mac)), (1, 1));
        assert!(done > e.now(), "the metadata writes take time: {done:?}");
    }

    #[test]
    fn a_non_temporal_store_drops_every_cached_copy_and_goes_to_memory() {
        let mut e = engine();
        e.step(&Record::write(0x1000, 0), 0).unwrap();
        e.store_non_temporal(0x40, None).unwrap();
        assert!(e.hier.l1.probe(0x40).is_none() && e.hier.l2.probe(0x40).is_none() && e.hier.llc.probe(0x40).is_none());
        let s = e.core_stats();
        assert_eq!((s.writes, s.instructions, s.memory_writes_issued), (2, 2, 1));
    }

    #[cfg(feature = "canaries")]
    #[test]
    fn canaries_switched_on_for_this_thread_reach_controllers_built_later() {
        let planted = secmem_schemes::Canaries { skip_root_check: true, ..Default::default() };
        super::set_test_canaries(planted);
        let e = engine_with(&["run.functional=true", "memory.capacity_gib=1"]);
        super::set_test_canaries(Default::default());
        assert_eq!(e.mc.func.as_ref().unwrap().canaries, planted);
        assert_eq!(super::test_canaries(), Default::default());
    }
}
