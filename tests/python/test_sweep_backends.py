"""Sweeps beyond local threads, and durable: do Dask and Ray give the local backend's results
table, does a rerun skip the points already finished (never running one twice), and does a
killed sweep or a killed worker lose no finished point?"""

import json
import os
import signal
import subprocess
import time

import pandas as pd
import pytest
import secmem

from conftest import secmem_cmd

GRID = {"tree.update": ["lazy", "eager"], "llc.size_kib": [8192, 16384]}
PARAMS = ["workload.requests=20000", "workload.footprint_bytes=4194304"]


def results(df):
    """What a sweep found: the varied values and every statistic, by point."""
    cols = [c for c in df.columns if c.startswith("sweep.") or c.startswith("stats.")]
    return df[cols].sort_values("sweep.point").reset_index(drop=True)


@pytest.mark.parametrize("backend", ["dask", "ray"])
def test_a_cluster_backend_gives_the_local_results_table(backend, tmp_path):
    pytest.importorskip("dask.distributed" if backend == "dask" else "ray")
    local = secmem.sweep(GRID, preset="horus", params=PARAMS, out=str(tmp_path / "local"))
    remote = secmem.sweep(GRID, preset="horus", params=PARAMS, out=str(tmp_path / backend), backend=backend, workers=2)
    pd.testing.assert_frame_equal(results(local), results(remote))
    on_disk = pd.read_csv(tmp_path / backend / "sweep.csv")
    assert list(on_disk["stats.cycles"]) == list(local["stats.cycles"])
    assert (tmp_path / backend / "sweep.parquet").exists()
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / backend / "sweep.parquet")[["stats.cycles"]], local[["stats.cycles"]])


def test_a_trace_reaches_cluster_workers_by_content(tmp_path):
    pytest.importorskip("dask.distributed")
    trace = tmp_path / "t.bin"
    secmem.trace_gen(str(trace), requests=5000, footprint_bytes=1 << 20)
    local = secmem.sweep("tree.update", ["lazy", "eager"], preset="horus", trace=str(trace), params=["run.progress=false"])
    remote = secmem.sweep("tree.update", ["lazy", "eager"], preset="horus", trace=str(trace), backend="dask", workers=2)
    pd.testing.assert_frame_equal(results(local), results(remote))


def test_a_rerun_skips_finished_points_and_a_changed_base_runs_again(tmp_path):
    out = str(tmp_path / "s")
    secmem.sweep(GRID, preset="horus", params=PARAMS, out=out)
    stamps = {d: os.stat(os.path.join(out, "points", d, "report.json")).st_mtime_ns for d in os.listdir(os.path.join(out, "points"))}
    again = secmem.sweep(GRID, preset="horus", params=PARAMS, out=out, jobs=2)  # jobs changes no result
    assert again.attrs["skipped_points"] == 4
    assert stamps == {d: os.stat(os.path.join(out, "points", d, "report.json")).st_mtime_ns for d in stamps}
    changed = secmem.sweep(GRID, preset="horus", params=PARAMS + ["workload.seed=2"], out=out)
    assert changed.attrs["skipped_points"] == 0


def test_a_failing_point_is_recorded_and_the_others_finish(tmp_path, cli):
    # Functional mode with a planted pad-reuse check is not needed: an OS-level setting the
    # engine refuses only at run time does. run.flush_at_end is refused for OS-level traces.
    trace = tmp_path / "os.txt"
    trace.write_text("# secmem-trace v2 os\nALLOC 0 0x10000000000 16384 4k\nST 0 0x10000000040 64 10\nLD 0 0x10000000040 64 10\n")
    res = cli("sweep", "--trace", trace, "--vary", "run.flush_at_end=false,true", "--out", "f")
    assert res.returncode == 1, res.stderr
    assert "point 1 (run.flush_at_end=true)" in res.stderr and "1 of 2 points failed" in res.stderr
    assert (tmp_path / "f" / "points" / "000" / "point.json").exists()
    assert "run.flush_at_end" in (tmp_path / "f" / "points" / "001" / "error.txt").read_text()
    table = pd.read_csv(tmp_path / "f" / "sweep.csv")
    assert list(table["sweep.point"]) == [0, 1] and pd.isna(table["sweep.error"][0]) and not pd.isna(table["sweep.error"][1])


def _finished(out):
    pts = os.path.join(out, "points")
    if not os.path.isdir(pts):
        return {}
    return {d: os.stat(os.path.join(pts, d, "report.json")).st_mtime_ns for d in os.listdir(pts) if os.path.exists(os.path.join(pts, d, "point.json"))}


def _wait_for(pred, timeout_s=120):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.1)
    pytest.fail("timed out")


LONG = ["--preset", "horus", "-p", "workload.requests=1500000", "--vary", "run.seed=1,2,3,4,5,6"]


def test_a_sweep_killed_midway_and_rerun_runs_no_point_twice(tmp_path):
    out = str(tmp_path / "k")
    p = subprocess.Popen(secmem_cmd() + ["sweep", *LONG, "--jobs", "2", "--out", out], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: len(_finished(out)) >= 2 or p.poll() is not None)
    p.kill()
    p.wait()
    before = _finished(out)
    assert 2 <= len(before) < 6
    res = subprocess.run(secmem_cmd() + ["sweep", *LONG, "--jobs", "2", "--out", out], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert f"({len(before)} finished earlier, not run again)" in res.stdout
    after = _finished(out)
    assert len(after) == 6 and all(after[d] == t for d, t in before.items())


def test_a_killed_dask_worker_loses_no_finished_point(tmp_path):
    pytest.importorskip("dask.distributed")
    out = str(tmp_path / "w")
    p = subprocess.Popen(secmem_cmd() + ["sweep", *LONG, "--backend", "dask", "--workers", "2", "--out", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: len(_finished(out)) >= 1 or p.poll() is not None)
    before = _finished(out)
    workers = [int(line.split()[0]) for line in subprocess.run(["ps", "-ww", "-eo", "pid,ppid,args"], capture_output=True, text=True).stdout.splitlines()[1:]
               if line.split()[1] == str(p.pid) and "spawn_main" in line]
    assert workers, "no Dask worker process found"
    os.kill(workers[0], signal.SIGKILL)
    stdout, stderr = p.communicate(timeout=300)
    assert p.returncode == 0, stderr
    after = _finished(out)
    assert len(after) == 6 and all(after[d] == t for d, t in before.items())
