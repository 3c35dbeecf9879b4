"""Stats as text: does a run folder hold stats.txt and stats.csv with a description for every
figure, does `secmem stats describe` list them, is docs/stats.md that same list, and do the
dirty lines and run.flush_at_end show a short run's write path?"""

import csv
import json
import os
import re

import secmem

from conftest import REPO


def test_a_run_folder_holds_every_figure_as_text_and_csv_each_described(cli, tmp_path):
    cli("run", "--preset", "horus", "-p", "workload.requests=20000", "--out", "o", check=True)
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    txt = (tmp_path / "o" / "stats.txt").read_text().splitlines()
    cycles = next(line for line in txt if line.startswith("stats.cycles "))
    assert cycles.split()[1] == str(rep["stats"]["cycles"]) and "# core cycles" in cycles
    assert not any("undocumented" in line for line in txt)
    rows = list(csv.DictReader(open(tmp_path / "o" / "stats.csv")))
    assert len(rows) == len(txt) - 1 and all(r["description"] for r in rows)
    by_name = {r["name"]: r for r in rows}
    assert by_name["stats.memory.bank_conflict_cycles_sum"]["unit"] == "cycles, summed over requests"


def test_stats_describe_lists_by_prefix_and_the_docs_are_that_list(cli):
    out = cli("stats", "describe", "stats.memory", check=True).stdout
    assert "stats.memory.writes.total" in out and "stats.core" not in out
    res = cli("stats", "describe", "nosuch")
    assert res.returncode == 2 and "nosuch" in res.stderr
    text = open(os.path.join(REPO, "docs", "stats.md")).read()
    block = re.search(r"<!-- stats-reference:begin -->\n(.*?)<!-- stats-reference:end -->", text, re.S)
    assert block, "docs/stats.md lost its reference markers"
    assert block.group(1) == cli("stats", "describe", "--markdown", check=True).stdout, "regenerate docs/stats.md"
    assert any(d["name"] == "stats.design.zero_reads" for d in secmem.stat_docs("stats.design"))


def test_a_short_run_shows_its_dirty_lines_and_flush_at_end_its_write_path(cli, tmp_path):
    args = ["run", "--preset", "horus", "-p", "workload.requests=2000", "-p", "workload.footprint_bytes=65536"]
    res = cli(*args, "--out", "plain", check=True)
    assert "dirty at end" in res.stdout and "run.flush_at_end=true" in res.stdout
    res = cli(*args, "-p", "run.flush_at_end=true", "--out", "flushed", check=True)
    assert "flush at end:" in res.stdout
    rep = json.loads((tmp_path / "flushed" / "report.json").read_text())
    assert rep["stats"]["memory"]["writes"]["total"] == 0
    assert rep["stats"]["flush_at_end"]["memory"]["writes"]["data"] == rep["stats"]["flush_at_end"]["lines_written_back"] > 0
