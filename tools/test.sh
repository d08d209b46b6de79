#!/usr/bin/env bash
# README command 2: install dependencies, build, run the whole test suite (then its sanitizer and fuzz step).
# GPU tests run where a GPU is present and are reported as skipped (with the reason) elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
if ! grep -q '^MOEJIT_TESTS_BUILT:INTERNAL=ON$' "$BUILD_DIR/CMakeCache.txt"; then
  echo "error: Catch2 was not found, so the tests were not built; install the package catch2 (v2 or v3)" >&2
  exit 1
fi
# A private cache so tests never touch (or depend on) the user's.
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-$PWD/$BUILD_DIR/test-cache}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
# The CPU suite again under AddressSanitizer + UBSan, and a bounded run of every libFuzzer target, in a
# second build directory ($BUILD_DIR-san; tools/sanitize.sh). MOEJIT_SANITIZE=0 skips this step.
if [ "${MOEJIT_SANITIZE:-1}" != 0 ]; then
  SAN_BUILD_DIR="$BUILD_DIR-san" MOEJIT_CACHE_DIR="$PWD/$BUILD_DIR-san/test-cache" bash tools/sanitize.sh
fi
