"""ESD: a quick reproduction, beside the paper's Figs. 1, 11-19."""

import json


def test_reproduce_esd_quick_sets_the_write_reduction_speedups_and_metadata_beside_the_paper(cli, tmp_path):
    out = tmp_path / "esd"
    cli("reproduce", "esd", "--quick", "--out", out, check=True)
    rows = {r["metric"]: r for r in json.loads((out / "reproduce.json").read_text())}
    assert rows["write reduction, ESD"]["paper"] == 47.8
    # Full deduplication finds every duplicate; ESD finds at most as many.
    dup = rows["duplicate lines among write-backs, mean"]["ours"]
    esd = rows["write reduction, ESD"]["ours"]
    assert 0 < esd <= dup + 1e-9
    # SHA-1 on every write's path: ESD's writes are faster than Dedup_SHA1's on every program.
    assert rows["write speedup, ESD over Dedup_SHA1, mean"]["ours"] > 1.0
    assert rows["ESD write latency in fingerprinting"]["ours"] == 0.0
    assert rows["Dedup_SHA1 write latency in fingerprinting"]["ours"] > 50.0
    # Metadata: the AMT alone against the AMT plus a full fingerprint store.
    assert rows["NVM metadata, ESD"]["ours"] < rows["NVM metadata, DeWrite"]["ours"] < rows["NVM metadata, Dedup_SHA1"]["ours"]
    for name in ("fig1-11.png", "fig12-14.png", "fig15.png", "fig17-18.png"):
        assert (out / name).exists(), name
    report = (out / "report.md").read_text()
    assert "Where and why we differ" in report and "SPEC CPU 2017" in report


def test_a_store_without_bytes_under_esd_names_the_record_and_the_commands_that_give_data(cli):
    r = cli("run", "--preset", "esd", "-p", "run.design=esd", "-p", "workload.requests=1000")
    assert r.returncode != 0
    assert "carries none" in r.stderr and "trace capture --data" in r.stderr and "workload.contents" in r.stderr
