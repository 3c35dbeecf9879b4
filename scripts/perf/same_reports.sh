#!/usr/bin/env bash
# Do two builds of the engine print the same reports? The check every speed-only change must
# pass before it lands: a change that moves no simulated value leaves every report's stats
# byte-identical.
#
#   scripts/perf/same_reports.sh OLD_RUN_REPORT [NEW_RUN_REPORT]
#
# OLD_RUN_REPORT and NEW_RUN_REPORT are `run_report` binaries (`cargo build --release -p
# secmem-sim --example run_report`, then copy target/release/examples/run_report aside before
# the change). NEW defaults to this checkout's target/release/examples/run_report. The configs
# cover the four presets, both trace levels, counting and functional mode, lazy and eager
# update, minor-counter overflow (3-bit minors), random counter boot values, one miss in flight,
# and footprints small enough for metadata caches to hit. Prints one line per config; exits 1
# if any differs, with the first lines of the difference.
set -u
OLD=${1:?usage: same_reports.sh OLD_RUN_REPORT [NEW_RUN_REPORT]}
NEW=${2:-$(cd "$(dirname "$0")/../.." && pwd)/target/release/examples/run_report}
fail=0
while read -r args; do
  [ -z "$args" ] && continue
  # shellcheck disable=SC2086  # $args is a list of words on purpose
  a=$("$OLD" $args 2>&1); b=$("$NEW" $args 2>&1)
  if [ "$a" == "$b" ]; then
    echo "same ($(echo "$a" | wc -l) lines): $args"
  else
    echo "DIFF: $args"; diff <(echo "$a") <(echo "$b") | head -5; fail=1
  fi
done <<'CFG'
horus workload.requests=200000 workload.pattern=sequential
horus workload.requests=200000 workload.pattern=random run.trace_level=memory
horus workload.requests=200000 workload.pattern=zipf core.max_outstanding_misses=3
lelantus workload.requests=200000 workload.pattern=stride core.max_outstanding_misses=1
lelantus workload.requests=200000 workload.pattern=random run.functional=true
bmf workload.requests=200000 workload.pattern=random
bmf workload.requests=200000 workload.pattern=zipf
esd workload.requests=100000 workload.pattern=random run.functional=true
horus workload.requests=100000 workload.pattern=random tree.update=eager run.functional=true
horus workload.requests=300000 workload.pattern=random workload.footprint_bytes=262144 run.trace_level=memory
lelantus workload.requests=100000 workload.pattern=zipf run.functional=true security.counter_init=random
horus workload.requests=200000 workload.pattern=random security.minor_counter_bits=3 run.trace_level=memory
horus workload.requests=100000 workload.pattern=zipf workload.footprint_bytes=1048576 security.minor_counter_bits=3 run.trace_level=memory run.functional=true
horus workload.requests=100000 workload.pattern=zipf workload.footprint_bytes=1048576 security.minor_counter_bits=3 run.trace_level=memory
lelantus workload.requests=100000 workload.pattern=zipf workload.footprint_bytes=1048576 run.functional=true run.trace_level=memory
CFG
exit $fail
