#!/usr/bin/env bash
# Installs build dependencies (Debian/Ubuntu) and configures + builds moejit into ${BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
# clang: the sanitizer build and the libFuzzer targets (tools/sanitize.sh, run by tools/test.sh).
for p in cmake g++ make libfmt-dev nlohmann-json3-dev catch2 clang; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "error: installing ${need[*]} needs root, and sudo is not installed; run as root or install sudo" >&2
      exit 1
    fi
    SUDO="sudo"
  fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
fi
CUDA_ROOT=${MOEJIT_CUDA_ROOT:-/usr/local/cuda}
if [ ! -f "$CUDA_ROOT/include/nvrtc.h" ]; then
  echo "error: the CUDA toolkit (NVRTC headers and library) was not found at $CUDA_ROOT; set MOEJIT_CUDA_ROOT" >&2
  exit 1
fi
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} -DMOEJIT_CUDA_ROOT="$CUDA_ROOT" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
