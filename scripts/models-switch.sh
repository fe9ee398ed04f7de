#!/usr/bin/env bash
# Model switching with `nvmai-run serve --models-dir`: the server's RSS and each request's time
# while it moves between two synthetic installs, one at a time in memory. Steps: start (nothing
# loaded), a request for A (first load: full sha256 check + load), B (unload A, first load of B),
# A again (the sha256 check remembered: load only), then --idle-unload lets A go.
#
# The installs are built with `nvmai-convert synth` when absent (4-layer cuts of real shapes):
#   A = qwen3.5-35b-a3b 4-bit (2.8 GiB: resident 1.1 GiB, experts 4 × 432 MiB; --ram-budget 1G)
#   B = qwen3.5-9b 4-bit (2.5 GiB, dense: all resident)
#
# usage: scripts/models-switch.sh [MODELS_DIR]      (default /tmp/nvmai-models-switch; PORT=18777)
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
export PATH="/usr/local/go/bin:$PATH"
dir=${1:-/tmp/nvmai-models-switch}
port=${PORT:-18777}
go build -o bin/ ./cmd/nvmai-run ./cmd/nvmai-convert
mkdir -p "$dir"
[ -f "$dir/a-35b/manifest.json" ] || bin/nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --layers 4 --output "$dir/a-35b" --quiet
[ -f "$dir/b-9b/manifest.json" ] || bin/nvmai-convert synth --geometry qwen3.5-9b --bits 4 --layers 4 --output "$dir/b-9b" --quiet

log=$(mktemp)
bin/nvmai-run serve --models-dir "$dir" --port "$port" --ram-budget 1G --max-context 4096 --idle-unload 3s >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
until curl -sf "localhost:$port/health" >/dev/null; do sleep 0.2; done

rss() { awk '/VmRSS/ {printf "%.0f MiB", $2/1024}' "/proc/$pid/status"; }
step() { # model label
  local t0 t1
  t0=$(date +%s.%N)
  curl -sf "localhost:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$1\",\"prompt\":\"hello world\",\"max_tokens\":4,\"temperature\":0}" >/dev/null
  t1=$(date +%s.%N)
  printf '| %s | %s | %.2f s |\n' "$2" "$(rss)" "$(echo "$t1 - $t0" | bc)"
}
echo "| step | server RSS after | request time |"
echo "|---|---|---|"
printf '| started, nothing loaded | %s | |\n' "$(rss)"
step a-35b "A (first load)"
step b-9b "B (A unloaded, first load)"
step a-35b "A again (hash remembered)"
step a-35b "A, loaded"
sleep 5
printf '| 5 s idle (--idle-unload 3s) | %s | |\n' "$(rss)"
echo
grep -E "loaded in|unloaded|match their receipt" "$log" | sed 's/^/    /'
