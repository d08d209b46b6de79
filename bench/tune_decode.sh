#!/usr/bin/env bash
# Sweeps decode tiles (warps x depth) with `moejit bench` on the GPU and prints one table per tile.
# usage: bench/tune_decode.sh MOEJIT_BINARY CONFIG TOKENS TILE...
set -u
bin=$1 config=$2 tokens=$3
shift 3
for tile in "$@"; do
  echo "== $config tile $tile"
  MOEJIT_DECODE_TILE=$tile "$bin" bench --config "$config" --tokens "$tokens" --replays 30 2>/dev/null | grep -E "^ +[0-9]+ " || echo "(failed)"
done
