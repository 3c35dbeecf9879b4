"""Comparing two runs: every figure that differs, with both values and the ratio.

``diff(a, b)`` takes two reports (a ``report.json``, a run folder holding one, a
``result.json`` that a campaign wrote with ``--out``, or a report already loaded) and returns
a DataFrame, one row per differing leaf: ``stat``, ``a``, ``b``, ``ratio`` (b / a) and
``change`` ((b - a) / |a|). Rows are sorted by how much they changed, most first; settings
that differ (strings, booleans: the design, a policy) come before every number, since they
explain the rest. ``meta`` (wall time, host speed, paths) is left out: it describes the host
run, not the simulated machine.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, Mapping, Optional, Sequence, Union

from .api import SecmemError, flatten

Source = Union[str, "os.PathLike[str]", Mapping[str, Any]]


def load_report(src: Source) -> Dict[str, Any]:
    """A report as a dict, from a dict, a ``report.json``/``result.json`` file or a folder
    holding one of them."""
    if isinstance(src, Mapping):
        return dict(src)
    path = os.fspath(src)
    if os.path.isdir(path):
        for name in ("report.json", "result.json"):
            if os.path.exists(os.path.join(path, name)):
                path = os.path.join(path, name)
                break
        else:
            raise SecmemError(f"{path}: holds neither report.json nor result.json")
    try:
        with open(path) as f:
            doc = json.load(f)
    except json.JSONDecodeError as e:
        raise SecmemError(f"{path}: not a JSON report: line {e.lineno}: {e.msg}") from None
    if not isinstance(doc, dict):
        raise SecmemError(f"{path}: not a report (a JSON object with stats or a result)")
    if "result" in doc and "stats" not in doc:  # a campaign's result.json
        return {"config": doc.get("config", {}), "result": doc["result"]}
    return doc


def _leaves(report: Mapping[str, Any]) -> Dict[str, Any]:
    flat = flatten({k: v for k, v in report.items() if k != "meta"})
    # Lists (histogram buckets, per-bank counters) compare element by element.
    out: Dict[str, Any] = {}
    for k, v in flat.items():
        if isinstance(v, list):
            for i, x in enumerate(v):
                if isinstance(x, Mapping):
                    out.update(flatten(x, f"{k}.{i}."))
                else:
                    out[f"{k}.{i}"] = x
        else:
            out[k] = v
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def diff(a: Source, b: Source, only: Optional[Union[str, Sequence[str]]] = None):
    """The leaves of two reports that differ (see the module's description); ``only`` keeps
    the stats whose dotted name starts with one of the given prefixes."""
    import pandas as pd

    la, lb = _leaves(load_report(a)), _leaves(load_report(b))
    prefixes = [only] if isinstance(only, str) else list(only or [])
    rows = []
    for k in sorted(set(la) | set(lb)):
        if prefixes and not any(k == p or k.startswith(p.rstrip(".") + ".") for p in prefixes):
            continue
        va, vb = la.get(k), lb.get(k)
        if va == vb:
            continue
        if _number(va) and _number(vb):
            ratio = vb / va if va != 0 else (math.inf if vb > 0 else -math.inf)
            change = (vb - va) / abs(va) if va != 0 else math.copysign(math.inf, vb)
            rank = abs(change)
        else:
            ratio = change = math.nan
            rank = math.inf  # a setting or a stat only one side has: first
        rows.append({"stat": k, "a": va, "b": vb, "ratio": ratio, "change": change, "_rank": rank})
    df = pd.DataFrame(rows, columns=["stat", "a", "b", "ratio", "change", "_rank"])
    df = df.sort_values(["_rank", "stat"], ascending=[False, True], kind="stable").drop(columns="_rank")
    return df.reset_index(drop=True)


def format_table(df, limit: Optional[int] = None) -> str:
    """The diff as aligned text: stat, A, B, B/A."""
    if df.empty:
        return "no figure differs"

    def show(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.6g}"
        return str(v)

    rows = [("stat", "A", "B", "B/A")]
    shown = df if limit is None else df.head(limit)
    for r in shown.itertuples(index=False):
        ratio = "" if isinstance(r.ratio, float) and math.isnan(r.ratio) else f"{r.ratio:.4g}"
        rows.append((r.stat, show(r.a), show(r.b), ratio))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]:>{widths[3]}}".rstrip() for row in rows]
    if limit is not None and len(df) > limit:
        lines.append(f"... {len(df) - limit} more (--limit 0 shows all)")
    return "\n".join(lines)
