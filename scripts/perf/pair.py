#!/usr/bin/env python3
"""Times two commands in turn, pair by pair, so a comparison survives this VM's drift.

    scripts/perf/pair.py [-n PAIRS] [--warmup N] [--pause S] OLD_COMMAND -- NEW_COMMAND

e.g.

    scripts/perf/pair.py -n 5 '/tmp/old/bench_scenario functional-random 1.0' \\
        -- ./target/release/examples/bench_scenario functional-random 1.0

Runs OLD, NEW, OLD, NEW, ... (`--warmup` pairs first, not counted), each as a whole process
with its output thrown away, and prints per command the minimum, median and maximum of its
wall, user and system seconds and its peak resident memory (the kernel's accounting of the
finished process, `wait4`), then NEW/OLD per figure, pair by pair: below 1 means NEW took
less. A pair's two runs are seconds apart, so a drift in the machine's speed over minutes
hits both alike; quote the median ratio and its range, never two absolute times from
different hours.

`--pause S` sleeps S seconds before every run: after a pause of a few seconds the guest
kernel has handed freed memory back to the host, so each run meets "cold" memory, as a run
that follows a smaller one does (docs/performance.md, "How to measure").

OLD is one string, split as a shell splits words; NEW is everything after `--`. Neither is
given a shell. A command that exits non-zero is reported and stops the pairing (exit 1): a
failing run has no time worth comparing.
"""

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time


def run_once(argv, pause_s):
    if pause_s:
        time.sleep(pause_s)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "exit": proc.returncode,
        "wall_s": wall,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        # ru_maxrss is in KiB on Linux.
        "peak_rss_mib": usage.ru_maxrss / 1024,
    }


FIGURES = ("wall_s", "user_s", "sys_s", "peak_rss_mib")


def spread(values):
    return min(values), statistics.median(values), max(values)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("usage: pair.py [-n PAIRS] [--warmup N] [--pause S] OLD_COMMAND -- NEW_COMMAND", file=sys.stderr)
        return 2
    cut = argv.index("--")
    new_cmd = argv[cut + 1:]
    parser = argparse.ArgumentParser(prog="pair.py", description="Times OLD and NEW in turn, pair by pair.")
    parser.add_argument("-n", "--pairs", type=int, default=5, help="counted pairs (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="pairs run first and not counted (default 1)")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds to sleep before every run (default 0)")
    parser.add_argument("old", help="the OLD command, one string split as a shell splits words")
    args = parser.parse_args(argv[:cut])
    old_cmd = shlex.split(args.old)
    if not old_cmd or not new_cmd:
        print("pair.py: both OLD and NEW commands are needed", file=sys.stderr)
        return 2
    if args.pairs < 1 or args.warmup < 0 or args.pause < 0:
        print("pair.py: --pairs must be at least 1, --warmup and --pause at least 0", file=sys.stderr)
        return 2

    runs = {"old": [], "new": []}
    for i in range(args.warmup + args.pairs):
        for name, cmd in (("old", old_cmd), ("new", new_cmd)):
            r = run_once(cmd, args.pause)
            if r["exit"] != 0:
                print(f"pair.py: {name} command exited {r['exit']}: {shlex.join(cmd)}", file=sys.stderr)
                return 1
            if i >= args.warmup:
                runs[name].append(r)

    print(f"{args.pairs} pairs after {args.warmup} warm-up pair(s), OLD then NEW each time")
    print(f"OLD: {shlex.join(old_cmd)}")
    print(f"NEW: {shlex.join(new_cmd)}")
    print(f"{'figure':<22}{'min':>10}{'median':>10}{'max':>10}")
    for name in ("old", "new"):
        for fig in FIGURES:
            lo, mid, hi = spread([r[fig] for r in runs[name]])
            print(f"{name + ' ' + fig:<22}{lo:>10.3f}{mid:>10.3f}{hi:>10.3f}")
    for fig in FIGURES:
        ratios = [n[fig] / o[fig] for o, n in zip(runs["old"], runs["new"]) if o[fig] > 0]
        if ratios:
            lo, mid, hi = spread(ratios)
            per_pair = " ".join(f"{x:.3f}" for x in ratios)
            print(f"{'new/old ' + fig:<22}{lo:>10.3f}{mid:>10.3f}{hi:>10.3f}   pairs: {per_pair}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
