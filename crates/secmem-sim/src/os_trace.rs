//! Driving the OS memory model (`crate::os`) with OS-level trace records (trace format v2):
//! process-tagged virtual loads and stores, `alloc`, `free`, `fork`, `exit`, `wbnoinvd` and the
//! region-of-interest marker. The CoW workloads (`crate::cow_workloads`) emit the same records
//! and run through this driver too, so a workload run directly and the same workload written
//! as a trace and replayed take one code path.
//!
//! Pids are the trace's own numbers (0..=`MAX_PID`): pid 0 exists from the start, every other
//! process from the `fork` that names it, until its `exit` (after which the number may be
//! reused, as Linux does). The driver maps them to the model's processes, and checks each
//! request before the model acts (unknown pid, unmapped address, overlapping allocation, a
//! free that would split a huge page), so errors speak of the trace's pids and addresses.
//!
//! Statistics cover the region of interest: from the `roi` record (or after
//! `run.warmup_requests` trace records, or from the start) to the end.

use crate::config::Config;
use crate::engine::{RecordError, Snapshot};
use crate::os::{Os, OsError, OsStats, PageSize};
use crate::report;
use crate::run::SimError;
use rustc_hash::FxHashMap;
use secmem_core::error::ConfigError;
use secmem_media::TrafficClass;
use secmem_trace::{Event, TraceError};
use serde_json::{json, Value};
use std::time::Instant;

/// Counters at the start of the region of interest.
struct Warm {
    snap: Snapshot,
    extra: Vec<(&'static str, f64)>,
    os: OsStats,
}

/// What the region of interest measured.
pub struct Measured {
    pub roi: Snapshot,
    /// The design's counters over the region (rates recomputed from the differences).
    pub extra: Vec<(&'static str, f64)>,
    /// The OS model's counters over the region, and the write amplification (JSON object).
    pub os: Value,
    /// Memory writes of data lines (data and design classes) over the region.
    pub data_line_writes: u64,
    /// Stores of the trace in the region (the lines the program itself wrote).
    pub logical_line_writes: u64,
    /// Accesses sent through the engine (workload and kernel), whole run.
    pub engine_records: u64,
}

/// The OS model plus the trace's pid table.
pub struct OsDriver {
    pub os: Os,
    pids: FxHashMap<u32, usize>,
    /// Stores keep the bytes the trace gives them: in functional mode, and for a design that
    /// decides on line contents (`DesignEntry::needs_line_contents`).
    keep_data: bool,
    warm: Warm,
    /// Index of the `roi` record, once seen.
    roi_at: Option<u64>,
    stores_in_roi: u64,
    /// Core cycles spent applying each trace pid's loads and stores (faults and kernel copies
    /// included) since the region of interest began. With one simulated core, interleaved
    /// processes share one clock; this splits it, so a workload measured per process (Redis'
    /// parent serving requests while a snapshot child runs, Lelantus V-D) can be.
    cycles_by_pid: std::collections::BTreeMap<u32, u64>,
    /// Records applied so far.
    applied: u64,
    /// The drive of the trace's I/O records, from the first one.
    pub storage: Option<crate::io::blocking::BlockingIo>,
    /// The run's config (the drive's and the I/O path's settings).
    cfg: Box<Config>,
}

fn err(m: impl Into<String>) -> OsError { OsError(m.into()) }

impl OsDriver {
    /// A fresh OS (process 0, nothing mapped) over a fresh engine for `cfg`.
    pub fn new(cfg: &Config) -> Result<OsDriver, OsError> {
        let os = Os::new(cfg)?;
        let warm = Warm { snap: os.engine.roi_start(), extra: os.engine.design_stats(), os: os.stats.clone() };
        let mut pids = FxHashMap::default();
        pids.insert(0, 0);
        Ok(OsDriver {
            os,
            pids,
            keep_data: cfg.run.functional || secmem_schemes::designs::entry(&cfg.run.design).is_ok_and(|d| d.needs_line_contents),
            warm,
            roi_at: None,
            stores_in_roi: 0,
            cycles_by_pid: Default::default(),
            applied: 0,
            storage: None,
            cfg: Box::new(cfg.clone()),
        })
    }

    /// Statistics start now.
    pub fn start_roi(&mut self) {
        self.warm = Warm { snap: self.os.engine.roi_start(), extra: self.os.engine.design_stats(), os: self.os.stats.clone() };
        self.stores_in_roi = 0;
        self.cycles_by_pid.clear();
    }

    fn pid(&self, pid: u32) -> Result<usize, OsError> {
        self.pids.get(&pid).copied().ok_or_else(|| {
            let mut live: Vec<u32> = self.pids.keys().copied().collect();
            live.sort_unstable();
            let live: Vec<String> = live.iter().map(|p| p.to_string()).collect();
            err(format!("unknown pid {pid} (live: {}; a process exists from the FORK that names it, pid 0 from the start)", if live.is_empty() { "none".into() } else { live.join(", ") }))
        })
    }

    /// A load or store (`what`) must touch 1 to 64 bytes of one 64 B line of a mapped page.
    fn check_access(&self, what: &str, pid: u32, p: usize, vaddr: u64, size: u16) -> Result<(), OsError> {
        if size == 0 {
            // As for a physical read or write: it used to fault the page in and count as a
            // store, though it changes nothing.
            return Err(err(format!("a {what} of 0 bytes touches nothing (only fences have size 0)")));
        }
        let size = size as u64;
        if vaddr % 64 + size > 64 {
            return Err(err(format!("access of {size} bytes at {vaddr:#x} crosses a 64-byte line (OS-level loads and stores stay within one line)")));
        }
        if self.os.page_of(p, vaddr).is_none() {
            return Err(err(format!("pid {pid}: virtual address {vaddr:#x} is not mapped (no ALLOC covers it)")));
        }
        Ok(())
    }

    /// Applies one record. Errors say what is wrong with it; callers add the record index.
    pub fn apply(&mut self, ev: &Event) -> Result<(), OsError> {
        let index = self.applied;
        self.applied += 1;
        match *ev {
            Event::Phys(ref r) => {
                // A physical access (a device or the kernel, bypassing translation).
                if r.op == secmem_trace::Op::Write {
                    self.os.before_physical_write(r)?;
                }
                self.os.engine.step(r, index)?;
            }
            Event::Load { pid, vaddr, size_bytes, inst_gap } => {
                let p = self.pid(pid)?;
                self.check_access("load", pid, p, vaddr, size_bytes)?;
                self.os.inst_gap = inst_gap;
                let t0 = self.os.engine.now();
                self.os.load(p, vaddr)?;
                *self.cycles_by_pid.entry(pid).or_default() += (self.os.engine.now() - t0).0;
            }
            Event::Store { pid, vaddr, size_bytes, inst_gap, data } => {
                let p = self.pid(pid)?;
                self.check_access("store", pid, p, vaddr, size_bytes)?;
                self.os.inst_gap = inst_gap;
                // Counting mode moves no bytes: a payload would be ignored downstream anyway.
                let t0 = self.os.engine.now();
                self.os.store(p, vaddr, data.filter(|_| self.keep_data))?;
                *self.cycles_by_pid.entry(pid).or_default() += (self.os.engine.now() - t0).0;
                self.stores_in_roi += 1;
            }
            Event::Alloc { pid, vaddr, length, page } => {
                let p = self.pid(pid)?;
                let pb = page.bytes();
                if length == 0 || vaddr % pb != 0 || length % pb != 0 {
                    return Err(err(format!("address {vaddr:#x} and length {length} must be non-zero multiples of the {} page", page.name())));
                }
                // All of the range must be free (a huge page would hide small ones).
                if let Some(v) = self.os.first_mapped(p, vaddr, length) {
                    let (key, size) = self.os.page_of(p, v).expect("a mapped address is in a page");
                    return Err(err(format!("pid {pid}: {v:#x} is already mapped (a {} page at {key:#x})", size.name())));
                }
                self.os.alloc(p, vaddr, length, page)?;
            }
            Event::Free { pid, vaddr, length } => {
                let p = self.pid(pid)?;
                if length == 0 || vaddr % 4096 != 0 || length % 4096 != 0 || vaddr.checked_add(length).is_none() {
                    return Err(err(format!("address {vaddr:#x} and length {length} must be non-zero multiples of 4096")));
                }
                // The first problem in address order: a huge page the range starts inside, an
                // unmapped address, or a huge page the range ends inside.
                let split = |key: u64| err(format!("pid {pid}: the range would split the 2 MB page at {key:#x} (freeing part of a huge page is not modelled)"));
                if let Some((key, PageSize::Huge)) = self.os.page_of(p, vaddr) {
                    if key < vaddr {
                        return Err(split(key));
                    }
                }
                let end_split = match self.os.page_of(p, vaddr + length - 1) {
                    Some((key, PageSize::Huge)) if key + PageSize::Huge.bytes() > vaddr + length => Some(key),
                    _ => None,
                };
                match (self.os.first_unmapped(p, vaddr, length), end_split) {
                    (Some(v), e) if e.is_none_or(|k| v < k) => return Err(err(format!("pid {pid}: virtual address {v:#x} is not mapped"))),
                    (_, Some(key)) => return Err(split(key)),
                    _ => {}
                }
                self.os.free(p, vaddr, length)?;
            }
            Event::Fork { parent, child } => {
                let p = self.pid(parent)?;
                if self.pids.contains_key(&child) {
                    return Err(err(format!("child pid {child} is already live")));
                }
                let c = self.os.fork(p)?;
                self.pids.insert(child, c);
            }
            Event::Exit { pid } => {
                let p = self.pid(pid)?;
                self.os.exit(p)?;
                self.pids.remove(&pid);
            }
            Event::WbNoInvd => {
                self.os.engine.flush_hierarchy()?;
            }
            Event::Io { pid, write, offset, bytes, inst_gap } => {
                self.pid(pid)?;
                let engine = &mut self.os.engine;
                if self.storage.is_none() {
                    let s = crate::io::blocking::BlockingIo::attach(&self.cfg, engine).map_err(|e| err(e.to_string()))?;
                    self.storage = Some(s);
                }
                // The instructions before the call, then the core waits for the I/O.
                engine.retire_instructions(inst_gap.saturating_add(1));
                let t0 = engine.now();
                let storage = self.storage.as_mut().expect("attached above");
                let done = storage.run(engine, write, offset, bytes, t0.0).map_err(|e| err(e.to_string()))?;
                engine.stall(secmem_core::Cycle(done - t0.0));
                *self.cycles_by_pid.entry(pid).or_default() += done - t0.0;
            }
            Event::RoiBegin => {
                if let Some(at) = self.roi_at {
                    return Err(err(format!("a second ROI record (the region of interest began at record {at})")));
                }
                self.roi_at = Some(index);
                // What came before is fast-forwarded: the measured region starts with the
                // device idle, so it does not pay for the earlier phase's queued writes (the
                // data set's write-back before a fork).
                self.os.engine.quiesce();
                self.start_roi();
            }
        }
        Ok(())
    }

    /// Index of the `roi` record, if one was applied.
    pub fn roi_record(&self) -> Option<u64> { self.roi_at }

    /// Lets the last misses complete and measures the region of interest.
    pub fn finish(&mut self) -> Measured {
        self.os.engine.settle();
        let end = self.os.engine.snapshot();
        let roi = end.since(&self.warm.snap);
        let end_extra = self.os.engine.design_stats();
        let mut extra: Vec<(&'static str, f64)> = end_extra.iter().zip(self.warm.extra.iter()).map(|((k, v), (_, w))| (*k, v - w)).collect();
        let get = |x: &[(&'static str, f64)], k: &str| x.iter().find(|e| e.0 == k).map_or(0.0, |e| e.1);
        let (ovf, cow_ovf) = (get(&extra, "overflows"), get(&extra, "cow_overflows"));
        let per_million = |n: f64| if roi.core.memory_writes_issued == 0 { 0.0 } else { n * 1e6 / roi.core.memory_writes_issued as f64 };
        let (hits, misses) = (get(&extra, "cow_cache_hits"), get(&extra, "cow_cache_misses"));
        for e in extra.iter_mut() {
            match e.0 {
                "overflows_per_million_writes" => e.1 = per_million(ovf),
                "cow_overflows_per_million_writes" => e.1 = per_million(cow_ovf),
                "cow_cache_miss_rate" => e.1 = if hits + misses == 0.0 { 0.0 } else { misses / (hits + misses) },
                _ => {}
            }
        }
        let w = &roi.media.writes_by_class;
        let data_line_writes = w[TrafficClass::Data as usize] + w[TrafficClass::Design as usize];
        let (a, b) = (&self.os.stats, &self.warm.os);
        let os = json!({
            "zero_faults": a.zero_faults - b.zero_faults, "cow_faults": a.cow_faults - b.cow_faults,
            "reuse_faults": a.reuse_faults - b.reuse_faults, "kernel_lines": a.kernel_lines - b.kernel_lines,
            "page_commands": a.page_commands - b.page_commands,
            "materialize_commands": a.materialize_commands - b.materialize_commands,
            "cycles_by_pid": self.cycles_by_pid.iter().map(|(k, v)| (k.to_string(), json!(v))).collect::<serde_json::Map<_, _>>(),
        });
        Measured { roi, extra, os, data_line_writes, logical_line_writes: self.stores_in_roi, engine_records: self.os.records() }
    }
}

impl Measured {
    /// Data lines written to memory per line the program stored (Lelantus Fig. 2).
    pub fn write_amplification(&self) -> f64 {
        if self.logical_line_writes == 0 { 0.0 } else { self.data_line_writes as f64 / self.logical_line_writes as f64 }
    }
}

/// An OS-level trace drives the OS model through the cache hierarchy: refuses a memory-level
/// config, naming the field.
pub(crate) fn require_core_level(cfg: &Config) -> Result<(), SimError> {
    if cfg.run.trace_level != crate::config::TraceLevel::Core {
        return Err(SimError::Config(ConfigError::new("run.trace_level", "an OS-level trace drives the OS model through the cache hierarchy: it needs run.trace_level = \"core\"")));
    }
    Ok(())
}

/// A driver for `cfg` as a run reports its failure: the OS model's only setup error is a
/// memory too small for it.
pub(crate) fn driver_for(cfg: &Config) -> Result<OsDriver, SimError> {
    OsDriver::new(cfg).map_err(|e| SimError::Config(ConfigError::new("memory.capacity_gib", e.0)))
}

/// Why a `roi` record is refused when `run.warmup_requests` (`warmup` > 0) is set too.
pub(crate) fn roi_conflict(warmup: u64) -> String {
    format!("the trace marks its region of interest and run.warmup_requests = {warmup} sets another; use one")
}

/// Runs an OS-level trace through the OS model; the usual report plus an `os` block (the OS
/// model's counters over the region of interest, logical and data line writes, write
/// amplification). Errors name the trace and the record index.
pub fn run_events(cfg: &Config, events: impl Iterator<Item = Result<Event, TraceError>>, trace_name: &str) -> Result<Value, SimError> {
    require_core_level(cfg)?;
    if cfg.run.flush_at_end {
        return Err(SimError::Config(secmem_core::ConfigError::new("run.flush_at_end", "is not supported for OS-level traces (their processes' lines stay in the caches as the OS model leaves them)")));
    }
    let start = Instant::now();
    let mut d = driver_for(cfg)?;
    let warmup = cfg.run.warmup_requests;
    let limit = if cfg.run.max_requests == 0 { u64::MAX } else { cfg.run.max_requests };
    let (mut n, mut interrupted) = (0u64, false);
    for ev in events {
        if n == limit {
            break;
        }
        if n.is_multiple_of(crate::interrupt::CHECK_EVERY) && crate::interrupt::requested() {
            interrupted = true;
            break;
        }
        let ev = ev?;
        let fail = |message: String| SimError::Record { trace: trace_name.to_string(), error: RecordError { index: n, message, integrity: None } };
        if warmup > 0 && ev == Event::RoiBegin {
            return Err(fail(format!("{ev}: {}", roi_conflict(warmup))));
        }
        d.apply(&ev).map_err(|e| fail(format!("{ev}: {e}")))?;
        n += 1;
        if n == warmup {
            d.start_roi();
        }
    }
    if interrupted && n <= warmup {
        return Err(SimError::Interrupted);
    }
    // As for physical traces: a region of interest with nothing in it would report all-zero
    // statistics as if they were a result.
    crate::run::ensure_roi_left(warmup, n)?;
    if d.roi_record().is_some_and(|at| at + 1 == n) {
        return Err(SimError::Record {
            trace: trace_name.to_string(),
            error: RecordError { index: n - 1, message: "the ROI record ends the trace: no region of interest is left to report".into(), integrity: None },
        });
    }
    let m = d.finish();
    let wall = start.elapsed().as_secs_f64();
    let stats = report::stats(cfg, &m.roi, &m.extra);
    let meta = report::meta(cfg, trace_name.to_string(), cfg.run.functional, n, wall);
    let mut rep = report::report(cfg, &meta, stats);
    if interrupted {
        rep["meta"]["interrupted"] = json!(true);
    }
    let mut os = m.os.clone();
    os["roi_record"] = json!(d.roi_record());
    os["logical_line_writes"] = json!(m.logical_line_writes);
    os["data_line_writes"] = json!(m.data_line_writes);
    os["write_amplification"] = json!(m.write_amplification());
    os["engine_records"] = json!(m.engine_records);
    rep["os"] = os;
    if let Some(s) = &d.storage {
        rep["io"] = s.report(&d.os.engine, cfg.core.freq_mhz);
    }
    if let Some(f) = d.os.engine.mc.func.as_ref() {
        rep["meta"]["event_log_hash"] = json!(format!("{:016x}", f.event_log_digest()));
        if let Some(v) = &f.reuse_violation {
            return Err(SimError::Integrity { trace: trace_name.to_string(), message: v.to_string() });
        }
    }
    Ok(rep)
}
