//! Python bindings: thin wrappers that pass JSON text across the boundary, so the Rust core
//! stays free of Python and the Python side stays free of Rust types. Every engine error
//! becomes a `ValueError` carrying the engine's message (which names the field, file, line or
//! record). Ctrl-C during a simulation stops it (see [`sigint`]).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use secmem_sim::config::Config;
use secmem_sim::run::TraceInput;
use std::path::{Path, PathBuf};

fn err<E: std::fmt::Display>(e: E) -> PyErr { PyValueError::new_err(e.to_string()) }

/// SIGINT while the engine runs without the GIL. Python's own handler only sets a flag that
/// Python code looks at, and no Python code runs until the engine returns; so for the length
/// of an engine call SIGINT asks the engine to stop ([`secmem_sim::interrupt`]) instead, and
/// Python's handler is put back after. Calls from several threads share one installation.
#[cfg(unix)]
mod sigint {
    use std::sync::Mutex;

    /// Engine calls under way, and the handler to put back after the last.
    static STATE: Mutex<(usize, Option<libc::sigaction>)> = Mutex::new((0, None));

    extern "C" fn on_sigint(_: libc::c_int) { secmem_sim::interrupt::request(); }

    pub struct Guard;

    impl Guard {
        pub fn install() -> Guard {
            let mut st = STATE.lock().unwrap_or_else(|p| p.into_inner());
            if st.0 == 0 {
                secmem_sim::interrupt::clear();
                // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value, and the
                // handler only stores to an atomic (async-signal-safe).
                unsafe {
                    let mut new: libc::sigaction = std::mem::zeroed();
                    new.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
                    libc::sigemptyset(&mut new.sa_mask);
                    let mut old: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(libc::SIGINT, &new, &mut old) == 0 {
                        st.1 = Some(old);
                    }
                }
            }
            st.0 += 1;
            Guard
        }
    }

    impl Drop for Guard {
        fn drop(&mut self) {
            let mut st = STATE.lock().unwrap_or_else(|p| p.into_inner());
            st.0 -= 1;
            if st.0 == 0 {
                if let Some(old) = st.1.take() {
                    // SAFETY: puts back the action sigaction returned above.
                    unsafe { libc::sigaction(libc::SIGINT, &old, std::ptr::null_mut()) };
                }
            }
        }
    }
}

/// Runs `f` without the GIL, Ctrl-C asking the engine to stop. An engine error becomes a
/// `ValueError`; a stop becomes `KeyboardInterrupt`, also when `f` finished regardless, unless
/// `keeps_partial` (a run returns the records done so far as a report marked
/// `meta.interrupted`).
fn engine_call<T: Send, E: std::fmt::Display + Send>(py: Python<'_>, keeps_partial: bool, f: impl FnOnce() -> Result<T, E> + Send) -> PyResult<T> {
    #[cfg(unix)]
    let guard = sigint::Guard::install();
    let r = py.allow_threads(f);
    #[cfg(unix)]
    drop(guard);
    if secmem_sim::interrupt::requested() && !(keeps_partial && r.is_ok()) {
        return Err(pyo3::exceptions::PyKeyboardInterrupt::new_err("interrupted"));
    }
    r.map_err(err)
}

fn load(preset: Option<&str>, config: Option<&str>, overrides: Vec<String>) -> PyResult<Config> {
    Config::load(preset, config.map(Path::new), &overrides).map_err(err)
}

/// A trace file, or the config's built-in workload when none is given.
fn trace_input(trace: Option<String>) -> TraceInput { trace.map_or(TraceInput::Workload, |t| TraceInput::File(PathBuf::from(t))) }

/// `[{"name", "source"}]` for every preset.
#[pyfunction]
fn presets() -> String {
    let v: Vec<_> = secmem_sim::presets::PRESETS
        .iter()
        .map(|p| serde_json::json!({"name": p.name, "source": p.source}))
        .collect();
    serde_json::to_string(&v).unwrap()
}

/// The resolved config as commented TOML.
#[pyfunction]
#[pyo3(signature = (preset=None, config=None, overrides=vec![]))]
fn config_toml(preset: Option<&str>, config: Option<&str>, overrides: Vec<String>) -> PyResult<String> {
    Ok(load(preset, config, overrides)?.to_commented_toml())
}

/// The resolved config as JSON.
#[pyfunction]
#[pyo3(signature = (preset=None, config=None, overrides=vec![]))]
fn config_json(preset: Option<&str>, config: Option<&str>, overrides: Vec<String>) -> PyResult<String> {
    Ok(load(preset, config, overrides)?.to_json().to_string())
}

/// Runs a simulation; returns the report as JSON. Writes `out/report.json` and
/// `out/config.toml` when `out` is given. The GIL is released while simulating.
#[pyfunction]
#[pyo3(signature = (preset=None, config=None, overrides=vec![], trace=None, out=None, save_image=None))]
fn run(
    py: Python<'_>,
    preset: Option<&str>,
    config: Option<&str>,
    overrides: Vec<String>,
    trace: Option<String>,
    out: Option<String>,
    save_image: Option<String>,
) -> PyResult<String> {
    let cfg = load(preset, config, overrides)?;
    let input = trace_input(trace);
    let image = save_image.as_deref().map(Path::new);
    let report = engine_call(py, true, || match &out {
        Some(dir) => secmem_sim::run::run_to_dir_saving(&cfg, &input, Path::new(dir), image),
        None => secmem_sim::run::run_saving(&cfg, &input, image),
    })?;
    Ok(report.to_string())
}

/// Writes a synthetic trace; returns the number of records.
#[pyfunction]
#[pyo3(signature = (pattern, requests, footprint_bytes, read_ratio, seed, out, format="binary", stride_bytes=4096, zipf_theta=0.99, inst_gap=10))]
#[allow(clippy::too_many_arguments)]
fn trace_gen(
    py: Python<'_>,
    pattern: &str,
    requests: u64,
    footprint_bytes: u64,
    read_ratio: f64,
    seed: u64,
    out: &str,
    format: &str,
    stride_bytes: u64,
    zipf_theta: f64,
    inst_gap: u32,
) -> PyResult<u64> {
    let spec = secmem_trace::generate::GenSpec {
        pattern: pattern.parse().map_err(err)?,
        requests,
        footprint_bytes,
        read_ratio,
        seed,
        stride_bytes,
        zipf_theta,
        inst_gap,
        base_addr: 0,
    };
    let format: secmem_trace::Format = format.parse().map_err(err)?;
    let gen = secmem_trace::generate::Generator::new(&spec).map_err(err)?;
    engine_call(py, false, || secmem_trace::write(Path::new(out), format, gen))
}

/// Converts a trace between formats (input format detected unless given); returns records.
/// A version-2 trace (OS-level or not) stays version 2. Stops at the first bad record, naming
/// it, rather than writing a partial trace silently.
#[pyfunction]
#[pyo3(signature = (input, output, out_format="binary", in_format=None))]
fn trace_convert(py: Python<'_>, input: &str, output: &str, out_format: &str, in_format: Option<&str>) -> PyResult<u64> {
    let out_format: secmem_trace::Format = out_format.parse().map_err(err)?;
    let from = in_format.map(|f| f.parse::<secmem_trace::Format>()).transpose().map_err(err)?;
    engine_call(py, false, || secmem_trace::convert(Path::new(input), from, Path::new(output), out_format))
}

/// Summary of a trace as JSON (with an `os` block for OS-level traces).
#[pyfunction]
#[pyo3(signature = (path, format=None))]
fn trace_info(py: Python<'_>, path: &str, format: Option<&str>) -> PyResult<String> {
    let stream = match format {
        Some(f) => secmem_trace::open_events_as(Path::new(path), f.parse().map_err(err)?),
        None => secmem_trace::open_events(Path::new(path)),
    }
    .map_err(err)?;
    let (os_level, virtual_addresses, format, compression) = (stream.kind.os_level, stream.kind.virtual_addresses, stream.format, stream.compression);
    let info = py.allow_threads(|| secmem_trace::info_events(stream.events, os_level)).map_err(err)?;
    // Whether `secmem run` translates the trace (translation.addresses = "auto").
    let mut v: serde_json::Value = serde_json::from_str(&info.to_json()).expect("TraceInfo::to_json is JSON");
    v["addresses"] = serde_json::json!(if virtual_addresses { "virtual" } else { "physical" });
    v["format"] = serde_json::json!(format.name());
    v["compression"] = serde_json::json!(compression.to_string());
    // The share of distinct contents among the lines writes carry: low when lines repeat.
    v["distinct_data_share"] = if info.records_with_data > 0 {
        serde_json::json!(info.distinct_data_contents as f64 / info.records_with_data as f64)
    } else {
        serde_json::Value::Null
    };
    Ok(v.to_string())
}

/// Reads lackey output from file descriptor `fd` (the read end of a pipe whose write end a
/// running `valgrind --tool=lackey --trace-mem=yes --log-fd=N` holds; this function owns and
/// closes it) and writes it to `output` as a binary trace marked virtual; returns the record
/// count. With `progress`, a line on stderr every 2^20 records.
#[cfg(unix)]
#[pyfunction]
#[pyo3(signature = (fd, output, name, max_records=None, progress=false, skip_records=0))]
fn trace_capture_fd(py: Python<'_>, fd: i32, output: &str, name: &str, max_records: Option<u64>, progress: bool, skip_records: u64) -> PyResult<u64> {
    let window = secmem_trace::CaptureWindow { skip: skip_records, max: max_records };
    capture_from_fd(py, fd, progress, "", |pipe, show| {
        secmem_trace::capture_lackey(std::io::BufReader::with_capacity(1 << 20, pipe), name.to_string(), Path::new(output), window, show)
    })
}

/// As [`trace_capture_fd`], for the valgrind process `pid`, whose stores are given the lines
/// they wrote, read from its memory every `interval_records` records (see
/// `secmem_trace::capture`). Returns the capture's counts as JSON.
#[cfg(target_os = "linux")]
#[pyfunction]
#[pyo3(signature = (fd, pid, output, name, max_records=None, interval_records=secmem_trace::capture::DEFAULT_INTERVAL_RECORDS, progress=false, skip_records=0))]
#[allow(clippy::too_many_arguments)]
fn trace_capture_data_fd(py: Python<'_>, fd: i32, pid: i32, output: &str, name: &str, max_records: Option<u64>, interval_records: u64, progress: bool, skip_records: u64) -> PyResult<String> {
    let window = secmem_trace::CaptureWindow { skip: skip_records, max: max_records };
    let c = capture_from_fd(py, fd, progress, " with data", |pipe, show| {
        secmem_trace::capture::capture_lackey_data(pipe, pid, name.to_string(), Path::new(output), window, interval_records, show)
    })?;
    Ok(serde_json::json!({
        "records": c.records, "writes": c.writes, "writes_with_data": c.writes_with_data,
        "writes_without_data": c.writes_without_data, "pauses": c.pauses,
    })
    .to_string())
}

/// Runs a capture over the pipe `fd` (the read end of valgrind's `--log-fd`; owned and closed
/// here) without the GIL, with a progress line on stderr when `progress` ("captured N M
/// records{what} (R M/s)").
#[cfg(unix)]
fn capture_from_fd<T: Send>(
    py: Python<'_>,
    fd: i32,
    progress: bool,
    what: &str,
    capture: impl FnOnce(std::fs::File, &mut dyn FnMut(u64)) -> Result<T, secmem_trace::TraceError> + Send,
) -> PyResult<T> {
    use std::io::Write;
    use std::os::fd::FromRawFd;
    // SAFETY: the caller hands over a descriptor it opened and no longer uses; the File owns it.
    let pipe = unsafe { std::fs::File::from_raw_fd(fd) };
    let start = std::time::Instant::now();
    let mut show = |n: u64| {
        if progress {
            let rate = n as f64 / start.elapsed().as_secs_f64().max(1e-9) / 1e6;
            let _ = write!(std::io::stderr(), "\rcaptured {:.1} M records{what} ({rate:.2} M/s)", n as f64 / 1e6);
        }
    };
    let r = py.allow_threads(|| capture(pipe, &mut show));
    if progress {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
    r.map_err(err)
}

/// Writes a copy-on-write workload (forkbench, redis, noncopy, writeamp, churn) as an OS-level (v2)
/// trace; returns the number of records.
#[pyfunction]
#[pyo3(signature = (workload, out, page_size="4k", lines_per_page=None, footprint_bytes=16 << 20, ops=20_000, seed=1, format="binary", with_data=false))]
#[allow(clippy::too_many_arguments)]
fn cow_trace(
    py: Python<'_>,
    workload: &str,
    out: &str,
    page_size: &str,
    lines_per_page: Option<u64>,
    footprint_bytes: u64,
    ops: u64,
    seed: u64,
    format: &str,
    with_data: bool,
) -> PyResult<u64> {
    use secmem_sim::cow_workloads::{CowSpec, CowWorkload};
    use secmem_sim::os::PageSize;
    let workload: CowWorkload = workload.parse().map_err(err)?;
    let page_size = secmem_sim::os::parse_page_size(page_size).map_err(err)?;
    let format: secmem_trace::Format = format.parse().map_err(err)?;
    let lines_per_page = lines_per_page.unwrap_or(if page_size == PageSize::Huge { 512 } else { 32 });
    let spec = CowSpec { workload, page_size, footprint_bytes, lines_per_page, ops, seed };
    engine_call(py, false, || secmem_sim::cow_workloads::write_trace(&spec, Path::new(out), format, with_data))
}

/// An I/O run (`[io]` workload on the `[ssd]` drive beside the secure memory): JSON with
/// `io`, `ssd`, `memory` and `meta`.
#[pyfunction]
#[pyo3(signature = (preset=None, config=None, overrides=vec![]))]
fn io_run(py: Python<'_>, preset: Option<&str>, config: Option<&str>, overrides: Vec<String>) -> PyResult<String> {
    let cfg = load(preset, config, overrides)?;
    let out = engine_call(py, false, || secmem_sim::io::run_io(&cfg))?;
    Ok(out.to_string())
}

/// This host's rates of the software storage baselines' cryptography (AES-XTS and
/// HMAC-SHA256, ns per 512 B sector, median of five rounds over `sectors` sectors): JSON.
#[pyfunction]
#[pyo3(signature = (sectors=200_000))]
fn io_calibrate(py: Python<'_>, sectors: usize) -> String {
    let r = py.allow_threads(|| secmem_sim::io::host_rates(sectors));
    serde_json::json!({"aes_xts_ns_per_sector": r.aes_xts_ns_per_sector, "hmac_sha256_ns_per_sector": r.hmac_sha256_ns_per_sector}).to_string()
}

/// Runs `command` under strace and writes its pread64/pwrite64 calls to `output` as a fio
/// iolog (v3): JSON {"reads", "writes", "files", "skipped"}.
#[pyfunction]
fn io_capture(py: Python<'_>, command: Vec<String>, output: &str) -> PyResult<String> {
    let c = py.allow_threads(|| secmem_sim::io::strace::capture(&command, Path::new(output))).map_err(err)?;
    Ok(serde_json::json!({"reads": c.reads, "writes": c.writes, "syncs": c.syncs, "files": c.files, "skipped": c.skipped}).to_string())
}

/// Crash injection: JSON {"points", "recovered", "mismatches", ...}.
#[pyfunction]
#[pyo3(signature = (preset=None, config=None, overrides=vec![], trace=None, points=2000, seed=1))]
fn crash(
    py: Python<'_>,
    preset: Option<&str>,
    config: Option<&str>,
    overrides: Vec<String>,
    trace: Option<String>,
    points: u64,
    seed: u64,
) -> PyResult<String> {
    let cfg = load(preset, config, overrides)?;
    let input = trace_input(trace);
    let out = engine_call(py, false, || secmem_sim::harness::crash_campaign(&cfg, &input, points, seed))?;
    Ok(serde_json::to_string(&out).unwrap())
}

/// Attack injection: JSON {class: {"injected", "detected", ...}, "clean_reads", "false_alarms"}.
#[pyfunction]
#[pyo3(signature = (preset=None, config=None, overrides=vec![], trace=None, per_class=500, seed=1, classes=None, clean_reads=1_000_000))]
#[allow(clippy::too_many_arguments)]
fn attack(
    py: Python<'_>,
    preset: Option<&str>,
    config: Option<&str>,
    overrides: Vec<String>,
    trace: Option<String>,
    per_class: u64,
    seed: u64,
    classes: Option<Vec<String>>,
    clean_reads: u64,
) -> PyResult<String> {
    let cfg = load(preset, config, overrides)?;
    let input = trace_input(trace);
    let out = engine_call(py, false, || secmem_sim::harness::attack_campaign(&cfg, &input, classes.as_deref(), per_class, clean_reads, seed))?;
    let mut obj = serde_json::Map::new();
    for (k, v) in &out.classes {
        obj.insert(k.clone(), serde_json::to_value(v).unwrap());
    }
    obj.insert("clean_reads".into(), out.clean_reads.into());
    obj.insert("false_alarms".into(), out.false_alarms.into());
    obj.insert("all_detected".into(), out.all_detected().into());
    obj.insert("untested_classes".into(), serde_json::to_value(&out.untested_classes).unwrap());
    obj.insert("examples".into(), serde_json::to_value(&out.examples).unwrap());
    Ok(serde_json::Value::Object(obj).to_string())
}

/// Attacks on the drive under D-Shield (`secmem io-attack`): JSON as `attack`'s.
#[pyfunction]
#[pyo3(signature = (preset=None, config=None, overrides=vec![], ios=4000, per_class=200, seed=1, classes=None))]
#[allow(clippy::too_many_arguments)]
fn io_attack(py: Python<'_>, preset: Option<&str>, config: Option<&str>, overrides: Vec<String>, ios: u64, per_class: u64, seed: u64, classes: Option<Vec<String>>) -> PyResult<String> {
    let cfg = load(preset, config, overrides)?;
    let out = engine_call(py, false, || secmem_sim::io::dshield::campaign::attack_campaign(&cfg, ios, classes.as_deref(), per_class, seed))?;
    let mut v = serde_json::to_value(&out).unwrap();
    v["all_detected"] = out.all_detected().into();
    Ok(v.to_string())
}

/// Crashes of the DIE with recovery (`secmem io-crash`): JSON {"points", "recovered", ...}.
#[pyfunction]
#[pyo3(signature = (preset=None, config=None, overrides=vec![], ios=4000, points=100, seed=1))]
#[allow(clippy::too_many_arguments)]
fn io_crash(py: Python<'_>, preset: Option<&str>, config: Option<&str>, overrides: Vec<String>, ios: u64, points: u64, seed: u64) -> PyResult<String> {
    let cfg = load(preset, config, overrides)?;
    let out = engine_call(py, false, || secmem_sim::io::dshield::campaign::crash_campaign(&cfg, ios, points, seed))?;
    Ok(serde_json::to_string(&out).unwrap())
}

/// Verifies a saved NVM image: JSON {"data_lines_verified", "integrity_failures", ...}.
#[pyfunction]
#[pyo3(signature = (path, preset=None, config=None, overrides=vec![]))]
fn image_verify(py: Python<'_>, path: &str, preset: Option<&str>, config: Option<&str>, overrides: Vec<String>) -> PyResult<String> {
    let cfg = load(preset, config, overrides)?;
    let out = engine_call(py, false, || secmem_sim::harness::verify_image(&cfg, Path::new(path)))?;
    let mut v = serde_json::to_value(&out).unwrap();
    v["ok"] = out.ok().into();
    Ok(v.to_string())
}

/// One eADR drain (Horus): JSON with drain_cycles, memory_reads/writes, mac_ops,
/// flushed_lines, energy_joules, breakdowns and (with `recover`) recovery and oracle check.
/// Content: the paper's worst case, or the state `trace` (or the built-in workload, with
/// `from_workload`) leaves after `after_records` records.
#[pyfunction]
#[pyo3(signature = (scheme, preset=None, config=None, overrides=vec![], trace=None, from_workload=false, after_records=None, recover=false))]
#[allow(clippy::too_many_arguments)]
fn drain(
    py: Python<'_>,
    scheme: &str,
    preset: Option<&str>,
    config: Option<&str>,
    overrides: Vec<String>,
    trace: Option<String>,
    from_workload: bool,
    after_records: Option<u64>,
    recover: bool,
) -> PyResult<String> {
    use secmem_sim::harness::drain::{drain_run, DrainContent, DrainScheme};
    let cfg = load(preset, config, overrides)?;
    let scheme: DrainScheme = scheme.parse().map_err(|e: String| err(format!("--scheme: {e}")))?;
    let content = match (trace, from_workload) {
        (Some(t), _) => DrainContent::Trace { input: TraceInput::File(PathBuf::from(t)), after_records },
        (None, true) => DrainContent::Trace { input: TraceInput::Workload, after_records },
        (None, false) => DrainContent::WorstCase,
    };
    let out = engine_call(py, false, || drain_run(&cfg, scheme, &content, recover))?;
    Ok(out.to_json().to_string())
}

/// Attacks on Horus' vault: JSON {"scheme", "classes": {class: {injected, detected, ...}}, ...}.
#[pyfunction]
#[pyo3(signature = (dlm=false, preset=None, config=None, overrides=vec![], trace=None, per_class=100, seed=1))]
#[allow(clippy::too_many_arguments)]
fn vault_attack(
    py: Python<'_>,
    dlm: bool,
    preset: Option<&str>,
    config: Option<&str>,
    overrides: Vec<String>,
    trace: Option<String>,
    per_class: u64,
    seed: u64,
) -> PyResult<String> {
    let cfg = load(preset, config, overrides)?;
    let input = trace_input(trace);
    let out = engine_call(py, false, || secmem_sim::harness::vault_attack_campaign(&cfg, &input, dlm, per_class, seed))?;
    let mut v = serde_json::to_value(&out).unwrap();
    v["all_detected"] = out.all_detected().into();
    Ok(v.to_string())
}

/// `[{"name", "description"}]` of the bench scenarios.
#[pyfunction]
fn bench_scenarios() -> String {
    let v: Vec<_> = secmem_sim::bench::SCENARIOS
        .iter()
        .map(|s| serde_json::json!({"name": s.name, "description": s.description}))
        .collect();
    serde_json::to_string(&v).unwrap()
}

/// Runs one bench scenario in this process; JSON {requests_per_s, peak_rss_bytes, ...}.
#[pyfunction]
#[pyo3(signature = (name, scale=1.0))]
fn bench_run(py: Python<'_>, name: &str, scale: f64) -> PyResult<String> {
    let r = engine_call(py, false, || secmem_sim::bench::run_scenario(name, scale))?;
    Ok(serde_json::to_string(&r).unwrap())
}

/// A copy-on-write workload (forkbench, redis, noncopy, writeamp, churn) through the OS model on
/// design `scheme`; JSON with cycles, memory_writes, memory_reads and the stats block.
#[pyfunction]
#[pyo3(signature = (workload, scheme, page_size="4k", lines_per_page=None, footprint_bytes=16 << 20, ops=20_000, preset="lelantus", overrides=vec![], seed=1))]
#[allow(clippy::too_many_arguments)]
fn cow_workload(
    py: Python<'_>,
    workload: &str,
    scheme: &str,
    page_size: &str,
    lines_per_page: Option<u64>,
    footprint_bytes: u64,
    ops: u64,
    preset: &str,
    overrides: Vec<String>,
    seed: u64,
) -> PyResult<String> {
    use secmem_sim::cow_workloads::{CowSpec, CowWorkload};
    use secmem_sim::os::PageSize;
    let workload: CowWorkload = workload.parse().map_err(err)?;
    let page_size = secmem_sim::os::parse_page_size(page_size).map_err(err)?;
    let mut o = vec![format!("run.design={}", serde_json::to_string(scheme).unwrap())];
    o.extend(overrides);
    let cfg = load(Some(preset), None, o)?;
    let lines_per_page = lines_per_page.unwrap_or(if page_size == PageSize::Huge { 512 } else { 32 });
    let spec = CowSpec { workload, page_size, footprint_bytes, lines_per_page, ops, seed };
    let out = engine_call(py, false, || secmem_sim::cow_workloads::run(&cfg, &spec))?;
    Ok(out.to_string())
}

/// The registered designs: `[{"name", "summary", "needs_security", "drain_schemes":
/// [{"name", "summary"}]}]`, in registry order.
#[pyfunction]
fn designs() -> String {
    let v: Vec<_> = secmem_sim::designs::REGISTRY
        .iter()
        .map(|d| {
            let schemes: Vec<_> = d.drain_schemes.iter().map(|s| serde_json::json!({"name": s.name, "summary": s.summary})).collect();
            serde_json::json!({"name": d.name, "summary": d.summary, "needs_security": d.needs_security, "drain_schemes": schemes})
        })
        .collect();
    serde_json::to_string(&v).unwrap()
}

/// Every documented statistic as JSON: `[{"name", "unit", "description"}]`.
#[pyfunction]
fn stat_docs() -> String {
    let v: Vec<_> = secmem_sim::stat_docs::all()
        .into_iter()
        .map(|(name, unit, description)| serde_json::json!({"name": name, "unit": unit, "description": description}))
        .collect();
    serde_json::to_string(&v).unwrap()
}

#[pyfunction]
fn version() -> &'static str { env!("CARGO_PKG_VERSION") }

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(presets, m)?)?;
    m.add_function(wrap_pyfunction!(config_toml, m)?)?;
    m.add_function(wrap_pyfunction!(config_json, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(trace_gen, m)?)?;
    m.add_function(wrap_pyfunction!(trace_convert, m)?)?;
    m.add_function(wrap_pyfunction!(trace_info, m)?)?;
    m.add_function(wrap_pyfunction!(crash, m)?)?;
    m.add_function(wrap_pyfunction!(image_verify, m)?)?;
    m.add_function(wrap_pyfunction!(attack, m)?)?;
    m.add_function(wrap_pyfunction!(drain, m)?)?;
    m.add_function(wrap_pyfunction!(vault_attack, m)?)?;
    #[cfg(unix)]
    m.add_function(wrap_pyfunction!(trace_capture_fd, m)?)?;
    m.add_function(wrap_pyfunction!(io_run, m)?)?;
    m.add_function(wrap_pyfunction!(io_calibrate, m)?)?;
    m.add_function(wrap_pyfunction!(io_capture, m)?)?;
    m.add_function(wrap_pyfunction!(io_attack, m)?)?;
    m.add_function(wrap_pyfunction!(io_crash, m)?)?;
    #[cfg(target_os = "linux")]
    m.add_function(wrap_pyfunction!(trace_capture_data_fd, m)?)?;
    m.add_function(wrap_pyfunction!(bench_scenarios, m)?)?;
    m.add_function(wrap_pyfunction!(bench_run, m)?)?;
    m.add_function(wrap_pyfunction!(cow_workload, m)?)?;
    m.add_function(wrap_pyfunction!(cow_trace, m)?)?;
    m.add_function(wrap_pyfunction!(designs, m)?)?;
    m.add_function(wrap_pyfunction!(stat_docs, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}
