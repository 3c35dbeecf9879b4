"""Ctrl-C: does an interrupt stop the engine within a second or two, exit 130, and leave either
nothing or a report marked partial (never a complete-looking one)?"""

import json
import os
import signal
import subprocess
import threading
import time

import pytest
import secmem

from conftest import secmem_cmd

LONG = ["-p", "workload.requests=1000000000"]  # minutes of simulation


def interrupt_after(args, cwd, wait_s=3.0):
    """Starts `secmem ARGS`, sends SIGINT after `wait_s`; returns (exit code, seconds from
    the signal to the exit, stderr)."""
    p = subprocess.Popen(secmem_cmd() + [str(a) for a in args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(wait_s)
    assert p.poll() is None, "the command ended before the interrupt: " + p.communicate()[1]
    p.send_signal(signal.SIGINT)
    sent = time.monotonic()
    try:
        _, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        pytest.fail("the command ran on for 20 s after SIGINT")
    return p.returncode, time.monotonic() - sent, err


def test_an_interrupted_run_exits_130_within_2_s_beside_a_report_marked_partial(tmp_path):
    code, after_s, err = interrupt_after(["run", "--preset", "horus", *LONG, "--out", "x"], tmp_path)
    assert code == 130, err
    assert after_s < 2.0, f"exited {after_s:.1f} s after SIGINT"
    rep = json.loads((tmp_path / "x" / "report.json").read_text())
    assert rep["meta"]["interrupted"] is True
    assert 0 < rep["meta"]["records"] < 1_000_000_000
    assert "partial" in err


def test_an_interrupted_campaign_exits_130_and_leaves_no_folder(tmp_path):
    args = ["crash", "--preset", "horus", "-p", "workload.requests=5000000", "--points", "50", "--out", "c"]
    code, after_s, err = interrupt_after(args, tmp_path)
    assert code == 130, err
    assert after_s < 2.0, f"exited {after_s:.1f} s after SIGINT"
    assert not (tmp_path / "c").exists()


def test_an_interrupted_sweep_stops_at_the_running_point(tmp_path):
    args = ["sweep", "--preset", "horus", *LONG, "--vary", "llc.size_kib=4096,8192", "--out", "s"]
    code, after_s, err = interrupt_after(args, tmp_path)
    assert code == 130, err
    assert after_s < 2.0, f"exited {after_s:.1f} s after SIGINT"


def test_the_api_raises_keyboard_interrupt_or_with_partial_returns_the_marked_report():
    def sigint_soon():
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGINT)

    params = ["workload.requests=1000000000", "run.progress=false"]
    threading.Thread(target=sigint_soon, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        secmem.run(preset="horus", params=params)
    threading.Thread(target=sigint_soon, daemon=True).start()
    rep = secmem.run(preset="horus", params=params, partial=True)
    assert rep.meta["interrupted"] is True
    # Python's own handler is back: the next run is whole.
    rep = secmem.run(preset="horus", params=["workload.requests=1000", "run.progress=false"])
    assert "interrupted" not in rep.meta and rep.meta["records"] == 1000


def test_an_interrupted_reproduction_exits_130_and_leaves_no_folder_it_made(tmp_path):
    code, after_s, err = interrupt_after(["reproduce", "dshield", "--quick", "--out", "r"], tmp_path, wait_s=2.0)
    assert code == 130, err
    assert after_s < 2.0, f"exited {after_s:.1f} s after SIGINT"
    assert not (tmp_path / "r").exists()
