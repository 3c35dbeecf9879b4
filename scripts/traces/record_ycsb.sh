#!/usr/bin/env bash
# Records the YCSB-on-SQLite traces that `secmem reproduce dshield` uses for Fig. 14
# (python/secmem/traces/ycsb-sqlite-*.iolog): each workload's run phase on a freshly loaded
# 64 MB database, captured with `secmem io-capture` (needs strace), then kept to the
# database's and journal's I/Os (the dynamic loader's reads of libraries dropped), their
# file names shortened, and the timestamps dropped (fio iolog v2), so that a replay issues
# each I/O as soon as a queue slot is free: the stacks are compared at the drive's pace.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../../python/secmem/traces}
ops=${OPS:-5000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for w in rwm rh ro; do
    python3 "$here/ycsb_sqlite.py" --db "$work/ycsb.db" --phase load
    secmem io-capture --out "$work/$w.iolog" -- python3 "$here/ycsb_sqlite.py" --db "$work/ycsb.db" --phase run --workload "$w" --ops "$ops"
    {
        echo "fio version 2 iolog"
        grep -E " $work/ycsb\.db(-journal)? " "$work/$w.iolog" | cut -d' ' -f2- | sed -e "s# $work/ycsb.db-journal # #;s#^$work/ycsb\.db-journal #journal #;s#^$work/ycsb\.db #db #"
    } > "$out/ycsb-sqlite-$w.iolog"
    echo "$w: $(grep -c ' read ' "$out/ycsb-sqlite-$w.iolog") reads, $(grep -c ' write ' "$out/ycsb-sqlite-$w.iolog") writes"
done
