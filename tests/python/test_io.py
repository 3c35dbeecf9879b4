"""`secmem io`: storage I/O on the NVMe SSD beside the secure memory."""

import json


def test_io_reports_iops_latency_the_drive_and_the_dma_traffic(cli, tmp_path):
    out = tmp_path / "io"
    res = cli(
        "io", "--preset", "horus", "-p", "io.pattern=rand-rw", "-p", "io.ios=4000", "-p", "io.queue_depth=4",
        "-p", "io.space_gib=1", "--out", out, check=True,
    )
    r = json.loads(res.stdout)
    assert r["io"]["reads"] + r["io"]["writes"] == 4000 and r["io"]["reads"] > 0 and r["io"]["writes"] > 0
    assert r["io"]["iops"] > 0 and r["io"]["latency_us"]["p99"] >= r["io"]["latency_us"]["p50"] > 10
    assert r["ssd"]["host_page_writes"] == r["io"]["writes"]
    # Every 4 KB I/O moves 64 lines through the memory controller.
    assert r["memory"]["dma_lines"] == 4000 * 64 and r["memory"]["writes"] > 0
    saved = json.loads((out / "result.json").read_text())
    assert saved["result"] == r and saved["config"]["io"]["pattern"] == "rand-rw"
    assert "[ssd]" in (out / "config.toml").read_text()


def test_bad_io_settings_are_errors_naming_the_field(cli):
    for param, field in [
        ("io.queue_depth=0", "io.queue_depth"),
        ("io.block_bytes=1000", "io.block_bytes"),
        ("io.space_gib=1024", "io.space_gib"),
        ("ssd.page_kib=3", "ssd.page_kib"),
        ("io.pattern=sideways", "io.pattern"),
    ]:
        res = cli("io", "--preset", "horus", "-p", param, "-p", "io.ios=10")
        assert res.returncode != 0 and field in res.stderr, (param, res.stderr)
        assert "Traceback" not in res.stderr


def test_io_calibrate_prints_a_config_that_enc_runs_with(cli, tmp_path):
    res = cli("io-calibrate", "--sectors", "2000", check=True)
    assert "[io]" in res.stdout and "aes_xts_ns_per_sector = " in res.stdout and "hmac_sha256_ns_per_sector = " in res.stdout
    host = tmp_path / "host.toml"
    host.write_text(res.stdout)
    common = ["-p", "io.ios=2000", "-p", "io.space_gib=1", "-p", "io.pattern=rand-read"]
    enc = json.loads(cli("io", "--preset", "horus", "--config", host, "-p", "io.stack=enc", *common, check=True).stdout)
    plain = json.loads(cli("io", "--preset", "horus", "--config", host, *common, check=True).stdout)
    assert enc["io"]["stack"] == "enc" and enc["io"]["crypto_cpu_us"] > 0 and plain["io"]["crypto_cpu_us"] == 0
    assert enc["io"]["runtime_us"] > plain["io"]["runtime_us"]


def test_enc_int_reports_dm_integritys_journal_and_tag_traffic(cli):
    common = ["-p", "io.ios=20000", "-p", "io.space_gib=1", "-p", "io.pattern=rand-write", "-p", "io.queue_depth=4"]
    r = json.loads(cli("io", "--preset", "dshield", "-p", "io.stack=enc-int", *common, check=True).stdout)
    i = r["integrity"]
    assert i["journal_commits"] > 0 and i["writer_rounds"] > 0 and i["journal_sectors_written"] > i["writeback_sectors"] > 0
    # The drive took the journal, the data and the tags: more than twice the pages written.
    assert r["ssd"]["host_page_writes"] > 2 * r["io"]["writes"]
    assert 0 < r["ssd"]["die_utilisation"] <= 1


def test_reproduce_dshield_quick_compares_figs_3_13_14_16_and_17_with_the_paper(cli, tmp_path):
    out = tmp_path / "ds"
    cli("reproduce", "dshield", "--quick", "--out", out, check=True)
    rows = json.loads((out / "reproduce.json").read_text())
    means = {r["metric"]: r for r in rows if "mean" in r["metric"]}
    enc = means["enc runtime / insecure, mean of the six patterns"]
    enc_int = means["enc-int runtime / insecure, mean of the six patterns"]
    assert enc["paper"] == 2.4 and enc_int["paper"] == 16.1
    assert 1.0 <= enc["ours"] < enc_int["ours"]
    assert len([r for r in rows if r["figure"] == "fig3"]) == 14
    assert (out / "fig3.png").exists() and "Where and why we differ" in (out / "report.md").read_text()
    # Fig. 13: the basic D-Shield beside the paper's random-pattern overheads.
    fig13 = {r["metric"]: r for r in rows if r["figure"] == "fig13"}
    assert fig13["dshield runtime / insecure, Rand-W"]["paper"] == 1.49
    assert all(fig13[f"dshield runtime / insecure, {p}"]["ours"] > 1.0 for p in ("Seq-R", "Rand-R", "Rand-W"))
    assert 0.0 <= fig13["dshield CMAC cache miss rate, random patterns"]["ours"] <= 1.0
    assert (out / "fig13.png").exists() and "D-Shield on random writes" in (out / "report.md").read_text()
    # D-Shield-Hyb leaves read data in the storage domain: fewer cryptographic operations.
    assert fig13["dshield crypto operations / dshield-hyb, random patterns"]["paper"] == 2.3
    assert fig13["dshield crypto operations / dshield-hyb, random patterns"]["ours"] > 1.2
    # Fig. 17: the metadata's share of the drive's I/Os; Fig. 16b: a larger cache helps Rand-RW.
    fig17 = {r["metric"]: r for r in rows if r["figure"] == "fig17"}
    assert fig17["dshield metadata I/Os / all disk I/Os, random patterns"]["paper"] == 0.39
    assert 0 < fig17["dshield metadata I/Os / all disk I/Os, sequential patterns"]["ours"] < fig17["dshield metadata I/Os / all disk I/Os, random patterns"]["ours"] < 1
    hit = [r["ours"] for r in rows if r["figure"] == "fig16" and "hit ratio" in r["metric"]]
    runtime = [r["ours"] for r in rows if r["figure"] == "fig16" and "runtime" in r["metric"]]
    assert len(hit) == 4 and hit == sorted(hit) and runtime[-1] < runtime[0]
    # Fig. 14: the recorded YCSB-on-SQLite workloads, every stack, beside the paper's means.
    fig14 = {r["metric"]: r for r in rows if r["figure"] == "fig14"}
    assert fig14["dshield throughput / insecure, mean of the key-value workloads"]["paper"] == 0.89
    assert len(fig14) == 5 * 4 and all(0 < r["ours"] < 5 for r in fig14.values())
    # Read-only YCSB: D-Shield's CMAC reads and checks cost throughput, never add it.
    assert fig14["dshield throughput / insecure, YCSB-Ro on SQLite"]["ours"] < 1.0
    assert (out / "fig14.png").exists() and "Key-value workloads" in (out / "report.md").read_text()
    # Section VIII's 3.14% of the drive for metadata: the CMAC blocks are 1/32 of it.
    storage = {r["metric"]: r for r in rows if r["figure"] == "storage"}
    assert storage["storage metadata / drive"]["paper"] == 0.0314
    assert abs(storage["CMAC blocks / drive"]["ours"] - 1 / 32) < 0.002
    assert 0 < storage["tree nodes / drive"]["ours"] < 0.0006
    # The crypto engine the DIE shares with the memory side: a serial one (the preset's) costs
    # D-Shield more than a pipelined one, which costs no less than an unlimited one.
    eng = {r["metric"]: r["ours"] for r in rows if r["figure"] == "engine"}
    serial, pipe, unl = (eng[f"dshield runtime / insecure, Rand-R, {m} engine"] for m in ("serial", "pipelined", "unlimited"))
    assert serial > pipe >= unl * 0.99, (serial, pipe, unl)
    assert 0 < eng["insecure crypto engine utilisation, Rand-R, serial engine"] < eng["dshield crypto engine utilisation, Rand-R, serial engine"] <= 1
    assert "One crypto engine for memory and storage" in (out / "report.md").read_text()


def test_io_capture_records_sqlites_preads_and_pwrites_and_io_replays_them(cli, tmp_path):
    log = tmp_path / "sqlite.iolog"
    sql = ("create table t(k integer primary key, v blob); "
           "with recursive n(i) as (select 1 union all select i + 1 from n where i < 3000) "
           "insert into t select i, randomblob(300) from n; select sum(length(v)) from t where k % 5 = 0;")
    res = cli("io-capture", "--out", log, "--", "sqlite3", tmp_path / "bank.db", sql, check=True)
    counts = json.loads(res.stdout.strip().splitlines()[-1])
    assert counts["writes"] > 10 and counts["files"] >= 2, counts  # the database and its journal
    assert log.read_text().startswith("fio version 3 iolog\n")
    r = json.loads(cli("io", "--preset", "dshield", "-p", f'io.trace="{log}"', "-p", "io.space_gib=1", check=True).stdout)
    assert r["io"]["reads"] + r["io"]["writes"] == counts["reads"] + counts["writes"]
    assert r["io"]["pattern"] == "fio-iolog-v3"


def test_io_capture_without_a_command_is_an_error(cli, tmp_path):
    res = cli("io-capture", "--out", tmp_path / "x.iolog")
    assert res.returncode != 0 and "command" in res.stderr and "Traceback" not in res.stderr


def test_run_drives_memory_and_storage_from_one_trace(cli, tmp_path):
    t = tmp_path / "mixed.txt"
    t.write_text("# secmem-trace v2 os\nALLOC 0 0x10000 1048576 4k\nST 0 0x10000 8 10\n"
                 "IOW 0 0x0 4096 100\nIOR 0 0x0 4096 100\nLD 0 0x10000 8 10\n")
    out = tmp_path / "run"
    cli("run", "--preset", "dshield", "--trace", t, "--out", out, check=True)
    r = json.loads((out / "report.json").read_text())
    assert r["io"]["reads"] == 1 and r["io"]["writes"] == 1 and r["io"]["dma_lines"] == 128
    assert r["io"]["blocked_us"] > 9
    bad = tmp_path / "bad.txt"
    bad.write_text("# secmem-trace v2 os\nIOR 0 0x10 4096 0\n")
    res = cli("run", "--preset", "dshield", "--trace", bad, "--out", tmp_path / "bad")
    assert res.returncode != 0 and "512 B blocks" in res.stderr and "Traceback" not in res.stderr


def test_io_attack_detects_every_class_on_the_drive_and_exits_1_when_one_is_missed(cli, tmp_path):
    out = tmp_path / "atk"
    res = cli("io-attack", "--preset", "dshield", "-p", "io.stack=dshield", "--per-class", "30", "--out", out, check=True)
    r = json.loads(res.stdout)
    assert r["all_detected"] and r["false_alarms"] == 0 and r["clean_reads"] > 1000
    assert {"tamper-data", "replay-path", "splice-cmac", "other-machine", "tamper-tree-level-1"} <= set(r["classes"])
    assert all(c["detected"] == c["injected"] == 30 and c["misattributed"] == 0 for c in r["classes"].values())
    assert json.loads((out / "result.json").read_text())["result"] == r
    # Without D-Shield there is nothing to attack: an error naming the field.
    res = cli("io-attack", "--preset", "dshield", "-p", "io.stack=enc")
    assert res.returncode != 0 and "io.stack" in res.stderr and "Traceback" not in res.stderr


def test_io_crash_recovers_with_the_eadr_drain_and_never_returns_wrong_data_without_it(cli):
    res = cli("io-crash", "--preset", "dshield", "-p", "io.stack=dshield-pro", "--ios", "1500", "--points", "20", check=True)
    r = json.loads(res.stdout)
    assert r["points"] == r["recovered"] == 20 and r["mismatches"] == 0
    assert r["no_drain_blocks_lost"] > 0


def test_functional_io_decrypts_and_verifies_every_block_it_reads(cli):
    common = ["io", "--preset", "dshield", "-p", "io.stack=dshield", "-p", "io.pattern=rand-rw", "-p", "io.ios=3000", "-p", "io.space_gib=1"]
    f = json.loads(cli(*common, "-p", "run.functional=true", check=True).stdout)
    c = json.loads(cli(*common, check=True).stdout)
    assert f["dshield"]["functional"]["blocks_verified"] > 0
    assert f["io"]["runtime_us"] == c["io"]["runtime_us"] and f["dshield"]["metadata_reads"] == c["dshield"]["metadata_reads"]
