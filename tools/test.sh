#!/usr/bin/env bash
# README command 2: install dependencies, build from scratch, run the whole test suite.
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
