#!/usr/bin/env bash
# compute-sanitizer over every kernel family at a small, a long and a real shape (GPU machine only):
# memcheck (with leak checking), racecheck, synccheck and initcheck, each over
# build/tests/gpu_sanitize_cases --family F --shape S for F in decode, cooperative, batch, wgmma, prefill, csf,
# csf-stream (the decode kernels reading CSF scales), csf-batch, csf-prefill (the batch and prefill kernels
# reading CSF scales), decode-a8, decode-a4, wgmma-a8, wgmma-a4, prefill-a8, prefill-a4 (the decode and
# warpgroup-MMA kernels in the
# quantized activation precisions), prefill-teams (two teams of consumer warpgroups taking units in turn),
# prefill-cluster (clusters of two CTAs sharing each B block) and
# S in small (3 experts, H 96, I 160), long (the same with H 1008, I 672: more K chunks than ring stages, so
# stages are refilled) and real (gpt-oss-120b). Every case also runs the weight-repack and
# (where planned) route kernels. Prints one line per (tool, family, shape) and a summary; full reports go
# to $LOG_DIR (default build/gpu-sanitize/). Exits 1 when any run reports an error.
#
#   bash tools/gpu_sanitize.sh [--tools "memcheck racecheck"] [--families "decode batch"] [--shapes small]
# SANITIZE_BIN names a built gpu_sanitize_cases to use as it is (a machine without the build tree).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
LOG_DIR=${LOG_DIR:-$BUILD_DIR/gpu-sanitize}
TOOLS="memcheck racecheck synccheck initcheck"
FAMILIES="decode cooperative batch wgmma prefill prefill-teams prefill-cluster csf csf-stream csf-batch csf-prefill decode-a8 decode-a4 wgmma-a8 wgmma-a4 prefill-a8 prefill-a4"
SHAPES="small long real"
while [ $# -gt 0 ]; do
  case "$1" in
    --tools) TOOLS=$2; shift 2 ;;
    --families) FAMILIES=$2; shift 2 ;;
    --shapes) SHAPES=$2; shift 2 ;;
    *) echo "gpu_sanitize.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
SANITIZER=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo "${MOEJIT_CUDA_ROOT:-/usr/local/cuda}/bin/compute-sanitizer")}
if [ ! -x "$SANITIZER" ]; then
  echo "gpu_sanitize.sh: compute-sanitizer not found (set COMPUTE_SANITIZER or install the CUDA toolkit)" >&2
  exit 2
fi
BIN=${SANITIZE_BIN:-}
if [ -z "$BIN" ]; then
  cmake --build "$BUILD_DIR" --target gpu_sanitize_cases -j "$(nproc)" >/dev/null || exit 2
  BIN=$BUILD_DIR/tests/gpu_sanitize_cases
fi
# A private cache, so the kernels compile once for all the runs (compiles are not what is checked).
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-$PWD/$BUILD_DIR/test-cache}
mkdir -p "$LOG_DIR"
for f in $FAMILIES; do
  for s in $SHAPES; do
    "$BIN" --family "$f" --shape "$s" >/dev/null 2>&1
    rc=$?
    if [ $rc -eq 77 ]; then echo "gpu_sanitize.sh: no usable GPU; nothing checked" >&2; exit 77; fi
  done
done
failed=0
printf '%-10s %-12s %-6s %s\n' tool family shape result
for tool in $TOOLS; do
  extra=()
  [ "$tool" = memcheck ] && extra=(--leak-check full)
  for f in $FAMILIES; do
    for s in $SHAPES; do
      log=$LOG_DIR/$tool-$f-$s.log
      start=$(date +%s)
      "$SANITIZER" --tool "$tool" "${extra[@]}" --error-exitcode 99 --print-limit 20 "$BIN" --family "$f" --shape "$s" >"$log" 2>&1
      rc=$?
      secs=$(( $(date +%s) - start ))
      summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
      if [ $rc -eq 0 ]; then result="ok (${secs} s) $summary"; else result="FAILED rc=$rc (${secs} s) $summary; see $log"; failed=1; fi
      printf '%-10s %-12s %-6s %s\n' "$tool" "$f" "$s" "$result"
    done
  done
done
exit $failed
