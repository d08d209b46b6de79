#!/usr/bin/env bash
# Installs build dependencies (Debian/Ubuntu) and configures + builds moejit into ${BUILD_DIR:-build}.
set -euo pipefail
cd "$(dirname "$0")/.."
# Catch2 (package catch2: v2 on Debian 12, v3 on Ubuntu 24.04 and Debian 13) is only for the tests: when
# it cannot be installed the library, the CLI and the examples still build, and tools/test.sh says so.
required=(cmake g++ make libfmt-dev nlohmann-json3-dev)
# clang: the sanitizer build and the libFuzzer targets (tools/sanitize.sh, run by tools/test.sh), which
# fall back to g++ (no fuzzing) where clang cannot be installed.
optional=(catch2 clang)
missing() { for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done; }
mapfile -t need < <(missing "${required[@]}")
mapfile -t want < <(missing "${optional[@]}")
if [ $((${#need[@]} + ${#want[@]})) -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      if [ ${#need[@]} -gt 0 ]; then
        echo "error: installing ${need[*]} needs root, and sudo is not installed; run as root or install sudo" >&2
        exit 1
      fi
      echo "warning: ${want[*]} not installed (needs root); the tests will not be built" >&2
      want=()
    else
      SUDO="sudo"
    fi
  fi
  if [ $((${#need[@]} + ${#want[@]})) -gt 0 ]; then
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  fi
  if [ ${#need[@]} -gt 0 ]; then
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}"
  fi
  if [ ${#want[@]} -gt 0 ] && ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${want[@]}"; then
    echo "warning: could not install ${want[*]}; the library and the CLI build without it, the tests do not" >&2
  fi
fi
CUDA_ROOT=${MOEJIT_CUDA_ROOT:-/usr/local/cuda}
if [ ! -f "$CUDA_ROOT/include/nvrtc.h" ]; then
  echo "error: the CUDA toolkit (NVRTC headers and library) was not found at $CUDA_ROOT; set MOEJIT_CUDA_ROOT" >&2
  exit 1
fi
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo} -DMOEJIT_CUDA_ROOT="$CUDA_ROOT" >/dev/null
cmake --build "$BUILD_DIR" -j "$(nproc)"
