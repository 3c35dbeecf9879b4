//! Copy-on-write workloads of the Lelantus evaluation, driven through the OS model
//! (`crate::os`) by a generator API rather than a trace file (the trace format has no
//! process, fork or alloc records yet).
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
//!
//! The measured phase is a stats snapshot difference, as for trace runs; the JSON carries the
//! usual `stats` block plus `cycles`, `memory_writes`, `memory_reads` at top level.

use crate::config::Config;
use crate::os::{Os, OsError, PageSize};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use secmem_media::TrafficClass;
use serde_json::{json, Value};
use std::time::Instant;

/// Which workload.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CowWorkload {
    Forkbench,
    Redis,
    NonCopy,
    WriteAmp,
}

impl std::str::FromStr for CowWorkload {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "forkbench" => Ok(CowWorkload::Forkbench),
            "redis" => Ok(CowWorkload::Redis),
            "noncopy" => Ok(CowWorkload::NonCopy),
            "writeamp" => Ok(CowWorkload::WriteAmp),
            other => Err(format!("unknown CoW workload '{other}'; known: forkbench, redis, noncopy, writeamp")),
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
    /// Parent operations during the snapshot (redis).
    pub ops: u64,
    pub seed: u64,
}

impl CowSpec {
    pub fn validate(&self) -> Result<(), String> {
        let pb = self.page_size.bytes();
        if self.footprint_bytes == 0 || self.footprint_bytes % pb != 0 {
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

/// Runs a workload on `cfg` (its design, preset, mode); returns the JSON result.
pub fn run(cfg: &Config, spec: &CowSpec) -> Result<Value, OsError> {
    spec.validate().map_err(OsError)?;
    let start = Instant::now();
    let mut os = Os::new(cfg)?;
    let functional = cfg.run.functional;
    let data = |pid, va, seq| functional.then(|| content(pid, va, seq));
    let pb = spec.page_size.bytes();
    let pages = spec.footprint_bytes / pb;
    let lines_per = pb / 64;
    // Evenly spaced updated lines of a page (the paper spreads the child's writes uniformly).
    let stride = lines_per / spec.lines_per_page;
    os.alloc(0, BASE_VADDR, spec.footprint_bytes, spec.page_size)?;
    let mut seq = 0u64;
    // Initialisation, then every dirty line is written back: the measured phase starts from
    // memory holding the data set (the paper fast-forwards past initialisation), so the
    // parent's initialisation writes are not charged to the child, for any scheme.
    let init = |os: &mut Os, seq: &mut u64| -> Result<(), OsError> {
        for l in 0..spec.footprint_bytes / 64 {
            *seq += 1;
            let va = BASE_VADDR + l * 64;
            os.store(0, va, data(0, va, *seq))?;
        }
        os.engine.flush_hierarchy()?;
        // The data set is in memory before the measured phase starts: the write-back above
        // must not still be queued in the device when the child's first access arrives.
        os.engine.quiesce();
        Ok(())
    };
    let mut logical = 0u64;
    let (warm, warm_extra) = match spec.workload {
        CowWorkload::Forkbench | CowWorkload::WriteAmp | CowWorkload::NonCopy => {
            init(&mut os, &mut seq)?;
            let pid = if spec.workload == CowWorkload::NonCopy { 0 } else { os.fork(0)? };
            let warm = (os.engine.snapshot(), os.engine.design.extra_stats(), os.stats.clone());
            for p in 0..pages {
                for k in 0..spec.lines_per_page {
                    seq += 1;
                    let va = BASE_VADDR + p * pb + k * stride * 64;
                    os.store(pid, va, data(pid, va, seq))?;
                    logical += 1;
                }
            }
            (warm.0, (warm.1, warm.2))
        }
        CowWorkload::Redis => {
            init(&mut os, &mut seq)?;
            let child = os.fork(0)?;
            let warm = (os.engine.snapshot(), os.engine.design.extra_stats(), os.stats.clone());
            let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
            let total_lines = spec.footprint_bytes / 64;
            let per_op = total_lines.div_ceil(spec.ops.max(1));
            let mut next_child = 0u64;
            for _ in 0..spec.ops {
                let va = BASE_VADDR + rng.gen_range(0..total_lines) * 64;
                if rng.gen_bool(0.5) {
                    seq += 1;
                    os.store(0, va, data(0, va, seq))?;
                    logical += 1;
                } else {
                    os.load(0, va)?;
                }
                for _ in 0..per_op {
                    if next_child < total_lines {
                        os.load(child, BASE_VADDR + next_child * 64)?;
                        next_child += 1;
                    }
                }
            }
            while next_child < total_lines {
                os.load(child, BASE_VADDR + next_child * 64)?;
                next_child += 1;
            }
            (warm.0, (warm.1, warm.2))
        }
    };
    os.engine.settle();
    let end = os.engine.snapshot();
    let roi = end.since(&warm);
    // Design counters over the measured phase (rates recomputed from the differences).
    let end_extra = os.engine.design.extra_stats();
    let mut extra: Vec<(&'static str, f64)> =
        end_extra.iter().zip(warm_extra.0.iter()).map(|((k, v), (_, w))| (*k, v - w)).collect();
    let get = |x: &[(&'static str, f64)], k: &str| x.iter().find(|e| e.0 == k).map_or(0.0, |e| e.1);
    let ovf = get(&extra, "cow_overflows");
    let (hits, misses) = (get(&extra, "cow_cache_hits"), get(&extra, "cow_cache_misses"));
    for e in extra.iter_mut() {
        match e.0 {
            "overflows_per_million_writes" => e.1 = if roi.core.memory_writes_issued == 0 { 0.0 } else { ovf * 1e6 / roi.core.memory_writes_issued as f64 },
            "cow_cache_miss_rate" => e.1 = if hits + misses == 0.0 { 0.0 } else { misses / (hits + misses) },
            _ => {}
        }
    }
    let stats = crate::report::stats(cfg, &roi, &extra);
    let w = &roi.media.writes_by_class;
    let data_writes = w[TrafficClass::Data as usize] + w[TrafficClass::Design as usize];
    let os_delta = {
        let (a, b) = (&os.stats, &warm_extra.1);
        json!({
            "zero_faults": a.zero_faults - b.zero_faults, "cow_faults": a.cow_faults - b.cow_faults,
            "reuse_faults": a.reuse_faults - b.reuse_faults, "kernel_lines": a.kernel_lines - b.kernel_lines,
            "page_commands": a.page_commands - b.page_commands,
            "materialize_commands": a.materialize_commands - b.materialize_commands,
        })
    };
    Ok(json!({
        "workload": format!("{:?}", spec.workload).to_lowercase(),
        "scheme": cfg.run.design,
        "page_size": if spec.page_size == PageSize::Huge { "2m" } else { "4k" },
        "footprint_bytes": spec.footprint_bytes,
        "lines_per_page": spec.lines_per_page,
        "ops": spec.ops,
        "functional": functional,
        "cycles": roi.cycle.0,
        "memory_writes": w.iter().sum::<u64>(),
        "memory_reads": roi.media.reads_by_class.iter().sum::<u64>(),
        "data_line_writes": data_writes,
        "logical_line_writes": logical,
        "write_amplification": if logical == 0 { 0.0 } else { data_writes as f64 / logical as f64 },
        "os": os_delta,
        "stats": stats,
        "records": os.records(),
        "wall_time_s": start.elapsed().as_secs_f64(),
    }))
}
