"""Does the `secmem` command do what the README says, and fail clearly on bad input?"""

import json
import struct

SMALL = ["-p", "workload.requests=20000", "-p", "workload.footprint_bytes=67108864"]


def test_presets_list_every_paper_with_its_table(cli):
    out = cli("presets", check=True).stdout
    for name, table in [("horus", "Table I"), ("bmf", "Table 1"), ("esd", "Table I"), ("lelantus", "Table III")]:
        line = next(l for l in out.splitlines() if l.startswith(name + " "))
        assert table in line


def test_config_show_has_a_description_on_every_field(cli):
    out = cli("config", "show", "horus", check=True).stdout
    lines = out.splitlines()
    assignments = [i for i, l in enumerate(lines) if "=" in l and not l.startswith("#")]
    assert assignments
    for i in assignments:
        assert lines[i - 1].startswith("#"), f"no description above {lines[i]!r}"
    assert "size_kib = 16384" in out
    assert 'preset = "horus"' in out


def test_config_validate_accepts_a_good_file_and_names_a_bad_field(cli, tmp_path):
    good = tmp_path / "good.toml"
    good.write_text("[llc]\nsize_kib = 32768\n")
    assert cli("config", "validate", good, "--preset", "horus").returncode == 0
    bad = tmp_path / "bad.toml"
    bad.write_text("[llc]\nsize_kb = 32768\n")
    res = cli("config", "validate", bad)
    assert res.returncode == 2
    assert "llc.size_kb" in res.stderr and "size_kib" in res.stderr
    arity = tmp_path / "arity.toml"
    arity.write_text("[tree]\narity = 1\n")
    res = cli("config", "validate", arity)
    assert res.returncode == 2 and "tree.arity" in res.stderr
    tiny = tmp_path / "tiny.toml"
    tiny.write_text("[l1]\nsize_kib = 1\nways = 32\n")
    res = cli("config", "validate", tiny)
    assert res.returncode == 2 and "l1.size_kib" in res.stderr
    zero = tmp_path / "zero.toml"
    zero.write_text("[security]\nminor_counter_bits = 0\n")
    res = cli("config", "validate", zero)
    assert res.returncode == 2 and "security.minor_counter_bits" in res.stderr


def test_unknown_override_key_and_unknown_preset_fail_with_exit_2(cli):
    res = cli("run", "-p", "llc.sise_kib=3")
    assert res.returncode == 2 and "llc.sise_kib" in res.stderr
    res = cli("run", "--preset", "nosuch")
    assert res.returncode == 2 and "unknown preset 'nosuch'" in res.stderr and "horus" in res.stderr


def test_run_writes_report_and_resolved_config(cli, tmp_path):
    cli("run", "--preset", "horus", *SMALL, "-p", "llc.size_kib=32768", "--out", "o", check=True)
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert set(rep) == {"config", "meta", "stats"}
    assert rep["config"]["llc"]["size_kib"] == 32768
    assert rep["meta"]["records"] == 20000 and rep["meta"]["seed"] == 1
    assert rep["meta"]["git_commit"]
    assert rep["stats"]["memory"]["reads"]["counter"] > 0
    assert (tmp_path / "o" / "config.toml").read_text().count("size_kib = 32768") == 1


def test_sweep_prints_a_row_per_point_and_saves_every_run(cli, tmp_path):
    small = SMALL + ["-p", "llc.size_kib=1024", "-p", "l2.size_kib=256"]
    res = cli("sweep", *small, "--vary", "tree.update=lazy,eager", "--vary", "tree.arity=4,8",
              "--columns", "cycles,security.mac_ops.tree_update", "--out", "sw", check=True)
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["point", "tree.update", "tree.arity", "cycles", "security.mac_ops.tree_update"]
    assert [l.split()[:3] for l in lines[1:5]] == [["0", "lazy", "4"], ["1", "lazy", "8"], ["2", "eager", "4"], ["3", "eager", "8"]]
    # The printed figures are the saved runs' figures.
    for i, line in enumerate(lines[1:5]):
        rep = json.loads((tmp_path / "sw" / "points" / f"{i:03d}" / "report.json").read_text())
        assert int(line.split()[3]) == rep["stats"]["cycles"]
        assert int(line.split()[4]) == rep["stats"]["security"]["mac_ops"]["tree_update"]
    assert (tmp_path / "sw" / "sweep.csv").read_text().count("\n") == 5
    # --plot draws each named column against the first --vary key.
    res = cli("sweep", *small, "--vary", "tree.update=lazy,eager", "--vary", "tree.arity=4,8", "--plot", "cycles",
              "--plot", "memory.writes.tree", "--out", "sw", check=True)
    for name in ["cycles.png", "memory.writes.tree.png"]:
        assert (tmp_path / "sw" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_sweep_refuses_bad_vary_and_columns_naming_them(cli, tmp_path):
    for args, msg in [
        (["--vary", "tree.arity"], "expected KEY=V1,V2"),
        (["--vary", "tree.arity=4,,8"], "an empty value"),
        (["--vary", "tree.arity=4", "--vary", "tree.arity=8"], "--vary tree.arity: given twice"),
        (["--vary", "tree.arity=4,1"], "sweep point 1 (tree.arity=1)"),
        (["--vary", "tree.aritty=4"], "tree.aritty"),
        (["--vary", "tree.arity=4", "--columns", "nope"], "--columns: no column 'nope'"),
        (["--vary", "tree.arity=4", "--plot", "nope"], "--plot: no column 'nope'"),
        (["--vary", "tree.arity=4", "--jobs", "0"], "jobs must be an integer >= 1"),
    ]:
        res = cli("sweep", *SMALL, *args, "--out", "sw")
        assert res.returncode == 2, args
        assert msg in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr


def test_trace_gen_info_convert_and_run(cli, tmp_path):
    cli("trace", "gen", "--pattern", "zipf", "--requests", 5000, "--footprint-bytes", 1 << 24,
        "--read-ratio", 0.7, "--seed", 3, "-o", "t.bin", check=True)
    info = json.loads(cli("trace", "info", "t.bin", check=True).stdout)
    assert info["records"] == 5000
    assert 0.6 < info["reads"] / 5000 < 0.8
    cli("trace", "convert", "t.bin", "t.txt", "--to", "text", check=True)
    assert (tmp_path / "t.txt").read_text().startswith("# secmem-trace v1")
    cli("trace", "convert", "t.txt", "t2.bin", check=True)
    assert (tmp_path / "t.bin").read_bytes() == (tmp_path / "t2.bin").read_bytes()
    cli("run", "--trace", "t.txt", "--out", "r", check=True)
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["meta"]["trace"].endswith("t.txt")
    assert rep["stats"]["core"]["records"] == 5000


def test_foreign_traces_are_read(cli, tmp_path):
    (tmp_path / "dramsim.trc").write_text("0x1000 READ 10\n0x2000 WRITE 25\n")
    (tmp_path / "lackey.txt").write_text("==1== Lackey\nI  0400d7d4,8\n L 04222cac,8\n S 04222cb0,8\n M 0421a228,4\n")
    for name, n in [("dramsim.trc", 2), ("lackey.txt", 4)]:
        info = json.loads(cli("trace", "info", name, check=True).stdout)
        assert info["records"] == n, name


def test_malformed_traces_name_the_file_and_position(cli, tmp_path):
    cli("trace", "gen", "--requests", 100, "--footprint-bytes", 1 << 20, "-o", "ok.bin", check=True)
    data = (tmp_path / "ok.bin").read_bytes()
    (tmp_path / "trunc.bin").write_bytes(data[: 16 + 16 * 10 + 7])
    res = cli("run", "--trace", "trunc.bin")
    assert res.returncode == 2 and "trunc.bin" in res.stderr and "offset" in res.stderr
    (tmp_path / "bad.txt").write_text("# secmem-trace v1\nR 0x40 64 1\nX 0x80 64 1\n")
    res = cli("run", "--trace", "bad.txt")
    assert res.returncode == 2 and "bad.txt:3" in res.stderr
    assert "Traceback" not in res.stderr


def test_out_of_range_and_misaligned_records_name_the_record(cli, tmp_path):
    (tmp_path / "far.txt").write_text("# secmem-trace v1\nR 0x40 64 1\nW 0x7fffffffffc0 64 1\n")
    res = cli("run", "--trace", "far.txt")
    assert res.returncode == 2 and "far.txt: record 1" in res.stderr and "beyond" in res.stderr
    (tmp_path / "mis.txt").write_text("# secmem-trace v1\nR 0x48 8 1\nR 0x43 8 1\n")
    res = cli("run", "--trace", "mis.txt")
    assert res.returncode == 2 and "record 1" in res.stderr and "aligned" in res.stderr
    cli("run", "--trace", "mis.txt", "-p", "run.require_aligned=false", check=True)


def test_bench_prints_one_json_object_per_scenario(cli):
    out = cli("bench", "--scenario", "nonsecure-sequential", "--scenario", "secure-lazy-random",
              "--scenario", "secure-lazy-random-memory-level", "--scale", "0.002", check=True).stdout
    res = json.loads(out)
    assert set(res) == {"nonsecure-sequential", "secure-lazy-random", "secure-lazy-random-memory-level"}
    for v in res.values():
        assert v["requests_per_s"] > 0 and v["peak_rss_bytes"] > 0
        # The unit: requests that reached the memory controller, per second (a
        # core-level record that hits in a cache reaches it not at all).
        assert v["llc_requests_per_s"] > 0 and v["llc_requests"] > 0
    assert res["secure-lazy-random-memory-level"]["llc_requests"] == res["secure-lazy-random-memory-level"]["records"]
    res = cli("bench", "--scenario", "nope")
    assert res.returncode == 2 and "secure-lazy-random" in res.stderr


def test_bench_rounds_report_each_scenarios_median_round_and_functional_over_counting_round_by_round(cli):
    out = cli("bench", "--scenario", "functional-random", "--scenario", "secure-lazy-random", "--scale", "0.0005",
              "--rounds", "3", check=True).stdout
    res = json.loads(out)
    assert set(res) == {"functional-random", "secure-lazy-random"}
    for v in res.values():
        r = v["rounds"]
        assert len(r["requests_per_s"]) == 3 and len(r["llc_requests_per_s"]) == 3
        assert r["median"] == sorted(r["requests_per_s"])[1] and (r["min"], r["max"]) == (min(r["requests_per_s"]), max(r["requests_per_s"]))
        # The scenario's own fields are those of its median round.
        i = r["requests_per_s"].index(r["median"])
        assert v["requests_per_s"] == r["median"] and v["llc_requests_per_s"] == r["llc_requests_per_s"][i]
    # Round by round: the functional run over the counting run of the same round.
    f, c = res["functional-random"]["rounds"]["requests_per_s"], res["secure-lazy-random"]["rounds"]["requests_per_s"]
    vs = res["functional-random"]["vs_counting"]
    assert vs["scenario"] == "secure-lazy-random" and vs["per_round"] == [a / b for a, b in zip(f, c)]
    assert vs["median"] == sorted(vs["per_round"])[1] and vs["min"] == min(vs["per_round"]) and vs["max"] == max(vs["per_round"])
    # One round: no "rounds" block, and the ratio still comes when both scenarios run.
    one = json.loads(cli("bench", "--scenario", "secure-lazy-random", "--scenario", "functional-random", "--scale", "0.0005", check=True).stdout)
    assert "rounds" not in one["secure-lazy-random"]
    assert one["functional-random"]["vs_counting"]["per_round"] == [one["functional-random"]["requests_per_s"] / one["secure-lazy-random"]["requests_per_s"]]
    assert "vs_counting" not in json.loads(cli("bench", "--scenario", "functional-random", "--scale", "0.0005", check=True).stdout)["functional-random"]
    twice = json.loads(cli("bench", "--scenario", "nonsecure-random", "--scenario", "nonsecure-random", "--scale", "0.0005",
                           "--rounds", "2", check=True).stdout)
    assert len(twice["nonsecure-random"]["rounds"]["requests_per_s"]) == 2, "a scenario named twice runs once a round"
    for bad in ("0", "-2", "101", "two"):
        res = cli("bench", "--scenario", "nonsecure-random", "--scale", "0.0005", "--rounds", bad)
        assert res.returncode == 2 and "--rounds" in res.stderr and "Traceback" not in res.stderr, (bad, res.stderr)


def test_absurd_sizes_are_refused_not_crashed_on(cli):
    for param, field in [("l1.size_kib=99999999999", "l1.size_kib"), ("memory.capacity_gib=99999999", "memory.capacity_gib"),
                         ("llc.ways=100000", "llc.ways"), ("workload.stride_bytes=3", "workload.stride_bytes")]:
        res = cli("run", "-p", param, "-p", "workload.pattern=stride", "-p", "workload.requests=100")
        assert res.returncode == 2 and field in res.stderr, (param, res.stderr)
    # The largest memory secmem accepts still costs only what the run touches.
    cli("run", "-p", "memory.capacity_gib=1024", "-p", "workload.requests=10000", "--out", "big", check=True)


def test_negative_counts_and_seeds_name_the_argument_instead_of_a_traceback(cli):
    for args, name in [
        (("crash", "--preset", "strict", "--points", -3), "--points"),
        (("crash", "--preset", "strict", "--points", 0), "--points"),
        (("crash", "--preset", "strict", "--points", 5, "--seed", -1), "--seed"),
        (("attack", "--preset", "horus", "--per-class", -1), "--per-class"),
        # No injection at all would pass vacuously ("every injection detected").
        (("attack", "--preset", "horus", "--per-class", 0), "--per-class"),
        (("vault-attack", "--per-class", 0), "--per-class"),
        (("attack", "--preset", "horus", "--clean-reads", -5), "--clean-reads"),
        (("vault-attack", "--per-class", -2), "--per-class"),
        (("drain", "--scheme", "horus-slm", "--from-workload", "--after", -1), "--after"),
        (("forkbench", "--lines-per-page", -4), "--lines-per-page"),
        (("trace", "gen", "--pattern", "random", "--seed", -7, "-o", "t.bin"), "--seed"),
    ]:
        res = cli(*args)
        assert res.returncode == 2, (args, res.returncode, res.stderr)
        assert f"{name} must be an integer >= " in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr, (args, res.stderr)


def test_a_warm_up_covering_the_whole_workload_is_an_error_not_an_empty_report(cli, tmp_path):
    res = cli("run", "-p", "workload.requests=1000", "-p", "run.warmup_requests=1000", "--out", "w")
    assert res.returncode == 2 and "run.warmup_requests" in res.stderr and "whole trace (1000 records)" in res.stderr, res.stderr
    assert not (tmp_path / "w" / "report.json").exists()
    # A trace file's length is known only at its end: the same check, after the run.
    cli("trace", "gen", "--pattern", "random", "--requests", 500, "--footprint-bytes", 1 << 20, "-o", "t.bin", check=True)
    res = cli("run", "--trace", "t.bin", "-p", "run.warmup_requests=500", "--out", "w")
    assert res.returncode == 2 and "whole trace (500 records)" in res.stderr, res.stderr
    cli("run", "--trace", "t.bin", "-p", "run.warmup_requests=499", "--out", "w", check=True)


def test_drain_after_more_records_than_the_trace_has_is_refused(cli):
    res = cli("drain", "--scheme", "horus-slm", "--from-workload", "--after", 5000, "-p", "workload.requests=1000")
    assert res.returncode == 2 and "past the end of the trace, which has 1000 records" in res.stderr, res.stderr
    cli("drain", "--scheme", "horus-slm", "--from-workload", "--after", 1000, "-p", "workload.requests=1000", check=True)


def test_output_cut_short_by_the_reader_exits_quietly(tmp_path):
    import subprocess

    from conftest import secmem_cmd

    # `head` closes the pipe after one line while secmem is still printing.
    p = subprocess.Popen(secmem_cmd() + ["config", "show", "horus"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()
    err = p.stderr.read().decode()
    p.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_an_output_path_that_cannot_be_a_directory_is_one_error_line_not_a_traceback(cli, tmp_path):
    (tmp_path / "t.bin").write_bytes(b"")
    for args in [("reproduce", "horus", "--quick", "--out", "t.bin"), ("reproduce", "horus", "--quick", "--out", "t.bin/sub"),
                 ("reproduce", "lelantus", "--quick", "--out", "/dev/null"),
                 ("run", "-p", "workload.requests=1000", "--out", "t.bin"),
                 ("run", "-p", "workload.requests=1000", "--out", "t.bin/sub"),
                 ("run", "-p", "workload.requests=1000", "-p", "run.functional=true", "--save-image", "t.bin/x.img", "--out", "o"),
                 ("trace", "gen", "--requests", 10, "-o", "t.bin/x"), ("trace", "gen", "--pattern", "forkbench", "-o", "t.bin/x"),
                 ("trace", "convert", "t.bin/x", "y"), ("trace", "info", "t.bin/x"), ("image", "verify", "t.bin/x"),
                 ("config", "validate", "t.bin/x"), ("crash", "--preset", "strict", "--out", "t.bin"),
                 ("forkbench", "--out", "t.bin/sub"), ("drain", "--scheme", "nonsecure", "--out", "t.bin")]:
        res = cli(*args)
        assert res.returncode == 2, (args, res.returncode, res.stderr)
        assert "Traceback" not in res.stderr and res.stderr.startswith("secmem: error: "), (args, res.stderr)
        path = next(a for a in args if str(a).startswith(("t.bin", "/dev/null")))
        assert path in res.stderr, (args, res.stderr)


def test_an_os_error_on_a_path_the_python_side_opens_is_one_line_naming_it(monkeypatch, capsys):
    from secmem import api, cli as secmem_cli

    def denied(**kw):
        raise PermissionError(13, "Permission denied", "out/report.json")

    monkeypatch.setattr(api, "run", denied)
    assert secmem_cli.main(["run"]) == 2
    assert capsys.readouterr().err == "secmem: error: out/report.json: Permission denied\n"


def test_an_empty_path_argument_is_refused_naming_it(cli, tmp_path):
    (tmp_path / "t.bin").write_bytes(b"")
    for args, name in [(("run", "--out", ""), "--out"), (("run", "--trace", ""), "--trace"), (("run", "--config", ""), "--config"),
                       (("run", "--save-image", ""), "--save-image"), (("reproduce", "horus", "--out", ""), "--out"),
                       (("trace", "gen", "-o", ""), "-o/--output"), (("trace", "convert", "t.bin", ""), "output"),
                       (("trace", "info", ""), "file"), (("image", "verify", ""), "file"), (("config", "validate", ""), "file"),
                       (("crash", "--trace", ""), "--trace"), (("drain", "--scheme", "nonsecure", "--trace", ""), "--trace")]:
        res = cli(*args)
        assert res.returncode == 2 and f"argument {name}: empty path" in res.stderr, (args, res.stderr)
    assert not (tmp_path / "report.json").exists()


def test_an_empty_path_given_to_the_api_is_refused_naming_it(tmp_path):
    import pytest
    import secmem

    with pytest.raises(secmem.SecmemError, match="out: empty path"):
        secmem.run(params={"workload.requests": 1000}, out="")


def test_a_bench_scale_that_is_not_positive_and_finite_is_refused_before_any_scenario_runs(cli):
    for scale in ("0", "-1", "nan", "inf", "-inf"):
        res = cli("bench", f"--scale={scale}")
        assert res.returncode == 2, (scale, res.stderr)
        assert res.stderr == f"secmem: error: --scale must be a positive number, got {scale}" + (
            " (it must be finite)\n" if scale == "inf" else "\n"), (scale, res.stderr)
    # 10^16 requests per scenario would run for years: a typo, refused.
    res = cli("bench", "--scale=1e9")
    assert res.returncode == 2 and res.stderr == "secmem: error: --scale must be at most 1000, got 1e+09\n", res.stderr


def test_an_instruction_gap_past_32_bits_is_refused_naming_it(cli):
    res = cli("trace", "gen", "--pattern", "random", "--requests", 3, "--inst-gap", 1 << 32, "-o", "t.bin")
    assert res.returncode == 2 and "--inst-gap must be an integer in 0..=4294967295, got 4294967296" in res.stderr, res.stderr


def test_drain_after_needs_a_trace_or_the_workload_and_takes_only_one_of_them(cli, tmp_path):
    res = cli("drain", "--scheme", "nonsecure", "--after", 5)
    assert res.returncode == 2 and "--after needs --trace or --from-workload" in res.stderr, res.stderr
    cli("trace", "gen", "--requests", 100, "--footprint-bytes", 1 << 20, "-o", "t.bin", check=True)
    res = cli("drain", "--scheme", "nonsecure", "--trace", "t.bin", "--from-workload")
    assert res.returncode == 2 and "--from-workload: not allowed with argument --trace" in res.stderr, res.stderr
    cli("drain", "--scheme", "nonsecure", "--trace", "t.bin", "--after", 50, check=True)


def test_trace_gen_refuses_options_the_chosen_pattern_does_not_use(cli, tmp_path):
    for args, refused in [
        (("--pattern", "random", "--requests", 3, "--with-data", "--page-size", "2m", "--lines-per-page", 7, "--ops", 5),
         ("--with-data", "--page-size", "--lines-per-page", "--ops")),
        (("--pattern", "random", "--page-size", "4k"), ("--page-size",)),  # even at its default value
        (("--pattern", "random", "--zipf-theta", 0.5), ("--zipf-theta",)),
        (("--pattern", "zipf", "--stride-bytes", 128), ("--stride-bytes",)),
        (("--pattern", "forkbench", "--ops", 7), ("--ops",)),
        (("--pattern", "forkbench", "--seed", 2), ("--seed",)),
        (("--pattern", "redis", "--lines-per-page", 7), ("--lines-per-page",)),
        (("--pattern", "writeamp", "--read-ratio", 0.5, "--inst-gap", 3), ("--read-ratio", "--inst-gap")),
    ]:
        res = cli("trace", "gen", *args, "-o", "f.bin")
        assert res.returncode == 2 and "do not apply" in res.stderr, (args, res.stderr)
        for opt in refused:
            assert opt in res.stderr, (args, opt, res.stderr)
        assert not (tmp_path / "f.bin").exists()
    res = cli("trace", "gen", "--pattern", "nosuch", "-o", "f.bin")
    assert res.returncode == 2 and "unknown pattern 'nosuch'" in res.stderr and "forkbench" in res.stderr
    # What does apply is still taken.
    cli("trace", "gen", "--pattern", "Stride", "--stride-bytes", 128, "--requests", 10, "--seed", 2, "-o", "s.bin", check=True)
    cli("trace", "gen", "--pattern", "redis", "--ops", 10, "--seed", 2, "--with-data", "--page-size", "4k",
        "--footprint-bytes", 1 << 16, "-o", "r.bin", check=True)
    cli("trace", "gen", "--pattern", "noncopy", "--lines-per-page", 2, "--footprint-bytes", 1 << 16, "-o", "n.bin", check=True)


def test_forkbench_takes_its_design_from_scheme_only_and_only_the_cow_schemes(cli):
    for p in ("run.design=baseline", 'run={design="baseline"}'):
        res = cli("forkbench", "--scheme", "lelantus", "-p", p)
        assert res.returncode == 2 and "run.design" in res.stderr and "'lelantus' (--scheme)" in res.stderr, (p, res.stderr)
    res = cli("forkbench", "--scheme", "horus-slm")
    assert res.returncode == 2 and "'horus-slm'" in res.stderr and "baseline, lelantus, lelantus-cow, silent-shredder" in res.stderr
    res = cli("forkbench", "--seed", 3)
    assert res.returncode == 2 and "--seed has no effect" in res.stderr and "run.seed" in res.stderr
    help_text = cli("forkbench", "--help", check=True).stdout
    # (argparse may wrap the line at a hyphen: compare without white space)
    assert "baseline(kernelCoW),lelantus,lelantus-coworsilent-shredder" in "".join(help_text.split()), help_text
    # The same design given both ways is no conflict.
    out = json.loads(cli("forkbench", "--scheme", "lelantus", "-p", 'run.design="lelantus"', "--footprint-bytes", 1 << 20,
                         check=True).stdout)
    assert out["cycles"] > 0


def test_image_verify_refuses_a_config_without_security(cli, tmp_path):
    cli("run", "--preset", "horus", "-p", "run.functional=true", "-p", "workload.requests=2000",
        "-p", "workload.footprint_bytes=1048576", "--save-image", "nvm.img", "--out", "f", check=True)
    res = cli("image", "verify", "nvm.img", "--preset", "horus", "-p", "security.enabled=false")
    assert res.returncode == 2 and "security.enabled" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert json.loads(cli("image", "verify", "nvm.img", "--preset", "horus", check=True).stdout)["ok"]


def test_json_commands_save_their_result_beside_the_resolved_config_they_ran_with(cli, tmp_path):
    # crash, attack, drain, vault-attack and forkbench print JSON; --out DIR keeps it with the
    # config, as `run` keeps report.json with config.toml.
    res = cli("crash", "--preset", "strict", "--points", 3, "-p", "workload.requests=3000", "-p", "llc.size_kib=1024",
              "-p", "l2.size_kib=256", "--out", "c", check=True)
    saved = json.loads((tmp_path / "c" / "result.json").read_text())
    assert saved["result"] == json.loads(res.stdout)
    assert saved["command"] == "crash" and saved["argv"][:2] == ["secmem", "crash"] and saved["version"]
    # The campaign's own setting (functional mode) is in the saved config, and the user's.
    assert saved["config"]["run"]["functional"] is True and saved["config"]["llc"]["size_kib"] == 1024
    toml = (tmp_path / "c" / "config.toml").read_text()
    assert "functional = true" in toml and "size_kib = 1024" in toml
    res = cli("forkbench", "--scheme", "baseline", "--footprint-bytes", 1 << 20, "--out", "f", check=True)
    saved = json.loads((tmp_path / "f" / "result.json").read_text())
    assert saved["result"] == json.loads(res.stdout) and saved["config"]["run"]["design"] == "baseline"
    # Without --out nothing is written.
    cli("forkbench", "--footprint-bytes", 1 << 20, check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c", "f"]


def test_forkbench_refuses_run_fields_it_would_ignore_or_that_its_trace_refuses(cli):
    # Found by fuzzing: each printed the whole workload's counts (memory level: other counts)
    # with exit 0, while `run --trace` of the same workload stops early or refuses the field.
    for field in ("run.trace_level=memory", "run.max_requests=10", "run.warmup_requests=100"):
        res = cli("forkbench", "--scheme", "lelantus", "--footprint-bytes", "1048576", "-p", field)
        assert res.returncode == 2 and f"config field '{field.split('=')[0]}'" in res.stderr, (field, res.stderr)
        assert "Traceback" not in res.stderr


def test_a_sweep_over_preset_names_is_refused_instead_of_relabelling_one_machine(cli, tmp_path):
    # Found by fuzzing: `--vary preset=horus,bmf` (and `-p preset=bmf`) ran the default
    # machine under each name, identical rows labelled with different papers.
    res = cli("sweep", "-p", "workload.requests=100", "--vary", "preset=horus,bmf", "--out", tmp_path / "s")
    assert res.returncode == 2 and "config field 'preset'" in res.stderr and "--preset" in res.stderr
    res = cli("run", "--preset", "bmf", "-p", "preset=bmf", "-p", "workload.requests=100", "--out", tmp_path / "r")
    assert res.returncode == 0, res.stderr


def test_designs_lists_every_registered_design_and_the_design_families_commands(cli):
    import secmem

    out = cli("designs", check=True).stdout
    names = [d["name"] for d in secmem.designs()]
    assert {"baseline", "horus-slm", "horus-dlm", "lelantus", "lelantus-cow", "silent-shredder"} <= set(names)
    for name in names:
        assert any(l.startswith(name + " ") for l in out.splitlines()), f"{name} missing from:\n{out}"
    assert "secmem horus drain" in out and "secmem lelantus forkbench" in out
    # The drain schemes the CLI offers are the ones the registered designs declare.
    assert secmem.DRAIN_SCHEMES == tuple(s["name"] for d in secmem.designs() for s in d["drain_schemes"])


def test_a_design_familys_verb_runs_what_the_flat_verb_runs(cli, tmp_path):
    flat = cli("drain", "--scheme", "base-eu", "-p", "llc.size_kib=1024", "-p", "l2.size_kib=256", check=True).stdout
    family = cli("horus", "drain", "--scheme", "base-eu", "-p", "llc.size_kib=1024", "-p", "l2.size_kib=256", "--out", tmp_path / "d", check=True).stdout
    assert json.loads(flat) == json.loads(family)
    saved = json.loads((tmp_path / "d" / "result.json").read_text())
    assert saved["command"] == "drain"
    res = cli("horus", "forkbench")
    assert res.returncode == 2 and "invalid choice" in res.stderr
