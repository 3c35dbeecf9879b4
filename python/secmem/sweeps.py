"""Parameter sweeps: one run per point of a grid of config values, as one DataFrame.

A sweep varies one or more dotted config keys over given values; its points are the cartesian
product of the values, in the order given (the last key varies fastest). Every point is an
ordinary run (same preset, config file, trace and ``-p`` overrides, plus the point's values),
so a point's row equals what ``secmem run`` with those overrides reports.

* All points are checked before any runs: a bad value fails at once, naming the point.
* ``jobs`` > 1 runs points on that many threads (the engine releases the GIL); results do not
  depend on it, and rows stay in point order. Per-run progress bars are off then (they would
  interleave), and each point runs on one host thread (``run.host_threads = 1``, where a
  functional run of the baseline takes two by default) unless ``params`` or ``vary`` set
  that key, so that ``jobs`` bounds the cores a sweep uses.
* ``backend`` runs the points on ``local`` threads (the default), a Dask cluster or a Ray
  cluster (``address``; without it a local cluster of ``workers`` processes, default
  ``jobs``): see :mod:`secmem.backends`. Results do not depend on the backend.
* With ``out``, every point is written as it finishes: ``out/points/NNN/`` holds its
  ``report.json``, ``config.toml`` (the resolved config), ``stats.txt``, ``stats.csv`` and,
  last, ``point.json`` (the hash of its resolved config and trace), and ``out/sweep.csv`` and
  ``out/sweep.parquet`` (with pyarrow installed; one row per point, every stat) are rewritten
  with every point finished so far; ``out/sweep.json`` says what was varied over what base.
  Rerun into the same ``out``, a sweep skips every point whose ``point.json`` matches (same
  resolved config, same trace bytes) and runs only the rest.
* A point the engine refuses or fails (an integrity error, say) is recorded with its error
  (``sweep.error``; ``out/points/NNN/error.txt``) and the others run on; a point whose worker
  was lost is run again, up to ``retries`` more times. ``df.attrs["failed_points"]`` lists the
  failures and ``df.attrs["skipped_points"]`` counts the points a rerun found finished.
* One progress line for the whole sweep on a terminal (done, running, failed, ETA), a
  heartbeat line every 10 s otherwise.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sys
import tempfile
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .api import SecmemError, _overrides, _path, _uint, config_json, flatten, run
from .backends import BACKENDS, local_copy, open_backend

Vary = Union[str, Mapping[str, Iterable[Any]]]


def _grid(vary: Vary, values: Optional[Iterable[Any]]) -> Tuple[List[str], List[Tuple[Any, ...]]]:
    """(keys, points) of a sweep, each point a tuple of values in key order."""
    if isinstance(vary, str):
        if values is None:
            raise SecmemError(f"sweep: give the values of {vary!r} (or a mapping of keys to values)")
        axes = {vary: values}
    elif isinstance(vary, Mapping):
        if values is not None:
            raise SecmemError("sweep: with a mapping of keys to values, do not give values as well")
        axes = dict(vary)
    else:
        raise SecmemError(f"sweep: vary is a dotted config key or a mapping of keys to values, got {type(vary).__name__}")
    if not axes:
        raise SecmemError("sweep: nothing to vary")
    keys: List[str] = []
    lists: List[List[Any]] = []
    for k, vs in axes.items():
        if not isinstance(k, str) or not k:
            raise SecmemError(f"sweep: a key to vary is a dotted config name, got {k!r}")
        if isinstance(vs, (str, bytes)) or not isinstance(vs, Iterable):
            raise SecmemError(f"sweep: the values of {k!r} are a list, got {type(vs).__name__} {vs!r}")
        vs = list(vs)
        if not vs:
            raise SecmemError(f"sweep: no values for {k!r}")
        keys.append(k)
        lists.append(vs)
    return keys, list(itertools.product(*lists))


def _lookup(cfg: Mapping[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = node[part]
    return node


class CliValue(str):
    """A value as typed on the command line: passed on like ``-p key=value``."""


def _point_overrides(keys: Sequence[str], point: Sequence[Any]) -> List[str]:
    # Strings given as they are: a CLI value ("random", "64") is parsed as -p parses it; a
    # Python value is typed (a str becomes a TOML string) by _overrides.
    out: List[str] = []
    for k, v in zip(keys, point):
        out += [f"{k}={v}"] if isinstance(v, CliValue) else _overrides({k: v})
    return out


def _distinct(xs: Iterable[Any]) -> List[Any]:
    out: List[Any] = []
    for x in xs:
        if x not in out:
            out.append(x)
    return out


def describe(keys: Sequence[str], point: Sequence[Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in zip(keys, point))


def _at_point(i: int, keys: Sequence[str], point: Sequence[Any], e: SecmemError) -> SecmemError:
    return SecmemError(f"sweep point {i} ({describe(keys, point)}): {e}")


def result_column(df, name: str) -> Optional[str]:
    """The column of a sweep's results that ``name`` means (a flattened report key; ``stats.``
    may be left out), or None."""
    for c in (name, f"stats.{name}"):
        if c in df.columns:
            return c
    return None


def sweep(
    vary: Vary,
    values: Optional[Iterable[Any]] = None,
    preset: Optional[str] = None,
    trace: Optional[str] = None,
    config: Optional[str] = None,
    params=None,
    out: Optional[str] = None,
    jobs: int = 1,
    backend: str = "local",
    address: Optional[str] = None,
    workers: Optional[int] = None,
    retries: int = 2,
):
    """Runs once per point of a sweep; returns a DataFrame with one row per point.

    ``sweep("llc.size_kib", [4096, 16384], ...)`` varies one key;
    ``sweep({"llc.size_kib": [4096, 16384], "tree.update": ["lazy", "eager"]}, ...)`` runs the
    four combinations. Each row is the point's flattened report plus ``sweep.point`` (its
    index) and ``sweep.<key>`` (the resolved value of each varied key); the one-key form also
    has ``sweep.param`` and ``sweep.value`` (the value as given). See the module text for
    ``out``, ``jobs``, ``backend``, ``address``, ``workers`` and ``retries``."""
    keys, points = _grid(vary, values)
    _uint("jobs", jobs, minimum=1)
    _uint("workers", workers, minimum=1, optional=True)
    _uint("retries", retries)
    if backend not in BACKENDS:
        raise SecmemError(f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    base = _overrides(params)
    if jobs > 1 or backend != "local":
        base = base + ["run.progress=false"]
        # A functional run of the baseline takes two host threads (`run.host_threads`), so
        # `jobs` of them at once would take twice `jobs` cores. Each point takes one then,
        # unless the sweep sets the key itself (results do not depend on it).
        if "run.host_threads" not in keys and not any(o.split("=", 1)[0].strip() == "run.host_threads" for o in base):
            base = base + ["run.host_threads=1"]
    # Every point's config, before anything runs: a bad value costs no run.
    per_point: List[List[str]] = []
    resolved = []
    for i, point in enumerate(points):
        try:
            per_point.append(base + _point_overrides(keys, point))
            resolved.append(config_json(preset=preset, config=config, params=per_point[-1]))
        except SecmemError as e:
            raise _at_point(i, keys, point, e) from None
    dirs: List[Optional[str]] = [None] * len(points)
    out = _path(out, "out")
    if out is not None:
        try:
            os.makedirs(out, exist_ok=True)
        except OSError as e:
            raise SecmemError(f"out {out}: cannot create the directory: {e.strerror or e}") from None
        width = max(3, len(str(len(points) - 1)))
        dirs = [os.path.join(out, "points", f"{i:0{width}d}") for i in range(len(points))]
    trace_path, config_path = _path(trace, "trace"), _path(config, "config")
    trace_digest = _file_digest(trace_path)
    hashes = [_point_hash(resolved[i], trace_digest) for i in range(len(points))]

    def row_of(i: int, rep: Mapping[str, Any]) -> Dict[str, Any]:
        row: Dict[str, Any] = {"sweep.point": i}
        for k in keys:
            row[f"sweep.{k}"] = _lookup(resolved[i], k)
        if isinstance(vary, str):
            row["sweep.param"] = vary
            row["sweep.value"] = points[i][0]
        row.update(flatten(rep))
        return row

    rows: Dict[int, Dict[str, Any]] = {}
    failed: Dict[int, str] = {}
    tables = None if out is None else _Tables(out)
    if out is not None:
        _write_sweep_json(out, keys, resolved, dirs, preset, config_path, trace_path, params)
        for i, d in enumerate(dirs):  # a rerun skips the points already finished
            rep = _finished(d, hashes[i])
            if rep is not None:
                rows[i] = row_of(i, rep)
        tables.rewrite(rows, failed)
    skipped = len(rows)
    todo = [i for i in range(len(points)) if i not in rows]
    progress = _Progress(len(points), skipped)
    attempts: Dict[int, int] = {}
    futures: Dict[Any, int] = {}
    if todo:
        be = open_backend(backend, jobs if backend == "local" else (workers or jobs), address)
        try:
            local = be.name == "local"
            trace_arg = trace_path if local or trace_path is None else be.ship(_read(trace_path))
            config_arg = config_path if local or config_path is None else be.ship(_read(config_path))
            suffix = "" if trace_path is None else "-" + os.path.basename(trace_path)

            def submit(i: int) -> None:
                attempts[i] = attempts.get(i, 0) + 1
                futures[be.executor.submit(_run_point, preset, config_arg, trace_arg, suffix, per_point[i])] = i

            def done(i: int, f) -> None:
                try:
                    files = f.result()
                except KeyboardInterrupt:
                    raise
                except SecmemError as e:  # the engine's verdict on this point: no retry changes it
                    failed[i] = str(_at_point(i, keys, points[i], e))
                except Exception as e:  # a worker lost, a task killed: run it again
                    if attempts[i] <= retries:
                        submit(i)
                        return
                    failed[i] = f"point {i} ({describe(keys, points[i])}): failed {attempts[i]} times; last: {type(e).__name__}: {e}"
                if i in failed:
                    if out is not None:
                        _write_point(dirs[i], {"error.txt": failed[i] + "\n"}, None)
                        tables.append({"sweep.point": i, "sweep.error": failed[i]}, rows, failed)
                    progress.failed += 1
                    return
                rep = json.loads(files["report.json"])
                if out is not None:
                    _write_point(dirs[i], files, {"hash": hashes[i], "values": {k: _lookup(resolved[i], k) for k in keys}})
                rows[i] = row_of(i, rep)
                progress.done += 1
                if out is not None:
                    tables.append(rows[i], rows, failed)

            for i in todo:
                submit(i)
            be.drain(futures, done, tick=lambda: progress.show(running=min(len(futures), be.workers)))
        finally:
            progress.clear()
            be.close()
    df = _frame(rows, failed)
    if out is not None:
        tables.rewrite(rows, failed)
    df.attrs["skipped_points"] = skipped
    df.attrs["failed_points"] = dict(failed)
    return df


def _run_point(preset, config, trace, trace_suffix, params) -> Dict[str, str]:
    """On a worker: one point, run into a temporary folder; the texts of the files it wrote
    (report.json, config.toml, stats.txt, stats.csv). ``config`` and ``trace`` are local paths
    or shipped bytes."""
    config = None if config is None else local_copy(config, ".toml")
    trace = None if trace is None else local_copy(trace, trace_suffix)
    with tempfile.TemporaryDirectory(prefix="secmem-point-") as d:
        run(preset=preset, trace=trace, config=config, params=params, out=d)
        return {name: open(os.path.join(d, name)).read() for name in POINT_FILES}


# What a finished point's folder holds; point.json, written last, marks it finished.
POINT_FILES = ("report.json", "config.toml", "stats.txt", "stats.csv")
# Keys that do not change a run's results (progress display, host threads): not in a point's hash.
_NOT_RESULTS = ("run.progress", "run.host_threads")


def _point_hash(resolved: Mapping[str, Any], trace_digest: Optional[str]) -> str:
    cfg = json.loads(json.dumps(resolved))
    for key in _NOT_RESULTS:
        section, field = key.split(".")
        cfg.get(section, {}).pop(field, None)
    text = json.dumps({"config": cfg, "trace": trace_digest}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _file_digest(path: Optional[str]) -> Optional[str]:
    if path is None:
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _finished(d: Optional[str], want: str) -> Optional[Dict[str, Any]]:
    """The report of a point finished earlier with the same resolved config, or None."""
    if d is None:
        return None
    try:
        with open(os.path.join(d, "point.json")) as f:
            if json.load(f).get("hash") != want:
                return None
        with open(os.path.join(d, "report.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_point(d: str, files: Mapping[str, str], marker: Optional[Mapping[str, Any]]) -> None:
    os.makedirs(d, exist_ok=True)
    for stale in ("point.json", "error.txt"):
        try:
            os.remove(os.path.join(d, stale))
        except FileNotFoundError:
            pass
    for name, text in files.items():
        _atomic_write(os.path.join(d, name), text)
    if marker is not None:
        _atomic_write(os.path.join(d, "point.json"), json.dumps(marker, indent=2) + "\n")


def _atomic_write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _frame(rows: Mapping[int, Dict[str, Any]], failed: Mapping[int, str]):
    import pandas as pd

    all_rows = [rows[i] for i in sorted(rows)]
    if failed:
        all_rows += [{"sweep.point": i, "sweep.error": msg} for i, msg in sorted(failed.items())]
        all_rows.sort(key=lambda r: r["sweep.point"])
    return pd.DataFrame(all_rows)


class _Tables:
    """sweep.csv and, with pyarrow installed, sweep.parquet: the rows of every point finished
    so far. A point's row is appended to sweep.csv as it finishes (the file is rewritten only
    when a row brings new columns); sweep.parquet, which cannot be appended to, is rewritten
    at most every 5 s and at the end. Each rewrite is atomic. At the end both hold the rows in
    point order. (Rewriting both after every point cost O(points) each: 100 ms a point at 65
    points.)"""

    PARQUET_EVERY_S = 5.0

    def __init__(self, out: str):
        self.out, self.columns, self.parquet_at = out, None, time.monotonic()

    def rewrite(self, rows, failed) -> None:
        df = _frame(rows, failed)
        tmp = os.path.join(self.out, "sweep.csv.tmp")
        df.to_csv(tmp, index=False)
        os.replace(tmp, os.path.join(self.out, "sweep.csv"))
        self.columns = list(df.columns)
        self._parquet(df)

    def append(self, row, rows, failed) -> None:
        import pandas as pd

        if self.columns is None or not set(row) <= set(self.columns):
            self.rewrite(rows, failed)
            return
        with open(os.path.join(self.out, "sweep.csv"), "a") as f:
            pd.DataFrame([row], columns=self.columns).to_csv(f, index=False, header=False)
        if time.monotonic() - self.parquet_at >= self.PARQUET_EVERY_S:
            self._parquet(_frame(rows, failed))

    def _parquet(self, df) -> None:
        self.parquet_at = time.monotonic()
        if _parquet_engine():
            tmp = os.path.join(self.out, "sweep.parquet.tmp")
            df.to_parquet(tmp, index=False)
            os.replace(tmp, os.path.join(self.out, "sweep.parquet"))


def _parquet_engine() -> bool:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return False
    return True


def _write_sweep_json(out, keys, resolved, dirs, preset, config, trace, params) -> None:
    doc = {
        # Each key's values as resolved (a CLI "64" is 64), in the order given.
        "vary": {k: _distinct(_lookup(c, k) for c in resolved) for k in keys},
        "base": {"preset": preset, "config": config, "trace": trace, "params": _overrides(params)},
        "points": [
            {"point": i, "values": {k: _lookup(resolved[i], k) for k in keys}, "dir": os.path.relpath(d, out)}
            for i, d in enumerate(dirs)
        ],
    }
    _atomic_write(os.path.join(out, "sweep.json"), json.dumps(doc, indent=2) + "\n")


class _Progress:
    """One line for the whole sweep on a terminal, a heartbeat line every 10 s otherwise."""

    def __init__(self, total: int, skipped: int):
        self.total, self.done, self.failed, self.skipped = total, skipped, 0, skipped
        self.start = self.shown = time.monotonic()
        self.tty = sys.stderr.isatty()

    def show(self, running: int) -> None:
        now = time.monotonic()
        if now - self.shown < (0.25 if self.tty else 10.0):
            return
        self.shown = now
        ran = self.done - self.skipped
        left = self.total - self.done - self.failed
        eta = f", ETA {left * (now - self.start) / ran:.0f} s" if ran > 0 else ""
        line = f"[secmem] sweep: {self.done}/{self.total} done, {running} running, {self.failed} failed{eta}"
        if self.tty:
            print("\r\x1b[K" + line, end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def clear(self) -> None:
        if self.tty:
            print("\r\x1b[K", end="", file=sys.stderr, flush=True)


def varied_keys(df) -> List[str]:
    """The config keys a sweep's DataFrame varies, in the order given to ``sweep``."""
    return [c[len("sweep."):] for c in df.columns if c.startswith("sweep.") and c not in ("sweep.point", "sweep.param", "sweep.value")]


def plot(df, y: str, x: Optional[str] = None, path: str = "sweep.png") -> str:
    """Draws column ``y`` of a sweep's results (a flattened report key; ``stats.`` may be left
    out) against varied key ``x`` (default: the first one), one line per combination of the
    other varied keys, and saves it to ``path``. Returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = varied_keys(df)
    if not keys:
        raise SecmemError("plot: the DataFrame is not a sweep's (no sweep.<key> columns)")
    col = result_column(df, y)
    if col is None:
        raise SecmemError(f"plot: no column {y!r} in the sweep's results")
    x = keys[0] if x is None else x
    if x not in keys:
        raise SecmemError(f"plot: {x!r} is not a varied key; the sweep varies {', '.join(keys)}")
    others = [k for k in keys if k != x]
    fig, ax = plt.subplots(figsize=(6, 4))
    groups = df.groupby([f"sweep.{k}" for k in others], sort=False) if others else [((), df)]
    xcol = f"sweep.{x}"
    numeric_x = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in df[xcol])
    for name, g in groups:
        name = name if isinstance(name, tuple) else (name,)
        label = ", ".join(f"{k}={v}" for k, v in zip(others, name)) or None
        xs = list(g[xcol]) if numeric_x else [str(v) for v in g[xcol]]
        ax.plot(xs, list(g[col]), marker="o", label=label)
    if numeric_x and min(df[xcol]) > 0 and max(df[xcol]) >= 16 * min(df[xcol]):
        ax.set_xscale("log", base=2)  # sizes and counts are swept in powers of two
    ax.set_xlabel(x)
    ax.set_ylabel(col.removeprefix("stats."))
    if others:
        ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
