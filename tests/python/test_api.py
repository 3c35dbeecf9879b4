"""Does the Python API return reports, DataFrames and sweeps, deterministically?"""

import pytest

import secmem

# A 1 MiB LLC so that 20 000 random requests over 64 MiB evict (and write back) lines.
SMALL = {"workload.requests": 20000, "workload.footprint_bytes": 1 << 26, "llc.size_kib": 1024, "l2.size_kib": 256}


def test_run_returns_config_meta_and_stats():
    rep = secmem.run(preset="horus", params=SMALL)
    assert rep.config["preset"] == "horus"
    assert rep.meta["records"] == 20000
    s = rep.stats
    assert s["cycles"] > 0 and 0 < s["ipc"]
    assert s["memory"]["reads"]["total"] == sum(
        s["memory"]["reads"][k] for k in ["data", "counter", "mac", "tree", "reencrypt", "design"]
    )
    assert s["latency_cycles"]["read"]["p50"] <= s["latency_cycles"]["read"]["p99"] <= s["latency_cycles"]["read"]["p999"]


def test_report_is_a_one_row_dataframe_with_dotted_columns():
    df = secmem.run(params=SMALL).frame()
    assert len(df) == 1
    assert "stats.memory.writes.data" in df.columns
    assert "config.llc.size_kib" in df.columns


def test_same_seed_same_stats_and_another_seed_differs():
    a = secmem.run(params={**SMALL, "workload.seed": 7})
    b = secmem.run(params={**SMALL, "workload.seed": 7})
    c = secmem.run(params={**SMALL, "workload.seed": 8})
    assert a.stats == b.stats
    assert a.stats != c.stats


def test_non_secure_mode_has_no_metadata_traffic():
    rep = secmem.run(params={**SMALL, "security.enabled": False})
    m = rep.stats["memory"]
    assert m["reads"]["total"] == m["reads"]["data"]
    assert rep.stats["security"]["mac_ops"]["total"] == 0


def test_eager_update_does_more_tree_hashing_than_lazy():
    lazy = secmem.run(params={**SMALL, "tree.update": "lazy"})
    eager = secmem.run(params={**SMALL, "tree.update": "eager"})
    assert eager.stats["security"]["mac_ops"]["tree_update"] > lazy.stats["security"]["mac_ops"]["tree_update"]


def test_warmup_is_subtracted():
    full = secmem.run(params=SMALL)
    roi = secmem.run(params={**SMALL, "run.warmup_requests": 10000})
    assert roi.stats["core"]["records"] == 10000
    assert roi.stats["memory"]["reads"]["data"] < full.stats["memory"]["reads"]["data"]


def test_sweep_gives_one_row_per_value():
    df = secmem.sweep("llc.size_kib", [4096, 16384], params=SMALL)
    assert list(df["sweep.value"]) == [4096, 16384]
    assert list(df["config.llc.size_kib"]) == [4096, 16384]


def test_errors_are_secmem_errors_naming_the_field():
    with pytest.raises(secmem.SecmemError, match="tree.arity"):
        secmem.run(params={"tree.arity": 0})
    with pytest.raises(secmem.SecmemError, match="workload.read_ratio"):
        secmem.run(params={"workload.read_ratio": 1.5})
    with pytest.raises(secmem.SecmemError, match=r"security\.counter_init.*zero.*random"):
        secmem.config_json(params={"security.counter_init": "rand"})
