#!/usr/bin/env bash
# Nsight Compute over the kernels of one forward that `moejit bench` times (GPU machine only): speed of
# light, warp states, scheduler, pipes, memory and the SASS lines the warps stall on, one report per kernel.
# usage: tools/gpu_profile.sh MOEJIT LOG_DIR [CONFIG] [M] [FAMILY] [KERNEL_REGEX]
#   defaults: deepseek-v3, 4096, prefill, the family's FC kernels ("prefill_fc[12]_.*i0$"). SKIP (default 2)
#   kernels matching the regex are passed over first (the bench's eager forward), COUNT (default 2) are
#   profiled; PROFILE_TIMEOUT (seconds, default 200). Compile the kernels first (`moejit prewarm`, or
#   one bench run with the same MOEJIT_CACHE_DIR), so the profiled process does not compile.
set -u
cli=$1 logs=$2
cfg=${3:-deepseek-v3} m=${4:-4096} family=${5:-prefill} regex=${6:-"${5:-prefill}_fc[12]_.*i0\$"}
mkdir -p "$logs"
ncu=$(command -v ncu || echo "${MOEJIT_CUDA_ROOT:-/usr/local/cuda}/bin/ncu")
[ -x "$ncu" ] || { echo "gpu_profile.sh: ncu not found" >&2; exit 2; }
name=$logs/ncu-$cfg-$family-$m
out=$name.txt
timeout "${PROFILE_TIMEOUT:-200}" "$ncu" --cache-control all --clock-control none -k "regex:$regex" -f -o "$name" \
  --launch-skip "${SKIP:-2}" --launch-count "${COUNT:-2}" \
  --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --section SourceCounters \
  "$cli" bench --config "$cfg" --family "$family" --tokens "$m" --replays 1 --dense off > "$name.run.log" 2>&1
rc=$?
"$ncu" -i "$name.ncu-rep" > "$out" 2>&1
# every SASS line with its stall samples, per kernel, for reading the hot loop offline
"$ncu" -i "$name.ncu-rep" --page source --csv --print-source sass 2>&1 | gzip > "$name.sass.csv.gz"
# every collected metric (pipe utilizations, L2 and shared-memory traffic) as one CSV row per kernel
"$ncu" -i "$name.ncu-rep" --page raw --csv > "$name.raw.csv" 2>&1
echo "ncu rc=$rc: $out, $name.raw.csv, $name.sass.csv.gz ($name.ncu-rep)"
grep -E "  [a-z_0-9]+_fc[12]|Duration|Compute \(SM\) Throughput|Memory Throughput|Issued Ipc Active|No Eligible|Eligible Warps|Warp Cycles Per Issued|DRAM Throughput|L2 Cache Throughput" "$out" | head -60
exit $rc
