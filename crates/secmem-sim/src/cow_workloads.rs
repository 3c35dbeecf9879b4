//! Copy-on-write workloads of the Lelantus evaluation. Each workload is a stream of OS-level
//! trace records (format v2: alloc, process-tagged stores and loads, wbnoinvd, fork, roi) that
//! either drives the OS model (`crate::os`) directly through `crate::os_trace::OsDriver`
//! ([`run`]) or is written to a trace file ([`write_trace`]) for `secmem run` to replay
//! through the same driver, with the same counts.
//!
//! * `forkbench` (section V-D): the parent initialises `footprint_bytes`, forks; the child
//!   updates `lines_per_page` evenly spaced lines of every page (32 of 64 for 4 KB pages, 512
//!   of 32768 for 2 MB in Fig. 9; Fig. 11 sweeps it). Measured: the child's update phase.
//! * `redis` (Redis bgsave): the parent holds a data set, forks a snapshot child that reads
//!   the whole data set while the parent keeps serving `ops` seeded random sets and gets.
//!   Measured: that whole phase.
//! * `noncopy` (the non-copy control): forkbench without the fork: initialisation is skipped
//!   (not measured), then the same updates.
//! * `writeamp` (Fig. 2): forkbench with one line per page (`lines_per_page = 1`, "first
//!   write") or every line (the whole page); the report's `write_amplification` is the data
//!   lines written to memory over the lines the child wrote.
//! * `churn` (not in the paper: for crash and attack campaigns): `ops` seeded operations of up
//!   to four processes — allocations of 1 to `footprint_bytes / page` pages, stores, loads,
//!   forks, frees of whole allocations, exits and the odd `wbnoinvd` — so that zero fills,
//!   CoW copies, reuse faults, early reclamation (page_phyc) and page_free all happen, in
//!   every order. Measured: the whole run (it has no `roi` record).
//!
//! The measured phase starts at the `roi` record the workload emits (after the fork) and is a
//! stats snapshot difference, as for trace runs; the JSON carries the usual `stats` block plus
//! `cycles`, `memory_writes`, `memory_reads` at top level.

use crate::config::Config;
use crate::os::{OsError, PageSize};
use crate::os_trace::OsDriver;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use secmem_trace::{Event, Format, TraceError, TraceKind};
use serde_json::{json, Value};
use std::path::Path;
use std::time::Instant;

/// Which workload.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CowWorkload {
    Forkbench,
    Redis,
    NonCopy,
    WriteAmp,
    Churn,
}

impl std::str::FromStr for CowWorkload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "forkbench" => Ok(CowWorkload::Forkbench),
            "redis" => Ok(CowWorkload::Redis),
            "noncopy" => Ok(CowWorkload::NonCopy),
            "writeamp" => Ok(CowWorkload::WriteAmp),
            "churn" => Ok(CowWorkload::Churn),
            other => Err(format!("unknown CoW workload '{other}'; known: forkbench, redis, noncopy, writeamp, churn")),
        }
    }
}

/// A CoW workload run.
#[derive(Clone, Debug)]
pub struct CowSpec {
    pub workload: CowWorkload,
    pub page_size: PageSize,
    /// Bytes the parent allocates and initialises.
    pub footprint_bytes: u64,
    /// Lines the child updates per page (forkbench, noncopy, writeamp).
    pub lines_per_page: u64,
    /// Parent operations during the snapshot (redis); operations in all (churn).
    pub ops: u64,
    pub seed: u64,
}

impl CowSpec {
    pub fn validate(&self) -> Result<(), String> {
        let pb = self.page_size.bytes();
        if self.footprint_bytes == 0 || !self.footprint_bytes.is_multiple_of(pb) {
            return Err(format!("footprint_bytes must be a non-zero multiple of the {pb}-byte page, got {}", self.footprint_bytes));
        }
        let lines = pb / 64;
        if self.lines_per_page == 0 || self.lines_per_page > lines {
            return Err(format!("lines_per_page must be 1..={lines} for {pb}-byte pages, got {}", self.lines_per_page));
        }
        Ok(())
    }
}

const BASE_VADDR: u64 = 1 << 40;

/// Deterministic content for a store in functional mode (tests check it against an oracle).
fn content(pid: usize, vaddr: u64, seq: u64) -> [u8; 64] {
    let mut out = [0u8; 64];
    for (i, c) in out.chunks_exact_mut(8).enumerate() {
        let v = vaddr.rotate_left(13) ^ (pid as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seq.wrapping_mul(0xD6E8_FEB8_6659_FD93) ^ i as u64;
        c.copy_from_slice(&v.to_le_bytes());
    }
    out
}

/// Non-memory instructions before each of the workload's loads and stores (the OS model's
/// default gap).
const INST_GAP: u32 = 10;

/// The workload as OS-level trace records, in order, handed to `sink`. With `with_data`,
/// stores carry their line content (for functional mode). Pid 0 is the parent, pid 1 the
/// forked child.
pub fn emit(spec: &CowSpec, with_data: bool, sink: &mut dyn FnMut(Event) -> Result<(), OsError>) -> Result<(), OsError> {
    spec.validate().map_err(OsError)?;
    let store = |pid: u32, va: u64, seq: u64| store_event(pid, va, seq, with_data);
    if spec.workload == CowWorkload::Churn {
        return emit_churn(spec, with_data, sink);
    }
    let pb = spec.page_size.bytes();
    let pages = spec.footprint_bytes / pb;
    let lines_per = pb / 64;
    // Evenly spaced updated lines of a page (the paper spreads the child's writes uniformly).
    let stride = lines_per / spec.lines_per_page;
    let page = spec.page_size;
    sink(Event::Alloc { pid: 0, vaddr: BASE_VADDR, length: spec.footprint_bytes, page })?;
    // Initialisation, then every dirty line is written back: the measured phase starts from
    // memory holding the data set (the paper fast-forwards past initialisation), so the
    // parent's initialisation writes are not charged to the child, for any scheme.
    let mut seq = 0u64;
    for l in 0..spec.footprint_bytes / 64 {
        seq += 1;
        sink(store(0, BASE_VADDR + l * 64, seq))?;
    }
    sink(Event::WbNoInvd)?;
    match spec.workload {
        CowWorkload::Forkbench | CowWorkload::WriteAmp | CowWorkload::NonCopy => {
            let pid = if spec.workload == CowWorkload::NonCopy {
                0
            } else {
                sink(Event::Fork { parent: 0, child: 1 })?;
                1
            };
            sink(Event::RoiBegin)?;
            for p in 0..pages {
                for k in 0..spec.lines_per_page {
                    seq += 1;
                    sink(store(pid, BASE_VADDR + p * pb + k * stride * 64, seq))?;
                }
            }
        }
        CowWorkload::Churn => unreachable!("emitted by emit_churn"),
        CowWorkload::Redis => {
            sink(Event::Fork { parent: 0, child: 1 })?;
            sink(Event::RoiBegin)?;
            let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
            let total_lines = spec.footprint_bytes / 64;
            let per_op = total_lines.div_ceil(spec.ops.max(1));
            let mut next_child = 0u64;
            for _ in 0..spec.ops {
                let va = BASE_VADDR + rng.gen_range(0..total_lines) * 64;
                if rng.gen_bool(0.5) {
                    seq += 1;
                    sink(store(0, va, seq))?;
                } else {
                    sink(load(0, va))?;
                }
                for _ in 0..per_op {
                    if next_child < total_lines {
                        sink(load(1, BASE_VADDR + next_child * 64))?;
                        next_child += 1;
                    }
                }
            }
            while next_child < total_lines {
                sink(load(1, BASE_VADDR + next_child * 64))?;
                next_child += 1;
            }
        }
    }
    Ok(())
}

/// A workload's 64 B store by `pid` at `va`, its `seq`-th; with `with_data` it carries its
/// content.
fn store_event(pid: u32, va: u64, seq: u64, with_data: bool) -> Event {
    Event::Store { pid, vaddr: va, size_bytes: 64, inst_gap: INST_GAP, data: with_data.then(|| content(pid as usize, va, seq)) }
}

/// A workload's 64 B load by `pid` at `va`.
fn load(pid: u32, va: u64) -> Event { Event::Load { pid, vaddr: va, size_bytes: 64, inst_gap: INST_GAP } }

/// Most live processes of the churn (a fork beyond them is skipped).
const CHURN_PROCESSES: usize = 4;

/// The `churn` workload (see the module docs). Every record is valid for the OS model: the
/// generator tracks each process's allocations, and allocations sit `footprint_bytes` apart
/// (never overlapping, in any process).
fn emit_churn(spec: &CowSpec, with_data: bool, sink: &mut dyn FnMut(Event) -> Result<(), OsError>) -> Result<(), OsError> {
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let pb = spec.page_size.bytes();
    let max_pages = spec.footprint_bytes / pb;
    let page = spec.page_size;
    // Live (pid, allocations as (vaddr, pages)).
    let mut procs: Vec<(u32, Vec<(u64, u64)>)> = vec![(0, Vec::new())];
    let (mut next_pid, mut next_region, mut seq) = (1u32, 0u64, 0u64);
    let mut alloc = |pid: u32, maps: &mut Vec<(u64, u64)>, rng: &mut ChaCha8Rng, sink: &mut dyn FnMut(Event) -> Result<(), OsError>| {
        let n = rng.gen_range(1..=max_pages);
        let vaddr = BASE_VADDR + next_region * spec.footprint_bytes;
        next_region += 1;
        maps.push((vaddr, n));
        sink(Event::Alloc { pid, vaddr, length: n * pb, page })
    };
    alloc(0, &mut procs[0].1, &mut rng, sink)?;
    for _ in 0..spec.ops {
        let p = rng.gen_range(0..procs.len());
        let pid = procs[p].0;
        let roll = rng.gen_range(0..100);
        // A line of one of the process's allocations.
        let line_of = |maps: &[(u64, u64)], rng: &mut ChaCha8Rng| {
            let (vaddr, n) = maps[rng.gen_range(0..maps.len())];
            vaddr + rng.gen_range(0..n * pb / 64) * 64
        };
        if procs[p].1.is_empty() || roll < 4 {
            alloc(pid, &mut procs[p].1, &mut rng, sink)?;
        } else if roll < 70 {
            let va = line_of(&procs[p].1, &mut rng);
            seq += 1;
            sink(store_event(pid, va, seq, with_data))?;
        } else if roll < 85 {
            let va = line_of(&procs[p].1, &mut rng);
            sink(load(pid, va))?;
        } else if roll < 90 {
            if procs.len() < CHURN_PROCESSES {
                let child = next_pid;
                next_pid += 1;
                let maps = procs[p].1.clone();
                procs.push((child, maps));
                sink(Event::Fork { parent: pid, child })?;
            }
        } else if roll < 95 {
            let i = rng.gen_range(0..procs[p].1.len());
            let (vaddr, n) = procs[p].1.remove(i);
            sink(Event::Free { pid, vaddr, length: n * pb })?;
        } else if roll < 98 && pid != 0 {
            procs.remove(p);
            sink(Event::Exit { pid })?;
        } else {
            sink(Event::WbNoInvd)?;
        }
    }
    Ok(())
}

/// Writes the workload as an OS-level (v2) trace in `format`; stores carry data with
/// `with_data`. Returns the record count.
pub fn write_trace(spec: &CowSpec, path: &Path, format: Format, with_data: bool) -> Result<u64, String> {
    spec.validate()?;
    let name = path.display().to_string();
    let f = std::fs::File::create(path).map_err(|e| format!("{name}: cannot create: {e}"))?;
    let mut w = secmem_trace::EventWriter::new(f, name, format, TraceKind::V2_OS).map_err(|e| e.to_string())?;
    let mut write_err: Option<TraceError> = None;
    let r = emit(spec, with_data, &mut |ev| {
        w.write(&ev).map_err(|e| {
            let m = OsError(e.to_string());
            write_err = Some(e);
            m
        })
    });
    if let Some(e) = write_err {
        return Err(e.to_string());
    }
    r.map_err(|e| e.0)?;
    w.finish().map_err(|e| e.to_string())
}

/// Runs a workload on `cfg` (its design, preset, mode); returns the JSON result.
pub fn run(cfg: &Config, spec: &CowSpec) -> Result<Value, OsError> {
    spec.validate().map_err(OsError)?;
    // The same refusal as for the workload's trace (`secmem run --trace`): a memory-level
    // config would send the processes' loads and stores past the caches, a run no trace of
    // this workload may make.
    crate::os_trace::require_core_level(cfg).map_err(|e| OsError(e.to_string()))?;
    // The workload runs whole and marks its own region of interest (its trace's ROI record):
    // these were ignored without a word, while `run --trace` of the same workload stops after
    // run.max_requests records and refuses a warm-up beside the ROI.
    if cfg.run.warmup_requests > 0 {
        return Err(secmem_core::ConfigError::new(
            "run.warmup_requests",
            format!("the workload marks its own region of interest (what it measures); run.warmup_requests = {} would set another: leave it 0", cfg.run.warmup_requests),
        )
        .into());
    }
    if cfg.run.max_requests > 0 {
        return Err(secmem_core::ConfigError::new(
            "run.max_requests",
            format!("a copy-on-write workload runs whole; run.max_requests = {} would cut it (write it with `trace gen` and cut that trace with `run --trace`)", cfg.run.max_requests),
        )
        .into());
    }
    let start = Instant::now();
    let mut d = OsDriver::new(cfg)?;
    // The parent writes its whole footprint: one that cannot fit would only fail (or, large
    // enough, run for minutes) at the first page past the end.
    if spec.footprint_bytes > d.os.free_bytes() {
        return Err(OsError(format!(
            "footprint_bytes {} is more than the {} bytes of memory the OS model can give out (memory.capacity_gib = {})",
            spec.footprint_bytes,
            d.os.free_bytes(),
            cfg.memory.capacity_gib
        )));
    }
    let mut index = 0u64;
    emit(spec, cfg.run.functional, &mut |ev| {
        d.apply(&ev).map_err(|e| OsError(format!("record {index} ({ev}): {e}")))?;
        index += 1;
        Ok(())
    })?;
    let m = d.finish();
    let stats = crate::report::stats(cfg, &m.roi, &m.extra);
    let w = &m.roi.media.writes_by_class;
    Ok(json!({
        "workload": format!("{:?}", spec.workload).to_lowercase(),
        "scheme": cfg.run.design,
        "page_size": spec.page_size.name(),
        "footprint_bytes": spec.footprint_bytes,
        "lines_per_page": spec.lines_per_page,
        "ops": spec.ops,
        "functional": cfg.run.functional,
        "cycles": m.roi.cycle.0,
        // The parent's (trace pid 0) own core time in the measured phase (see OsDriver).
        "parent_cycles": m.os["cycles_by_pid"].get("0").and_then(|v| v.as_u64()).unwrap_or(0),
        "memory_writes": w.iter().sum::<u64>(),
        "memory_reads": m.roi.media.reads_by_class.iter().sum::<u64>(),
        "data_line_writes": m.data_line_writes,
        "logical_line_writes": m.logical_line_writes,
        "write_amplification": m.write_amplification(),
        "os": m.os,
        "stats": stats,
        "records": m.engine_records,
        "wall_time_s": start.elapsed().as_secs_f64(),
    }))
}
