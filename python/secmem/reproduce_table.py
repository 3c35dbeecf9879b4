"""The paper-vs-ours table every ``secmem reproduce`` prints and writes (rows
``{"figure", "metric", "paper", "ours", "unit"}``), with the ratio ours / paper."""

from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Dict, List, Tuple


def mean(xs: List[float]) -> float:
    """The arithmetic mean of a non-empty list."""
    return sum(xs) / len(xs)


def ours(rows: List[Dict[str, Any]], metric: str) -> float:
    """Our figure of the row named ``metric``."""
    return next(r["ours"] for r in rows if r["metric"] == metric)


def fmt(v: float) -> str:
    """Four significant digits; from 10,000 up, whole numbers with separators (295,936, not 2.959e+05)."""
    if abs(v) >= 1e4:
        return f"{v:,.0f}"
    return f"{v:.4g}"


def ratio(row: Dict[str, Any]) -> str:
    p = row["paper"]
    return f"{row['ours'] / p:.2f}" if p not in (None, 0) else ""


def markdown(rows: List[Dict[str, Any]]) -> List[str]:
    """Markdown table lines."""
    out = ["| figure | metric | paper | secmem | ours / paper | unit |", "| --- | --- | ---: | ---: | ---: | --- |"]
    for r in rows:
        p = "" if r["paper"] is None else fmt(r["paper"])
        out.append(f"| {r['figure']} | {r['metric']} | {p} | {fmt(r['ours'])} | {ratio(r)} | {r['unit']} |")
    return out


def text(rows: List[Dict[str, Any]]) -> str:
    """A plain-text table for the terminal."""
    width = max(len(r["metric"]) for r in rows)
    lines = [f"{'figure':<9} {'metric':<{width}} {'paper':>10} {'secmem':>10} {'ratio':>7}  unit"]
    for r in rows:
        p = "" if r["paper"] is None else fmt(r["paper"])
        lines.append(f"{r['figure']:<9} {r['metric']:<{width}} {p:>10} {fmt(r['ours']):>10} {ratio(r):>7}  {r['unit']}")
    return "\n".join(lines)


def write_report(out: str, header: List[str], rows: List[Dict[str, Any]], notes: str, footer: str) -> str:
    """Writes ``OUT/report.md``: the header lines, the paper-vs-ours table, the notes on where
    and why we differ, and a footer line; returns its text."""
    text = "\n".join(header + markdown(rows) + [notes, footer]) + "\n"
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(text)
    return text


def run_and_write(
    out: str,
    quick: bool,
    collect: Callable[[bool], Tuple[List[Dict[str, Any]], Dict[str, Any]]],
    plots: Callable[[Dict[str, Any], str], List[str]],
    report_md: Callable[..., str],
) -> int:
    """The ``main`` of a reproduction module: ``collect(quick)`` gives the rows and the series
    (whose ``runs`` are every run's statistics), then ``OUT/reproduce.json``, ``OUT/runs.json``,
    the plots and ``OUT/report.md`` are written and the table printed."""
    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    rows, series = collect(quick)
    wall = time.time() - t0
    with open(os.path.join(out, "reproduce.json"), "w") as f:
        json.dump(rows, f, indent=2)
    with open(os.path.join(out, "runs.json"), "w") as f:
        json.dump(series["runs"], f, indent=2)
    names = plots(series, out)
    report_md(rows, series, out, quick, wall)
    print(text(rows))
    print(f"wrote {out}/reproduce.json, {out}/report.md and {', '.join(names)} ({wall:.0f} s)")
    return 0
