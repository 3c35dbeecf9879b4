//! Fixed benchmark scenarios for `secmem bench`. Each runs in its own process (the Python
//! front end spawns one per scenario) so that `peak_rss_bytes` is that scenario's alone.
//!
//! Records come straight from the seeded generator (no trace file), so the figure is the
//! simulator's speed: LLC-level requests (trace records) simulated per wall-clock second,
//! counting/timing mode, one core.

use crate::config::Config;
use crate::run::{run_records, workload_spec, SimError};
use serde::Serialize;
use std::time::Instant;

#[derive(Clone, Debug, Serialize)]
pub struct BenchResult {
    pub requests_per_s: f64,
    pub peak_rss_bytes: u64,
    pub records: u64,
    pub wall_time_s: f64,
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
        name: "secure-lazy-random-32gib",
        description: "memory check: secure baseline, 10 M uniform random requests over the whole 32 GiB NVM",
        preset: "horus",
        overrides: &[TEN_M, "workload.pattern=random", "workload.footprint_bytes=34359738368"],
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
    let s = scenario(name).map_err(|m| SimError::Config(secmem_core::ConfigError::new("bench", m)))?;
    let mut overrides: Vec<String> = s.overrides.iter().map(|x| x.to_string()).collect();
    overrides.push("run.progress=false".into());
    let mut cfg = Config::load(Some(s.preset), None, &overrides)?;
    cfg.workload.requests = ((cfg.workload.requests as f64 * scale) as u64).max(1);
    let spec = workload_spec(&cfg)?;
    let start = Instant::now();
    let gen = secmem_trace::generate::Generator::new(&spec)
        .map_err(|m| SimError::Config(secmem_core::ConfigError::new("workload", m)))?
        .map(Ok);
    let report = run_records(&cfg, Box::new(gen), None, &format!("bench:{name}"))?;
    let wall = start.elapsed().as_secs_f64();
    let records = report["meta"]["records"].as_u64().unwrap_or(0);
    Ok(BenchResult { requests_per_s: records as f64 / wall, peak_rss_bytes: peak_rss_bytes(), records, wall_time_s: wall })
}
