//! Fixed benchmark scenarios for `secmem bench`. Each runs in its own process (the Python
//! front end spawns one per scenario) so that `peak_rss_bytes` is that scenario's alone.
//!
//! Records come straight from the seeded generator (no trace file), so the figure is the
//! simulator's speed, counting/timing mode unless named otherwise, one core, in two units:
//! `requests_per_s`, trace records per wall-clock second, and `llc_requests_per_s`, LLC-level
//! requests (the LLC's misses and write-backs: what reaches the memory controller) per
//! wall-clock second. At memory level (`run.trace_level = "memory"`) the two are the same;
//! a core-level record that misses every cache is one LLC-level request plus the dirty
//! write-back its fill causes, if any.

use crate::config::Config;
use crate::run::{run_records, workload_generator, SimError};
use serde::Serialize;
use std::time::Instant;

#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    pub requests_per_s: f64,
    pub peak_rss_bytes: u64,
    pub records: u64,
    pub wall_time_s: f64,
    /// Requests that reached the memory controller: LLC misses plus LLC write-backs (the
    /// scenarios that run a trace through the engine; absent for the others, whose unit is
    /// not a request).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llc_requests: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub llc_requests_per_s: Option<f64>,
    /// Host threads the run used (the engine scenarios): 2 for a functional run split into a
    /// timing half and a functional half (`run.host_threads`), else 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_threads: Option<u32>,
}

impl BenchResult {
    /// A figure in units of `records` (no LLC-level count).
    fn of(records: u64, wall_time_s: f64) -> BenchResult {
        BenchResult {
            requests_per_s: records as f64 / wall_time_s,
            peak_rss_bytes: peak_rss_bytes(),
            records,
            wall_time_s,
            llc_requests: None,
            llc_requests_per_s: None,
            host_threads: None,
        }
    }
}

pub struct Scenario {
    pub name: &'static str,
    pub description: &'static str,
    pub preset: &'static str,
    pub overrides: &'static [&'static str],
}

const TEN_M: &str = "workload.requests=10000000";

pub const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "secure-lazy-random",
        description: "secure baseline, lazy update, 10 M uniform random requests over 8 GiB (horus preset, 32 GiB PCM)",
        preset: "horus",
        overrides: &[TEN_M, "workload.pattern=random", "workload.footprint_bytes=8589934592"],
    },
    Scenario {
        name: "secure-lazy-random-virtual",
        description: "secure-lazy-random's trace taken as virtual addresses: each 4 KB page placed on a random frame on first touch (the cost of translation, against secure-lazy-random)",
        preset: "horus",
        overrides: &[TEN_M, "workload.pattern=random", "workload.footprint_bytes=8589934592", "translation.addresses=virtual"],
    },
    Scenario {
        name: "secure-lazy-random-virtual-sequential",
        description: "secure-lazy-random-virtual with frames in first-touch order: the 8 GiB footprint stays 8 GiB of frames, so against secure-lazy-random this is translation's own cost",
        preset: "horus",
        overrides: &[TEN_M, "workload.pattern=random", "workload.footprint_bytes=8589934592", "translation.addresses=virtual", "translation.placement=sequential"],
    },
    Scenario {
        name: "secure-lazy-sequential",
        description: "secure baseline, lazy update, 10 M sequential requests over 8 GiB",
        preset: "horus",
        overrides: &[TEN_M, "workload.pattern=sequential", "workload.footprint_bytes=8589934592"],
    },
    Scenario {
        name: "nonsecure-random",
        description: "non-secure mode on the same path, 10 M uniform random requests over 8 GiB",
        preset: "horus",
        overrides: &[TEN_M, "workload.pattern=random", "workload.footprint_bytes=8589934592", "security.enabled=false"],
    },
    Scenario {
        name: "nonsecure-sequential",
        description: "non-secure mode, 10 M sequential requests over 8 GiB",
        preset: "horus",
        overrides: &[TEN_M, "workload.pattern=sequential", "workload.footprint_bytes=8589934592", "security.enabled=false"],
    },
    Scenario {
        name: "functional-random",
        description: "functional mode (real AES-CTR, MACs, tree hashes) on the secure-lazy-random trace",
        preset: "horus",
        overrides: &[TEN_M, "workload.pattern=random", "workload.footprint_bytes=8589934592", "run.functional=true"],
    },
    Scenario {
        name: "aes-ctr-limit",
        description: "this machine's AES-128-CTR rate: 64 B line pads per second, batched (requests_per_s = lines/s)",
        preset: "default",
        overrides: &[],
    },
    Scenario {
        name: "lelantus-forkbench-2m",
        description: "Lelantus forkbench on 2 MB pages: 16 MB initialised, fork, the child updates 512 lines per huge page (lelantus preset, counting mode; requests = OS-model accesses)",
        preset: "lelantus",
        overrides: &["run.design=\"lelantus\""],
    },
    Scenario {
        name: "secure-lazy-random-32gib",
        description: "memory check: secure baseline, 10 M uniform random requests over the whole 32 GiB NVM",
        preset: "horus",
        overrides: &[TEN_M, "workload.pattern=random", "workload.footprint_bytes=34359738368"],
    },
    Scenario {
        name: "secure-lazy-random-memory-level",
        description: "secure-lazy-random's records given straight to the memory controller (run.trace_level = memory): each record is one LLC-level request, as in a Ramulator or DRAMSim3 memory trace; reads are misses, writes are write-backs",
        preset: "horus",
        overrides: &[TEN_M, "workload.pattern=random", "workload.footprint_bytes=8589934592", "run.trace_level=\"memory\""],
    },
    Scenario {
        name: "secure-lazy-sequential-memory-level",
        description: "secure-lazy-sequential's records given straight to the memory controller (run.trace_level = memory)",
        preset: "horus",
        overrides: &[TEN_M, "workload.pattern=sequential", "workload.footprint_bytes=8589934592", "run.trace_level=\"memory\""],
    },
    Scenario {
        name: "champsim-read-xz",
        description: "reading a ChampSim trace: 10 M load/store records from about 25 M seeded 64-byte input_instr records, xz-compressed as in the DPC-3 corpus (decompression included; requests_per_s = records read/s)",
        preset: "default",
        overrides: &[],
    },
    Scenario {
        name: "champsim-read",
        description: "champsim-read-xz's trace stored uncompressed: the ChampSim reader's own speed, without xz decoding (requests_per_s = records read/s)",
        preset: "default",
        overrides: &[],
    },
    Scenario {
        name: "data-trace-read",
        description: "reading a data-carrying binary trace: 10 M records, 40% writes whose compact payloads mix zeros, small integers, repeated pointers and unique lines (requests_per_s = records read/s)",
        preset: "default",
        overrides: &[],
    },
    Scenario {
        name: "ssd-rand-read",
        description: "secmem io: 4 KB random reads on the Table I SSD, 4 threads at queue depth 8 over 8 GiB, each I/O's queue entries and 64 DMA line writes through the secure memory controller (requests_per_s = simulated I/Os/s)",
        preset: "horus",
        overrides: &["io.pattern=rand-read", "io.threads=4", "io.queue_depth=8", "io.ios=1000000"],
    },
    Scenario {
        name: "ssd-rand-read-no-memory",
        description: "ssd-rand-read with the memory side off (io.dma_through_memory = false): the SSD and host path alone",
        preset: "horus",
        overrides: &["io.pattern=rand-read", "io.threads=4", "io.queue_depth=8", "io.ios=1000000", "io.dma_through_memory=false"],
    },
    Scenario {
        name: "ssd-rand-read-dshield",
        description: "ssd-rand-read under D-Shield (io.stack = dshield): each I/O's metadata through the DIE's caches and hidden queue pair, its sectors on the crypto engine it shares with the memory side (serial, as the dshield preset has it; requests_per_s = simulated I/Os/s; target: at least half of ssd-rand-read's)",
        preset: "horus",
        overrides: &["io.pattern=rand-read", "io.threads=4", "io.queue_depth=8", "io.ios=1000000", "io.stack=dshield", "security.crypto_engine=serial"],
    },
    Scenario {
        name: "dshield-seq-rw",
        description: "D-Shield on sequential 4 KB reads and writes (fio rw, 50% reads), 4 threads x QD 8, its serial crypto engine shared with the memory side (requests_per_s = simulated I/Os/s)",
        preset: "horus",
        overrides: &["io.pattern=seq-rw", "io.threads=4", "io.queue_depth=8", "io.ios=1000000", "io.stack=dshield", "security.crypto_engine=serial"],
    },
    Scenario {
        name: "bmf-sp-dbmf",
        description: "Bonsai Merkle Forests, strict persistency with a dynamic forest (bmf preset, counting mode): 2 M stores, zipf over 64 MiB, through write-through caches, each followed by the flush and fence the preset's barrier rule inserts (requests_per_s = stores/s, the inserted records not counted; target: 1 M stores/s)",
        preset: "bmf",
        overrides: &["run.design=\"bmf\"", "workload.requests=2000000", "workload.read_ratio=0", "workload.pattern=zipf", "workload.footprint_bytes=67108864", "design.bmf.forest=dynamic"],
    },
    Scenario {
        name: "bmf-sp",
        description: "bmf-sp-dbmf without the forest (every update to the root register): the dynamic forest's own cost is bmf-sp-dbmf against this (target: at most 15%)",
        preset: "bmf",
        overrides: &["run.design=\"bmf\"", "workload.requests=2000000", "workload.read_ratio=0", "workload.pattern=zipf", "workload.footprint_bytes=67108864", "design.bmf.forest=off"],
    },
    Scenario {
        name: "esd-real",
        description: "ESD (esd preset, counting mode) on a real program's data-carrying trace: gzip -9's 1 M records (python/secmem/traces/gzip-numbers.trace.xz, embedded), translated, through the reproduction's scaled-down hierarchy so that its stores reach memory; each write-back's ECC, EFIT lookup, compare read and AMT update (requests_per_s = records/s; target: at least half of esd-real-baseline's)",
        preset: "esd",
        overrides: &["run.design=\"esd\"", "l1.size_kib=2", "l1.ways=4", "l2.size_kib=4", "l2.ways=8", "llc.size_kib=8", "llc.ways=8"],
    },
    Scenario {
        name: "esd-real-baseline",
        description: "esd-real under the baseline design (no deduplication): the reference for ESD's speed",
        preset: "esd",
        overrides: &["run.design=\"baseline\"", "l1.size_kib=2", "l1.ways=4", "l2.size_kib=4", "l2.ways=8", "llc.size_kib=8", "llc.ways=8"],
    },
    Scenario {
        name: "horus-drain-base-lu",
        description: "eADR drain of the Horus Table I hierarchy (295,936 worst-case dirty lines) under Base-LU, counting mode (requests_per_s = drained lines/s; wall_time_s is the figure, target < 2 s)",
        preset: "horus",
        overrides: &[],
    },
];

/// Peak resident set of this process (VmHWM), bytes; 0 where /proc is unavailable.
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        })
        .map_or(0, |kib| kib * 1024)
}

pub fn scenario(name: &str) -> Result<&'static Scenario, String> {
    SCENARIOS.iter().find(|s| s.name == name).ok_or_else(|| {
        let known: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        format!("unknown bench scenario '{name}'; known: {}", known.join(", "))
    })
}

/// Runs one scenario in this process. `scale` multiplies the request count (tests use a
/// small scale; the benchmark uses 1.0).
pub fn run_scenario(name: &str, scale: f64) -> Result<BenchResult, SimError> {
    if !(scale.is_finite() && scale > 0.0) {
        // Else a negative or NaN scale would silently run a one-record scenario.
        return Err(SimError::Config(secmem_core::ConfigError::new("", format!("--scale must be a positive number, got {scale}"))));
    }
    let s = scenario(name).map_err(|m| SimError::Config(secmem_core::ConfigError::new("bench", m)))?;
    if s.name == "aes-ctr-limit" {
        return Ok(aes_ctr_limit(((64_000_000.0 * scale) as u64).max(64)));
    }
    if s.name == "horus-drain-base-lu" {
        return horus_drain(scale);
    }
    if matches!(s.name, "champsim-read-xz" | "champsim-read" | "data-trace-read") {
        return trace_read(s.name, ((10_000_000.0 * scale) as u64).max(1));
    }
    let mut overrides: Vec<String> = s.overrides.iter().map(|x| x.to_string()).collect();
    overrides.push("run.progress=false".into());
    if s.name.starts_with("ssd-") || s.name.starts_with("dshield-") {
        let mut cfg = Config::load(Some(s.preset), None, &overrides)?;
        cfg.io.ios = ((cfg.io.ios as f64 * scale) as u64).max(1);
        // Timed from the first I/O: building the drive and preconditioning its I/O space
        // (untimed in the simulation too) are set-up, as writing a trace file is above.
        let r = crate::io::run_io(&cfg)?;
        let wall = r["meta"]["wall_time_s"].as_f64().unwrap_or(f64::NAN);
        return Ok(BenchResult::of(r["io"]["ios"].as_u64().unwrap_or(0), wall));
    }
    if s.name == "lelantus-forkbench-2m" {
        return forkbench_2m(&Config::load(Some(s.preset), None, &overrides)?, scale);
    }
    let mut cfg = Config::load(Some(s.preset), None, &overrides)?;
    if s.name.starts_with("esd-real") {
        return real_program(name, cfg, scale);
    }
    cfg.workload.requests = ((cfg.workload.requests as f64 * scale) as u64).max(1);
    let start = Instant::now();
    let (gen, _) = workload_generator(&cfg)?;
    let report = run_records(&cfg, gen.map(Ok), None, &format!("bench:{name}"))?;
    let wall = start.elapsed().as_secs_f64();
    let records = report["meta"]["records"].as_u64().unwrap_or(0);
    let llc = llc_level_requests(&report);
    let host_threads = if crate::run::splits_functional_run(&cfg) { 2 } else { 1 };
    Ok(BenchResult { llc_requests: Some(llc), llc_requests_per_s: Some(llc as f64 / wall), host_threads: Some(host_threads), ..BenchResult::of(records, wall) })
}

/// The gzip fixture, embedded so that the benchmark needs no file from the Python package.
const GZIP_TRACE_XZ: &[u8] = include_bytes!("../../../python/secmem/traces/gzip-numbers.trace.xz");

/// A scenario on the embedded real trace: decoded into memory first (untimed), then `scale`
/// of its records (repeated past one pass) timed through the engine, translated.
fn real_program(name: &str, mut cfg: Config, scale: f64) -> Result<BenchResult, SimError> {
    let io = |e: std::io::Error| SimError::Config(secmem_core::ConfigError::new("bench", format!("cannot write the bench trace: {e}")));
    let path = std::env::temp_dir().join(format!("secmem-bench-{}-{name}.trace.xz", std::process::id()));
    std::fs::write(&path, GZIP_TRACE_XZ).map_err(io)?;
    let records: Result<Vec<secmem_trace::Record>, _> = secmem_trace::open(&path).and_then(|it| it.collect());
    let _ = std::fs::remove_file(&path);
    let records = records?;
    let n = ((records.len() as f64 * scale) as usize).max(1);
    cfg.translation.addresses = crate::translate::AddressSpace::Virtual;
    let start = Instant::now();
    let report = run_records(&cfg, records.iter().cycle().take(n).cloned().map(Ok), None, &format!("bench:{name}"))?;
    let wall = start.elapsed().as_secs_f64();
    let llc = llc_level_requests(&report);
    Ok(BenchResult { llc_requests: Some(llc), llc_requests_per_s: Some(llc as f64 / wall), host_threads: Some(1), ..BenchResult::of(n as u64, wall) })
}

/// Requests a run's memory controller received from the LLC: its misses (fills) plus its
/// dirty write-backs, as the core model counts them (at memory level, every record).
fn llc_level_requests(report: &serde_json::Value) -> u64 {
    let core = &report["stats"]["core"];
    core["llc_misses"].as_u64().unwrap_or(0) + core["memory_writes_issued"].as_u64().unwrap_or(0)
}

/// Base-LU drain of the worst-case Table I content; `scale` < 1 shrinks the LLC and L2 (tests).
fn horus_drain(scale: f64) -> Result<BenchResult, SimError> {
    use crate::harness::drain::{drain_run, DrainContent, DrainScheme};
    let mut overrides = vec!["run.progress=false".to_string()];
    if scale < 1.0 {
        overrides.extend(["llc.size_kib=1024".to_string(), "l2.size_kib=256".to_string()]);
    }
    let cfg = Config::load(Some("horus"), None, &overrides)?;
    let start = Instant::now();
    let out = drain_run(&cfg, "base-lu".parse::<DrainScheme>().expect("the baseline offers base-lu"), &DrainContent::WorstCase, false)?;
    let wall = start.elapsed().as_secs_f64();
    let lines = out.stats.flushed_lines;
    Ok(BenchResult::of(lines, wall))
}

/// Writes a seeded trace for a reading scenario (untimed), then times reading `records`
/// records of it back through `secmem_trace::open`, format and compression detected.
fn trace_read(name: &str, records: u64) -> Result<BenchResult, SimError> {
    use rand::{Rng, SeedableRng};
    use secmem_trace::{champsim, compress, Compression, Format, Record};
    let io = |e: std::io::Error| SimError::Config(secmem_core::ConfigError::new("bench", format!("cannot write the bench trace: {e}")));
    let dir = std::env::temp_dir();
    let tag = format!("secmem-bench-{}-{name}", std::process::id());
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let path = if name.starts_with("champsim-read") {
        // About 40% of instructions touch memory, as in SPEC's ChampSim traces: loads to a
        // 64 MB heap, stores near the stack. Compressed at xz preset 0 to keep the untimed
        // set-up short; decoding speed hardly depends on the preset.
        let (how, ext) = if name.ends_with("-xz") { (Compression::Xz, ".xz") } else { (Compression::None, "") };
        let path = dir.join(format!("{tag}.champsimtrace{ext}"));
        let file = std::io::BufWriter::new(std::fs::File::create(&path).map_err(io)?);
        let mut out = compress::Compressor::new(file, how, 0);
        let (mut made, mut ip) = (0u64, 0x40_0000u64);
        while made < records {
            ip += 4;
            let (mut src, mut dst) = ([0u64; 4], [0u64; 2]);
            let x: f64 = rng.gen();
            if x < 0.30 {
                src[0] = 0x5555_0000_0000 + (rng.gen_range(0..1u64 << 26) & !7);
                made += 1;
            } else if x < 0.40 {
                dst[0] = 0x7ffd_0000_0000 + (rng.gen_range(0..1u64 << 16) & !7);
                made += 1;
            }
            std::io::Write::write_all(&mut out, &champsim::encode_instr(ip, false, false, dst, src)).map_err(io)?;
        }
        out.finish().map_err(io)?;
        path
    } else {
        let pointers: Vec<[u8; 64]> = (0..1000).map(|_| {
            let mut l = [0u8; 64];
            for w in l.chunks_exact_mut(8) {
                w.copy_from_slice(&(0x5555_0000_0000u64 + rng.gen_range(0..1u64 << 26)).to_le_bytes());
            }
            l
        }).collect();
        let recs = (0..records).map(move |i| {
            let addr = rng.gen_range(0..1u64 << 30) & !63;
            if rng.gen_bool(0.6) {
                return Record::read(addr, 3);
            }
            let mut l = [0u8; 64];
            match rng.gen_range(0..5) {
                0 | 1 => {}
                2 => l[..8].copy_from_slice(&(i % 64).to_le_bytes()),
                3 => l = pointers[rng.gen_range(0..pointers.len())],
                _ => rng.fill(&mut l[..]),
            }
            Record::write_data(addr, 3, l)
        });
        let bin = dir.join(format!("{tag}.bin"));
        secmem_trace::write(&bin, Format::Binary, recs)?;
        bin
    };
    let start = Instant::now();
    let result = (|| -> Result<(u64, u64), SimError> {
        let (mut n, mut sink) = (0u64, 0u64);
        for r in secmem_trace::open(&path)?.take(records as usize) {
            let r = r?;
            sink ^= r.addr ^ r.data.map_or(0, |d| d[7] as u64);
            n += 1;
        }
        Ok((n, sink))
    })();
    let wall = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    let (n, sink) = result?;
    std::hint::black_box(sink);
    Ok(BenchResult::of(n, wall))
}

/// Pads for `lines` 64 B lines, generated 64 lines per batched AES call (the way the
/// controller batches re-encryption): the ceiling on functional-mode encryption throughput.
pub fn aes_ctr_limit(lines: u64) -> BenchResult {
    let keys = secmem_crypto::Keys::from_seed(1);
    let mut reqs = [(0u64, 0u64, 0u8); 64];
    let mut out = [[0u8; 64]; 64];
    let mut sink = 0u8;
    let start = Instant::now();
    let mut done = 0u64;
    while done < lines {
        for (i, r) in reqs.iter_mut().enumerate() {
            *r = (done + i as u64, done >> 20, (done & 0x7f) as u8);
        }
        keys.pads_batch(&reqs, &mut out);
        sink ^= out[done as usize % 64][0];
        done += 64;
    }
    let wall = start.elapsed().as_secs_f64();
    std::hint::black_box(sink);
    BenchResult::of(done, wall)
}

/// The 2 MB-page forkbench through the OS model (`scale` scales the footprint, in whole huge
/// pages).
fn forkbench_2m(cfg: &Config, scale: f64) -> Result<BenchResult, SimError> {
    use crate::cow_workloads::{CowSpec, CowWorkload};
    let pages = ((8.0 * scale).round() as u64).max(1);
    let spec = CowSpec { workload: CowWorkload::Forkbench, page_size: crate::os::PageSize::Huge, footprint_bytes: pages << 21, lines_per_page: 512, ops: 0, seed: 1 };
    let start = Instant::now();
    let r = crate::cow_workloads::run(cfg, &spec).map_err(|e| SimError::Config(secmem_core::ConfigError::new("bench", e.0)))?;
    let wall = start.elapsed().as_secs_f64();
    // Accesses the OS model sent through the engine: initialisation, the child's stores and
    // every kernel or controller copy (counted by the core model over the whole run).
    let records = r["records"].as_u64().unwrap_or(0);
    Ok(BenchResult::of(records, wall))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_reading_scenarios_read_every_record_they_wrote() {
        for name in ["champsim-read-xz", "champsim-read", "data-trace-read"] {
            let r = run_scenario(name, 0.002).unwrap();
            assert_eq!(r.records, 20_000, "{name}");
        }
    }

    #[test]
    fn the_ssd_scenarios_complete_every_io_they_start() {
        for name in ["ssd-rand-read", "ssd-rand-read-no-memory", "ssd-rand-read-dshield", "dshield-seq-rw"] {
            assert_eq!(run_scenario(name, 0.002).unwrap().records, 2_000, "{name}");
        }
    }

    #[test]
    fn llc_level_requests_are_the_records_at_memory_level() {
        let mem = run_scenario("secure-lazy-random-memory-level", 0.0005).unwrap();
        assert_eq!(mem.records, 5_000);
        assert_eq!(mem.llc_requests, Some(5_000), "a memory-level record is one LLC-level request");
        let ratio = mem.llc_requests_per_s.unwrap() / mem.requests_per_s;
        assert!((ratio - 1.0).abs() < 1e-9);
        // Figures in other units carry no LLC-level count.
        assert_eq!(aes_ctr_limit(64).llc_requests, None);
    }

    #[test]
    fn the_functional_scenario_says_it_ran_on_two_host_threads_and_counting_on_one() {
        assert_eq!(run_scenario("functional-random", 0.0005).unwrap().host_threads, Some(2));
        assert_eq!(run_scenario("secure-lazy-random", 0.0005).unwrap().host_threads, Some(1));
        assert_eq!(aes_ctr_limit(64).host_threads, None, "not an engine run");
    }

    #[test]
    fn llc_level_requests_of_a_core_level_run_are_its_data_reads_and_writes_at_the_controller() {
        // Caches small enough that 20,000 random records cause dirty write-backs.
        let overrides: Vec<String> = ["l1.size_kib=4", "l2.size_kib=8", "llc.size_kib=16", "workload.requests=20000", "workload.pattern=random"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let cfg = Config::load(Some("horus"), None, &overrides).unwrap();
        let report = crate::run::run(&cfg, &crate::run::TraceInput::Workload).unwrap();
        let sec = &report["stats"]["security"];
        let at_controller = sec["data_reads"].as_u64().unwrap() + sec["data_writes"].as_u64().unwrap();
        assert!(sec["data_writes"].as_u64().unwrap() > 1_000, "the test needs write-backs");
        assert_eq!(llc_level_requests(&report), at_controller);
    }
}
