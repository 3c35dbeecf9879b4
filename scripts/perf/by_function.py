#!/usr/bin/env python3
"""Host instructions per record by host function, from a callgrind file; optionally against a
second one (before -> after).

    scripts/perf/by_function.py RECORDS AFTER.callgrind [BEFORE.callgrind] [--top N]

Callgrind names inlined code by its source file and the function it was inlined into;
this folds every source file into that host function, which is what a call costs: the
controller's tree walk, for instance, shows as `SecureMc::ensure_block_searched` whatever
cache, tree or PCM code it inlined. Counts are exclusive (a called function's own lines are
its own row) and divided by RECORDS, the number of trace records the run stepped.
"""

import argparse
import collections
import re
import subprocess

ROW = re.compile(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$")


def by_function(path):
    """{host function: instructions} from `callgrind_annotate`'s per-file:function rows."""
    out = subprocess.run(
        ["callgrind_annotate", "--show=Ir", "--threshold=100", "--auto=no", path],
        capture_output=True, text=True, check=True,
    ).stdout
    totals = collections.Counter()
    for line in out.splitlines():
        m = ROW.match(line)
        if not m or "PROGRAM TOTALS" in m.group(2) or ":" not in m.group(2):
            continue
        function = re.sub(r" \[.*", "", m.group(2).split(":", 1)[1])
        totals[function] += int(m.group(1).replace(",", ""))
    return totals


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", type=float, help="trace records the run stepped (500000 at scale 0.05)")
    ap.add_argument("after", help="callgrind output file")
    ap.add_argument("before", nargs="?", help="callgrind output file to compare with")
    ap.add_argument("--top", type=int, default=30, help="rows to print (default 30)")
    args = ap.parse_args()
    after = by_function(args.after)
    if args.before is None:
        print(f"{'instr/record':>12}  function")
        for function, n in after.most_common(args.top):
            print(f"{n / args.records:12.1f}  {function}")
        print(f"{sum(after.values()) / args.records:12.1f}  (all)")
        return
    before = by_function(args.before)
    rows = sorted(set(after) | set(before), key=lambda f: -abs(after[f] - before[f]))
    print(f"{'before':>10} {'after':>10} {'change':>10}  function (instructions per record)")
    for function in rows[: args.top]:
        b, a = before[function] / args.records, after[function] / args.records
        print(f"{b:10.1f} {a:10.1f} {a - b:+10.1f}  {function}")
    b, a = sum(before.values()) / args.records, sum(after.values()) / args.records
    print(f"{b:10.1f} {a:10.1f} {a - b:+10.1f}  (all)")


if __name__ == "__main__":
    main()
