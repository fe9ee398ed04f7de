#!/usr/bin/env bash
# Footprint of nvmai-run on a full-width synthetic install. For each expert budget it runs one
# generation (a prompt long enough to fill a 256-token prefill chunk, then TOKENS decoded tokens)
# and prints, per run: resident bytes (resident.bin, mapped), the budget the slots take, KV (the
# session state nvmai-run allocates: 8192 tokens of K/V per full-attention layer plus the Gated
# DeltaNet state), the predicted footprint resident + budget + KV + OVERHEAD, the measured peak
# RSS (peak_rss_bytes of --json, = VmHWM), the largest anonymous and file-backed RSS seen
# (sampled every 20 ms), and the expert files' page cache before and after the run. The expert
# files are dropped from the page cache (fsync + FADV_DONTNEED) before every run. A last run with
# NVMAI_BOUNDED_IO=0 at the first budget shows what buffered reads do to the page cache (BUFFERED=0
# skips it).
#
# The install is built with `nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --layers 4`
# when absent (2.8 GiB; experts 4 × 432 MiB).
#
# usage: scripts/footprint.sh [INSTALL_DIR]      (default /work/synth/35b-4bit-l4)
#        BUDGETS="128M 512M 2G" TOKENS=16 BUFFERED=1 OVERHEAD_MIB=160 scripts/footprint.sh
# shellcheck disable=SC2154 # resident_bytes, kv_bytes, expert_* … come from eval "$(footprint info DIR)"
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" # go.mod pins the toolchain; images whose go.env says "local" would refuse it
export PATH="/usr/local/go/bin:$PATH"
install=${1:-/work/synth/35b-4bit-l4}
budgets=${BUDGETS:-"128M 512M 2G"}
tokens=${TOKENS:-16}
buffered=${BUFFERED:-1} # 0 skips the NVMAI_BOUNDED_IO=0 run, which fills the page cache with every expert read
# The documented fixed overhead (docs/streaming.md "Footprint"; footprintOverhead in
# pkg/runtime/footprint_test.go): Go runtime and binary, tokenizer, forward scratch, GC headroom.
# Keep the two equal.
overhead_mib=${OVERHEAD_MIB:-160}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o bin/ ./cmd/nvmai-run ./cmd/nvmai-convert
go build -o "$tmp/footprint" ./scripts/internal/footprint
tool="$tmp/footprint"

if [ ! -f "$install/manifest.json" ]; then
  echo "== building $install (synthetic qwen3.5-35b-a3b, 4-bit, 4 layers)"
  bin/nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --layers 4 --output "$install" --quiet
fi
eval "$("$tool" info "$install")"
read -r -a files <<<"$expert_files"
# The part of resident.bin the runtime copies into huge-page memory (anonymous): all but a leading
# embedding table when the install has its own lm_head (pkg/runtime coldResidentEnd).
copy_bytes=$(jq --argjson size "$resident_bytes" '(.tensors | map({(.name): .}) | add) as $t
  | $t["model.embed_tokens.weight"] as $e
  | if $e != null and $e.offset == 0 and $t["lm_head.weight"] != null then
      ([$e.offset + $e.length, ($e.scales // {offset: 0, length: 0} | .offset + .length),
        ($e.biases // {offset: 0, length: 0} | .offset + .length)] | max) as $cold
      | $size - ($cold - ($cold % 4096))
    else $size end' "$install/manifest.json")
[ "${NVMAI_HUGEPAGES:-1}" = 0 ] && copy_bytes=0

# About 270 tokens with the synthetic installs' byte-level tokenizer: one full 256-token chunk.
words=(the quick brown fox jumps over a lazy dog while seven wizards quietly hex one jovial sphinx)
for i in $(seq 0 119); do printf '%s ' "${words[$((i * 7 % ${#words[@]}))]}"; done >"$tmp/prompt.txt"

mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

echo "== $install: resident.bin $(mib "$resident_bytes") MiB, experts ${expert_layers} × $(mib $((expert_count * expert_stride))) MiB (stride $(mib "$expert_stride") MiB, top-$top_k), KV $(mib "$kv_bytes") MiB, overhead ${overhead_mib} MiB"
echo "   sizes in MiB; $(nproc) cores, $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM; nvmai-run --prompt-file (≈270 tokens) --max-tokens $tokens --temperature 0 --ignore-eos --json"
printf '\n| %-8s | %-6s | %5s | %8s | %8s | %6s | %9s | %8s | %8s | %12s | %8s | %11s | %16s | %8s |\n' \
  "reads" "budget" "slots" "slot MiB" "resident" "KV" "predicted" "peak RSS" "max anon" "anon − slots − copy" "max file" "pred − peak" "expert page cache" "read MiB"
echo "|----------|--------|------:|---------:|---------:|-------:|----------:|---------:|---------:|-------------:|---------:|------------:|-----------------:|---------:|"

run() { # $1 = bounded|buffered, $2 = budget
  local io=1
  [ "$1" = buffered ] && io=0
  "$tool" drop "${files[@]}"
  local before after
  before=$("$tool" cached "${files[@]}")
  NVMAI_BOUNDED_IO=$io "$tool" watch -out "$tmp/watch.json" -- bin/nvmai-run --model "$install" \
    --prompt-file "$tmp/prompt.txt" --ram-budget "$2" --max-tokens "$tokens" --temperature 0 --ignore-eos --json >"$tmp/run.json"
  after=$("$tool" cached "${files[@]}")
  local budget_bytes slots peak read anon file predicted
  budget_bytes=$(jq .experts.budget_bytes "$tmp/run.json")
  slots=$(jq .experts.slots_per_layer "$tmp/run.json")
  peak=$(jq .peak_rss_bytes "$tmp/run.json")
  read=$(jq .experts.bytes_read "$tmp/run.json")
  anon=$(jq .max_rss_anon "$tmp/watch.json")
  file=$(jq .max_rss_file "$tmp/watch.json")
  predicted=$((resident_bytes + budget_bytes + kv_bytes + overhead_mib * 1048576))
  printf '| %-8s | %-6s | %5s | %8s | %8s | %6s | %9s | %8s | %8s | %12s | %8s | %11s | %16s | %8s |\n' \
    "$1" "$2" "$slots" "$(mib "$budget_bytes")" "$(mib "$resident_bytes")" "$(mib "$kv_bytes")" "$(mib "$predicted")" \
    "$(mib "$peak")" "$(mib "$anon")" "$(mib $((anon - copy_bytes - (read < budget_bytes ? read : budget_bytes))))" "$(mib "$file")" "$(mib $((predicted - peak)))" "$(mib "$before") → $(mib "$after")" "$(mib "$read")"
  if [ "$peak" -gt "$predicted" ]; then
    echo "FAIL: peak RSS $peak bytes exceeds the predicted footprint $predicted bytes" >&2
    status=1
  fi
  if [ "$1" = bounded ] && [ "$after" -gt $((1 << 20)) ]; then
    echo "FAIL: bounded reads left $after bytes of the expert files in the page cache" >&2
    status=1
  fi
}

status=0
for b in $budgets; do run bounded "$b"; done
[ "$buffered" = 1 ] && run buffered "${budgets%% *}"
"$tool" drop "${files[@]}"
echo
echo "predicted = resident + budget + KV + ${overhead_mib} MiB; peak RSS is VmHWM. resident.bin's embedding table"
echo "stays mapped, so only the rows the run touches count; the rest of it ($(mib "$copy_bytes") MiB) is copied into"
echo "huge-page memory. max anon holds that copy, the slots, KV and Go heap (anon − slots − copy subtracts"
echo "the copy and the slot bytes filled, at most min(budget, read)); max file the binary's text and the"
echo "touched embedding rows."
exit $status
