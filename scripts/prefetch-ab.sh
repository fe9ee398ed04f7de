#!/usr/bin/env bash
# Measures read-ahead (--prefetch) against none on one install, in alternating runs so that a
# drifting disk or a busy host hits both alike: each round runs `nvmai-run bench` with --prefetch 0
# and then with the default, and prints both medians' decode tok/s, hit rate and I/O wait per token;
# the last line is the mean of each and their ratio.
#
#   scripts/prefetch-ab.sh --model DIR [--ram-budget 8G] [--rounds 3] [--tokens 64] [--threads 2]
#
# The install must not fit its budget (read-ahead is off when every expert has a slot), e.g. the
# 40-layer synthetic install of scripts/bench.sh under 8G.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" # go.mod pins the toolchain; images whose go.env says "local" would refuse it

model="" budget=8G rounds=3 tokens=64 threads=2
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --ram-budget) budget=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "prefetch-ab.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "$model" ] || { echo "prefetch-ab.sh: --model DIR is required" >&2; exit 2; }
go build -o bin/ ./cmd/nvmai-run

kv() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"; }
sum_off=0 sum_on=0
for r in $(seq "$rounds"); do
  for pf in 0 default; do
    flag=(--prefetch 0)
    [ "$pf" = default ] && flag=()
    line=$(bin/nvmai-run bench --model "$model" --ram-budget "$budget" --threads "$threads" --tokens "$tokens" \
      --warmup 64 --skip-bandwidth --kv "${flag[@]}")
    d=$(kv decode_tok_s "$line")
    printf 'round %d  read-ahead %-7s %6.2f tok/s  hit %5.1f%%  I/O wait %5.1f ms/token  guesses %s/token, %s used\n' \
      "$r" "$pf" "$d" "$(awk -v h="$(kv hit "$line")" 'BEGIN { print 100*h }')" "$(kv io_wait_ms "$line")" \
      "$(kv guesses_tok "$line")" "$(kv guesses_used "$line")"
    if [ "$pf" = 0 ]; then sum_off=$(awk -v a="$sum_off" -v b="$d" 'BEGIN { print a+b }'); else sum_on=$(awk -v a="$sum_on" -v b="$d" 'BEGIN { print a+b }'); fi
  done
done
awk -v a="$sum_off" -v b="$sum_on" -v n="$rounds" 'BEGIN { printf "mean decode: off %.2f tok/s, on %.2f tok/s, on/off %.3f\n", a/n, b/n, b/a }'
