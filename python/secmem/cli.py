"""The ``secmem`` command.

    secmem run [--preset NAME] [--config FILE] [--trace FILE] [-p key=value ...] [--out DIR]
    secmem sweep [--preset NAME] [-p key=value ...] --vary KEY=V1,V2,... [--vary ...] [--jobs N] [--out DIR]
    secmem presets
    secmem config show NAME [-p key=value ...]
    secmem config validate FILE [--preset NAME]
    secmem trace gen --pattern P --requests N --footprint-bytes B --read-ratio R --seed S -o FILE
    secmem trace gen --pattern forkbench|redis|noncopy|writeamp|churn --page-size 4k|2m [--lines-per-page N] [--ops N] -o FILE
    secmem trace convert IN OUT [--to binary|text] [--from FORMAT]
    secmem trace info FILE [--format FORMAT]
    secmem crash --preset strict [--trace FILE] --points N --seed S [--out DIR]
    secmem attack --preset NAME [--trace FILE] --per-class N --seed S [--out DIR]
    secmem image verify FILE [--preset NAME]
    secmem bench [--scenario NAME ...] [--scale X] [--rounds N]
    secmem drain --preset horus --scheme nonsecure|base-lu|base-eu|horus-slm|horus-dlm [-p ...] [--out DIR]
    secmem vault-attack --scheme horus-slm|horus-dlm --per-class N --seed S [--out DIR]
    secmem forkbench --scheme S --page-size 4k|2m --lines-per-page N [-p key=value ...] [--out DIR]
    secmem reproduce horus|lelantus|dshield|bmf|esd [--quick] --out DIR
    secmem designs
    secmem horus drain|vault-attack|reproduce ...      (the same verbs, by design family)
    secmem lelantus forkbench|reproduce ...

Errors (bad config, bad trace, bad record) print one line naming the field, file, line or
record, and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Dict, List, Optional

from . import api, report_diff, reproduce_all
from .sweeps import CliValue, sweep
from .sweeps import plot as plot_sweep
from .sweeps import result_column


def _path_arg(s: str) -> str:
    """argparse type of every path argument: an empty path is an error naming the argument
    (`--out ''` would otherwise write into the current directory and report "/report.json")."""
    if not s:
        raise argparse.ArgumentTypeError("empty path")
    return s


def _out_dir(path: str, what: str = "--out") -> bool:
    """Creates an output directory up front, so that a path that cannot be one (an existing
    file, a file on the way, no permission) fails before the runs, naming the argument. The
    folder must accept a file (one is created and removed: `os.access` answers yes to root
    whatever the folder is). Returns whether it existed before, so that a failed run can
    remove one it created."""
    existed = os.path.exists(path)
    if existed and not os.path.isdir(path):
        raise api.SecmemError(f"{what} {path}: exists and is not a folder")
    try:
        os.makedirs(path, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".secmem-probe-", dir=path)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        if not existed:
            _remove_if_empty(path)
        raise api.SecmemError(f"{what} {path}: cannot write results there: {e.strerror or e}") from None
    return existed


def _remove_if_empty(path: str) -> None:
    try:
        os.rmdir(path)  # only an empty folder
    except OSError:
        pass


def _add_out(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", type=_path_arg, metavar="DIR",
        help="also write DIR/result.json (the printed JSON with the resolved config, the command line and the "
        "version) and DIR/config.toml (the resolved config)",
    )
    p.set_defaults(saves_result=True)  # main creates DIR before the run


def _print_and_save(a, out, forced=()) -> None:
    """Prints a command's JSON result and, with ``--out DIR``, writes it beside the resolved
    config it ran with: the user's preset, file and -p overrides plus ``forced``, what the
    command sets itself (functional mode for the campaigns, the design for forkbench)."""
    print(json.dumps(out, indent=2))
    if a.out is None:
        return
    params = list(a.param) + list(forced)
    preset, config = a.preset, getattr(a, "config", None)
    doc = {
        "command": a.sub if a.command in DESIGN_COMMANDS else a.command,
        "argv": ["secmem"] + list(a.argv),
        "version": _version(),
        "config": api.config_json(preset=preset, config=config, params=params),
        "result": out,
    }
    with open(os.path.join(a.out, "result.json"), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    with open(os.path.join(a.out, "config.toml"), "w") as f:
        f.write(api.config_toml(preset=preset, config=config, params=params))


def _os_error(e: OSError) -> str:
    """An OSError as one line naming the path, without Python's "[Errno N]" decoration."""
    if e.filename is None:
        return e.strerror or str(e)
    where = os.fsdecode(e.filename) if isinstance(e.filename, bytes) else str(e.filename)
    if e.filename2 is not None:
        where += f" -> {e.filename2}"
    return f"{where}: {e.strerror or e}"


def _add_params(p: argparse.ArgumentParser, help: str = "") -> None:
    p.add_argument(
        "-p", "--param", action="append", default=[], metavar="KEY=VALUE",
        help=help or "override a config field by its dotted name, e.g. -p llc.size_kib=32768 (repeatable)",
    )


# Trace formats by one name everywhere: --trace-format (what a trace file is: run, sweep, the
# campaigns, trace info, trace convert) and --to (what trace gen and trace convert write).
TRACE_FORMATS = ("binary", "text", "ramulator", "dramsim3", "lackey", "champsim")
OUTPUT_FORMATS = ("binary", "text")
_TRACE_FORMAT_HELP = "format of the trace file: " + ", ".join(TRACE_FORMATS) + " (default: detected from its first bytes and name)"
_TO_HELP = "format to write: " + " or ".join(OUTPUT_FORMATS) + " (default binary)"


def _add_trace_format(p: argparse.ArgumentParser, *aliases: str) -> None:
    p.add_argument("--trace-format", *aliases, dest="trace_format", metavar="FORMAT", help=_TRACE_FORMAT_HELP)


def _add_run_inputs(p: argparse.ArgumentParser) -> None:
    """--preset, --config and --trace, as `run` takes them (and `sweep`, whose points are runs)."""
    p.add_argument("--preset", help="preset name (see `secmem presets`); default: built-in defaults")
    p.add_argument("--config", type=_path_arg, help="TOML config file layered over the preset")
    p.add_argument("--trace", type=_path_arg, help="trace file (any supported format); default: the config's [workload] generator")
    _add_trace_format(p)


def _summary(rep: api.Report) -> str:
    s = rep.stats
    m = rep.meta
    mem = s["memory"]
    lines = [
        f"design {m['design']}  trace {m['trace']}  records {m['records']}  "
        f"({m['requests_per_s'] / 1e6:.2f} M records/s, {m['wall_time_s']:.2f} s)",
        f"cycles {s['cycles']}  IPC {s['ipc']:.3f}",
        f"memory reads {mem['reads']['total']} (data {mem['reads']['data']}, counter {mem['reads']['counter']}, "
        f"mac {mem['reads']['mac']}, tree {mem['reads']['tree']})",
        f"memory writes {mem['writes']['total']} (data {mem['writes']['data']}, counter {mem['writes']['counter']}, "
        f"mac {mem['writes']['mac']}, tree {mem['writes']['tree']}, re-encryption {mem['writes']['reencrypt']})",
        f"MAC ops {s['security']['mac_ops']['total']}  AES ops {s['security']['aes_ops']['total']}  "
        f"read latency p50/p99 {s['latency_cycles']['read']['p50']}/{s['latency_cycles']['read']['p99']} cycles",
        "hit rates  " + "  ".join(f"{k} {v['hit_rate']:.3f}" for k, v in s["caches"].items()),
    ]
    dirty = {k: v["dirty_lines_at_end"] for k, v in s["caches"].items() if v.get("dirty_lines_at_end")}
    if "flush_at_end" in s:
        f = s["flush_at_end"]
        lines.append(
            f"flush at end: {f['lines_written_back']} lines written back in {f['cycles']} cycles, "
            f"memory writes {f['memory']['writes']['total']}, MAC ops {f['security']['mac_ops']['total']}"
        )
    elif dirty:
        lines.append(
            "dirty at end  " + "  ".join(f"{k} {v}" for k, v in dirty.items())
            + "  (-p run.flush_at_end=true writes the data lines back, counted apart)"
        )
    if "os" in rep:  # an OS-level trace drove the OS model
        o = rep["os"]
        lines.append(
            f"os: cow faults {o['cow_faults']}  zero faults {o['zero_faults']}  page commands {o['page_commands']}  "
            f"kernel-copied lines {o['kernel_lines']}  write amplification {o['write_amplification']:.2f}"
        )
    return "\n".join(lines)


def cmd_run(a) -> int:
    existed = _out_dir(a.out) if a.out is not None else True
    try:
        rep = api.run(
            preset=a.preset, trace=a.trace, config=a.config, params=a.param, out=a.out, save_image=a.save_image, partial=True,
        )
    except BaseException:
        # A failed run leaves no empty folder behind (a partial report is never written).
        if not existed:
            _remove_if_empty(a.out)
        raise
    if a.json:
        print(json.dumps(rep, indent=2))
    else:
        print(_summary(rep))
        print(f"wrote {a.out}/report.json, stats.txt, stats.csv and config.toml")
    if rep["meta"].get("interrupted"):
        print(f"secmem: interrupted after {rep['meta']['records']} records: the report is partial (meta.interrupted)", file=sys.stderr)
        return 130
    return 0


def cmd_presets(a) -> int:
    for p in api.presets():
        print(f"{p['name']:<10} {p['source']}")
    return 0


def _config_source(name: str, preset: Optional[str] = None) -> Dict[str, Optional[str]]:
    """A preset name or a config file (a path that exists, or one ending in .toml), as
    config_toml's keyword arguments."""
    if os.path.exists(name) or name.endswith(".toml"):
        return {"preset": preset, "config": name}
    if preset is not None:
        raise api.SecmemError(f"--preset layers a preset under a config file; {name!r} is a preset name")
    return {"preset": name, "config": None}


def cmd_config_show(a) -> int:
    print(api.config_toml(params=a.param, **_config_source(a.name, a.preset)), end="")
    return 0


def cmd_config_diff(a) -> int:
    ca = api.config_json(params=a.param, **_config_source(a.a))
    cb = api.config_json(params=a.param, **_config_source(a.b))
    df = report_diff.diff({"config": ca}, {"config": cb})
    df["stat"] = df["stat"].str.removeprefix("config.")
    print(report_diff.format_table(df).replace("stat ", "key  ", 1))
    return 0


def stats_reference(docs) -> str:
    """The statistics as a Markdown table (docs/stats.md embeds it; a test keeps it current)."""
    rows = ["| statistic | unit | description |", "|---|---|---|"]
    rows += [f"| `{d['name']}` | {d['unit']} | {d['description'].replace('|', '/')} |" for d in docs]
    return "\n".join(rows) + "\n"


def cmd_stats_describe(a) -> int:
    docs = api.stat_docs(a.prefix or "")
    if not docs:
        raise api.SecmemError(f"no statistic starts with {a.prefix!r} (secmem stats describe lists them all)")
    if a.markdown:
        print(stats_reference(docs), end="")
        return 0
    width = max(len(d["name"]) for d in docs)
    for d in docs:
        unit = f" ({d['unit']})" if d["unit"] else ""
        print(f"{d['name']:<{width}}  {d['description']}{unit}")
    return 0


def cmd_diff(a) -> int:
    if a.limit < 0:
        raise api.SecmemError(f"--limit must be 0 (all) or more, got {a.limit}")
    df = report_diff.diff(a.a, a.b, only=a.only or None)
    if a.csv is not None:
        df.to_csv(a.csv, index=False)
    print(report_diff.format_table(df, limit=a.limit or None))
    return 0


def cmd_config_validate(a) -> int:
    api.config_json(preset=a.preset, config=a.file, params=a.param)
    print(f"{a.file}: valid")
    return 0


def cmd_trace_gen(a) -> int:
    cow = a.pattern in api.COW_WORKLOADS
    # The engine reads synthetic pattern names trimmed and in any case; CoW names exactly.
    pattern = a.pattern if cow else a.pattern.strip().lower()
    if not cow and pattern not in api.SYNTHETIC_PATTERNS:
        raise api.SecmemError(
            f"--pattern: unknown pattern '{a.pattern}' (expected one of: {', '.join(api.SYNTHETIC_PATTERNS)}, "
            f"or a CoW workload: {', '.join(api.COW_WORKLOADS)})"
        )
    api._refuse_unused(
        pattern, {n: getattr(a, n) for n in api.TRACE_GEN_OPTION_PATTERNS},
        spell=lambda n: f"--{n.replace('_', '-')}", what=f"trace gen --pattern {a.pattern}",
    )

    def pick(v, default):
        return default if v is None else v

    if cow:
        n = api.cow_trace(
            a.pattern, a.output, page_size=pick(a.page_size, "4k"), lines_per_page=a.lines_per_page,
            footprint_bytes=pick(a.footprint_bytes, 16 << 20), ops=a.ops, seed=a.seed,
            format=a.to, with_data=bool(a.with_data),
        )
        print(f"wrote {n} records to {a.output}")
        return 0
    n = api.trace_gen(
        a.output, pattern=a.pattern, requests=pick(a.requests, 1_000_000),
        footprint_bytes=pick(a.footprint_bytes, 1 << 30),
        read_ratio=pick(a.read_ratio, 0.5), seed=pick(a.seed, 1), format=a.to, stride_bytes=a.stride_bytes,
        zipf_theta=a.zipf_theta, inst_gap=pick(a.inst_gap, 10),
    )
    print(f"wrote {n} records to {a.output}")
    return 0


def cmd_trace_convert(a) -> int:
    n = api.trace_convert(a.input, a.output, out_format=a.to, in_format=a.trace_format)
    print(f"converted {n} records to {a.output}")
    return 0


def cmd_trace_capture(a) -> int:
    cmd = list(a.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    out = api.trace_capture(
        cmd, a.output, max_records=a.max_records, data=a.data, data_interval=a.data_interval, skip_records=a.skip_records,
    )
    print(f"captured {out['records']} records of {' '.join(cmd)} to {a.output} in {out['seconds']:.1f} s")
    if a.data:
        print(
            f"{out['writes_with_data']} of {out['writes']} writes carry their line "
            f"({out['writes_without_data']} could not be read; {out['pauses']} pauses)"
        )
    return 0


def cmd_trace_info(a) -> int:
    print(json.dumps(api.trace_info(a.file, a.trace_format), indent=2))
    return 0


# The campaigns run in functional mode whatever the config says.
FUNCTIONAL = ("run.functional=true",)


def cmd_io(a) -> int:
    out = api.run_io(preset=a.preset, config=a.config, params=a.param)
    _print_and_save(a, out)
    return 0


def cmd_io_calibrate(a) -> int:
    r = api.io_calibrate(sectors=a.sectors)
    print("# secmem io-calibrate: this host's software storage cryptography, per 512 B sector")
    print("# (RustCrypto, median of five rounds); use with --config FILE")
    print("[io]")
    print(f"aes_xts_ns_per_sector = {r['aes_xts_ns_per_sector']:.1f}")
    print(f"hmac_sha256_ns_per_sector = {r['hmac_sha256_ns_per_sector']:.1f}")
    return 0


def cmd_io_capture(a) -> int:
    command = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not command:
        raise api.SecmemError("io-capture needs a command to run after --")
    r = api.io_capture(command, a.out)
    print(json.dumps(r))
    return 0


def _add_io_campaign(p) -> None:
    """The options io-attack and io-crash share: the config and the seeded workload."""
    p.add_argument("--preset")
    p.add_argument("--config", type=_path_arg)
    p.add_argument("--ios", type=int, default=4000, help="I/Os of the workload (default 4000)")
    p.add_argument("--seed", type=int, default=1)


def cmd_io_attack(a) -> int:
    out = api.io_attack(
        preset=a.preset, config=a.config, params=a.param, ios=a.ios, per_class=a.per_class, seed=a.seed,
        classes=a.cls or None,
    )
    _print_and_save(a, out)
    return 0 if out["all_detected"] else 1


def cmd_io_crash(a) -> int:
    out = api.io_crash(preset=a.preset, config=a.config, params=a.param, ios=a.ios, points=a.points, seed=a.seed)
    _print_and_save(a, out)
    return 0 if out["recovered"] == out["points"] and out["mismatches"] == 0 else 1


def cmd_crash(a) -> int:
    out = api.crash(preset=a.preset, trace=a.trace, config=a.config, params=a.param, points=a.points, seed=a.seed)
    _print_and_save(a, out, FUNCTIONAL)
    return 0 if out["points"] > 0 and out["recovered"] == out["points"] and out["mismatches"] == 0 else 1


def cmd_attack(a) -> int:
    out = api.attack(
        preset=a.preset, trace=a.trace, config=a.config, params=a.param, per_class=a.per_class, seed=a.seed,
        classes=a.cls or None, clean_reads=a.clean_reads,
    )
    _print_and_save(a, out, FUNCTIONAL)
    return 0 if out["all_detected"] else 1


def cmd_image_verify(a) -> int:
    out = api.image_verify(a.file, preset=a.preset, config=a.config, params=a.param)
    print(json.dumps(out, indent=2))
    return 0 if out["ok"] else 1


def cmd_drain(a) -> int:
    # (--trace and --from-workload are an argparse mutually exclusive group.)
    if a.after is not None and a.trace is None and not a.from_workload:
        raise api.SecmemError(
            "--after needs --trace or --from-workload: without them the drain is of the paper's "
            "worst-case content, which has no records to stop after"
        )
    out = api.drain(
        a.scheme, preset=a.preset, config=a.config, params=a.param, trace=a.trace,
        from_workload=a.from_workload, after_records=a.after, recover=a.recover,
    )
    _print_and_save(a, out)
    oracle = out.get("oracle")
    return 1 if oracle and oracle["mismatches"] else 0


def cmd_vault_attack(a) -> int:
    out = api.vault_attack(a.scheme, preset=a.preset, trace=a.trace, config=a.config, params=a.param, per_class=a.per_class, seed=a.seed)
    _print_and_save(a, out, FUNCTIONAL)
    return 0 if out["all_detected"] else 1


SWEEP_COLUMNS = ["stats.cycles", "stats.ipc", "stats.memory.reads.total", "stats.memory.writes.total", "stats.energy.nvm_joules"]


def _vary_arg(s: str):
    """argparse type of --vary: KEY=V1,V2,... -> (key, [values as typed])."""
    key, eq, vals = s.partition("=")
    key = key.strip()
    if not eq or not key:
        raise argparse.ArgumentTypeError(f"{s!r}: expected KEY=V1,V2,... (a dotted config key and its values)")
    items = [v.strip() for v in vals.split(",")]
    if any(not v for v in items):
        raise argparse.ArgumentTypeError(f"{s!r}: an empty value (values are separated by single commas)")
    return key, [CliValue(v) for v in items]


def cmd_sweep(a) -> int:
    axes = {}
    for key, vals in a.vary:
        if key in axes:
            raise api.SecmemError(f"--vary {key}: given twice (give all its values in one --vary)")
        axes[key] = vals
    columns = list(SWEEP_COLUMNS)
    if a.columns is not None:
        columns = [c.strip() for c in a.columns.split(",") if c.strip()]
        if not columns:
            raise api.SecmemError("--columns: no column named")
    df = sweep(
        axes, preset=a.preset, trace=a.trace, config=a.config, params=a.param, out=a.out, jobs=a.jobs,
        backend=a.backend, address=a.address, workers=a.workers, retries=a.retries,
    )
    failed = df.attrs.get("failed_points", {})
    if failed:
        df = df[df["sweep.error"].isna()] if "sweep.error" in df.columns else df
    skipped = df.attrs.get("skipped_points", 0)
    saved = f"{a.out}/sweep.csv, {a.out}/sweep.json and {len(df)} runs under {a.out}/points/" + (
        f" ({skipped} finished earlier, not run again)" if skipped else ""
    )

    def column(c: str, flag: str) -> str:
        name = result_column(df, c)
        if name is None:
            raise api.SecmemError(f"{flag}: no column {c!r} in the sweep's results (every column is in {a.out}/sweep.csv; saved {saved})")
        return name

    shown = ["sweep.point"] + [f"sweep.{k}" for k in axes] + [column(c, "--columns") for c in columns]
    plotted = [column(c, "--plot") for c in a.plot]
    table = df[shown].rename(columns=lambda c: c.removeprefix("sweep.").removeprefix("stats."))
    print(table.to_string(index=False))
    print(f"wrote {saved}")
    for y in plotted:
        print(f"wrote {plot_sweep(df, y, path=os.path.join(a.out, y.removeprefix('stats.') + '.png'))}")
    for msg in failed.values():
        print(f"secmem: error: {msg}", file=sys.stderr)
    if failed:
        print(f"secmem: {len(failed)} of {len(df) + len(failed)} points failed; rerun the same command to retry them", file=sys.stderr)
        return 1
    return 0


def cmd_bench(a) -> int:
    print(json.dumps(api.bench(a.scenario or None, scale=a.scale, rounds=a.rounds), indent=2))
    return 0


def cmd_bench_one(a) -> int:
    from . import _native

    print(api._call(_native.bench_run, a.name, a.scale))
    return 0


def cmd_forkbench(a) -> int:
    if a.seed is not None:
        # The forkbench workload draws no random numbers: its --seed (the CoW spec's, used by
        # redis only) would be silently ignored.
        raise api.SecmemError(
            "forkbench: --seed has no effect (the forkbench workload draws no random numbers); "
            "the run's own seed is -p run.seed=N"
        )
    out = api.forkbench(
        a.scheme, page_size=a.page_size, lines_per_page=a.lines_per_page, footprint_bytes=a.footprint_bytes,
        preset=a.preset, params=a.param,
    )
    if not a.stats:
        out.pop("stats", None)
    _print_and_save(a, out, [f'run.design="{a.scheme}"'])
    return 0


# `secmem reproduce DESIGN`: one module per paper, looked up by name (lazily imported, so a
# design's plotting dependencies load only when it is reproduced); `all` runs them all.
REPRODUCE = reproduce_all.DESIGNS


def cmd_reproduce(a) -> int:
    import importlib

    if a.design != "all" and a.design not in REPRODUCE:
        raise api.SecmemError(f"unknown design '{a.design}' to reproduce; known: {', '.join(sorted(REPRODUCE))}, all")
    if a.design != "all" and (getattr(a, "backend", "local") != "local" or getattr(a, "address", None) or getattr(a, "workers", None)):
        raise api.SecmemError("--backend, --address and --workers run `reproduce all`'s designs as sweep points; one design runs here")
    import inspect

    if a.design == "all":
        if a.param:
            raise api.SecmemError("reproduce all runs each paper's own configurations and refuses -p")
        existed = _out_dir(a.out)
        try:
            return reproduce_all.main(out=a.out, quick=a.quick, backend=a.backend, address=a.address, workers=a.workers)
        except BaseException:
            if not existed:
                shutil.rmtree(a.out, ignore_errors=True)
            raise
    main = importlib.import_module(REPRODUCE[a.design]).main
    if a.param and "params" not in inspect.signature(main).parameters:
        raise api.SecmemError(f"reproduce {a.design} does not take -p overrides (it runs its paper's fixed configurations)")
    existed = _out_dir(a.out)  # before the runs, which take minutes
    try:
        if a.param:
            return main(out=a.out, quick=a.quick, params=a.param)
        return main(out=a.out, quick=a.quick)
    except BaseException:
        # A failed or interrupted reproduction leaves no half-written folder it created.
        if not existed:
            shutil.rmtree(a.out, ignore_errors=True)
        raise



def _add_drain(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="horus", help="preset name (default: horus)")
    p.add_argument("--config", type=_path_arg)
    p.add_argument("--scheme", required=True, choices=api.DRAIN_SCHEMES)
    content = p.add_mutually_exclusive_group()
    content.add_argument("--trace", type=_path_arg, help="drain the state this trace leaves (default: the paper's worst-case content)")
    _add_trace_format(p)
    content.add_argument("--from-workload", action="store_true", help="drain the state the built-in workload leaves")
    p.add_argument("--after", type=int, help="crash after this many records of the trace or workload (needs --trace or --from-workload)")
    p.add_argument("--recover", action="store_true", help="then crash, recover and (functional mode) check every line")
    _add_params(p)
    _add_out(p)
    p.set_defaults(fn=cmd_drain)


def _add_vault_attack(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", default="horus", help="preset name (default: horus)")
    p.add_argument("--config", type=_path_arg)
    p.add_argument("--scheme", default="horus-slm", choices=("horus-slm", "horus-dlm"))
    p.add_argument("--trace", type=_path_arg)
    _add_trace_format(p)
    p.add_argument("--per-class", type=int, default=100)
    p.add_argument("--seed", type=int, default=1)
    _add_params(p)
    _add_out(p)
    p.set_defaults(fn=cmd_vault_attack)


def _add_forkbench(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scheme", default="lelantus",
        help="the design: baseline (kernel CoW), lelantus, lelantus-cow or silent-shredder (not -p run.design)",
    )
    p.add_argument("--page-size", default="4k", help="4k or 2m")
    p.add_argument("--lines-per-page", type=int, default=None, help="lines the child updates per page (default 32 for 4k, 512 for 2m)")
    p.add_argument("--footprint-bytes", type=int, default=16 << 20, help="memory the parent initialises (default 16 MiB)")
    p.add_argument("--preset", default="lelantus", help="preset name (default: lelantus, the paper's Table III machine at 1 GHz)")
    p.add_argument("--seed", type=int, default=None, help=argparse.SUPPRESS)  # refused: see cmd_forkbench
    p.add_argument("--stats", action="store_true", help="also print the full stats block")
    _add_params(p)
    _add_out(p)
    p.set_defaults(fn=cmd_forkbench)


def _add_reproduce_of(design: str):
    """A design's own `reproduce` verb (`secmem horus reproduce`): `secmem reproduce DESIGN`."""

    def build(p: argparse.ArgumentParser) -> None:
        p.add_argument("--quick", action="store_true", help="smaller runs (under 2 minutes)")
        p.add_argument("--out", type=_path_arg, default="reproduce", help="output directory (default: reproduce)")
        _add_params(p, help="override a config field in every run (repeatable), where the reproduction allows it")
        p.set_defaults(fn=cmd_reproduce, design=design)

    return build


# Commands that belong to a design family, found from the design: `secmem horus drain`. A new
# design with commands of its own adds its family here (and its reproduction to REPRODUCE);
# the flat verbs below stay as the older spellings the README and scripts use.
DESIGN_COMMANDS = {
    "horus": {
        "drain": (_add_drain, "simulate an eADR power-loss drain of the cache hierarchy, print JSON"),
        "vault-attack": (_add_vault_attack, "attacks on Horus' vault after a drain (functional mode)"),
        "reproduce": (_add_reproduce_of("horus"), "reproduce the Horus paper's figures"),
    },
    "lelantus": {
        "forkbench": (_add_forkbench, "the Lelantus forkbench through the OS model (JSON)"),
        "reproduce": (_add_reproduce_of("lelantus"), "reproduce the Lelantus paper's figures"),
    },
}

# The same verbs at top level (`secmem drain`), the older spellings: the design-family
# commands themselves, named with their family in --help.
_FLAT_DESIGN_VERBS = {
    verb: (DESIGN_COMMANDS[family][verb][0], f"{DESIGN_COMMANDS[family][verb][1]} ({family})")
    for family, verb in (("horus", "drain"), ("horus", "vault-attack"), ("lelantus", "forkbench"))
}


def cmd_designs(a) -> int:
    """`secmem designs`: every registered design, its summary, and the commands of its family."""
    for d in api.designs():
        print(f"{d['name']:<18} {d['summary']}")
        for sch in d["drain_schemes"]:
            print(f"{'':<18}   drain scheme {sch['name']}: {sch['summary']}")
    print()
    for family, verbs in DESIGN_COMMANDS.items():
        print(f"secmem {family} " + "|".join(verbs))
    return 0


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="secmem", description="Trace-driven secure memory simulator.")
    top.add_argument("--version", action="version", version=f"secmem {_version()}")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="run one simulation and write DIR/report.json")
    _add_run_inputs(p)
    p.add_argument("--out", type=_path_arg, default="out", help="output directory (default: out)")
    p.add_argument("--json", action="store_true", help="print the whole report as JSON")
    p.add_argument("--save-image", type=_path_arg, help="functional mode: save the post-run NVM image to this file")
    _add_params(p)
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("sweep", help="one run per point of a grid of config values; DIR/sweep.csv")
    _add_run_inputs(p)
    p.add_argument(
        "--vary", type=_vary_arg, action="append", required=True, metavar="KEY=V1,V2,...",
        help="a dotted config key and the values to run it at (repeatable: the points are every combination, "
        "the last --vary varying fastest); values are written as for -p",
    )
    p.add_argument("--jobs", type=int, default=1, help="runs at once, on threads (default 1), each on one host thread unless -p or --vary sets run.host_threads; results do not depend on it")
    p.add_argument("--backend", choices=("local", "dask", "ray"), default="local", help="where the points run: local threads (default), a Dask or a Ray cluster (pip install 'secmem[dask]' / 'secmem[ray]')")
    p.add_argument("--address", help="dask: the scheduler's address; ray: the cluster's (or 'auto'); default: a local cluster of --workers processes")
    p.add_argument("--workers", type=int, help="dask, ray without --address: worker processes of the local cluster (default: --jobs)")
    p.add_argument("--retries", type=int, default=2, help="runs again a point whose worker was lost, up to this many times (default 2); a point the engine refuses fails at once")
    p.add_argument("--out", type=_path_arg, default="out", help="output directory (default: out): sweep.csv, sweep.json, points/NNN/{report.json,config.toml}")
    p.add_argument(
        "--columns", metavar="A,B,...",
        help="result columns to print (flattened report keys; 'stats.' may be left out); default: "
        + ",".join(c.removeprefix("stats.") for c in SWEEP_COLUMNS),
    )
    p.add_argument(
        "--plot", action="append", default=[], metavar="COLUMN",
        help="also draw COLUMN against the first --vary key, a line per combination of the others, to DIR/COLUMN.png (repeatable)",
    )
    _add_params(p, "override a config field for every point, e.g. -p workload.requests=100000 (repeatable)")
    p.set_defaults(fn=cmd_sweep, saves_result=True)

    p = sub.add_parser(
        "diff", help="the figures two runs differ in, with the ratio, most changed first",
        description="Compares two runs: report.json files, run folders, or result.json files of campaigns. Prints every "
        "figure that differs (settings first, then numbers by relative change), with both values and B/A. "
        "Example, the secure memory's slowdown: secmem diff nonsecure/ secure/ --only stats.cycles",
    )
    p.add_argument("a", type=_path_arg, help="report.json, result.json or a run folder (A, the reference)")
    p.add_argument("b", type=_path_arg, help="report.json, result.json or a run folder (B)")
    p.add_argument("--only", action="append", default=[], metavar="PREFIX", help="only stats whose dotted name starts with PREFIX, e.g. stats.memory (repeatable)")
    p.add_argument("--limit", type=int, default=40, help="rows to print, most changed first (default 40; 0: all)")
    p.add_argument("--csv", type=_path_arg, metavar="FILE", help="also write every differing row to FILE as CSV")
    p.set_defaults(fn=cmd_diff)

    st = sub.add_parser("stats", help="what the reported statistics are").add_subparsers(dest="sub", required=True, metavar="SUB")
    p = st.add_parser("describe", help="every statistic a run can report, with its unit and description (stats.txt uses the same)")
    p.add_argument("prefix", nargs="?", help="only names starting with this, e.g. stats.memory")
    p.add_argument("--markdown", action="store_true", help="as a Markdown table (docs/stats.md)")
    p.set_defaults(fn=cmd_stats_describe)

    p = sub.add_parser("presets", help="list presets and the tables they cite")
    p.set_defaults(fn=cmd_presets)

    cfg = sub.add_parser("config", help="show or validate configs").add_subparsers(dest="sub", required=True, metavar="SUB")
    p = cfg.add_parser("show", help="print a preset's or a config file's resolved config with descriptions")
    p.add_argument("name", help="a preset name (see `secmem presets`) or a TOML config file")
    p.add_argument("--preset", help="with a config file: the preset it is layered over (default: built-in defaults)")
    _add_params(p)
    p.set_defaults(fn=cmd_config_show)
    p = cfg.add_parser("diff", help="the keys two configs (preset names or files) set differently")
    p.add_argument("a", help="a preset name or a TOML config file")
    p.add_argument("b", help="a preset name or a TOML config file")
    _add_params(p, "override a config field on both sides (repeatable)")
    p.set_defaults(fn=cmd_config_diff)
    p = cfg.add_parser("validate", help="check a config file")
    p.add_argument("file", type=_path_arg)
    p.add_argument("--preset")
    _add_params(p)
    p.set_defaults(fn=cmd_config_validate)

    tr = sub.add_parser("trace", help="generate, convert and inspect traces").add_subparsers(dest="sub", required=True, metavar="SUB")
    p = tr.add_parser("gen", help="write a seeded synthetic trace")
    p.add_argument(
        "--pattern", default="random",
        help="sequential, random, stride or zipf; or an OS-level (v2) CoW workload: forkbench, redis, noncopy, writeamp, churn",
    )
    p.add_argument("--requests", type=int, default=None, help="default 1000000")
    p.add_argument("--footprint-bytes", type=int, default=None, help="default 1 GiB (16 MiB for CoW workloads)")
    # Pattern-specific options default to None, so that one given for a pattern that does not
    # use it (even at its default value) is refused, not ignored: see api.TRACE_GEN_OPTION_PATTERNS.
    p.add_argument("--page-size", default=None, help="CoW workloads: 4k or 2m (default 4k)")
    p.add_argument("--lines-per-page", type=int, default=None, help="forkbench, noncopy, writeamp: lines updated per page (default 32 for 4k, 512 for 2m)")
    p.add_argument("--ops", type=int, default=None, help="redis: parent operations during the snapshot; churn: operations in all (default 20000)")
    p.add_argument("--with-data", action="store_true", default=None, help="CoW workloads: stores carry their content (functional mode)")
    p.add_argument("--read-ratio", type=float, default=None, help="synthetic patterns: default 0.5")
    p.add_argument("--seed", type=int, default=None, help="synthetic patterns, redis and churn: default 1")
    p.add_argument("--stride-bytes", type=int, default=None, help="stride: default 4096")
    p.add_argument("--zipf-theta", type=float, default=None, help="zipf: default 0.99")
    p.add_argument("--inst-gap", type=int, default=None, help="synthetic patterns: default 10")
    p.add_argument("--to", "--format", dest="to", default="binary", metavar="FORMAT", help=_TO_HELP)
    p.add_argument("-o", "--output", type=_path_arg, required=True)
    p.set_defaults(fn=cmd_trace_gen)
    p = tr.add_parser("convert", help="convert a trace to secmem binary or text")
    p.add_argument("input", type=_path_arg)
    p.add_argument("output", type=_path_arg)
    p.add_argument("--to", default="binary", metavar="FORMAT", help=_TO_HELP)
    _add_trace_format(p, "--from")
    p.set_defaults(fn=cmd_trace_convert)
    p = tr.add_parser(
        "capture", help="run a program under valgrind lackey and write its loads and stores as a binary trace",
        description="Runs CMD under valgrind --tool=lackey --trace-mem=yes and streams its output into a secmem "
        "binary trace marked virtual (secmem run translates its addresses). With --data, stores carry the "
        "lines the program wrote. Needs valgrind.",
    )
    p.add_argument("-o", "--output", type=_path_arg, required=True)
    p.add_argument("--max-records", type=int, default=None, help="stop after this many records (the program is stopped)")
    p.add_argument(
        "--skip-records", type=int, default=0, metavar="N",
        help="drop the first N records (a program's start is mostly the dynamic loader) before keeping any",
    )
    p.add_argument(
        "--data", action="store_true",
        help="give every store the 64 B line the program wrote, read from its memory at pauses (Linux)",
    )
    p.add_argument(
        "--data-interval", type=int, default=65536, metavar="N",
        help="with --data: records between two pauses that read the program's memory (default 65536)",
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    p.set_defaults(fn=cmd_trace_capture)
    p = tr.add_parser("info", help="summarise a trace")
    p.add_argument("file", type=_path_arg)
    _add_trace_format(p, "--format")
    p.set_defaults(fn=cmd_trace_info)

    p = sub.add_parser(
        "io", help="storage I/O: fio patterns on an NVMe SSD beside the secure memory",
        description="Runs the [io] workload (io.pattern seq-read|seq-write|seq-rw|rand-read|rand-write|rand-rw, "
        "io.threads, io.queue_depth, io.block_bytes, io.ios) on the [ssd] drive, with the NVMe host path on the "
        "cores and every DMA transfer through the memory controller; prints runtime, IOPS, throughput, latency "
        "percentiles, the drive's counters and the memory traffic (docs/ssd.md).",
    )
    p.add_argument("--preset")
    p.add_argument("--config", type=_path_arg)
    _add_params(p)
    _add_out(p)
    p.set_defaults(fn=cmd_io)

    p = sub.add_parser(
        "io-calibrate", help="measure this host's dm-crypt cipher rate and print it as [io] config",
        description="Times AES-XTS (dm-crypt) and HMAC-SHA256 (dm-integrity) per 512 B sector on this host and "
        "prints a config fragment: secmem io-calibrate > host.toml; secmem io --config host.toml -p io.stack=enc",
    )
    p.add_argument("--sectors", type=int, default=200_000, help="sectors per round (default 200000)")
    p.set_defaults(fn=cmd_io_calibrate)

    p = sub.add_parser(
        "io-capture", help="record a program's pread/pwrite/fsync calls (strace) as a fio iolog for io.trace",
        description="Runs the command under strace -f and writes its pread64/pwrite64 calls, sector-aligned, and its "
        "fsync/fdatasync calls (replayed as barriers) as a "
        "fio iolog v3: secmem io-capture --out db.iolog -- sqlite3 bank.db < work.sql; secmem io -p io.trace=db.iolog",
    )
    p.add_argument("--out", type=_path_arg, required=True, help="the iolog to write")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- the program and its arguments")
    p.set_defaults(fn=cmd_io_capture)

    p = sub.add_parser(
        "io-attack", help="attacks on the drive under D-Shield: tamper, replay, splice, another slot or machine",
        description="Runs a seeded functional workload through D-Shield (io.stack dshield, dshield-hyb or dshield-pro) with real "
        "bytes, flushes its metadata, then injects each attack class into the drive and reads the target back cold; "
        "exits 0 when every injection is detected with its class and no clean read raises an alarm (docs/ssd.md).",
    )
    _add_io_campaign(p)
    p.add_argument("--per-class", type=int, default=200, help="injections per attack class (default 200)")
    p.add_argument("--class", dest="cls", action="append", default=[], help="only this class (repeatable)")
    _add_params(p)
    _add_out(p)
    p.set_defaults(fn=cmd_io_attack)

    p = sub.add_parser(
        "io-crash", help="crashes of D-Shield's DMA Interception Engine, recovered with and without the eADR drain",
        description="Crashes a seeded functional workload through D-Shield at --points I/Os (a write may be cut between "
        "its metadata update and its data reaching the drive), recovers with the paper's eADR drain of the on-chip "
        "metadata and without it, and reads every block back against a plaintext oracle; exits 0 when every "
        "drained crash recovers and nothing reads back wrong undetected (docs/ssd.md).",
    )
    _add_io_campaign(p)
    p.add_argument("--points", type=int, default=100, help="seeded crash points (default 100)")
    _add_params(p)
    _add_out(p)
    p.set_defaults(fn=cmd_io_crash)

    p = sub.add_parser("crash", help="crash injection with verified recovery (functional mode)")
    p.add_argument("--preset", help="preset name; `strict` is the recoverable baseline")
    p.add_argument("--config", type=_path_arg)
    p.add_argument("--trace", type=_path_arg, help="trace file (default: the config's [workload] generator)")
    _add_trace_format(p)
    p.add_argument("--points", type=int, default=2000, help="seeded crash points (default 2000)")
    p.add_argument("--seed", type=int, default=1)
    _add_params(p)
    _add_out(p)
    p.set_defaults(fn=cmd_crash)

    p = sub.add_parser("attack", help="attack injection on the post-run NVM image (functional mode)")
    p.add_argument("--preset")
    p.add_argument("--config", type=_path_arg)
    p.add_argument("--trace", type=_path_arg, help="trace file (default: the config's [workload] generator)")
    _add_trace_format(p)
    p.add_argument("--per-class", type=int, default=500, help="injections per attack class (default 500)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--class", dest="cls", action="append", default=[], help="only this class (repeatable)")
    p.add_argument("--clean-reads", type=int, default=1_000_000, help="verified clean reads checked for false alarms")
    _add_params(p)
    _add_out(p)
    p.set_defaults(fn=cmd_attack)

    im = sub.add_parser("image", help="saved NVM images").add_subparsers(dest="sub", required=True, metavar="SUB")
    p = im.add_parser("verify", help="recover from a saved NVM image and verify every data line")
    p.add_argument("file", type=_path_arg)
    p.add_argument("--preset")
    p.add_argument("--config", type=_path_arg)
    _add_params(p)
    p.set_defaults(fn=cmd_image_verify)

    p = sub.add_parser("bench", help="measure simulation speed and peak memory (JSON)")
    p.add_argument("--scenario", action="append", default=[], help="scenario name (repeatable; default: all)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply each scenario's request count")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every scenario this many times, interleaved, and report each one's median round with every round's rate "
        "(default 1); functional-random reports its rate over secure-lazy-random's round by round (vs_counting) when both run",
    )
    p.set_defaults(fn=cmd_bench)

    for verb, (build, help_) in _FLAT_DESIGN_VERBS.items():
        build(sub.add_parser(verb, help=help_))

    p = sub.add_parser("designs", help="list the registered designs and their own commands")
    p.set_defaults(fn=cmd_designs)
    for family, verbs in DESIGN_COMMANDS.items():
        fam = sub.add_parser(family, help=f"{family}'s own commands: " + ", ".join(verbs))
        fsub = fam.add_subparsers(dest="sub", required=True, metavar="VERB")
        for verb, (build, help_) in verbs.items():
            build(fsub.add_parser(verb, help=help_))

    p = sub.add_parser("reproduce", help="reproduce a paper's figures: DIR/reproduce.json, plots, DIR/report.md")
    p.add_argument("design", help="paper to reproduce: " + ", ".join(sorted(REPRODUCE)) + ", or all (each as a sweep point; DIR/index.md and a self-contained DIR/index.html)")
    p.add_argument("--quick", action="store_true", help="smaller runs (under 2 minutes)")
    p.add_argument("--out", type=_path_arg, default="reproduce", help="output directory (default: reproduce)")
    p.add_argument("--backend", choices=("local", "dask", "ray"), default="local", help="all: where the designs run (as for sweep)")
    p.add_argument("--address", help="all: the Dask scheduler's or Ray cluster's address")
    p.add_argument("--workers", type=int, help="all: designs at once (local threads, or the local cluster's workers; default 1)")
    _add_params(p, help="horus only: override a config field in every run (repeatable); lelantus runs its paper's fixed configurations and refuses -p")
    p.set_defaults(fn=cmd_reproduce)

    p = sub.add_parser("_bench-one")  # internal: one scenario in a fresh process
    p.add_argument("name")
    p.add_argument("--scale", type=float, default=1.0)
    p.set_defaults(fn=cmd_bench_one)
    return top


def _version() -> str:
    from . import _native

    return _native.version()


# API keywords that a command passes an option under another name (`--after` is the API's
# `after_records`); every other option's keyword is its argparse dest.
_KEYWORD_TO_DEST = {"after_records": "after", "classes": "cls"}


def _command_parser(top: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)parser that parsed ``args``: ``trace gen``'s, not the top one's."""
    p = top
    for dest in ("command", "sub"):
        subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or getattr(args, dest, None) is None:
            break
        p = subs[0].choices[getattr(args, dest)]
    return p


def _in_flag_spelling(msg: str, top: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """An error that opens with an argument's API keyword (``per_class must be an integer >=
    1``, raised by the API or the engine, which know no command line) names it as the user typed
    it instead (``--per-class must be ...``)."""
    name, sep, rest = msg.partition(" ")
    if not sep or not name.isidentifier() or not rest.startswith(("must ", "is ")):
        return msg
    dest = _KEYWORD_TO_DEST.get(name, name)
    for action in _command_parser(top, args)._actions:
        if action.dest == dest and action.option_strings:
            flag = max(action.option_strings, key=len)  # --out, not -o
            return f"{flag} {rest}"
    return msg


def main(argv: Optional[List[str]] = None) -> int:
    top = parser()
    args = top.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return _run_command(args)
    except api.SecmemError as e:
        print(f"secmem: error: {_in_flag_spelling(str(e), top, args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("secmem: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of our output went away (`secmem ... | head`): stop quietly, as a
        # command killed by SIGPIPE would, instead of a traceback and a second error when
        # Python flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as e:
        # A path of the user's (an output directory that is a file, an unreadable input...)
        # that the Python side opened itself: one line naming the path, as for the engine's.
        print(f"secmem: error: {_os_error(e)}", file=sys.stderr)
        return 2


def _run_command(args) -> int:
    """Runs the parsed command. An `--out DIR` it saves to is created first, so that a bad path
    fails before the run; a failed or interrupted command removes it again if it created it
    and nothing was written."""
    if getattr(args, "trace_format", None) is not None and hasattr(args, "trace"):
        # Commands that take --trace read it through run.trace_format (saved with the config).
        if args.trace is None:
            raise api.SecmemError("--trace-format names the format of --trace, and no --trace was given")
        args.param = list(args.param) + [f"run.trace_format={args.trace_format}"]
    created = None
    if getattr(args, "saves_result", False) and args.out is not None:
        if not _out_dir(args.out):
            created = args.out
    try:
        return args.fn(args)
    except BaseException:
        if created is not None:
            _remove_if_empty(created)
        raise


if __name__ == "__main__":
    raise SystemExit(main())
