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
* With ``out``, the sweep writes ``out/points/NNN/report.json`` and ``config.toml`` (the
  resolved config) for every point, ``out/sweep.csv`` (one row per point, every stat), and
  ``out/sweep.json`` (what was varied over what base, and where each point's files are).
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from .api import SecmemError, _overrides, _path, _uint, config_json, run

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
):
    """Runs once per point of a sweep; returns a DataFrame with one row per point.

    ``sweep("llc.size_kib", [4096, 16384], ...)`` varies one key;
    ``sweep({"llc.size_kib": [4096, 16384], "tree.update": ["lazy", "eager"]}, ...)`` runs the
    four combinations. Each row is the point's flattened report plus ``sweep.point`` (its
    index) and ``sweep.<key>`` (the resolved value of each varied key); the one-key form also
    has ``sweep.param`` and ``sweep.value`` (the value as given). See the module text for
    ``out`` and ``jobs``."""
    import pandas as pd

    keys, points = _grid(vary, values)
    _uint("jobs", jobs, minimum=1)
    base = _overrides(params)
    if jobs > 1:
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

    stop = threading.Event()  # set by an interrupt: points not yet started never start

    def one(i: int) -> Dict[str, Any]:
        if stop.is_set():
            raise KeyboardInterrupt
        try:
            rep = run(preset=preset, trace=trace, config=config, params=per_point[i], out=dirs[i])
        except SecmemError as e:
            raise _at_point(i, keys, points[i], e) from None
        except KeyboardInterrupt:
            stop.set()
            raise
        row: Dict[str, Any] = {"sweep.point": i}
        for k in keys:
            row[f"sweep.{k}"] = _lookup(resolved[i], k)
        if isinstance(vary, str):
            row["sweep.param"] = vary
            row["sweep.value"] = points[i][0]
        row.update(rep.flat())
        return row

    if jobs == 1:
        rows = [one(i) for i in range(len(points))]
    else:
        pool = ThreadPoolExecutor(max_workers=jobs)
        try:
            rows = list(pool.map(one, range(len(points))))
        except BaseException:
            # Ctrl-C stops the running points (the engine's flag) and cancels the rest.
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown()
    df = pd.DataFrame(rows)
    if out is not None:
        df.to_csv(os.path.join(out, "sweep.csv"), index=False)
        doc = {
            # Each key's values as resolved (a CLI "64" is 64), in the order given.
            "vary": {k: _distinct(_lookup(c, k) for c in resolved) for k in keys},
            "base": {"preset": preset, "config": _path(config, "config"), "trace": _path(trace, "trace"), "params": _overrides(params)},
            "points": [
                {"point": i, "values": {k: _lookup(resolved[i], k) for k in keys}, "dir": os.path.relpath(d, out)}
                for i, d in enumerate(dirs)
            ],
        }
        with open(os.path.join(out, "sweep.json"), "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    return df


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
