"""Does the Python API return reports, DataFrames and sweeps, deterministically?"""

import re
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


def test_a_grid_sweep_runs_every_combination_and_each_row_is_that_run():
    grid = {"llc.size_kib": [512, 1024], "tree.update": ["lazy", "eager"]}
    df = secmem.sweep(grid, params=SMALL)
    # The last key varies fastest.
    assert list(df["sweep.point"]) == [0, 1, 2, 3]
    assert list(df["sweep.llc.size_kib"]) == [512, 512, 1024, 1024]
    assert list(df["sweep.tree.update"]) == ["lazy", "eager", "lazy", "eager"]
    # A point's row is exactly the run with its overrides (and the points really differ).
    alone = secmem.run(params={**SMALL, "llc.size_kib": 1024, "tree.update": "eager"}).flat()
    row = df.iloc[3]
    for k in ["stats.cycles", "stats.memory.writes.tree", "stats.security.mac_ops.tree_update", "stats.caches.llc.misses"]:
        assert row[k] == alone[k], k
    assert len(set(df["stats.security.mac_ops.tree_update"])) > 1
    assert len(set(df["stats.caches.llc.misses"])) == 2


def test_a_sweep_on_several_threads_gives_the_rows_of_a_sweep_on_one():
    grid = {"llc.size_kib": [512, 1024, 2048], "workload.seed": [1, 2]}
    one = secmem.sweep(grid, params=SMALL)
    two = secmem.sweep(grid, params=SMALL, jobs=2)
    stats = [c for c in one.columns if c.startswith("stats.")]
    assert one[stats].equals(two[stats])
    assert list(one["sweep.point"]) == list(two["sweep.point"])


def test_a_sweep_on_several_threads_runs_each_functional_point_on_one_host_thread_unless_told():
    grid = {"llc.size_kib": [512, 1024]}
    params = {**SMALL, "run.functional": True}
    one = secmem.sweep(grid, params=params)
    two = secmem.sweep(grid, params=params, jobs=2)
    told = secmem.sweep(grid, params={**params, "run.host_threads": 2}, jobs=2)
    # Two points at once on one thread each: --jobs bounds the cores a sweep takes.
    assert list(one["config.run.host_threads"]) == [2, 2]
    assert list(two["config.run.host_threads"]) == [1, 1]
    assert list(told["config.run.host_threads"]) == [2, 2]
    stats = [c for c in one.columns if c.startswith("stats.")]
    assert one[stats].equals(two[stats]) and one[stats].equals(told[stats])


def test_a_sweep_with_out_writes_each_points_report_and_config_and_one_csv(tmp_path):
    import json
    import pandas as pd

    out = tmp_path / "sw"
    cfg = tmp_path / "c.toml"
    cfg.write_text("[tree]\narity = 8\n")
    # Paths may be path objects, as everywhere in the API.
    df = secmem.sweep("llc.size_kib", [512, 1024], config=cfg, params=SMALL, out=out)
    for i, size in enumerate([512, 1024]):
        point = out / "points" / f"{i:03d}"
        rep = json.loads((point / "report.json").read_text())
        assert rep["config"]["llc"]["size_kib"] == size
        assert rep["stats"]["cycles"] == df["stats.cycles"][i]
        assert f"size_kib = {size}" in (point / "config.toml").read_text()
    csv = pd.read_csv(out / "sweep.csv")
    assert list(csv["sweep.llc.size_kib"]) == [512, 1024]
    assert list(csv["stats.cycles"]) == list(df["stats.cycles"])
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["vary"] == {"llc.size_kib": [512, 1024]}
    assert doc["base"]["config"] == str(cfg)
    assert [p["dir"] for p in doc["points"]] == ["points/000", "points/001"]


def test_plot_sweep_draws_a_column_against_a_varied_key_and_names_what_is_missing(tmp_path):
    df = secmem.sweep({"llc.size_kib": [512, 2048], "tree.update": ["lazy", "eager"]}, params=SMALL)
    path = secmem.plot_sweep(df, "cycles", path=str(tmp_path / "c.png"))
    assert open(path, "rb").read(4) == b"\x89PNG"
    secmem.plot_sweep(df, "stats.ipc", x="tree.update", path=str(tmp_path / "i.png"))
    with pytest.raises(secmem.SecmemError, match="no column 'nope'"):
        secmem.plot_sweep(df, "nope")
    with pytest.raises(secmem.SecmemError, match="not a varied key; the sweep varies llc.size_kib, tree.update"):
        secmem.plot_sweep(df, "cycles", x="tree.arity")
    with pytest.raises(secmem.SecmemError, match="not a sweep"):
        secmem.plot_sweep(secmem.run(params=SMALL).frame(), "cycles")


def test_a_bad_sweep_point_fails_before_any_run_naming_the_point(tmp_path):
    out = tmp_path / "sw"
    with pytest.raises(secmem.SecmemError, match=r"sweep point 2 \(tree.arity=1\): .*tree.arity"):
        secmem.sweep("tree.arity", [8, 4, 1], params=SMALL, out=str(out))
    assert not (out / "points").exists()
    for bad, msg in [
        (dict(vary="llc.size_kib"), "give the values"),
        (dict(vary="llc.size_kib", values=[]), "no values"),
        (dict(vary="llc.size_kib", values="1024"), "are a list"),
        (dict(vary={"llc.size_kib": [1024]}, values=[1]), "do not give values"),
        (dict(vary={}), "nothing to vary"),
        (dict(vary="llc.size_kib", values=[1024], jobs=0), "jobs must be an integer >= 1"),
        (dict(vary="llc.size_kib", values=[1024, None]), r"sweep point 1 \(llc.size_kib=None\): .*NoneType"),
    ]:
        with pytest.raises(secmem.SecmemError, match=msg):
            secmem.sweep(**bad, params=SMALL)


def test_a_count_too_large_for_the_engine_names_the_range_it_must_be_in(tmp_path):
    # ">= 0" alone would not say what is wrong with 2**64.
    with pytest.raises(secmem.SecmemError, match=r"seed must be an integer in 0\.\.=18446744073709551615, got 18446744073709551616"):
        secmem.trace_gen(str(tmp_path / "t.bin"), pattern="random", seed=2**64)
    with pytest.raises(secmem.SecmemError, match=r"seed must be an integer >= 0, got -1"):
        secmem.trace_gen(str(tmp_path / "t.bin"), pattern="random", seed=-1)


def test_errors_are_secmem_errors_naming_the_field():
    with pytest.raises(secmem.SecmemError, match="tree.arity"):
        secmem.run(params={"tree.arity": 0})
    with pytest.raises(secmem.SecmemError, match="workload.read_ratio"):
        secmem.run(params={"workload.read_ratio": 1.5})
    with pytest.raises(secmem.SecmemError, match=r"security\.counter_init.*zero.*random"):
        secmem.config_json(params={"security.counter_init": "rand"})


def test_api_arguments_of_the_wrong_kind_are_errors_naming_them(tmp_path):
    # Found by fuzzing: raw OverflowError/TypeError/ValueError, or messages about a character
    # of a string that was iterated ("override 'w' is not of the form key=value").
    cases = [
        (lambda: secmem.bench(scale="1"), "--scale must be a positive number"),
        (lambda: secmem.bench(scale=None), "--scale must be a positive number"),
        (lambda: secmem.bench(scale=10**400), "--scale is too large"),
        (lambda: secmem.bench(rounds=True), "--rounds must be an integer in 1..=100"),
        (lambda: secmem.bench(rounds=2.0), "--rounds must be an integer in 1..=100"),
        (lambda: secmem.trace_gen(str(tmp_path / "t.bin"), read_ratio=10**400), "read_ratio is too large"),
        (lambda: secmem.run(params="workload.requests=10"), "params must be a mapping or a list"),
        (lambda: secmem.run(params={"llc": {"size_kib": 1}}), "params['llc']: a config value is"),
        (lambda: secmem.run(params=[5]), "each override is a 'key=value' string"),
        (lambda: secmem.attack(classes="tamper-data"), "classes must be a list"),
        (lambda: secmem.run(out=5), "out must be a path"),
        (lambda: secmem.run(trace="\udcff.txt"), "is not valid UTF-8"),
    ]
    for call, message in cases:
        with pytest.raises(secmem.SecmemError, match=re.escape(message)):
            call()


def test_api_options_a_pattern_does_not_use_are_refused_not_ignored(tmp_path):
    from secmem import api
    for call, name in [
        (lambda: secmem.trace_gen(str(tmp_path / "t.bin"), pattern="random", stride_bytes=100), "stride_bytes"),
        (lambda: secmem.trace_gen(str(tmp_path / "t.bin"), pattern="random", zipf_theta=0.5), "zipf_theta"),
        (lambda: api.cow_trace("redis", str(tmp_path / "r.bin"), lines_per_page=3), "lines_per_page"),
        (lambda: api.cow_trace("forkbench", str(tmp_path / "f.bin"), ops=99), "ops"),
        (lambda: api.forkbench("lelantus", seed=5), "seed"),
    ]:
        with pytest.raises(secmem.SecmemError, match=f"options that do not apply to it: {name}"):
            call()


def test_every_public_api_function_is_exported_from_the_package():
    # The copy-on-write workloads were reachable only as secmem.api.*.
    import inspect
    from secmem import api

    public = {n for n, f in inspect.getmembers(api, inspect.isfunction) if not n.startswith("_") and f.__module__ == api.__name__}
    assert public <= set(secmem.__all__), sorted(public - set(secmem.__all__))
    assert all(getattr(secmem, n) is getattr(api, n) for n in public)
