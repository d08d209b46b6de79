#!/usr/bin/env bash
# The benchmark matrix of the open performance work, one `moejit bench` per row, each with its own time
# limit so that one slow row cannot take the others' results with it; prints each row's table and keeps
# the full logs. GPU machine only.
# usage: tools/gpu_bench.sh MOEJIT LOG_DIR [ROW...]
#   rows (default: all): precision (a16/a8/a4 side by side), a4-scales (a4 with one a1_gs against a1_gs per
#   expert: x quantized once per token against once per pair), csf (plain vs CSF reads), prefill (the
#   planned prefill tiles at M = 4096 and 16384 with the dense ceiling), teams (two consumer-warpgroup
#   teams against the planned tiles at M = 4096), teams-fc1 (FC1 alone on teams, a16/a8/a4, M = 2048..16384),
#   pairs (clusters of two CTAs sharing each B block, p2, at M = 4096), fc2-slabs (FC2 with two slabs per
#   consumer warp, s2: 256-row units that read each B block once for twice the rows, against one slab, s1,
#   at M = 4096 and 16384, FC1 planned), deep (the planned prefill kernels
#   against rings one stage deeper, FC1 d7 and FC2 d8, at M = 4096 and 16384), wide (160-token tiles, n20, against the planned tiles at M = 4096 and 16384), batch
#   (M = 64..2048, the batch regime), cutover (the planned family against the batch family at 48, 56 and
#   64 pairs per expert, around the prefill family's cutover), batch-depth (the batch family's planned tiles
#   against the same tiles with a ring of 7 stages, d6, at the M it serves: whether bytes in flight bound it),
#   prefill-warps (the prefill family at 32 pairs per expert with three or four consumer warpgroups, w12n4d7
#   and w16n8d5, against its planned tiles: whether the consumers' latency bounds it there), decode-batch (the decode family against the batch
#   family at M = 128..256, around their cutover; the decode family serves at most 256 tokens), sweep (the planned family at every power of two
#   M = 1..16384 with the dense ceiling: the issue's final table)
#   CONFIGS (default: gpt-oss-120b deepseek-v3 qwen3-30b-a3b), ROW_TIMEOUT (seconds for each bench, default
#   150; the row's kernels are compiled before it, in parallel, outside that limit)
set -u
cli=$1 logs=$2
shift 2
rows=${*:-precision a4-scales csf prefill teams teams-fc1 pairs fc2-slabs deep wide batch batch-depth prefill-warps cutover decode-batch sweep}
configs=${CONFIGS:-gpt-oss-120b deepseek-v3 qwen3-30b-a3b}
limit=${ROW_TIMEOUT:-150}
mkdir -p "$logs"
export MOEJIT_CACHE_DIR=${MOEJIT_CACHE_DIR:-$logs/cache}
# The kernels a row's bench will run, compiled first by parallel processes (NVRTC serializes compiles within
# one process, so a bench that compiles its own kernels spends most of a short row compiling): the plan's
# keys for each precision (with the row's --family and the tile overrides in the environment), and, for a
# CSF row, prewarm's plain and CSF keys up to the row's largest M. Failures surface in the bench itself.
warm_row() {  # the bench arguments
  local config=gpt-oss-120b tokens=1 family=auto precisions="" scales=plain
  while [ $# -gt 0 ]; do
    case $1 in
      --config) config=$2; shift ;;
      --tokens) tokens=$2; shift ;;
      --family) family=$2; shift ;;
      --precision) precisions=${2//,/ }; shift ;;
      --scales) scales=$2; shift ;;
    esac
    shift
  done
  local jobs=$(nproc) p
  for p in ${precisions:-default}; do
    if [ "$p" = default ]; then
      "$cli" plan --config "$config" --tokens "$tokens" --family "$family"
    else
      "$cli" plan --config "$config" --tokens "$tokens" --family "$family" --precision "$p"
    fi 2>/dev/null | grep -oE '[a-z0-9_]+:sm_[0-9a-z]+:[^ ]+'
  done | sort -u | xargs -r -P "$jobs" -I KEY "$cli" inspect KEY --emit resources > /dev/null 2>&1
  if [ "$scales" != plain ]; then
    local most=$(tr ',' '\n' <<< "$tokens" | sort -n | tail -1)
    "$cli" prewarm --config "$config" --scales both --max-tokens "$most" --jobs "$jobs" --quiet > /dev/null 2>&1
  fi
}
tokens_for_pairs() {  # config, then pairs per expert: M = pairs * E / top_k for each (the plan's layer line), comma-separated
  local config=$1 layer e k p
  shift
  layer=$("$cli" plan --config "$config" --tokens 1 2>/dev/null | grep -m1 -oE 'E=[0-9]+ .*top_k=[0-9]+')
  e=$(grep -oE '^E=[0-9]+' <<< "$layer" | cut -d= -f2) k=$(grep -oE 'top_k=[0-9]+' <<< "$layer" | cut -d= -f2)
  for p in "$@"; do echo $(( p * e / k )); done | paste -sd,
}
run_row() {  # name, then the bench arguments
  local name=$1
  shift
  local start=$(date +%s)
  warm_row "$@"
  local warmed=$(( $(date +%s) - start ))
  start=$(date +%s)
  timeout "$limit" "$cli" bench "$@" > "$logs/$name.log" 2>&1
  echo "### $name rc=$? ${warmed}s compiling, $(( $(date +%s) - start ))s: bench $*"
  grep -E '^(bench| +M | *[0-9]+ |prepared)' "$logs/$name.log"
}
for row in $rows; do
  for c in $configs; do
    case $row in
      precision) run_row "precision_$c" --config "$c" --precision a16,a8,a4 --tokens 1,4,32,256,1024,4096 --replays 10 --dense off ;;
      a4-scales)
        run_row "a4_shared_$c" --config "$c" --precision a16,a4 --tokens 1,32,1024,4096 --replays 10 --dense off
        run_row "a4_per_expert_$c" --config "$c" --precision a4 --a4-scales per-expert --tokens 1,32,1024,4096 --replays 10 --dense off ;;
      csf) run_row "csf_$c" --config "$c" --scales csf --tokens 1,4,16,32,64,256,1024,4096 --replays 10 --dense off ;;
      prefill) run_row "prefill_$c" --config "$c" --family prefill --tokens 4096,16384 --replays 5 --dense on ;;
      teams)
        MOEJIT_PREFILL_TILE_FC1=w8n16d6g2 MOEJIT_PREFILL_TILE_FC2=w8n16d7g2 \
          run_row "teams_g2_$c" --config "$c" --family prefill --tokens 4096 --replays 5 --dense off
        MOEJIT_PREFILL_TILE_FC1=w8n16d6g2 MOEJIT_PREFILL_TILE_FC2=w8n16d7g2s2 \
          run_row "teams_g2s2_$c" --config "$c" --family prefill --tokens 4096 --replays 5 --dense off ;;
      teams-fc1)
        # FC1 alone on teams (its a8/a4 epilogue overlapping the other team's products), FC2 as planned.
        run_row "planned_prec_$c" --config "$c" --family prefill --precision a16,a8,a4 --tokens 2048,4096,16384 --replays 5 --dense off
        MOEJIT_PREFILL_TILE_FC1=w8n16d6g2 \
          run_row "teams_fc1_$c" --config "$c" --family prefill --precision a16,a8,a4 --tokens 2048,4096,16384 --replays 5 --dense off ;;
      pairs)
        MOEJIT_PREFILL_TILE_FC1=w8n16d6p2 MOEJIT_PREFILL_TILE_FC2=w8n16d7p2 \
          run_row "pairs_p2_$c" --config "$c" --family prefill --tokens 4096 --replays 5 --dense off ;;
      fc2-slabs)
        # Both tiles named: the planner itself takes s2 where H >= 4096 (perf-log v49).
        MOEJIT_PREFILL_TILE_FC2=w8n16d7o1 \
          run_row "fc2_slabs_s1_$c" --config "$c" --family prefill --tokens 4096,16384 --replays 5 --dense off
        MOEJIT_PREFILL_TILE_FC2=w8n16d6o1s2 \
          run_row "fc2_slabs_s2_$c" --config "$c" --family prefill --tokens 4096,16384 --replays 5 --dense off ;;
      deep)
        # One ring stage more than the planner's 200 KB cap gives (sm_90a takes 227 KB): whether the stages'
        # path to the consumers is exposed in the planned prefill kernels (perf-log v44).
        run_row "deep_planned_$c" --config "$c" --family prefill --tokens 4096,16384 --replays 5 --dense off
        MOEJIT_PREFILL_TILE_FC1=w8n16d7 MOEJIT_PREFILL_TILE_FC2=w8n16d8 \
          run_row "deep_d7d8_$c" --config "$c" --family prefill --tokens 4096,16384 --replays 5 --dense off ;;
      wide)
        MOEJIT_PREFILL_TILE_FC1=w8n20d5 MOEJIT_PREFILL_TILE_FC2=w8n20d6 \
          run_row "wide_n20_$c" --config "$c" --family prefill --tokens 4096,16384 --replays 5 --dense off
        run_row "wide_n16_$c" --config "$c" --family prefill --tokens 4096,16384 --replays 5 --dense off ;;
      batch) run_row "batch_$c" --config "$c" --tokens 64,128,256,512,1024,2048 --replays 10 --dense on ;;
      cutover)
        tokens=$(tokens_for_pairs "$c" 48 56 64)
        run_row "cutover_planned_$c" --config "$c" --tokens "$tokens" --replays 10 --dense off
        run_row "cutover_batch_$c" --config "$c" --family batch --tokens "$tokens" --replays 10 --dense off ;;
      batch-depth)
        # The planned FC1 tile (FC2 takes the same one) with its depth field set to 6, per M.
        for m in 256 512 1024; do
          tile=$("$cli" plan --config "$c" --tokens "$m" 2>/dev/null | grep -oE 'batch_fc1:[^ ]+' | grep -oE ':w[0-9]+n[0-9]+d[0-9]+o[0-9]+m?:' | tr -d :)
          [ -n "$tile" ] || continue
          deep=$(sed 's/d[0-9]/d6/; s/m$/m1/' <<< "$tile")
          run_row "depth_planned_${c}_$m" --config "$c" --tokens "$m" --family batch --replays 10 --dense off
          MOEJIT_BATCH_TILE_FC1=$deep MOEJIT_BATCH_TILE_FC2=$deep \
            run_row "depth_d6_${c}_$m" --config "$c" --tokens "$m" --family batch --replays 10 --dense off
        done ;;
      prefill-warps)
        m=$(tokens_for_pairs "$c" 32)
        run_row "warps_planned_$c" --config "$c" --family prefill --tokens "$m" --replays 10 --dense off
        for t in w12n4d7 w16n8d5; do
          MOEJIT_PREFILL_TILE_FC1=$t MOEJIT_PREFILL_TILE_FC2=$t \
            run_row "warps_${t}_$c" --config "$c" --family prefill --tokens "$m" --replays 10 --dense off
        done ;;
      decode-batch)
        run_row "decode_batch_decode_$c" --config "$c" --family decode --tokens 128,192,256 --replays 10 --dense off
        run_row "decode_batch_batch_$c" --config "$c" --family batch --tokens 128,192,256 --replays 10 --dense off ;;
      sweep) run_row "sweep_$c" --config "$c" --tokens 1,2,4,8,16,32,64,128,256,512,1024,2048,4096,8192,16384 --replays 10 --dense on ;;
      *) echo "gpu_bench.sh: unknown row $row" >&2; exit 2 ;;
    esac
  done
done
