"""The Python API over the Rust engine: runs return reports as dicts (and one-row
DataFrames); sweeps return one DataFrame row per run, in-process, with no text parsing."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence

from . import _native


class SecmemError(ValueError):
    """A config, trace or input error reported by the engine (the message names the field,
    file, line or record)."""


def _call(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except UnicodeEncodeError as e:  # a str the engine cannot take (a non-UTF-8 file name)
        raise SecmemError(f"{e.object!r} is not valid UTF-8 (the engine takes UTF-8 paths, names and values)") from None
    except ValueError as e:  # the engine raises ValueError with a precise message
        raise SecmemError(str(e)) from None
    except OverflowError as e:  # an integer argument the engine cannot hold (64-bit unsigned)
        raise SecmemError(f"an integer argument is out of range: {e}") from None


_U64_MAX = (1 << 64) - 1
_U32_MAX = (1 << 32) - 1
# The largest `secmem bench --scale`.
_MAX_BENCH_SCALE = 1000
# The largest `secmem bench --rounds`.
_MAX_BENCH_ROUNDS = 100
# The functional-mode speed target (issue 3) compares these two scenarios: the same trace in
# functional and in counting mode.
_FUNCTIONAL_SCENARIO, _COUNTING_SCENARIO = "functional-random", "secure-lazy-random"


def _uint(name: str, value: Any, minimum: int = 0, optional: bool = False, maximum: int = _U64_MAX) -> None:
    """Rejects what the engine's unsigned integer arguments cannot take, naming the argument
    (the engine's own conversion error does not say which one)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        too_big = isinstance(value, int) and not isinstance(value, bool) and value > maximum
        bound = f"in {minimum}..={maximum}" if maximum != _U64_MAX or too_big else f">= {minimum}"
        raise SecmemError(f"{name} must be an integer {bound}, got {value!r}")


def _float(name: str, value: Any, what: str = "a number") -> float:
    """A number argument as a float, naming the argument when it is not one (it "must be
    ``what``") or is too large for a float (an int of 400 digits)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SecmemError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except OverflowError:
        raise SecmemError(f"{name} is too large for a number: {value!r}") from None


def _overrides(params: Optional[Mapping[str, Any]] | Optional[Sequence[str]]) -> List[str]:
    """Accepts {"llc.size_kib": 32768} or ["llc.size_kib=32768"]."""
    if params is None:
        return []
    if isinstance(params, (str, bytes)):
        # A lone string would be iterated character by character ("override 'w' is not ...").
        raise SecmemError(f"params must be a mapping or a list of 'key=value' strings, got the string {params!r}")
    if isinstance(params, Mapping):
        out = []
        for k, v in params.items():
            if isinstance(v, bool):
                v = "true" if v else "false"
            elif isinstance(v, str):
                v = json.dumps(v)  # a TOML basic string
            elif isinstance(v, float) and not math.isfinite(v):
                v = "nan" if v != v else ("inf" if v > 0 else "-inf")
            elif not isinstance(v, (int, float)):
                # Nested tables, lists, None: no scalar config value; say so rather than pass
                # their str() on as a string.
                raise SecmemError(f"params[{k!r}]: a config value is a number, bool or string, got {type(v).__name__} {v!r}")
            out.append(f"{k}={v}")
        return out
    try:
        items = list(params)
    except TypeError:
        raise SecmemError(f"params must be a mapping or a list of 'key=value' strings, got {type(params).__name__}") from None
    for p in items:
        if not isinstance(p, str):
            raise SecmemError(f"params: each override is a 'key=value' string, got {type(p).__name__} {p!r}")
    return items


class Report(dict):
    """A run's report: ``{"config": ..., "meta": ..., "stats": ...}``."""

    @property
    def config(self) -> Dict[str, Any]:
        return self["config"]

    @property
    def meta(self) -> Dict[str, Any]:
        return self["meta"]

    @property
    def stats(self) -> Dict[str, Any]:
        return self["stats"]

    def flat(self) -> Dict[str, Any]:
        return flatten(self)

    def frame(self):
        """The report as a one-row pandas DataFrame (dotted column names)."""
        import pandas as pd

        return pd.DataFrame([self.flat()])


def flatten(report: Mapping[str, Any], prefix: str = "") -> Dict[str, Any]:
    """Flattens nested dicts to dotted keys: ``stats.memory.reads.data``."""
    out: Dict[str, Any] = {}
    for k, v in report.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def stat_docs(prefix: str = "") -> List[Dict[str, str]]:
    """Every statistic a run can report, ``[{"name", "unit", "description"}]``, whose dotted
    name starts with ``prefix`` (a ``*`` in a name stands for one segment of a family). The
    same table writes ``stats.txt`` beside each ``report.json``."""
    return [d for d in json.loads(_native.stat_docs()) if d["name"].startswith(prefix)]


def presets() -> List[Dict[str, str]]:
    """Every preset: ``[{"name", "source"}]``."""
    return json.loads(_native.presets())


def config_toml(preset: Optional[str] = None, config: Optional[str] = None, params=None) -> str:
    """The resolved config as commented TOML (descriptions on every field)."""
    return _call(_native.config_toml, preset, _path(config, "config"), _overrides(params))


def config_json(preset: Optional[str] = None, config: Optional[str] = None, params=None) -> Dict[str, Any]:
    """The resolved config as a dict."""
    return json.loads(_call(_native.config_json, preset, _path(config, "config"), _overrides(params)))


def _path(p, name: str = "path") -> Optional[str]:
    """A path argument as a string; an empty one is an error naming the argument (the engine
    would take it as the current directory, or fail without saying which argument it was)."""
    if p is None:
        return None
    if not isinstance(p, (str, bytes, os.PathLike)):
        raise SecmemError(f"{name} must be a path (str or os.PathLike), got {type(p).__name__} {p!r}")
    s = os.fspath(p)
    if isinstance(s, bytes):
        s = os.fsdecode(s)
    if not s:
        raise SecmemError(f"{name}: empty path")
    return s


def run(
    preset: Optional[str] = None,
    trace: Optional[str] = None,
    config: Optional[str] = None,
    params=None,
    out: Optional[str] = None,
    save_image: Optional[str] = None,
    partial: bool = False,
) -> Report:
    """Runs one simulation. ``trace=None`` uses the config's built-in synthetic workload.
    With ``out``, also writes ``out/report.json`` and ``out/config.toml``. With
    ``save_image`` (functional mode), saves the post-run NVM image there.

    Ctrl-C stops the engine within a few milliseconds. The records done so far are reported
    with ``meta.interrupted = True`` (and so written to ``out``); this function then raises
    ``KeyboardInterrupt``, or with ``partial=True`` returns that report."""
    text = _call(
        _native.run, preset, _path(config, "config"), _overrides(params), _path(trace, "trace"), _path(out, "out"),
        _path(save_image, "save_image"),
    )
    rep = Report(json.loads(text))
    if rep["meta"].get("interrupted") and not partial:
        raise KeyboardInterrupt
    return rep


def trace_gen(
    out: str,
    pattern: str = "random",
    requests: int = 1_000_000,
    footprint_bytes: int = 1 << 30,
    read_ratio: float = 0.5,
    seed: int = 1,
    format: str = "binary",
    stride_bytes: Optional[int] = None,
    zipf_theta: Optional[float] = None,
    inst_gap: int = 10,
) -> int:
    """Writes a seeded synthetic trace; returns the number of records. ``stride_bytes``
    (stride, default 4096) and ``zipf_theta`` (zipf, default 0.99) are refused for the other
    patterns."""
    if isinstance(pattern, str):
        _refuse_unused(pattern.strip().lower(), {"stride_bytes": stride_bytes, "zipf_theta": zipf_theta})
    stride_bytes = 4096 if stride_bytes is None else stride_bytes
    zipf_theta = 0.99 if zipf_theta is None else _float("zipf_theta", zipf_theta)
    read_ratio = _float("read_ratio", read_ratio)
    for name, v in (("requests", requests), ("footprint_bytes", footprint_bytes), ("seed", seed), ("stride_bytes", stride_bytes)):
        _uint(name, v)
    _uint("inst_gap", inst_gap, maximum=_U32_MAX)  # a record's gap field is 32 bits
    return _call(
        _native.trace_gen, pattern, requests, footprint_bytes, read_ratio, seed, _path(out, "out"),
        format, stride_bytes, zipf_theta, inst_gap,
    )


COW_WORKLOADS = ("forkbench", "redis", "noncopy", "writeamp", "churn")
# The designs a CoW workload compares (baseline = kernel CoW); each is a run.design.
COW_SCHEMES = ("baseline", "lelantus", "lelantus-cow", "silent-shredder")

SYNTHETIC_PATTERNS = ("sequential", "random", "stride", "zipf")

# `trace gen` options that apply only to some patterns (the rest apply to all: footprint,
# format, output). An option given for a pattern that does not use it is refused, named, with
# the patterns it is for: it would otherwise be silently ignored.
TRACE_GEN_OPTION_PATTERNS = {
    "requests": SYNTHETIC_PATTERNS,
    "read_ratio": SYNTHETIC_PATTERNS,
    "inst_gap": SYNTHETIC_PATTERNS,
    "stride_bytes": ("stride",),
    "zipf_theta": ("zipf",),
    "page_size": COW_WORKLOADS,
    "with_data": COW_WORKLOADS,
    "lines_per_page": ("forkbench", "noncopy", "writeamp"),
    "ops": ("redis", "churn"),
    # Every synthetic pattern draws its reads and writes from the seed; of the CoW workloads
    # only redis (its parent's operations) and churn (everything) draw anything.
    "seed": SYNTHETIC_PATTERNS + ("redis", "churn"),
}


def _refuse_unused(pattern: str, given: Mapping[str, Any], spell=lambda n: n, what: Optional[str] = None) -> None:
    """Refuses, by name, options in ``given`` (those not None) that ``pattern`` (a pattern or
    CoW workload) does not use: they would otherwise be silently ignored. ``spell`` turns an
    option's name into how the caller's user wrote it (``--stride-bytes`` on the CLI)."""
    unused = [
        f"{spell(n)} (only {', '.join(TRACE_GEN_OPTION_PATTERNS[n])})"
        for n, v in given.items()
        if v is not None and pattern not in TRACE_GEN_OPTION_PATTERNS[n]
    ]
    if unused:
        raise SecmemError(f"{what or 'pattern ' + pattern}: options that do not apply to it: {'; '.join(unused)}")


def _cow_options(workload: str, lines_per_page: Optional[int], footprint_bytes: int, ops: Optional[int], seed: Optional[int]) -> tuple:
    """A CoW workload's spec arguments, checked: options it does not use refused, the others
    in range; returns ``(ops, seed)`` with their defaults (20000 and 1) filled in."""
    _refuse_unused(workload, {"lines_per_page": lines_per_page, "ops": ops, "seed": seed})
    ops = 20_000 if ops is None else ops
    seed = 1 if seed is None else seed
    _uint("lines_per_page", lines_per_page, optional=True)
    for name, v in (("footprint_bytes", footprint_bytes), ("ops", ops), ("seed", seed)):
        _uint(name, v)
    return ops, seed


def cow_trace(
    workload: str,
    out: str,
    page_size: str = "4k",
    lines_per_page: Optional[int] = None,
    footprint_bytes: int = 16 << 20,
    ops: Optional[int] = None,
    seed: Optional[int] = None,
    format: str = "binary",
    with_data: bool = False,
) -> int:
    """Writes a copy-on-write workload (one of ``COW_WORKLOADS``) as an OS-level (v2) trace:
    alloc, process-tagged stores and loads, fork and the region-of-interest marker. ``run``
    replays it through the OS model with the counts of :func:`cow_workload`. ``with_data``:
    stores carry their content (for functional mode). Returns the number of records.
    ``lines_per_page`` (forkbench, noncopy, writeamp), ``ops`` and ``seed`` (redis and churn;
    defaults 20000 and 1) are refused for the workloads that do not use them."""
    ops, seed = _cow_options(workload, lines_per_page, footprint_bytes, ops, seed)
    return _call(
        _native.cow_trace, workload, _path(out, "out"), page_size, lines_per_page, footprint_bytes, ops, seed, format,
        with_data,
    )


def trace_convert(input: str, output: str, out_format: str = "binary", in_format: Optional[str] = None) -> int:
    """Converts a trace (secmem binary/text, Ramulator, DRAMSim3, lackey) to secmem binary or text."""
    return _call(_native.trace_convert, _path(input, "input"), _path(output, "output"), out_format, in_format)


def trace_info(path: str, format: Optional[str] = None) -> Dict[str, Any]:
    """Counts and footprint of a trace."""
    return json.loads(_call(_native.trace_info, _path(path, "path"), format))


def trace_capture(
    command: Sequence[str],
    output: str,
    max_records: Optional[int] = None,
    progress: Optional[bool] = None,
    data: bool = False,
    data_interval: int = 65536,
    skip_records: int = 0,
) -> Dict[str, Any]:
    """Runs `command` under valgrind lackey and writes the loads and stores it makes as a
    secmem binary trace at `output`, marked virtual (`secmem run` translates its addresses).
    Lackey's text streams through a pipe into the converter: no text trace is written to
    disk. Drops the first `skip_records` records (a program's start is mostly the dynamic
    loader) and stops after `max_records` records when given (the program is then stopped).
    `progress` (default: stderr is a terminal) shows the records captured so far.

    With `data`, every store also carries the 64 B line the program wrote: every
    `data_interval` records the program is paused and the lines stored to since the last
    pause are read from its memory (docs/trace-format.md, "Traces that carry data", says
    what this resolution misses). Linux only.

    Returns {"records", "seconds", "exit_status"}, and with `data` also "writes",
    "writes_with_data", "writes_without_data" and "pauses"."""
    import shutil
    import time

    command = [str(c) for c in command]
    if not command:
        raise SecmemError("trace capture: no command given (secmem trace capture -o FILE -- CMD ARGS...)")
    if max_records is not None and max_records <= 0:
        raise SecmemError(f"trace capture: --max-records must be at least 1, got {max_records}")
    if skip_records < 0:
        raise SecmemError(f"trace capture: --skip-records must be at least 0, got {skip_records}")
    if data and data_interval <= 0:
        raise SecmemError(f"trace capture: --data-interval must be at least 1 record, got {data_interval}")
    if data and not hasattr(_native, "trace_capture_data_fd"):
        raise SecmemError("trace capture --data reads the program's memory through /proc and needs Linux")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise SecmemError(
            "trace capture needs valgrind, which is not installed "
            "(Debian/Ubuntu: sudo apt-get install valgrind; Fedora: sudo dnf install valgrind)"
        )
    program = command[0]
    if shutil.which(program) is None:
        raise SecmemError(f"trace capture: command not found: {program!r}")
    output = _path(output, "output")
    if progress is None:
        progress = sys.stderr.isatty()
    read_fd, write_fd = os.pipe()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            [valgrind, "--tool=lackey", "--trace-mem=yes", f"--log-fd={write_fd}", *command],
            pass_fds=(write_fd,),
            stdin=subprocess.DEVNULL,
        )
    except OSError as e:
        os.close(read_fd)
        os.close(write_fd)
        raise SecmemError(f"trace capture: cannot start valgrind: {e}") from e
    os.close(write_fd)  # valgrind holds the only write end: EOF when it exits
    try:
        # Owns and closes `read_fd`, also on an error.
        name = f"lackey output of {program}"
        if data:
            counts = json.loads(
                _call(_native.trace_capture_data_fd, read_fd, proc.pid, output, name, max_records, data_interval, progress, skip_records)
            )
            records = counts["records"]
        else:
            counts = {}
            records = _call(_native.trace_capture_fd, read_fd, output, name, max_records, progress, skip_records)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    stopped_early = max_records is not None and records >= max_records
    if stopped_early:
        proc.kill()  # the rest is not wanted (it may also have died of the closed pipe)
    status = proc.wait()
    if not stopped_early and status != 0:
        try:
            os.remove(output)
        except OSError:
            pass
        raise SecmemError(f"trace capture: {' '.join(command)} exited with status {status} under valgrind; no trace written")
    return {**counts, "records": records, "seconds": time.monotonic() - start, "exit_status": status}


def run_io(
    preset: Optional[str] = None,
    config: Optional[str] = None,
    params=None,
) -> Dict[str, Any]:
    """An I/O run: the ``[io]`` workload (fio patterns) on the ``[ssd]`` NVMe drive beside the
    secure memory, every DMA transfer through the memory controller (docs/ssd.md). Returns
    ``{"io": {runtime, IOPS, throughput, latency}, "ssd": {drive counters, WAF}, "memory",
    "meta"}``."""
    return json.loads(_call(_native.io_run, preset, _path(config, "config"), _overrides(params)))


def io_calibrate(sectors: int = 200_000) -> Dict[str, float]:
    """Measures this host's software cryptography per 512 B sector, as the storage baselines
    run it: dm-crypt's AES-XTS and dm-integrity's HMAC-SHA256 (RustCrypto; the median of five
    rounds over ``sectors`` sectors). ``secmem io-calibrate`` prints it as config."""
    _uint("sectors", sectors, minimum=1)
    return json.loads(_call(_native.io_calibrate, sectors))


def io_capture(command: Sequence[str], output: str) -> Dict[str, int]:
    """Runs ``command`` under ``strace`` and writes its ``pread64``/``pwrite64`` calls to
    ``output`` as a fio iolog (v3) that ``io.trace`` replays: one I/O per call at its time, on
    the file it names, rounded out to whole 512 B sectors, and each ``fsync``/``fdatasync`` as a
    ``sync``/``datasync``, a barrier on replay (docs/ssd.md). Returns ``{"reads", "writes",
    "syncs", "files", "skipped"}``."""
    if isinstance(command, str) or not command or not all(isinstance(c, str) for c in command):
        raise SecmemError("command must be a non-empty list of strings (the program and its arguments)")
    return json.loads(_call(_native.io_capture, list(command), _path(output, "output")))


def io_attack(
    preset: Optional[str] = None,
    config: Optional[str] = None,
    params=None,
    ios: int = 4000,
    per_class: int = 200,
    seed: int = 1,
    classes: Optional[Sequence[str]] = None,
) -> Dict[str, Any]:
    """Attacks on the drive under D-Shield (``io.stack`` dshield or dshield-pro), in functional
    mode: a seeded workload of ``ios`` I/Os with real bytes, then ``per_class`` injections per
    class (tamper, replay, splice, the drive in another slot or machine), each read back cold.
    Returns ``{"classes": {class: {"injected", "detected", ...}}, "clean_reads",
    "false_alarms", "all_detected", "untested_classes", "examples"}`` (docs/ssd.md)."""
    _uint("ios", ios, minimum=1)
    _uint("per_class", per_class, minimum=1)
    _uint("seed", seed)
    if isinstance(classes, (str, bytes)):
        raise SecmemError(f"classes must be a list of attack class names, got the string {classes!r}")
    cls = list(classes) if classes else None
    return json.loads(_call(_native.io_attack, preset, _path(config, "config"), _overrides(params), ios, per_class, seed, cls))


def io_crash(
    preset: Optional[str] = None,
    config: Optional[str] = None,
    params=None,
    ios: int = 4000,
    points: int = 100,
    seed: int = 1,
) -> Dict[str, Any]:
    """Crashes of D-Shield's DIE at ``points`` seeded I/Os of a functional workload, each
    recovered with the paper's eADR drain of the on-chip metadata and without it; every block
    written is read back against a plaintext oracle. Returns ``{"points", "recovered",
    "mismatches", "in_flight_detected", "no_drain_blocks_lost", ...}`` (docs/ssd.md)."""
    _uint("ios", ios, minimum=1)
    _uint("points", points, minimum=1)
    _uint("seed", seed)
    return json.loads(_call(_native.io_crash, preset, _path(config, "config"), _overrides(params), ios, points, seed))


def crash(
    preset: Optional[str] = None,
    trace: Optional[str] = None,
    config: Optional[str] = None,
    params=None,
    points: int = 2000,
    seed: int = 1,
) -> Dict[str, Any]:
    """Crash injection with verified recovery: runs the trace in functional mode, crashes at
    ``points`` seeded persist points, recovers each and checks every line against a plaintext
    oracle. Returns ``{"points", "recovered", "mismatches", ...}``."""
    _uint("points", points, minimum=1)
    _uint("seed", seed)
    return json.loads(_call(_native.crash, preset, _path(config, "config"), _overrides(params), _path(trace, "trace"), points, seed))


def attack(
    preset: Optional[str] = None,
    trace: Optional[str] = None,
    config: Optional[str] = None,
    params=None,
    per_class: int = 500,
    seed: int = 1,
    classes: Optional[Sequence[str]] = None,
    clean_reads: int = 1_000_000,
) -> Dict[str, Any]:
    """Attack injection on the post-run NVM image (tamper, replay, splice); returns
    ``{class: {"injected", "detected", ...}, "clean_reads", "false_alarms", "all_detected",
    "untested_classes", "examples"}``."""
    _uint("per_class", per_class, minimum=1)
    for name, v in (("seed", seed), ("clean_reads", clean_reads)):
        _uint(name, v)
    if isinstance(classes, (str, bytes)):
        raise SecmemError(f"classes must be a list of attack class names, got the string {classes!r}")
    cls = list(classes) if classes else None
    return json.loads(
        _call(_native.attack, preset, _path(config, "config"), _overrides(params), _path(trace, "trace"), per_class, seed, cls, clean_reads)
    )


def image_verify(path: str, preset: Optional[str] = None, config: Optional[str] = None, params=None) -> Dict[str, Any]:
    """Loads a saved NVM image (rejecting damaged files), recovers, and reads every data line
    through the secure read path; returns counts and ``ok``."""
    path = _path(path, "path")
    # Verifying is reading every line through the secure read path: a config without security
    # (a -p security.enabled=false, or a config file saying so) cannot apply, and the engine
    # would verify with security on regardless.
    if not config_json(preset=preset, config=config, params=params)["security"]["enabled"]:
        raise SecmemError(
            "config field 'security.enabled': image verify checks the image through the secure read path "
            "and needs security enabled, got false"
        )
    return json.loads(_call(_native.image_verify, path, preset, _path(config, "config"), _overrides(params)))


def designs() -> List[Dict[str, Any]]:
    """Every registered design, in the engine's registry order: ``[{"name", "summary",
    "needs_security", "drain_schemes": [{"name", "summary"}]}]``."""
    return json.loads(_native.designs())


# The eADR drain schemes the registered designs offer (the baseline's nonsecure, base-lu and
# base-eu; Horus' horus-slm and horus-dlm).
DRAIN_SCHEMES = tuple(s["name"] for d in designs() for s in d["drain_schemes"])


def drain(
    scheme: str,
    preset: Optional[str] = "horus",
    config: Optional[str] = None,
    params=None,
    trace: Optional[str] = None,
    from_workload: bool = False,
    after_records: Optional[int] = None,
    recover: bool = False,
) -> Dict[str, Any]:
    """One eADR power-loss drain (Horus): ``scheme`` is one of ``DRAIN_SCHEMES``. The cache
    content is the paper's worst case, or the state ``trace`` (or the built-in workload with
    ``from_workload``) leaves after ``after_records`` records. With ``recover`` it then
    crashes and recovers, and in functional mode checks every line against an oracle.
    Returns ``{"drain_cycles", "memory_reads", "memory_writes", "mac_ops", "flushed_lines",
    "energy_joules", ...}``."""
    _uint("after_records", after_records, optional=True)
    if trace is not None and from_workload:
        raise SecmemError("drain: trace and from_workload are exclusive: the content comes from one or the other")
    if after_records is not None and trace is None and not from_workload:
        raise SecmemError(
            "drain: after_records needs trace or from_workload (the paper's worst-case content has no records to stop after)"
        )
    return json.loads(
        _call(_native.drain, scheme, preset, _path(config, "config"), _overrides(params), _path(trace, "trace"), from_workload, after_records, recover)
    )


def vault_attack(
    scheme: str = "horus-slm",
    preset: Optional[str] = "horus",
    trace: Optional[str] = None,
    config: Optional[str] = None,
    params=None,
    per_class: int = 100,
    seed: int = 1,
) -> Dict[str, Any]:
    """Attacks on Horus' vault after a drain (tamper data/address/MAC, splice, replay of an
    earlier episode, truncation, metadata tamper); returns per-class counts and
    ``all_detected``."""
    _uint("per_class", per_class, minimum=1)
    _uint("seed", seed)
    if scheme not in ("horus-slm", "horus-dlm"):
        raise SecmemError(f"--scheme: vault attacks need horus-slm or horus-dlm, got '{scheme}'")
    return json.loads(
        _call(_native.vault_attack, scheme == "horus-dlm", preset, _path(config, "config"), _overrides(params), _path(trace, "trace"), per_class, seed)
    )


def bench_scenarios() -> List[Dict[str, str]]:
    return json.loads(_native.bench_scenarios())


def bench(scenarios: Optional[Sequence[str]] = None, scale: float = 1.0, isolate: bool = True, rounds: int = 1) -> Dict[str, Any]:
    """Runs bench scenarios; returns ``{name: {"requests_per_s", "peak_rss_bytes", ...}}``.
    Each scenario runs in its own process (``isolate``) so peak memory is its own.

    With ``rounds`` > 1 every scenario runs that many times, interleaved (round 1 of each
    scenario, then round 2, ...), so that a drift of the machine's speed hits every scenario
    alike. Each scenario then reports its median round (by ``requests_per_s``; of an even
    count, the slower middle one) with ``"rounds"``: every round's ``requests_per_s`` (and
    ``llc_requests_per_s``) in order, and their ``min``, ``median`` and ``max``.

    When both ``functional-random`` and ``secure-lazy-random`` run (the functional-mode target
    compares them: the same trace in both modes), ``functional-random`` gains ``"vs_counting"``:
    its ``requests_per_s`` over the counting scenario's, round by round (``per_round``; a
    round's two runs are minutes apart at most), and their median (of an even count, the
    lower middle one), ``min`` and ``max``. A scenario named twice runs once a round."""
    scale = _float("--scale", scale, what="a positive number")
    _uint("--rounds", rounds, minimum=1, maximum=_MAX_BENCH_ROUNDS)
    if not (math.isfinite(scale) and scale > 0):
        # Checked here, before any scenario's process starts (the engine checks it too).
        raise SecmemError(f"--scale must be a positive number, got {scale:g}" + (" (it must be finite)" if scale == math.inf else ""))
    if scale > _MAX_BENCH_SCALE:
        # 10 M requests x 1000 is 10^10 requests, hours per scenario; more is a typo.
        raise SecmemError(f"--scale must be at most {_MAX_BENCH_SCALE}, got {scale:g}")
    # Each name once, in the order given.
    names = list(dict.fromkeys(scenarios)) if scenarios else [s["name"] for s in bench_scenarios()]
    known = {s["name"] for s in bench_scenarios()}
    for n in names:
        if n not in known:
            raise SecmemError(f"unknown bench scenario '{n}'; known: {', '.join(sorted(known))}")
    runs: Dict[str, List[Dict[str, Any]]] = {n: [] for n in names}
    for _ in range(rounds):
        for n in names:
            if isolate:
                cmd = [sys.executable, "-m", "secmem.cli", "_bench-one", n, "--scale", str(scale)]
                res = subprocess.run(cmd, capture_output=True, text=True)
                if res.returncode != 0:
                    msg = res.stderr.strip()
                    raise SecmemError(f"bench scenario {n} failed: {msg[len('secmem: error: '):] if msg.startswith('secmem: error: ') else msg}")
                runs[n].append(json.loads(res.stdout))
            else:
                runs[n].append(json.loads(_call(_native.bench_run, n, scale)))
    out: Dict[str, Any] = {}
    for n, rs in runs.items():
        if rounds == 1:
            out[n] = rs[0]
            continue
        rates = [r["requests_per_s"] for r in rs]
        # Of an even count, the lower middle one: a rate that was measured, so that the round
        # it came from can be reported whole.
        median = statistics.median_low(rates)
        entry = dict(rs[rates.index(median)])
        entry["rounds"] = {"requests_per_s": rates, "min": min(rates), "median": median, "max": max(rates)}
        if all("llc_requests_per_s" in r for r in rs):
            entry["rounds"]["llc_requests_per_s"] = [r["llc_requests_per_s"] for r in rs]
        out[n] = entry
    if _FUNCTIONAL_SCENARIO in runs and _COUNTING_SCENARIO in runs:
        ratios = [f["requests_per_s"] / c["requests_per_s"] for f, c in zip(runs[_FUNCTIONAL_SCENARIO], runs[_COUNTING_SCENARIO])]
        out[_FUNCTIONAL_SCENARIO]["vs_counting"] = {
            "scenario": _COUNTING_SCENARIO,
            "median": statistics.median_low(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "per_round": ratios,
        }
    return out


def cow_workload(
    workload: str,
    scheme: str,
    page_size: str = "4k",
    lines_per_page: Optional[int] = None,
    footprint_bytes: int = 16 << 20,
    ops: Optional[int] = None,
    preset: str = "lelantus",
    params=None,
    seed: Optional[int] = None,
) -> Dict[str, Any]:
    """A copy-on-write workload (``forkbench``, ``redis``, ``noncopy``, ``writeamp``, ``churn``) through
    the OS model on design ``scheme`` (baseline = kernel CoW, lelantus, lelantus-cow,
    silent-shredder). Returns a dict with ``cycles``, ``memory_writes``, ``memory_reads``,
    ``write_amplification``, ``os`` and the usual ``stats`` block of the measured phase.
    ``ops`` and ``seed`` (redis and churn) and ``lines_per_page`` (forkbench, noncopy,
    writeamp) are refused where the workload does not use them."""
    ops, seed = _cow_options(workload, lines_per_page, footprint_bytes, ops, seed)
    if scheme not in COW_SCHEMES:
        raise SecmemError(
            f"--scheme: unknown CoW scheme '{scheme}' (the run.design the workload runs on); "
            f"known: {', '.join(COW_SCHEMES)}"
        )
    overrides = _overrides(params)
    # The scheme is the design: an override naming another one would silently win. Checked on
    # the config resolved with the scheme's design under the overrides, so every spelling of
    # the override (run.design=..., run={design=...}) is caught.
    asked = config_json(preset=preset, params=[f'run.design="{scheme}"'] + overrides)["run"]["design"]
    if asked != scheme:
        raise SecmemError(
            f"config field 'run.design': the CoW workload runs design '{scheme}' (--scheme), "
            f"but the overrides ask for '{asked}'; choose the design with --scheme"
        )
    out = _call(
        _native.cow_workload, workload, scheme, page_size, lines_per_page, footprint_bytes, ops, preset,
        overrides, seed,
    )
    return json.loads(out)


def forkbench(scheme: str, page_size: str = "4k", lines_per_page: Optional[int] = None, **kw) -> Dict[str, Any]:
    """The Lelantus forkbench (section V-D): see :func:`cow_workload`."""
    return cow_workload("forkbench", scheme, page_size=page_size, lines_per_page=lines_per_page, **kw)
