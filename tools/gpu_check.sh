#!/usr/bin/env bash
# Runs the GPU test executables of a build on a GPU machine, in parallel (each compiles its kernels in
# its own process; they share one kernel cache), and prints one line per suite and the failures' tails.
# usage: tools/gpu_check.sh BIN_DIR LOG_DIR [CATCH2 ARGS...]
#   BIN_DIR holds gpu_test_* and the moejit CLI (a build's tests/ and moejit, or stripped copies of them);
#   the golden layers are $MOEJIT_GOLDEN_DIR, else ../shared/golden as configured at build time.
#   GPU_CHECK_TIMEOUT (seconds, default 0 = none) stops a suite that runs longer; its line then says rc=124,
#   so one slow suite cannot take the others' results with it.
set -u
bin=$1 logs=$2
shift 2
mkdir -p "$logs"
export MOEJIT_REQUIRE_GPU=1
export MOEJIT_CLI=${MOEJIT_CLI:-$bin/moejit}
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-$logs/cache}
limit=${GPU_CHECK_TIMEOUT:-0}
pids=()
for t in "$bin"/gpu_test_*; do
  name=$(basename "$t")
  ( start=$(date +%s); timeout "$limit" "$t" "$@" > "$logs/$name.log" 2>&1; rc=$?
    echo "$name rc=$rc $(( $(date +%s) - start ))s $(grep -E '^(All tests passed|test cases:)' "$logs/$name.log" | tail -1)" \
      > "$logs/$name.status" ) &
  pids+=($!)
done
wait "${pids[@]}"
status=0
for s in "$logs"/*.status; do
  cat "$s"
  grep -q ' rc=0 ' "$s" || { status=1; tail -40 "${s%.status}.log"; }
done
exit $status
