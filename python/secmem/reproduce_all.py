"""``secmem reproduce all``: every design's reproduction as the points of one sweep, then one
index of them all.

Each design's reproduction (``secmem reproduce NAME``) runs as a point on the chosen backend
(:mod:`secmem.backends`: local threads, Dask or Ray) into ``DIR/NAME/``: its
``reproduce.json`` rows, plots and ``report.md``. Then ``DIR/index.md`` and a self-contained
``DIR/index.html`` (plots embedded, no other file needed) put every design's paper-vs-ours
rows, its figures and its "where and why we differ" side by side.
"""

from __future__ import annotations

import base64
import html
import importlib
import json
import os
import re
import tempfile
from typing import Any, Dict, List, Optional

from . import reproduce_table
from .api import SecmemError
from .backends import open_backend

# Every design with a reproduction: its module (whose main(out, quick) writes DIR) and title.
DESIGNS: Dict[str, str] = {
    "horus": "secmem.reproduce_horus",
    "lelantus": "secmem.reproduce_lelantus",
    "dshield": "secmem.reproduce_dshield",
    "bmf": "secmem.reproduce_bmf",
    "esd": "secmem.reproduce_esd",
}


def _reproduce_one(module: str, quick: bool) -> Dict[str, bytes]:
    """On a worker: one design's reproduction, run into a temporary folder; its files' bytes
    (so that workers need no file system shared with the driver)."""
    main = importlib.import_module(module).main
    with tempfile.TemporaryDirectory(prefix="secmem-reproduce-") as d:
        main(out=d, quick=quick)
        files = {}
        for name in sorted(os.listdir(d)):
            path = os.path.join(d, name)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    files[name] = f.read()
        return files


def main(out: str = "reproduce", quick: bool = False, backend: str = "local", address: Optional[str] = None, workers: Optional[int] = None) -> int:
    """Entry point of ``secmem reproduce all``."""
    be = open_backend(backend, workers or 1, address)
    failed: Dict[str, str] = {}

    def done(name: str, f) -> None:
        try:
            files = f.result()
        except KeyboardInterrupt:
            raise
        except Exception as e:  # one design's failure keeps the others'
            failed[name] = f"{type(e).__name__}: {e}"
            return
        os.makedirs(os.path.join(out, name), exist_ok=True)
        for fname, data in files.items():
            with open(os.path.join(out, name, fname), "wb") as fh:
                fh.write(data)
        print(f"reproduced {name} in {out}/{name}/")

    try:
        be.drain({be.executor.submit(_reproduce_one, module, quick): name for name, module in DESIGNS.items()}, done)
    finally:
        be.close()
    designs = [n for n in DESIGNS if n not in failed]
    write_index(out, designs, quick)
    print(f"wrote {out}/index.md and {out}/index.html ({len(designs)} designs)")
    for name, msg in failed.items():
        print(f"secmem: error: reproduce {name}: {msg}")
    if failed:
        raise SecmemError(f"{len(failed)} of {len(DESIGNS)} reproductions failed: {', '.join(failed)}")
    return 0


def _section(report_md: str, title: str) -> str:
    """The text of a report's ``## title`` section, without its heading."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", report_md, re.S | re.M)
    return m.group(1).strip() if m else ""


def _design(out: str, name: str) -> Dict[str, Any]:
    d = os.path.join(out, name)
    with open(os.path.join(d, "reproduce.json")) as f:
        rows = json.load(f)
    with open(os.path.join(d, "report.md")) as f:
        report = f.read()
    title = report.splitlines()[0].lstrip("# ").strip() if report else name
    plots = sorted(p for p in os.listdir(d) if p.endswith(".png"))
    return {"name": name, "title": title, "rows": rows, "differ": _section(report, "Where and why we differ"), "plots": plots}


def write_index(out: str, designs: List[str], quick: bool) -> None:
    parts = [_design(out, n) for n in designs]
    scope = "quick settings (--quick)" if quick else "the papers' settings"
    md = ["# secmem: every paper reproduced", "", f"Reproductions at {scope}; each design's folder has its report.md, reproduce.json and plots.", ""]
    for p in parts:
        md += [f"## {p['title']}", "", f"[report]({p['name']}/report.md) · [rows]({p['name']}/reproduce.json)", ""]
        md += reproduce_table.markdown(p["rows"]) + [""]
        md += [f"![{plot}]({p['name']}/{plot})" for plot in p["plots"]] + [""]
        md += ["### Where and why we differ", "", p["differ"], ""]
    with open(os.path.join(out, "index.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(out, "index.html"), "w") as f:
        f.write(_html(out, parts, scope))


_CSS = """body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:90%}td,th{border:1px solid #bbb;padding:2px 6px}
td.n{text-align:right}img{max-width:48%;margin:4px;border:1px solid #ddd}code{background:#f3f3f3}
nav a{margin-right:1em}"""


def _inline(text: str) -> str:
    """Markdown's inline code and bold, in escaped text."""
    t = html.escape(text)
    t = re.sub(r"`([^`]+)`", r"<code>\1</code>", t)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", t)


def _markdown_blocks(text: str) -> str:
    """The few Markdown forms the reports' prose uses: paragraphs, bullet lists, tables."""
    out: List[str] = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = block.splitlines()
        if all(l.lstrip().startswith("|") for l in lines):
            rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in lines if not re.match(r"^\s*\|[\s:|-]+\|\s*$", l)]
            out.append("<table>" + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rows) + "</table>")
        elif all(re.match(r"^\s*([-*]|\d+\.)\s", l) or l.startswith("  ") for l in lines):
            items, cur = [], ""
            for l in lines:
                if re.match(r"^\s*([-*]|\d+\.)\s", l):
                    if cur:
                        items.append(cur)
                    cur = re.sub(r"^\s*([-*]|\d+\.)\s", "", l)
                else:
                    cur += " " + l.strip()
            items.append(cur)
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
        else:
            out.append(f"<p>{_inline(' '.join(l.strip() for l in lines))}</p>")
    return "\n".join(out)


def _html(out: str, parts: List[Dict[str, Any]], scope: str) -> str:
    body = [f"<h1>secmem: every paper reproduced</h1><p>Reproductions at {html.escape(scope)}.</p>"]
    body.append("<nav>" + "".join(f'<a href="#{p["name"]}">{html.escape(p["title"])}</a>' for p in parts) + "</nav>")
    for p in parts:
        body.append(f'<h2 id="{p["name"]}">{html.escape(p["title"])}</h2>')
        rows = "".join(
            f"<tr><td>{html.escape(r['figure'])}</td><td>{html.escape(r['metric'])}</td>"
            f"<td class=n>{'' if r['paper'] is None else reproduce_table.fmt(r['paper'])}</td>"
            f"<td class=n>{reproduce_table.fmt(r['ours'])}</td><td class=n>{reproduce_table.ratio(r)}</td><td>{html.escape(r['unit'])}</td></tr>"
            for r in p["rows"]
        )
        body.append("<table><tr><th>figure</th><th>metric</th><th>paper</th><th>secmem</th><th>ours / paper</th><th>unit</th></tr>" + rows + "</table>")
        for plot in p["plots"]:
            with open(os.path.join(out, p["name"], plot), "rb") as f:
                data = base64.b64encode(f.read()).decode()
            body.append(f'<img alt="{html.escape(plot)}" src="data:image/png;base64,{data}">')
        body.append("<h3>Where and why we differ</h3>" + _markdown_blocks(p["differ"]))
    return f"<!doctype html><html><head><meta charset=utf-8><title>secmem reproductions</title><style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n"
