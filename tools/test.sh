#!/usr/bin/env bash
# README command 2: install dependencies, build from scratch, run the whole test suite.
# GPU tests run where a GPU is present and are reported as skipped (with the reason) elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
# A private cache so tests never touch (or depend on) the user's.
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-$PWD/$BUILD_DIR/test-cache}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)" "$@"
