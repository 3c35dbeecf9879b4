#!/usr/bin/env bash
# Counts the host instructions of one bench scenario with callgrind: repeatable whatever else
# the machine is doing, where wall time on a shared VM drifts by 5-20%.
#
#   scripts/perf/callgrind.sh SCENARIO SCALE OUT.callgrind [valgrind options...]
#
# e.g. `scripts/perf/callgrind.sh secure-lazy-random 0.05 /tmp/random.cg` (500 K records).
# valgrind 3.19 cannot decode the AVX-512 and GFNI instructions of the native build
# (.cargo/config.toml), so this builds an x86-64-v3 copy of `bench_scenario` in its own target
# directory (target/x86-64-v3), leaving the native build alone. Its counts are a proxy for the
# native build's: see docs/performance.md. Extra options go to valgrind, e.g.
# `--cache-sim=yes` or `--branch-sim=yes`, or `--dump-instr=yes` for per-instruction counts.
set -eu
SCENARIO=${1:?usage: callgrind.sh SCENARIO SCALE OUT [valgrind options...]}
SCALE=${2:?scale, e.g. 0.05 for 500 K records of a 10 M-record scenario}
OUT=${3:?output file}
shift 3
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export CARGO_TARGET_DIR="$ROOT/target/x86-64-v3"
RUSTFLAGS="-C target-cpu=x86-64-v3 -C target-feature=+aes,+pclmulqdq" \
  cargo build --quiet --release --manifest-path "$ROOT/Cargo.toml" -p secmem-sim --example bench_scenario
valgrind --tool=callgrind --callgrind-out-file="$OUT" "$@" \
  "$CARGO_TARGET_DIR/release/examples/bench_scenario" "$SCENARIO" "$SCALE" 2>&1 | grep -E "Collected|^\{" || true
