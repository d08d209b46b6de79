#!/usr/bin/env bash
# The CPU test suite under AddressSanitizer + UndefinedBehaviorSanitizer, and a bounded run of every
# libFuzzer target, in a second build directory (${BUILD_DIR:-build}-san, or $SAN_BUILD_DIR).
#
# clang++ builds it when installed (tools/setup.sh installs it): the library then also carries libFuzzer
# coverage and the fuzz/ targets are built and run for MOEJIT_FUZZ_SECONDS each (default 20). Without
# clang, g++ builds the sanitized CPU suite and the fuzz step is reported as skipped.
# Only what the CPU tests need is built (no GPU tests, no nvcc probes). Extra arguments go to ctest.
# MOEJIT_SANITIZE_FULL=1 also runs the NVRTC sweeps (about 8 more minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
SAN_BUILD_DIR=${SAN_BUILD_DIR:-${BUILD_DIR:-build}-san}
CUDA_ROOT=${MOEJIT_CUDA_ROOT:-/usr/local/cuda}
# clang++ where it links sanitized programs, with libFuzzer where that links too; else g++ (which has
# ASan and UBSan) and no fuzz targets. Checked by linking, since distributions split the runtimes into
# separate packages.
links() {  # links() FLAGS...: a one-line program links with clang++ and these flags
  local dir
  dir=$(mktemp -d)
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' >"$dir/f.cpp"
  [ "$1" = main ] && { shift; echo 'int main() { return 0; }' >>"$dir/f.cpp"; }
  clang++ "$@" "$dir/f.cpp" -o "$dir/f" >/dev/null 2>&1
  local rc=$?
  rm -rf "$dir"
  return $rc
}
CXX=g++
FUZZ=OFF
if ! command -v clang++ >/dev/null 2>&1; then
  echo "sanitize.sh: clang++ not found: building the sanitized CPU suite with g++; the fuzz targets are skipped" >&2
elif links -fsanitize=fuzzer,address,undefined; then
  CXX=clang++
  FUZZ=ON
elif links main -fsanitize=address,undefined; then
  CXX=clang++
  echo "sanitize.sh: clang++ cannot link libFuzzer (install libclang-rt-dev for this clang); the fuzz targets are skipped" >&2
else
  echo "sanitize.sh: clang++ cannot link sanitized programs; building with g++, the fuzz targets are skipped" >&2
fi
# -O1: sanitized code at -O0 makes the fp64 reference tests several times slower; at -O2 the build
# takes longer than the tests. Asserts stay on (NDEBUG unset).
cmake -S . -B "$SAN_BUILD_DIR" -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_BUILD_TYPE=SanitizeO1 \
  -DCMAKE_CXX_FLAGS_SANITIZEO1="-O1 -g" -DMOEJIT_SANITIZE=ON -DMOEJIT_FUZZ="$FUZZ" -DMOEJIT_GPU_TESTS=OFF \
  -DMOEJIT_CUDA_ROOT="$CUDA_ROOT" -DMOEJIT_FUZZ_SECONDS="${MOEJIT_FUZZ_SECONDS:-20}" >/dev/null
cmake --build "$SAN_BUILD_DIR" -j "$(nproc)"
# Leaks are findings (NVRTC's own allocations aside); any UB aborts the test that hit it.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$PWD/tools/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-$PWD/$SAN_BUILD_DIR/test-cache}
# The two NVRTC sweeps (test_compile_default, test_compile_every_key: every planned key through NVRTC)
# spend their minutes in NVRTC, which ASan slows threefold, on host code the other tests and the fuzzers
# cover; they are left out unless MOEJIT_SANITIZE_FULL=1. The package tests (label package) build
# uninstrumented projects against the installed library, so they run in the main build only.
exclude=(-LE 'nvrtc_sweep|package')
[ "${MOEJIT_SANITIZE_FULL:-0}" = 1 ] && exclude=(-LE package)
ctest --test-dir "$SAN_BUILD_DIR" --output-on-failure -j "$(nproc)" -L 'cpu|fuzz' "${exclude[@]}" "$@"
