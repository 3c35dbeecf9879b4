"""`secmem diff` and `secmem config diff`/`config show FILE`: does a comparison show what
differs, both values and the ratio, most changed first, and nothing that is equal?"""

import json

import secmem

BASE = ["workload.requests=20000", "run.progress=false"]


def test_diff_lists_the_changed_stats_with_the_ratio_most_changed_first(tmp_path):
    a = secmem.run(preset="horus", params=BASE + ["security.enabled=false"], out=str(tmp_path / "a"))
    b = secmem.run(preset="horus", params=BASE, out=str(tmp_path / "b"))
    df = secmem.diff(tmp_path / "a", tmp_path / "b")
    # The setting that explains the rest comes first.
    assert df.iloc[0]["stat"] == "config.security.enabled"
    cycles = df[df["stat"] == "stats.cycles"].iloc[0]
    assert cycles["a"] == a.stats["cycles"] and cycles["b"] == b.stats["cycles"]
    assert abs(cycles["ratio"] - b.stats["cycles"] / a.stats["cycles"]) < 1e-12
    numeric = df[df["change"].notna()]
    assert list(numeric["change"].abs()) == sorted(numeric["change"].abs(), reverse=True)
    assert not any(s.startswith("meta.") for s in df["stat"])  # the host run's wall time is no figure
    # A run compared with itself differs in nothing; --only keeps one subtree.
    assert secmem.diff(tmp_path / "b", tmp_path / "b" / "report.json").empty
    only = secmem.diff(a, b, only="stats.memory.reads")
    assert len(only) > 0 and all(s.startswith("stats.memory.reads.") for s in only["stat"])


def test_the_diff_command_prints_the_slowdown_in_one_line(cli, tmp_path):
    for name, extra in (("ns", ["-p", "security.enabled=false"]), ("sec", [])):
        cli("run", "--preset", "horus", *[x for p in BASE for x in ("-p", p)], *extra, "--out", name, check=True)
    res = cli("diff", "ns", "sec", "--only", "stats.cycles", "--csv", "d.csv", check=True)
    lines = res.stdout.strip().splitlines()
    assert lines[0].split() == ["stat", "A", "B", "B/A"] and lines[1].split()[0] == "stats.cycles"
    a = json.loads((tmp_path / "ns" / "report.json").read_text())["stats"]["cycles"]
    b = json.loads((tmp_path / "sec" / "report.json").read_text())["stats"]["cycles"]
    assert lines[1].split()[1:] == [str(a), str(b), f"{b / a:.4g}"]
    assert (tmp_path / "d.csv").read_text().startswith("stat,a,b,ratio,change")
    res = cli("diff", "ns", "missing")
    assert res.returncode == 2 and "missing" in res.stderr and "Traceback" not in res.stderr


def test_config_diff_and_show_take_presets_and_files(cli, tmp_path):
    (tmp_path / "mine.toml").write_text("[llc]\nsize_kib = 4096\n")
    res = cli("config", "diff", "horus", "mine.toml", check=True)
    rows = {line.split()[0]: line.split()[1:] for line in res.stdout.splitlines()[1:]}
    assert rows["llc.size_kib"][1] == "4096"
    res = cli("config", "show", "mine.toml", check=True)
    assert "size_kib = 4096" in res.stdout
    res = cli("config", "show", "nosuch.toml")
    assert res.returncode == 2 and "nosuch.toml" in res.stderr
