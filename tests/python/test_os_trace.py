"""OS-level (v2) traces from the command line: a CoW workload written with `trace gen`
summarised by `trace info`, converted both ways, and replayed by `secmem run` with the counts
of the direct `forkbench` run; bad records are named."""

import json

SMALL = ["-p", "memory.capacity_gib=1", "-p", "llc.size_kib=256", "-p", "l2.size_kib=64", "-p", "l1.size_kib=16"]


def test_forkbench_written_as_a_trace_replays_with_the_direct_counts(cli, tmp_path):
    footprint = 1 << 20
    cli("trace", "gen", "--pattern", "forkbench", "--page-size", "4k", "--lines-per-page", 8,
        "--footprint-bytes", footprint, "-o", "fb.bin", check=True)
    info = json.loads(cli("trace", "info", "fb.bin", check=True).stdout)
    os_ = info["os"]
    lines = footprint // 64
    assert os_["stores"] == lines + (footprint // 4096) * 8
    assert (os_["allocs"], os_["forks"], os_["wbnoinvds"], os_["roi_markers"], os_["processes"]) == (1, 1, 1, 1, 2)
    assert os_["alloc_bytes_4k"] == footprint and info["records"] == os_["stores"] + 4

    cli("trace", "convert", "fb.bin", "fb.txt", "--to", "text", check=True)
    text = (tmp_path / "fb.txt").read_text()
    assert text.startswith("# secmem-trace v2 os\nALLOC 0 0x10000000000 1048576 4k\nST 0 0x10000000000 64 10\n")
    assert "\nFORK 0 1\nROI\n" in text
    cli("trace", "convert", "fb.txt", "fb2.bin", check=True)
    assert (tmp_path / "fb.bin").read_bytes() == (tmp_path / "fb2.bin").read_bytes()

    for scheme in ("baseline", "lelantus"):
        direct = json.loads(cli("forkbench", "--scheme", scheme, "--page-size", "4k", "--lines-per-page", 8,
                                "--footprint-bytes", footprint, "--stats", *SMALL, check=True).stdout)
        res = cli("run", "--preset", "lelantus", "--trace", "fb.txt", "-p", f'run.design="{scheme}"', *SMALL,
                  "--json", "--out", f"r-{scheme}", check=True)
        rep = json.loads(res.stdout)
        assert rep["stats"] == direct["stats"], scheme
        assert rep["stats"]["cycles"] == direct["cycles"]
        assert rep["stats"]["memory"]["writes"]["total"] == direct["memory_writes"]
        assert rep["stats"]["memory"]["reads"]["total"] == direct["memory_reads"]
        assert rep["os"]["cow_faults"] == direct["os"]["cow_faults"] == footprint // 4096
        assert rep["os"]["write_amplification"] == direct["write_amplification"]


def test_summary_of_an_os_trace_run_prints_the_os_counters(cli, tmp_path):
    cli("trace", "gen", "--pattern", "redis", "--footprint-bytes", 1 << 18, "--ops", 500, "-o", "r.bin", check=True)
    res = cli("run", "--preset", "lelantus", "--trace", "r.bin", *SMALL, "--out", "o", check=True)
    assert "os: cow faults" in res.stdout
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert rep["os"]["roi_record"] is not None and rep["os"]["logical_line_writes"] > 0


def test_bad_os_records_exit_2_naming_the_record_or_line(cli, tmp_path):
    (tmp_path / "unmapped.txt").write_text("# secmem-trace v2 os\nALLOC 0 0x10000000 4096 4k\nLD 0 0x20000000 64 0\n")
    res = cli("run", "--preset", "lelantus", "--trace", "unmapped.txt", *SMALL)
    assert res.returncode == 2
    assert "unmapped.txt: record 1: LD 0 0x20000000 64 0: pid 0: virtual address 0x20000000 is not mapped" in res.stderr
    (tmp_path / "pid.txt").write_text("# secmem-trace v2 os\nALLOC 7 0x10000000 4096 4k\n")
    res = cli("run", "--preset", "lelantus", "--trace", "pid.txt", *SMALL)
    assert res.returncode == 2 and "record 0: ALLOC 7" in res.stderr and "unknown pid 7" in res.stderr
    (tmp_path / "page.txt").write_text("# secmem-trace v2 os\nALLOC 0 0x10000000 4096 8k\n")
    res = cli("trace", "info", "page.txt")
    assert res.returncode == 2 and "page.txt:2: bad page size '8k' (expected 4k or 2m)" in res.stderr
    res = cli("trace", "gen", "--pattern", "forkbench", "--page-size", "3k", "-o", "x.bin")
    assert res.returncode == 2 and "3k" in res.stderr


def test_trace_gen_refuses_synthetic_options_for_a_cow_workload(cli, tmp_path):
    res = cli("trace", "gen", "--pattern", "forkbench", "--requests", "5", "-o", tmp_path / "x.bin")
    assert res.returncode == 2 and "--requests" in res.stderr
