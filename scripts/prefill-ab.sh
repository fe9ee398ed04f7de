#!/usr/bin/env bash
# Measures prefill in alternating runs of two arms on one install, so that a drifting disk or a busy
# host hits both alike (docs/prefill.md). Each round runs `nvmai-run bench` on one prompt of N
# pseudo-random token ids (fixed seed; random ids route like real text on a synthetic install, and
# unlike a repeated prompt reach every expert) once per arm, and prints the prefill rate, pass
# length, expert bytes read (and the warm reads among them, used), I/O wait, the disk- and
# compute-bound rates of the same run, and the decode rate; the last line is the mean of each arm
# and their ratio (B / A). The arms (--arms):
#
#   chunk  A: --prefill-chunk 256 (the old passes)  B: the default (long passes when experts stream)
#   warm   A: --warm-reads=false                    B: the default (warm reads on)
#   kv     A: --kv-bits 32 --force (float32 KV)     B: the default (8-bit KV); --force because a
#          float32 KV of the native context does not fit a 24 GiB machine's footprint check (the
#          cache grows with use, so a 4,096-token prompt fits); with --tokens 32, whether the
#          KV width moves decode after a long prompt
#   bin    A: the binary --base-bin PATH (e.g. built from main)  B: this tree's; compare decode
#          too with --tokens 64. --base-model DIR gives arm A its own install, for a binary whose
#          install format differs (the build from before issue #17 needs an install made by its
#          own nvmai-convert)
#
#   scripts/prefill-ab.sh --model DIR [--ram-budget 2G] [--prompt-tokens 1024] [--rounds 2] [--threads 2]
#                         [--arms chunk|warm|kv|bin] [--base-bin PATH] [--base-model DIR] [--tokens 2] [--prefill-chunk N]
#                         [--warmup N] [--drop-caches]
#
# Rounds alternate the arms' order (A B, then B A, ...), so neither arm always runs right after
# the other. --drop-caches (root only) syncs and drops the page cache before every run: a run
# that follows one which read hundreds of GiB otherwise inherits its page cache and disk state,
# which on the dev VM halved the decode after an 8-bit prefill (docs/prefill.md).
#
# --prefill-chunk N (arms warm, kv and bin) gives both arms passes of N tokens, e.g. long passes on an
# install that fits its budget, to compare compute alone; --warmup N (bench --warmup) first
# prefills N tokens in a throwaway session, so that on such an install the measured prefill
# reads nothing and touches no fresh memory.
#
# The install must not fit its budget (otherwise both arms prefill in 256-token passes), e.g. the
# 12-layer 4-bit synthetic 35B-A3B install under 2G:
#   bin/nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --layers 12 --output /tmp/s12
#   scripts/prefill-ab.sh --model /tmp/s12 --ram-budget 2G --prompt-tokens 1024
#   scripts/prefill-ab.sh --model /tmp/s12 --ram-budget 2G --prompt-tokens 4096 --arms warm --rounds 3
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" # go.mod pins the toolchain; images whose go.env says "local" would refuse it

model="" base_model="" budget=2G tokens=1024 rounds=2 threads=2 arms=chunk base="" gen=2 chunk="" warmup=0 drop=0
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --ram-budget) budget=$2; shift 2 ;;
    --prompt-tokens) tokens=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --arms) arms=$2; shift 2 ;;
    --base-bin) base=$2; shift 2 ;;
    --base-model) base_model=$2; shift 2 ;;
    --tokens) gen=$2; shift 2 ;;
    --prefill-chunk) chunk=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --drop-caches) drop=1; shift ;;
    *) echo "prefill-ab.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ -n "$model" ] || { echo "prefill-ab.sh: --model DIR is required" >&2; exit 2; }
[ -z "$chunk" ] || [ "$arms" != chunk ] || { echo "prefill-ab.sh: --prefill-chunk fixes both arms' passes; use it with --arms warm, kv or bin" >&2; exit 2; }
case $arms in
  chunk) names=(256 long) ;;
  warm) names=(nowarm warm) ;;
  kv) names=(kv32 kv8) ;;
  bin) names=(base this); [ -x "$base" ] || { echo "prefill-ab.sh: --arms bin needs --base-bin PATH, an nvmai-run binary" >&2; exit 2; } ;;
  *) echo "prefill-ab.sh: --arms $arms: use chunk, warm, kv or bin" >&2; exit 2 ;;
esac
[ "$drop" = 0 ] || [ -w /proc/sys/vm/drop_caches ] || { echo "prefill-ab.sh: --drop-caches needs root (it writes /proc/sys/vm/drop_caches)" >&2; exit 2; }
go build -o bin/ ./cmd/nvmai-run

ids=$(awk -v n="$tokens" 'BEGIN { srand(1); for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), 10 + int(rand() * 3990) }')
kv() { tr ' ' '\n' <<<"$2" | sed -n "s/^$1=//p"; }
sum_a=0 sum_b=0 dec_a=0 dec_b=0
for r in $(seq "$rounds"); do
  order=("${names[@]}")
  [ $((r % 2)) = 1 ] || order=("${names[1]}" "${names[0]}")
  for arm in "${order[@]}"; do
    if [ "$drop" = 1 ]; then sync; echo 3 >/proc/sys/vm/drop_caches; fi
    bin=bin/nvmai-run flag=() dir=$model
    [ -z "$chunk" ] || flag=(--prefill-chunk "$chunk")
    case $arm in
      256) flag=(--prefill-chunk 256) ;;
      nowarm) flag+=(--warm-reads=false) ;;
      kv32) flag+=(--kv-bits 32 --force) ;;
      base) bin=$base dir=${base_model:-$model} ;;
    esac
    line=$("$bin" bench --model "$dir" --ram-budget "$budget" --threads "$threads" --tokens "$gen" --warmup "$warmup" \
      --prompt-ids "$ids" --quiet --kv "${flag[@]}")
    p=$(kv prefill_tok_s "$line") d=$(kv decode_tok_s "$line")
    printf 'round %d  %-6s (passes of %5s) prefill %6.2f tok/s  read %6s GiB (%5s MiB/token, warm %4s GiB, %4s used)  I/O wait %6ss  disk-bound %7s tok/s  compute-bound %6s tok/s  binds: %s  decode %6.2f tok/s\n' \
      "$r" "$arm" "$(kv pf_chunk "$line")" "$p" "$(kv pf_read_gib "$line")" "$(kv pf_read_mib_tok "$line")" \
      "$(kv pf_warm_gib "$line")" "$(kv pf_warm_used_gib "$line")" \
      "$(kv pf_wait_s "$line")" "$(kv pf_disk_tok_s "$line")" "$(kv pf_compute_tok_s "$line")" "$(kv pf_binding "$line")" "${d:-0}"
    if [ "$arm" = "${names[0]}" ]; then
      sum_a=$(awk -v a="$sum_a" -v b="$p" 'BEGIN { print a+b }') dec_a=$(awk -v a="$dec_a" -v b="${d:-0}" 'BEGIN { print a+b }')
    else
      sum_b=$(awk -v a="$sum_b" -v b="$p" 'BEGIN { print a+b }') dec_b=$(awk -v a="$dec_b" -v b="${d:-0}" 'BEGIN { print a+b }')
    fi
  done
done
awk -v a="$sum_a" -v b="$sum_b" -v da="$dec_a" -v db="$dec_b" -v n="$rounds" -v t="$tokens" -v na="${names[0]}" -v nb="${names[1]}" \
  'BEGIN { printf "mean prefill of %d tokens: %s %.2f tok/s, %s %.2f tok/s, %s/%s %.2f; decode %s %.2f tok/s, %s %.2f tok/s\n", t, na, a/n, nb, b/n, nb, na, b/a, na, da/n, nb, db/n }'
