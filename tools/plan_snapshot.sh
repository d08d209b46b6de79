#!/usr/bin/env bash
# plan_snapshot.sh BIN OUTDIR: what the planner and the generator produce, to compare two builds byte for
# byte: `moejit plan` for every bundled config x sm_90a, sm_120a x auto, decode, batch, prefill (M = 1..16384), the
# planner overrides of a few MOEJIT_* settings (M = 1..512, sm_90a), and `moejit inspect KEY` for every key
# any of them names. Prints digests; diff -r two OUTDIRs for the details.
set -euo pipefail
BIN=$1; OUT=$2
rm -rf "$OUT"; mkdir -p "$OUT/plans" "$OUT/src" "$OUT/variants"
CFGS="deepseek-v3-mxfp4 deepseek-v3 gpt-oss-120b gpt-oss-20b nemotron-3-nano-30b-a3b qwen3-30b-a3b"
for cfg in $CFGS; do
  for arch in sm_90a sm_120a; do
    for fam in auto decode batch prefill; do
      env -i PATH="$PATH" HOME=/tmp "$BIN" plan --config $cfg --arch $arch --sm-count 132 --max-tokens 16384 --family $fam > "$OUT/plans/$cfg.$arch.$fam.txt"
    done
  done
done
i=0
while read -r vars; do
  i=$((i+1))
  for cfg in $CFGS; do
    env -i PATH="$PATH" HOME=/tmp $vars "$BIN" plan --config $cfg --arch sm_90a --sm-count 132 --max-tokens 512 > "$OUT/variants/$i.$cfg.txt" 2>&1 || true
  done
done <<'VARS'
MOEJIT_DECODE_LAUNCH=cooperative
MOEJIT_DECODE_LAUNCH=plain
MOEJIT_DECODE_FC2=split
MOEJIT_DECODE_FC2=sum
MOEJIT_DECODE_FC1=loop
MOEJIT_DECODE_FC1=stream
MOEJIT_DECODE_FC1=grid
MOEJIT_DECODE_COLUMNS=8
MOEJIT_DECODE_COLUMNS=4
MOEJIT_DECODE_INLINE_PAIRS=0
MOEJIT_DECODE_INLINE_PAIRS=128
MOEJIT_DECODE_TILE=w4d2o6
MOEJIT_DECODE_TILE_FC1=w8n1d1o3c4x1 MOEJIT_DECODE_TILE_FC2=w16d1o1p4s2
MOEJIT_BATCH_TILE_FC1=w8n16d3o1m1 MOEJIT_BATCH_TILE_FC2=w8n16d3o1m1
MOEJIT_BATCH_TILE_FC1=w4n4d3o0s2 MOEJIT_BATCH_TILE_FC2=w4n2d2o0
MOEJIT_DECODE_COLUMNS=9
MOEJIT_DECODE_TILE=zz
VARS
{ grep -ohE '[a-z_0-9]+:sm_[0-9a]+:[a-z0-9_]+:[a-z0-9_]+:a16:E[0-9]+:H[0-9]+:I[0-9]+:[a-z0-9]+:b[01]:l[01]:i[012]' "$OUT"/plans/*.txt "$OUT"/variants/*.txt;
  echo 'prepare:sm_90a:mxfp4:silu:a16:E1:H0:I0:w8n1d1o0:b0:l0:i0'; echo 'prepare:sm_120a:mxfp4:silu:a16:E1:H0:I0:w8n1d1o0:b0:l0:i0'; } | sort -u > "$OUT/keys.txt"
wc -l < "$OUT/keys.txt"
while read -r k; do
  env -i PATH="$PATH" HOME=/tmp "$BIN" inspect "$k" --emit source > "$OUT/src/$k.cu" 2>&1 || true
done < "$OUT/keys.txt"
(cd "$OUT" && cat plans/*.txt | sha256sum | cut -c1-16 > plans.sha; cat $(ls src/* | sort) | sha256sum | cut -c1-16 > src.sha; cat variants/* | sha256sum | cut -c1-16 > variants.sha)
echo plans $(cat "$OUT/plans.sha") src $(cat "$OUT/src.sha") variants $(cat "$OUT/variants.sha")
