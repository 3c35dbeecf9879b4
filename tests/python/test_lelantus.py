"""Lelantus: the forkbench command and a quick reproduction."""

import json

from secmem import reproduce_lelantus


def forkbench(cli, *args, footprint=16 << 20):
    # 16 MiB: twice the lelantus preset's 8 MB LLC, so copies reach memory.
    res = cli("forkbench", *args, "--footprint-bytes", str(footprint), check=True)
    return json.loads(res.stdout)


def test_forkbench_prints_cycles_and_traffic_and_lelantus_beats_kernel_cow(cli):
    out = {}
    for scheme in ("baseline", "lelantus", "lelantus-cow", "silent-shredder"):
        out[scheme] = forkbench(cli, "--scheme", scheme, "--page-size", "4k", "--lines-per-page", "8")
        for key in ("cycles", "memory_writes", "memory_reads"):
            assert out[scheme][key] > 0, (scheme, key)
    assert out["lelantus"]["memory_writes"] < out["baseline"]["memory_writes"] / 2
    assert out["lelantus"]["cycles"] < out["baseline"]["cycles"]
    assert out["lelantus"]["os"]["page_commands"] == 4096  # one page_copy per 4 KB page
    assert out["baseline"]["os"]["kernel_lines"] == 4096 * 64


def test_forkbench_huge_pages_and_params(cli):
    r = forkbench(cli, "--scheme", "lelantus", "--page-size", "2m", "-p", "security.aes_latency_cycles=24", footprint=4 << 20)
    assert r["page_size"] == "2m" and r["lines_per_page"] == 512


def test_forkbench_rejects_bad_input_with_exit_2(cli):
    res = cli("forkbench", "--scheme", "lelantus", "--page-size", "3k")
    assert res.returncode == 2 and "unknown page size '3k'" in res.stderr
    res = cli("forkbench", "--scheme", "nosuch")
    assert res.returncode == 2 and "run.design" in res.stderr and "lelantus-cow" in res.stderr
    res = cli("forkbench", "--lines-per-page", "65")
    assert res.returncode == 2 and "--lines-per-page must be 1..=64" in res.stderr
    res = cli("reproduce", "nosuch")
    assert res.returncode == 2 and "lelantus" in res.stderr


def test_quick_reproduce_writes_rows_plots_and_report(cli, tmp_path):
    cli("reproduce", "lelantus", "--quick", "--out", "rep", check=True)
    rows = json.loads((tmp_path / "rep" / "reproduce.json").read_text())
    assert {r["figure"] for r in rows} >= {"fig2", "fig9", "fig10", "fig11", "noncopy", "mapping", "tree"}
    for r in rows:
        assert set(r) == {"figure", "metric", "paper", "ours", "unit"}
    by = {(r["figure"], r["metric"]): r["ours"] for r in rows}
    assert by[("fig9", "forkbench 2 MB speedup, lelantus")] > 1.5
    assert by[("fig2", "write amplification, 2 MB, first write")] > 100
    # Each unstated choice's alternatives are run: the memory variants and the two tree choices.
    for variant, _ in reproduce_lelantus.MEMORY_VARIANTS:
        assert by[("mapping", f"forkbench 2 MB speedup, lelantus, {variant}")] > 0
    for choice in ("tree.verify_parent_on_write_back=false", "metadata_cache.tree_organisation=per-level"):
        assert by[("tree", f"forkbench 4 KB speedup, lelantus, {choice}")] > 0
    for png in ("fig2.png", "fig9.png", "fig10.png", "fig11.png"):
        assert (tmp_path / "rep" / png).stat().st_size > 1000
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "Where and why we differ" in report
    # The prose quotes this run's numbers, not ones typed in when it was written.
    assert f"(4 KB: {by[('noncopy', '4 KB speedup, lelantus')]:.2f}x)" in report
    assert f"({by[('fig11', '4 KB, whole page speedup, lelantus')]:.1f}x at 4 KB, " in report
    notes = json.loads((tmp_path / "rep" / "series.json").read_text())["notes"]
    assert notes["copied"] == 4096 and 0 < notes["overflows"] < notes["copied"]
    assert f"{notes['overflows']:,} of {notes['copied']:,}" in report
