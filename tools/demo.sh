#!/usr/bin/env bash
# README command 1: install dependencies, build, and run the main job on the bundled default config.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
exec "$BUILD_DIR/moejit" demo "$@"
