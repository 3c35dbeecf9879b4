"""Does scripts/perf/pair.py, the paired-timing script docs/performance.md tells every speed
change to use, pair the two commands in turn and report NEW over OLD pair by pair?"""

import os
import re
import subprocess
import sys

from conftest import REPO

PAIR = os.path.join(REPO, "scripts", "perf", "pair.py")


def pair(*args):
    return subprocess.run([sys.executable, PAIR, *args], capture_output=True, text=True, timeout=120)


def ratios(stdout, figure):
    line = next(l for l in stdout.splitlines() if l.startswith(f"new/old {figure}"))
    return [float(x) for x in line.split("pairs:")[1].split()]


def test_a_slower_new_command_reads_above_one_in_every_pair_and_the_runs_alternate(tmp_path):
    log = tmp_path / "order"
    old = f"{sys.executable} -c \"open({str(log)!r}, 'a').write('o')\""
    new = [sys.executable, "-c", f"import time; open({str(log)!r}, 'a').write('n'); time.sleep(0.3)"]
    res = pair("-n", "3", "--warmup", "1", old, "--", *new)
    assert res.returncode == 0, res.stderr
    # One warm-up pair, then three counted ones, always OLD first.
    assert log.read_text() == "on" * 4
    walls = ratios(res.stdout, "wall_s")
    assert len(walls) == 3 and all(r > 1.5 for r in walls), res.stdout
    assert re.search(r"^3 pairs after 1 warm-up pair", res.stdout, re.M)
    assert "new peak_rss_mib" in res.stdout


def test_a_failing_run_stops_the_pairing_with_exit_1_naming_the_command():
    res = pair("-n", "2", f"{sys.executable} -c pass", "--", sys.executable, "-c", "raise SystemExit(3)")
    assert res.returncode == 1
    assert "new command exited 3" in res.stderr


def test_bad_usage_exits_2():
    assert pair("-n", "2", "true").returncode == 2  # no `--` and no NEW command
    assert pair("-n", "0", "true", "--", "true").returncode == 2
    assert pair("--pause", "-1", "true", "--", "true").returncode == 2
