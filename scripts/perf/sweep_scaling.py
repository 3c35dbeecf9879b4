#!/usr/bin/env python3
"""The sweep backends' scaling and per-point overhead, for the README's table.

    .venv/bin/python scripts/perf/sweep_scaling.py [--backends local,dask,ray] [--requests N]

Per backend: the wall time of a 16-point sweep (points of `--requests` records, about a
second each by default) on 1 worker and on 2, and their ratio; then the per-point overhead,
from sweeps of 1 and 65 empty points (one record each) on 1 worker: (T65 - T1) / 64, so the
cluster's start-up cancels out. Each sweep starts its own cluster, as `secmem sweep` does.
"""

import argparse
import sys
import tempfile
import time

import secmem


def timed(backend, points, workers, requests):
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        secmem.sweep("run.seed", list(range(1, points + 1)), preset="horus", out=out, backend=backend,
                     jobs=workers, workers=workers, params=[f"workload.requests={requests}", "run.progress=false"])
        return time.perf_counter() - start


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backends", default="local,dask,ray")
    ap.add_argument("--requests", type=int, default=400_000)
    a = ap.parse_args()
    for b in a.backends.split(","):
        one, two = timed(b, 16, 1, a.requests), timed(b, 16, 2, a.requests)
        t1, t65 = timed(b, 1, 1, 1), timed(b, 65, 1, 1)
        print(f"{b}: 16 points on 1 worker {one:.1f} s, on 2 {two:.1f} s, ratio {two / one:.2f}; "
              f"per-point overhead {(t65 - t1) / 64 * 1000:.0f} ms (start-up {t1:.1f} s)", flush=True)


if __name__ == "__main__":
    sys.exit(main())
