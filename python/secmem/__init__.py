"""secmem: a fast, trace-driven simulator for secure memory and secure storage research.

The engine is Rust (``secmem._native``); this package is its API and the ``secmem`` command.

>>> import secmem
>>> report = secmem.run(preset="horus", params={"workload.requests": 20000})
>>> report["stats"]["memory"]["reads"]["total"] > 0
True
"""

from .api import (
    DRAIN_SCHEMES,
    Report,
    SecmemError,
    attack,
    bench,
    bench_scenarios,
    crash,
    config_json,
    cow_trace,
    cow_workload,
    config_toml,
    designs,
    drain,
    flatten,
    forkbench,
    image_verify,
    io_attack,
    io_calibrate,
    io_capture,
    io_crash,
    presets,
    run,
    run_io,
    stat_docs,
    trace_capture,
    trace_convert,
    trace_gen,
    trace_info,
    vault_attack,
)
from .report_diff import diff
from .sweeps import plot as plot_sweep
from .sweeps import sweep
from ._native import version as _version

__version__ = _version()

__all__ = [
    "DRAIN_SCHEMES",
    "Report",
    "bench_scenarios",
    "drain",
    "vault_attack",
    "SecmemError",
    "attack",
    "bench",
    "crash",
    "config_json",
    "config_toml",
    "cow_trace",
    "cow_workload",
    "designs",
    "diff",
    "flatten",
    "forkbench",
    "image_verify",
    "io_attack",
    "io_calibrate",
    "io_capture",
    "io_crash",
    "plot_sweep",
    "presets",
    "run",
    "run_io",
    "stat_docs",
    "sweep",
    "trace_capture",
    "trace_convert",
    "trace_gen",
    "trace_info",
    "__version__",
]
