#!/usr/bin/env bash
# Qwen3.8-Flash-Next (qwen4_exp) decode at a long context, 8-bit KV against float32 KV, interleaved
# (docs/kv-cache.md, "Qwen3.8-Flash-Next"). On the synthetic release geometry cut to LAYERS decoder
# layers (default 4: three Gated DeltaNet layers and one attention layer with its QSA indexer), each
# round runs `nvmai-run bench --fill-context CONTEXT` once per width, the order alternating round by
# round, after an untimed run of each width. It prints per run the decode tok/s and the attention
# phase (attn_heads: the indexer, the gather of the selected keys, attention) per token, then per
# context the float32 ÷ 8-bit ratio of each round's decode time (above 1: 8-bit faster).
#
# --fill-context writes synthetic K/V rows and indexer keys instead of prefilling: it measures the
# attention cost of a long context, not output quality. Expert reads go through the page cache
# (NVMAI_BOUNDED_IO=0) so that decode measures compute rather than the disk.
#
# usage: scripts/kv-bench-qwen38.sh [WORK_DIR]     (default /tmp/kv-bench-qwen38; the install is written
#                                                  there, ~6.8 GiB on disk for 4 layers, unless present)
#        ROUNDS=3 CONTEXTS="32768" TOKENS=8 LAYERS=4 NICE=19 KEEP=1 scripts/kv-bench-qwen38.sh
#        KEEP=1 keeps an install this run wrote (default: it is removed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
export PATH="/usr/local/go/bin:$PATH"
work=${1:-/tmp/kv-bench-qwen38}
rounds=${ROUNDS:-3}
contexts=${CONTEXTS:-32768}
tokens=${TOKENS:-8}
layers=${LAYERS:-4}
prio=${NICE:-19}
model="$work/q38-l$layers"
. scripts/lib/qwen38-install.sh
qwen38_install WORK_DIR "$prio"
export NVMAI_BOUNDED_IO=0

# bench CONTEXT BITS: one benchmark run's JSON report.
bench() {
  nice -n "$prio" "$work/bin/nvmai-run" bench --model "$model" --fill-context "$1" --kv-bits "$2" \
    --tokens "$tokens" --prompt-tokens 16 --skip-bandwidth --json 2>/dev/null
}

printf '%-8s %-5s %-6s %10s %14s\n' context kv round 'decode/s' 'attn ms/token'
for ctx in $contexts; do
  for bits in 8 32; do bench "$ctx" "$bits" >/dev/null; done
  ratios=()
  for r in $(seq 1 "$rounds"); do
    widths="8 32"
    [ $((r % 2)) = 0 ] && widths="32 8"
    declare -A rate=()
    for bits in $widths; do
      json=$(bench "$ctx" "$bits")
      rate[$bits]=$(jq -r '.median.decode_tok_s' <<<"$json")
      jq -r --arg ctx "$ctx" --arg bits "$bits" --arg r "$r" '(.phases[] | select(.name == "attn_heads")) as $a
        | [$ctx, "kv" + $bits, $r, (.median.decode_tok_s * 1000 | round / 1000), ($a.seconds_per_token * 1e5 | round / 100)]
        | @tsv' <<<"$json" | awk -F'\t' '{ printf "%-8s %-5s %-6s %10s %14s\n", $1, $2, $3, $4, $5 }'
    done
    ratios+=("$(awk -v a="${rate[8]}" -v b="${rate[32]}" 'BEGIN { printf "%.3f", a / b }')")
  done
  echo "context $ctx: float32 ÷ 8-bit decode time per round: ${ratios[*]} (above 1: 8-bit faster)"
done
