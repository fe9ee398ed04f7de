#!/usr/bin/env bash
# Measures prefill in today's 256-token passes against the long passes nvmai picks when the experts
# do not all fit the budget (docs/prefill.md), in alternating runs on one install so that a drifting
# disk or a busy host hits both alike. Each round runs `nvmai-run bench` on one prompt of N
# pseudo-random token ids (fixed seed; random ids route like real text on a synthetic install, and
# unlike a repeated prompt reach every expert) with --prefill-chunk 256 and then with the default,
# and prints the prefill rate, pass length, expert bytes read, I/O wait, and the disk- and
# compute-bound rates of the same run; the last line is the mean of each and their ratio.
#
#   scripts/prefill-ab.sh --model DIR [--ram-budget 2G] [--prompt-tokens 1024] [--rounds 2] [--threads 2]
#
# The install must not fit its budget (otherwise both arms prefill in 256-token passes), e.g. the
# 12-layer 4-bit synthetic 35B-A3B install under 2G:
#   bin/nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --layers 12 --output /tmp/s12
#   scripts/prefill-ab.sh --model /tmp/s12 --ram-budget 2G --prompt-tokens 1024
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" # go.mod pins the toolchain; images whose go.env says "local" would refuse it

model="" budget=2G tokens=1024 rounds=2 threads=2
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --ram-budget) budget=$2; shift 2 ;;
    --prompt-tokens) tokens=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "prefill-ab.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "$model" ] || { echo "prefill-ab.sh: --model DIR is required" >&2; exit 2; }
go build -o bin/ ./cmd/nvmai-run

ids=$(awk -v n="$tokens" 'BEGIN { srand(1); for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), 10 + int(rand() * 3990) }')
kv() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"; }
sum_old=0 sum_new=0
for r in $(seq "$rounds"); do
  for arm in 256 long; do
    flag=(--prefill-chunk 256)
    [ "$arm" = long ] && flag=()
    line=$(bin/nvmai-run bench --model "$model" --ram-budget "$budget" --threads "$threads" --tokens 2 \
      --prompt-ids "$ids" --quiet --kv "${flag[@]}")
    p=$(kv prefill_tok_s "$line")
    printf 'round %d  passes %-4s (%5s tokens) prefill %6.2f tok/s  read %6s GiB (%5s MiB/token)  I/O wait %6ss  disk-bound %7s tok/s  compute-bound %6s tok/s  binds: %s\n' \
      "$r" "$arm" "$(kv pf_chunk "$line")" "$p" "$(kv pf_read_gib "$line")" "$(kv pf_read_mib_tok "$line")" \
      "$(kv pf_wait_s "$line")" "$(kv pf_disk_tok_s "$line")" "$(kv pf_compute_tok_s "$line")" "$(kv pf_binding "$line")"
    if [ "$arm" = 256 ]; then sum_old=$(awk -v a="$sum_old" -v b="$p" 'BEGIN { print a+b }'); else sum_new=$(awk -v a="$sum_new" -v b="$p" 'BEGIN { print a+b }'); fi
  done
done
awk -v a="$sum_old" -v b="$sum_new" -v n="$rounds" -v t="$tokens" \
  'BEGIN { printf "mean prefill of %d tokens: 256-token passes %.2f tok/s, long passes %.2f tok/s, long/256 %.2f\n", t, a/n, b/n, b/a }'
