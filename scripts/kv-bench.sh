#!/usr/bin/env bash
# KV cache widths: memory at a long context and decode speed as the context grows, 8-bit against
# 32-bit (float32, the reference), with runs of the two interleaved so a noisy machine moves both.
#
#   memory: peak RSS of nvmai-run bench with the KV filled to MEM_CONTEXT tokens (default 262,144)
#           on the 4-layer 35B-A3B synthetic (one full-attention layer), per width; the KV figures
#           per layer and projected to the 40-layer model (10 full-attention layers) come from the
#           footprint line nvmai-run prints at start (runtime.ComputeFootprint).
#   kernel: one KV head's decode attention (8 query heads of 256) over 4k, 32k and 128k positions
#           per width, the widths interleaved round by round (TestAttendKVSpeed): fastest and median.
#   speed:  decode tok/s and the attention phase (attn_heads: norms, RoPE, scores, softmax, values)
#           per decode step after CONTEXTS (default 4096 32768 131072) tokens on the 12-layer
#           35B-A3B synthetic (three full-attention layers), ROUNDS times per width.
#
# --fill-context writes synthetic K/V rows instead of prefilling: it measures the memory and the
# attention cost of a long context, not output quality (docs/kv-cache.md). Expert reads go through
# the page cache (NVMAI_BOUNDED_IO=0) so that, once the first run has read the expert files, decode
# measures compute rather than the disk.
#
# usage: scripts/kv-bench.sh [WORK_DIR]            (default /tmp/kv-bench; installs built there if absent)
#        ROUNDS=3 CONTEXTS="4096 32768" MEM_CONTEXT=262144 TOKENS=8 scripts/kv-bench.sh
#        NICE=-10 ...   runs the benchmarks at that priority (default 10); on a machine shared with
#                       builds, a negative value gives the measured runs the CPU (needs root).
#        WARMUP=0 ...   skips the untimed run of each width before a context's rounds (default 1:
#                       the first run after another context reads its expert pages and allocates anew).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
export PATH="/usr/local/go/bin:$PATH"
work=${1:-/tmp/kv-bench}
rounds=${ROUNDS:-2}
contexts=${CONTEXTS:-"4096 32768 131072"}
mem_context=${MEM_CONTEXT:-262144}
tokens=${TOKENS:-8}
mkdir -p "$work/bin"
go build -o "$work/bin/" ./cmd/nvmai-run ./cmd/nvmai-convert
run="nice -n ${NICE:-10} $work/bin/nvmai-run"
for layers in 4 12; do
  if [ ! -f "$work/35b-l$layers/manifest.json" ]; then
    echo "== building $work/35b-l$layers (synthetic qwen3.5-35b-a3b, 4-bit, $layers layers)"
    nice -n 10 "$work/bin/nvmai-convert" synth --geometry qwen3.5-35b-a3b --bits 4 --layers "$layers" --output "$work/35b-l$layers" --quiet
  fi
done
export NVMAI_BOUNDED_IO=0

# bench MODEL CONTEXT BITS: one benchmark run; prints its JSON report to stdout, the footprint line to $work/footprint.
bench() {
  $run bench --model "$1" --fill-context "$2" --kv-bits "$3" --tokens "$tokens" --prompt-tokens 16 --skip-bandwidth --json 2>"$work/footprint"
}

echo "== kernel: one KV head's attention, interleaved rounds"
NVMAI_KV_SPEED=1 nice -n 10 go test -count=1 -run TestAttendKVSpeed -v ./pkg/kernels | grep '^n='

echo "== memory: $mem_context-token context, 4-layer synthetic (1 full-attention layer)"
for bits in ${MEM_WIDTHS:-32 8}; do
  json=$(bench "$work/35b-l4" "$mem_context" "$bits")
  kv=$(sed -n 's/.* KV \([^(]*\) (.*/\1/p' "$work/footprint")
  echo "kv$bits: peak RSS $(jq -r '.runs | map(.peak_rss_bytes) | max / 1048576 | floor' <<<"$json") MiB; KV per full-attention layer $kv; $(head -1 "$work/footprint")"
done

echo "== speed: 12-layer synthetic (3 full-attention layers), $tokens decoded tokens per prompt, median of 3 prompts"
printf '%-8s %-5s %-6s %10s %14s %10s\n' context kv round 'decode/s' 'attn ms/token' 'attn share'
for ctx in $contexts; do
  if [ "${WARMUP:-1}" != 0 ]; then
    for bits in 8 32; do bench "$work/35b-l12" "$ctx" "$bits" >/dev/null; done
  fi
  for r in $(seq 1 "$rounds"); do
    widths="8 32"
    [ $((r % 2)) = 0 ] && widths="32 8" # alternate which width goes first
    for bits in $widths; do
      json=$(bench "$work/35b-l12" "$ctx" "$bits")
      jq -r --arg ctx "$ctx" --arg bits "$bits" --arg r "$r" '(.phases[] | select(.name == "attn_heads")) as $a
        | [$ctx, "kv" + $bits, $r, (.median.decode_tok_s * 1000 | round / 1000), ($a.seconds_per_token * 1e5 | round / 100), (($a.share * 1000 | round) / 10 | tostring) + "%"]
        | @tsv' <<<"$json" | awk -F'\t' '{ printf "%-8s %-5s %-6s %10s %14s %10s\n", $1, $2, $3, $4, $5, $6 }'
    done
  done
done
