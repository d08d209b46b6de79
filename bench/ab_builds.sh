#!/usr/bin/env bash
# Compares moejit builds in one run, as docs/perf-log.md compares variants: the builds take turns
# (round 1: A B C..., round 2: A B C...), so clock and thermal drift hit all of them alike. Prints each
# round's times (the bench's "time" column, µs) and, per M, every build's median over the rounds and its
# ratio to the first build's.
# usage: bench/ab_builds.sh CONFIG TOKENS ROUNDS BINARY...   (e.g. gpt-oss-120b 1,2,4 2 old/moejit new/moejit)
# Environment overrides (MOEJIT_DECODE_TILE_FC1, ...) apply to every build alike.
set -u
if [ $# -lt 4 ]; then
  echo "usage: $0 CONFIG TOKENS ROUNDS BINARY..." >&2
  exit 2
fi
config=$1 tokens=$2 rounds=$3
shift 3
results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for b in "$@"; do
    rows=$("$b" bench --config "$config" --tokens "$tokens" --replays 30 2>/dev/null | awk '/^ +M +time/ {on = 1; next} on && /^ +[0-9]+ +[0-9.]+/ {print $1, $2}')
    if [ -z "$rows" ]; then
      echo "$b: bench printed no rows (round $r)" >&2
      continue
    fi
    echo "round $r $b: $(echo "$rows" | awk '{printf "M=%s %s  ", $1, $2}')"
    echo "$rows" | awk -v b="$b" '{print b, $1, $2}' >> "$results"
  done
done
echo "== $config, medians over $rounds rounds (µs), ratio to $1"
awk -v first="$1" '
  { t[$1 " " $2] = t[$1 " " $2] " " $3; if (!($2 in seen_m)) { seen_m[$2] = 1; ms[++nm] = $2 }
    if (!($1 in seen_b)) { seen_b[$1] = 1; bs[++nb] = $1 } }
  function median(list,   a, n, i, j, x) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]; a[j + 1] = x }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    for (i = 1; i <= nm; i++) {
      m = ms[i]; base = ((first " " m) in t) ? median(t[first " " m]) : 0; line = sprintf("M=%-4s", m)
      for (j = 1; j <= nb; j++) {
        if (!((bs[j] " " m) in t)) { line = line sprintf("  %s -", bs[j]); continue }
        v = median(t[bs[j] " " m])
        line = line (base > 0 ? sprintf("  %s %.1f (%.3f)", bs[j], v, v / base) : sprintf("  %s %.1f", bs[j], v))
      }
      print line
    }
  }' "$results"
