//! One run: config + trace in, report out.

use crate::config::Config;
use crate::translate::AddressSpace;
use crate::engine::{Engine, RecordError, Snapshot};
use crate::report;
use secmem_core::error::ConfigError;
use secmem_schemes::controller::functional::EventLogHasher;
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
    /// A stop was asked for ([`crate::interrupt`]) before the command finished.
    Interrupted,
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::Config(e) => write!(f, "{e}"),
            SimError::Trace(e) => write!(f, "{e}"),
            SimError::Record { trace, error } => write!(f, "{trace}: record {}: {}", error.index, error.message),
            SimError::Integrity { trace, message } => write!(f, "{trace}: {message}"),
            SimError::Io { path, message } => write!(f, "{path}: {message}"),
            SimError::Interrupted => write!(f, "interrupted"),
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

/// The content model of `[workload]` (`contents = "synthetic"`), if any.
pub fn workload_contents(cfg: &Config) -> Result<Option<secmem_trace::generate::ContentSpec>, ConfigError> {
    let w = &cfg.workload;
    let spec = secmem_trace::generate::ContentSpec { duplicate_pct: w.duplicate_pct, popular: w.duplicate_contents, theta: w.duplicate_theta, seed: w.seed };
    spec.validate().map_err(|m| {
        let field = m.split_whitespace().next().unwrap_or("").trim_end_matches(':');
        ConfigError::new(format!("workload.{field}"), m)
    })?;
    Ok((w.contents == crate::config::WorkloadContents::Synthetic).then_some(spec))
}

/// The built-in workload's generator (`[workload]`) and the number of records it yields.
pub(crate) fn workload_generator(cfg: &Config) -> Result<(secmem_trace::generate::Generator, u64), SimError> {
    let spec = workload_spec(cfg)?;
    let gen = secmem_trace::generate::Generator::new(&spec).map_err(|m| ConfigError::new("workload", m))?;
    Ok((gen, spec.requests))
}

/// Opens the records of `input`, with persist barriers inserted by `[persist]`'s rule. With
/// barriers inserted, `run.max_requests` has cut the trace's own records already (every
/// scheme of a persistency study then runs the same program records, whatever it adds), and
/// [`record_limit`] leaves the result uncut.
pub fn open_records(cfg: &Config, input: &TraceInput) -> Result<(RecordIter, Option<u64>), SimError> {
    let (records, hint) = open_plain_records(cfg, input)?;
    if cfg.persist.barriers == crate::persist::PersistRule::Trace {
        return Ok((records, hint));
    }
    let limit = if cfg.run.max_requests == 0 { usize::MAX } else { cfg.run.max_requests as usize };
    // The record count is no longer known up front.
    Ok((Box::new(crate::persist::Barriers::new(records.take(limit), &cfg.persist)), None))
}

/// How many of [`open_records`]'s records a run takes: `run.max_requests` (0: all), or all
/// when persist barriers were inserted after the trace was cut to it.
pub fn record_limit(cfg: &Config) -> u64 {
    if cfg.run.max_requests == 0 || cfg.persist.barriers != crate::persist::PersistRule::Trace {
        u64::MAX
    } else {
        cfg.run.max_requests
    }
}

/// The records of `input` as they are.
fn open_plain_records(cfg: &Config, input: &TraceInput) -> Result<(RecordIter, Option<u64>), SimError> {
    match input {
        TraceInput::File(p) => Ok((match trace_format(cfg) {
            Some(f) => secmem_trace::open_as(p, f)?,
            None => secmem_trace::open(p)?,
        }, None)),
        TraceInput::Workload => {
            let (gen, n) = workload_generator(cfg)?;
            let records: Box<dyn Iterator<Item = secmem_trace::Record>> = match workload_contents(cfg)? {
                Some(contents) => Box::new(secmem_trace::generate::WithContents::new(gen, &contents)),
                None => Box::new(gen),
            };
            if cfg.workload.persist_writes {
                let persisted = records.flat_map(|r| {
                    let extra = (r.op == secmem_trace::Op::Write).then(|| [secmem_trace::Record::flush(r.addr, 0), secmem_trace::Record::fence(0)]);
                    std::iter::once(r).chain(extra.into_iter().flatten())
                });
                return Ok((Box::new(persisted.map(Ok)), None));
            }
            Ok((Box::new(records.map(Ok)), Some(n)))
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
    if splits_functional_run(cfg) {
        return run_two_halves(cfg, records, total_hint, trace_name, image_out);
    }
    let start = Instant::now();
    let mut engine = Engine::new(cfg)?;
    let pacing = Pacing::of(cfg, total_hint, start)?;
    let mut warm = pacing.warm_at_start(&engine);
    let records = records.take(pacing.limit);
    let n = simulate(&mut engine, records, trace_name, |engine, _, n| pacing.after_record(engine, n, &mut warm))?;
    engine.settle();
    pacing.finish(n)?;
    let end = engine.snapshot();
    let mut rep = report_of(cfg, &engine, warm, &end, engine.dirty_lines_by_cache(), n, start, trace_name);
    pacing.mark(&mut rep);
    if cfg.run.flush_at_end && !pacing.interrupted.get() {
        rep["stats"]["flush_at_end"] = flush_at_end(cfg, &mut engine, &end, trace_name)?;
    }
    // An interrupted run saves no image: it would hold a state no finished run produces.
    if let Some(path) = image_out.filter(|_| !pacing.interrupted.get()) {
        save_image(cfg, &mut engine, path, trace_name)?;
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

/// What paces a run through its records, the same on one thread and two: the warm-up
/// snapshot, the record limit, the progress line and a stop asked for by Ctrl-C.
struct Pacing {
    start: Instant,
    warmup: u64,
    /// `run.max_requests`, or no limit.
    limit: usize,
    progress: Progress,
    total: Option<u64>,
    /// When the progress was last shown.
    shown_at: std::cell::Cell<Instant>,
    /// Whether the run stopped early at an interrupt ([`crate::interrupt`]).
    interrupted: std::cell::Cell<bool>,
}

/// How a run shows its progress (`run.progress`).
#[derive(Clone, Copy, PartialEq)]
enum Progress {
    Off,
    /// A line rewritten in place, on a terminal.
    Line,
    /// A heartbeat line every [`HEARTBEAT_S`] seconds, as ChampSim's: stderr is a file or pipe.
    Heartbeat,
}

/// Seconds between two heartbeat lines when stderr is not a terminal.
const HEARTBEAT_S: f64 = 10.0;
/// Seconds between two redraws of the progress line on a terminal.
const REDRAW_S: f64 = 0.25;

impl Pacing {
    /// Refuses, up front when the trace's length is known, a warm-up that covers it all.
    fn of(cfg: &Config, total_hint: Option<u64>, start: Instant) -> Result<Pacing, SimError> {
        let warmup = cfg.run.warmup_requests;
        let limit = record_limit(cfg);
        let known = total_hint.map(|t| t.min(limit));
        if let Some(total) = known {
            ensure_roi_left(warmup, total)?;
        }
        // For the progress line's ETA: the trace's length, else run.max_requests.
        let total = known.or((limit != u64::MAX).then_some(limit));
        let progress = match (cfg.run.progress, std::io::stderr().is_terminal()) {
            (false, _) => Progress::Off,
            (true, true) => Progress::Line,
            (true, false) => Progress::Heartbeat,
        };
        let pacing = Pacing {
            start,
            warmup,
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            progress,
            total,
            shown_at: std::cell::Cell::new(start),
            interrupted: std::cell::Cell::new(false),
        };
        Ok(pacing)
    }

    /// The warm-up snapshot, when there is no warm-up.
    fn warm_at_start(&self, engine: &Engine) -> Option<Snapshot> { (self.warmup == 0).then(|| engine.roi_start()) }

    /// After record `n` (counted from 1): the warm-up snapshot when the warm-up ends, and
    /// every [`crate::interrupt::CHECK_EVERY`] records a look at the interrupt flag and the
    /// clock. False to stop the run here (an interrupt).
    #[inline(always)]
    fn after_record(&self, engine: &Engine, n: u64, warm: &mut Option<Snapshot>) -> bool {
        if n == self.warmup {
            *warm = Some(engine.roi_start());
        }
        !n.is_multiple_of(crate::interrupt::CHECK_EVERY) || self.now_and_then(n)
    }

    #[inline(never)]
    fn now_and_then(&self, n: u64) -> bool {
        if crate::interrupt::requested() {
            self.interrupted.set(true);
            return false;
        }
        if self.progress != Progress::Off {
            let now = Instant::now();
            let since = now.duration_since(self.shown_at.get()).as_secs_f64();
            let every = if self.progress == Progress::Line { REDRAW_S } else { HEARTBEAT_S };
            if since >= every {
                self.shown_at.set(now);
                let line = progress_line(n, self.total, now.duration_since(self.start).as_secs_f64());
                if self.progress == Progress::Line {
                    eprint!("\r\x1b[K[secmem] {line}");
                } else {
                    eprintln!("[secmem] heartbeat: {line}");
                }
                let _ = std::io::stderr().flush();
            }
        }
        true
    }

    fn clear_progress(&self) {
        if self.progress == Progress::Line {
            eprint!("\r\x1b[K");
        }
    }

    /// After the last of `n` records: clears the progress line; an error if the warm-up took
    /// them all (or, after an interrupt, if it had not ended: there is nothing to report).
    fn finish(&self, n: u64) -> Result<(), SimError> {
        self.clear_progress();
        if self.interrupted.get() && n <= self.warmup {
            return Err(SimError::Interrupted);
        }
        ensure_roi_left(self.warmup, n)
    }

    /// Marks an interrupted run's report partial.
    fn mark(&self, rep: &mut Value) {
        if self.interrupted.get() {
            rep["meta"]["interrupted"] = serde_json::json!(true);
        }
    }
}

/// `52.4%  5.2 M / 10 M records  1.8 M/s  ETA 3 s`, or without a known total
/// `5.2 M records  1.8 M/s`.
fn progress_line(n: u64, total: Option<u64>, secs: f64) -> String {
    let rate = n as f64 / secs.max(1e-9);
    let m = |x: f64| format!("{:.1} M", x / 1e6);
    match total {
        Some(t) if t > 0 => {
            let eta = t.saturating_sub(n) as f64 / rate.max(1e-9);
            format!("{:5.1}%  {} / {} records  {}/s  ETA {}", 100.0 * n as f64 / t as f64, m(n as f64), m(t as f64), m(rate), duration_text(eta))
        }
        _ => format!("{} records  {}/s", m(n as f64), m(rate)),
    }
}

/// `42 s`, `3 min 20 s`, `2 h 05 min`.
fn duration_text(secs: f64) -> String {
    let s = secs.round() as u64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
    }
}

/// The report of a run of `n` records that `engine` simulated from `start`: its statistics
/// from the warm-up snapshot to `end`, and the dirty lines its caches held at `end`
/// ([`Engine::dirty_lines_by_cache`], taken before any end-of-run flush).
#[allow(clippy::too_many_arguments)] // the run's end state, its length and its name
fn report_of(cfg: &Config, engine: &Engine, warm: Option<Snapshot>, end: &Snapshot, dirty: [(&str, usize); 6], n: u64, start: Instant, trace_name: &str) -> Value {
    let warm = warm.expect("the warm-up snapshot is taken before the last record");
    let roi = end.since(&warm);
    let wall = start.elapsed().as_secs_f64();
    let stats = report::stats(cfg, &roi, &engine.design_stats());
    let meta = report::meta(cfg, trace_name.to_string(), cfg.run.functional, n, wall);
    let mut rep = report::report(cfg, &meta, stats);
    for (cache, lines) in dirty {
        rep["stats"]["caches"][cache]["dirty_lines_at_end"] = serde_json::json!(lines);
    }
    if let Some((pages, page_bytes, unaligned)) = engine.translation() {
        rep["meta"]["translation"] = serde_json::json!({
            "pages_mapped": pages,
            "page_bytes": page_bytes,
            "bytes_mapped": pages * page_bytes,
            "placement": cfg.translation.placement.as_str(),
            "unaligned_accesses_split": unaligned,
        });
    }
    rep
}

/// Steps `engine` through `records` with a short look-ahead window in front, so that the host
/// can prefetch the state each record will touch while earlier ones are simulated (see
/// [`Engine::prefetch`]). After record `n` (counted from 1) is stepped, `after_step(engine,
/// record, n)` runs; it returns false to stop early. Returns the number of records stepped.
#[inline(always)]
fn simulate<I>(engine: &mut Engine, mut records: I, trace_name: &str, mut after_step: impl FnMut(&mut Engine, &Record, u64) -> bool) -> Result<u64, SimError>
where
    I: Iterator<Item = Result<Record, TraceError>>,
{
    const LOOKAHEAD: usize = 16;
    // The record this many places behind the newest gets the second stage
    // (Engine::prefetch_late), which reads the cache sets the first stage brought in.
    const LATE: usize = 8;
    // Virtual traces: the stage between, which translates (Engine::prefetch_mid).
    const MID: usize = 4;
    // The window is a ring of LOOKAHEAD slots: a record is moved once, into its slot, and
    // stepped from there by reference (a queue of records copied each ~90 B record in and out).
    let mut window: [Record; LOOKAHEAD] = std::array::from_fn(|_| Record::read(0, 0));
    let (mut head, mut len) = (0usize, 0usize);
    let mut exhausted = false;
    let mut n: u64 = 0;
    loop {
        while len < LOOKAHEAD && !exhausted {
            match records.next() {
                Some(rec) => {
                    let slot = (head + len) % LOOKAHEAD;
                    window[slot] = rec?;
                    engine.prefetch(&window[slot]);
                    len += 1;
                    if len > MID {
                        engine.prefetch_mid(&window[(head + len - 1 - MID) % LOOKAHEAD]);
                    }
                    if len > LATE {
                        engine.prefetch_late(&window[(head + len - 1 - LATE) % LOOKAHEAD]);
                    }
                }
                None => exhausted = true,
            }
        }
        if len == 0 {
            return Ok(n);
        }
        let rec = &window[head];
        head = (head + 1) % LOOKAHEAD;
        len -= 1;
        engine.step(rec, n).map_err(|error| SimError::Record { trace: trace_name.to_string(), error })?;
        n += 1;
        if !after_step(engine, rec, n) {
            return Ok(n);
        }
    }
}

/// `run.flush_at_end`: writes every dirty line of the hierarchy back after the last record
/// (`end`) and waits until memory is idle; the statistics of that alone, and the lines written.
fn flush_at_end(cfg: &Config, engine: &mut Engine, end: &Snapshot, trace_name: &str) -> Result<Value, SimError> {
    let lines = engine.flush_hierarchy().map_err(|e| SimError::Integrity { trace: trace_name.to_string(), message: e.to_string() })?;
    engine.quiesce();
    let mut section = report::stats(cfg, &engine.snapshot().since(end), &[]);
    section["lines_written_back"] = serde_json::json!(lines);
    Ok(section)
}

/// After a functional run: writes every dirty line back, flushes the design's metadata and
/// saves the NVM image to `path`.
fn save_image(cfg: &Config, engine: &mut Engine, path: &Path, trace_name: &str) -> Result<(), SimError> {
    let integrity = |e: secmem_schemes::IntegrityError| SimError::Integrity { trace: trace_name.to_string(), message: e.to_string() };
    engine.flush_hierarchy().map_err(integrity)?;
    engine.finish_design().map_err(integrity)?;
    let f = engine.mc.func.as_ref().expect("functional");
    let meta = secmem_schemes::controller::image_file::ImageMeta {
        mac_bits: cfg.security.mac_bits,
        minor_bits: cfg.security.minor_counter_bits,
        arity: cfg.tree.arity as u32,
        data_bytes: cfg.data_bytes(),
        key_seed: cfg.run.seed,
        random_counters: cfg.security.counter_init == secmem_schemes::config::CounterInit::Random,
    };
    secmem_schemes::controller::image_file::save(path, &meta, &f.root, &f.image).map_err(|e| SimError::Io { path: e.path.clone(), message: e.message })
}

// ------------------------------------------------------------------ two-thread functional runs

/// Whether a functional run of `cfg` runs as two halves on two host threads
/// (`run.host_threads = 2`): designs whose run-time data path is the baseline's
/// (`DesignEntry::baseline_data_path`: the baseline, and Horus, whose own code runs only at a
/// drain). Their timing does not depend on any functional byte (both modes give the same
/// counts, by test) and their functional state does not depend on timing, so the two halves
/// can run apart. The other designs' hooks work on functional bytes at run time (page copies,
/// zero pages), and stay on one thread.
pub fn splits_functional_run(cfg: &Config) -> bool {
    cfg.run.functional && cfg.run.host_threads >= 2 && secmem_schemes::designs::entry(&cfg.run.design).is_ok_and(|d| d.baseline_data_path)
}

/// Controller requests the timing half hands the functional half at a time (a record may add
/// a few, so a batch may pass this by as many): few enough to stay in the host's caches
/// between the two cores (about 96 KiB), many enough that handing them over costs nothing
/// per request.
const BATCH_REQUESTS: usize = 1024;
/// Batches handed over and not yet simulated, at most: the timing half waits when this many
/// are queued. The halves' speeds each vary over a run (page faults and huge-page collapses,
/// the image index doubling, the event-log hashing), and the functional half loses time
/// whenever the queue runs dry: 64 batches (about 6 MiB) hold some 80 ms of its work. Against
/// 16, the bench's functional run took 0.929x and 0.944x as long (paired medians of 6 pairs
/// each, every pair under 1) for 11 MiB more peak memory; 256 gained nothing more
/// measurable (0.971x, range 0.90-1.12) for 45 MiB.
const BATCHES_QUEUED: usize = 64;

/// What the timing half sends the functional half.
enum Handover {
    /// Requests, each with the number of the trace record it came from (for errors).
    Requests(Vec<Record>, Vec<u64>),
    /// Every request was sent: finish the run (an ended channel without this means the timing
    /// half failed, and the functional half's result is not wanted); whether to save the
    /// image if one was asked for (not after an interrupt).
    End { save_image: bool },
}

/// What the functional half of a finished run hands back. (Its event log comes over a
/// channel of its own, buffer by buffer, and the timing half hashes it.)
struct FunctionalOutcome {
    end: Snapshot,
    reuse_violation: Option<String>,
}

/// A functional run on two host threads. The calling thread is the timing half
/// ([`Engine::new_timing_half`]): counting mode with the real device model, whose statistics
/// make the report exactly as a one-thread functional run's, and whose hierarchy carries line
/// contents. It forwards every request it sends its controller, in order and with the bytes
/// of each write, to a second thread, the functional half
/// ([`Engine::new_functional_half`]): a functional-mode controller over an untimed device,
/// which replays them at memory level. That half's image, checks, event log and pad-reuse
/// check are the run's. At the end the two halves' counts are compared, so that a divergence
/// is an error and never a silently wrong report.
fn run_two_halves<I>(cfg: &Config, records: I, total_hint: Option<u64>, trace_name: &str, image_out: Option<&Path>) -> Result<Value, SimError>
where
    I: Iterator<Item = Result<Record, TraceError>>,
{
    let start = Instant::now();
    let mut engine = Engine::new_timing_half(cfg)?;
    let pacing = Pacing::of(cfg, total_hint, start)?;
    // The planted bugs of a test are set on its own thread; the functional half needs them.
    let canaries = crate::engine::test_canaries();
    let (timing, functional, event_log_hash) = std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Handover>(BATCHES_QUEUED);
        // The functional half's event log, 64 KiB at a time: the timing half hashes it, in the
        // time it would otherwise spend waiting for room in the queue. Unbounded, so that the
        // functional half never waits on it: it holds at most what the functional half logs
        // while the timing half waits on a full queue (a few MiB).
        let (log_tx, log_rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let mut log = EventLogHasher::default();
        let half = scope.spawn(move || functional_half(cfg, rx, log_tx, canaries, trace_name, image_out));
        let mut warm = pacing.warm_at_start(&engine);
        let records = records.take(pacing.limit);
        let mut from_record = Vec::with_capacity(BATCH_REQUESTS + 64);
        let stepped = simulate(&mut engine, records, trace_name, |engine, _, n| {
            if !pacing.after_record(engine, n, &mut warm) {
                return false;
            }
            let out = engine.forwarded.as_mut().expect("the timing half forwards its requests");
            // The requests added since the last record are record n - 1's.
            from_record.resize(out.len(), n - 1);
            if out.len() < BATCH_REQUESTS {
                return true;
            }
            let batch = std::mem::replace(out, Vec::with_capacity(BATCH_REQUESTS + 64));
            let from = std::mem::replace(&mut from_record, Vec::with_capacity(BATCH_REQUESTS + 64));
            // An error means the functional half stopped (it failed): stop too.
            let sent = tx.send(Handover::Requests(batch, from)).is_ok();
            log.absorb_all(&log_rx);
            sent
        });
        let timing = stepped.and_then(|n| {
            engine.settle();
            let end = engine.snapshot();
            let dirty = engine.dirty_lines_by_cache();
            let flushed = if cfg.run.flush_at_end && !pacing.interrupted.get() { Some(flush_at_end(cfg, &mut engine, &end, trace_name)?) } else { None };
            if image_out.is_some() && !pacing.interrupted.get() {
                // The functional half saves the image after the hierarchy's dirty lines are
                // written back; those write-backs are forwarded too. (Not in the report.)
                engine.flush_hierarchy().map_err(|e| SimError::Integrity { trace: trace_name.to_string(), message: e.to_string() })?;
            }
            let forwarded = engine.snapshot();
            let rest = engine.forwarded.take().unwrap_or_default();
            // The image's write-backs come after the last record.
            from_record.resize(rest.len(), n.saturating_sub(1));
            let _ = tx.send(Handover::Requests(rest, std::mem::take(&mut from_record)));
            let _ = tx.send(Handover::End { save_image: !pacing.interrupted.get() });
            Ok((n, warm, end, forwarded, flushed, dirty))
        });
        drop(tx);
        let functional = half.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        // The functional half has ended and dropped its sender: this takes the rest.
        log.absorb_all(&log_rx);
        (timing, functional, log.digest())
    });
    pacing.clear_progress();
    // The functional half only ever sees requests of records the timing half stepped, so its
    // failure (an integrity check, a pad reuse) is at an earlier record than the timing half's.
    let functional = functional?;
    let (n, warm, end, forwarded, flushed, dirty_before_flush) = timing?;
    let Some(functional) = functional else {
        // Cannot happen: the functional half returns no outcome only when the run was not
        // ended, and the timing half ends every run it finishes. An error, not a panic.
        return Err(SimError::Integrity { trace: trace_name.to_string(), message: "internal error: the functional half of a two-thread run stopped before the end; rerun with -p run.host_threads=1 and please report it".into() });
    };
    pacing.finish(n)?;
    // A pad reuse fails the run first, as on one thread. (The planted bug that causes one in
    // tests also changes what the functional half counts.)
    if let Some(v) = functional.reuse_violation {
        return Err(SimError::Integrity { trace: trace_name.to_string(), message: v });
    }
    if let Some(disagreement) = halves_disagree(&forwarded, &functional.end) {
        return Err(SimError::Integrity {
            trace: trace_name.to_string(),
            message: format!(
                "internal error: the two halves of a two-thread functional run counted different {disagreement}; rerun with -p run.host_threads=1 and please report it"
            ),
        });
    }
    // The dirty lines were counted before the flush, in the timing half's hierarchy.
    let mut rep = report_of(cfg, &engine, warm, &end, dirty_before_flush, n, start, trace_name);
    pacing.mark(&mut rep);
    if let Some(section) = flushed {
        rep["stats"]["flush_at_end"] = section;
    }
    if let Some(path) = image_out.filter(|_| !pacing.interrupted.get()) {
        rep["meta"]["image"] = serde_json::json!(path.display().to_string());
    }
    rep["meta"]["event_log_hash"] = serde_json::json!(format!("{:016x}", event_log_hash));
    Ok(rep)
}

/// The functional half's thread: replays the requests the timing half hands over; when told
/// the run ended, saves the image if asked and hands back its counts and event log. `None`
/// when the timing half stopped without ending the run (it failed; its error is the run's).
fn functional_half(
    cfg: &Config,
    rx: std::sync::mpsc::Receiver<Handover>,
    log_to: std::sync::mpsc::Sender<Vec<u8>>,
    canaries: secmem_schemes::Canaries,
    trace_name: &str,
    image_out: Option<&Path>,
) -> Result<Option<FunctionalOutcome>, SimError> {
    #[cfg(feature = "canaries")]
    crate::engine::set_test_canaries(canaries);
    let _ = canaries;
    let mut engine = Engine::new_functional_half(cfg)?;
    engine.mc.func.as_mut().expect("the functional half is functional").hand_off_event_log(log_to);
    let (mut ended, mut save) = (false, false);
    // The trace record of each request of the batches taken lately, after the number of the
    // first request before them: a failed request is at most a look-ahead window (16
    // requests) behind the newest one taken, and only the last batch is shorter than that, so
    // the last three batches name its record, as a one-thread run does.
    let recent: std::cell::RefCell<std::collections::VecDeque<(u64, Vec<u64>)>> = Default::default();
    let mut taken: u64 = 0;
    let requests = rx.iter().map_while(|h| match h {
        Handover::Requests(batch, from) => {
            let mut recent = recent.borrow_mut();
            if recent.len() == 3 {
                recent.pop_front();
            }
            if !batch.is_empty() {
                recent.push_back((taken, from));
            }
            taken += batch.len() as u64;
            Some(batch)
        }
        Handover::End { save_image } => {
            (ended, save) = (true, save_image);
            None
        }
    });
    simulate(&mut engine, PrefetchedBatches::new(requests).map(Ok), trace_name, |_, _, _| true).map_err(|e| match e {
        SimError::Record { trace, mut error } => {
            let recent = recent.borrow();
            let record = recent.iter().rev().find(|(first, _)| *first <= error.index).and_then(|(first, from)| from.get((error.index - first) as usize));
            if let Some(&record) = record {
                error.index = record;
            }
            SimError::Record { trace, error }
        }
        e => e,
    })?;
    if !ended {
        return Ok(None);
    }
    engine.settle();
    let end = engine.snapshot();
    if let Some(path) = image_out.filter(|_| save) {
        save_image(cfg, &mut engine, path, trace_name)?;
    }
    let f = engine.mc.func.as_mut().expect("the functional half is functional");
    f.end_event_log_hand_off();
    Ok(Some(FunctionalOutcome { end, reuse_violation: f.reuse_violation.as_ref().map(|v| v.to_string()) }))
}

/// The requests of each batch in turn, hinting the host to fetch the requests a little ahead
/// of the one taken. The timing half wrote them on the other core, most of a full queue
/// earlier (about 1.5 MiB of requests ago), so they are no longer in this core's caches; read
/// cold, they were about 2% of the functional half's samples (`perf`), where the
/// look-ahead's own misses left the hardware prefetcher no room.
struct PrefetchedBatches<I: Iterator<Item = Vec<Record>>> {
    batches: I,
    batch: std::vec::IntoIter<Record>,
}

impl<I: Iterator<Item = Vec<Record>>> PrefetchedBatches<I> {
    /// Requests ahead of the one taken that are prefetched (about 1.5 KiB).
    const AHEAD: usize = 16;

    fn new(batches: I) -> Self { PrefetchedBatches { batches, batch: Vec::new().into_iter() } }

    /// Hints the host CPU to fetch the start of request `r`. Changes nothing.
    #[inline(always)]
    fn prefetch(r: &Record) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch has no effect on program state.
        unsafe {
            std::arch::x86_64::_mm_prefetch(r as *const Record as *const i8, std::arch::x86_64::_MM_HINT_T0)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let _ = r;
    }
}

impl<I: Iterator<Item = Vec<Record>>> Iterator for PrefetchedBatches<I> {
    type Item = Record;

    #[inline]
    fn next(&mut self) -> Option<Record> {
        loop {
            if let Some(r) = self.batch.next() {
                if let Some(ahead) = self.batch.as_slice().get(Self::AHEAD) {
                    Self::prefetch(ahead);
                }
                return Some(r);
            }
            self.batch = self.batches.next()?.into_iter();
            self.batch.as_slice().iter().take(Self::AHEAD).for_each(Self::prefetch);
        }
    }
}

/// The first count on which the timing half's and the functional half's snapshots differ, if
/// any: the reads and writes sent to the controller, every count of the controller, and the
/// device traffic by class. Cycles, latencies, stalls and the device's queueing figures are
/// the timing half's alone (the functional half's device is untimed), and so are the core's
/// and the hierarchy's (the functional half has none: it replays requests).
fn halves_disagree(timing: &Snapshot, functional: &Snapshot) -> Option<&'static str> {
    let requests = |s: &Snapshot| (s.core.llc_misses, s.core.memory_writes_issued);
    let mc = |s: &Snapshot| {
        let mut m = s.mc.clone();
        m.read_latency = Default::default();
        m.write_latency = Default::default();
        m
    };
    if requests(timing) != requests(functional) {
        Some("requests to the memory controller (reads, writes)")
    } else if mc(timing) != mc(functional) {
        Some("secure controller counts (data accesses, MAC and AES operations, overflows, metadata caches)")
    } else if timing.media.reads_by_class != functional.media.reads_by_class || timing.media.writes_by_class != functional.media.writes_by_class {
        Some("device reads or writes")
    } else {
        None
    }
}

/// The trace format `run.trace_format` names; None for `auto` (detected).
pub(crate) fn trace_format(cfg: &Config) -> Option<secmem_trace::Format> { cfg.run.trace_format.parse().ok() }

/// A trace file's events (an OS-level trace's, or a physical trace's records as events), in
/// the format `run.trace_format` names or the one detected.
pub(crate) fn open_events(cfg: &Config, path: &Path) -> Result<secmem_trace::EventStream, TraceError> {
    match trace_format(cfg) {
        Some(f) => secmem_trace::open_events_as(path, f),
        None => secmem_trace::open_events(path),
    }
}

/// Runs a config on an input; the report as JSON.
pub fn run(cfg: &Config, input: &TraceInput) -> Result<Value, SimError> { run_saving(cfg, input, None) }

/// `cfg` with what `input` decides resolved: `translation.addresses = "auto"` becomes
/// `virtual` for a trace whose addresses are a program's (lackey, or a secmem trace marked
/// virtual) and `physical` otherwise. The report and the config saved beside it say which.
pub fn resolve_for_input(cfg: &Config, input: &TraceInput) -> Result<Config, SimError> {
    let mut out = cfg.clone();
    if cfg.translation.addresses == AddressSpace::Auto {
        let virtual_addresses = match input {
            TraceInput::File(p) => match trace_format(cfg) {
                Some(f) => secmem_trace::open_events_as(p, f)?.kind.virtual_addresses,
                None => secmem_trace::trace_kind(p)?.virtual_addresses,
            },
            TraceInput::Workload => false,
        };
        out.translation.addresses = if virtual_addresses { AddressSpace::Virtual } else { AddressSpace::Physical };
    }
    Ok(out)
}

/// Runs and, with `image_out`, saves the NVM image afterwards.
pub fn run_saving(cfg: &Config, input: &TraceInput, image_out: Option<&Path>) -> Result<Value, SimError> {
    if image_out.is_some() && !cfg.security.enabled {
        // A saved image is read back through the secure read path (`image verify`): without
        // security it would hold plaintext that every check then reports as tampered.
        return Err(SimError::Config(ConfigError::new("security.enabled", "saving an NVM image needs secure memory (security.enabled = true)")));
    }
    let resolved = resolve_for_input(cfg, input)?;
    let cfg = &resolved;
    // An OS-level trace (format v2, header flag) drives the OS model instead of the engine.
    if let TraceInput::File(p) = input {
        let stream = open_events(cfg, p)?;
        if stream.kind.os_level {
            if image_out.is_some() {
                return Err(SimError::Config(ConfigError::new("run.functional", "saving an NVM image after an OS-level trace is not supported")));
            }
            return crate::os_trace::run_events(cfg, stream.events, &input.describe(cfg));
        }
    }
    if matches!(input, TraceInput::Workload)
        && !cfg.workload.persist_writes
        && cfg.persist.barriers == crate::persist::PersistRule::Trace
        && cfg.workload.contents == crate::config::WorkloadContents::None
    {
        // The common case, without the box `open_records` puts every source in.
        let (gen, n) = workload_generator(cfg)?;
        return run_records_saving(cfg, gen.map(Ok), Some(n), &input.describe(cfg), image_out);
    }
    let (records, hint) = open_records(cfg, input)?;
    run_records_saving(cfg, records, hint, &input.describe(cfg), image_out)
}

/// Runs and writes `out_dir/report.json`, `out_dir/config.toml` (the resolved config) and the
/// figures as text and CSV (`stats.txt`, `stats.csv`: [`crate::stat_docs`]).
pub fn run_to_dir(cfg: &Config, input: &TraceInput, out_dir: &Path) -> Result<Value, SimError> { run_to_dir_saving(cfg, input, out_dir, None) }

/// As [`run_to_dir`], optionally saving the NVM image.
pub fn run_to_dir_saving(cfg: &Config, input: &TraceInput, out_dir: &Path, image_out: Option<&Path>) -> Result<Value, SimError> {
    let io = |e: std::io::Error| SimError::Io { path: out_dir.display().to_string(), message: e.to_string() };
    std::fs::create_dir_all(out_dir).map_err(io)?;
    // A failed run must not leave an earlier run's report in DIR looking like its result.
    for name in ["report.json", "stats.txt", "stats.csv"] {
        match std::fs::remove_file(out_dir.join(name)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
            _ => {}
        }
    }
    let report = run_saving(cfg, input, image_out)?;
    std::fs::write(out_dir.join("config.toml"), resolve_for_input(cfg, input)?.to_commented_toml()).map_err(io)?;
    let text = serde_json::to_string_pretty(&report).expect("report serializes");
    std::fs::write(out_dir.join("report.json"), text).map_err(io)?;
    // The same figures one a line, with what each is (crate::stat_docs).
    std::fs::write(out_dir.join("stats.txt"), crate::stat_docs::stats_text(&report)).map_err(io)?;
    std::fs::write(out_dir.join("stats.csv"), crate::stat_docs::stats_csv(&report)).map_err(io)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use secmem_core::Cycle;

    fn snapshot() -> Snapshot {
        let mut s = Snapshot { cycle: Cycle(1000), core: Default::default(), caches: Default::default(), mc: Default::default(), media: Default::default(), ports: Vec::new() };
        s.core.records = 10;
        s.mc.data_reads = 4;
        s.media.reads_by_class[3] = 7;
        s
    }

    #[test]
    fn the_progress_line_shows_the_share_rate_and_eta_and_without_a_total_the_rate() {
        assert_eq!(progress_line(5_200_000, Some(10_000_000), 2.6), " 52.0%  5.2 M / 10.0 M records  2.0 M/s  ETA 2 s");
        assert_eq!(progress_line(3_000_000, None, 1.5), "3.0 M records  2.0 M/s");
        assert_eq!(duration_text(200.0), "3 min 20 s");
        assert_eq!(duration_text(7500.0), "2 h 05 min");
    }

    #[test]
    fn the_halves_agree_whatever_their_cycles_latencies_queueing_and_core_side_counts() {
        let (a, mut b) = (snapshot(), snapshot());
        b.cycle = Cycle(5);
        b.core.mlp_stall_cycles = 99;
        b.mc.read_latency.record(300);
        b.media.device = vec![("wpq_read_hits", 3), ("bank_conflict_cycles_sum", 40)];
        // The functional half replays requests: it has no hierarchy and retires no trace.
        b.core.records = 3;
        b.core.instructions = 7;
        b.caches[0].hits = 5;
        assert_eq!(halves_disagree(&a, &b), None);
    }

    #[test]
    fn the_halves_disagree_on_any_count_of_requests_controller_work_or_device_traffic() {
        let a = snapshot();
        type Change = (&'static str, fn(&mut Snapshot));
        let changes: [Change; 5] = [
            ("requests", |s| s.core.llc_misses += 1),
            ("requests", |s| s.core.memory_writes_issued += 1),
            ("secure controller", |s| s.mc.mac_ops.tree_verify += 1),
            ("secure controller", |s| s.mc.counter_cache.hits += 1),
            ("device", |s| s.media.writes_by_class[0] += 1),
        ];
        for (what, change) in changes {
            let mut b = snapshot();
            change(&mut b);
            let said = halves_disagree(&a, &b).unwrap_or_else(|| panic!("{what}: not noticed"));
            assert!(said.starts_with(what), "{what}: {said}");
        }
    }
}
