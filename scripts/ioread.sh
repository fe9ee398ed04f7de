#!/usr/bin/env bash
# Expert read rate of nvmai-run against the disk's raw direct-read rate, measured in the same run
# on a full-size synthetic install. In order, each step after dropping the expert files from the
# page cache (fsync + FADV_DONTNEED, so no step is a page-cache hit):
#   1. dd iflag=direct bs=1M over one expert file: the disk's sequential direct-read rate;
#   2. raw O_DIRECT reads of whole expert records (one stride each) in a random order across every
#      expert file, IO_THREADS in flight: the expert cache's access pattern with no model around it;
#   3. nvmai-run with a budget near the minimum (BUDGET, default 64M), so nearly every expert
#      request misses: read rate = bytes_read / read_s of its --json;
#   4. step 2 again, to bracket drift of a shared disk.
# The ratio printed is nvmai's rate over the mean of the two raw random-read runs (and over dd).
# A VM disk may still be cached by its host; the guest page cache is not involved in any step.
#
# usage: scripts/ioread.sh [INSTALL_DIR]      (default /work/synth/35b-4bit-l4)
#        BUDGET=64M IO_THREADS=4 TOKENS=32 scripts/ioread.sh DIR
# shellcheck disable=SC2154 # resident_bytes, kv_bytes, expert_* … come from eval "$(footprint info DIR)"
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" # go.mod pins the toolchain; images whose go.env says "local" would refuse it
export PATH="/usr/local/go/bin:$PATH"
install=${1:-/work/synth/35b-4bit-l4}
budget=${BUDGET:-64M}
io_threads=${IO_THREADS:-4}
tokens=${TOKENS:-32}

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

gbs() { awk -v r="$1" 'BEGIN { printf "%.2f GB/s", r / 1e9 }'; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; } # from "bytes=… seconds=… rate=…"

echo "== $install: ${#files[@]} expert files, $(awk -v b="$expert_bytes" 'BEGIN { printf "%.0f", b / 1048576 }') MiB, stride $expert_stride bytes"
echo "   $(nproc) cores; disk: $(df --output=source "$install" | tail -1) ($(findmnt -n -o FSTYPE --target "$install" 2>/dev/null || stat -f -c %T "$install"))"

"$tool" drop "${files[@]}"
dd_out=$(dd if="${files[0]}" of=/dev/null iflag=direct bs=1M 2>&1 | tail -1)
dd_rate=$(awk '{ for (i = 1; i < NF; i++) if ($(i + 1) ~ /^s,?$/) s = $i; print $1 / s }' <<<"$dd_out")
printf '%-62s %s\n' "1. dd iflag=direct bs=1M, ${files[0]##*/}:" "$(gbs "$dd_rate")"

raw() {
  "$tool" drop "${files[@]}"
  "$tool" directread -size "$expert_stride" -inflight "$io_threads" -seed "$1" "${files[@]}"
}
raw1=$(raw 1)
printf '%-62s %s\n' "2. O_DIRECT, ${expert_stride}-byte records, random, $io_threads in flight:" "$(gbs "$(field rate <<<"$raw1")") ($(field bytes <<<"$raw1") bytes in $(field seconds <<<"$raw1") s)"

"$tool" drop "${files[@]}"
words=(the quick brown fox jumps over a lazy dog while seven wizards quietly hex one jovial sphinx)
for i in $(seq 0 39); do printf '%s ' "${words[$((i * 5 % ${#words[@]}))]}"; done >"$tmp/prompt.txt"
bin/nvmai-run --model "$install" --prompt-file "$tmp/prompt.txt" --ram-budget "$budget" --io-threads "$io_threads" \
  --max-tokens "$tokens" --temperature 0 --ignore-eos --json >"$tmp/run.json"
read -r nv_bytes nv_secs nv_mode nv_hit nv_wait < <(jq -r '.experts | "\(.bytes_read) \(.read_s) \(.io_mode) \(.hit_rate) \(.io_wait_s)"' "$tmp/run.json")
nv_rate=$(awk -v b="$nv_bytes" -v s="$nv_secs" 'BEGIN { print b / s }')
printf '%-62s %s\n' "3. nvmai-run --ram-budget $budget --io-threads $io_threads ($nv_mode reads):" "$(gbs "$nv_rate") ($nv_bytes bytes in $(printf %.3f "$nv_secs") s of reading; hit rate $(printf %.3f "$nv_hit"), compute waited $(printf %.2f "$nv_wait") s)"

raw2=$(raw 2)
printf '%-62s %s\n' "4. O_DIRECT, random records again:" "$(gbs "$(field rate <<<"$raw2")")"
"$tool" drop "${files[@]}"

raw_mean=$(awk -v a="$(field rate <<<"$raw1")" -v b="$(field rate <<<"$raw2")" 'BEGIN { print (a + b) / 2 }')
awk -v n="$nv_rate" -v r="$raw_mean" -v d="$dd_rate" \
  'BEGIN { printf "nvmai expert reads: %.2f GB/s = %.0f%% of raw random direct reads (%.2f GB/s, mean of 2 and 4), %.0f%% of dd (%.2f GB/s)\n", n / 1e9, 100 * n / r, r / 1e9, 100 * n / d, d / 1e9 }'
