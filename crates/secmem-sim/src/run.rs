//! One run: config + trace in, report out.

use crate::config::Config;
use crate::engine::{Engine, RecordError};
use crate::report;
use secmem_core::error::ConfigError;
use secmem_trace::{Record, TraceError};
use serde_json::Value;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where records come from.
#[derive(Clone, Debug)]
pub enum TraceInput {
    /// A trace file in any supported format (detected).
    File(PathBuf),
    /// The config's built-in synthetic workload (`[workload]`).
    Workload,
}

impl TraceInput {
    pub fn describe(&self, cfg: &Config) -> String {
        match self {
            TraceInput::File(p) => p.display().to_string(),
            TraceInput::Workload => format!("generated:{}", cfg.workload.pattern),
        }
    }
}

/// Everything that can stop a run, each naming what it is about.
#[derive(Debug)]
pub enum SimError {
    Config(ConfigError),
    Trace(TraceError),
    Record { trace: String, error: RecordError },
    /// A security property failed (functional mode).
    Integrity { trace: String, message: String },
    Io { path: String, message: String },
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::Config(e) => write!(f, "{e}"),
            SimError::Trace(e) => write!(f, "{e}"),
            SimError::Record { trace, error } => write!(f, "{trace}: record {}: {}", error.index, error.message),
            SimError::Integrity { trace, message } => write!(f, "{trace}: {message}"),
            SimError::Io { path, message } => write!(f, "{path}: {message}"),
        }
    }
}
impl std::error::Error for SimError {}
impl From<ConfigError> for SimError {
    fn from(e: ConfigError) -> Self { SimError::Config(e) }
}
impl From<TraceError> for SimError {
    fn from(e: TraceError) -> Self { SimError::Trace(e) }
}

pub type RecordIter = Box<dyn Iterator<Item = Result<Record, TraceError>>>;

/// The generator spec of a config's `[workload]` section.
pub fn workload_spec(cfg: &Config) -> Result<secmem_trace::generate::GenSpec, ConfigError> {
    let w = &cfg.workload;
    let spec = secmem_trace::generate::GenSpec {
        pattern: w.pattern.parse().map_err(|e: String| ConfigError::new("workload.pattern", e))?,
        requests: w.requests,
        footprint_bytes: w.footprint_bytes,
        read_ratio: w.read_ratio,
        seed: w.seed,
        stride_bytes: w.stride_bytes,
        zipf_theta: w.zipf_theta,
        inst_gap: w.inst_gap,
        base_addr: 0,
    };
    spec.validate().map_err(|m| {
        // The generator's messages start with the field name: make it the dotted path.
        let field = m.split_whitespace().next().unwrap_or("").trim_end_matches(':');
        ConfigError::new(format!("workload.{field}"), m)
    })?;
    Ok(spec)
}

/// The built-in workload's generator (`[workload]`) and the number of records it yields.
pub(crate) fn workload_generator(cfg: &Config) -> Result<(secmem_trace::generate::Generator, u64), SimError> {
    let spec = workload_spec(cfg)?;
    let gen = secmem_trace::generate::Generator::new(&spec).map_err(|m| ConfigError::new("workload", m))?;
    Ok((gen, spec.requests))
}

/// Opens the records of `input`.
pub fn open_records(cfg: &Config, input: &TraceInput) -> Result<(RecordIter, Option<u64>), SimError> {
    match input {
        TraceInput::File(p) => Ok((secmem_trace::open(p)?, None)),
        TraceInput::Workload => {
            let (gen, n) = workload_generator(cfg)?;
            if cfg.workload.persist_writes {
                let persisted = gen.flat_map(|r| {
                    let extra = (r.op == secmem_trace::Op::Write).then(|| [secmem_trace::Record::flush(r.addr, 0), secmem_trace::Record::fence(0)]);
                    std::iter::once(r).chain(extra.into_iter().flatten())
                });
                return Ok((Box::new(persisted.map(Ok)), None));
            }
            Ok((Box::new(gen.map(Ok)), Some(n)))
        }
    }
}

/// Runs `records` through a fresh engine; returns the report.
pub fn run_records<I>(cfg: &Config, records: I, total_hint: Option<u64>, trace_name: &str) -> Result<Value, SimError>
where
    I: Iterator<Item = Result<Record, TraceError>>,
{
    run_records_saving(cfg, records, total_hint, trace_name, None)
}

/// Refuses a warm-up of `warmup` records that leaves none of a `records`-record trace to
/// measure: a report of all-zero statistics would look like a result.
pub(crate) fn ensure_roi_left(warmup: u64, records: u64) -> Result<(), SimError> {
    if warmup > 0 && warmup >= records {
        return Err(SimError::Config(ConfigError::new(
            "run.warmup_requests",
            format!("the warm-up ({warmup} records) covers the whole trace ({records} records): no region of interest is left to report"),
        )));
    }
    Ok(())
}

/// As [`run_records`]; with `image_out`, after the run every dirty line is written back, the
/// design's metadata is flushed and the NVM image is saved there (functional mode only).
/// Generic over the record source so that a built-in workload's generator is read in place,
/// without a dynamic call and a boxed `Option<Result<Record>>` per record (about 2.5% of a
/// memory-level sequential run's host instructions); trace files come boxed ([`RecordIter`]).
/// `run_saving` picks the generator itself for the plain workload, the case `open_records`
/// would box. (An enum of the two sources, dispatched once here, measured 3-5% more
/// instructions than either: the inliner then treated the loop differently.)
pub fn run_records_saving<I>(
    cfg: &Config,
    records: I,
    total_hint: Option<u64>,
    trace_name: &str,
    image_out: Option<&Path>,
) -> Result<Value, SimError>
where
    I: Iterator<Item = Result<Record, TraceError>>,
{
    if image_out.is_some() && !cfg.run.functional {
        return Err(SimError::Config(ConfigError::new("run.functional", "saving an NVM image needs functional mode (-p run.functional=true)")));
    }
    let start = Instant::now();
    let mut engine = Engine::new(cfg)?;
    let warmup = cfg.run.warmup_requests;
    let limit = if cfg.run.max_requests == 0 { u64::MAX } else { cfg.run.max_requests };
    let progress = cfg.run.progress && std::io::stderr().is_terminal();
    // A warm-up that covers the whole trace is an error, up front when the length is known.
    if let Some(total) = total_hint {
        ensure_roi_left(warmup, total.min(limit))?;
    }
    let mut warm = None;
    let mut n: u64 = 0;
    if warmup == 0 {
        warm = Some(engine.roi_start());
    }
    // Records pass through a short look-ahead window so that the host can prefetch the state
    // each will touch while earlier ones are simulated (see Engine::prefetch).
    const LOOKAHEAD: usize = 16;
    // The record this many places behind the newest gets the second stage
    // (Engine::prefetch_late), which reads the cache sets the first stage brought in.
    const LATE: usize = 8;
    // The window is a ring of LOOKAHEAD slots: a record is moved once, into its slot, and
    // stepped from there by reference (a queue of records copied each ~90 B record in and out).
    let mut window: [Record; LOOKAHEAD] = std::array::from_fn(|_| Record::read(0, 0));
    let (mut head, mut len) = (0usize, 0usize);
    let mut records = records.take(usize::try_from(limit).unwrap_or(usize::MAX));
    let mut exhausted = false;
    loop {
        while len < LOOKAHEAD && !exhausted {
            match records.next() {
                Some(rec) => {
                    let slot = (head + len) % LOOKAHEAD;
                    window[slot] = rec?;
                    engine.prefetch(&window[slot]);
                    len += 1;
                    if len > LATE {
                        engine.prefetch_late(&window[(head + len - 1 - LATE) % LOOKAHEAD]);
                    }
                }
                None => exhausted = true,
            }
        }
        if len == 0 {
            break;
        }
        let rec = &window[head];
        head = (head + 1) % LOOKAHEAD;
        len -= 1;
        engine.step(rec, n).map_err(|error| SimError::Record { trace: trace_name.to_string(), error })?;
        n += 1;
        if n == warmup {
            warm = Some(engine.roi_start());
        }
        if progress && n.is_multiple_of(1 << 20) {
            show_progress(n, total_hint.map(|t| t.min(limit)), start.elapsed().as_secs_f64());
        }
    }
    engine.settle();
    if progress {
        eprint!("\r\x1b[K");
    }
    ensure_roi_left(warmup, n)?;
    let end = engine.snapshot();
    let warm = warm.expect("the warm-up snapshot is taken before the last record");
    let roi = end.since(&warm);
    let wall = start.elapsed().as_secs_f64();
    let stats = report::stats(cfg, &roi, &engine.design.extra_stats());
    let meta = report::meta(cfg, trace_name.to_string(), cfg.run.functional, n, wall);
    let mut rep = report::report(cfg, &meta, stats);
    if let Some(path) = image_out {
        let integrity = |e: secmem_schemes::IntegrityError| SimError::Integrity { trace: trace_name.to_string(), message: e.to_string() };
        engine.flush_hierarchy().map_err(integrity)?;
        engine.finish_design().map_err(integrity)?;
        let f = engine.mc.func.as_ref().expect("functional");
        let meta = secmem_schemes::image_file::ImageMeta {
            mac_bits: cfg.security.mac_bits,
            minor_bits: cfg.security.minor_counter_bits,
            arity: cfg.tree.arity as u32,
            data_bytes: cfg.data_bytes(),
            key_seed: cfg.run.seed,
            random_counters: cfg.security.counter_init == secmem_schemes::config::CounterInit::Random,
        };
        secmem_schemes::image_file::save(path, &meta, &f.root, &f.image).map_err(|e| SimError::Io { path: e.path.clone(), message: e.message })?;
        rep["meta"]["image"] = serde_json::json!(path.display().to_string());
    }
    if let Some(f) = engine.mc.func.as_ref() {
        rep["meta"]["event_log_hash"] = serde_json::json!(format!("{:016x}", f.event_log_digest()));
        if let Some(v) = &f.reuse_violation {
            return Err(SimError::Integrity { trace: trace_name.to_string(), message: v.to_string() });
        }
    }
    Ok(rep)
}

fn show_progress(n: u64, total: Option<u64>, secs: f64) {
    let rate = n as f64 / secs.max(1e-9) / 1e6;
    match total {
        Some(t) if t > 0 => eprint!("\r[secmem] {:5.1}%  {}/{} records  {:.2} M/s", 100.0 * n as f64 / t as f64, n, t, rate),
        _ => eprint!("\r[secmem] {n} records  {rate:.2} M/s"),
    }
    let _ = std::io::stderr().flush();
}

/// Runs a config on an input; the report as JSON.
pub fn run(cfg: &Config, input: &TraceInput) -> Result<Value, SimError> { run_saving(cfg, input, None) }

/// Runs and, with `image_out`, saves the NVM image afterwards.
pub fn run_saving(cfg: &Config, input: &TraceInput, image_out: Option<&Path>) -> Result<Value, SimError> {
    if image_out.is_some() && !cfg.security.enabled {
        // A saved image is read back through the secure read path (`image verify`): without
        // security it would hold plaintext that every check then reports as tampered.
        return Err(SimError::Config(ConfigError::new("security.enabled", "saving an NVM image needs secure memory (security.enabled = true)")));
    }
    // An OS-level trace (format v2, header flag) drives the OS model instead of the engine.
    if let TraceInput::File(p) = input {
        let stream = secmem_trace::open_events(p)?;
        if stream.kind.os_level {
            if image_out.is_some() {
                return Err(SimError::Config(ConfigError::new("run.functional", "saving an NVM image after an OS-level trace is not supported")));
            }
            return crate::os_trace::run_events(cfg, stream.events, &input.describe(cfg));
        }
    }
    if matches!(input, TraceInput::Workload) && !cfg.workload.persist_writes {
        // The common case, without the box `open_records` puts every source in.
        let (gen, n) = workload_generator(cfg)?;
        return run_records_saving(cfg, gen.map(Ok), Some(n), &input.describe(cfg), image_out);
    }
    let (records, hint) = open_records(cfg, input)?;
    run_records_saving(cfg, records, hint, &input.describe(cfg), image_out)
}

/// Runs and writes `out_dir/report.json` and `out_dir/config.toml` (the resolved config).
pub fn run_to_dir(cfg: &Config, input: &TraceInput, out_dir: &Path) -> Result<Value, SimError> { run_to_dir_saving(cfg, input, out_dir, None) }

/// As [`run_to_dir`], optionally saving the NVM image.
pub fn run_to_dir_saving(cfg: &Config, input: &TraceInput, out_dir: &Path, image_out: Option<&Path>) -> Result<Value, SimError> {
    let io = |e: std::io::Error| SimError::Io { path: out_dir.display().to_string(), message: e.to_string() };
    std::fs::create_dir_all(out_dir).map_err(io)?;
    // A failed run must not leave an earlier run's report in DIR looking like its result.
    match std::fs::remove_file(out_dir.join("report.json")) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
        _ => {}
    }
    let report = run_saving(cfg, input, image_out)?;
    std::fs::write(out_dir.join("config.toml"), cfg.to_commented_toml()).map_err(io)?;
    let text = serde_json::to_string_pretty(&report).expect("report serializes");
    std::fs::write(out_dir.join("report.json"), text).map_err(io)?;
    Ok(report)
}
