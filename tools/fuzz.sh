#!/usr/bin/env bash
# Long fuzzing runs (the test suite runs each target for MOEJIT_FUZZ_SECONDS only). Uses the targets of
# the sanitizer build (tools/sanitize.sh builds them, into ${BUILD_DIR:-build}-san, when clang++ is
# installed), starts from the committed seeds in fuzz/corpus/<target>/ and keeps what it finds in
# <build>/fuzz-work/<target>/ (never in the source tree). Crashing inputs land in <build>/fuzz-findings/.
#
#   bash tools/fuzz.sh                       # every target, 1,000,000 executions each
#   bash tools/fuzz.sh --runs 10000000 manifest kernel_key
#   bash tools/fuzz.sh --seconds 3600        # every target for an hour
#
# Prints one line per target: executions, seconds, corpus size, result. Exits 1 on any finding.
set -uo pipefail
cd "$(dirname "$0")/.."
SAN_BUILD_DIR=${SAN_BUILD_DIR:-${BUILD_DIR:-build}-san}
RUNS=1000000
SECONDS_LIMIT=0
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS=$2; shift 2 ;;
    --seconds) SECONDS_LIMIT=$2; RUNS=-1; shift 2 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(safetensors layer_file input_file model_config manifest kernel_key)
for t in "${targets[@]}"; do
  if [ ! -x "$SAN_BUILD_DIR/fuzz/fuzz_$t" ]; then
    echo "fuzz.sh: $SAN_BUILD_DIR/fuzz/fuzz_$t is missing: run tools/sanitize.sh first (needs clang++)" >&2
    exit 2
  fi
done
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/tools/lsan.supp:print_suppressions=0"
failed=0
printf '%-14s %12s %8s %8s  %s\n' target executions seconds corpus result
for t in "${targets[@]}"; do
  work=$SAN_BUILD_DIR/fuzz-work/$t
  findings=$SAN_BUILD_DIR/fuzz-findings/$t
  mkdir -p "$work" "$findings"
  log=$SAN_BUILD_DIR/fuzz-$t.log
  start=$(date +%s)
  "$SAN_BUILD_DIR/fuzz/fuzz_$t" -runs="$RUNS" -max_total_time="$SECONDS_LIMIT" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$findings/" "$work" "fuzz/corpus/$t" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  corpus=$(ls "$work" | wc -l)
  if [ $rc -eq 0 ]; then result="no finding"; else result="FINDING (rc $rc): see $log and $findings/"; failed=1; fi
  printf '%-14s %12s %8s %8s  %s\n' "$t" "${execs:-?}" "$secs" "$corpus" "$result"
done
exit $failed
