"""Does `secmem drain`, `vault-attack` and `reproduce horus` do what docs/horus.md says?"""

import json

import secmem

# A small hierarchy so each drain takes milliseconds.
SMALL = ["-p", "l2.size_kib=256", "-p", "llc.size_kib=1024", "-p", "memory.capacity_gib=4"]
KEYS = ("drain_cycles", "memory_reads", "memory_writes", "mac_ops", "flushed_lines", "energy_joules")


def test_drain_prints_the_interface_keys_for_every_scheme(cli):
    seen = {}
    for scheme in secmem.DRAIN_SCHEMES:
        out = json.loads(cli("drain", "--preset", "horus", "--scheme", scheme, *SMALL, check=True).stdout)
        for k in KEYS:
            assert k in out, (scheme, k)
        # 64 KiB L1 + 256 KiB L2 + 1 MiB LLC, every line dirty.
        assert out["flushed_lines"] == (64 + 256 + 1024) * 1024 // 64
        seen[scheme] = out
    # Horus reads nothing and writes 1.25x (SLM) or about 1.14x (DLM) the lines.
    n = seen["nonsecure"]["flushed_lines"]
    assert seen["horus-slm"]["memory_reads"] == 0
    assert seen["horus-slm"]["memory_writes"] == n + 2 * (n // 8)
    assert seen["horus-dlm"]["memory_writes"] == n + n // 8 + -(-n // 64)
    assert seen["base-lu"]["memory_reads"] > n and seen["base-eu"]["memory_reads"] > n


def test_drain_of_a_real_run_recovers_every_line_in_functional_mode(cli):
    for scheme in ("base-lu", "horus-dlm"):
        res = cli(
            "drain", "--scheme", scheme, "--from-workload", "--after", "3000", "--recover", *SMALL,
            "-p", "run.functional=true", "-p", "workload.requests=3000", "-p", "workload.footprint_bytes=8388608",
            check=True,
        )
        out = json.loads(res.stdout)
        assert out["oracle"]["lines_checked"] > 0 and out["oracle"]["mismatches"] == 0, out["oracle"]


def test_drain_rejects_an_unknown_scheme_and_a_bad_field(cli):
    res = cli("drain", "--scheme", "horus-tlm")
    assert res.returncode == 2 and "horus-tlm" in res.stderr
    res = cli("drain", "--scheme", "base-lu", "-p", "drain.max_inflight=0")
    assert res.returncode == 2 and "drain.max_inflight" in res.stderr
    res = cli("drain", "--scheme", "base-lu", "-p", "drain.worst_case_spacing_bytes=1073741824")
    assert res.returncode == 2 and "drain.worst_case_spacing_bytes" in res.stderr


def test_vault_attack_detects_every_class(cli):
    res = cli(
        "vault-attack", "--scheme", "horus-dlm", "--per-class", "20", "-p", "workload.requests=40000",
        "-p", "workload.footprint_bytes=67108864", *SMALL,
    )
    out = json.loads(res.stdout)
    assert res.returncode == 0 and out["all_detected"], out
    assert len(out["classes"]) == 7


def test_reproduce_horus_quick_writes_rows_plots_and_report(cli, tmp_path):
    out = tmp_path / "repro"
    cli("reproduce", "horus", "--quick", "--out", out, check=True)
    rows = json.loads((out / "reproduce.json").read_text())
    for r in rows:
        assert set(r) == {"figure", "metric", "paper", "ours", "unit"}
    figures = {r["figure"] for r in rows}
    for f in ("Fig 6", "Fig 11", "Fig 12", "Fig 13", "Fig 14", "Fig 15", "Fig 16", "Table II", "Table III"):
        assert f in figures
    blocks = next(r for r in rows if r["metric"] == "flushed cache blocks")
    assert blocks["ours"] == blocks["paper"] == 295936
    assert next(r for r in rows if r["metric"] == "Horus-DLM MACs / Horus-SLM")["ours"] > 1.1
    assert len(list(out.glob("*.png"))) >= 7
    assert "Where and why we differ" in (out / "report.md").read_text()
    # Every unstated choice's alternatives are run, beside the same headline rows.
    sens = {r["metric"]: r for r in rows if r["figure"] == "Sensitivity"}
    for choice in ("pcm.address_mapping = line-interleave", "tree.verify_parent_on_write_back = false", "drain.metadata_caches = warm", "drain.max_inflight = 4",
                   "pcm.row_buffer = open", "pcm.row_buffer = open, with 8 KiB rows (gem5's DDR3 DRAM controller)",
                   "metadata_cache.tree_organisation = per-level"):
        assert f"Base-LU MACs / Horus-SLM, {choice}" in sens, choice
    default_macs = next(r for r in rows if r["metric"] == "Base-LU MACs / Horus-SLM")["ours"]
    # An unverified parent needs no hashes up its path: fewer MACs, the same flushed lines.
    assert sens["Base-LU MACs / Horus-SLM, tree.verify_parent_on_write_back = false"]["ours"] < default_macs
    assert "Unstated choices: which rows move" in (out / "report.md").read_text()


def test_reproduce_horus_refuses_overrides_of_what_each_figure_sets_itself(cli, tmp_path):
    # They used to be replaced in some rows and kept in others (a 4 MB LLC in rows labelled 16 MB).
    for p in ("run.functional=true", "llc.size_kib=4096", "llc={size_kib=4096}", "drain.worst_case_spacing_bytes=4096"):
        res = cli("reproduce", "horus", "--quick", "--out", "r", "-p", p)
        assert res.returncode == 2 and "cannot be overridden" in res.stderr, (p, res.stderr)


def test_bench_has_the_horus_drain_scenario():
    names = {s["name"] for s in secmem.bench_scenarios()}
    assert "horus-drain-base-lu" in names
    r = secmem.bench(["horus-drain-base-lu"], scale=0.01)["horus-drain-base-lu"]
    assert r["records"] == (64 + 256 + 1024) * 1024 // 64


def test_drain_refuses_a_design_that_conflicts_with_the_scheme(cli):
    res = cli("drain", "--scheme", "base-lu", "-p", "run.design=lelantus", *SMALL)
    assert res.returncode == 2 and "run.design" in res.stderr and "lelantus" in res.stderr
