#!/usr/bin/env bash
# Sweeps decode tiles (warps x depth x CTAs per SM) with `moejit bench` on the GPU and prints one
# table per tile. A tile is "w4d1o8" (FC1 and FC2) or "w4d1o8:w1d1o32" (FC1 tile : FC2 tile).
# usage: bench/tune_decode.sh MOEJIT_BINARY CONFIG TOKENS TILE...
set -u
bin=$1 config=$2 tokens=$3
shift 3
for tile in "$@"; do
  echo "== $config tile $tile"
  fc1=${tile%%:*} fc2=${tile#*:}
  MOEJIT_DECODE_TILE_FC1=$fc1 MOEJIT_DECODE_TILE_FC2=$fc2 "$bin" bench --config "$config" --tokens "$tokens" \
    --replays 30 2>/dev/null | grep -E "^ +[0-9]+ " || echo "(failed)"
done
